//! The REST/JSON API, served on the node's HTTP listener (`metrics_listen`)
//! beside `/metrics`.
//!
//! Every handler calls the gRPC service's own methods (`BerthApi for
//! ApiService`) with a `tonic::Request`, so forwarding to the leader, read
//! barriers, validation and authorization live in one place and the two
//! APIs cannot drift apart. This module only translates: JSON to proto
//! messages and back (`json`), gRPC statuses to HTTP statuses with a JSON
//! error body, and the routes (`jobs`, `admin`). The routes are described
//! by `openapi.json`, served at `/v1/openapi.json`.

pub mod admin;
pub mod jobs;
pub mod json;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use berth_proto::api::berth_api_server::BerthApi;
use serde::de::DeserializeOwned;
use tonic::{Code, Status};

use crate::api_service::ApiService;
use json::ErrorJson;

/// Largest request body accepted, in bytes. A job spec or a policy object
/// is a few KiB; this leaves room for a large environment.
pub const REST_BODY_BYTES_MAX: usize = 1024 * 1024;

/// The OpenAPI 3.0 description of every route, checked in by hand.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Every (method, path) the router serves; the tests check that each is
/// served, that the router serves no other method on these paths, and
/// that the OpenAPI document lists exactly these.
#[cfg(test)]
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/openapi.json"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("DELETE", "/v1/jobs/{id}"),
    ("PATCH", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/hold"),
    ("POST", "/v1/jobs/{id}/release"),
    ("POST", "/v1/jobs/{id}/requeue"),
    ("POST", "/v1/jobs/{id}/signal"),
    ("GET", "/v1/jobs/{id}/explain"),
    ("GET", "/v1/jobs/{id}/events"),
    ("GET", "/v1/priorities"),
    ("GET", "/v1/hosts"),
    ("GET", "/v1/cluster"),
    ("GET", "/v1/qos"),
    ("GET", "/v1/qos/{name}"),
    ("PUT", "/v1/qos/{name}"),
    ("DELETE", "/v1/qos/{name}"),
    ("GET", "/v1/accounts"),
    ("GET", "/v1/accounts/{name}"),
    ("PUT", "/v1/accounts/{name}"),
    ("DELETE", "/v1/accounts/{name}"),
    ("GET", "/v1/users"),
    ("GET", "/v1/users/{name}"),
    ("PUT", "/v1/users/{name}"),
    ("GET", "/v1/partitions"),
    ("GET", "/v1/partitions/{name}"),
    ("PUT", "/v1/partitions/{name}"),
    ("DELETE", "/v1/partitions/{name}"),
    ("GET", "/v1/reservations"),
    ("GET", "/v1/reservations/{name}"),
    ("PUT", "/v1/reservations/{name}"),
    ("DELETE", "/v1/reservations/{name}"),
];

/// Who this node believes leads: (id, gRPC address).
pub type LeaderHint = Arc<dyn Fn() -> Option<(u64, String)> + Send + Sync>;

/// What every handler gets: the service layer and where the leader is.
pub struct RestState<S> {
    pub api: Arc<S>,
    pub leader: LeaderHint,
}

impl<S> RestState<S> {
    /// A gRPC status as a REST error; UNAVAILABLE also says where the
    /// leader is, when this node knows, so a client can go there.
    pub fn error(&self, status: Status) -> RestError {
        let mut error = RestError::from_status(&status);
        if status.code() == Code::Unavailable {
            error.leader = (self.leader)();
        }
        error
    }
}

type AppState<S> = Arc<RestState<S>>;

/// The REST routes over berthd's own service layer.
pub fn for_node(api: Arc<ApiService>) -> Router {
    let node = api.node.clone();
    router(api, Arc::new(move || node.leader()))
}

/// The REST routes over any implementation of the service (the tests use
/// a fake one).
pub fn router<S: BerthApi>(api: Arc<S>, leader: LeaderHint) -> Router {
    let state: AppState<S> = Arc::new(RestState { api, leader });
    Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/jobs", post(jobs::submit::<S>).get(jobs::list::<S>))
        .route(
            "/v1/jobs/{id}",
            get(jobs::get_one::<S>)
                .delete(jobs::cancel::<S>)
                .patch(jobs::update::<S>),
        )
        .route("/v1/jobs/{id}/hold", post(jobs::hold::<S>))
        .route("/v1/jobs/{id}/release", post(jobs::release::<S>))
        .route("/v1/jobs/{id}/requeue", post(jobs::requeue::<S>))
        .route("/v1/jobs/{id}/signal", post(jobs::signal::<S>))
        .route("/v1/jobs/{id}/explain", get(jobs::explain::<S>))
        .route("/v1/jobs/{id}/events", get(jobs::events::<S>))
        .route("/v1/priorities", get(jobs::priorities::<S>))
        .route("/v1/hosts", get(admin::hosts::<S>))
        .route("/v1/cluster", get(admin::cluster::<S>))
        .route("/v1/qos", get(admin::list_qos::<S>))
        .route(
            "/v1/qos/{name}",
            get(admin::get_qos::<S>)
                .put(admin::put_qos::<S>)
                .delete(admin::delete_qos::<S>),
        )
        .route("/v1/accounts", get(admin::list_accounts::<S>))
        .route(
            "/v1/accounts/{name}",
            get(admin::get_account::<S>)
                .put(admin::put_account::<S>)
                .delete(admin::delete_account::<S>),
        )
        .route("/v1/users", get(admin::list_users::<S>))
        .route(
            "/v1/users/{name}",
            get(admin::get_user::<S>).put(admin::put_user::<S>),
        )
        .route("/v1/partitions", get(admin::list_partitions::<S>))
        .route(
            "/v1/partitions/{name}",
            get(admin::get_partition::<S>)
                .put(admin::put_partition::<S>)
                .delete(admin::delete_partition::<S>),
        )
        .route("/v1/reservations", get(admin::list_reservations::<S>))
        .route(
            "/v1/reservations/{name}",
            get(admin::get_reservation::<S>)
                .put(admin::put_reservation::<S>)
                .delete(admin::delete_reservation::<S>),
        )
        .fallback(no_such_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(REST_BODY_BYTES_MAX))
        .with_state(state)
}

async fn openapi() -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI_JSON,
    )
        .into_response()
}

async fn no_such_route(uri: axum::http::Uri) -> RestError {
    RestError::new(
        StatusCode::NOT_FOUND,
        "no_such_route",
        format!("no route {} (see /v1/openapi.json)", uri.path()),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> RestError {
    RestError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not served on {} (see /v1/openapi.json)",
            uri.path()
        ),
    )
}

/// An error answer: an HTTP status and `{"code": ..., "message": ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RestError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The leader (id, gRPC address), with `unavailable`.
    pub leader: Option<(u64, String)>,
}

impl RestError {
    pub fn new(status: StatusCode, code: &'static str, message: String) -> RestError {
        RestError {
            status,
            code,
            message,
            leader: None,
        }
    }

    pub fn invalid(message: String) -> RestError {
        RestError::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
    }

    pub fn not_found(message: String) -> RestError {
        RestError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The HTTP status and stable code of a gRPC status.
    pub fn from_status(status: &Status) -> RestError {
        let (http, code) = status_mapping(status.code());
        RestError::new(http, code, status.message().to_string())
    }
}

/// gRPC code -> (HTTP status, stable error code). Mostly the mapping of
/// Google's API design guide, except that FAILED_PRECONDITION is 409: here
/// it means the job's state does not allow the action (cancel a finished
/// job), a conflict with the resource's state.
pub fn status_mapping(code: Code) -> (StatusCode, &'static str) {
    match code {
        Code::Ok => (StatusCode::OK, "ok"),
        // 499 "client closed request" (nginx's) has no constant.
        Code::Cancelled => (
            StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            "cancelled",
        ),
        Code::Unknown => (StatusCode::INTERNAL_SERVER_ERROR, "unknown"),
        Code::InvalidArgument => (StatusCode::BAD_REQUEST, "invalid_argument"),
        Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
        Code::NotFound => (StatusCode::NOT_FOUND, "not_found"),
        Code::AlreadyExists => (StatusCode::CONFLICT, "already_exists"),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "permission_denied"),
        Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "resource_exhausted"),
        Code::FailedPrecondition => (StatusCode::CONFLICT, "failed_precondition"),
        Code::Aborted => (StatusCode::CONFLICT, "aborted"),
        Code::OutOfRange => (StatusCode::BAD_REQUEST, "out_of_range"),
        Code::Unimplemented => (StatusCode::NOT_IMPLEMENTED, "unimplemented"),
        Code::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        Code::DataLoss => (StatusCode::INTERNAL_SERVER_ERROR, "data_loss"),
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let unavailable = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let (leader_id, leader_addr) = match self.leader {
            Some((id, addr)) => (Some(id), Some(addr)),
            None => (None, None),
        };
        let body = ErrorJson {
            code: self.code.to_string(),
            message: self.message,
            leader_id,
            leader_addr,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if unavailable {
            // Elections take about a second; a client may try again then.
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static("1"),
            );
        }
        response
    }
}

/// A `tonic::Request` carrying what the service layer authenticates: the
/// caller's bearer token. The cluster secret header is deliberately not
/// passed on: the HTTP listener is plain HTTP, and a node's privileges
/// have no business arriving through it.
pub fn grpc_request<T>(headers: &HeaderMap, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        if let Ok(value) = tonic::metadata::MetadataValue::try_from(value.as_bytes()) {
            request.metadata_mut().insert("authorization", value);
        }
    }
    request
}

/// A JSON body, read up to [`REST_BODY_BYTES_MAX`]; an empty body reads as
/// `{}`. Malformed JSON, a wrong type and an unknown field are 400 with
/// serde's words (which name the field and its path).
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &S) -> Result<Self, RestError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                RestError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("request body over {REST_BODY_BYTES_MAX} bytes"),
                )
            } else {
                RestError::invalid(e.body_text())
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a request body (see [`JsonBody`]).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RestError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    axum::Json::<T>::from_bytes(bytes)
        .map(|json| json.0)
        .map_err(|e| RestError::invalid(e.body_text()))
}

/// Query parameters; an unknown or malformed one is 400 naming it.
pub struct QueryOf<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryOf<T> {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, RestError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|q| QueryOf(q.0))
            .map_err(|e| RestError::invalid(e.body_text()))
    }
}

/// The `{id}` of a job route.
pub struct JobId(pub u64);

impl<S: Send + Sync> FromRequestParts<S> for JobId {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, RestError> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::invalid(e.body_text()))?;
        text.parse::<u64>()
            .map(JobId)
            .map_err(|_| RestError::invalid(format!("job id {text:?} is not a number")))
    }
}

/// The `{name}` of a policy object's route.
pub struct Name(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Name {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, RestError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| RestError::invalid(e.body_text()))?;
        Ok(Name(name))
    }
}

#[cfg(test)]
mod tests;
