//! Runs one allocation: launches the job as its user, in its own process
//! group (and cgroup where there is one), under the job shim that records
//! its exit status; records it in the state directory before reporting
//! the start; stops it (SIGTERM to all its processes, SIGKILL after the
//! grace) when asked; leaves no process of it behind; reports the exit.
//!
//! A job re-adopted after an agent restart is watched the same way, by
//! polling /proc (pid plus start time) instead of waiting as its parent;
//! its status then comes from the shim's exit file.
//!
//! Each job is one tokio task. It never panics on bad input: anything that
//! prevents the launch is reported as an exit with `launch_error` set.

use std::ffi::CString;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use berth_proto::agent::Assignment;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cgroup::{self, Cgroups};
use crate::jobenv::{self, EnvFacts};
use crate::output::{self, PatternVars};
use crate::procgroup;
use crate::statedir::{self, ExitRecord, Record, StateDir};
use crate::user::{self, JobUser, RunAs, UserError};

/// Shell that runs every job's command.
pub const SHELL: &str = "/bin/sh";
/// How long to keep SIGKILLing a job's leftover processes after its leader
/// exited before giving up with a warning, in ms.
pub const GROUP_KILL_TIMEOUT_MS: u64 = 5_000;
/// How often a re-adopted job's leader is looked for in /proc, in ms.
pub const ADOPTED_POLL_MS: u64 = 50;
/// How often leftovers are looked for while clearing a job, in ms.
const LEFTOVER_POLL_MS: u64 = 10;

/// Agent-wide facts a launch needs.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// This host's name, the node list when an assignment has none.
    pub host: String,
    /// Working directory for jobs that give none; base for relative ones.
    pub work_dir: PathBuf,
    /// The job shim (`berth-job-shim`); without it the shell leads the
    /// group and a job re-adopted after a restart has no exit status.
    pub shim: Option<PathBuf>,
    /// Where allocations are recorded and shims write exit statuses.
    pub state: StateDir,
    /// Per-job cgroups, when the host has a usable cgroup2 hierarchy.
    pub cgroups: Option<Cgroups>,
    pub job_user: JobUser,
    pub allow_root_jobs: bool,
    /// This agent's token, unique on the machine (see
    /// [`StateDir::instance`]): it names job cgroups and tags job
    /// processes.
    pub instance: String,
    /// The cluster secret, which step credentials are made with (`None`
    /// on a cluster without auth: steps need no credential there).
    pub step_secret: Option<Vec<u8>>,
    /// The cluster's CA file, handed to jobs as `BERTH_CA`.
    pub ca_file: Option<PathBuf>,
}

impl LaunchContext {
    /// The step credential of an allocation (see `berth_auth::step`).
    pub fn step_credential(&self, job_id: u64, alloc_id: u64) -> Option<String> {
        let secret = self.step_secret.as_deref()?;
        match berth_auth::step::issue(secret, job_id, alloc_id) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(job_id, alloc_id, error = %e, "cannot make the step credential");
                None
            }
        }
    }

    /// The `BERTH_JOB_TAG` value of `alloc_id`'s processes.
    pub fn job_tag(&self, alloc_id: u64) -> String {
        format!("{}.{alloc_id}", self.instance)
    }
}

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("assignment has no job spec")]
    NoSpec,
    #[error("job command is empty")]
    EmptyCommand,
    #[error("invalid environment variable name {0:?}")]
    BadEnvName(String),
    #[error("{0}")]
    User(UserError),
    #[error("working directory {path}: {source}")]
    WorkDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("working directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("path {0:?} contains a NUL byte")]
    NulInPath(PathBuf),
    #[error("{step}: {source}")]
    Setup {
        step: String,
        source: std::io::Error,
    },
    #[error("cannot start {SHELL}: {0}")]
    Spawn(std::io::Error),
    #[error("cannot record the allocation: {0}")]
    Record(statedir::StateDirError),
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobExit {
    /// The exit status; 128 + signal when killed (the shell's convention,
    /// so a reader that ignores `signal` still sees a failure).
    pub exit_code: i32,
    /// Signal that ended the job, 0 if it exited on its own.
    pub signal: i32,
    /// Why the job could not be started; empty if it was.
    pub launch_error: String,
}

impl JobExit {
    fn from_status(status: ExitStatus) -> Self {
        match status.signal() {
            Some(sig) => Self::from_record(ExitRecord::Signal(sig)),
            None => Self::from_record(ExitRecord::Code(status.code().unwrap_or(1))),
        }
    }

    /// The exit a shim recorded.
    pub fn from_record(r: ExitRecord) -> Self {
        match r {
            ExitRecord::Signal(sig) => JobExit {
                exit_code: 128 + sig,
                signal: sig,
                launch_error: String::new(),
            },
            ExitRecord::Code(code) => JobExit {
                exit_code: code,
                signal: 0,
                launch_error: String::new(),
            },
        }
    }

    fn failed(why: String) -> Self {
        JobExit {
            exit_code: 1,
            signal: 0,
            launch_error: why,
        }
    }
}

/// What happened to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEventKind {
    /// The process group leader runs with this pid (= process group id),
    /// and the allocation is recorded in the state directory.
    Started { pid: i32 },
    /// The job is over; no process of it is left (or a warning was logged
    /// saying which could not be cleared).
    Exited(JobExit),
}

/// An event of one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub job_id: u64,
    pub alloc_id: u64,
    pub kind: JobEventKind,
}

/// Handle on a running job task.
#[derive(Debug)]
pub struct JobHandle {
    stop_tx: mpsc::Sender<Duration>,
}

impl JobHandle {
    /// Asks the job to stop: SIGTERM to all its processes, SIGKILL after
    /// `grace`. Only the first request counts; later ones and requests
    /// after exit are ignored.
    pub fn stop(&self, grace: Duration) {
        // A full or closed channel means a stop is under way or the job is
        // over; either way there is nothing more to do.
        let _ = self.stop_tx.try_send(grace);
    }
}

/// Starts a task that launches `assignment`, sends its events to `events`
/// and stops it when the returned handle asks.
pub fn spawn(
    assignment: Assignment,
    ctx: Arc<LaunchContext>,
    events: mpsc::Sender<JobEvent>,
) -> JobHandle {
    let (stop_tx, stop_rx) = mpsc::channel(1);
    tokio::spawn(run_job(assignment, ctx, stop_rx, events));
    JobHandle { stop_tx }
}

/// Starts a task that watches a job launched by an earlier agent process
/// (`record`, whose leader is alive) until it ends, stopping it when asked.
/// It sends only the exit: the start was reported by the earlier agent.
pub fn adopt(record: Record, ctx: Arc<LaunchContext>, events: mpsc::Sender<JobEvent>) -> JobHandle {
    let (stop_tx, stop_rx) = mpsc::channel(1);
    let tracked = Tracked::from_record(&record, &ctx);
    tokio::spawn(async move {
        let (job_id, alloc_id) = (record.job_id, record.alloc_id);
        let mut leader = Leader::Adopted;
        let exit = supervise(&mut leader, &tracked, &ctx, stop_rx).await;
        tracing::info!(
            job_id,
            alloc_id,
            exit_code = exit.exit_code,
            signal = exit.signal,
            "re-adopted job exited"
        );
        let _ = events
            .send(JobEvent {
                job_id,
                alloc_id,
                kind: JobEventKind::Exited(exit),
            })
            .await;
    });
    JobHandle { stop_tx }
}

/// Clears, in the background, whatever is left of a job whose leader died
/// while the agent was down (its group, its cgroup or tagged processes).
pub fn kill_remains(record: &Record, ctx: &LaunchContext) {
    let t = Tracked::from_record(record, ctx);
    tokio::spawn(async move { clear_leftovers(&t).await });
}

/// The job's leader: our child, or a process an earlier agent started.
enum Leader {
    Child(Child),
    Adopted,
}

/// What identifies a launched job's processes.
#[derive(Debug)]
struct Tracked {
    alloc_id: u64,
    /// `BERTH_JOB_TAG` of its processes.
    tag: String,
    pid: i32,
    start_ticks: u64,
    cgroup: Option<PathBuf>,
    /// Processes outside the job's group that were signalled: once dead
    /// they are zombies of ours (the subreaper) to reap, and a zombie no
    /// longer shows its environment or cgroup.
    outside: std::sync::Mutex<Vec<i32>>,
}

impl Tracked {
    fn from_record(r: &Record, ctx: &LaunchContext) -> Self {
        Tracked::new(
            r.alloc_id,
            ctx.job_tag(r.alloc_id),
            r.pid,
            r.start_ticks,
            (!r.cgroup.as_os_str().is_empty()).then(|| r.cgroup.clone()),
        )
    }

    fn new(
        alloc_id: u64,
        tag: String,
        pid: i32,
        start_ticks: u64,
        cgroup: Option<PathBuf>,
    ) -> Self {
        Tracked {
            alloc_id,
            tag,
            pid,
            start_ticks,
            cgroup,
            outside: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Remembers `pids` for reaping (bounded; duplicates dropped).
    fn note_outside(&self, pids: &[i32]) {
        if let Ok(mut seen) = self.outside.lock() {
            for &p in pids {
                if !seen.contains(&p) && seen.len() < cgroup::CGROUP_PROCS_MAX {
                    seen.push(p);
                }
            }
        }
    }

    fn outside_pids(&self) -> Vec<i32> {
        self.outside.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends `sig` to the job's group and to its processes outside the
    /// group (from its cgroup, else by its environment tag).
    fn signal(&self, sig: i32) {
        if self.pid > 1 {
            if let Err(e) = procgroup::signal_group(self.pid, sig) {
                tracing::warn!(pgid = self.pid, sig, error = %e, "cannot signal process group");
            }
        }
        let all = match &self.cgroup {
            Some(cg) => cgroup::procs(cg),
            None => procgroup::tagged_processes(&self.tag),
        };
        // Members of the group already have it: a signal must arrive once.
        let outside: Vec<i32> = all
            .into_iter()
            .filter(|&p| statedir::proc_pgid(p).is_some_and(|g| g != self.pid))
            .collect();
        for &pid in &outside {
            if pid > 1 {
                // SAFETY: kill(2) only sends a signal.
                unsafe { libc::kill(pid, sig) };
            }
        }
        self.note_outside(&outside);
    }
}

impl Leader {
    /// Waits for the leader to end: its status when we are its parent.
    async fn wait(&mut self, t: &Tracked) -> Option<ExitStatus> {
        match self {
            Leader::Child(child) => child.wait().await.ok(),
            Leader::Adopted => {
                while statedir::alive(t.pid, t.start_ticks) {
                    tokio::time::sleep(Duration::from_millis(ADOPTED_POLL_MS)).await;
                }
                None
            }
        }
    }
}

async fn run_job(
    a: Assignment,
    ctx: Arc<LaunchContext>,
    stop_rx: mpsc::Receiver<Duration>,
    events: mpsc::Sender<JobEvent>,
) {
    let (job_id, alloc_id) = (a.job_id, a.alloc_id);
    // A closed receiver means the agent is going away; nothing to tell.
    let send = |kind| {
        let events = events.clone();
        async move {
            let _ = events
                .send(JobEvent {
                    job_id,
                    alloc_id,
                    kind,
                })
                .await;
        }
    };

    let (child, tracked) = match launch(&a, &ctx).await {
        Ok(launched) => launched,
        Err(e) => {
            tracing::warn!(job_id, alloc_id, error = %e, "job launch failed");
            send(JobEventKind::Exited(JobExit::failed(e.to_string()))).await;
            return;
        }
    };
    let pid = tracked.pid;
    tracing::info!(job_id, alloc_id, pid, cgroup = ?tracked.cgroup, "job started");
    send(JobEventKind::Started { pid }).await;

    let mut leader = Leader::Child(child);
    let exit = supervise(&mut leader, &tracked, &ctx, stop_rx).await;
    tracing::info!(
        job_id,
        alloc_id,
        exit_code = exit.exit_code,
        signal = exit.signal,
        "job exited"
    );
    send(JobEventKind::Exited(exit)).await;
}

/// Waits for the job (stopping it when asked), clears what it left, and
/// says how it ended.
async fn supervise(
    leader: &mut Leader,
    t: &Tracked,
    ctx: &LaunchContext,
    mut stop_rx: mpsc::Receiver<Duration>,
) -> JobExit {
    let mut killed = false;
    let status = tokio::select! {
        status = leader.wait(t) => status,
        Some(grace) = stop_rx.recv() => {
            tracing::info!(alloc_id = t.alloc_id, pid = t.pid, grace_s = grace.as_secs_f64(), "stopping job");
            let (status, k) = stop(leader, t, grace).await;
            killed = k;
            status
        }
    };
    clear_leftovers(t).await;
    if let Some(r) = ctx.state.read_exit(t.alloc_id) {
        return JobExit::from_record(r);
    }
    match status {
        Some(s) => JobExit::from_status(s),
        // No parent's status and no shim record: the shim itself was
        // killed (by us after the grace, or by something else, e.g. the
        // OOM killer); SIGKILL is what ends a shim.
        None => {
            if !killed {
                tracing::warn!(
                    alloc_id = t.alloc_id,
                    "job leader ended without an exit record; reporting SIGKILL"
                );
            }
            JobExit::from_record(ExitRecord::Signal(libc::SIGKILL))
        }
    }
}

/// SIGTERM to all of the job; SIGKILL once `grace` has passed. Returns the
/// leader's status (when we are its parent) and whether SIGKILL was sent.
/// Other processes get what is left of the grace.
async fn stop(leader: &mut Leader, t: &Tracked, grace: Duration) -> (Option<ExitStatus>, bool) {
    let deadline = Instant::now() + grace;
    t.signal(libc::SIGTERM);
    let (status, killed) = match tokio::time::timeout_at(deadline, leader.wait(t)).await {
        Ok(status) => (status, false),
        Err(_) => {
            t.signal(libc::SIGKILL);
            if let Leader::Child(child) = leader {
                if t.pid <= 1 {
                    let _ = child.start_kill();
                }
            }
            (leader.wait(t).await, true)
        }
    };
    if t.pid > 1 {
        procgroup::wait_group_gone(t.pid, deadline).await;
    }
    (status, killed)
}

/// Kills whatever of the job outlived its leader (as Slurm does when a
/// batch script ends), in its group and outside it, and removes its
/// cgroup, so no job process outlives its exit report.
async fn clear_leftovers(t: &Tracked) {
    let timeout = Duration::from_millis(GROUP_KILL_TIMEOUT_MS);
    if t.pid > 1 && !procgroup::kill_group(t.pid, timeout).await {
        tracing::warn!(
            alloc_id = t.alloc_id,
            pgid = t.pid,
            "processes of the job's group survive SIGKILL"
        );
    }
    let deadline = Instant::now() + timeout;
    let mut seen: Vec<i32> = t.outside_pids();
    // Leftovers that were our children when killed (see below).
    let mut dying_children: Vec<i32> = Vec::new();
    loop {
        let left = match &t.cgroup {
            Some(cg) => cgroup::kill_all(cg),
            None => {
                let pids = procgroup::tagged_processes(&t.tag);
                for &pid in &pids {
                    // SAFETY: kill(2) only sends a signal.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                pids
            }
        };
        // Our children are reaped only through `dying_children`, which
        // forgets each the moment it is reaped (its pid may be reused).
        for &pid in &left {
            if procgroup::is_our_child(pid) {
                if !dying_children.contains(&pid) {
                    dying_children.push(pid);
                }
            } else {
                seen.push(pid);
            }
        }
        dying_children.retain(|&pid| !procgroup::reaped_or_gone(pid));
        procgroup::reap_pids(&seen);
        // Zombies that are not our children still carry the tag until
        // their parent reaps them; they run nothing.
        let running: Vec<i32> = left
            .into_iter()
            .filter(|&p| matches!(statedir::proc_start(p), Some((_, false))))
            .collect();
        if running.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            tracing::warn!(alloc_id = t.alloc_id, pids = ?running, "job processes outside its group survive SIGKILL");
            break;
        }
        tokio::time::sleep(Duration::from_millis(LEFTOVER_POLL_MS)).await;
    }
    seen.sort_unstable();
    seen.dedup();
    // SIGKILL lands asynchronously: a leftover of ours that was still
    // dying when it was last reaped would stay a zombie. Each was our
    // child when it was killed, so its pid stays its own until we reap it:
    // waiting on exactly those pids cannot reap another job's process.
    let mut ours = dying_children;
    let reap_deadline = Instant::now() + timeout;
    while !ours.is_empty() && Instant::now() < reap_deadline {
        ours.retain(|&pid| !procgroup::reaped_or_gone(pid));
        if !ours.is_empty() {
            tokio::time::sleep(Duration::from_millis(LEFTOVER_POLL_MS)).await;
        }
    }
    if let Some(cg) = &t.cgroup {
        if let Err(e) = cgroup::remove(cg) {
            tracing::warn!(cgroup = %cg.display(), error = %e, "cannot remove the job's cgroup");
        }
    }
}

/// Everything the launch prepares before the fork.
struct Prepared {
    run_as: Option<RunAs>,
    work_dir: PathBuf,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    env: Vec<(String, String)>,
}

fn prepare(a: &Assignment, ctx: &LaunchContext) -> Result<Prepared, LaunchError> {
    let spec = a.spec.as_ref().ok_or(LaunchError::NoSpec)?;
    if spec.command.trim().is_empty() {
        return Err(LaunchError::EmptyCommand);
    }
    if let Some(bad) = spec
        .env
        .keys()
        .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
    {
        return Err(LaunchError::BadEnvName(bad.clone()));
    }
    let run_as =
        user::resolve(&spec.user, ctx.job_user, ctx.allow_root_jobs).map_err(LaunchError::User)?;
    let work_dir = job_work_dir(&ctx.work_dir, &spec.workdir);
    let meta = std::fs::metadata(&work_dir).map_err(|source| LaunchError::WorkDir {
        path: work_dir.clone(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(LaunchError::NotADirectory(work_dir));
    }
    let job_name = job_name(&spec.name, &spec.command);
    let first_host = a.hosts.first().map_or(ctx.host.as_str(), String::as_str);
    let vars = PatternVars {
        job_id: a.job_id,
        job_name: &job_name,
        user: &spec.user,
        first_host,
    };
    let stdout_path = output::resolve(&work_dir, &spec.stdout_path, &vars);
    let stderr_path = if spec.stderr_path.is_empty() {
        stdout_path.clone()
    } else {
        output::resolve(&work_dir, &spec.stderr_path, &vars)
    };
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.sort();
    let work_dir_text = work_dir.display().to_string();
    let step_credential = ctx.step_credential(a.job_id, a.alloc_id);
    env.extend(jobenv::job_env(
        a,
        &EnvFacts {
            host: &ctx.host,
            job_name: &job_name,
            work_dir: &work_dir_text,
            step_credential: step_credential.as_deref(),
        },
    ));
    env.push(("BERTH_JOB_TAG".into(), ctx.job_tag(a.alloc_id)));
    if let Some(ca) = &ctx.ca_file {
        // So the job's srun (and berth) verify the TLS they dial.
        env.push(("BERTH_CA".into(), ca.display().to_string()));
    }
    if let Some(u) = &run_as {
        env.push(("USER".into(), u.name.clone()));
        env.push(("LOGNAME".into(), u.name.clone()));
        env.push(("HOME".into(), u.home.display().to_string()));
    }
    Ok(Prepared {
        run_as,
        work_dir,
        stdout_path,
        stderr_path,
        env,
    })
}

fn cstring(path: &Path) -> Result<CString, LaunchError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| LaunchError::NulInPath(path.into()))
}

/// Launches the job. Returns its leader and what identifies it, after its
/// record is durable in the state directory.
async fn launch(a: &Assignment, ctx: &LaunchContext) -> Result<(Child, Tracked), LaunchError> {
    let p = prepare(a, ctx)?;
    let spec = a.spec.as_ref().ok_or(LaunchError::NoSpec)?;

    // The shim runs nothing until the agent has recorded the job (see
    // `LaunchGate`); without a shim there is no gate.
    let gate = match &ctx.shim {
        Some(_) => Some(LaunchGate::new().map_err(LaunchError::Spawn)?),
        None => None,
    };
    let gate_fd = gate.as_ref().map_or(-1, LaunchGate::child_fd);

    // A cgroup that cannot be made costs the limits, not the job.
    let cgroup = match &ctx.cgroups {
        Some(cg) => match cg.create_job(a.job_id, a.alloc_id, a.cpus, a.mem_mb) {
            Ok(path) => Some(path),
            Err(e) => {
                tracing::warn!(job_id = a.job_id, alloc_id = a.alloc_id, error = %e, "job runs without its cgroup");
                None
            }
        },
        None => None,
    };
    let exit_file = ctx
        .state
        .create_exit_file(a.alloc_id)
        .map_err(LaunchError::Record)?;
    let exit_fd = exit_file.as_raw_fd();

    let mut cmd = match &ctx.shim {
        Some(shim) => {
            let mut c = Command::new(shim);
            c.arg(exit_fd.to_string())
                .arg(gate_fd.to_string())
                .arg(SHELL);
            c
        }
        None => Command::new(SHELL),
    };
    cmd.arg("-c")
        .arg(&spec.command)
        .env_clear()
        .envs(inherited_env())
        .envs(p.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group, so a stop reaches every process of the job and
        // none of the agent's.
        .process_group(0)
        // The job task owns the lifecycle; dropping the handle must not
        // kill a job behind the stop protocol's back.
        .kill_on_drop(false);

    let child_setup = ChildSetup {
        cgroup_procs: cgroup
            .as_ref()
            .map(|c| cstring(&c.join("cgroup.procs")))
            .transpose()?,
        exit_fd,
        keep_exit_fd: ctx.shim.is_some(),
        gate_fd,
        ids: p.run_as.as_ref().map(|u| (u.uid, u.gid, u.groups.clone())),
        work_dir: cstring(&p.work_dir)?,
        stdout: cstring(&p.stdout_path)?,
        stderr: cstring(&p.stderr_path)?,
        steps: StepNames::new(&p),
    };
    // SAFETY: the closure only makes async-signal-safe system calls on
    // memory prepared before the fork (see ChildSetup::run).
    unsafe {
        cmd.as_std_mut().pre_exec(move || child_setup.run());
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            drop(exit_file);
            if let Some(cg) = &cgroup {
                let _ = cgroup::remove(cg);
            }
            let step = ctx.state_launch_step(a.alloc_id);
            let _ = ctx.state.remove(a.alloc_id);
            return Err(match step {
                Some(step) => LaunchError::Setup { step, source: e },
                None => LaunchError::Spawn(e),
            });
        }
    };
    drop(exit_file);
    let gate = gate.map(LaunchGate::spawned);
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let start_ticks = statedir::proc_start(pid).map_or(0, |(s, _)| s);
    let tracked = Tracked::new(
        a.alloc_id,
        ctx.job_tag(a.alloc_id),
        pid,
        start_ticks,
        cgroup.clone(),
    );
    let record = Record {
        host: ctx.host.clone(),
        job_id: a.job_id,
        alloc_id: a.alloc_id,
        pid,
        pgid: pid,
        start_ticks,
        started_ms: wall_ms(),
        stdout_path: p.stdout_path.clone(),
        stderr_path: p.stderr_path.clone(),
        cgroup: cgroup.clone().unwrap_or_default(),
        stop_grace_s: a.stop_grace_s,
    };
    let state = ctx.state.clone();
    let written = tokio::task::spawn_blocking(move || state.write(&record))
        .await
        .unwrap_or_else(|e| {
            Err(statedir::StateDirError::Encode(format!(
                "record task failed: {e}"
            )))
        });
    if let Err(e) = written {
        // Unrecorded, it could not be found again after a restart: better
        // not to run it at all. Closing the gate unopened ends the shim
        // before it runs anything.
        drop(gate);
        let mut leader = Leader::Child(child);
        let _ = stop(&mut leader, &tracked, Duration::ZERO).await;
        clear_leftovers(&tracked).await;
        let _ = ctx.state.remove(a.alloc_id);
        return Err(LaunchError::Record(e));
    }
    if let Some(gate) = gate {
        if let Err(e) = gate.open() {
            // The shim is gone already (killed from outside): its exit
            // status comes through the usual path.
            tracing::warn!(job_id = a.job_id, alloc_id = a.alloc_id, error = %e, "cannot open the job's launch gate");
        }
    }
    Ok((child, tracked))
}

/// A pipe that holds the job shim before it runs the job, until the
/// agent has made the job's record durable. Without it, an agent killed
/// between spawning a job and recording it would leave the job running
/// where no restarted agent can find it: the cluster would end it
/// NODE_FAIL (and perhaps run it again elsewhere) while it still runs.
/// With it, the shim reads one byte before it starts the job; an agent
/// that dies first closes the pipe, the shim reads end-of-file and exits
/// without running anything.
struct LaunchGate {
    /// Read end, inherited by the shim (close-on-exec cleared in the child
    /// only); closed here once the shim is spawned.
    child: Option<OwnedFd>,
    /// Write end, close-on-exec: no job ever inherits it.
    agent: OwnedFd,
}

impl LaunchGate {
    fn new() -> std::io::Result<LaunchGate> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills both descriptors on success; we own them.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh descriptors returned by pipe2, owned by nobody else.
        let (child, agent) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(LaunchGate {
            child: Some(child),
            agent,
        })
    }

    fn child_fd(&self) -> i32 {
        self.child.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// After the spawn: the agent keeps only the write end.
    fn spawned(mut self) -> LaunchGate {
        self.child = None;
        self
    }

    /// Lets the shim run the job.
    fn open(self) -> std::io::Result<()> {
        let mut f = std::fs::File::from(self.agent);
        f.write_all(b"g")
    }
}

impl LaunchContext {
    /// The step of the child's setup that failed, as its pre-exec code
    /// wrote it into the exit file.
    fn state_launch_step(&self, alloc_id: u64) -> Option<String> {
        self.state.read_launch_error(alloc_id)
    }
}

/// The agent's environment variables a job keeps (the rest of the
/// agent's environment is not the job's business).
fn inherited_env() -> Vec<(String, String)> {
    const KEEP: [&str; 7] = ["PATH", "LANG", "TZ", "TMPDIR", "HOME", "USER", "LOGNAME"];
    KEEP.iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Messages for each setup step, formatted before the fork.
struct StepNames {
    cgroup: Vec<u8>,
    shim_fds: Vec<u8>,
    ids: Vec<u8>,
    work_dir: Vec<u8>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl StepNames {
    fn new(p: &Prepared) -> Self {
        let user = p
            .run_as
            .as_ref()
            .map_or("the agent's user", |u| u.name.as_str());
        StepNames {
            cgroup: b"launch-error cannot enter the job's cgroup".to_vec(),
            shim_fds: b"launch-error cannot hand the exit file and launch gate to the job shim"
                .to_vec(),
            ids: format!("launch-error cannot switch to user {user}").into_bytes(),
            work_dir: format!(
                "launch-error working directory {} (as {user})",
                p.work_dir.display()
            )
            .into_bytes(),
            stdout: format!(
                "launch-error cannot open output file {}",
                p.stdout_path.display()
            )
            .into_bytes(),
            stderr: format!(
                "launch-error cannot open output file {}",
                p.stderr_path.display()
            )
            .into_bytes(),
        }
    }
}

/// What the child does between fork and exec, in this order: enter the
/// cgroup (as root), keep the exit file open across exec, switch to the
/// job's user, enter the working directory and open the output files as
/// that user.
struct ChildSetup {
    cgroup_procs: Option<CString>,
    exit_fd: i32,
    /// Only the shim inherits the exit file; a bare shell must not.
    keep_exit_fd: bool,
    /// The launch gate's read end, inherited by the shim; -1 without one.
    gate_fd: i32,
    ids: Option<(u32, u32, Vec<u32>)>,
    work_dir: CString,
    stdout: CString,
    stderr: CString,
    steps: StepNames,
}

impl ChildSetup {
    /// Runs in the forked child: only async-signal-safe calls, no
    /// allocation.
    fn run(&self) -> std::io::Result<()> {
        let fail = |msg: &[u8]| -> std::io::Error {
            let err = std::io::Error::last_os_error();
            // SAFETY: write(2) of a live buffer to a descriptor we own.
            unsafe { libc::write(self.exit_fd, msg.as_ptr().cast(), msg.len()) };
            err
        };
        // SAFETY (whole block): plain system calls on NUL-terminated
        // strings and buffers prepared before the fork.
        unsafe {
            if let Some(procs) = &self.cgroup_procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(fail(&self.steps.cgroup));
                }
                libc::close(fd);
            }
            if self.keep_exit_fd && libc::fcntl(self.exit_fd, libc::F_SETFD, 0) != 0 {
                return Err(fail(&self.steps.shim_fds));
            }
            if self.gate_fd >= 0 && libc::fcntl(self.gate_fd, libc::F_SETFD, 0) != 0 {
                return Err(fail(&self.steps.shim_fds));
            }
            if let Some((uid, gid, groups)) = &self.ids {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(fail(&self.steps.ids));
                }
            }
            if libc::chdir(self.work_dir.as_ptr()) != 0 {
                return Err(fail(&self.steps.work_dir));
            }
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
            let out = libc::open(self.stdout.as_ptr(), flags, 0o644);
            if out < 0 || libc::dup2(out, 1) < 0 {
                return Err(fail(&self.steps.stdout));
            }
            if self.stderr == self.stdout {
                if libc::dup2(out, 2) < 0 {
                    return Err(fail(&self.steps.stderr));
                }
            } else {
                let err = libc::open(self.stderr.as_ptr(), flags, 0o644);
                if err < 0 || libc::dup2(err, 2) < 0 {
                    return Err(fail(&self.steps.stderr));
                }
            }
        }
        Ok(())
    }
}

/// The job's directory: its own (relative ones under the agent's), or the
/// agent's.
fn job_work_dir(agent_dir: &Path, job_dir: &str) -> PathBuf {
    if job_dir.is_empty() {
        agent_dir.to_path_buf()
    } else {
        agent_dir.join(job_dir)
    }
}

/// The job's name, or the first word of its command as sbatch does.
fn job_name(name: &str, command: &str) -> String {
    if !name.is_empty() {
        return name.to_string();
    }
    command
        .split_whitespace()
        .next()
        .and_then(|w| w.rsplit('/').next())
        .filter(|w| !w.is_empty())
        .unwrap_or("berth")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_name_defaults_to_first_word() {
        assert_eq!(job_name("train", "python x.py"), "train");
        assert_eq!(job_name("", "/usr/bin/python x.py"), "python");
        assert_eq!(job_name("", "  "), "berth");
    }

    #[test]
    fn work_dir_resolution() {
        let agent = Path::new("/srv");
        assert_eq!(job_work_dir(agent, ""), PathBuf::from("/srv"));
        assert_eq!(job_work_dir(agent, "sub"), PathBuf::from("/srv/sub"));
        assert_eq!(job_work_dir(agent, "/abs"), PathBuf::from("/abs"));
    }
}
