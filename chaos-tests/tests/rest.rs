//! The REST/JSON API end to end on a real 3-node cluster of `berthd`
//! processes with an agent: submit through a follower (forwarded to the
//! leader) twice with one request id, read, list, explain, cancel, read
//! the events and the policy routes, all over HTTP on the nodes' HTTP
//! listeners. Every wait is a condition with a deadline.

use std::time::{Duration, Instant};

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use serde_json::Value;

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const JOB_DEADLINE: Duration = Duration::from_secs(60);

/// `method path body` on node `id`: the status and the body as JSON.
fn call(cluster: &LocalCluster, id: u64, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, text) = cluster
        .http_request(id, method, path, body)
        .unwrap_or_else(|e| panic!("{method} {path} on node {id}: {e}"));
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: {status}, not JSON ({e}): {text:.300}"));
    (status, value)
}

/// Retries while the cluster answers 503 (no leader yet), up to the
/// deadline; returns the first other answer.
fn call_until_available(
    cluster: &LocalCluster,
    id: u64,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    let start = Instant::now();
    loop {
        let (status, value) = call(cluster, id, method, path, body);
        if status != 503 || start.elapsed() > JOB_DEADLINE {
            return (status, value);
        }
        eprintln!("{method} {path}: {value}; retrying");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rest_api_submits_reads_lists_explains_and_cancels() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster =
        LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start cluster");
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let follower = if leader == 1 { 2 } else { 1 };

    // Submit through a follower: the service layer forwards it.
    let submit = r#"{"request_id":"rest-e2e-1","name":"rest","user":"tester",
        "command":"sleep 300","cpus":1,"env":{"FROM":"rest"}}"#;
    let (status, first) = call_until_available(&cluster, follower, "POST", "/v1/jobs", submit);
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["duplicate"], false);
    let job_id = first["job_id"].as_u64().expect("job id");
    let (status, again) = call_until_available(&cluster, leader, "POST", "/v1/jobs", submit);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["job_id"], job_id, "same request id, same job");
    assert_eq!(again["duplicate"], true);

    // Read it back from another node (a linearizable read).
    let (status, job) = call(&cluster, follower, "GET", &format!("/v1/jobs/{job_id}"), "");
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["job_id"], job_id);
    assert_eq!(job["spec"]["command"], "sleep 300");
    assert_eq!(job["spec"]["env"]["FROM"], "rest");
    let state = job["state"].as_str().unwrap_or_default().to_string();
    assert!(state == "PENDING" || state == "RUNNING", "{job}");

    let (status, list) = call(
        &cluster,
        leader,
        "GET",
        "/v1/jobs?state=pending,running&user=tester&limit=10",
        "",
    );
    assert_eq!(status, 200, "{list}");
    let ids: Vec<u64> = list["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["job_id"].as_u64())
        .collect();
    assert_eq!(ids, vec![job_id], "{list}");
    assert_eq!(list["truncated"], false);

    let (status, explain) = call(
        &cluster,
        follower,
        "GET",
        &format!("/v1/jobs/{job_id}/explain"),
        "",
    );
    assert_eq!(status, 200, "{explain}");
    assert_eq!(explain["job_id"], job_id);
    assert!(explain["state"].is_string(), "{explain}");

    // Cancel, then watch it become CANCELLED.
    let (status, cancelled) = call(
        &cluster,
        follower,
        "DELETE",
        &format!("/v1/jobs/{job_id}"),
        "",
    );
    assert_eq!(status, 200, "{cancelled}");
    let previous = cancelled["previous_state"].as_str().unwrap_or_default();
    assert!(
        previous == "PENDING" || previous == "RUNNING",
        "{cancelled}"
    );
    let start = Instant::now();
    loop {
        let (_, job) = call(&cluster, leader, "GET", &format!("/v1/jobs/{job_id}"), "");
        if job["state"] == "CANCELLED" {
            break;
        }
        assert!(start.elapsed() < JOB_DEADLINE, "not cancelled: {job}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // A second cancel conflicts with the job's state.
    let (status, again) = call(
        &cluster,
        leader,
        "DELETE",
        &format!("/v1/jobs/{job_id}"),
        "",
    );
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["code"], "failed_precondition");

    let (status, events) = call(
        &cluster,
        leader,
        "GET",
        &format!("/v1/jobs/{job_id}/events"),
        "",
    );
    assert_eq!(status, 200, "{events}");
    let seqs: Vec<u64> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert!(
        !seqs.is_empty() && seqs.windows(2).all(|w| w[0] < w[1]),
        "{events}"
    );

    // Errors are JSON with stable codes.
    let (status, missing) = call(&cluster, follower, "GET", "/v1/jobs/999999", "");
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["code"], "not_found");
    assert!(missing["message"]
        .as_str()
        .unwrap_or_default()
        .contains("999999"));
    let (status, bad) = call(
        &cluster,
        leader,
        "POST",
        "/v1/jobs",
        r#"{"request_id":"rest-e2e-2","command":"true","cpu":1}"#,
    );
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["code"], "invalid_argument");
    assert!(
        bad["message"].as_str().unwrap_or_default().contains("cpu"),
        "{bad}"
    );
    let (status, refused) = call(
        &cluster,
        leader,
        "POST",
        "/v1/jobs",
        r#"{"request_id":"","command":"true"}"#,
    );
    assert_eq!(status, 400, "the service's own validation: {refused}");
    let (status, reservations) = call(&cluster, leader, "GET", "/v1/reservations", "");
    assert_eq!(status, 200, "{reservations}");
    assert_eq!(reservations["reservations"], serde_json::json!([]));
    // A reservation is validated by the state machine; its words come back.
    let (status, refused) = call(
        &cluster,
        leader,
        "PUT",
        "/v1/reservations/maint",
        r#"{"hosts":["no-such-host"],"start_ms":1,"end_ms":99999999999999}"#,
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("no host named no-such-host"),
        "{refused}"
    );

    // Policy objects, through a follower.
    let (status, put) = call(
        &cluster,
        follower,
        "PUT",
        "/v1/qos/rest-qos",
        r#"{"priority":10,"limits":{"max_wall_s":600}}"#,
    );
    assert_eq!(status, 200, "{put}");
    assert!(put["log_index"].as_u64().unwrap_or(0) > 0, "{put}");
    let (status, qos) = call(&cluster, leader, "GET", "/v1/qos/rest-qos", "");
    assert_eq!(status, 200, "{qos}");
    assert_eq!(qos["priority"], 10);
    assert_eq!(qos["limits"]["max_wall_s"], 600);
    let (status, _) = call(&cluster, leader, "DELETE", "/v1/qos/rest-qos", "");
    assert_eq!(status, 200);
    let (status, gone) = call(&cluster, leader, "GET", "/v1/qos/rest-qos", "");
    assert_eq!(status, 404, "{gone}");
    account_preempt_lists(&cluster, leader, follower);

    // Cluster view, hosts and the API's own description.
    let (status, view) = call(&cluster, follower, "GET", "/v1/cluster", "");
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["leader_id"], leader);
    assert_eq!(view["node_id"], follower);
    let (status, hosts) = call(&cluster, leader, "GET", "/v1/hosts", "");
    assert_eq!(status, 200, "{hosts}");
    assert!(hosts["hosts"].is_array(), "{hosts}");
    let (status, doc) = call(&cluster, follower, "GET", "/v1/openapi.json", "");
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    assert!(doc["paths"]["/v1/jobs/{id}/explain"]["get"].is_object());
}

/// An account's preempt list travels through REST both ways; a name that
/// is no account is refused by name and changes nothing; deleting the
/// account named takes it off the list.
fn account_preempt_lists(cluster: &LocalCluster, leader: u64, follower: u64) {
    let (status, put) = call(cluster, follower, "PUT", "/v1/accounts/rest-scav", "{}");
    assert_eq!(status, 200, "{put}");
    let (status, put) = call(
        cluster,
        follower,
        "PUT",
        "/v1/accounts/rest-lab",
        r#"{"preempt":["rest-scav"]}"#,
    );
    assert_eq!(status, 200, "{put}");
    let preempt_of_lab = || {
        let (status, lab) = call(cluster, leader, "GET", "/v1/accounts/rest-lab", "");
        assert_eq!(status, 200, "{lab}");
        lab["preempt"].clone()
    };
    assert_eq!(preempt_of_lab(), serde_json::json!(["rest-scav"]));
    let (status, refused) = call(
        cluster,
        leader,
        "PUT",
        "/v1/accounts/rest-lab",
        r#"{"preempt":["rest-scav","ghost"]}"#,
    );
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["message"], "account rest-lab: preempts unknown account ghost",
        "{refused}"
    );
    assert_eq!(preempt_of_lab(), serde_json::json!(["rest-scav"]));
    let (status, _) = call(cluster, leader, "DELETE", "/v1/accounts/rest-scav", "");
    assert_eq!(status, 200);
    assert_eq!(preempt_of_lab(), serde_json::json!([]));
}

/// With `[auth]` on, REST callers are authenticated and authorized by the
/// same service layer as gRPC callers: no token is 401, a user acts only
/// on their own jobs and may not change policy, an admin may.
#[tokio::test(flavor = "multi_thread")]
async fn rest_api_applies_the_same_auth_as_grpc() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        auth: true,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start cluster");
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let follower = if leader == 1 { 2 } else { 1 };
    let bearer = |user: &str, admin: bool| {
        format!(
            "Bearer {}",
            cluster.token(user, admin, 3600).expect("token")
        )
    };
    let (alice, bob, root) = (
        bearer("alice", false),
        bearer("bob", false),
        bearer("root", true),
    );
    let as_user = |token: &str, method: &str, path: &str, body: &str| -> (u16, Value) {
        let (status, text) = cluster
            .http_request_with_headers(follower, method, path, &[("Authorization", token)], body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: {status}, not JSON ({e}): {text:.300}"));
        (status, value)
    };

    let (status, anonymous) = call(&cluster, follower, "GET", "/v1/jobs", "");
    assert_eq!(status, 401, "{anonymous}");
    assert_eq!(anonymous["code"], "unauthenticated");

    let submit = r#"{"request_id":"rest-auth-1","command":"sleep 300"}"#;
    let start = Instant::now();
    let (status, submitted) = loop {
        let (status, value) = as_user(&alice, "POST", "/v1/jobs", submit);
        if status != 503 || start.elapsed() > JOB_DEADLINE {
            break (status, value);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 201, "{submitted}");
    let job_id = submitted["job_id"].as_u64().expect("job id");
    let (status, job) = as_user(&bob, "GET", &format!("/v1/jobs/{job_id}"), "");
    assert_eq!(status, 200, "users read everything: {job}");
    assert_eq!(job["spec"]["user"], "alice", "the token's user: {job}");

    let (status, refused) = as_user(&bob, "DELETE", &format!("/v1/jobs/{job_id}"), "");
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "permission_denied");
    let (status, refused) = as_user(&alice, "PUT", "/v1/qos/fast", r#"{"priority":5}"#);
    assert_eq!(status, 403, "{refused}");
    let (status, put) = as_user(&root, "PUT", "/v1/qos/fast", r#"{"priority":5}"#);
    assert_eq!(status, 200, "{put}");
    let (status, cancelled) = as_user(&alice, "DELETE", &format!("/v1/jobs/{job_id}"), "");
    assert_eq!(status, 200, "{cancelled}");
}
