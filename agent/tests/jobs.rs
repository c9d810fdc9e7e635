//! Job lifecycle on real processes: the stop grace to within half a
//! second, no process left behind (with and without a cgroup), re-adoption
//! of a job by a process that is not its parent, the environment a GPU
//! job sees, and switching to the job's user. Every wait has a deadline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_agent::cgroup::{self, Cgroups};
use berth_agent::procgroup;
use berth_agent::runner::{self, JobEvent, JobEventKind, JobExit, LaunchContext};
use berth_agent::statedir::{self, StateDir};
use berth_agent::user::JobUser;
use berth_proto::agent::Assignment;
use berth_proto::api::JobSpec;
use tokio::sync::mpsc;

/// Longest any single event may take to arrive.
const EVENT_DEADLINE: Duration = Duration::from_secs(20);
/// How far the SIGKILL may land from the end of the grace.
const GRACE_TOLERANCE: Duration = Duration::from_millis(500);

fn ctx_with(dir: &Path, cgroups: Option<Cgroups>) -> Arc<LaunchContext> {
    Arc::new(LaunchContext {
        host: "gpu07".into(),
        work_dir: dir.to_path_buf(),
        shim: Some(PathBuf::from(env!("CARGO_BIN_EXE_berth-job-shim"))),
        state: StateDir::open(&dir.join(".state")).unwrap(),
        cgroups,
        job_user: JobUser::Agent,
        allow_root_jobs: true,
        instance: format!("t{}", std::process::id()),
        step_secret: None,
        ca_file: None,
    })
}

/// Every test in this file uses its own `job_id`: the tests share one
/// process and so one agent instance name, and a job's processes are
/// found (and its leftovers killed) by the tag `t<pid>.<alloc_id>`, so two
/// tests with one id kill each other's jobs.
fn assignment(job_id: u64, command: &str) -> Assignment {
    Assignment {
        job_id,
        alloc_id: job_id * 10,
        spec: Some(JobSpec {
            name: "t".into(),
            user: "ada".into(),
            command: command.into(),
            ..Default::default()
        }),
        cpus: 1,
        ..Default::default()
    }
}

async fn next_event(rx: &mut mpsc::Receiver<JobEvent>) -> JobEvent {
    match tokio::time::timeout(EVENT_DEADLINE, rx.recv()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => panic!("event channel closed"),
        Err(_) => panic!("no job event within {EVENT_DEADLINE:?}"),
    }
}

async fn expect_started(rx: &mut mpsc::Receiver<JobEvent>) -> i32 {
    match next_event(rx).await.kind {
        JobEventKind::Started { pid } => pid,
        other => panic!("expected Started, got {other:?}"),
    }
}

async fn expect_exited(rx: &mut mpsc::Receiver<JobEvent>) -> JobExit {
    match next_event(rx).await.kind {
        JobEventKind::Exited(exit) => exit,
        other => panic!("expected Exited, got {other:?}"),
    }
}

/// Polls until `cond` holds; panics naming `what` after the deadline.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + EVENT_DEADLINE;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn term_trapping_job_gets_sigterm_then_sigkill_after_the_grace() {
    procgroup::become_subreaper().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let h = runner::spawn(
        assignment(
            1,
            "trap 'echo term >> got_term' TERM; touch ready; while :; do sleep 0.05; done",
        ),
        ctx_with(dir.path(), None),
        tx,
    );
    expect_started(&mut rx).await;
    let got_term = dir.path().join("got_term");
    wait_until("the job's trap", || dir.path().join("ready").exists()).await;

    let grace = Duration::from_secs(2);
    let asked = Instant::now();
    h.stop(grace);
    wait_until("SIGTERM reaching the job", || {
        read(&got_term).contains("term")
    })
    .await;
    let term_after = asked.elapsed();
    let exit = expect_exited(&mut rx).await;
    let exit_after = asked.elapsed();
    assert!(
        term_after < GRACE_TOLERANCE,
        "SIGTERM came {term_after:?} after the stop"
    );
    assert_eq!(exit.signal, libc::SIGKILL, "{exit:?}");
    assert!(
        exit_after >= grace && exit_after <= grace + GRACE_TOLERANCE,
        "SIGKILL {exit_after:?} after the stop, grace {grace:?}"
    );
    // The job took SIGTERM once and kept running until the SIGKILL.
    assert_eq!(read(&got_term), "term\n");
}

/// A job that ignores SIGTERM and leaves processes behind: one in its
/// group, one in a new session (setsid), one daemonized by a double fork.
const FORKING_JOB: &str = "trap '' TERM; \
    sh -c 'trap \"\" TERM; echo $$ >> pids; exec sleep 1000' & \
    setsid sh -c 'trap \"\" TERM; echo $$ >> pids; exec sleep 1000' & \
    (setsid sh -c 'trap \"\" TERM; echo $$ >> pids; exec sleep 1000' &) ; \
    while :; do sleep 0.05; done";

async fn forking_job_leaves_nothing(dir: &Path, cgroups: Option<Cgroups>, job_id: u64) {
    procgroup::become_subreaper().unwrap();
    let ctx = ctx_with(dir, cgroups.clone());
    let (tx, mut rx) = mpsc::channel(8);
    let h = runner::spawn(assignment(job_id, FORKING_JOB), ctx, tx);
    let pgid = expect_started(&mut rx).await;
    let pids_file = dir.join("pids");
    wait_until("three forked processes", || {
        read(&pids_file).lines().count() == 3
    })
    .await;
    let pids: Vec<i32> = read(&pids_file)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    if let Some(cg) = &cgroups {
        let members = cgroup::procs(&cg.job_path(job_id, job_id * 10));
        for pid in &pids {
            assert!(
                members.contains(pid),
                "{pid} not in the job's cgroup {members:?}"
            );
        }
    }

    let grace = Duration::from_millis(500);
    h.stop(grace);
    let exit = expect_exited(&mut rx).await;
    assert_eq!(exit.signal, libc::SIGKILL, "{exit:?}");
    for pid in pids.iter().copied().chain([pgid]) {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived its job ({:?})",
            statedir::proc_start(pid)
        );
    }
    assert!(
        procgroup::tagged_processes(&format!("t{}.{}", std::process::id(), job_id * 10)).is_empty()
    );
    if let Some(cg) = &cgroups {
        assert!(
            !cg.job_path(job_id, job_id * 10).exists(),
            "the job's cgroup was not removed"
        );
    }
}

#[tokio::test]
async fn term_ignoring_forking_job_leaves_no_process_without_a_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    forking_job_leaves_nothing(dir.path(), None, 2).await;
}

/// The real cgroup path, where this machine has a writable cgroup2
/// hierarchy (the test says so and returns where it has not).
#[tokio::test]
async fn term_ignoring_forking_job_leaves_no_process_with_a_cgroup() {
    let Some(mount) = cgroup::cgroup2_mount() else {
        eprintln!("no cgroup2 mount here: only the fallback path is tested");
        return;
    };
    let parent = mount.join(format!("berth-test-{}", std::process::id()));
    let cg = match Cgroups::setup(&parent, "t") {
        Ok(cg) => cg,
        Err(e) => {
            eprintln!("no writable cgroup2 here ({e}): only the fallback path is tested");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    forking_job_leaves_nothing(dir.path(), Some(cg), 3).await;
    std::fs::remove_dir(&parent).unwrap();
}

#[tokio::test]
async fn job_in_a_cgroup_sees_it_and_limits_fall_back_cleanly() {
    let Some(mount) = cgroup::cgroup2_mount() else {
        eprintln!("no cgroup2 mount here");
        return;
    };
    let parent = mount.join(format!("berth-test-limits-{}", std::process::id()));
    let Ok(cg) = Cgroups::setup(&parent, "t") else {
        eprintln!("no writable cgroup2 here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let mut a = assignment(4, "cat /proc/self/cgroup | grep '^0::' > cg; cat $(cat /proc/self/cgroup | grep '^0::' | cut -d: -f3 | sed 's|^|MOUNT|')/memory.max > mem 2>/dev/null; true");
    a.mem_mb = 64;
    if let Some(spec) = a.spec.as_mut() {
        spec.command = spec.command.replace("MOUNT", &mount.display().to_string());
    }
    let _h = runner::spawn(a, ctx_with(dir.path(), Some(cg.clone())), tx);
    expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);
    let line = read(&dir.path().join("cg"));
    assert!(line.trim_end().ends_with("/job_4_40.t"), "{line}");
    if cg.limits {
        assert_eq!(
            read(&dir.path().join("mem")).trim(),
            (64u64 << 20).to_string()
        );
    } else {
        // Controllers not delegated: the job ran all the same, unlimited.
        eprintln!("memory/cpu controllers not delegated here: limits not applied");
    }
    std::fs::remove_dir(&parent).unwrap();
}

#[tokio::test]
async fn adopted_job_reports_its_real_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_with(dir.path(), None);
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(
        assignment(5, "while [ ! -e go ]; do sleep 0.05; done; exit 7"),
        ctx.clone(),
        tx,
    );
    let pid = expect_started(&mut rx).await;
    // What a restarted agent finds: the record, with a live leader that
    // is not its child.
    let records = ctx.state.load("gpu07").unwrap();
    assert_eq!(records.len(), 1);
    let record = records[0].clone();
    assert_eq!((record.job_id, record.alloc_id, record.pid), (5, 50, pid));
    assert!(statedir::alive(record.pid, record.start_ticks));

    let (atx, mut arx) = mpsc::channel(8);
    let _adopted = runner::adopt(record, ctx.clone(), atx);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let adopted_exit = expect_exited(&mut arx).await;
    assert_eq!(
        adopted_exit,
        JobExit {
            exit_code: 7,
            signal: 0,
            launch_error: String::new()
        }
    );
    assert_eq!(expect_exited(&mut rx).await.exit_code, 7);
}

#[tokio::test]
async fn adopted_job_is_stopped_with_sigterm() {
    procgroup::become_subreaper().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_with(dir.path(), None);
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(
        assignment(6, "echo up > ready; exec sleep 1000"),
        ctx.clone(),
        tx,
    );
    expect_started(&mut rx).await;
    // The job's own command runs (exec'd straight from the shell, so it
    // is the shim's child itself: it once inherited the shim's blocked
    // stop signals and outlived every SIGTERM until the grace's SIGKILL).
    let ready = dir.path().join("ready");
    wait_until("the job's command runs", || read(&ready) == "up\n").await;
    let record = ctx.state.load("gpu07").unwrap().remove(0);
    let (atx, mut arx) = mpsc::channel(8);
    let adopted = runner::adopt(record, ctx.clone(), atx);
    adopted.stop(Duration::from_secs(10));
    let exit = expect_exited(&mut arx).await;
    assert_eq!((exit.exit_code, exit.signal), (128 + 15, libc::SIGTERM));
}

#[tokio::test]
async fn gpu_job_sees_its_devices_and_restart_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = assignment(
        8,
        "echo $CUDA_VISIBLE_DEVICES $ROCR_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES \
         $SLURM_RESTART_COUNT $SLURM_JOB_NODELIST $SLURM_NODEID $BERTH_EMULATOR_UNITS",
    );
    a.gpu_indices = vec![2, 3];
    a.restart_count = 1;
    a.emulator_units = 2;
    a.emulator_kind = "zebu".into();
    a.hosts = vec!["gpu07".into()];
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx_with(dir.path(), None), tx);
    expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);
    assert_eq!(
        read(&dir.path().join("berth-8.out")),
        "2,3 2,3 2,3 1 gpu07 0 2\n"
    );
}

/// Root only: a job runs as the user it names, and a root job is refused
/// unless allowed.
#[tokio::test]
async fn job_runs_as_its_user_and_root_jobs_need_permission() {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: user switching is not tested here");
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let ctx = Arc::new(LaunchContext {
        job_user: JobUser::Submitter,
        allow_root_jobs: false,
        ..(*ctx_with(dir.path(), None)).clone()
    });
    let mut a = assignment(9, "id -u > uid; id -g > gid; echo $USER $HOME");
    if let Some(spec) = a.spec.as_mut() {
        spec.user = "nobody".into();
        spec.workdir = "shared".into();
    }
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx.clone(), tx);
    expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);
    let nobody = berth_agent::user::lookup("nobody").unwrap();
    assert_eq!(read(&shared.join("uid")).trim(), nobody.uid.to_string());
    assert_eq!(read(&shared.join("gid")).trim(), nobody.gid.to_string());
    let out = shared.join("berth-9.out");
    assert_eq!(std::fs::metadata(&out).unwrap().uid(), nobody.uid);
    assert_eq!(read(&out), format!("nobody {}\n", nobody.home.display()));

    let mut a = assignment(10, "true");
    if let Some(spec) = a.spec.as_mut() {
        spec.user = "root".into();
    }
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx, tx);
    let exit = expect_exited(&mut rx).await;
    assert!(exit.launch_error.contains("allow_root_jobs"), "{exit:?}");
}

/// The job starts with no signal blocked: the shim blocks its stop
/// signals while it forks, and a blocked mask survives exec.
#[tokio::test]
async fn job_starts_with_no_signal_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(
        assignment(11, "exec grep SigBlk /proc/self/status > blocked"),
        ctx_with(dir.path(), None),
        tx,
    );
    expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);
    assert_eq!(
        read(&dir.path().join("blocked")),
        "SigBlk:\t0000000000000000\n"
    );
}
