//! Process-group signalling and reaping (thin, checked wrappers over libc).
//!
//! Every job runs in its own process group whose id is the pid of the
//! `/bin/sh` that leads it, so signalling `-pgid` reaches everything the job
//! started unless it deliberately left the group.

use std::io;
use std::time::Duration;

/// How often to look again while waiting for a group to disappear, in ms.
pub const GROUP_REAP_POLL_MS: u64 = 10;

/// Sends `sig` to every process in group `pgid`. Returns `Ok(false)` when
/// the group no longer exists.
///
/// Refuses `pgid <= 1`: `kill(0, ..)` would hit the agent's own group and
/// `kill(-1, ..)` every process it may signal.
pub fn signal_group(pgid: i32, sig: i32) -> io::Result<bool> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: kill(2) with a negative pid only sends a signal; no memory.
    let rc = unsafe { libc::kill(-pgid, sig) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ESRCH) => Ok(false),
        _ => Err(err),
    }
}

/// True while any process (zombies included) is in group `pgid`.
pub fn group_exists(pgid: i32) -> bool {
    // EPERM also means "exists": someone else's process took the group.
    !matches!(signal_group(pgid, 0), Ok(false))
}

/// Reaps already-exited children of ours in group `pgid`, without blocking.
/// Only the group's orphans can match: the leader has been reaped by tokio
/// before this is called, and other jobs live in other groups.
fn reap_exited_members(pgid: i32) {
    loop {
        // SAFETY: waitpid with WNOHANG and a null status pointer.
        let rc = unsafe { libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) };
        if rc <= 0 {
            // 0: members remain but none exited; -1: none are our children.
            return;
        }
    }
}

/// Makes this process the reaper of orphaned descendants (Linux), so the
/// leftovers of a job's group become our children and [`kill_group`] can
/// reap them instead of waiting for whatever init the host runs.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SIGKILLs group `pgid` until no member is left (reaping the ones that are
/// our children), or until `timeout` passes. Returns true when the group is
/// gone.
///
/// Called after the leader has exited and been reaped, so the group id may
/// in principle be reused once empty; the window is the few microseconds
/// between the group emptying and our `kill`, and a reuse needs the pid
/// counter to wrap around inside it.
pub async fn kill_group(pgid: i32, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match signal_group(pgid, libc::SIGKILL) {
            Ok(false) => return true,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(pgid, error = %e, "cannot SIGKILL process group");
                return false;
            }
        }
        reap_exited_members(pgid);
        if !group_exists(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(GROUP_REAP_POLL_MS)).await;
    }
}

/// Waits until group `pgid` has no member left (reaping the ones that are
/// our children), or until `deadline`. Returns true when the group is gone.
pub async fn wait_group_gone(pgid: i32, deadline: tokio::time::Instant) -> bool {
    loop {
        reap_exited_members(pgid);
        if !group_exists(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(GROUP_REAP_POLL_MS)).await;
    }
}

/// Most /proc entries looked at when searching for a job's processes.
pub const PROC_SCAN_ENTRIES_MAX: usize = 1_000_000;
/// Most bytes of one process's environment read when searching.
pub const ENVIRON_BYTES_MAX: u64 = 1 << 20;

/// Pids of processes (other than this one) whose environment carries
/// `BERTH_JOB_TAG=<tag>` (the agent's instance and the alloc id, unique on
/// the machine): every process a job starts inherits it, so
/// this finds those that left the job's process group (setsid, daemons)
/// when there is no cgroup. A process that replaced its environment
/// (`env -i`) and left the group is not found: that is the limit of the
/// fallback.
pub fn tagged_processes(tag: &str) -> Vec<i32> {
    let tag = format!("BERTH_JOB_TAG={tag}");
    processes_with_env_var(|var| (var == tag.as_bytes()).then_some(()))
        .into_iter()
        .map(|(pid, ())| pid)
        .collect()
}

/// Processes (other than this one) with an environment variable (`NAME=
/// VALUE` bytes) that `pick` recognises, with what it made of it.
pub fn processes_with_env_var<T>(pick: impl Fn(&[u8]) -> Option<T>) -> Vec<(i32, T)> {
    use std::io::Read;
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.take(PROC_SCAN_ENTRIES_MAX).flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 1 || pid == me {
            continue;
        }
        let mut env = Vec::new();
        let read = std::fs::File::open(format!("/proc/{pid}/environ"))
            .and_then(|f| f.take(ENVIRON_BYTES_MAX).read_to_end(&mut env));
        if read.is_err() {
            continue;
        }
        if let Some(hit) = env.split(|&b| b == 0).find_map(&pick) {
            found.push((pid, hit));
        }
    }
    found
}

/// True while `pid` is a child of this process (running or a zombie we
/// have not reaped), from field 4 of /proc/PID/stat.
pub fn is_our_child(pid: i32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The command name may hold spaces and parentheses: fields resume
    // after the last ')'.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return false;
    };
    let ppid = rest
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u32>().ok());
    ppid == Some(std::process::id())
}

/// Reaps `pid` if it is an exited child of ours; true once it is reaped
/// or is no child of ours (reaped already, or never ours).
pub fn reaped_or_gone(pid: i32) -> bool {
    if pid <= 1 {
        return true;
    }
    // SAFETY: waitpid with WNOHANG and a null status pointer.
    let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    rc != 0
}

/// Reaps each of `pids` that is an exited child of ours, without blocking
/// (orphans of a job come to the agent as the subreaper).
pub fn reap_pids(pids: &[i32]) {
    for &pid in pids {
        if pid > 1 {
            // SAFETY: waitpid with WNOHANG and a null status pointer.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_dangerous_groups() {
        for pgid in [-5, 0, 1] {
            assert!(signal_group(pgid, 0).is_err(), "pgid {pgid}");
        }
    }
}
