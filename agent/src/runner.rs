//! Runs one allocation: launches `/bin/sh -c COMMAND` in its own process
//! group, reports its start and exit, and stops it (SIGTERM to the group,
//! then SIGKILL after the grace) when asked.
//!
//! Each job is one tokio task. It never panics on bad input: anything that
//! prevents the launch is reported as an exit with `launch_error` set.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use berth_proto::agent::Assignment;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::{self, PatternVars};
use crate::procgroup;

/// Shell that runs every job's command.
pub const SHELL: &str = "/bin/sh";
/// How long to keep SIGKILLing a job's leftover processes after its leader
/// exited before giving up with a warning, in ms.
pub const GROUP_KILL_TIMEOUT_MS: u64 = 5_000;

/// Agent-wide facts a launch needs.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// This host's name, the node list when an assignment has none.
    pub host: String,
    /// Working directory for jobs that give none; base for relative ones.
    pub work_dir: PathBuf,
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
    #[error("working directory {path}: {source}")]
    WorkDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("working directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("cannot open output file {path}: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {SHELL}: {0}")]
    Spawn(std::io::Error),
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobExit {
    /// The exit status; 128 + signal when killed (the shell's convention,
    /// so a reader that ignores `signal` still sees a failure).
    pub exit_code: i32,
    /// Signal that ended the leader, 0 if it exited on its own.
    pub signal: i32,
    /// Why the job could not be started; empty if it was.
    pub launch_error: String,
}

impl JobExit {
    fn from_status(status: ExitStatus) -> Self {
        match status.signal() {
            Some(sig) => JobExit {
                exit_code: 128 + sig,
                signal: sig,
                launch_error: String::new(),
            },
            None => JobExit {
                exit_code: status.code().unwrap_or(1),
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
    /// The process group leader runs with this pid (= process group id).
    Started { pid: i32 },
    /// The job is over; no process of its group is left (or a warning was
    /// logged saying which group could not be cleared).
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
    /// Asks the job to stop: SIGTERM to its group, SIGKILL after `grace`.
    /// Only the first request counts; later ones and requests after exit
    /// are ignored.
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

async fn run_job(
    a: Assignment,
    ctx: Arc<LaunchContext>,
    mut stop_rx: mpsc::Receiver<Duration>,
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

    let mut child = match launch(&a, &ctx).await {
        Ok(child) => child,
        Err(e) => {
            tracing::warn!(job_id, alloc_id, error = %e, "job launch failed");
            send(JobEventKind::Exited(JobExit::failed(e.to_string()))).await;
            return;
        }
    };
    // `id()` is only None once the child has been reaped, which has not
    // happened yet; the fallback keeps us panic-free regardless.
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    tracing::info!(job_id, alloc_id, pid, "job started");
    send(JobEventKind::Started { pid }).await;

    let status = tokio::select! {
        status = child.wait() => status,
        Some(grace) = stop_rx.recv() => {
            tracing::info!(job_id, alloc_id, pid, grace_s = grace.as_secs_f64(), "stopping job");
            stop(&mut child, pid, grace).await
        }
    };
    // Whatever the leader left behind in its group goes too (as Slurm does
    // when a batch script ends), so no job process outlives its report.
    if pid > 1 && !procgroup::kill_group(pid, Duration::from_millis(GROUP_KILL_TIMEOUT_MS)).await {
        tracing::warn!(
            job_id,
            alloc_id,
            pgid = pid,
            "processes of the job's group survive SIGKILL"
        );
    }
    let exit = match status {
        Ok(status) => JobExit::from_status(status),
        Err(e) => JobExit::failed(format!("cannot wait for the job's process: {e}")),
    };
    tracing::info!(
        job_id,
        alloc_id,
        exit_code = exit.exit_code,
        signal = exit.signal,
        "job exited"
    );
    send(JobEventKind::Exited(exit)).await;
}

/// SIGTERM to the group; SIGKILL once `grace` has passed. Returns the
/// leader's exit status. Other members get what is left of the grace.
async fn stop(child: &mut Child, pgid: i32, grace: Duration) -> std::io::Result<ExitStatus> {
    let deadline = Instant::now() + grace;
    if pgid > 1 {
        if let Err(e) = procgroup::signal_group(pgid, libc::SIGTERM) {
            tracing::warn!(pgid, error = %e, "cannot SIGTERM process group");
        }
    }
    let status = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            if pgid > 1 {
                if let Err(e) = procgroup::signal_group(pgid, libc::SIGKILL) {
                    tracing::warn!(pgid, error = %e, "cannot SIGKILL process group");
                }
            } else {
                child.start_kill()?;
            }
            child.wait().await
        }
    };
    if pgid > 1 {
        procgroup::wait_group_gone(pgid, deadline).await;
    }
    status
}

/// Prepares directories, files and environment, then spawns the job's
/// shell as the leader of a new process group.
pub async fn launch(a: &Assignment, ctx: &LaunchContext) -> Result<Child, LaunchError> {
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

    let work_dir = job_work_dir(&ctx.work_dir, &spec.workdir);
    let meta = tokio::fs::metadata(&work_dir)
        .await
        .map_err(|source| LaunchError::WorkDir {
            path: work_dir.clone(),
            source,
        })?;
    if !meta.is_dir() {
        return Err(LaunchError::NotADirectory(work_dir));
    }

    let job_name = job_name(&spec.name, &spec.command);
    let hosts: Vec<&str> = if a.hosts.is_empty() {
        vec![ctx.host.as_str()]
    } else {
        a.hosts.iter().map(String::as_str).collect()
    };
    let vars = PatternVars {
        job_id: a.job_id,
        job_name: &job_name,
        user: &spec.user,
        first_host: hosts[0],
    };
    let stdout_path = output::resolve(&work_dir, &spec.stdout_path, &vars);
    let stdout = open_append(&stdout_path).await?;
    let stderr = if spec.stderr_path.is_empty() {
        stdout.try_clone().map_err(|source| LaunchError::Output {
            path: stdout_path.clone(),
            source,
        })?
    } else {
        open_append(&output::resolve(&work_dir, &spec.stderr_path, &vars)).await?
    };

    let cpus = if a.cpus > 0 { a.cpus } else { spec.cpus.max(1) };
    let job_id = a.job_id.to_string();
    let nodelist = hosts.join(",");
    let cpus = cpus.to_string();

    let mut cmd = Command::new(SHELL);
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&work_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .envs(&spec.env)
        .env("BERTH_JOB_ID", &job_id)
        .env("SLURM_JOB_ID", &job_id)
        .env("BERTH_JOB_NAME", &job_name)
        .env("SLURM_JOB_NAME", &job_name)
        .env("BERTH_NODELIST", &nodelist)
        .env("SLURM_JOB_NODELIST", &nodelist)
        .env("BERTH_CPUS", &cpus)
        .env("SLURM_CPUS_ON_NODE", &cpus)
        .env("BERTH_ALLOC_ID", a.alloc_id.to_string())
        // Its own group, so a stop reaches every process of the job and
        // none of the agent's.
        .process_group(0)
        // The job task owns the lifecycle; dropping the handle must not
        // kill a job behind the stop protocol's back.
        .kill_on_drop(false);
    cmd.spawn().map_err(LaunchError::Spawn)
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

async fn open_append(path: &Path) -> Result<std::fs::File, LaunchError> {
    let file = tokio::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .await
        .map_err(|source| LaunchError::Output {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(file.into_std().await)
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
