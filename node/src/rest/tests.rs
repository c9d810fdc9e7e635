//! The REST layer against a fake service: routes, the OpenAPI document,
//! JSON bodies and error mapping. The real service behind it is tested
//! end to end in `chaos-tests/tests/rest.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::*;
use futures::Stream;
use serde_json::Value;
use tonic::{Code, Response, Status};

use super::json::*;
use super::*;

/// Answers every call with a plausible message, or with `fail` when set.
/// Submits are idempotent by request id, like the real one.
#[derive(Default)]
struct Fake {
    fail: Option<Status>,
    submitted: Mutex<BTreeMap<String, u64>>,
}

impl Fake {
    fn answer<T>(&self, message: T) -> Result<Response<T>, Status> {
        match &self.fail {
            Some(status) => Err(status.clone()),
            None => Ok(Response::new(message)),
        }
    }
}

fn named_job(job_id: u64) -> Job {
    Job {
        job_id,
        state: JobState::Pending as i32,
        spec: Some(JobSpec {
            command: "true".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<JobEvent, Status>> + Send>>;
type Chunks = Pin<Box<dyn Stream<Item = Result<BackupChunk, Status>> + Send>>;

#[tonic::async_trait]
impl BerthApi for Fake {
    async fn submit_job(
        &self,
        request: tonic::Request<SubmitJobRequest>,
    ) -> Result<Response<SubmitJobResponse>, Status> {
        let req = request.into_inner();
        let mut seen = self.submitted.lock().unwrap_or_else(|p| p.into_inner());
        let next = seen.len() as u64 + 1;
        let duplicate = seen.contains_key(&req.request_id);
        let job_id = *seen.entry(req.request_id).or_insert(next);
        self.answer(SubmitJobResponse { job_id, duplicate })
    }
    async fn cancel_job(
        &self,
        _: tonic::Request<CancelJobRequest>,
    ) -> Result<Response<CancelJobResponse>, Status> {
        self.answer(CancelJobResponse {
            previous_state: JobState::Running as i32,
        })
    }
    async fn control_job(
        &self,
        _: tonic::Request<ControlJobRequest>,
    ) -> Result<Response<ControlJobResponse>, Status> {
        self.answer(ControlJobResponse {})
    }
    async fn update_job(
        &self,
        request: tonic::Request<UpdateJobRequest>,
    ) -> Result<Response<UpdateJobResponse>, Status> {
        // Echoes what would change, so a test sees the body's mapping.
        let r = request.into_inner();
        let mut changes = Vec::new();
        if let Some(t) = r.time_limit_s {
            changes.push(format!("time_limit_s={t}"));
        }
        if r.set_partitions {
            changes.push(format!("partitions={}", r.partitions.join(",")));
        }
        if let Some(n) = r.nice {
            changes.push(format!("nice={n}"));
        }
        if let Some(name) = r.name {
            changes.push(format!("name={name}"));
        }
        self.answer(UpdateJobResponse { changes })
    }
    async fn get_job(
        &self,
        request: tonic::Request<GetJobRequest>,
    ) -> Result<Response<Job>, Status> {
        self.answer(named_job(request.get_ref().job_id))
    }
    // The CLI's salloc and srun alone call these; REST has no route.
    async fn get_step_access(
        &self,
        _: tonic::Request<GetStepAccessRequest>,
    ) -> Result<Response<StepAccess>, Status> {
        Err(Status::unimplemented("not a REST call"))
    }
    async fn release_allocation(
        &self,
        _: tonic::Request<ReleaseAllocationRequest>,
    ) -> Result<Response<ReleaseAllocationResponse>, Status> {
        Err(Status::unimplemented("not a REST call"))
    }
    async fn list_jobs(
        &self,
        _: tonic::Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsResponse>, Status> {
        let mut in_gpu = named_job(2);
        if let Some(spec) = in_gpu.spec.as_mut() {
            spec.partitions = vec!["gpu".into()];
        }
        self.answer(ListJobsResponse {
            jobs: vec![named_job(1), in_gpu, named_job(3)],
            truncated: false,
        })
    }
    async fn get_priorities(
        &self,
        request: tonic::Request<GetPrioritiesRequest>,
    ) -> Result<Response<GetPrioritiesResponse>, Status> {
        let req = request.into_inner();
        self.answer(GetPrioritiesResponse {
            jobs: vec![PriorityFactors {
                job_id: req.job_ids.first().copied().unwrap_or(7),
                user: if req.user.is_empty() {
                    "alice".into()
                } else {
                    req.user
                },
                account: "proj".into(),
                partition: "cpu".into(),
                total: 45,
                age: 3,
                site: 40,
                nice: 2,
                ..Default::default()
            }],
        })
    }
    async fn explain_job(
        &self,
        request: tonic::Request<ExplainJobRequest>,
    ) -> Result<Response<ExplainJobResponse>, Status> {
        self.answer(ExplainJobResponse {
            job_id: request.get_ref().job_id,
            state: JobState::Pending as i32,
            reason: "Resources".into(),
            reason_text: "waiting for room".into(),
            hosts: vec![HostRejection {
                host: "h1".into(),
                lacks: "cpus: needs 8, 2 free".into(),
            }],
        })
    }
    type WatchJobEventsStream = Events;
    async fn watch_job_events(
        &self,
        request: tonic::Request<WatchJobEventsRequest>,
    ) -> Result<Response<Events>, Status> {
        let job_id = request.get_ref().job_id;
        let events = (1..=3).map(move |seq| {
            Ok(JobEvent {
                job_id,
                time_ms: seq * 10,
                kind: "submitted".into(),
                message: format!("event {seq}"),
                seq,
            })
        });
        self.answer(Box::pin(futures::stream::iter(events)) as Events)
    }
    async fn cluster_status(
        &self,
        _: tonic::Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        self.answer(ClusterStatusResponse {
            node_id: 1,
            leader_id: 1,
            role: "Leader".into(),
            ..Default::default()
        })
    }
    async fn add_learner(
        &self,
        _: tonic::Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.answer(MembershipResponse::default())
    }
    async fn change_membership(
        &self,
        _: tonic::Request<ChangeMembershipRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.answer(MembershipResponse::default())
    }
    async fn list_hosts(
        &self,
        _: tonic::Request<ListHostsRequest>,
    ) -> Result<Response<ListHostsResponse>, Status> {
        self.answer(ListHostsResponse {
            hosts: vec![Host {
                name: "h1".into(),
                state: "idle".into(),
                ..Default::default()
            }],
        })
    }
    async fn upsert_qos(&self, _: tonic::Request<Qos>) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 5 })
    }
    async fn list_qos(
        &self,
        _: tonic::Request<ListQosRequest>,
    ) -> Result<Response<ListQosResponse>, Status> {
        self.answer(ListQosResponse {
            qos: vec![Qos {
                name: "x".into(),
                ..Default::default()
            }],
        })
    }
    async fn upsert_account(
        &self,
        _: tonic::Request<Account>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 5 })
    }
    async fn list_accounts(
        &self,
        _: tonic::Request<ListAccountsRequest>,
    ) -> Result<Response<ListAccountsResponse>, Status> {
        self.answer(ListAccountsResponse {
            accounts: vec![Account {
                name: "x".into(),
                ..Default::default()
            }],
        })
    }
    async fn upsert_partition(
        &self,
        _: tonic::Request<Partition>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 5 })
    }
    async fn list_partitions(
        &self,
        _: tonic::Request<ListPartitionsRequest>,
    ) -> Result<Response<ListPartitionsResponse>, Status> {
        self.answer(ListPartitionsResponse {
            partitions: vec![Partition {
                name: "x".into(),
                is_default: true,
                ..Default::default()
            }],
        })
    }
    async fn upsert_user(
        &self,
        _: tonic::Request<User>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 5 })
    }
    async fn list_users(
        &self,
        _: tonic::Request<ListUsersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        self.answer(ListUsersResponse {
            users: vec![User {
                name: "x".into(),
                ..Default::default()
            }],
        })
    }
    async fn delete_qos(
        &self,
        _: tonic::Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 6 })
    }
    async fn delete_account(
        &self,
        _: tonic::Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 6 })
    }
    async fn delete_partition(
        &self,
        _: tonic::Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 6 })
    }
    async fn create_reservation(
        &self,
        _: tonic::Request<Reservation>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 7 })
    }
    async fn delete_reservation(
        &self,
        _: tonic::Request<DeleteReservationRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.answer(AdminResponse { log_index: 7 })
    }
    async fn list_reservations(
        &self,
        _: tonic::Request<ListReservationsRequest>,
    ) -> Result<Response<ListReservationsResponse>, Status> {
        self.answer(ListReservationsResponse {
            reservations: vec![Reservation {
                name: "x".into(),
                ..Default::default()
            }],
        })
    }
    type BackupStateStream = Chunks;
    async fn backup_state(
        &self,
        _: tonic::Request<BackupStateRequest>,
    ) -> Result<Response<Chunks>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }
}

fn app(fake: Fake) -> Router {
    router(
        Arc::new(fake),
        Arc::new(|| Some((2, "10.0.0.2:7101".to_string()))),
    )
}

/// One request through the router: status, headers, body as JSON.
async fn send(
    app: &Router,
    method: &str,
    path: &str,
    body: &str,
) -> (StatusCode, HeaderMap, Value) {
    use tower_service::Service;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = app.clone().call(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method} {path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, headers, value)
}

fn concrete(path: &str) -> String {
    path.replace("{id}", "1").replace("{name}", "x")
}

fn openapi_routes() -> BTreeSet<(String, String)> {
    let doc: Value = serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON");
    assert_eq!(doc["openapi"], "3.0.3");
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            routes.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    routes
}

#[tokio::test]
async fn every_route_is_served_and_documented_and_nothing_else() {
    let listed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(listed.len(), ROUTES.len(), "ROUTES has a duplicate");
    assert_eq!(openapi_routes(), listed, "openapi.json and ROUTES differ");

    let app = app(Fake::default());
    let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    for path in paths {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            // The one route whose body has a required key.
            let request = if path.ends_with("/signal") {
                r#"{"signal":"USR1"}"#
            } else {
                "{}"
            };
            let (status, _, body) = send(&app, method, &concrete(path), request).await;
            if listed.contains(&(method.to_string(), path.to_string())) {
                assert!(status.is_success(), "{method} {path}: {status} {body}");
            } else {
                assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
                assert_eq!(body["code"], "method_not_allowed");
            }
        }
    }
    let (status, _, body) = send(&app, "GET", "/v1/nothing", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "no_such_route");
}

/// The schemas' properties are the fields the JSON types write.
#[test]
fn openapi_schemas_match_the_json_types() {
    let doc: Value = serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON");
    let fields =
        |v: Value| -> BTreeSet<String> { v.as_object().expect("object").keys().cloned().collect() };
    let checks: Vec<(&str, Value)> = vec![
        (
            "JobSpec",
            serde_json::to_value(JobSpecJson::default()).expect("json"),
        ),
        (
            "SubmitJob",
            serde_json::to_value(SubmitJobJson::default()).expect("json"),
        ),
        (
            "ResourceSet",
            serde_json::to_value(ResourceSetJson::default()).expect("json"),
        ),
        (
            "Job",
            serde_json::to_value(JobJson::default()).expect("json"),
        ),
        (
            "JobList",
            serde_json::to_value(JobListJson::default()).expect("json"),
        ),
        (
            "Explain",
            serde_json::to_value(ExplainJson::default()).expect("json"),
        ),
        (
            "JobEvents",
            serde_json::to_value(JobEventsJson::default()).expect("json"),
        ),
        (
            "Host",
            serde_json::to_value(HostJson::default()).expect("json"),
        ),
        (
            "Cluster",
            serde_json::to_value(ClusterJson::default()).expect("json"),
        ),
        (
            "Limits",
            serde_json::to_value(LimitsJson::default()).expect("json"),
        ),
        (
            "Qos",
            serde_json::to_value(QosJson::default()).expect("json"),
        ),
        (
            "Account",
            serde_json::to_value(AccountJson::default()).expect("json"),
        ),
        (
            "User",
            serde_json::to_value(UserJson::default()).expect("json"),
        ),
        (
            "Partition",
            serde_json::to_value(PartitionJson::default()).expect("json"),
        ),
        (
            "Reservation",
            serde_json::to_value(ReservationJson::default()).expect("json"),
        ),
        (
            "AdminResponse",
            serde_json::to_value(AdminJson::default()).expect("json"),
        ),
        (
            "CancelJobResponse",
            serde_json::to_value(CancelJobResponseJson::default()).expect("json"),
        ),
        (
            "ControlJobResponse",
            serde_json::to_value(ControlJobResponseJson::default()).expect("json"),
        ),
        (
            "UpdateJobResponse",
            serde_json::to_value(UpdateJobResponseJson::default()).expect("json"),
        ),
    ];
    for (name, value) in checks {
        let schema = &doc["components"]["schemas"][name]["properties"];
        assert_eq!(fields(schema.clone()), fields(value), "schema {name}");
    }
    // Every $ref points at something that exists.
    let text = OPENAPI_JSON;
    for piece in text.split("\"$ref\": \"#/components/").skip(1) {
        let target = piece.split('"').next().unwrap_or_default();
        let mut node = &doc["components"];
        for part in target.split('/') {
            node = &node[part];
        }
        assert!(!node.is_null(), "dangling $ref {target}");
    }
}

#[tokio::test]
async fn submit_is_idempotent_by_request_id() {
    let app = app(Fake::default());
    let body = r#"{"request_id":"r-1","command":"sleep 1","cpus":2}"#;
    let (status, headers, first) = send(&app, "POST", "/v1/jobs", body).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["duplicate"], false);
    let id = first["job_id"].as_u64().expect("job id");
    assert_eq!(
        headers.get("location").and_then(|v| v.to_str().ok()),
        Some(format!("/v1/jobs/{id}").as_str())
    );
    let (status, _, again) = send(&app, "POST", "/v1/jobs", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["job_id"], id);
    assert_eq!(again["duplicate"], true);
}

#[tokio::test]
async fn answers_are_json_with_names_for_enums() {
    let app = app(Fake::default());
    let (status, _, job) = send(&app, "GET", "/v1/jobs/42", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["job_id"], 42);
    assert_eq!(job["state"], "PENDING");
    let (_, _, cancelled) = send(&app, "DELETE", "/v1/jobs/42", "").await;
    assert_eq!(cancelled["previous_state"], "RUNNING");
    let (_, _, held) = send(&app, "POST", "/v1/jobs/42/hold", r#"{"admin":true}"#).await;
    assert_eq!(held["action"], "HOLD_ADMIN");
    let (_, _, requeued) = send(&app, "POST", "/v1/jobs/42/requeue", "").await;
    assert_eq!(requeued["action"], "REQUEUE");
    let (_, _, explained) = send(&app, "GET", "/v1/jobs/42/explain", "").await;
    assert_eq!(explained["hosts"][0]["lacks"], "cpus: needs 8, 2 free");
    let (_, _, events) = send(&app, "GET", "/v1/jobs/42/events", "").await;
    assert_eq!(events["events"].as_array().map(Vec::len), Some(3));
    // The partition filter: job 2 asked for gpu; 1 and 3 asked for none
    // and "x" is the default partition.
    let (_, _, gpu) = send(&app, "GET", "/v1/jobs?partition=gpu", "").await;
    let ids: Vec<u64> = gpu["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["job_id"].as_u64())
        .collect();
    assert_eq!(ids, vec![2]);
    let (_, _, default) = send(&app, "GET", "/v1/jobs?partition=x&limit=1", "").await;
    assert_eq!(default["jobs"].as_array().map(Vec::len), Some(1));
    assert_eq!(default["truncated"], true);
    let (status, _, one) = send(&app, "GET", "/v1/qos/x", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["name"], "x");
    let (status, _, missing) = send(&app, "GET", "/v1/qos/nope", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["code"], "not_found");
}

#[tokio::test]
async fn bad_input_is_400_naming_what_is_wrong() {
    let app = app(Fake::default());
    let (status, _, e) = send(
        &app,
        "POST",
        "/v1/jobs",
        r#"{"request_id":"r","comand":"x"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "invalid_argument");
    assert!(
        e["message"].as_str().unwrap_or_default().contains("comand"),
        "{e}"
    );
    let (status, _, e) = send(
        &app,
        "POST",
        "/v1/jobs",
        r#"{"request_id":"r","cpus":"two"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("cpus"),
        "{e}"
    );
    let (status, _, e) = send(&app, "POST", "/v1/jobs", "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(e["code"], "invalid_argument");
    let (status, _, e) = send(&app, "GET", "/v1/jobs/abc", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("abc"),
        "{e}"
    );
    let (status, _, e) = send(&app, "GET", "/v1/jobs?sate=RUNNING", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("sate"),
        "{e}"
    );
    let (status, _, e) = send(&app, "GET", "/v1/jobs?state=RUNNIN", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("RUNNIN"),
        "{e}"
    );
    let (status, _, e) = send(&app, "PUT", "/v1/qos/high", r#"{"name":"low"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("low"),
        "{e}"
    );
    let big = format!(
        r#"{{"request_id":"r","comment":"{}"}}"#,
        "x".repeat(REST_BODY_BYTES_MAX)
    );
    let (status, _, e) = send(&app, "POST", "/v1/jobs", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(e["code"], "payload_too_large");
}

#[tokio::test]
async fn service_errors_map_to_http_statuses() {
    let failing = |status: Status| {
        app(Fake {
            fail: Some(status),
            ..Default::default()
        })
    };
    let (status, _, e) = send(
        &failing(Status::not_found("job 9 does not exist")),
        "GET",
        "/v1/jobs/9",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "not_found");
    assert_eq!(e["message"], "job 9 does not exist");
    let (status, headers, e) = send(
        &failing(Status::unavailable("no leader")),
        "DELETE",
        "/v1/jobs/9",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(e["code"], "unavailable");
    assert_eq!(e["leader_id"], 2);
    assert_eq!(e["leader_addr"], "10.0.0.2:7101");
    assert!(headers.contains_key("retry-after"));
    let (status, _, e) = send(
        &failing(Status::unimplemented("reservations are not implemented")),
        "GET",
        "/v1/reservations",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(e["code"], "unimplemented");
    assert!(e.get("leader_id").is_none());
    let (status, _, e) = send(
        &failing(Status::failed_precondition("job 9 is COMPLETED")),
        "DELETE",
        "/v1/jobs/9",
        "",
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(e["code"], "failed_precondition");
}

#[test]
fn every_grpc_code_has_a_status_and_a_code() {
    let expected = [
        (Code::InvalidArgument, 400, "invalid_argument"),
        (Code::OutOfRange, 400, "out_of_range"),
        (Code::Unauthenticated, 401, "unauthenticated"),
        (Code::PermissionDenied, 403, "permission_denied"),
        (Code::NotFound, 404, "not_found"),
        (Code::FailedPrecondition, 409, "failed_precondition"),
        (Code::AlreadyExists, 409, "already_exists"),
        (Code::Aborted, 409, "aborted"),
        (Code::ResourceExhausted, 429, "resource_exhausted"),
        (Code::Cancelled, 499, "cancelled"),
        (Code::Internal, 500, "internal"),
        (Code::Unknown, 500, "unknown"),
        (Code::DataLoss, 500, "data_loss"),
        (Code::Unimplemented, 501, "unimplemented"),
        (Code::Unavailable, 503, "unavailable"),
        (Code::DeadlineExceeded, 504, "deadline_exceeded"),
    ];
    for (code, http, name) in expected {
        assert_eq!(
            status_mapping(code),
            (StatusCode::from_u16(http).expect("valid"), name)
        );
    }
    let codes: BTreeSet<&str> = expected.iter().map(|(_, _, n)| *n).collect();
    assert_eq!(codes.len(), expected.len(), "codes are distinct");
}

#[test]
fn only_the_bearer_token_reaches_the_service() {
    let mut headers = HeaderMap::new();
    headers.insert("authorization", "Bearer abc".parse().expect("ascii"));
    headers.insert(
        berth_auth::CLUSTER_SECRET_HEADER,
        "a-secret-a-secret-a-secret-a-secret"
            .parse()
            .expect("ascii"),
    );
    let request = grpc_request(&headers, ());
    assert_eq!(
        request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer abc")
    );
    assert!(request
        .metadata()
        .get(berth_auth::CLUSTER_SECRET_HEADER)
        .is_none());
}

#[test]
fn the_method_list_uses_known_methods() {
    for (method, _) in ROUTES {
        assert!(Method::from_bytes(method.as_bytes()).is_ok(), "{method}");
    }
}

#[tokio::test]
async fn priorities_are_listed_with_their_parts() {
    let app = app(Fake::default());
    let (status, _, body) = send(&app, "GET", "/v1/priorities?job=12&user=bob", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"jobs": [{
            "job_id": 12, "user": "bob", "account": "proj", "partition": "cpu",
            "priority": 45, "site": 40, "age": 3, "assoc": 0, "fairshare": 0,
            "job_size": 0, "partition_factor": 0, "qos": 0, "nice": 2
        }]})
    );
    let (status, _, e) = send(&app, "GET", "/v1/priorities?job=1,x", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(e["message"], "job \"x\": expected a positive job id");
    let (status, _, e) = send(&app, "GET", "/v1/priorities?jobs=1", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        e["message"].as_str().unwrap_or_default().contains("jobs"),
        "{e}"
    );
}

#[tokio::test]
async fn update_maps_the_body_and_refuses_unknown_keys() {
    let app = app(Fake::default());
    let (status, _, answer) = send(
        &app,
        "PATCH",
        "/v1/jobs/7",
        r#"{"time_limit_s":300,"partitions":["a","b"],"nice":5,"name":"x"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["job_id"], 7);
    assert_eq!(
        answer["changes"],
        serde_json::json!(["time_limit_s=300", "partitions=a,b", "nice=5", "name=x"])
    );
    let (status, _, error) = send(&app, "PATCH", "/v1/jobs/7", r#"{"timelimit":300}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(
        error.to_string().contains("timelimit"),
        "the error names the key: {error}"
    );
}

#[tokio::test]
async fn signal_takes_a_name_or_number_and_refuses_others() {
    let app = app(Fake::default());
    let (status, _, answer) = send(
        &app,
        "POST",
        "/v1/jobs/7/signal",
        r#"{"signal":"SIGUSR1","batch_only":true}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["action"], "SIGNAL");
    let (status, _, error) = send(&app, "POST", "/v1/jobs/7/signal", r#"{"signal":"NOPE"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error.to_string().contains("NOPE"), "{error}");
}
