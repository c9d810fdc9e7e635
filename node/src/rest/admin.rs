//! Cluster, host and policy routes: hosts, cluster status, QOS, accounts,
//! users, partitions and reservations, each one call of the gRPC service.
//! A single object (`GET /v1/qos/{name}`) is picked from the list call, so
//! it gets the same read barrier and forwarding as the list.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::{
    ClusterStatusRequest, DeletePolicyRequest, DeleteReservationRequest, ListAccountsRequest,
    ListHostsRequest, ListPartitionsRequest, ListQosRequest, ListReservationsRequest,
    ListUsersRequest,
};

use super::json::{
    AccountJson, AccountListJson, AdminJson, ClusterJson, HostJson, HostListJson, PartitionJson,
    PartitionListJson, QosJson, QosListJson, ReservationJson, ReservationListJson, UserJson,
    UserListJson,
};
use super::{grpc_request, JsonBody, Name, RestError, RestState};

type St<S> = State<Arc<RestState<S>>>;

/// The object's name: the path's; a body that names one must agree.
fn named(what: &str, path: String, body: &str) -> Result<String, RestError> {
    if body.is_empty() || body == path {
        Ok(path)
    } else {
        Err(RestError::invalid(format!(
            "{what} name {body:?} in the body differs from {path:?} in the path"
        )))
    }
}

fn missing(what: &str, name: &str) -> RestError {
    RestError::not_found(format!("{what} {name} does not exist"))
}

/// `GET /v1/hosts`.
pub async fn hosts<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<HostListJson>, RestError> {
    let answer = st
        .api
        .list_hosts(grpc_request(&headers, ListHostsRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(HostListJson {
        hosts: answer.hosts.into_iter().map(HostJson::from).collect(),
    }))
}

/// `GET /v1/cluster`: the answering node's view of the cluster.
pub async fn cluster<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<ClusterJson>, RestError> {
    let answer = st
        .api
        .cluster_status(grpc_request(&headers, ClusterStatusRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(answer.into()))
}

/// `GET /v1/qos`.
pub async fn list_qos<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<QosListJson>, RestError> {
    let qos = st
        .api
        .list_qos(grpc_request(&headers, ListQosRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner()
        .qos;
    Ok(Json(QosListJson {
        qos: qos.into_iter().map(QosJson::from).collect(),
    }))
}

/// `GET /v1/qos/{name}`.
pub async fn get_qos<S: BerthApi>(
    st: St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<QosJson>, RestError> {
    let Json(list) = list_qos(st, headers).await?;
    list.qos
        .into_iter()
        .find(|q| q.name == name)
        .map(Json)
        .ok_or_else(|| missing("QOS", &name))
}

/// `PUT /v1/qos/{name}`: create or replace.
pub async fn put_qos<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
    JsonBody(mut body): JsonBody<QosJson>,
) -> Result<Json<AdminJson>, RestError> {
    body.name = named("QOS", name, &body.name)?;
    let answer = st
        .api
        .upsert_qos(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `DELETE /v1/qos/{name}`.
pub async fn delete_qos<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<AdminJson>, RestError> {
    let answer = st
        .api
        .delete_qos(grpc_request(&headers, DeletePolicyRequest { name }))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `GET /v1/accounts`.
pub async fn list_accounts<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<AccountListJson>, RestError> {
    let accounts = st
        .api
        .list_accounts(grpc_request(&headers, ListAccountsRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner()
        .accounts;
    Ok(Json(AccountListJson {
        accounts: accounts.into_iter().map(AccountJson::from).collect(),
    }))
}

/// `GET /v1/accounts/{name}`.
pub async fn get_account<S: BerthApi>(
    st: St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<AccountJson>, RestError> {
    let Json(list) = list_accounts(st, headers).await?;
    list.accounts
        .into_iter()
        .find(|a| a.name == name)
        .map(Json)
        .ok_or_else(|| missing("account", &name))
}

/// `PUT /v1/accounts/{name}`: create or replace.
pub async fn put_account<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
    JsonBody(mut body): JsonBody<AccountJson>,
) -> Result<Json<AdminJson>, RestError> {
    body.name = named("account", name, &body.name)?;
    let answer = st
        .api
        .upsert_account(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `DELETE /v1/accounts/{name}`.
pub async fn delete_account<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<AdminJson>, RestError> {
    let answer = st
        .api
        .delete_account(grpc_request(&headers, DeletePolicyRequest { name }))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `GET /v1/users`.
pub async fn list_users<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<UserListJson>, RestError> {
    let users = st
        .api
        .list_users(grpc_request(&headers, ListUsersRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner()
        .users;
    Ok(Json(UserListJson {
        users: users.into_iter().map(UserJson::from).collect(),
    }))
}

/// `GET /v1/users/{name}`.
pub async fn get_user<S: BerthApi>(
    st: St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<UserJson>, RestError> {
    let Json(list) = list_users(st, headers).await?;
    list.users
        .into_iter()
        .find(|u| u.name == name)
        .map(Json)
        .ok_or_else(|| missing("user", &name))
}

/// `PUT /v1/users/{name}`: create or replace. (The gRPC API has no user
/// deletion, so neither has this one.)
pub async fn put_user<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
    JsonBody(mut body): JsonBody<UserJson>,
) -> Result<Json<AdminJson>, RestError> {
    body.name = named("user", name, &body.name)?;
    let answer = st
        .api
        .upsert_user(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `GET /v1/partitions`.
pub async fn list_partitions<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<PartitionListJson>, RestError> {
    let partitions = st
        .api
        .list_partitions(grpc_request(&headers, ListPartitionsRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner()
        .partitions;
    Ok(Json(PartitionListJson {
        partitions: partitions.into_iter().map(PartitionJson::from).collect(),
    }))
}

/// `GET /v1/partitions/{name}`.
pub async fn get_partition<S: BerthApi>(
    st: St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<PartitionJson>, RestError> {
    let Json(list) = list_partitions(st, headers).await?;
    list.partitions
        .into_iter()
        .find(|p| p.name == name)
        .map(Json)
        .ok_or_else(|| missing("partition", &name))
}

/// `PUT /v1/partitions/{name}`: create or replace.
pub async fn put_partition<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
    JsonBody(mut body): JsonBody<PartitionJson>,
) -> Result<Json<AdminJson>, RestError> {
    body.name = named("partition", name, &body.name)?;
    let answer = st
        .api
        .upsert_partition(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `DELETE /v1/partitions/{name}`.
pub async fn delete_partition<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<AdminJson>, RestError> {
    let answer = st
        .api
        .delete_partition(grpc_request(&headers, DeletePolicyRequest { name }))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `GET /v1/reservations`.
pub async fn list_reservations<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
) -> Result<Json<ReservationListJson>, RestError> {
    let reservations = st
        .api
        .list_reservations(grpc_request(&headers, ListReservationsRequest {}))
        .await
        .map_err(|s| st.error(s))?
        .into_inner()
        .reservations;
    Ok(Json(ReservationListJson {
        reservations: reservations
            .into_iter()
            .map(ReservationJson::from)
            .collect(),
    }))
}

/// `GET /v1/reservations/{name}`.
pub async fn get_reservation<S: BerthApi>(
    st: St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<ReservationJson>, RestError> {
    let Json(list) = list_reservations(st, headers).await?;
    list.reservations
        .into_iter()
        .find(|r| r.name == name)
        .map(Json)
        .ok_or_else(|| missing("reservation", &name))
}

/// `PUT /v1/reservations/{name}`: create.
pub async fn put_reservation<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
    JsonBody(mut body): JsonBody<ReservationJson>,
) -> Result<Json<AdminJson>, RestError> {
    body.name = named("reservation", name, &body.name)?;
    let answer = st
        .api
        .create_reservation(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}

/// `DELETE /v1/reservations/{name}`.
pub async fn delete_reservation<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    Name(name): Name,
) -> Result<Json<AdminJson>, RestError> {
    let answer = st
        .api
        .delete_reservation(grpc_request(&headers, DeleteReservationRequest { name }))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(AdminJson {
        log_index: answer.log_index,
    }))
}
