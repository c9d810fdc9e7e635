//! No step task outlives its allocation, even across an agent restart.
//!
//! Every step task carries `BERTH_STEP_TAG=INSTANCE.ALLOC.AGENT_PID.CALL`
//! in its environment, inherited by all it starts. The call that started
//! it kills what is left under its own tag once its tasks ended (processes
//! that left the task's group). An agent process that died leaves its
//! calls' tasks behind (the first process of each dies with it, by
//! PDEATHSIG; what that started does not): the next agent process finds
//! them by the instance in their tag and kills them once their allocation
//! is no longer listed for this host. The limit is the job-tag one: a
//! process that replaced its environment is not found.

use std::collections::BTreeSet;

use berth_proto::agent::AssignmentSet;
use tokio::sync::watch;

use crate::procgroup;

/// The environment variable step tasks are tagged with.
pub const STEP_TAG_VAR: &str = "BERTH_STEP_TAG";

/// The tag of one call's tasks.
pub fn tag(instance: &str, alloc_id: u64, agent_pid: u32, call: u64) -> String {
    format!("{instance}.{alloc_id}.{agent_pid}.{call}")
}

/// `(alloc_id, agent_pid)` of a tag of `instance`'s.
fn parse(instance: &str, tag: &str) -> Option<(u64, u32)> {
    let rest = tag.strip_prefix(instance)?.strip_prefix('.')?;
    let mut parts = rest.split('.');
    let alloc_id = parts.next()?.parse().ok()?;
    let agent_pid = parts.next()?.parse().ok()?;
    let _call: u64 = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((alloc_id, agent_pid))
}

/// SIGKILLs every process tagged exactly `tag`; returns how many.
pub fn kill_tagged(tag: &str) -> usize {
    let var = format!("{STEP_TAG_VAR}={tag}");
    let pids: Vec<i32> = procgroup::processes_with_env_var(|v| (v == var.as_bytes()).then_some(()))
        .into_iter()
        .map(|(pid, ())| pid)
        .collect();
    kill(&pids)
}

fn kill(pids: &[i32]) -> usize {
    for &pid in pids {
        // SAFETY: kill(2) of a positive pid only sends a signal.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    // Orphans of ours (we are the subreaper) must not stay zombies.
    procgroup::reap_pids(pids);
    pids.len()
}

/// Kills the step tasks an earlier process of this agent (`instance`)
/// left whose allocation is not in `listed`; returns how many.
pub fn sweep_leftovers(instance: &str, listed: &BTreeSet<u64>) -> usize {
    let me = std::process::id();
    let prefix = format!("{STEP_TAG_VAR}=");
    let pids: Vec<i32> = procgroup::processes_with_env_var(|var| {
        let tag = std::str::from_utf8(var.strip_prefix(prefix.as_bytes())?).ok()?;
        let (alloc_id, agent_pid) = parse(instance, tag)?;
        (agent_pid != me && !listed.contains(&alloc_id)).then_some(())
    })
    .into_iter()
    .map(|(pid, ())| pid)
    .collect();
    kill(&pids)
}

/// The allocations a set lists for this host.
pub(super) fn listed_ids(set: &AssignmentSet) -> BTreeSet<u64> {
    set.members
        .iter()
        .chain(set.assignments.iter())
        .map(|a| a.alloc_id)
        .collect()
}

/// Sweeps once the first set arrives and again whenever an allocation
/// leaves the listed ones, until the sender goes: step tasks left behind
/// are killed, and step counters kept in `state` (see
/// `StepServer::next_step_id`) forgotten.
pub async fn sweep_on_changes(
    mut desired: watch::Receiver<Option<AssignmentSet>>,
    instance: String,
    state: Option<crate::statedir::StateDir>,
) {
    let mut last: Option<BTreeSet<u64>> = None;
    loop {
        let now = desired.borrow_and_update().as_ref().map(listed_ids);
        if let Some(now) = now {
            // Only an allocation that left can have leftovers to kill (and
            // any, on the first set after a start).
            let departed = last
                .as_ref()
                .is_none_or(|before| before.iter().any(|id| !now.contains(id)));
            if departed {
                let (inst, ids, state) = (instance.clone(), now.clone(), state.clone());
                let swept = tokio::task::spawn_blocking(move || {
                    if let Some(state) = state {
                        state.forget_steps_except(&ids);
                    }
                    sweep_leftovers(&inst, &ids)
                });
                match swept.await {
                    Ok(0) => {}
                    Ok(killed) => {
                        tracing::info!(killed, "killed step tasks an earlier agent process left")
                    }
                    Err(e) => tracing::warn!(error = %e, "step sweep failed"),
                }
            }
            // What departs is judged against the set just seen, additions
            // included: an allocation added and then gone must be swept.
            last = Some(now);
        }
        if desired.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_instance_allocation_and_agent_process() {
        let t = tag("abc", 42, 1000, 3);
        assert_eq!(t, "abc.42.1000.3");
        assert_eq!(parse("abc", &t), Some((42, 1000)));
        assert_eq!(parse("ab", &t), None, "another instance");
        assert_eq!(parse("abc", "abc.42.1000"), None);
        assert_eq!(parse("abc", "abc.42.1000.3.9"), None);
        assert_eq!(parse("abc", "abc.x.1000.3"), None);
    }
}
