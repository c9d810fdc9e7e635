//! Authentication and authorization on a real cluster run with auth on:
//! nodes reach each other and the agent registers with the cluster secret;
//! an unauthenticated caller gets nothing; users act only on their own
//! jobs; policy changes need the admin role; tokens expire; `sbatch`
//! carries the user's `BERTH_TOKEN`. The web UI applies the same
//! authentication, and with `[ui] private_job_details` shows a job's
//! details to its owner and admins only.

use std::time::{Duration, Instant};

use berth_auth::grpc::{AttachCredentials, CredentialedChannel};
use berth_chaos::harness::{tool, ClusterOptions, LocalCluster};
use berth_proto::api::berth_api_client::BerthApiClient;
use berth_proto::api::{
    CancelJobRequest, GetJobRequest, GetStepAccessRequest, JobSpec, JobState, ListJobsRequest, Qos,
    ReleaseAllocationRequest, SubmitJobRequest,
};
use tonic::Code;

const DEADLINE: Duration = Duration::from_secs(60);

type Client = BerthApiClient<CredentialedChannel>;

/// A client of the leader's address carrying `token` (None: no token).
async fn client(cluster: &LocalCluster, token: Option<&str>) -> Client {
    let addr = cluster.servers()[0].clone();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    BerthApiClient::with_interceptor(channel, AttachCredentials::bearer(token))
}

fn spec(user: &str, command: &str) -> JobSpec {
    JobSpec {
        user: user.into(),
        command: command.into(),
        cpus: 1,
        ..Default::default()
    }
}

async fn submit(c: &mut Client, id: &str, spec: JobSpec) -> Result<u64, tonic::Status> {
    c.submit_job(SubmitJobRequest {
        request_id: id.into(),
        spec: Some(spec),
    })
    .await
    .map(|r| r.into_inner().job_id)
}

#[tokio::test(flavor = "multi_thread")]
async fn only_authenticated_and_authorized_callers_are_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        auth: true,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start");
    // The nodes elect a leader only if the cluster secret works between them.
    cluster.wait_for_leader(DEADLINE).await.expect("leader");

    let bob_token = cluster.token("bob", false, 3600).expect("token");
    let admin_token = cluster.token("root", true, 3600).expect("token");
    let expired = cluster.token("bob", false, 0).expect("token");
    let mut anonymous = client(&cluster, None).await;
    let mut bob = client(&cluster, Some(&bob_token)).await;
    let mut admin = client(&cluster, Some(&admin_token)).await;

    // Nothing for an unauthenticated caller, reads included.
    let list = anonymous
        .list_jobs(ListJobsRequest::default())
        .await
        .expect_err("anonymous list");
    assert_eq!(list.code(), Code::Unauthenticated);
    let sub = submit(&mut anonymous, "anon", spec("bob", "true"))
        .await
        .expect_err("anonymous submit");
    assert_eq!(sub.code(), Code::Unauthenticated);
    let mut stale = client(&cluster, Some(&expired)).await;
    let old = stale
        .list_jobs(ListJobsRequest::default())
        .await
        .expect_err("expired token");
    assert_eq!(old.code(), Code::Unauthenticated);
    assert!(
        old.message().starts_with("token expired"),
        "{}",
        old.message()
    );

    // Bob submits as himself (the spec's user filled in from the token),
    // not as anyone else.
    let mut bob_spec = spec("", "sleep 30");
    bob_spec.user.clear();
    let job = submit(&mut bob, "bob-1", bob_spec)
        .await
        .expect("bob submits");
    let as_alice = submit(&mut bob, "bob-2", spec("alice", "true"))
        .await
        .expect_err("bob as alice");
    assert_eq!(as_alice.code(), Code::PermissionDenied);

    // The agent registered with the cluster secret: the job runs.
    let start = Instant::now();
    loop {
        let j = bob
            .get_job(GetJobRequest {
                job_id: job,
                stale: false,
            })
            .await
            .expect("get job")
            .into_inner();
        assert_eq!(j.spec.map(|s| s.user), Some("bob".to_string()));
        if j.state == JobState::Running as i32 {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "bob's job never ran: {}",
            j.reason
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // `sbatch` (`berth` linked by that name) submits with the user's
    // BERTH_TOKEN, moving past a dead server to a live one.
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let sbatch = bin.join("sbatch");
    std::os::unix::fs::symlink(tool("berth").expect("berth"), &sbatch).expect("link");
    let config = tmp.path().join("client.toml");
    std::fs::write(&config, "").expect("empty client config");
    let servers = format!("127.0.0.1:1,{}", cluster.servers().join(","));
    let run_sbatch = |token: Option<&str>| {
        let mut command = tokio::process::Command::new(&sbatch);
        command
            .args(["-H", "-J", "held", "-t", "10", "--wrap", "echo hi"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("USER", "bob")
            .env("BERTH_SERVER", &servers)
            .env("BERTH_CONFIG", &config)
            .current_dir(tmp.path());
        if let Some(token) = token {
            command.env("BERTH_TOKEN", token);
        }
        async move {
            tokio::time::timeout(DEADLINE, command.output())
                .await
                .expect("sbatch ran past the deadline")
                .expect("run sbatch")
        }
    };
    let out = run_sbatch(Some(bob_token.as_str())).await;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let held: u64 = said
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {said:?}"));
    let held = admin
        .get_job(GetJobRequest {
            job_id: held,
            stale: false,
        })
        .await
        .expect("the sbatch job")
        .into_inner();
    let held_spec = held.spec.clone().expect("a spec");
    assert_eq!(held.reason, "JobHeldUser", "{held:?}");
    assert_eq!(
        (
            held_spec.name.as_str(),
            held_spec.user.as_str(),
            held_spec.command.as_str(),
            held_spec.time_limit_s
        ),
        ("held", "bob", "echo hi", 600)
    );
    // Without a token the cluster refuses, and says so in one line.
    let out = run_sbatch(None).await;
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.starts_with("sbatch: error: ") && said.contains("Unauthenticated"),
        "{said}"
    );
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");

    // Policy needs the admin role.
    let qos = Qos {
        name: "team".into(),
        ..Default::default()
    };
    let denied = bob
        .upsert_qos(qos.clone())
        .await
        .expect_err("bob upserts qos");
    assert_eq!(denied.code(), Code::PermissionDenied);
    admin.upsert_qos(qos).await.expect("admin upserts qos");

    // Another user cannot cancel bob's job; the admin can.
    let eve_token = cluster.token("eve", false, 3600).expect("token");
    let mut eve = client(&cluster, Some(&eve_token)).await;
    let no = eve
        .cancel_job(CancelJobRequest {
            job_id: job,
            only_task: false,
        })
        .await
        .expect_err("eve cancels bob's job");
    assert_eq!(no.code(), Code::PermissionDenied);
    // Nor reach its hosts for steps or end it; bob can reach them, with
    // a credential made from the cluster secret.
    let no = eve
        .get_step_access(GetStepAccessRequest { job_id: job })
        .await
        .expect_err("eve asks for bob's step access");
    assert_eq!(no.code(), Code::PermissionDenied);
    let no = eve
        .release_allocation(ReleaseAllocationRequest {
            job_id: job,
            exit_code: 0,
        })
        .await
        .expect_err("eve releases bob's job");
    assert_eq!(no.code(), Code::PermissionDenied);
    let access = bob
        .get_step_access(GetStepAccessRequest { job_id: job })
        .await
        .expect("bob's step access")
        .into_inner();
    assert_eq!(access.credential.len(), 64, "{access:?}");
    // A batch job ends with its script, not by a release.
    let batch = bob
        .release_allocation(ReleaseAllocationRequest {
            job_id: job,
            exit_code: 0,
        })
        .await
        .expect_err("a batch job is not released");
    assert_eq!(batch.code(), Code::FailedPrecondition);
    admin
        .cancel_job(CancelJobRequest {
            job_id: job,
            only_task: false,
        })
        .await
        .expect("admin cancels");

    // The internal services refuse callers without the cluster secret.
    let addr = cluster.servers()[0].clone();
    let mut raft = berth_proto::raft::raft_transport_client::RaftTransportClient::connect(format!(
        "http://{addr}"
    ))
    .await
    .expect("connect raft");
    let vote = raft
        .vote(berth_proto::raft::RaftMessage {
            payload: Vec::new(),
            ..Default::default()
        })
        .await
        .expect_err("vote without the cluster secret");
    assert_eq!(vote.code(), Code::Unauthenticated);
    let mut agent = berth_proto::agent::agent_service_client::AgentServiceClient::connect(format!(
        "http://{addr}"
    ))
    .await
    .expect("connect agent service");
    let reg = agent
        .register(berth_proto::agent::RegisterRequest::default())
        .await
        .expect_err("register without the cluster secret");
    assert_eq!(reg.code(), Code::Unauthenticated);
}

/// A UI page from node 1 as the holder of `token` (cookie; None: none).
fn ui_page(cluster: &LocalCluster, path: &str, token: Option<&str>) -> (u16, String) {
    let cookie = token.map(|t| format!("berth_token={t}"));
    let headers: Vec<(&str, &str)> = cookie.iter().map(|c| ("Cookie", c.as_str())).collect();
    cluster
        .http_request_with_headers(1, "GET", path, &headers, "")
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_ui_needs_a_token_and_keeps_private_details_private() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        auth: true,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(tmp.path(), &options).expect("configure");
    cluster
        .append_node_toml("[ui]\nprivate_job_details = true")
        .expect("ui config");
    cluster.start_all().expect("start");
    cluster.wait_for_leader(DEADLINE).await.expect("leader");
    let bob_token = cluster.token("bob", false, 3600).expect("token");
    let eve_token = cluster.token("eve", false, 3600).expect("token");
    let admin_token = cluster.token("root", true, 3600).expect("token");
    let mut bob = client(&cluster, Some(&bob_token)).await;
    let secret_command = "sleep 31 # bob-private-command";
    let job = submit(&mut bob, "bob-ui", spec("bob", secret_command))
        .await
        .expect("bob submits");

    // No token: a sign-in page with 401, and none of the queue.
    let (status, page) = ui_page(&cluster, "/ui/queue", None);
    assert_eq!(status, 401, "{page:.400}");
    assert!(page.contains("Sign-in needed"), "{page:.400}");
    assert!(!page.contains(&format!("/ui/jobs/{job}")), "{page:.400}");

    // Any user sees every job's public fields in the queue.
    let job_link = format!("<a href=\"/ui/jobs/{job}\">{job}</a>");
    let start = Instant::now();
    loop {
        let (status, page) = ui_page(&cluster, "/ui/queue", Some(&eve_token));
        if status == 200 && page.contains(&job_link) {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "eve's queue never listed job {job}: {status} {page:.400}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The job's details: its owner and an admin, not eve.
    let path = format!("/ui/jobs/{job}");
    let (status, page) = ui_page(&cluster, &path, Some(&eve_token));
    assert_eq!(status, 200, "{page:.400}");
    assert!(
        page.contains("private to its owner (bob) and admins"),
        "{page:.600}"
    );
    assert!(!page.contains("bob-private-command"), "{page:.600}");
    for token in [&bob_token, &admin_token] {
        let (status, page) = ui_page(&cluster, &path, Some(token));
        assert_eq!(status, 200, "{page:.400}");
        assert!(page.contains("bob-private-command"), "{page:.600}");
    }
}
