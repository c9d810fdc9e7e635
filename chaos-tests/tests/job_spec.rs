//! The scheduling parts of a job spec on a real cluster (3 `berthd`
//! processes, a real `berth-agent`, real job processes): an `afterok`
//! chain (B waits with reason Dependency until A completes, then runs),
//! a dependency on a failed job (DependencyNeverSatisfied), a dependency on
//! an unknown job refused at submit, and a begin time in the future
//! (BeginTime); a job array whose tasks see Slurm's array variables and
//! run at most `%max` at once, and whose id cancels every task. Every wait
//! is a condition with a deadline.

use std::path::Path;
use std::time::Duration;

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::{CancelJobRequest, Job, JobSpec, JobState};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

async fn submit(cluster: &LocalCluster, request_id: &str, spec: JobSpec) -> u64 {
    match cluster.submit_retrying(request_id, spec, DEADLINE).await {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    }
}

fn spec(name: &str, command: String) -> JobSpec {
    JobSpec {
        name: name.into(),
        user: "tester".into(),
        command,
        cpus: 1,
        ..Default::default()
    }
}

async fn wait_for_job(
    cluster: &LocalCluster,
    job_id: u64,
    what: &str,
    done: impl Fn(&Job) -> bool,
) -> Job {
    cluster.wait_for_job(job_id, what, DEADLINE, done).await
}

fn pending_with(reason: &'static str) -> impl Fn(&Job) -> bool {
    move |j| j.state == JobState::Pending as i32 && j.reason == reason
}

fn is(state: JobState) -> impl Fn(&Job) -> bool {
    move |j| j.state == state as i32
}

fn wait_file(path: &Path) -> String {
    format!("while [ ! -e {0} ]; do sleep 0.1; done", path.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependencies_and_begin_time_hold_jobs_with_their_reasons() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let go = tmp.path().join("go");
    let order = tmp.path().join("order.txt");

    // A runs until told to end; B waits for it to complete.
    let a = submit(
        &cluster,
        "a",
        spec(
            "a",
            format!("{}; echo a >> {}", wait_file(&go), order.display()),
        ),
    )
    .await;
    let b = submit(
        &cluster,
        "b",
        JobSpec {
            dependency: format!("afterok:{a}"),
            ..spec("b", format!("echo b >> {}", order.display()))
        },
    )
    .await;
    // A job that fails, and one that can then never run.
    let fails = submit(&cluster, "fails", spec("fails", "exit 2".into())).await;
    let never = submit(
        &cluster,
        "never",
        JobSpec {
            dependency: format!("afterok:{fails}"),
            ..spec("never", "true".into())
        },
    )
    .await;
    // A begin time an hour away.
    let begin_ms = now_ms() + 3_600_000;
    let later = submit(
        &cluster,
        "later",
        JobSpec {
            begin_ms,
            ..spec("later", "true".into())
        },
    )
    .await;

    wait_for_job(&cluster, a, "running", is(JobState::Running)).await;
    let waiting = wait_for_job(&cluster, b, "Dependency", pending_with("Dependency")).await;
    assert_eq!(waiting.reason_text, "waiting for the jobs it depends on");
    assert_eq!(
        waiting.spec.as_ref().map(|s| s.dependency.as_str()),
        Some(format!("afterok:{a}").as_str())
    );
    wait_for_job(&cluster, fails, "failed", is(JobState::Failed)).await;
    wait_for_job(
        &cluster,
        never,
        "DependencyNeverSatisfied",
        pending_with("DependencyNeverSatisfied"),
    )
    .await;
    let held = wait_for_job(&cluster, later, "BeginTime", pending_with("BeginTime")).await;
    assert_eq!(held.spec.as_ref().map(|s| s.begin_ms), Some(begin_ms));

    // Still waiting while A runs; then A completes and B runs after it.
    let still = cluster.get_job(b).await.expect("b");
    assert_eq!(still.reason, "Dependency");
    std::fs::write(&go, "").expect("let A end");
    wait_for_job(&cluster, a, "completed", is(JobState::Completed)).await;
    wait_for_job(&cluster, b, "completed", is(JobState::Completed)).await;
    assert_eq!(std::fs::read_to_string(&order).expect("order"), "a\nb\n");

    // A dependency on a job that does not exist is refused by name.
    let mut client = cluster.client().await.expect("client");
    let refused = client
        .submit_job(berth_proto::api::SubmitJobRequest {
            request_id: "unknown-dep".into(),
            spec: Some(JobSpec {
                dependency: "afterany:999".into(),
                ..spec("x", "true".into())
            }),
        })
        .await
        .expect_err("a dependency on an unknown job is refused");
    assert_eq!(
        refused.message(),
        "dependency afterany:999: job 999 does not exist"
    );

    // The jobs that cannot run yet are cancelled like any pending job.
    for id in [never, later] {
        client
            .cancel_job(CancelJobRequest {
                job_id: id,
                only_task: false,
            })
            .await
            .expect("cancel");
        wait_for_job(&cluster, id, "cancelled", is(JobState::Cancelled)).await;
    }
}

/// Now in ms since the epoch (the leader stamps with the same clock).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_tasks_run_with_their_variables_within_max_and_cancel_together() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agent_cpus: 8,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let go = tmp.path().join("go");
    let out = tmp.path().join("tasks.txt");
    let array = submit(
        &cluster,
        "array",
        JobSpec {
            array: "0-3%2".into(),
            ..spec(
                "arr",
                format!(
                    "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT \
                     $SLURM_ARRAY_TASK_MIN $SLURM_ARRAY_TASK_MAX >> {}; {}",
                    out.display(),
                    wait_file(&go)
                ),
            )
        },
    )
    .await;
    // Two run; the others wait for the %max.
    wait_for_job(&cluster, array, "running", is(JobState::Running)).await;
    wait_for_job(&cluster, array + 1, "running", is(JobState::Running)).await;
    for task in [array + 2, array + 3] {
        let job = wait_for_job(
            &cluster,
            task,
            "JobArrayTaskLimit",
            pending_with("JobArrayTaskLimit"),
        )
        .await;
        let spec = job.spec.expect("spec");
        assert_eq!(
            (spec.array_job_id, spec.array_task_id),
            (array, (task - array) as u32)
        );
    }
    std::fs::write(&go, "").expect("let the tasks end");
    for task in array..array + 4 {
        wait_for_job(&cluster, task, "completed", is(JobState::Completed)).await;
    }
    let mut lines: Vec<String> = std::fs::read_to_string(&out)
        .expect("task output")
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    let want: Vec<String> = (0..4).map(|t| format!("{array} {t} 4 0 3")).collect();
    assert_eq!(lines, want);

    // Cancelling the array's id cancels every task, running or pending.
    let stay = tmp.path().join("never");
    let second = submit(
        &cluster,
        "second",
        JobSpec {
            array: "1-3%1".into(),
            ..spec("arr2", wait_file(&stay))
        },
    )
    .await;
    wait_for_job(&cluster, second, "running", is(JobState::Running)).await;
    let mut client = cluster.client().await.expect("client");
    client
        .cancel_job(CancelJobRequest {
            job_id: second,
            only_task: false,
        })
        .await
        .expect("cancel the array");
    for task in second..second + 3 {
        wait_for_job(&cluster, task, "cancelled", is(JobState::Cancelled)).await;
    }
}
