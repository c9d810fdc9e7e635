//! Job routes: submit, list, read, cancel, hold/release/requeue, signal, explain
//! and events, each one call of the gRPC service.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::{
    control_job_request::Action, CancelJobRequest, ControlJobRequest, ExplainJobRequest,
    GetJobRequest, GetPrioritiesRequest, Job, ListJobsRequest, ListPartitionsRequest,
    WatchJobEventsRequest,
};
use futures::StreamExt;

use super::json::{
    parse_states, state_name, CancelJobResponseJson, ControlJobResponseJson, EventsQuery,
    ExplainJson, GetJobQuery, HoldJson, JobEventJson, JobEventsJson, JobJson, JobListJson,
    ListJobsQuery, PrioritiesQuery, PriorityJson, PriorityListJson, ReleaseJson, RequeueJson,
    SignalJson, SubmitJobJson, SubmitJobResponseJson, UpdateJobJson, UpdateJobResponseJson,
};
use super::{grpc_request, JobId, JsonBody, QueryOf, RestError, RestState};
use crate::api_service::LIST_JOBS_MAX;

type St<S> = State<Arc<RestState<S>>>;

/// Most events one `GET /v1/jobs/{id}/events` answer carries (the cluster
/// keeps far fewer per job; this only bounds a misbehaving stream).
pub const REST_EVENTS_MAX: usize = 10_000;

/// `POST /v1/jobs`: 201 with the new job's id and a Location, or 200 with
/// the first job's id when the request id was seen before.
pub async fn submit<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SubmitJobJson>,
) -> Result<Response, RestError> {
    let answer = st
        .api
        .submit_job(grpc_request(&headers, body.into()))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    let status = if answer.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let location = HeaderValue::from_str(&format!("/v1/jobs/{}", answer.job_id))
        .map_err(|e| RestError::from_status(&tonic::Status::internal(e.to_string())))?;
    Ok((
        status,
        [(header::LOCATION, location)],
        Json(SubmitJobResponseJson::from(answer)),
    )
        .into_response())
}

/// `GET /v1/jobs?state=&user=&partition=&limit=&stale=`.
pub async fn list<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    QueryOf(query): QueryOf<ListJobsQuery>,
) -> Result<Json<JobListJson>, RestError> {
    let states = match &query.state {
        Some(text) => parse_states(text).map_err(RestError::invalid)?,
        None => Vec::new(),
    };
    let limit = query.limit.unwrap_or(0);
    let Some(partition) = query.partition.filter(|p| !p.is_empty()) else {
        let answer = st
            .api
            .list_jobs(grpc_request(
                &headers,
                ListJobsRequest {
                    states,
                    user: query.user.unwrap_or_default(),
                    stale: query.stale.unwrap_or(false),
                    limit,
                    ..Default::default()
                },
            ))
            .await
            .map_err(|s| st.error(s))?
            .into_inner();
        return Ok(Json(JobListJson {
            jobs: answer.jobs.into_iter().map(JobJson::from).collect(),
            truncated: answer.truncated,
        }));
    };
    // ListJobs has no partition filter: ask for as many as the server
    // gives, keep the partition's, then apply the limit here.
    let answer = st
        .api
        .list_jobs(grpc_request(
            &headers,
            ListJobsRequest {
                states,
                user: query.user.unwrap_or_default(),
                stale: query.stale.unwrap_or(false),
                limit: 0,
                ..Default::default()
            },
        ))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    let default_partition = if answer.jobs.iter().any(|j| asked_partitions(j).is_empty()) {
        let partitions = st
            .api
            .list_partitions(grpc_request(&headers, ListPartitionsRequest {}))
            .await
            .map_err(|s| st.error(s))?
            .into_inner()
            .partitions;
        partitions
            .into_iter()
            .find(|p| p.is_default)
            .map(|p| p.name)
    } else {
        None
    };
    let limit = match limit as usize {
        0 => LIST_JOBS_MAX,
        n => n.min(LIST_JOBS_MAX),
    };
    let mut matched = answer
        .jobs
        .into_iter()
        .filter(|j| in_partition(j, &partition, default_partition.as_deref()));
    let jobs: Vec<JobJson> = matched.by_ref().take(limit).map(JobJson::from).collect();
    let truncated = answer.truncated || matched.next().is_some();
    Ok(Json(JobListJson { jobs, truncated }))
}

fn asked_partitions(job: &Job) -> &[String] {
    job.spec.as_ref().map_or(&[], |s| s.partitions.as_slice())
}

/// A job is in a partition it asked for, or in the default partition when
/// it asked for none.
pub fn in_partition(job: &Job, partition: &str, default_partition: Option<&str>) -> bool {
    let asked = asked_partitions(job);
    if asked.is_empty() {
        default_partition == Some(partition)
    } else {
        asked.iter().any(|p| p == partition)
    }
}

/// `GET /v1/jobs/{id}?stale=`.
pub async fn get_one<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    QueryOf(query): QueryOf<GetJobQuery>,
) -> Result<Json<JobJson>, RestError> {
    let job = st
        .api
        .get_job(grpc_request(
            &headers,
            GetJobRequest {
                job_id,
                stale: query.stale.unwrap_or(false),
            },
        ))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(job.into()))
}

/// `DELETE /v1/jobs/{id}`: cancel.
pub async fn cancel<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
) -> Result<Json<CancelJobResponseJson>, RestError> {
    let answer = st
        .api
        .cancel_job(grpc_request(
            &headers,
            CancelJobRequest {
                job_id,
                only_task: false,
            },
        ))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(CancelJobResponseJson {
        job_id,
        previous_state: state_name(answer.previous_state),
    }))
}

async fn control<S: BerthApi>(
    st: &RestState<S>,
    headers: &HeaderMap,
    job_id: u64,
    action: Action,
    admin: bool,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    send_control(
        st,
        headers,
        ControlJobRequest {
            job_id,
            action: action as i32,
            admin,
            ..Default::default()
        },
    )
    .await
}

async fn send_control<S: BerthApi>(
    st: &RestState<S>,
    headers: &HeaderMap,
    request: ControlJobRequest,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    let (job_id, action) = (request.job_id, request.action());
    st.api
        .control_job(grpc_request(headers, request))
        .await
        .map_err(|s| st.error(s))?;
    Ok(Json(ControlJobResponseJson {
        job_id,
        action: action.as_str_name().to_string(),
    }))
}

/// `POST /v1/jobs/{id}/hold`, body `{"admin": true}` for an admin hold.
pub async fn hold<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    JsonBody(body): JsonBody<HoldJson>,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    let action = if body.admin {
        Action::HoldAdmin
    } else {
        Action::Hold
    };
    control(&st, &headers, job_id, action, false).await
}

/// `POST /v1/jobs/{id}/release`, body `{"admin": true}` to lift an admin
/// hold too.
pub async fn release<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    JsonBody(body): JsonBody<ReleaseJson>,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    control(&st, &headers, job_id, Action::Release, body.admin).await
}

/// `POST /v1/jobs/{id}/requeue`, body `{"hold": true}` to come back held.
pub async fn requeue<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    JsonBody(body): JsonBody<RequeueJson>,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    let action = if body.hold {
        Action::RequeueHold
    } else {
        Action::Requeue
    };
    control(&st, &headers, job_id, action, false).await
}

/// `PATCH /v1/jobs/{id}`, body `{"time_limit_s": 300, "name": "x", ...}`:
/// `scontrol update`.
pub async fn update<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    JsonBody(body): JsonBody<UpdateJobJson>,
) -> Result<Json<UpdateJobResponseJson>, RestError> {
    let answer = st
        .api
        .update_job(grpc_request(&headers, body.into_request(job_id)))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(UpdateJobResponseJson {
        job_id,
        changes: answer.changes,
    }))
}

/// `POST /v1/jobs/{id}/signal`, body `{"signal": "USR1", "batch_only":
/// false}`: the running job gets the signal and goes on running.
pub async fn signal<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    JsonBody(body): JsonBody<SignalJson>,
) -> Result<Json<ControlJobResponseJson>, RestError> {
    let signal = berth_scheduler::signal::parse_signal(&body.signal)
        .map_err(|e| st.error(tonic::Status::invalid_argument(e)))?;
    send_control(
        &st,
        &headers,
        ControlJobRequest {
            job_id,
            action: Action::Signal as i32,
            admin: false,
            signal,
            batch_only: body.batch_only,
        },
    )
    .await
}

/// `GET /v1/jobs/{id}/explain`.
pub async fn explain<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
) -> Result<Json<ExplainJson>, RestError> {
    let answer = st
        .api
        .explain_job(grpc_request(&headers, ExplainJobRequest { job_id }))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(answer.into()))
}

/// `GET /v1/jobs/{id}/events?after_seq=`: the history as it is now (the
/// gRPC stream without following; a client polls with `after_seq`).
pub async fn events<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    JobId(job_id): JobId,
    QueryOf(query): QueryOf<EventsQuery>,
) -> Result<Json<JobEventsJson>, RestError> {
    let stream = st
        .api
        .watch_job_events(grpc_request(
            &headers,
            WatchJobEventsRequest {
                job_id,
                after_seq: query.after_seq.unwrap_or(0),
                no_follow: true,
            },
        ))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    let mut stream = std::pin::pin!(stream.take(REST_EVENTS_MAX));
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(JobEventJson::from(event.map_err(|s| st.error(s))?));
    }
    Ok(Json(JobEventsJson { job_id, events }))
}

/// `GET /v1/priorities`: pending jobs' priority parts at the leader's last
/// pass (GetPriorities).
pub async fn priorities<S: BerthApi>(
    State(st): St<S>,
    headers: HeaderMap,
    QueryOf(query): QueryOf<PrioritiesQuery>,
) -> Result<Json<PriorityListJson>, RestError> {
    let mut job_ids = Vec::new();
    for text in query.job.as_deref().unwrap_or("").split(',') {
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match text.parse::<u64>() {
            Ok(id) if id > 0 => job_ids.push(id),
            _ => {
                return Err(RestError::invalid(format!(
                    "job \"{text}\": expected a positive job id"
                )))
            }
        }
    }
    let answer = st
        .api
        .get_priorities(grpc_request(
            &headers,
            GetPrioritiesRequest {
                job_ids,
                user: query.user.unwrap_or_default(),
            },
        ))
        .await
        .map_err(|s| st.error(s))?
        .into_inner();
    Ok(Json(PriorityListJson {
        jobs: answer.jobs.into_iter().map(PriorityJson::from).collect(),
    }))
}
