//! The leader's scheduling loop and host liveness.
//!
//! Both are leader soft state (invariant 5): nothing here is replicated, and
//! a new leader rebuilds it. Host deadlines are re-armed with a grace of one
//! heartbeat timeout from the moment of election, so a failover never
//! declares every host dead; but a host takes new work only once this
//! leader has heard from its agent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_scheduler::{HostState, Plan, Policy};
use berth_state::{leader_pass, Command, Response};
use tokio::sync::watch;

use crate::node::{now_ms, Node};

/// When each host's agent was last heard from, as seen by this leader.
pub struct HostLiveness {
    timeout: Duration,
    inner: Mutex<LivenessInner>,
}

struct LivenessInner {
    /// The term this node leads and when it took it up; hosts not heard
    /// from since count as alive (not silent) until `timeout` after it.
    leading: Option<(u64, Instant)>,
    /// Per host, the term it was heard in and when. Only the leading term's
    /// entries count: an agent heard by this node in an earlier term may
    /// have followed another leader since.
    last_seen: HashMap<String, (u64, Instant)>,
}

impl LivenessInner {
    /// When `host` was last heard from in the leading term.
    fn heard_in_term(&self, host: &str) -> Option<Instant> {
        let (term, _) = self.leading?;
        match self.last_seen.get(host) {
            Some(&(heard_term, at)) if heard_term == term => Some(at),
            _ => None,
        }
    }
}

impl HostLiveness {
    pub fn new(timeout: Duration) -> HostLiveness {
        HostLiveness {
            timeout,
            inner: Mutex::new(LivenessInner {
                leading: None,
                last_seen: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LivenessInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `host`'s agent reached this node while it led in `term`. Called by
    /// the agent service, which may run before the scheduling loop has
    /// noticed the election: the term, not the order, says which
    /// leadership the heartbeat belongs to.
    pub fn heard_from(&self, host: &str, term: u64, now: Instant) {
        self.lock().last_seen.insert(host.to_string(), (term, now));
    }

    /// Called when this node becomes leader in `term`: start the grace
    /// period and forget what earlier terms heard.
    pub fn rearm(&self, term: u64, now: Instant) {
        let mut inner = self.lock();
        inner.leading = Some((term, now));
        inner
            .last_seen
            .retain(|_, (heard_term, _)| *heard_term == term);
    }

    /// Hosts heard from within the timeout and the others, and the oldest
    /// heartbeat age among the hosts heard from (for `/metrics`).
    pub fn summary(&self, hosts: &[String], now: Instant) -> (usize, usize, Duration) {
        let inner = self.lock();
        let mut up = 0;
        let mut oldest = Duration::ZERO;
        let since = inner.leading.map(|(_, since)| since);
        for host in hosts {
            let reference = inner.heard_in_term(host).or(since);
            if let Some(t) = reference {
                let age = now.saturating_duration_since(t);
                if age <= self.timeout {
                    up += 1;
                }
                oldest = oldest.max(age);
            }
        }
        (up, hosts.len() - up, oldest)
    }

    pub fn step_down(&self) {
        self.lock().leading = None;
    }

    /// Whether `host` takes new work: Up once this leader has heard from
    /// its agent within the timeout. The grace a new leader grants does not
    /// count here: an agent whose old leader was cut off needs up to a
    /// heartbeat period plus its RPC timeout to notice and find this one, and
    /// a job placed on its host meanwhile would wait for it, then end
    /// NODE_FAIL if it came too late, without ever having run.
    pub fn state(&self, host: &str, now: Instant) -> HostState {
        match self.lock().heard_in_term(host) {
            Some(t) if now.saturating_duration_since(t) <= self.timeout => HostState::Up,
            _ => HostState::Down,
        }
    }

    /// Whether `host` has been silent past the timeout, so the jobs running
    /// there end NODE_FAIL. A host not heard from in this term is silent
    /// only once the grace since the election has passed too; a node that
    /// does not lead judges no host.
    pub fn silent(&self, host: &str, now: Instant) -> bool {
        let inner = self.lock();
        let Some((_, since)) = inner.leading else {
            return false;
        };
        let reference = inner.heard_in_term(host).unwrap_or(since);
        now.saturating_duration_since(reference) > self.timeout
    }
}

/// After a pass that took `d`, the loop rests `PASS_REST_FACTOR × d` before
/// the next, so a storm of submits (each one wakes the loop) cannot keep
/// the leader's cores busy with back-to-back passes over a growing queue:
/// passes take at most 1/(1 + factor) of a core. A wake-up during the rest
/// is kept, so the pass after it still sees every submit; on an idle
/// cluster a pass takes about a millisecond, so a job still starts at once.
const PASS_REST_FACTOR: u32 = 3;

/// Runs scheduling passes while this node is leader: on every tick and
/// whenever `pass_notify` fires. Ends when `shutdown` turns true.
pub async fn scheduling_loop(node: Arc<Node>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(
        node.config.scheduler.pass_interval_ms,
    ));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::spawn(wake_on_election(node.clone(), shutdown.clone()));
    // The term in which this loop last took up leadership. Leadership lost
    // and won back between two wakeups (the loop rests after a slow pass; a
    // stopped process sees nothing) is a new term, so host deadlines are
    // re-armed then too: a leader never judges hosts by heartbeats that went
    // to another leader meanwhile (found by `berth-drill chaos`: a leader
    // paused mid-pass, deposed, and elected again ended every host's jobs
    // NODE_FAIL 0.7 s after its new term began).
    let mut led_term: Option<u64> = None;
    // EASY backfill by default: its promises rest on jobs ending by their
    // time limit, which `enforce_time_limits` makes true.
    let policy = node.config.scheduler.policy();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = node.pass_notify.notified() => {}
            _ = shutdown.changed() => {
                return;
            }
        }
        let (is_leader, term) = {
            let m = node.raft.metrics().borrow().clone();
            (m.state == openraft::ServerState::Leader, m.current_term)
        };
        let first_of_term = is_leader && led_term != Some(term);
        if first_of_term {
            node.liveness.rearm(term, Instant::now());
            tracing::info!(
                node = node.id,
                term,
                "became leader; host deadlines re-armed, passes resume"
            );
        }
        if !is_leader && led_term.is_some() {
            node.liveness.step_down();
            tracing::info!(node = node.id, "no longer leader; passes stop");
        }
        led_term = is_leader.then_some(term);
        if is_leader {
            let started = Instant::now();
            fail_silent_hosts(&node).await;
            enforce_time_limits(&node).await;
            run_pass(&node, &policy, first_of_term).await;
            // The rest ends early once this node no longer leads in this
            // term: a pass whose plan waited on a leader that was being
            // removed took 2 s, and its rest of 6 s then held back the
            // first pass when the node was elected again (found by
            // `berth-drill chaos`'s ReplaceLeader: 1.5 s after the new
            // leader was agreed).
            tokio::select! {
                _ = tokio::time::sleep(started.elapsed() * PASS_REST_FACTOR) => {}
                _ = leadership_moves(node.raft.metrics(), term) => {}
                _ = shutdown.changed() => return,
            }
        }
    }
}

/// Resolves once `metrics` show this node no longer leading in `term` (a
/// follower or learner now, or leader in a later term), or Raft stopped.
async fn leadership_moves(
    mut metrics: watch::Receiver<
        openraft::RaftMetrics<berth_raft_store::NodeId, openraft::BasicNode>,
    >,
    term: u64,
) {
    let _ = metrics
        .wait_for(|m| m.state != openraft::ServerState::Leader || m.current_term != term)
        .await;
}

/// Wakes the loop the moment this node wins an election, so the first pass
/// on a new leader does not wait for the next tick.
async fn wake_on_election(node: Arc<Node>, mut shutdown: watch::Receiver<bool>) {
    let mut metrics = node.raft.metrics();
    let mut was_leader = false;
    let mut last_leader = None;
    loop {
        tokio::select! {
            changed = metrics.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = shutdown.changed() => return,
        }
        let (is_leader, leader_now) = {
            let m = metrics.borrow();
            (
                m.state == openraft::ServerState::Leader,
                crate::node::named_leader(&m),
            )
        };
        if is_leader && !was_leader {
            node.pass_notify.notify_one();
        }
        if leader_now.is_some() && leader_now != last_leader {
            metrics::counter!(crate::metrics::LEADER_CHANGES_TOTAL).increment(1);
        }
        last_leader = leader_now;
        was_leader = is_leader;
    }
}

/// Ends the jobs of hosts whose agents this leader has not heard from
/// within the heartbeat timeout (after the grace a new leader grants). They
/// end NODE_FAIL; a host that comes back has its agent stop them, since they
/// leave its assignment set.
async fn fail_silent_hosts(node: &Node) {
    let now = Instant::now();
    let silent: Vec<String> = node
        .read(|s| s.hosts_with_allocations())
        .into_iter()
        .filter(|h| node.liveness.silent(h, now))
        .collect();
    if silent.is_empty() {
        return;
    }
    let command = Command::HostsSilent {
        hosts: silent.clone(),
        timeout_ms: node.config.agents.heartbeat_timeout_ms,
        now_ms: 0,
    };
    match node.propose_local(command).await {
        Ok(Response::HostsFailed { jobs_ended }) => {
            tracing::warn!(
                ?silent,
                jobs_ended,
                "hosts stopped heartbeating; their jobs end NODE_FAIL"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "host failures not committed"),
    }
}

/// Marks running jobs past their time limit, so their agents stop them
/// with the stop grace and they end TIMEOUT. Resolution: one pass interval.
async fn enforce_time_limits(node: &Node) {
    let Some(command) = node.read(|s| leader_pass::time_limit_command(s, now_ms())) else {
        return;
    };
    match node.propose_local(command).await {
        Ok(Response::TimeLimitsEnforced { stopping }) if stopping > 0 => {
            tracing::info!(stopping, "jobs past their time limit are being stopped");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "time-limit stops not committed"),
    }
}

/// One pass: snapshot → schedule → propose the plan as one entry stamped
/// with the snapshot's applied index. `apply` re-checks every placement.
/// `first_of_term`: the first pass since this node became leader, whose
/// start time is exported (failover is measured up to it).
async fn run_pass(node: &Arc<Node>, policy: &Policy, first_of_term: bool) {
    let started = Instant::now();
    // The pass is CPU work of tens to hundreds of milliseconds with a long
    // queue: on a blocking thread it never holds up an async worker, and
    // with it Raft's heartbeats. With the pass on a worker, three
    // benchmark runs each saw an idle leader, under another process's
    // load, go silent past its followers' election timeout.
    let planned = {
        let (node, policy) = (node.clone(), policy.clone());
        tokio::task::spawn_blocking(move || plan_pass(&node, &policy, first_of_term, started)).await
    };
    let (mut plan, snapshot_index, pass_ms) = match planned {
        Ok(planned) => planned,
        Err(e) => {
            tracing::error!(error = %e, "scheduling pass failed");
            return;
        }
    };
    record_pass(node, &mut plan, started, pass_ms);
    propose_plan(node, plan, snapshot_index, started).await;
}

/// Reads the state and runs `schedule()` over it: the pass's CPU work.
/// Returns the plan, the applied index it was computed at and the pass's
/// time.
fn plan_pass(
    node: &Node,
    policy: &Policy,
    first_of_term: bool,
    started: Instant,
) -> (Plan, u64, u64) {
    let (input, snapshot_index) = node.read(|state| {
        (
            state.pass_input(|host| node.liveness.state(host, started)),
            state.applied_index(),
        )
    });
    // The pending jobs are copied here, with the state's lock let go.
    let pass_ms = now_ms();
    let snapshot = input.into_snapshot_at(pass_ms);
    if first_of_term {
        metrics::gauge!(crate::metrics::LEADER_FIRST_PASS_TIMESTAMP_SECONDS)
            .set(pass_ms as f64 / 1000.0);
    }
    // The snapshot, which holds every pending job's view, is let go of
    // before the plan is proposed rather than after the commit.
    let plan = node
        .pass_memory
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .schedule(snapshot, policy, pass_ms);
    (plan, snapshot_index, pass_ms)
}

/// Publishes a pass's metrics and keeps its reasons, details, priorities
/// and predicted starts for `explain` and the API (leader soft state).
fn record_pass(node: &Node, plan: &mut Plan, started: Instant, pass_ms: u64) {
    metrics::histogram!(crate::metrics::PASS_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::gauge!(crate::metrics::LAST_PASS_TIMESTAMP_SECONDS).set(pass_ms as f64 / 1000.0);
    crate::metrics::record_plan(plan, pass_ms);
    *node.last_pass.lock().unwrap_or_else(|p| p.into_inner()) = Some(crate::ui::track::LastPass {
        at_ms: pass_ms,
        duration_us: started.elapsed().as_micros() as u64,
        starts: plan.starts.len() + plan.gang_starts.len(),
        waiting: plan.reasons.len(),
    });
    // Moved, not copied: with a long queue these maps hold an entry per
    // pending job.
    {
        let mut reasons = node.last_reasons.lock().unwrap_or_else(|p| p.into_inner());
        *reasons = std::mem::take(&mut plan.reasons);
    }
    {
        let mut details = node.last_details.lock().unwrap_or_else(|p| p.into_inner());
        *details = std::mem::take(&mut plan.details);
    }
    {
        let mut last = node
            .last_priorities
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *last = std::mem::take(&mut plan.priorities)
            .into_iter()
            .map(|b| (b.job_id, b))
            .collect();
    }
    {
        let mut starts = node.last_starts.lock().unwrap_or_else(|p| p.into_inner());
        *starts = plan
            .reservations
            .iter()
            .map(|r| (r.job_id, r.start_ms))
            .collect();
    }
}

/// Proposes a plan's starts and evictions, if it has any, as one
/// `ApplyPlan` stamped with `snapshot_index`.
async fn propose_plan(node: &Node, plan: Plan, snapshot_index: u64, started: Instant) {
    let Some(command) = leader_pass::apply_plan_command(&plan, snapshot_index, now_ms()) else {
        return;
    };
    let planned = plan.starts.len() + plan.gang_starts.len();
    let evictions = plan.evictions.len();
    match node.propose_local(command).await {
        Ok(Response::PlanApplied {
            started: n,
            dropped,
            evicted,
        }) => {
            metrics::counter!(crate::metrics::PLACEMENTS_TOTAL).increment(u64::from(n));
            metrics::counter!(crate::metrics::PLACEMENTS_DROPPED_TOTAL)
                .increment(u64::from(dropped));
            metrics::counter!(crate::metrics::EVICTIONS_DROPPED_TOTAL)
                .increment(evictions.saturating_sub(evicted as usize) as u64);
            tracing::info!(
                planned,
                started = n,
                dropped,
                evictions,
                evicted,
                snapshot_index,
                pass_ms = started.elapsed().as_millis() as u64,
                "scheduling pass"
            );
        }
        Ok(other) => tracing::warn!(?other, "unexpected answer to a plan"),
        Err(e) => tracing::warn!(error = %e, "plan not committed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raft_metrics(
        state: openraft::ServerState,
        term: u64,
    ) -> openraft::RaftMetrics<berth_raft_store::NodeId, openraft::BasicNode> {
        let mut m = openraft::RaftMetrics::new_initial(1);
        m.state = state;
        m.current_term = term;
        m
    }

    #[tokio::test]
    async fn the_rest_ends_when_leadership_moves() {
        use openraft::ServerState::{Follower, Leader, Learner};
        let (tx, rx) = watch::channel(raft_metrics(Leader, 5));
        let mut moves = Box::pin(leadership_moves(rx.clone(), 5));
        // Still leading in term 5: the rest goes on.
        assert!(futures::poll!(moves.as_mut()).is_pending());
        let _ = tx.send(raft_metrics(Leader, 5));
        assert!(futures::poll!(moves.as_mut()).is_pending());
        // Removed from the voters: a learner now.
        let _ = tx.send(raft_metrics(Learner, 5));
        assert!(futures::poll!(moves.as_mut()).is_ready());
        // Already a follower, or leading a later term: no rest at all.
        let _ = tx.send(raft_metrics(Follower, 6));
        assert!(futures::poll!(Box::pin(leadership_moves(rx.clone(), 5))).is_ready());
        let _ = tx.send(raft_metrics(Leader, 7));
        assert!(futures::poll!(Box::pin(leadership_moves(rx.clone(), 5))).is_ready());
        // Raft stopped (the sender gone): nothing to wait for.
        let _ = tx.send(raft_metrics(Leader, 5));
        drop(tx);
        assert!(futures::poll!(Box::pin(leadership_moves(rx, 5))).is_ready());
    }

    #[test]
    fn new_leader_grants_grace_then_times_out() {
        let live = HostLiveness::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert!(!live.silent("h1", t0), "not leader: judges no host");
        assert_eq!(live.state("h1", t0), HostState::Down, "never heard from");
        live.rearm(3, t0);
        // The grace: not silent, but no new work before its agent is heard.
        assert!(!live.silent("h1", at(5)));
        assert_eq!(live.state("h1", at(5)), HostState::Down);
        live.heard_from("h1", 3, at(6));
        assert_eq!(live.state("h1", at(6)), HostState::Up);
        assert!(!live.silent("h1", at(11)), "heard 5 s ago");
        // h2 was never heard from: silent once the grace is over.
        assert!(live.silent("h2", at(11)));
        assert!(live.silent("h1", at(17)));
        assert_eq!(live.state("h1", at(17)), HostState::Down);
        // A heartbeat of the next term, answered before the scheduling loop
        // re-armed for it, counts in that term; the old term's does not.
        live.heard_from("h2", 5, at(19));
        live.rearm(5, at(20));
        assert_eq!(live.state("h2", at(20)), HostState::Up);
        assert_eq!(live.state("h1", at(20)), HostState::Down);
        assert!(!live.silent("h1", at(29)));
        assert!(live.silent("h1", at(31)));
        live.step_down();
        assert!(!live.silent("h1", at(40)));
    }
}
