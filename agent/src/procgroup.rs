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
