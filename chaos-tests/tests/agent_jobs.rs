//! The agent's side of a job's life on a real cluster (3 `berthd`
//! processes, real `berth-agent`s, real job processes): a kill -9 of the
//! agent and a restart re-adopt a running job, which the cluster sees keep
//! running and then end with its real exit code; a job that died while
//! its agent was down ends NODE_FAIL; a requeued job keeps its id and runs
//! again with SLURM_RESTART_COUNT incremented; a job's QOS GraceTime
//! replaces the cluster's stop grace; a GPU host's jobs see the
//! device indices the leader gave them. Every wait is a condition with a
//! deadline.

use std::path::Path;
use std::time::{Duration, Instant};

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::{Account, CancelJobRequest, ControlJobRequest, Job, JobSpec, JobState, Qos};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

async fn started(tmp: &Path, options: ClusterOptions) -> LocalCluster {
    let cluster = LocalCluster::start(tmp, &options).expect("start cluster");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    cluster
}

/// Submits through any live node, retrying with the same request id.
async fn submit(cluster: &LocalCluster, request_id: &str, spec: JobSpec) -> u64 {
    match cluster.submit_retrying(request_id, spec, DEADLINE).await {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    }
}

fn spec(command: String) -> JobSpec {
    JobSpec {
        name: "agent-e2e".into(),
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

async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    berth_chaos::harness::wait_until(what, DEADLINE, cond).await
}

fn read(path: &Path) -> String {
    berth_chaos::harness::read_or_empty(path)
}

/// How many times agent 1 has registered, from its log.
fn registrations(dir: &Path) -> usize {
    read(&dir.join("agent-1.log"))
        .lines()
        .filter(|l| l.contains(" registered"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_agent_readopts_its_running_job_and_reports_the_real_exit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cluster = started(tmp.path(), ClusterOptions::default()).await;
    let runs = tmp.path().join("runs.txt");
    let go = tmp.path().join("go");
    let job = submit(
        &cluster,
        "readopt",
        spec(format!(
            "echo started >> {0}; while [ ! -e {1} ]; do sleep 0.1; done; echo ended >> {0}; exit 3",
            runs.display(),
            go.display()
        )),
    )
    .await;
    let first = wait_for_job(&cluster, job, "running", |j| {
        j.state == JobState::Running as i32
    })
    .await;
    wait_until("the job's first line", || read(&runs) == "started\n").await;
    wait_until("the agent's first registration", || {
        registrations(tmp.path()) >= 1
    })
    .await;

    cluster.kill_agent(1).expect("kill agent");
    cluster.start_agent(1).expect("restart agent");
    wait_until("the restarted agent's registration", || {
        registrations(tmp.path()) >= 2
    })
    .await;
    // Registered with the job listed as running: no NODE_FAIL, same
    // allocation.
    let after = cluster.get_job(job).await.expect("job");
    assert_eq!(after.state, JobState::Running as i32, "{after:?}");
    assert_eq!(after.alloc_id, first.alloc_id);
    assert!(read(&tmp.path().join("agent-1.log")).contains("re-adopting a job still running"));

    std::fs::write(&go, "").expect("let the job end");
    let done = wait_for_job(&cluster, job, "its real exit", |j| {
        j.state == JobState::Failed as i32
    })
    .await;
    assert_eq!((done.exit_code, done.exit_signal), (3, 0));
    assert_eq!(
        read(&runs),
        "started\nended\n",
        "the job ran more than once"
    );
    // The host takes work again.
    let next = submit(&cluster, "after-readopt", spec("exit 0".into())).await;
    wait_for_job(&cluster, next, "completed", |j| {
        j.state == JobState::Completed as i32
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_that_died_while_its_agent_was_down_ends_node_fail() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cluster = started(tmp.path(), ClusterOptions::default()).await;
    let pid_file = tmp.path().join("pid.txt");
    let job = submit(
        &cluster,
        "died-while-down",
        spec(format!("echo $$ > {}; sleep 1000", pid_file.display())),
    )
    .await;
    wait_for_job(&cluster, job, "running", |j| {
        j.state == JobState::Running as i32
    })
    .await;
    wait_until("the job's pid", || read(&pid_file).ends_with('\n')).await;
    wait_until("the agent's first registration", || {
        registrations(tmp.path()) >= 1
    })
    .await;
    cluster.kill_agent(1).expect("kill agent");

    // The whole job, shim included, dies while no agent watches.
    let shell: i32 = read(&pid_file).trim().parse().expect("pid");
    let stat = read(Path::new(&format!("/proc/{shell}/stat")));
    let pgid: i32 = stat[stat.rfind(')').expect("stat") + 1..]
        .split_whitespace()
        .nth(2)
        .and_then(|f| f.parse().ok())
        .expect("pgid");
    assert!(pgid > 1);
    // SAFETY: kill(2) only sends a signal, to the job's own group.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGKILL) }, 0);

    cluster.start_agent(1).expect("restart agent");
    wait_for_job(&cluster, job, "NODE_FAIL", |j| {
        j.state == JobState::NodeFail as i32
    })
    .await;
    assert!(read(&tmp.path().join("agent-1.log")).contains("left no exit status"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeued_job_keeps_its_id_and_runs_again_with_its_restart_count() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started(tmp.path(), ClusterOptions::default()).await;
    let runs = tmp.path().join("runs.txt");
    let job = submit(
        &cluster,
        "requeue-runs-again",
        spec(format!(
            "echo $SLURM_JOB_ID $SLURM_RESTART_COUNT >> {}; sleep 1000",
            runs.display()
        )),
    )
    .await;
    let first = wait_for_job(&cluster, job, "running", |j| {
        j.state == JobState::Running as i32
    })
    .await;
    wait_until("the first run", || read(&runs).lines().count() == 1).await;

    let mut client = cluster.client().await.expect("client");
    client
        .control_job(ControlJobRequest {
            job_id: job,
            action: Action::Requeue as i32,
            admin: false,
            ..Default::default()
        })
        .await
        .expect("requeue");
    wait_for_job(&cluster, job, "running again", |j| {
        j.state == JobState::Running as i32 && j.alloc_id != first.alloc_id
    })
    .await;
    wait_until("the second run", || read(&runs).lines().count() == 2).await;
    assert_eq!(read(&runs), format!("{job} 0\n{job} 1\n"));

    client
        .cancel_job(CancelJobRequest {
            job_id: job,
            only_task: false,
        })
        .await
        .expect("cancel");
    wait_for_job(&cluster, job, "cancelled", |j| {
        j.state == JobState::Cancelled as i32
    })
    .await;
    assert_eq!(read(&runs).lines().count(), 2, "a run after the cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_host_jobs_see_their_device_indices() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cluster = LocalCluster::configure(
        tmp.path(),
        &ClusterOptions {
            agent_cpus: 4,
            ..ClusterOptions::default()
        },
    )
    .expect("configure");
    let gpus: String = (0..4)
        .map(|i| format!("[[gpus]]\nindex = {i}\ntype = \"h100\"\nuuid = \"GPU-d-{i}\"\n"))
        .collect();
    cluster
        .set_agent_fake_inventory(1, &gpus)
        .expect("fake inventory");
    cluster.start_all().expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");

    let out = |n: u32| tmp.path().join(format!("gpus-{n}.txt"));
    let gpu_spec = |n: u32| {
        JobSpec {
        gres: vec!["gpu:2".into()],
        ..spec(format!(
            "echo $CUDA_VISIBLE_DEVICES $ROCR_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES > {}; sleep 1000",
            out(n).display()
        ))
    }
    };
    let first = submit(&cluster, "gpu-1", gpu_spec(1)).await;
    wait_until("the first GPU job's devices", || {
        read(&out(1)).ends_with('\n')
    })
    .await;
    let second = submit(&cluster, "gpu-2", gpu_spec(2)).await;
    wait_until("the second GPU job's devices", || {
        read(&out(2)).ends_with('\n')
    })
    .await;
    // Lowest free devices first, each job its own.
    assert_eq!(read(&out(1)), "0,1 0,1 0,1\n");
    assert_eq!(read(&out(2)), "2,3 2,3 2,3\n");

    let mut client = cluster.client().await.expect("client");
    for job in [first, second] {
        client
            .cancel_job(CancelJobRequest {
                job_id: job,
                only_task: false,
            })
            .await
            .expect("cancel");
        wait_for_job(&cluster, job, "cancelled", |j| {
            j.state == JobState::Cancelled as i32
        })
        .await;
    }
}

/// The harness's cluster stop grace is 5 s; a job of a QOS whose GraceTime
/// is 1 s gets SIGTERM, then SIGKILL one second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_grace_time_is_the_stop_grace() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started(tmp.path(), ClusterOptions::default()).await;
    let mut client = cluster.client().await.expect("client");
    client
        .upsert_qos(Qos {
            name: "short-grace".into(),
            grace_time_s: 1,
            ..Default::default()
        })
        .await
        .expect("upsert qos");
    client
        .upsert_account(Account {
            name: "lab".into(),
            users: vec!["tester".into()],
            default_qos: "short-grace".into(),
            ..Default::default()
        })
        .await
        .expect("upsert account");
    let term = tmp.path().join("term.txt");
    let ready = tmp.path().join("ready.txt");
    let job = submit(
        &cluster,
        "qos-grace",
        JobSpec {
            qos: "short-grace".into(),
            ..spec(format!(
                "trap 'echo term >> {0}' TERM; touch {1}; while :; do sleep 0.05; done",
                term.display(),
                ready.display()
            ))
        },
    )
    .await;
    wait_until("the job's trap", || ready.exists()).await;
    client
        .cancel_job(CancelJobRequest {
            job_id: job,
            only_task: false,
        })
        .await
        .expect("cancel");
    wait_until("SIGTERM reaching the job", || read(&term) == "term\n").await;
    let termed = Instant::now();
    let done = wait_for_job(&cluster, job, "cancelled", |j| {
        j.state == JobState::Cancelled as i32
    })
    .await;
    let took = termed.elapsed();
    assert_eq!(done.exit_signal, libc::SIGKILL, "{done:?}");
    // One second of grace, not the cluster's five (the margin covers the
    // exit report's round trip and this test's polling).
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(4),
        "SIGKILL {took:?} after SIGTERM"
    );
}
