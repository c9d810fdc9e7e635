//! The step service in one process: who may start tasks, what they see,
//! and that they end with their allocation or with the srun that asked.
//! Real processes; every wait has a deadline.

use std::path::Path;
use std::time::Duration;

use berth_agent::outbox::{Outbox, Report};
use berth_agent::statedir::StateDir;
use berth_agent::steps::{StepContext, StepServer};
use berth_agent::user::JobUser;
use berth_proto::agent::step_service_server::StepService;
use berth_proto::agent::{Assignment, AssignmentSet, RunTasksRequest, TaskOutput};
use berth_proto::api::JobSpec;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;
use tonic::{Code, Request};

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
const DEADLINE: Duration = Duration::from_secs(20);
/// Numbers the servers made in this process.
static SERVERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn member(job_id: u64, alloc_id: u64) -> Assignment {
    Assignment {
        job_id,
        alloc_id,
        spec: Some(JobSpec {
            user: "alice".into(),
            ..Default::default()
        }),
        gpu_indices: vec![1],
        stop_grace_s: 1,
        ..Default::default()
    }
}

fn server(set: AssignmentSet) -> (StepServer, watch::Sender<Option<AssignmentSet>>) {
    server_with_outbox(set, Outbox::new(100))
}

fn server_with_outbox(
    set: AssignmentSet,
    outbox: Outbox,
) -> (StepServer, watch::Sender<Option<AssignmentSet>>) {
    server_with(set, outbox, None)
}

/// A server whose step counters are kept in `state` (as the agent's are).
fn server_with(
    set: AssignmentSet,
    outbox: Outbox,
    state: Option<StateDir>,
) -> (StepServer, watch::Sender<Option<AssignmentSet>>) {
    let (tx, rx) = watch::channel(Some(set));
    let server = StepServer::new(StepContext {
        host: "n2".into(),
        secret: Some(SECRET.to_vec()),
        job_user: JobUser::Agent,
        allow_root_jobs: true,
        desired: rx,
        // Each test's server is an agent of its own: a shared instance
        // would let one test's end of a call kill another's tasks.
        instance: format!(
            "t{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ),
        outbox,
        state,
    });
    (server, tx)
}

fn members(list: Vec<Assignment>) -> AssignmentSet {
    AssignmentSet {
        applied_index: 1,
        members: list,
        ..Default::default()
    }
}

fn request(script: &str, dir: &Path) -> RunTasksRequest {
    RunTasksRequest {
        job_id: 7,
        alloc_id: 70,
        credential: berth_auth::step::issue(SECRET, 7, 70).expect("credential"),
        step_id: 0,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: [("PATH".to_string(), "/usr/bin:/bin".to_string())].into(),
        cwd: dir.display().to_string(),
        tasks: vec![2, 3],
        node_id: 1,
    }
}

/// Every message until the stream ends, within the deadline.
async fn drain(
    mut stream: impl tokio_stream::Stream<Item = Result<TaskOutput, tonic::Status>> + Unpin,
) -> Vec<TaskOutput> {
    let mut all = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(m) = stream.next().await {
            all.push(m.expect("message"));
        }
    })
    .await
    .expect("the stream ends before the deadline");
    all
}

fn exits(all: &[TaskOutput]) -> Vec<(u32, i32, i32)> {
    let mut v: Vec<(u32, i32, i32)> = all
        .iter()
        .filter(|m| m.exited)
        .map(|m| (m.task, m.exit_code, m.signal))
        .collect();
    v.sort_unstable();
    v
}

fn output_of(all: &[TaskOutput], task: u32) -> String {
    let bytes: Vec<u8> = all
        .iter()
        .filter(|m| m.task == task && m.stream == 1)
        .flat_map(|m| m.data.clone())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_with_their_rank_and_this_hosts_devices_and_report_their_exits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _tx) = server(members(vec![member(7, 70)]));
    let script = "echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $(pwd); exit $SLURM_PROCID";
    let response = server
        .run_tasks(Request::new(request(script, dir.path())))
        .await
        .expect("started");
    let all = drain(response.into_inner()).await;
    let cwd = dir
        .path()
        .canonicalize()
        .expect("canonical")
        .display()
        .to_string();
    assert_eq!(output_of(&all, 2), format!("2 0 1 n2 1 {cwd}\n"));
    assert_eq!(output_of(&all, 3), format!("3 1 1 n2 1 {cwd}\n"));
    assert_eq!(exits(&all), vec![(2, 2, 0), (3, 3, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_listed_allocation_with_its_credential_takes_tasks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _tx) = server(members(vec![member(7, 70)]));
    let refused = |r: RunTasksRequest| {
        let server = &server;
        async move {
            match server.run_tasks(Request::new(r)).await {
                Ok(_) => panic!("started without the right to"),
                Err(status) => status,
            }
        }
    };
    let wrong = RunTasksRequest {
        credential: berth_auth::step::issue(SECRET, 7, 71).expect("credential"),
        ..request("true", dir.path())
    };
    assert_eq!(refused(wrong).await.code(), Code::PermissionDenied);
    let none = RunTasksRequest {
        credential: String::new(),
        ..request("true", dir.path())
    };
    assert_eq!(refused(none).await.code(), Code::PermissionDenied);
    // A credential for an allocation this host does not hold.
    let elsewhere = RunTasksRequest {
        alloc_id: 71,
        credential: berth_auth::step::issue(SECRET, 7, 71).expect("credential"),
        ..request("true", dir.path())
    };
    let status = refused(elsewhere).await;
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(
        status.message().contains("does not hold host n2"),
        "{status:?}"
    );
}

/// Waits until `path` holds a pid, then returns it.
async fn pid_in(path: &Path) -> i32 {
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Some(pid) = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the task wrote its pid")
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_stop_when_their_allocation_leaves_this_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, tx) = server(members(vec![member(7, 70)]));
    let pid_file = dir.path().join("pid");
    let script = format!(
        "trap 'echo got TERM; exit 9' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        pid_file.display()
    );
    let r = RunTasksRequest {
        tasks: vec![0],
        ..request(&script, dir.path())
    };
    let response = server.run_tasks(Request::new(r)).await.expect("started");
    let mut stream = response.into_inner();
    // The trap is set once the pid is written.
    pid_in(&pid_file).await;
    tx.send_replace(Some(members(Vec::new())));
    let mut all = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(m) = stream.next().await {
            all.push(m.expect("message"));
        }
    })
    .await
    .expect("the stream ends");
    assert_eq!(output_of(&all, 0), "got TERM\n");
    assert_eq!(exits(&all), vec![(0, 9, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_die_with_the_srun_that_started_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _tx) = server(members(vec![member(7, 70)]));
    let pid_file = dir.path().join("pid");
    let r = RunTasksRequest {
        tasks: vec![0],
        ..request(
            &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
            dir.path(),
        )
    };
    let response = server.run_tasks(Request::new(r)).await.expect("started");
    let pid = pid_in(&pid_file).await;
    assert!(alive(pid));
    drop(response);
    tokio::time::timeout(DEADLINE, async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the task is killed once srun's stream is gone");
}

/// Whether `child` is still running (a child reaped elsewhere is gone).
fn running(child: &mut std::process::Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_agents_step_tasks_end_with_their_allocation() {
    let instance = format!("sweep{}", std::process::id());
    let me = std::process::id();
    let spawn = |tag: String| {
        std::process::Command::new("sleep")
            .arg("60")
            .env("BERTH_STEP_TAG", tag)
            .spawn()
            .expect("spawn sleep")
    };
    // Left by an earlier agent process (pid 1 stands for a dead one):
    // allocation 5 still listed, allocation 6 gone; and one of this
    // process's own live calls, whose call ends it itself.
    let mut listed_left = spawn(format!("{instance}.5.1.0"));
    let mut gone_left = spawn(format!("{instance}.6.1.0"));
    let mut own_call = spawn(format!("{instance}.6.{me}.0"));
    let mut other_instance = spawn(format!("{instance}x.6.1.0"));
    let listed: std::collections::BTreeSet<u64> = [5].into();
    let killed = berth_agent::steps::sweep_leftovers(&instance, &listed);
    assert_eq!(killed, 1);
    tokio::time::timeout(DEADLINE, async {
        while running(&mut gone_left) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the leftover of a gone allocation is killed");
    for (what, child) in [
        ("listed", &mut listed_left),
        ("own call", &mut own_call),
        ("other instance", &mut other_instance),
    ] {
        assert!(running(child), "{what} must be left alone");
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_are_numbered_per_allocation_for_its_credential_holder() {
    let outbox = Outbox::new(100);
    let (server, tx) =
        server_with_outbox(members(vec![member(7, 70), member(8, 80)]), outbox.clone());
    let ask = |job_id: u64, alloc_id: u64, credential: String| {
        let server = &server;
        async move {
            server
                .next_step_id(Request::new(berth_proto::agent::NextStepIdRequest {
                    job_id,
                    alloc_id,
                    credential,
                    name: "hostname".into(),
                    hosts: vec!["n1".into(), "n2".into()],
                    ntasks: 2,
                }))
                .await
                .map(|r| r.into_inner().step_id)
        }
    };
    let cred =
        |job_id, alloc_id| berth_auth::step::issue(SECRET, job_id, alloc_id).expect("credential");
    assert_eq!(ask(7, 70, cred(7, 70)).await.expect("ok"), 0);
    assert_eq!(ask(7, 70, cred(7, 70)).await.expect("ok"), 1);
    assert_eq!(
        ask(8, 80, cred(8, 80)).await.expect("ok"),
        0,
        "per allocation"
    );
    assert_eq!(ask(7, 70, cred(7, 70)).await.expect("ok"), 2);
    let refused = ask(7, 70, cred(8, 80))
        .await
        .expect_err("another's credential");
    assert_eq!(refused.code(), Code::PermissionDenied);
    // Step 1 of job 7 ends; each start and end goes to the leader.
    server
        .end_step(Request::new(berth_proto::agent::EndStepRequest {
            job_id: 7,
            alloc_id: 70,
            credential: cred(7, 70),
            step_id: 1,
            exit_code: 4,
        }))
        .await
        .expect("end");
    let steps: Vec<(u64, u32, bool, i32)> = outbox
        .pending()
        .into_iter()
        .map(|r| match r {
            Report::Step(s) => (s.job_id, s.step_id, s.ended, s.exit_code),
            other => panic!("a step report expected: {other:?}"),
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (7, 0, false, 0),
            (7, 1, false, 0),
            (8, 0, false, 0),
            (7, 2, false, 0),
            (7, 1, true, 4)
        ]
    );
    // Job 7 is requeued: its new allocation counts from 0.
    tx.send_replace(Some(members(vec![member(7, 71), member(8, 80)])));
    assert_eq!(
        ask(7, 70, cred(7, 70)).await.expect_err("ended").code(),
        Code::FailedPrecondition
    );
    assert_eq!(ask(7, 71, cred(7, 71)).await.expect("ok"), 0);
    assert_eq!(ask(8, 80, cred(8, 80)).await.expect("ok"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_directory_is_missing_here_starts_in_tmp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _tx) = server(members(vec![member(7, 70)]));
    let r = RunTasksRequest {
        tasks: vec![0],
        ..request("pwd", &dir.path().join("not-on-this-host"))
    };
    let response = server.run_tasks(Request::new(r)).await.expect("started");
    let all = drain(response.into_inner()).await;
    assert_eq!(output_of(&all, 0), "/tmp\n");
    let stderr: Vec<u8> = all
        .iter()
        .filter(|m| m.stream == 2)
        .flat_map(|m| m.data.clone())
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&stderr),
        format!(
            "berth: n2: cannot enter {}: starting in /tmp instead\n",
            dir.path().join("not-on-this-host").display()
        )
    );
    assert_eq!(exits(&all), vec![(0, 0, 0)]);
}

/// Asks `server` for the next step id of (`job_id`, `alloc_id`).
async fn ask(server: &StepServer, job_id: u64, alloc_id: u64) -> u32 {
    let request = berth_proto::agent::NextStepIdRequest {
        job_id,
        alloc_id,
        credential: berth_auth::step::issue(SECRET, job_id, alloc_id).expect("credential"),
        name: "hostname".into(),
        hosts: vec!["n2".into()],
        ntasks: 1,
    };
    server
        .next_step_id(Request::new(request))
        .await
        .expect("a step id")
        .into_inner()
        .step_id
}

/// A restarted agent goes on numbering an allocation's steps where the
/// one before it stopped (sacct would otherwise show two `N.0`), and the
/// counter of an allocation no longer listed is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_numbers_survive_an_agent_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir::open(&dir.path().join("state")).expect("state dir");
    let listed = members(vec![member(7, 70), member(8, 80)]);
    let (first, _tx) = server_with(listed.clone(), Outbox::new(100), Some(state.clone()));
    assert_eq!(ask(&first, 7, 70).await, 0);
    assert_eq!(ask(&first, 7, 70).await, 1);
    assert_eq!(ask(&first, 8, 80).await, 0);
    drop(first);
    // The agent restarts: a new server over the same state directory.
    let (second, tx) = server_with(listed, Outbox::new(100), Some(state.clone()));
    assert_eq!(ask(&second, 7, 70).await, 2);
    assert_eq!(ask(&second, 8, 80).await, 1);
    assert_eq!(state.read_next_step(80), Some(2));
    // Allocation 80 ends: the agent's sweep removes its counter.
    let sweep = tokio::spawn(berth_agent::steps::sweep_on_changes(
        tx.subscribe(),
        "t-no-tasks".into(),
        Some(state.clone()),
    ));
    tx.send_replace(Some(members(vec![member(7, 70)])));
    tokio::time::timeout(DEADLINE, async {
        while state.read_next_step(80).is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the counter of a gone allocation is removed");
    sweep.abort();
    assert_eq!(ask(&second, 7, 70).await, 3);
    assert_eq!(state.read_next_step(80), None);
    assert_eq!(state.read_next_step(70), Some(4));
}
