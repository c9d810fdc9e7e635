//! Faults the drill injects into a local cluster, each one an episode:
//! inject, measure how long until the survivors agree on a leader and
//! until that leader's first scheduling pass, keep the fault for a seeded
//! while, recover, and wait until every node has caught up again.

use std::time::{Duration, Instant};

use super::checks::AgentOutage;
use super::membership;
use super::rng::Rng;
use crate::failover::{metric_value, FIRST_PASS};
use crate::harness::{status_of, HarnessError, LocalCluster};

/// Longest the drill waits for a leader, or for the nodes to catch up,
/// after a fault.
pub const RECOVERY_DEADLINE: Duration = Duration::from_secs(60);
/// How long the leader stays stopped or cut off: well past the election
/// timeout (300–600 ms) and the lease openraft keeps after it.
const PAUSE_MS: u64 = 2_500;
/// A cut agent stays cut off between these (ms): long enough for several
/// missed heartbeats (500 ms apart in the harness) and calls that stall,
/// well inside the 10 s heartbeat timeout.
const AGENT_CUT_MS: (u64, u64) = (1_000, 3_000);
/// A status call to a node that may be stopped is given this long.
const STATUS_TIMEOUT: Duration = Duration::from_millis(400);
/// Pause between polls of the cluster's leader.
const POLL: Duration = Duration::from_millis(20);
/// Longest a fault waits for the new leader's first scheduling pass; past
/// it the fault records none (the leader may have lost its place first).
const FIRST_PASS_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between scrapes of the new leader's metrics. The figure is the
/// gauge's own time stamp, so the pause does not blur it.
const FIRST_PASS_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
pub enum FaultKind {
    /// kill -9 the leader, restart it later.
    KillLeader,
    /// kill -9 a follower, restart it later.
    KillFollower,
    /// SIGSTOP the leader past the election timeout, then SIGCONT.
    PauseLeader,
    /// kill -9 every node at once and start them all again.
    RestartAll,
    /// kill -9 an agent (its jobs keep running) and start it again.
    KillAgent,
    /// kill -9 the leader and as many followers as still leave a
    /// majority (5 nodes: 2 members lost at once).
    KillMinority,
    /// A membership change under load: the spare node joins as a learner,
    /// takes a follower's seat, the follower is stopped; then the same
    /// swap back (`membership`).
    ReplaceFollower,
    /// A membership change that removes the leader itself under load: the
    /// spare takes the leader's seat, the old leader steps down once the
    /// change commits and the new voters elect a leader; then the same
    /// swap back (`membership`).
    ReplaceLeader,
    /// Cut the leader off from every other process (its network link
    /// goes down: nodes, agents and clients lose its packets and it
    /// theirs) past the election timeout, then heal it. Needs the cluster
    /// in network namespaces (`--netns`).
    CutLeader,
    /// Cut an agent off from every node for 1-3 s (well inside the
    /// heartbeat timeout), then heal it: its jobs run on, their exits are
    /// reported after, and its host is never marked down. Needs
    /// `--netns`.
    CutAgent,
}

impl FaultKind {
    /// Whether the kind cuts links and so needs a cluster in namespaces.
    pub fn needs_netns(self) -> bool {
        matches!(self, FaultKind::CutLeader | FaultKind::CutAgent)
    }

    /// The kinds a cluster of `nodes` can take; the network cuts only
    /// where its processes run in namespaces (`netns`).
    pub fn all(nodes: u64, netns: bool) -> Vec<FaultKind> {
        let mut kinds = vec![
            FaultKind::KillLeader,
            FaultKind::KillFollower,
            FaultKind::PauseLeader,
            FaultKind::RestartAll,
            FaultKind::KillAgent,
            FaultKind::ReplaceFollower,
            FaultKind::ReplaceLeader,
        ];
        if nodes >= 5 {
            kinds.push(FaultKind::KillMinority);
        }
        if netns {
            kinds.extend([FaultKind::CutLeader, FaultKind::CutAgent]);
        }
        kinds
    }
}

/// The seeded order of faults drawn from `kinds`: every kind
/// once in a shuffled order (so a short drill meets each), then kinds at
/// random.
pub fn schedule(rng: &mut Rng, kinds: &[FaultKind], count: usize) -> Vec<FaultKind> {
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut first = kinds.to_vec();
    for i in (1..first.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        first.swap(i, j);
    }
    let all = kinds;
    (0..count)
        .map(|i| {
            first
                .get(i)
                .copied()
                .unwrap_or_else(|| all[rng.range(0, all.len() as u64 - 1) as usize])
        })
        .collect()
}

/// One injected fault and what followed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    /// ms since the drill's workload started.
    pub at_ms: u64,
    /// What was hit: node ids or an agent's host.
    pub target: String,
    /// Fault → survivors agree on a new leader, for faults that take the
    /// leader away (for `ReplaceLeader`: the ChangeMembership call → the
    /// new voters agree on a leader among them).
    pub failover_ms: Option<u64>,
    /// Fault → the start of that new leader's first scheduling pass (its
    /// `berth_scheduler_leader_first_pass_timestamp_seconds`), for faults
    /// that take the leader away; None if none was seen in
    /// `FIRST_PASS_DEADLINE`.
    pub first_pass_ms: Option<u64>,
    /// ChangeMembership → every running new voter names the new voters
    /// and the same leader, for membership changes.
    pub membership_ms: Option<u64>,
    /// Fault → every node caught up again after recovery.
    pub recovered_ms: u64,
}

/// A node cut off, healed when this is dropped (also on an error path).
struct Cut<'a>(&'a LocalCluster, u64);

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.heal_node(self.1) {
            eprintln!("healing node {}: {e}", self.1);
        }
    }
}

/// A stopped node, continued when this is dropped (also on an error path).
struct Paused(u32);

impl Drop for Paused {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a child process the harness started.
        unsafe {
            libc::kill(self.0 as i32, libc::SIGCONT);
        }
    }
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Wall-clock ms since the epoch, to compare with the nodes' time stamps
/// (every process shares this host's clock).
pub fn wall_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

/// ms from `since_wall_ms` to the start of `leader`'s first scheduling
/// pass as leader after it; None if it ran none within
/// [`FIRST_PASS_DEADLINE`].
pub async fn first_pass_after(
    cluster: &LocalCluster,
    leader: u64,
    since_wall_ms: f64,
) -> Option<u64> {
    let start = Instant::now();
    while start.elapsed() < FIRST_PASS_DEADLINE {
        let pass_ms = cluster
            .scrape_metrics(leader)
            .ok()
            .and_then(|text| metric_value(&text, FIRST_PASS))
            .map(|s| s * 1_000.0);
        if let Some(pass_ms) = pass_ms.filter(|&p| p >= since_wall_ms) {
            return Some((pass_ms - since_wall_ms).round() as u64);
        }
        tokio::time::sleep(FIRST_PASS_POLL).await;
    }
    None
}

fn signal(pid: u32, sig: i32) -> Result<(), HarnessError> {
    // SAFETY: kill(2) on a child process the harness started.
    if unsafe { libc::kill(pid as i32, sig) } != 0 {
        return Err(HarnessError::Io(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The leader the running nodes outside `skip` agree on, if a majority of
/// the `nodes` answer, they all name the same leader, and it is one of
/// them; a node that does not answer in time, or is not a member by its
/// own account (a leader `ReplaceLeader` removed, still running), has no
/// say. (Right after a restart one node may still name a leader from
/// before it.)
async fn agreed_leader(cluster: &LocalCluster, nodes: u64, skip: &[u64]) -> Option<u64> {
    let mut leader = None;
    let mut answered = 0;
    for id in (1..=nodes).filter(|id| !skip.contains(id) && cluster.node_pid(*id).is_some()) {
        let addr = cluster.addr(id).ok()?;
        let Ok(Ok(status)) = tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await else {
            continue;
        };
        if !status.members.iter().any(|m| m.node_id == id) {
            continue;
        }
        answered += 1;
        let ok = status.leader_id != 0
            && !skip.contains(&status.leader_id)
            && cluster.node_pid(status.leader_id).is_some();
        if !ok || leader.is_some_and(|l| l != status.leader_id) {
            return None;
        }
        leader = Some(status.leader_id);
    }
    (answered * 2 > nodes).then_some(leader).flatten()
}

/// Waits for a leader outside `skip`; returns it.
pub async fn wait_leader(
    cluster: &LocalCluster,
    nodes: u64,
    skip: &[u64],
) -> Result<u64, HarnessError> {
    let start = Instant::now();
    loop {
        if let Some(l) = agreed_leader(cluster, nodes, skip).await {
            return Ok(l);
        }
        if start.elapsed() > RECOVERY_DEADLINE {
            return Err(HarnessError::Timeout {
                what: format!("a leader outside {skip:?}"),
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until a leader is agreed and every running node has applied
/// what the leader had committed when this began: caught up with the
/// fault's aftermath (under load the indexes rarely stand still).
pub async fn wait_recovered(cluster: &LocalCluster, nodes: u64) -> Result<(), HarnessError> {
    let start = Instant::now();
    // The leader's commit index, asked until a leader answers: the one
    // just agreed on may lose its place before it does.
    let commit = loop {
        let leader = wait_leader(cluster, nodes, &[]).await?;
        let addr = cluster.addr(leader)?;
        match tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await {
            Ok(Ok(s)) if s.leader_id == leader => break s.commit_index,
            _ if start.elapsed() > RECOVERY_DEADLINE => {
                return Err(HarnessError::Timeout {
                    what: format!("leader {leader} to answer"),
                    waited_ms: start.elapsed().as_millis() as u64,
                })
            }
            _ => tokio::time::sleep(POLL).await,
        }
    };
    loop {
        let mut behind = Vec::new();
        for id in (1..=nodes).filter(|id| cluster.node_pid(*id).is_some()) {
            let addr = cluster.addr(id)?;
            match tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await {
                Ok(Ok(s)) if s.applied_index >= commit => {}
                _ => behind.push(id),
            }
        }
        if behind.is_empty() {
            return Ok(());
        }
        if start.elapsed() > RECOVERY_DEADLINE {
            return Err(HarnessError::Timeout {
                what: format!("nodes {behind:?} to apply index {commit}"),
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// With `leader` out of reach (stopped or cut off) since `started`: waits
/// for the others to agree on a new leader and for its first pass, then
/// keeps the fault until [`PAUSE_MS`] have passed. Returns the failover
/// and first-pass times.
async fn replaced_then_held(
    cluster: &LocalCluster,
    nodes: u64,
    leader: u64,
    started: Instant,
    started_wall_ms: f64,
) -> Result<(u64, Option<u64>), HarnessError> {
    let new_leader = wait_leader(cluster, nodes, &[leader]).await?;
    let failover_ms = started.elapsed().as_millis() as u64;
    let first_pass_ms = first_pass_after(cluster, new_leader, started_wall_ms).await;
    let held = started.elapsed();
    if held < Duration::from_millis(PAUSE_MS) {
        tokio::time::sleep(Duration::from_millis(PAUSE_MS) - held).await;
    }
    Ok((failover_ms, first_pass_ms))
}

/// Starts every node among the voters `1..=nodes` that is not running,
/// and no spare: a spare runs only while a membership change has it.
fn start_stopped_voters(cluster: &mut LocalCluster, nodes: u64) -> Result<(), HarnessError> {
    for id in 1..=nodes {
        if cluster.node_pid(id).is_none() {
            cluster.start_node(id)?;
        }
    }
    Ok(())
}

/// Where faults are injected: the cluster, its size, and the agents' hosts.
pub struct Target<'a> {
    pub cluster: &'a mut LocalCluster,
    pub nodes: u64,
    pub agents: u32,
    /// When the workload started, for `at_ms`.
    pub t0: Instant,
}

/// Injects one fault and recovers from it. An agent kill is also returned
/// as its outage, for the host-down check.
pub async fn inject(
    target: &mut Target<'_>,
    kind: FaultKind,
    rng: &mut Rng,
) -> Result<(FaultRecord, Option<AgentOutage>), HarnessError> {
    let nodes = target.nodes;
    let leader = wait_leader(target.cluster, nodes, &[]).await?;
    let down_ms = rng.range(300, 1_500);
    let started = Instant::now();
    let started_wall_ms = wall_ms();
    let at_ms = target.t0.elapsed().as_millis() as u64;
    let mut failover_ms = None;
    let mut first_pass_ms = None;
    let mut membership_ms = None;
    let mut agent_kill = None;
    let target_text;
    match kind {
        FaultKind::KillLeader | FaultKind::KillMinority => {
            let mut victims = vec![leader];
            if kind == FaultKind::KillMinority {
                let followers: Vec<u64> = (1..=nodes).filter(|id| *id != leader).collect();
                let extra = (nodes as usize - 1) / 2 - 1;
                for k in 0..extra {
                    victims.push(followers[(rng.range(0, 1_000) as usize + k) % followers.len()]);
                }
                victims.dedup();
            }
            for id in &victims {
                target.cluster.kill_node(*id)?;
            }
            let new_leader = wait_leader(target.cluster, nodes, &victims).await?;
            failover_ms = Some(started.elapsed().as_millis() as u64);
            first_pass_ms = first_pass_after(target.cluster, new_leader, started_wall_ms).await;
            tokio::time::sleep(Duration::from_millis(down_ms)).await;
            start_stopped_voters(target.cluster, nodes)?;
            target_text = format!("nodes {victims:?}");
        }
        FaultKind::KillFollower => {
            let followers: Vec<u64> = (1..=nodes).filter(|id| *id != leader).collect();
            let victim = followers[rng.range(0, followers.len() as u64 - 1) as usize];
            target.cluster.kill_node(victim)?;
            tokio::time::sleep(Duration::from_millis(down_ms)).await;
            target.cluster.start_node(victim)?;
            target_text = format!("node {victim}");
        }
        FaultKind::PauseLeader => {
            let pid = target
                .cluster
                .node_pid(leader)
                .ok_or(HarnessError::NoSuchNode(leader))?;
            signal(pid, libc::SIGSTOP)?;
            let paused = Paused(pid);
            let (failover, first_pass) =
                replaced_then_held(target.cluster, nodes, leader, started, started_wall_ms).await?;
            (failover_ms, first_pass_ms) = (Some(failover), first_pass);
            drop(paused);
            target_text = format!("node {leader} for {PAUSE_MS} ms");
        }
        FaultKind::CutLeader => {
            target.cluster.cut_node(leader)?;
            let cut = Cut(target.cluster, leader);
            let (failover, first_pass) =
                replaced_then_held(target.cluster, nodes, leader, started, started_wall_ms).await?;
            (failover_ms, first_pass_ms) = (Some(failover), first_pass);
            drop(cut);
            target_text = format!("node {leader} for {PAUSE_MS} ms");
        }
        FaultKind::CutAgent => {
            let i = rng.range(1, u64::from(target.agents)) as u32;
            let hold_ms = rng.range(AGENT_CUT_MS.0, AGENT_CUT_MS.1);
            target.cluster.cut_agent(i)?;
            tokio::time::sleep(Duration::from_millis(hold_ms)).await;
            target.cluster.heal_agent(i)?;
            // Not an outage: a cut this short must not end any job
            // NODE_FAIL (`checks::node_fail_explained`).
            target_text = format!("agent of {} for {hold_ms} ms", LocalCluster::agent_host(i));
        }
        FaultKind::RestartAll => {
            target.cluster.kill_all_nodes()?;
            start_stopped_voters(target.cluster, nodes)?;
            let new_leader = wait_leader(target.cluster, nodes, &[]).await?;
            failover_ms = Some(started.elapsed().as_millis() as u64);
            first_pass_ms = first_pass_after(target.cluster, new_leader, started_wall_ms).await;
            target_text = "every node".to_string();
        }
        FaultKind::KillAgent => {
            let i = rng.range(1, u64::from(target.agents)) as u32;
            let host = LocalCluster::agent_host(i);
            let killed_ms = epoch_ms();
            target.cluster.kill_agent(i)?;
            tokio::time::sleep(Duration::from_millis(down_ms)).await;
            target.cluster.start_agent(i)?;
            agent_kill = Some(AgentOutage {
                host: host.clone(),
                killed_ms,
                restarted_ms: epoch_ms(),
            });
            target_text = format!("agent of {host} for {down_ms} ms");
        }
        FaultKind::ReplaceFollower => {
            let pick = rng.range(0, nodes - 2);
            let hold = Duration::from_millis(down_ms);
            match membership::replace_follower(target.cluster, nodes, leader, pick, hold).await {
                Ok(replaced) => {
                    membership_ms = Some(replaced.membership_ms);
                    target_text = replaced.describe();
                }
                Err(e) => {
                    // Whatever shape the cluster was left in, the original
                    // voters run again, so the final checks can read them.
                    let _ = start_stopped_voters(target.cluster, nodes);
                    return Err(e);
                }
            }
        }
        FaultKind::ReplaceLeader => {
            let hold = Duration::from_millis(down_ms);
            // Half the time the removed leader is stopped for the hold (an
            // operator retiring its machine), else it keeps running outside
            // the membership, still asked by clients and agents that know
            // it.
            let keep_running = rng.chance(50);
            match membership::replace_leader(target.cluster, nodes, hold, keep_running).await {
                Ok(replaced) => {
                    failover_ms = Some(replaced.failover_ms);
                    first_pass_ms = replaced.first_pass_ms;
                    membership_ms = Some(replaced.failover_ms);
                    target_text = replaced.describe();
                }
                Err(e) => {
                    let _ = start_stopped_voters(target.cluster, nodes);
                    return Err(e);
                }
            }
        }
    }
    wait_recovered(target.cluster, nodes).await?;
    Ok((
        FaultRecord {
            kind,
            at_ms,
            target: target_text,
            failover_ms,
            first_pass_ms,
            membership_ms,
            recovered_ms: started.elapsed().as_millis() as u64,
        },
        agent_kill,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_gets_membership_changes_and_five_nodes_a_double_loss() {
        use FaultKind::*;
        let three = vec![
            KillLeader,
            KillFollower,
            PauseLeader,
            RestartAll,
            KillAgent,
            ReplaceFollower,
            ReplaceLeader,
        ];
        assert_eq!(FaultKind::all(3, false), three);
        let mut five = three.clone();
        five.push(KillMinority);
        assert_eq!(FaultKind::all(5, false), five);
        let mut cut = three;
        cut.extend([CutLeader, CutAgent]);
        assert_eq!(FaultKind::all(3, true), cut);
        assert!(cut.iter().filter(|k| k.needs_netns()).count() == 2);
    }

    #[test]
    fn schedule_meets_every_kind_first_and_is_seeded() {
        let a = schedule(&mut Rng::new(5), &FaultKind::all(3, false), 14);
        let b = schedule(&mut Rng::new(5), &FaultKind::all(3, false), 14);
        assert_eq!(a, b);
        let mut first: Vec<FaultKind> = a[..7].to_vec();
        first.sort_by_key(|k| format!("{k:?}"));
        first.dedup();
        assert_eq!(first.len(), 7);
        assert!(first.contains(&FaultKind::ReplaceFollower));
        assert!(first.contains(&FaultKind::ReplaceLeader));
        assert!(!a.contains(&FaultKind::KillMinority));
        let five = schedule(&mut Rng::new(5), &FaultKind::all(5, false), 8);
        assert!(five.contains(&FaultKind::KillMinority));
        assert!(five.contains(&FaultKind::ReplaceLeader));
    }

    #[test]
    fn schedule_draws_only_from_the_kinds_asked() {
        let kinds = [FaultKind::ReplaceLeader, FaultKind::KillLeader];
        let s = schedule(&mut Rng::new(9), &kinds, 20);
        assert_eq!(s.len(), 20);
        assert!(s.iter().all(|k| kinds.contains(k)));
        assert!(s[..2].contains(&FaultKind::ReplaceLeader));
        assert!(s[..2].contains(&FaultKind::KillLeader));
        let one = schedule(&mut Rng::new(9), &[FaultKind::ReplaceLeader], 5);
        assert_eq!(one, vec![FaultKind::ReplaceLeader; 5]);
    }

    #[test]
    fn fault_kinds_are_named_on_the_command_line_in_kebab_case() {
        use clap::ValueEnum;
        assert_eq!(
            FaultKind::from_str("replace-leader", false),
            Ok(FaultKind::ReplaceLeader)
        );
        assert_eq!(
            FaultKind::from_str("kill-minority", false),
            Ok(FaultKind::KillMinority)
        );
        assert!(FaultKind::from_str("replace", false).is_err());
    }
}
