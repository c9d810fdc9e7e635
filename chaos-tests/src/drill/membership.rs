//! The `ReplaceFollower` fault: a Raft membership change while the
//! workload runs. The spare node (configured, not a voter) joins as a
//! learner, catches up, and takes a follower's seat; the follower is
//! stopped while the cluster serves with the new voters. Recovery is the
//! same swap the other way (the old follower rejoins as a learner with its
//! store as it was, catches up and gets its seat back; the spare is
//! stopped), so every later fault and the final checks, which read the
//! stores of nodes `1..=nodes`, see the original voters again.
//!
//! The `ReplaceLeader` fault is the same swap with the leader's seat: the
//! change commits on the new voters, the old leader steps down (openraft
//! 0.9 turns a leader the committed membership leaves out into a learner
//! at its next tick) and the new voters elect a leader among them. The
//! fault times that failover from the ChangeMembership call, to the new
//! leader agreed and to its first scheduling pass, then swaps back.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use berth_proto::api::{AddLearnerRequest, ChangeMembershipRequest, ClusterStatusResponse};

use super::faults::{first_pass_after, wait_leader, wall_ms, RECOVERY_DEADLINE};
use crate::harness::{connect, status_of, HarnessError, LocalCluster};

/// A status call to a node that may be stopped or busy is given this long.
const STATUS_TIMEOUT: Duration = Duration::from_millis(400);
/// Pause between polls and between retried membership calls.
const POLL: Duration = Duration::from_millis(50);
/// Pause between polls of the voters' agreement, which times a failover.
const AGREE_POLL: Duration = Duration::from_millis(20);

/// The spare node the drill keeps for membership changes: the first id
/// after the voters (the harness numbers spares that way).
pub fn spare_id(nodes: u64) -> u64 {
    nodes + 1
}

/// The voters `1..=nodes` the drill starts with and returns to.
pub fn original_voters(nodes: u64) -> BTreeSet<u64> {
    (1..=nodes).collect()
}

/// `voters` with `out` replaced by `incoming`: the same size, so a 3- or
/// 5-voter cluster stays one.
pub fn swapped(voters: &BTreeSet<u64>, out: u64, incoming: u64) -> BTreeSet<u64> {
    voters
        .iter()
        .copied()
        .filter(|id| *id != out)
        .chain(std::iter::once(incoming))
        .collect()
}

/// The voters a node's status names.
pub fn voters_of(status: &ClusterStatusResponse) -> BTreeSet<u64> {
    status
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.node_id)
        .collect()
}

/// What one `ReplaceFollower` did, for the fault's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub out: u64,
    pub incoming: u64,
    /// AddLearner → the learner applied what the leader had committed.
    pub catch_up_ms: u64,
    /// ChangeMembership → every running voter names the new voters and
    /// they agree on a leader.
    pub membership_ms: u64,
    /// The old follower's restart → the original voters agreed again.
    pub back_ms: u64,
    /// The leader when the fault began and once it was undone (a rejoining
    /// node that campaigned while it was out can depose the leader).
    pub leader_before: u64,
    pub leader_after: u64,
}

impl Replaced {
    pub fn describe(&self) -> String {
        let leader = if self.leader_before == self.leader_after {
            format!("leader {} throughout", self.leader_before)
        } else {
            format!("leader {} then {}", self.leader_before, self.leader_after)
        };
        format!(
            "node {} out, node {} in (learner caught up in {} ms), swapped back in {} ms, {leader}",
            self.out, self.incoming, self.catch_up_ms, self.back_ms
        )
    }
}

fn timeout(what: String, start: Instant) -> HarnessError {
    HarnessError::Timeout {
        what,
        waited_ms: start.elapsed().as_millis() as u64,
    }
}

/// Swaps the spare in for a follower of `leader`, holds the new shape for
/// `hold`, and swaps back. `pick` chooses among the followers.
pub async fn replace_follower(
    cluster: &mut LocalCluster,
    nodes: u64,
    leader: u64,
    pick: u64,
    hold: Duration,
) -> Result<Replaced, HarnessError> {
    let original = original_voters(nodes);
    let followers: Vec<u64> = original
        .iter()
        .copied()
        .filter(|id| *id != leader)
        .collect();
    let out = followers[(pick % followers.len() as u64) as usize];
    let incoming = spare_id(nodes);
    let catch_up_ms = join_as_learner(cluster, nodes, incoming, &[]).await?;
    let new_voters = swapped(&original, out, incoming);
    let (called, _) = change_voters(cluster, nodes, &new_voters, &[out]).await?;
    let membership_ms = called.at.elapsed().as_millis() as u64;
    // Out of the voters now: stopped, as an operator retires a machine.
    cluster.kill_node(out)?;
    tokio::time::sleep(hold).await;

    // Back: the old follower restarts with its store.
    let started = Instant::now();
    cluster.start_node(out)?;
    let (back_ms, leader_after) =
        swap_back(cluster, nodes, &original, out, incoming, started).await?;
    Ok(Replaced {
        out,
        incoming,
        catch_up_ms,
        membership_ms,
        back_ms,
        leader_before: leader,
        leader_after,
    })
}

/// What one `ReplaceLeader` did, for the fault's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderReplaced {
    /// The leader removed.
    pub out: u64,
    pub incoming: u64,
    /// AddLearner → the learner applied what the leader had committed.
    pub catch_up_ms: u64,
    /// ChangeMembership call → every running new voter names the new
    /// voters and the same leader, one of them: the failover.
    pub failover_ms: u64,
    /// ChangeMembership call → the start of that leader's first scheduling
    /// pass; None if none was seen (it lost its place first).
    pub first_pass_ms: Option<u64>,
    /// The leader the new voters agreed on.
    pub new_leader: u64,
    /// The removed leader kept running through the hold (else it was
    /// stopped and restarted with its store to rejoin).
    pub kept_running: bool,
    /// Its restart (if stopped) → the original voters agreed again.
    pub back_ms: u64,
    /// The leader once the swap was undone (the swap back removes the
    /// spare, so when the spare led it moved the leader once more).
    pub leader_after: u64,
}

impl LeaderReplaced {
    pub fn describe(&self) -> String {
        let first_pass = self
            .first_pass_ms
            .map_or("no first pass seen".to_string(), |ms| {
                format!("first pass after {ms} ms")
            });
        let held = if self.kept_running {
            "kept running outside the membership"
        } else {
            "stopped"
        };
        // Swapping back removes the spare: when it led, that is a second
        // leader removal, and the swap back takes a hand-off longer.
        let second = if self.new_leader == self.incoming {
            " (the spare led: a second hand-off)"
        } else {
            ""
        };
        format!(
            "leader {} out, node {} in (learner caught up in {} ms), node {} leads after {} ms, {first_pass}; node {} {held}, swapped back in {} ms{second}, leader {}",
            self.out,
            self.incoming,
            self.catch_up_ms,
            self.new_leader,
            self.failover_ms,
            self.out,
            self.back_ms,
            self.leader_after
        )
    }
}

/// Swaps the spare in for the leader, times the failover that follows,
/// holds the new shape for `hold` (the old leader stopped, or left running
/// outside the membership when `keep_running`), and swaps back.
pub async fn replace_leader(
    cluster: &mut LocalCluster,
    nodes: u64,
    hold: Duration,
    keep_running: bool,
) -> Result<LeaderReplaced, HarnessError> {
    let original = original_voters(nodes);
    let incoming = spare_id(nodes);
    let catch_up_ms = join_as_learner(cluster, nodes, incoming, &[]).await?;
    // Asked after the catch-up, not before: the fault is on the leader at
    // the moment of the change.
    let out = wait_leader(cluster, nodes, &[]).await?;
    let new_voters = swapped(&original, out, incoming);
    let (called, new_leader) = change_voters(cluster, nodes, &new_voters, &[]).await?;
    let failover_ms = called.at.elapsed().as_millis() as u64;
    let first_pass_ms = first_pass_after(cluster, new_leader, called.wall_ms).await;
    if !keep_running {
        cluster.kill_node(out)?;
    }
    tokio::time::sleep(hold).await;

    // Back: the old leader rejoins as a learner with its store (restarted
    // first if it was stopped) and gets its seat back; the spare leaves.
    let started = Instant::now();
    if !keep_running {
        cluster.start_node(out)?;
    }
    let (back_ms, leader_after) =
        swap_back(cluster, nodes, &original, out, incoming, started).await?;
    Ok(LeaderReplaced {
        out,
        incoming,
        catch_up_ms,
        failover_ms,
        first_pass_ms,
        new_leader,
        kept_running: keep_running,
        back_ms,
        leader_after,
    })
}

/// Starts node `id` if it is not running, waits until it answers, adds it
/// as a learner and waits until it has applied what the leader had
/// committed when it was added. `skip`: nodes among the voters' ids that
/// are not members now (they know no leader and must not be asked for
/// one). Returns the ms from AddLearner to caught up.
/// The swap undone: `out` (running again) rejoins as a learner and gets
/// its seat back among `original`, and the spare `incoming` is stopped.
/// Returns the ms from `started` until the voters were `original` again,
/// and the leader they then agree on.
async fn swap_back(
    cluster: &mut LocalCluster,
    nodes: u64,
    original: &BTreeSet<u64>,
    out: u64,
    incoming: u64,
    started: Instant,
) -> Result<(u64, u64), HarnessError> {
    join_as_learner(cluster, nodes, out, &[out]).await?;
    change_voters(cluster, nodes, original, &[]).await?;
    let back_ms = started.elapsed().as_millis() as u64;
    cluster.kill_node(incoming)?;
    let leader_after = wait_leader(cluster, nodes, &[]).await?;
    Ok((back_ms, leader_after))
}

async fn join_as_learner(
    cluster: &mut LocalCluster,
    nodes: u64,
    id: u64,
    skip: &[u64],
) -> Result<u64, HarnessError> {
    if cluster.node_pid(id).is_none() {
        cluster.start_node(id)?;
    }
    let addr = cluster.addr(id)?;
    let start = Instant::now();
    while !matches!(
        tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await,
        Ok(Ok(_))
    ) {
        if start.elapsed() > RECOVERY_DEADLINE {
            return Err(timeout(format!("node {id} to listen"), start));
        }
        tokio::time::sleep(POLL).await;
    }
    let start = Instant::now();
    loop {
        let leader = wait_leader(cluster, nodes, skip).await?;
        let mut client = connect(&cluster.addr(leader)?).await?;
        match client
            .add_learner(AddLearnerRequest {
                node_id: id,
                addr: addr.clone(),
            })
            .await
        {
            Ok(_) => break,
            // The call waits for the learner; past the client's deadline
            // only the wait ends (the learner is added): catch-up is
            // judged below.
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
                ) =>
            {
                break
            }
            Err(s) if start.elapsed() > RECOVERY_DEADLINE => {
                return Err(HarnessError::Rpc(format!("AddLearner {id}: {s}")))
            }
            // Most often the leader moved under load: ask again.
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
    wait_applied(cluster, nodes, id, skip, start).await?;
    Ok(start.elapsed().as_millis() as u64)
}

/// Waits until node `id` has applied the leader's commit index as it
/// stands now.
async fn wait_applied(
    cluster: &LocalCluster,
    nodes: u64,
    id: u64,
    skip: &[u64],
    start: Instant,
) -> Result<(), HarnessError> {
    let commit = loop {
        let leader = wait_leader(cluster, nodes, skip).await?;
        match tokio::time::timeout(STATUS_TIMEOUT, status_of(&cluster.addr(leader)?)).await {
            Ok(Ok(s)) if s.leader_id == leader => break s.commit_index,
            _ if start.elapsed() > RECOVERY_DEADLINE => {
                return Err(timeout(format!("leader {leader} to answer"), start))
            }
            _ => tokio::time::sleep(POLL).await,
        }
    };
    let addr = cluster.addr(id)?;
    loop {
        if let Ok(Ok(s)) = tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await {
            if s.applied_index >= commit {
                return Ok(());
            }
        }
        if start.elapsed() > RECOVERY_DEADLINE {
            return Err(timeout(
                format!("learner {id} to apply index {commit}"),
                start,
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// When the first ChangeMembership call of a change was sent.
#[derive(Debug, Clone, Copy)]
struct Called {
    at: Instant,
    /// The same instant on the wall clock, ms since the epoch.
    wall_ms: f64,
}

/// Changes the voters to `voters` through the leader and waits until
/// every running one of them names exactly those voters and the same
/// leader among them; returns when the first call was sent and that
/// leader. `skip` as for [`join_as_learner`].
async fn change_voters(
    cluster: &LocalCluster,
    nodes: u64,
    voters: &BTreeSet<u64>,
    skip: &[u64],
) -> Result<(Called, u64), HarnessError> {
    let start = Instant::now();
    let mut called = None;
    loop {
        let leader = wait_leader(cluster, nodes, skip).await?;
        let mut client = connect(&cluster.addr(leader)?).await?;
        called.get_or_insert_with(|| Called {
            at: Instant::now(),
            wall_ms: wall_ms(),
        });
        match client
            .change_membership(ChangeMembershipRequest {
                voter_ids: voters.iter().copied().collect(),
            })
            .await
        {
            Ok(_) => break,
            Err(s) if start.elapsed() > RECOVERY_DEADLINE => {
                return Err(HarnessError::Rpc(format!(
                    "ChangeMembership to {voters:?}: {s}"
                )))
            }
            // The leader moved, or a change is still in progress (a call
            // that timed out may have gone through: asking again for the
            // same voters then changes nothing).
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
    let called = called.unwrap_or(Called {
        at: start,
        wall_ms: wall_ms(),
    });
    loop {
        if let Some(leader) = voters_agree(cluster, voters).await {
            return Ok((called, leader));
        }
        if start.elapsed() > RECOVERY_DEADLINE {
            return Err(timeout(format!("every voter to name {voters:?}"), start));
        }
        tokio::time::sleep(AGREE_POLL).await;
    }
}

/// The leader every running member of `voters` names, if they all answer,
/// name exactly `voters` as the voters, and name the same leader, one of
/// them.
async fn voters_agree(cluster: &LocalCluster, voters: &BTreeSet<u64>) -> Option<u64> {
    let mut statuses = Vec::new();
    for id in voters.iter().filter(|id| cluster.node_pid(**id).is_some()) {
        let addr = cluster.addr(*id).ok()?;
        match tokio::time::timeout(STATUS_TIMEOUT, status_of(&addr)).await {
            Ok(Ok(s)) => statuses.push(s),
            _ => return None,
        }
    }
    agreed_on(&statuses, voters).then(|| statuses.first().map(|s| s.leader_id))?
}

/// The answers name exactly `voters` and one leader among them, and a
/// majority of `voters` answered.
pub fn agreed_on(statuses: &[ClusterStatusResponse], voters: &BTreeSet<u64>) -> bool {
    let Some(leader) = statuses.first().map(|s| s.leader_id) else {
        return false;
    };
    statuses.len() * 2 > voters.len()
        && voters.contains(&leader)
        && statuses
            .iter()
            .all(|s| s.leader_id == leader && voters_of(s) == *voters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::Member;

    fn status(node: u64, leader: u64, voters: &[u64], learners: &[u64]) -> ClusterStatusResponse {
        let member = |id: &u64, voter| Member {
            node_id: *id,
            addr: format!("127.0.0.1:{id}"),
            voter,
            matched_index: 0,
        };
        ClusterStatusResponse {
            node_id: node,
            leader_id: leader,
            members: voters
                .iter()
                .map(|id| member(id, true))
                .chain(learners.iter().map(|id| member(id, false)))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_spare_follows_the_voters() {
        assert_eq!(spare_id(3), 4);
        assert_eq!(spare_id(5), 6);
        assert_eq!(original_voters(3), BTreeSet::from([1, 2, 3]));
    }

    #[test]
    fn a_swap_keeps_the_voter_count() {
        let voters = original_voters(3);
        assert_eq!(swapped(&voters, 2, 4), BTreeSet::from([1, 3, 4]));
        assert_eq!(
            swapped(&original_voters(5), 5, 6),
            BTreeSet::from([1, 2, 3, 4, 6])
        );
        // Swapping back restores the original set.
        assert_eq!(swapped(&swapped(&voters, 2, 4), 4, 2), voters);
    }

    #[test]
    fn voters_of_leaves_learners_out() {
        let s = status(1, 1, &[1, 3, 4], &[2]);
        assert_eq!(voters_of(&s), BTreeSet::from([1, 3, 4]));
    }

    #[test]
    fn agreement_needs_the_new_voters_one_leader_and_a_majority() {
        let new = BTreeSet::from([1, 3, 4]);
        let agreed = [status(1, 1, &[1, 3, 4], &[]), status(3, 1, &[1, 3, 4], &[])];
        assert!(agreed_on(&agreed, &new));
        // One node still names the old voters.
        let stale = [
            status(1, 1, &[1, 3, 4], &[]),
            status(3, 1, &[1, 2, 3], &[4]),
        ];
        assert!(!agreed_on(&stale, &new));
        // Two leaders named.
        let split = [status(1, 1, &[1, 3, 4], &[]), status(3, 3, &[1, 3, 4], &[])];
        assert!(!agreed_on(&split, &new));
        // A leader outside the voters (the removed follower).
        let outside = [status(1, 2, &[1, 3, 4], &[]), status(3, 2, &[1, 3, 4], &[])];
        assert!(!agreed_on(&outside, &new));
        // No leader known.
        let none = [status(1, 0, &[1, 3, 4], &[]), status(3, 0, &[1, 3, 4], &[])];
        assert!(!agreed_on(&none, &new));
        // One answer of three voters is no majority.
        assert!(!agreed_on(&agreed[..1], &new));
        assert!(!agreed_on(&[], &new));
    }

    #[test]
    fn the_record_says_who_left_and_who_came() {
        let mut r = Replaced {
            out: 2,
            incoming: 4,
            catch_up_ms: 120,
            membership_ms: 80,
            back_ms: 900,
            leader_before: 1,
            leader_after: 1,
        };
        assert_eq!(
            r.describe(),
            "node 2 out, node 4 in (learner caught up in 120 ms), swapped back in 900 ms, leader 1 throughout"
        );
        r.leader_after = 3;
        assert_eq!(
            r.describe(),
            "node 2 out, node 4 in (learner caught up in 120 ms), swapped back in 900 ms, leader 1 then 3"
        );
    }

    #[test]
    fn the_leader_record_says_who_led_next_and_when() {
        let mut r = LeaderReplaced {
            out: 1,
            incoming: 4,
            catch_up_ms: 90,
            failover_ms: 1_150,
            first_pass_ms: Some(1_120),
            new_leader: 3,
            kept_running: true,
            back_ms: 300,
            leader_after: 3,
        };
        assert_eq!(
            r.describe(),
            "leader 1 out, node 4 in (learner caught up in 90 ms), node 3 leads after 1150 ms, first pass after 1120 ms; node 1 kept running outside the membership, swapped back in 300 ms, leader 3"
        );
        r.kept_running = false;
        r.first_pass_ms = None;
        assert_eq!(
            r.describe(),
            "leader 1 out, node 4 in (learner caught up in 90 ms), node 3 leads after 1150 ms, no first pass seen; node 1 stopped, swapped back in 300 ms, leader 3"
        );
        r.new_leader = 4;
        r.first_pass_ms = Some(1_100);
        r.back_ms = 1_400;
        r.leader_after = 2;
        assert_eq!(
            r.describe(),
            "leader 1 out, node 4 in (learner caught up in 90 ms), node 4 leads after 1150 ms, first pass after 1100 ms; node 1 stopped, swapped back in 1400 ms (the spare led: a second hand-off), leader 2"
        );
    }
}
