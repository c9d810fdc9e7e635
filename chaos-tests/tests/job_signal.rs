//! Signals on a real cluster (3 `berthd` processes, a real `berth-agent`,
//! real job processes): a job submitted with `--signal=USR1@3` and a 6 s
//! time limit traps USR1 and writes the time it arrived, which must be
//! about 3 s after the job started and before its limit ends it TIMEOUT;
//! and `scancel --signal` (ControlJob SIGNAL, batch shell only) reaches a
//! running job through the Raft log and the assignment stream without
//! stopping it. Every wait is a condition with a deadline.

use std::path::Path;
use std::time::Duration;

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::{ControlJobRequest, Job, JobSpec, JobState};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

async fn submit(cluster: &LocalCluster, request_id: &str, spec: JobSpec) -> u64 {
    match cluster.submit_retrying(request_id, spec, DEADLINE).await {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    }
}

fn is(state: JobState) -> impl Fn(&Job) -> bool {
    move |j| j.state == state as i32
}

/// Traps USR1 (writing the wall clock in ms to `marker`, then `exit 0`
/// when `exit_on_signal`), writes `ready` once the trap is set, and waits
/// up to 60 s in short sleeps so the shell runs the trap promptly.
fn trapping_command(marker: &Path, ready: &Path, exit_on_signal: bool) -> String {
    let then = if exit_on_signal { "; exit 0" } else { "" };
    format!(
        "trap 'date +%s%3N > {m}.tmp && mv {m}.tmp {m}{then}' USR1; touch {r}; \
         i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
        m = marker.display(),
        r = ready.display(),
    )
}

/// Waits up to [`DEADLINE`] for `path` to exist and returns its text.
async fn wait_for_file(path: &Path) -> String {
    let start = std::time::Instant::now();
    while start.elapsed() < DEADLINE {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not appear within {DEADLINE:?}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_signal_before_the_limit_and_scancel_signal_reach_the_job() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");

    // --signal=USR1@3 with a 6 s limit: USR1 about 3 s after the start.
    let warned = tmp.path().join("warned");
    let warn_job = submit(
        &cluster,
        "warn",
        JobSpec {
            name: "warn".into(),
            user: "tester".into(),
            command: trapping_command(&warned, &tmp.path().join("warn-ready"), false),
            cpus: 1,
            time_limit_s: 6,
            warn_signal: 10,
            warn_signal_before_s: 3,
            ..Default::default()
        },
    )
    .await;

    // A job signalled by scancel --signal --batch, which then ends itself.
    let signalled = tmp.path().join("signalled");
    let ready = tmp.path().join("ready");
    let scancel_job = submit(
        &cluster,
        "scancel",
        JobSpec {
            name: "scancel".into(),
            user: "tester".into(),
            command: trapping_command(&signalled, &ready, true),
            cpus: 1,
            ..Default::default()
        },
    )
    .await;

    let marker_ms: u64 = wait_for_file(&warned)
        .await
        .trim()
        .parse()
        .expect("marker is a time in ms");
    let running = cluster
        .wait_for_job(warn_job, "running", DEADLINE, |j| j.start_ms > 0)
        .await;
    let after_ms = marker_ms as i64 - running.start_ms as i64;
    eprintln!("--signal=USR1@3 with a 6 s limit arrived {after_ms} ms after the start");
    assert!(
        (2_900..5_500).contains(&after_ms),
        "USR1 arrived {after_ms} ms after the start; expected about 3000 (6 s limit, @3)"
    );
    let ended = cluster
        .wait_for_job(warn_job, "TIMEOUT", DEADLINE, is(JobState::Timeout))
        .await;
    assert!(ended.end_ms >= marker_ms, "the signal came before the end");

    wait_for_file(&ready).await;
    cluster
        .wait_for_job(scancel_job, "running", DEADLINE, is(JobState::Running))
        .await;
    let mut client = cluster.client().await.expect("client");
    client
        .control_job(ControlJobRequest {
            job_id: scancel_job,
            action: Action::Signal as i32,
            admin: false,
            signal: 10,
            batch_only: true,
        })
        .await
        .expect("signal accepted");
    wait_for_file(&signalled).await;
    // The trap ends the job with 0: the signal itself stopped nothing.
    let done = cluster
        .wait_for_job(scancel_job, "COMPLETED", DEADLINE, is(JobState::Completed))
        .await;
    assert_eq!(done.exit_code, 0);
    // A finished job cannot be signalled.
    let refused = client
        .control_job(ControlJobRequest {
            job_id: scancel_job,
            action: Action::Signal as i32,
            signal: 10,
            ..Default::default()
        })
        .await
        .expect_err("a finished job is refused");
    assert!(
        refused
            .message()
            .contains("only a running job can be signalled"),
        "{}",
        refused.message()
    );
}
