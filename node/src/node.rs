//! A running node: its Raft instance, its store, and how it proposes
//! commands (locally when leader, forwarded to the leader otherwise).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_raft_store::{NodeId, Raft};
use berth_scheduler::priority::PriorityBreakdown;
use berth_scheduler::{JobId, Reason};
use berth_state::{Command, Request, Response, SharedState, SmState};
use openraft::ServerState;
use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tonic::Status;

use berth_auth::grpc::AttachCredentials;

use crate::authz::AuthKeys;
use crate::config::NodeConfig;
use crate::forward::Forwarder;
use crate::leader::HostLiveness;

/// How long a write keeps retrying while there is no leader (an election is
/// in progress) before it fails as unavailable.
const PROPOSE_RETRY_WINDOW_MS: u64 = 5_000;
/// Pause between those retries.
const PROPOSE_RETRY_PAUSE_MS: u64 = 50;

/// Log entries the leader has proposed and not yet seen applied, at most.
/// openraft 0.9 appends and replicates each proposed entry on its own, so
/// proposals that arrive while one is in flight wait and then share one
/// entry (`Command::Batch`): under load one fsync and one replication
/// round cover many submits, while a lone proposal is sent at once,
/// unbatched. 1 rather than 2 (and 2 rather than 4 before it): with one
/// runtime thread per node on 2 cores, alternating runs of `berth-drill
/// bench raft-writes --clients 64,256` gave 8,591 and 8,581 submits/s at 64
/// clients with 1, against 8,055 with 2, and a storm of `sbatch` processes
/// put 3.8 jobs in an entry instead of 2.4, at 3-6% less server CPU per
/// job (BENCHMARKS.md, thirteenth session).
const PROPOSALS_IN_FLIGHT_MAX: usize = 1;
/// Commands one batch entry carries at most.
const BATCH_COMMANDS_MAX: usize = 256;
/// Encoded bytes (MessagePack, as the log stores them) of the commands in
/// one batch entry at most, so that an AppendEntries of
/// `APPEND_ENTRIES_MAX` (48) such entries stays within the 16 MiB gRPC
/// message bound: 48 × 192 KiB = 9 MiB, and about 12 MiB as JSON, which
/// goes to a peer that does not read MessagePack during a rolling upgrade
/// (a submit's JSON is about 1.3 times its MessagePack). A single larger
/// command still travels alone, as before. Large enough for
/// `BATCH_COMMANDS_MAX` submits of a typical size (about 650 bytes): at
/// 24 KiB of JSON a batch held 28 of them, so 64 clients waited behind two
/// entries of 28 (`berth-drill bench raft-writes --berth-only`: 4,940
/// submits/s at 64 clients, against 5,850 with 256 KiB; BENCHMARKS.md).
pub(crate) const BATCH_BYTES_MAX: usize = 192 * 1024;
/// Times the batcher yields to the runtime before closing a batch, so that
/// requests whose bytes have arrived but were not yet read can join it.
/// tokio runs a yielded task again only after polling the I/O driver, so
/// one yield costs a poll of the sockets, not a timer.
const BATCH_YIELDS_MAX: usize = 1;
/// Proposals queued for the batcher at most; beyond this callers wait.
const PROPOSALS_QUEUED_MAX: usize = 4_096;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("not leader; leader is {}", leader_addr.as_deref().unwrap_or("unknown"))]
    NotLeader { leader_addr: Option<String> },
    #[error("no leader is elected; try again shortly")]
    NoLeader,
    #[error("{0}")]
    Unavailable(String),
    #[error("raft: {0}")]
    Fatal(String),
}

impl From<ProposeError> for Status {
    fn from(e: ProposeError) -> Status {
        match e {
            ProposeError::NotLeader { .. } => Status::failed_precondition(e.to_string()),
            ProposeError::NoLeader | ProposeError::Unavailable(_) => {
                Status::unavailable(e.to_string())
            }
            ProposeError::Fatal(_) => Status::internal(e.to_string()),
        }
    }
}

pub struct Node {
    pub id: NodeId,
    pub config: NodeConfig,
    pub raft: Raft,
    /// The applied state machine, shared with openraft's state machine.
    pub state: SharedState,
    /// Last applied log index.
    pub applied: watch::Receiver<u64>,
    /// Leader soft state: when each host was last heard from.
    pub liveness: HostLiveness,
    /// Wakes the scheduling loop early (after a submit, an exit, a new host).
    pub pass_notify: Notify,
    /// Reasons from the leader's last pass, for squeue and explain.
    pub last_reasons: Mutex<BTreeMap<JobId, Reason>>,
    /// The last pass's sentences with numbers (limits, partitions).
    pub last_details: Mutex<BTreeMap<JobId, String>>,
    /// The last pass's predicted start time per job it reserved room for
    /// (ms since the epoch).
    pub last_starts: Mutex<BTreeMap<JobId, u64>>,
    /// The last pass's priority breakdown per pending job (sprio); one
    /// entry per job of the pass's snapshot, replaced each pass.
    pub last_priorities: Mutex<BTreeMap<JobId, PriorityBreakdown>>,
    /// What passes carry from one to the next (multi-path reservations
    /// held, and since when, for `max_reserve_time_s`).
    pub pass_memory: Mutex<berth_state::leader_pass::PassMemory>,
    /// When the last pass this node ran was and how long it took (the
    /// web UI's Cluster page).
    pub last_pass: Mutex<Option<crate::ui::track::LastPass>>,
    /// Secrets for authenticating callers (none: auth is off).
    pub auth: AuthKeys,
    /// What this node attaches to its calls to other nodes.
    pub credentials: AttachCredentials,
    /// The leader's proposal batcher, started by the first proposal.
    batcher: OnceLock<mpsc::Sender<Proposal>>,
    /// A follower's forwarder to the leader, started by the first forward.
    forwarder: OnceLock<Forwarder>,
}

/// A command waiting for the batcher, and where its answer goes.
struct Proposal {
    command: Command,
    /// Its encoded size (as the log stores it), for `BATCH_BYTES_MAX`.
    bytes: usize,
    reply: oneshot::Sender<Result<Response, ProposeError>>,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Node {
    pub fn new(
        config: NodeConfig,
        raft: Raft,
        state: SharedState,
        applied: watch::Receiver<u64>,
        auth: AuthKeys,
    ) -> Node {
        let credentials = AttachCredentials::cluster_secret(auth.cluster.as_deref());
        let liveness = HostLiveness::new(Duration::from_millis(config.agents.heartbeat_timeout_ms));
        Node {
            id: config.node_id,
            config,
            raft,
            state,
            applied,
            liveness,
            pass_notify: Notify::new(),
            last_reasons: Mutex::new(BTreeMap::new()),
            last_details: Mutex::new(BTreeMap::new()),
            last_starts: Mutex::new(BTreeMap::new()),
            last_priorities: Mutex::new(BTreeMap::new()),
            pass_memory: Mutex::new(Default::default()),
            last_pass: Mutex::new(None),
            auth,
            credentials,
            batcher: OnceLock::new(),
            forwarder: OnceLock::new(),
        }
    }

    /// Runs `f` on the applied state under its read lock.
    pub fn read<T>(&self, f: impl FnOnce(&SmState) -> T) -> T {
        let guard = self
            .state
            .read()
            .unwrap_or_else(|_| panic!("state machine lock poisoned"));
        f(&guard)
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// This node's term when it leads and a quorum has acknowledged it
    /// within `leader_lease_ms()`; None otherwise. Agents are answered only
    /// by such a leader: one that merely believes it leads (restarted from
    /// an old vote, or cut off from the majority) would keep an agent away
    /// from the real leader until the real one declared its host dead.
    pub fn confirmed_leader_term(&self) -> Option<u64> {
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return None;
        }
        let voters = m.membership_config.membership().voter_ids().count();
        let acked_recently = m
            .millis_since_quorum_ack
            .is_some_and(|ms| ms <= self.leader_lease_ms());
        (voters <= 1 || acked_recently).then_some(m.current_term)
    }

    /// How old the last quorum acknowledgement may be for this node to
    /// answer agents as leader: twice the longest election timeout, so a
    /// leader slowed by a busy machine is not refused while one cut off
    /// hands its agents over soon after the others elect a successor.
    pub fn leader_lease_ms(&self) -> u64 {
        2 * self.config.raft.election_timeout_max_ms
    }

    /// Whether this node is a voter or a learner of the membership it
    /// knows.
    pub fn is_member(&self) -> bool {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&self.id)
            .is_some()
    }

    /// The current leader's id and gRPC address, as this node knows them
    /// (never itself unless it leads: see [`named_leader`]).
    pub fn leader(&self) -> Option<(NodeId, String)> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = named_leader(&metrics)?;
        let addr = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone())
            .or_else(|| self.config.member_addr(leader).map(str::to_string))?;
        Some((leader, addr))
    }

    /// Proposes `command` and waits until it is committed and applied,
    /// forwarding to the leader when this node is not it. Retries through an
    /// election for up to `PROPOSE_RETRY_WINDOW_MS`.
    pub async fn propose(&self, command: Command) -> Result<Response, ProposeError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(PROPOSE_RETRY_WINDOW_MS);
        loop {
            let attempt = if self.is_leader() {
                self.propose_local(command.clone()).await
            } else {
                match self.leader() {
                    Some((leader_id, addr)) if leader_id != self.id => {
                        self.forward(&addr, &command).await
                    }
                    _ => Err(ProposeError::NoLeader),
                }
            };
            match attempt {
                // A node outside its own membership (a leader or follower
                // removed and left running, a node not yet added) hears
                // from no leader: waiting cannot help, and the client does
                // better asking another node at once.
                Err(ProposeError::NoLeader) if !self.is_member() => return attempt,
                Err(
                    ProposeError::NotLeader { .. }
                    | ProposeError::NoLeader
                    | ProposeError::Unavailable(_),
                ) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(PROPOSE_RETRY_PAUSE_MS)).await;
                }
                other => return other,
            }
        }
    }

    /// Proposes on this node, which must be the leader. Stamps the command
    /// with this node's clock (invariant 2: time arrives in the command).
    pub async fn propose_local(&self, mut command: Command) -> Result<Response, ProposeError> {
        command.stamp(now_ms());
        // Events that can let a pending job start wake the scheduler now
        // rather than at the next tick.
        let wakes_scheduler = matches!(
            command,
            Command::SubmitJob { .. }
                | Command::RegisterHost { .. }
                | Command::JobExited { .. }
                | Command::ControlJob { .. }
                | Command::UpdateJob { .. }
                | Command::SetPolicy { .. }
                | Command::CreateReservation { .. }
                | Command::DeleteReservation { .. }
        );
        let bytes = encoded_len(&command)?;
        let (reply, answer) = oneshot::channel();
        let batcher = self
            .batcher
            .get_or_init(|| start_batcher(self.raft.clone()))
            .clone();
        batcher
            .send(Proposal {
                command,
                bytes,
                reply,
            })
            .await
            .map_err(|_| ProposeError::Fatal("the proposal batcher has stopped".into()))?;
        let response = answer
            .await
            .map_err(|_| ProposeError::Fatal("the proposal batcher dropped a proposal".into()))??;
        if wakes_scheduler && self.may_start_now(&response) {
            self.pass_notify.notify_one();
        }
        Ok(response)
    }

    /// Whether what `response` answers may let a pending job start now.
    /// A submit does only when the new job might fit somewhere as things
    /// are, or could make room by evicting (preemption or an idle-fill
    /// reclaim configured): a storm of submits into a full cluster (or one
    /// with no hosts yet) would otherwise run a pass over the whole queue
    /// after each of them, to start nothing. Those jobs get their reasons
    /// at the next tick, and whatever frees room wakes the loop itself.
    fn may_start_now(&self, response: &Response) -> bool {
        let Response::Submitted { job_id, duplicate } = response else {
            return true;
        };
        if *duplicate {
            return false;
        }
        let scheduler = &self.config.scheduler;
        scheduler.preemption_enabled
            || scheduler.idle_fill_enabled
            || self.read(|s| s.may_start_without_evictions(*job_id, now_ms()))
    }

    /// Hands `command` to the leader through this node's forwarder, which
    /// batches concurrent forwards into one call.
    async fn forward(
        &self,
        leader_addr: &str,
        command: &Command,
    ) -> Result<Response, ProposeError> {
        self.forwarder
            .get_or_init(|| Forwarder::start(self.credentials.clone()))
            .forward(leader_addr, command)
            .await
    }

    /// Waits until this leader's state machine reflects every write
    /// committed before the call (a read index), so a read after it is
    /// linearizable.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        let read_log_id = match self.raft.ensure_linearizable().await {
            Ok(id) => id,
            Err(e) => {
                return match e.forward_to_leader() {
                    Some(fwd) => Err(ProposeError::NotLeader {
                        leader_addr: fwd.leader_node.as_ref().map(|n| n.addr.clone()),
                    }),
                    None => Err(ProposeError::Unavailable(e.to_string())),
                }
            }
        };
        let target = read_log_id.map(|l| l.index).unwrap_or(0);
        let mut applied = self.applied.clone();
        let caught_up = tokio::time::timeout(
            Duration::from_secs(5),
            applied.wait_for(|index| *index >= target),
        )
        .await
        .map(|r| r.is_ok())
        .unwrap_or(false);
        if caught_up {
            Ok(())
        } else {
            Err(ProposeError::Unavailable(
                "state machine did not catch up".into(),
            ))
        }
    }
}

/// The length of `value` as the log stores it (MessagePack), counted
/// without building it.
fn encoded_len<T: serde::Serialize>(value: &T) -> Result<usize, ProposeError> {
    berth_raft_store::codec::encoded_len(value).map_err(|e| ProposeError::Fatal(e.to_string()))
}

/// Starts the task that turns proposals into log entries: it takes the
/// first waiting proposal, waits for one of `PROPOSALS_IN_FLIGHT_MAX`
/// slots, then takes every proposal that arrived meanwhile, yields to the
/// runtime `BATCH_YIELDS_MAX` times and takes those again (within the
/// batch bounds), and writes them as one entry.
fn start_batcher(raft: Raft) -> mpsc::Sender<Proposal> {
    let (tx, mut rx) = mpsc::channel::<Proposal>(PROPOSALS_QUEUED_MAX);
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(PROPOSALS_IN_FLIGHT_MAX));
        let mut carried: Option<Proposal> = None;
        loop {
            let first = match carried.take() {
                Some(p) => p,
                None => match rx.recv().await {
                    Some(p) => p,
                    // Every sender is gone: the node is shutting down.
                    None => return,
                },
            };
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let mut bytes = first.bytes;
            let mut batch = vec![first];
            for look in 0..=BATCH_YIELDS_MAX {
                if look > 0 {
                    if batch.len() >= BATCH_COMMANDS_MAX || carried.is_some() {
                        break;
                    }
                    // Let the runtime poll its sockets and run what is
                    // ready: requests already received join this entry.
                    tokio::task::yield_now().await;
                }
                while batch.len() < BATCH_COMMANDS_MAX {
                    match rx.try_recv() {
                        Ok(p) if bytes + p.bytes > BATCH_BYTES_MAX => {
                            carried = Some(p);
                            break;
                        }
                        Ok(p) => {
                            bytes += p.bytes;
                            batch.push(p);
                        }
                        Err(_) => break,
                    }
                }
            }
            let raft = raft.clone();
            tokio::spawn(async move {
                write_batch(&raft, batch).await;
                drop(slot);
            });
        }
    });
    tx
}

/// Writes `batch` as one entry (a lone command as itself) and answers each
/// proposal with its own response, or all of them with the write's error.
async fn write_batch(raft: &Raft, batch: Vec<Proposal>) {
    let (mut commands, mut replies): (Vec<Command>, Vec<_>) =
        batch.into_iter().map(|p| (p.command, p.reply)).unzip();
    let request = match commands.pop() {
        Some(only) if commands.is_empty() => Request::new(only),
        last => {
            commands.extend(last);
            Request::new(Command::Batch { commands })
        }
    };
    let outcome = match raft.client_write(request).await {
        Ok(written) => Ok(written.data),
        Err(e) => Err(match e.forward_to_leader() {
            Some(fwd) => ProposeError::NotLeader {
                leader_addr: fwd.leader_node.as_ref().map(|n| n.addr.clone()),
            },
            None => ProposeError::Fatal(e.to_string()),
        }),
    };
    match outcome {
        Ok(response) if replies.len() == 1 => {
            if let Some(reply) = replies.pop() {
                let _ = reply.send(Ok(response));
            }
        }
        Ok(Response::Batch { responses }) if responses.len() == replies.len() => {
            for (reply, response) in replies.into_iter().zip(responses) {
                let _ = reply.send(Ok(response));
            }
        }
        Ok(other) => {
            let e = ProposeError::Fatal(format!("a batch of {} answered {other:?}", replies.len()));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.id).finish()
    }
}

/// The leader `m` names, except this node itself while it does not lead.
/// openraft 0.9 names the holder of the committed vote: a leader removed
/// from the voters steps down to a learner but keeps its vote for itself,
/// and no later leader replicates to a node outside the membership, so it
/// would name itself for good (found by `berth-drill chaos`'s
/// `ReplaceLeader`: such a node forwarded every read to itself, a chain
/// of calls to itself that grew until the client gave up).
pub fn named_leader(m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> Option<NodeId> {
    m.current_leader
        .filter(|leader| *leader != m.id || m.state == ServerState::Leader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(
        id: NodeId,
        state: ServerState,
        leader: Option<NodeId>,
    ) -> openraft::RaftMetrics<NodeId, openraft::BasicNode> {
        let mut m = openraft::RaftMetrics::new_initial(id);
        m.state = state;
        m.current_leader = leader;
        m
    }

    #[test]
    fn a_node_names_itself_leader_only_while_it_leads() {
        assert_eq!(
            named_leader(&metrics(1, ServerState::Leader, Some(1))),
            Some(1)
        );
        assert_eq!(
            named_leader(&metrics(2, ServerState::Follower, Some(1))),
            Some(1)
        );
        // A leader removed from the voters: a learner that still holds its
        // own vote.
        assert_eq!(
            named_leader(&metrics(1, ServerState::Learner, Some(1))),
            None
        );
        assert_eq!(
            named_leader(&metrics(1, ServerState::Follower, Some(1))),
            None
        );
        assert_eq!(
            named_leader(&metrics(2, ServerState::Learner, Some(1))),
            Some(1)
        );
        assert_eq!(
            named_leader(&metrics(2, ServerState::Candidate, None)),
            None
        );
    }
}
