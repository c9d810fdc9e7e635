//! `scontrol update` on a real cluster (3 `berthd` processes, a real
//! `berth-agent`): a held pending job gets a new time limit and name (the
//! job shows them, and its history says `Updated: TimeLimit 10:00 ->
//! 5:00, JobName before -> after`) and an administrator's fixed priority
//! (`Priority=5000`); a running job's limit lowered to 3 s
//! ends it TIMEOUT about then; a running job's name cannot change. Every
//! wait is a condition with a deadline.

use std::time::Duration;

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::{ControlJobRequest, JobSpec, JobState, UpdateJobRequest};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_job_changes_and_a_running_one_gets_a_shorter_limit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let job_id = cluster
        .submit_retrying(
            "u",
            JobSpec {
                name: "before".into(),
                user: "tester".into(),
                command: "sleep 120".into(),
                cpus: 1,
                time_limit_s: 600,
                hold: true,
                ..Default::default()
            },
            DEADLINE,
        )
        .await
        .expect("submit")
        .job_id;
    let mut client = cluster.client().await.expect("client");
    let answer = client
        .update_job(UpdateJobRequest {
            job_id,
            time_limit_s: Some(300),
            name: Some("after".into()),
            ..Default::default()
        })
        .await
        .expect("update accepted")
        .into_inner();
    assert_eq!(
        answer.changes,
        ["TimeLimit 10:00 -> 5:00", "JobName before -> after"]
    );
    let job = cluster.get_job(job_id).await.expect("job");
    let spec = job.spec.expect("spec");
    assert_eq!((spec.time_limit_s, spec.name.as_str()), (300, "after"));
    let events: Vec<String> = cluster
        .job_events(job_id)
        .await
        .into_iter()
        .map(|(_, message)| message)
        .collect();
    assert!(
        events
            .iter()
            .any(|m| m == "Updated: TimeLimit 10:00 -> 5:00, JobName before -> after"),
        "{events:?}"
    );

    // An administrator (every caller, without auth) fixes its priority.
    // A held job is not in the pass (its priority shows as 0, as in
    // Slurm), so the total is not shown before the release.
    let answer = client
        .update_job(UpdateJobRequest {
            job_id,
            priority: Some(5000),
            ..Default::default()
        })
        .await
        .expect("priority accepted")
        .into_inner();
    assert_eq!(answer.changes, ["Priority multifactor -> 5000"]);
    let job = cluster.get_job(job_id).await.expect("job");
    assert_eq!(job.priority, 0);

    // Released, it runs (and is back under multifactor); its limit
    // lowered to 3 s ends it TIMEOUT.
    client
        .control_job(ControlJobRequest {
            job_id,
            action: Action::Release as i32,
            ..Default::default()
        })
        .await
        .expect("release");
    let running = cluster
        .wait_for_job(job_id, "running", DEADLINE, |j| {
            j.state == JobState::Running as i32
        })
        .await;
    let refused = client
        .update_job(UpdateJobRequest {
            job_id,
            name: Some("again".into()),
            ..Default::default()
        })
        .await
        .expect_err("a running job keeps its name");
    assert!(
        refused.message().contains("no longer pending execution"),
        "{}",
        refused.message()
    );
    client
        .update_job(UpdateJobRequest {
            job_id,
            time_limit_s: Some(3),
            ..Default::default()
        })
        .await
        .expect("a lower limit is accepted while it runs");
    let ended = cluster
        .wait_for_job(job_id, "TIMEOUT", DEADLINE, |j| {
            j.state == JobState::Timeout as i32
        })
        .await;
    let ran_ms = ended.end_ms.saturating_sub(running.start_ms);
    eprintln!("a running job's limit lowered to 3 s: it ended after {ran_ms} ms");
    assert!(
        (3_000..30_000).contains(&ran_ms),
        "ended {ran_ms} ms after its start; the new limit is 3 s (plus the stop)"
    );
}

/// `berth scontrol update` as a user types it, on a held array of three
/// tasks: the array's id changes every task, `ID_1` only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arrays_id_updates_every_task_and_a_task_id_only_that_task() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let array = cluster
        .submit_retrying(
            "arr",
            JobSpec {
                name: "arr".into(),
                user: "tester".into(),
                command: "true".into(),
                cpus: 1,
                time_limit_s: 600,
                hold: true,
                array: "0-2".into(),
                ..Default::default()
            },
            DEADLINE,
        )
        .await
        .expect("submit")
        .job_id;
    let scontrol = |words: Vec<String>| {
        let servers = cluster.servers().join(",");
        async move {
            let out = tokio::process::Command::new(
                berth_chaos::harness::tool("berth").expect("berth binary"),
            )
            .args(["--server", &servers, "scontrol", "update"])
            .args(&words)
            .output()
            .await
            .expect("run berth");
            assert!(
                out.status.success(),
                "{words:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    scontrol(vec![format!("JobId={array}"), "TimeLimit=5:00".into()]).await;
    scontrol(vec![format!("JobId={array}_1"), "Name=middle".into()]).await;
    let mut client = cluster.client().await.expect("client");
    let mut seen = Vec::new();
    for job_id in array..array + 3 {
        let job = client
            .get_job(berth_proto::api::GetJobRequest {
                job_id,
                stale: false,
            })
            .await
            .expect("task")
            .into_inner();
        let spec = job.spec.expect("spec");
        seen.push((spec.name, spec.time_limit_s));
    }
    assert_eq!(
        seen,
        [
            ("arr".to_string(), 300),
            ("middle".to_string(), 300),
            ("arr".to_string(), 300)
        ]
    );
}
