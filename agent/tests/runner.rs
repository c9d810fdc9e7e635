//! Launches real processes through the runner. Every wait has a deadline;
//! no sleep is an assertion.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_agent::procgroup;
use berth_agent::runner::{self, JobEvent, JobEventKind, JobExit, LaunchContext};
use berth_agent::statedir::StateDir;
use berth_agent::user::JobUser;
use berth_proto::agent::Assignment;
use berth_proto::api::JobSpec;
use tokio::sync::mpsc;

/// Longest any single event may take to arrive.
const EVENT_DEADLINE: Duration = Duration::from_secs(20);

fn ctx(dir: &Path) -> Arc<LaunchContext> {
    Arc::new(LaunchContext {
        host: "testhost".into(),
        work_dir: dir.to_path_buf(),
        shim: Some(PathBuf::from(env!("CARGO_BIN_EXE_berth-job-shim"))),
        state: StateDir::open(&dir.join(".state")).unwrap(),
        cgroups: None,
        job_user: JobUser::Agent,
        allow_root_jobs: true,
        instance: format!("t{}", std::process::id()),
        step_secret: None,
        ca_file: None,
    })
}

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
        cpus: 2,
        hosts: vec!["h1".into(), "h2".into()],
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
        JobEventKind::Started { pid } => {
            assert!(pid > 1, "pid {pid}");
            pid
        }
        other => panic!("expected Started, got {other:?}"),
    }
}

async fn expect_exited(rx: &mut mpsc::Receiver<JobEvent>) -> JobExit {
    match next_event(rx).await.kind {
        JobEventKind::Exited(exit) => exit,
        other => panic!("expected Exited, got {other:?}"),
    }
}

/// Polls until the process group is gone; panics after `deadline`.
async fn assert_group_gone(pgid: i32, deadline: Duration) {
    let until = Instant::now() + deadline;
    loop {
        // SAFETY: signal 0 only checks for existence.
        let rc = unsafe { libc::kill(-pgid, 0) };
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return;
        }
        assert!(Instant::now() < until, "process group {pgid} still exists");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls until `path` exists; panics after [`EVENT_DEADLINE`].
async fn wait_for_file(path: &Path) {
    let until = Instant::now() + EVENT_DEADLINE;
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn runs_command_and_reports_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(assignment(1, "echo hi > file; exit 3"), ctx(dir.path()), tx);

    let started = next_event(&mut rx).await;
    assert_eq!((started.job_id, started.alloc_id), (1, 10));
    assert!(matches!(started.kind, JobEventKind::Started { .. }));
    let exit = expect_exited(&mut rx).await;
    assert_eq!(
        exit,
        JobExit {
            exit_code: 3,
            signal: 0,
            launch_error: String::new()
        }
    );
    let text = std::fs::read_to_string(dir.path().join("file")).unwrap();
    assert_eq!(text, "hi\n");
    // The default output file exists even when the job wrote nothing.
    assert!(dir.path().join("berth-1.out").exists());
}

#[tokio::test]
async fn job_sees_its_environment_and_output_patterns() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = assignment(
        7,
        "echo $BERTH_JOB_ID $SLURM_JOB_ID $BERTH_JOB_NAME $SLURM_JOB_NAME \
         $BERTH_NODELIST $SLURM_JOB_NODELIST $BERTH_CPUS $SLURM_CPUS_ON_NODE \
         $BERTH_ALLOC_ID $EXTRA; pwd; echo oops >&2",
    );
    if let Some(spec) = a.spec.as_mut() {
        spec.env = HashMap::from([("EXTRA".to_string(), "x=1".to_string())]);
        spec.workdir = "sub".into();
        spec.stdout_path = "%x-%j-%u-%N.out".into();
        spec.stderr_path = "%j.err".into();
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx(dir.path()), tx);
    expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);

    let sub = dir.path().join("sub");
    let out = std::fs::read_to_string(sub.join("t-7-ada-h1.out")).unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("7 7 t t h1,h2 h[1-2] 2 2 70 x=1"));
    let pwd = lines.next().unwrap();
    assert!(pwd.ends_with("/sub"), "{pwd}");
    let err = std::fs::read_to_string(sub.join("7.err")).unwrap();
    assert_eq!(err, "oops\n");
}

#[tokio::test]
async fn output_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("berth-2.out"), "before\n").unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(assignment(2, "echo after"), ctx(dir.path()), tx);
    expect_started(&mut rx).await;
    expect_exited(&mut rx).await;
    let text = std::fs::read_to_string(dir.path().join("berth-2.out")).unwrap();
    assert_eq!(text, "before\nafter\n");
}

#[tokio::test]
async fn bad_workdir_is_a_launch_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = assignment(3, "true");
    if let Some(spec) = a.spec.as_mut() {
        spec.workdir = "does/not/exist".into();
    }
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx(dir.path()), tx);
    // No Started: the first event is the exit.
    let exit = expect_exited(&mut rx).await;
    assert_eq!(exit.exit_code, 1);
    assert!(exit.launch_error.contains("does/not/exist"), "{exit:?}");
}

#[tokio::test]
async fn unopenable_output_is_a_launch_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = assignment(4, "true");
    if let Some(spec) = a.spec.as_mut() {
        spec.stdout_path = "no-such-dir/out".into();
    }
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx(dir.path()), tx);
    let exit = expect_exited(&mut rx).await;
    assert_eq!(exit.exit_code, 1);
    assert!(exit.launch_error.contains("output"), "{exit:?}");
}

#[tokio::test]
async fn missing_spec_is_a_launch_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = assignment(5, "true");
    a.spec = None;
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(a, ctx(dir.path()), tx);
    assert!(!expect_exited(&mut rx).await.launch_error.is_empty());
}

#[tokio::test]
async fn stop_ends_a_sleep_by_sigterm_within_the_grace() {
    procgroup::become_subreaper().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let h = runner::spawn(
        assignment(6, "echo up > ready; exec sleep 100"),
        ctx(dir.path()),
        tx,
    );
    let pgid = expect_started(&mut rx).await;
    // Stopped once its command runs: a SIGTERM to the group while the
    // shell is still forking can miss a child it is making (a shell's own
    // race, which only the grace's SIGKILL ends), and that is not what
    // this test is about.
    let ready = dir.path().join("ready");
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&ready).unwrap_or_default() != "up\n" {
        assert!(Instant::now() < until, "the job's command never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let grace = Duration::from_secs(10);
    let asked = Instant::now();
    h.stop(grace);
    let exit = expect_exited(&mut rx).await;
    assert_eq!(exit.signal, libc::SIGTERM, "{exit:?}");
    assert_eq!(exit.exit_code, 128 + libc::SIGTERM);
    assert!(asked.elapsed() < grace, "took {:?}", asked.elapsed());
    assert_group_gone(pgid, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn term_ignoring_job_is_killed_after_grace_with_its_whole_group() {
    procgroup::become_subreaper().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let h = runner::spawn(
        assignment(8, "trap '' TERM; touch trapped; sleep 100"),
        ctx(dir.path()),
        tx,
    );
    let pgid = expect_started(&mut rx).await;
    // Stopping before the shell has run `trap` would test nothing.
    wait_for_file(&dir.path().join("trapped")).await;

    let grace = Duration::from_secs(1);
    let asked = Instant::now();
    h.stop(grace);
    let exit = expect_exited(&mut rx).await;
    assert_eq!(exit.signal, libc::SIGKILL, "{exit:?}");
    assert!(
        asked.elapsed() >= grace,
        "killed before the grace: {:?}",
        asked.elapsed()
    );
    assert_group_gone(pgid, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn leftovers_of_a_finished_job_are_killed() {
    procgroup::become_subreaper().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    let _h = runner::spawn(assignment(9, "sleep 100 & exit 0"), ctx(dir.path()), tx);
    let pgid = expect_started(&mut rx).await;
    assert_eq!(expect_exited(&mut rx).await.exit_code, 0);
    assert_group_gone(pgid, Duration::from_secs(5)).await;
}
