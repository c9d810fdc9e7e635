//! What the Cluster page shows that Raft's metrics do not keep: leader
//! changes as this node saw them (when, from whom to whom, how long it
//! was without a leader) and the last scheduling pass this node ran.
//! Soft state in this node's memory (invariant 5): a restart forgets it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// Leader changes kept for the page.
pub const LEADER_CHANGES_KEPT_MAX: usize = 8;

/// The last scheduling pass this node ran as leader.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LastPass {
    /// When it started (ms since the epoch).
    pub at_ms: u64,
    /// How long `schedule()` took, in microseconds.
    pub duration_us: u64,
    /// Placements it planned.
    pub starts: usize,
    /// Pending jobs it left waiting (each with a reason).
    pub waiting: usize,
}

/// One leader change as this node saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    /// When this node learned of the new leader (ms since the epoch).
    pub at_ms: u64,
    /// The leader before; `None` when this node knew none (its start).
    pub from: Option<u64>,
    pub to: u64,
    pub term: u64,
    /// From the moment this node saw the old leader gone (an election
    /// began) to the moment it knew the new one. `None` when it never saw
    /// a gap (the new leader's first message was the first sign). The old
    /// leader's silence before an election starts (up to the election
    /// timeout) is not visible to a follower, so a failover as a client
    /// sees it lasts up to that much longer.
    pub leaderless_ms: Option<u64>,
}

/// Follows the leader as Raft's metrics report it. Pure: times are passed in.
#[derive(Debug, Default)]
pub struct LeaderWatch {
    known: Option<u64>,
    /// When this node first saw `known` no longer lead.
    lost_at_ms: Option<u64>,
    changes: VecDeque<LeaderChange>,
}

impl LeaderWatch {
    /// One observation of (current leader, term) at `now_ms`.
    pub fn observe(&mut self, leader: Option<u64>, term: u64, now_ms: u64) {
        match leader {
            Some(l) if Some(l) == self.known => self.lost_at_ms = None,
            Some(l) => {
                let change = LeaderChange {
                    at_ms: now_ms,
                    from: self.known,
                    to: l,
                    term,
                    leaderless_ms: self.lost_at_ms.map(|t| now_ms.saturating_sub(t)),
                };
                if self.changes.len() == LEADER_CHANGES_KEPT_MAX {
                    self.changes.pop_front();
                }
                self.changes.push_back(change);
                self.known = Some(l);
                self.lost_at_ms = None;
            }
            None => {
                if self.lost_at_ms.is_none() {
                    self.lost_at_ms = Some(now_ms);
                }
            }
        }
    }

    /// Leader changes, oldest first.
    pub fn changes(&self) -> Vec<LeaderChange> {
        self.changes.iter().cloned().collect()
    }

    /// The last change from one known leader to another: a failover.
    #[cfg(test)]
    pub fn last_failover(&self) -> Option<LeaderChange> {
        self.changes
            .iter()
            .rev()
            .find(|c| c.from.is_some())
            .cloned()
    }

    /// Since when this node has known no leader, if it knows none now.
    pub fn leaderless_since_ms(&self) -> Option<u64> {
        self.lost_at_ms
    }
}

/// Shared between the watching task and the page handlers.
pub type SharedWatch = Arc<Mutex<LeaderWatch>>;

/// Watches `metrics` until Raft shuts down (its sender drops).
pub fn spawn_leader_watch(
    mut metrics: watch::Receiver<openraft::RaftMetrics<u64, openraft::BasicNode>>,
) -> SharedWatch {
    let shared: SharedWatch = Arc::new(Mutex::new(LeaderWatch::default()));
    let watch = shared.clone();
    tokio::spawn(async move {
        loop {
            let (leader, term) = {
                let m = metrics.borrow_and_update();
                (crate::node::named_leader(&m), m.current_term)
            };
            watch.lock().unwrap_or_else(|p| p.into_inner()).observe(
                leader,
                term,
                crate::node::now_ms(),
            );
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failover_is_timed_from_the_first_leaderless_sight() {
        let mut w = LeaderWatch::default();
        w.observe(None, 0, 1_000);
        w.observe(Some(1), 1, 1_400);
        assert_eq!(w.last_failover(), None, "the first leader is no failover");
        w.observe(Some(1), 1, 2_000);
        // Leader 1 dies; an election starts at 5,000, node 2 wins at 5,650.
        w.observe(None, 2, 5_000);
        w.observe(None, 2, 5_300);
        assert_eq!(w.leaderless_since_ms(), Some(5_000));
        w.observe(Some(2), 2, 5_650);
        assert_eq!(
            w.last_failover(),
            Some(LeaderChange {
                at_ms: 5_650,
                from: Some(1),
                to: 2,
                term: 2,
                leaderless_ms: Some(650),
            })
        );
        assert_eq!(w.leaderless_since_ms(), None);
        assert_eq!(w.changes().len(), 2);
        assert_eq!(
            w.changes()[0],
            LeaderChange {
                at_ms: 1_400,
                from: None,
                to: 1,
                term: 1,
                leaderless_ms: Some(400),
            }
        );
    }

    #[test]
    fn a_direct_switch_has_no_gap_and_the_log_is_bounded() {
        let mut w = LeaderWatch::default();
        w.observe(Some(1), 1, 10);
        w.observe(Some(3), 2, 20);
        assert_eq!(w.last_failover().map(|c| c.leaderless_ms), Some(None));
        for i in 0..20u64 {
            w.observe(Some(10 + i), 3 + i, 100 + i);
        }
        let changes = w.changes();
        assert_eq!(changes.len(), LEADER_CHANGES_KEPT_MAX);
        assert_eq!(changes.last().map(|c| c.to), Some(29));
    }
}
