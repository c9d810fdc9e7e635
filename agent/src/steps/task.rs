//! One RunTasks call: start the tasks, stream their output, report each
//! end, and stop them all when their allocation leaves this host or the
//! caller goes away.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::Stdio;
use std::time::Duration;

use berth_proto::agent::{Assignment, AssignmentSet, RunTasksRequest, TaskOutput};
use tokio::io::AsyncReadExt as _;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tonic::Status;

use crate::config::{DEFAULT_STOP_GRACE_S, STOP_GRACE_MAX_S};
use crate::procgroup;
use crate::user::RunAs;

/// Bytes read from a task's pipe at once (one output message at most).
const TASK_READ_BYTES: usize = 64 * 1024;
/// How long a task's leftovers may take to die after it ended, in ms.
const TASK_LEFTOVER_KILL_MS: u64 = 5_000;
/// How long the rest of a task's output may take to arrive after its
/// group is gone (a process that left the group may hold the pipe), in ms.
const TASK_OUTPUT_DRAIN_MS: u64 = 2_000;
type Out = mpsc::Sender<Result<TaskOutput, Status>>;

/// What one call runs.
pub struct Step {
    /// `BERTH_STEP_TAG` of this call's tasks (see `sweep`).
    pub tag: String,
    pub host: String,
    pub request: RunTasksRequest,
    /// The allocation as this host's set lists it.
    pub alloc: Assignment,
    /// `None`: as the agent's own user.
    pub run_as: Option<RunAs>,
}

/// The environment of task `task` (the `local`-th on this host).
pub fn task_env(step: &Step, task: u32, local: usize) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = step
        .request
        .env
        .iter()
        .filter(|(k, _)| !crate::jobenv::DEVICE_VARS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.sort();
    let mut set = |k: &str, v: String| env.push((k.to_string(), v));
    set("SLURM_PROCID", task.to_string());
    set("SLURM_LOCALID", local.to_string());
    set("SLURM_NODEID", step.request.node_id.to_string());
    set("SLURMD_NODENAME", step.host.clone());
    set(super::STEP_TAG_VAR, step.tag.clone());
    // This host's devices, not those srun's environment names.
    for (k, v) in crate::jobenv::device_env(&step.alloc.gpu_indices) {
        set(k, v);
    }
    if let Some(u) = &step.run_as {
        set("USER", u.name.clone());
        set("LOGNAME", u.name.clone());
        set("HOME", u.home.display().to_string());
    }
    env
}

/// Runs the call to its end.
pub async fn run(step: Step, mut desired: watch::Receiver<Option<AssignmentSet>>, out: Out) {
    let job_id = step.request.job_id;
    let alloc_id = step.request.alloc_id;
    let grace = Duration::from_secs(match step.alloc.stop_grace_s {
        0 => DEFAULT_STOP_GRACE_S,
        s => s.min(STOP_GRACE_MAX_S),
    });
    let mut groups: Vec<i32> = Vec::new();
    let mut waits = JoinSet::new();
    for (local, &task) in step.request.tasks.iter().enumerate() {
        match spawn(&step, task, local) {
            Ok(child) => {
                let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
                groups.push(pgid);
                waits.spawn(watch_task(task, pgid, child, out.clone()));
            }
            Err(e) => {
                let why = format!("cannot start {}: {e}", step.request.argv[0]);
                tracing::warn!(job_id, alloc_id, task, error = %why, "step task not started");
                let _ = out
                    .send(Ok(TaskOutput {
                        task,
                        exited: true,
                        exit_code: 1,
                        launch_error: why,
                        ..TaskOutput::default()
                    }))
                    .await;
            }
        }
    }
    // Stops asked for so far: the allocation left (SIGTERM, then SIGKILL
    // after the grace) or the caller went (SIGKILL at once).
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut caller_gone = false;
    let mut alloc_gone = false;
    loop {
        tokio::select! {
            done = waits.join_next() => {
                if done.is_none() {
                    break;
                }
            }
            changed = desired.changed(), if !alloc_gone => {
                let still = changed.is_ok()
                    && super::listed(desired.borrow().as_ref(), job_id, alloc_id).is_some();
                if !still {
                    alloc_gone = true;
                    tracing::info!(job_id, alloc_id, "allocation left this host: stopping its step tasks");
                    signal_all(&groups, libc::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + grace);
                }
            }
            () = out.closed(), if !caller_gone => {
                caller_gone = true;
                tracing::info!(job_id, alloc_id, "srun went away: killing its step tasks");
                signal_all(&groups, libc::SIGKILL);
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                kill_at = None;
                signal_all(&groups, libc::SIGKILL);
            }
        }
    }
    // What left its task's group (setsid, daemons) ends with the step too.
    let tag = step.tag.clone();
    let _ = tokio::task::spawn_blocking(move || super::sweep::kill_tagged(&tag)).await;
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal_all(groups: &[i32], sig: i32) {
    for &pgid in groups {
        // A group already gone is fine; pgid 0 (no pid) is refused.
        let _ = procgroup::signal_group(pgid, sig);
    }
}

/// Waits for one task, clears its group, forwards the rest of its output,
/// then reports its end.
async fn watch_task(task: u32, pgid: i32, mut child: tokio::process::Child, out: Out) {
    let mut readers = JoinSet::new();
    if let Some(pipe) = child.stdout.take() {
        readers.spawn(forward(task, 1, pipe, out.clone()));
    }
    if let Some(pipe) = child.stderr.take() {
        readers.spawn(forward(task, 2, pipe, out.clone()));
    }
    let status = child.wait().await;
    // A step ends with its task: what the task left behind in its group
    // goes too, as Slurm's step ends with its processes.
    if pgid > 1 {
        procgroup::kill_group(pgid, Duration::from_millis(TASK_LEFTOVER_KILL_MS)).await;
    }
    let drained = tokio::time::timeout(Duration::from_millis(TASK_OUTPUT_DRAIN_MS), async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        readers.abort_all();
    }
    let message = match status {
        Ok(s) => TaskOutput {
            task,
            exited: true,
            exit_code: s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            signal: s.signal().unwrap_or(0),
            ..TaskOutput::default()
        },
        Err(e) => TaskOutput {
            task,
            exited: true,
            exit_code: 1,
            launch_error: format!("cannot wait for the task: {e}"),
            ..TaskOutput::default()
        },
    };
    let _ = out.send(Ok(message)).await;
}

async fn forward(task: u32, stream: u32, mut pipe: impl tokio::io::AsyncRead + Unpin, out: Out) {
    let mut buf = vec![0u8; TASK_READ_BYTES];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let message = TaskOutput {
                    task,
                    stream,
                    data: buf[..n].to_vec(),
                    ..TaskOutput::default()
                };
                if out.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn spawn(step: &Step, task: u32, local: usize) -> std::io::Result<tokio::process::Child> {
    let argv = &step.request.argv;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(task_env(step, task, local))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a stop reaches all it started.
        .process_group(0)
        .kill_on_drop(false);
    let setup = TaskSetup {
        ids: step
            .run_as
            .as_ref()
            .map(|u| (u.uid, u.gid, u.groups.clone())),
        cwd: if step.request.cwd.is_empty() {
            None
        } else {
            Some(
                CString::new(
                    std::path::Path::new(&step.request.cwd)
                        .as_os_str()
                        .as_bytes(),
                )
                .map_err(|_| std::io::Error::other("cwd contains a NUL byte"))?,
            )
        },
        cwd_fallback_note: format!(
            "berth: {}: cannot enter {}: starting in /tmp instead\n",
            step.host, step.request.cwd
        )
        .into_bytes(),
    };
    // SAFETY: the closure makes only async-signal-safe system calls on
    // memory prepared before the fork (see TaskSetup::run).
    unsafe {
        cmd.as_std_mut().pre_exec(move || setup.run());
    }
    cmd.spawn()
}

/// What a task's child does between fork and exec.
struct TaskSetup {
    ids: Option<(u32, u32, Vec<u32>)>,
    cwd: Option<CString>,
    /// Said on the task's stderr when `cwd` does not exist here (a host
    /// without the submitter's file system): the task starts in /tmp, as
    /// Slurm's do.
    cwd_fallback_note: Vec<u8>,
}

impl TaskSetup {
    fn run(&self) -> std::io::Result<()> {
        // SAFETY (whole block): plain system calls on values prepared
        // before the fork; no allocation.
        unsafe {
            // The agent's threads may block signals; a task must not
            // inherit that, or it would ignore srun's and the stop's.
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            // An agent that dies takes its step tasks along (the caller
            // lost them anyway).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if let Some((uid, gid, groups)) = &self.ids {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(cwd) = &self.cwd {
                if libc::chdir(cwd.as_ptr()) != 0 {
                    let note = &self.cwd_fallback_note;
                    libc::write(2, note.as_ptr().cast(), note.len());
                    if libc::chdir(c"/tmp".as_ptr()) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_sees_its_rank_and_this_hosts_devices() {
        let step = Step {
            host: "n2".into(),
            request: RunTasksRequest {
                env: [
                    ("CUDA_VISIBLE_DEVICES".to_string(), "0,1".to_string()),
                    ("SLURM_NTASKS".to_string(), "4".to_string()),
                ]
                .into(),
                node_id: 1,
                ..Default::default()
            },
            alloc: Assignment {
                gpu_indices: vec![2, 3],
                ..Default::default()
            },
            run_as: None,
            tag: "i.5.100.0".into(),
        };
        let env = task_env(&step, 3, 1);
        let get = |k: &str| {
            env.iter()
                .filter(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("SLURM_PROCID"), ["3"]);
        assert_eq!(get("SLURM_LOCALID"), ["1"]);
        assert_eq!(get("SLURM_NODEID"), ["1"]);
        assert_eq!(get("SLURMD_NODENAME"), ["n2"]);
        assert_eq!(get("SLURM_NTASKS"), ["4"]);
        assert_eq!(
            get("CUDA_VISIBLE_DEVICES"),
            ["2,3"],
            "this host's, not srun's"
        );
        let without_gpus = Step {
            alloc: Assignment::default(),
            ..step
        };
        assert!(task_env(&without_gpus, 0, 0)
            .iter()
            .all(|(k, _)| k != "CUDA_VISIBLE_DEVICES"));
    }
}
