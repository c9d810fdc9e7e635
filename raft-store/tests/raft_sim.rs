//! A deterministic, seeded simulation of the Raft layer (issue 10): three
//! openraft nodes whose state machine is Berth's own (`SmState::apply`),
//! behind in-memory log and state-machine stores that implement the same
//! storage traits as the RocksDB ones, talking through an in-process
//! network with seeded latency, on one thread in virtual time (tokio's
//! paused clock). Clients submit jobs and retry with the same request id;
//! faults on a seeded schedule crash a node (its log and vote kept, as
//! fsynced; its state machine rebuilt from serialized data, as from disk)
//! or cut it off from the others, then restore it.
//!
//! The state machine is rebuilt from what was durable at the crash, as
//! the RocksDB store makes it: an apply batch is written without its own
//! fsync and becomes durable with the node's next synced write (a log
//! append, truncation, purge or vote, or a snapshot). So a crashed node
//! may come back with its state machine behind its log, and openraft must
//! re-apply the committed entries after it.
//!
//! Deterministic because nothing reads a real clock, a thread or an OS
//! random source: openraft's randomness comes through its `AsyncRuntime`
//! (`SimRuntime` below hands it a seeded generator), every task runs on
//! one current-thread runtime, and time moves only when every task waits.
//! A failure names its seed; rerun it alone with
//! `BERTH_SIM_SEED=<seed> cargo test -p berth-raft-store --test raft_sim`.
//!
//! Checked: every acknowledged submit is in every node's final state
//! under the job id it was acknowledged with; at most one leader per term;
//! every node ends with byte-identical state data; the same seed replays
//! to the same trace.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_raft_store::{apply_entry, AppliedMeta};
use berth_scheduler::JobSpec;
use berth_state::command::{Command, Request, Response};
use berth_state::SmState;
use berth_state::{Dirty, SmData};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AsyncRuntime, BasicNode, Config, Entry, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, ServerState, SnapshotMeta, SnapshotPolicy, StorageError, StorageIOError,
    StoredMembership, TokioInstant, TokioRuntime, Vote,
};
use rand::RngCore;

type NodeId = u64;

openraft::declare_raft_types!(
    /// Berth's entries and answers on the simulation's runtime.
    pub SimConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = Entry<SimConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = SimRuntime,
);

type Raft = openraft::Raft<SimConfig>;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Nodes in the simulated cluster.
const NODES: u64 = 3;
/// Concurrent clients.
const CLIENTS: u64 = 4;
/// Submits each client makes.
const SUBMITS_PER_CLIENT: u64 = 40;
/// Faults injected, one at a time.
const FAULTS: u32 = 12;
/// A client's call is given up after this long (virtual), then retried.
const CALL_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Attempts per submit at most.
const ATTEMPTS_MAX: u32 = 200;
/// The end: every node caught up within this long after the last fault.
const SETTLE_DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- runtime

thread_local! {
    static RNG_STATE: Cell<u64> = const { Cell::new(0) };
}

fn seed_rng(seed: u64) {
    RNG_STATE.with(|s| s.set(seed));
}

/// splitmix64 over the thread's seeded state: openraft's election timeouts
/// and the simulation's own choices all draw from it, in task order.
#[derive(Debug, Default, Clone, Copy)]
pub struct SimRng;

impl RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        RNG_STATE.with(|s| {
            let x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(x);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// Uniform in `lo..=hi`, from the seeded generator.
fn range(lo: u64, hi: u64) -> u64 {
    lo + SimRng.next_u64() % (hi - lo + 1)
}

/// tokio, but with the seeded generator for openraft's random choices.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SimRuntime;

impl AsyncRuntime for SimRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SimRng;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SimRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}

// ---------------------------------------------------------------- stores

#[derive(Debug, Default)]
struct LogInner {
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    /// `committed` as of the last synced write (the store writes it
    /// unsynced), what a crash leaves.
    committed_durable: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
    entries: BTreeMap<u64, Entry<SimConfig>>,
}

/// The log and vote, kept across a crash (as fsynced ones are), and the
/// node's state machine, whose applied state each of its synced writes
/// makes durable (they share one WAL in the RocksDB store).
#[derive(Debug, Clone, Default)]
struct MemLog(Arc<Mutex<LogInner>>, Arc<Mutex<Option<MemSm>>>);

impl MemLog {
    fn inner(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a crash leaves: the unsynced commit index is lost.
    fn crash(&self) {
        let mut inner = self.inner();
        inner.committed = inner.committed_durable;
    }

    /// The state machine the node runs now (a new one after each crash).
    fn attach(&self, sm: MemSm) {
        *self.1.lock().unwrap_or_else(|p| p.into_inner()) = Some(sm);
    }

    /// A synced write: everything applied so far is durable now.
    fn sync(&self) {
        {
            let mut inner = self.inner();
            inner.committed_durable = inner.committed;
        }
        if let Some(sm) = self.1.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            sm.make_durable();
        }
    }
}

impl RaftLogReader<SimConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<SimConfig>>> {
        Ok(self
            .inner()
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<SimConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<SimConfig>> {
        let inner = self.inner();
        let last = inner.entries.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or(inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.inner().vote = Some(*vote);
        self.sync();
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(self.inner().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        self.inner().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self.inner().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<SimConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        {
            let mut inner = self.inner();
            for e in entries {
                inner.entries.insert(e.log_id.index, e);
            }
        }
        self.sync();
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        self.inner().entries.split_off(&log_id.index);
        self.sync();
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut inner = self.inner();
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        drop(inner);
        self.sync();
        Ok(())
    }
}

#[derive(Debug, Default)]
struct SmInner {
    state: SmState,
    /// Where `state` stands in the log.
    meta: AppliedMeta,
    /// The state's data, and where it stood, as of the node's last synced
    /// write (None: nothing applied was durable yet), what a crash leaves.
    durable: Option<(AppliedMeta, Vec<u8>)>,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
    snapshots_built: u64,
}

/// Berth's state machine in memory.
#[derive(Debug, Clone, Default)]
struct MemSm(Arc<Mutex<SmInner>>);

impl MemSm {
    fn inner(&self) -> std::sync::MutexGuard<'_, SmInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state as a restarted node reads it back: the data durable at
    /// the crash, rebuilt (derived indexes and room recomputed), and how
    /// many applied entries it lacks; its snapshot kept.
    fn reloaded(&self) -> (MemSm, u64) {
        let inner = self.inner();
        let (meta, state) = match &inner.durable {
            Some((meta, bytes)) => {
                let mut state =
                    SmState::from_data(serde_json::from_slice(bytes).expect("data reads"));
                state.set_applied_index(meta.last_applied.map_or(0, |l| l.index));
                (meta.clone(), state)
            }
            None => (AppliedMeta::default(), SmState::default()),
        };
        let behind = inner.state.applied_index() - state.applied_index();
        let sm = MemSm(Arc::new(Mutex::new(SmInner {
            state,
            meta,
            durable: inner.durable.clone(),
            snapshot: inner.snapshot.clone(),
            snapshots_built: inner.snapshots_built,
        })));
        (sm, behind)
    }

    fn make_durable(&self) {
        let mut inner = self.inner();
        inner.durable = Some((inner.meta.clone(), data_bytes(&inner.state)));
    }
}

fn data_bytes(state: &SmState) -> Vec<u8> {
    serde_json::to_vec(&state.data).expect("state data serializes")
}

impl RaftSnapshotBuilder<SimConfig> for MemSm {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<SimConfig>> {
        let mut inner = self.inner();
        inner.snapshots_built += 1;
        let bytes = data_bytes(&inner.state);
        let last = inner.meta.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: inner.meta.membership.clone(),
            snapshot_id: format!("{}-{}", last.map_or(0, |l| l.index), inner.snapshots_built),
        };
        inner.snapshot = Some((meta.clone(), bytes.clone()));
        inner.durable = Some((inner.meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<SimConfig> for MemSm {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let inner = self.inner();
        Ok((inner.meta.last_applied, inner.meta.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<SimConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut guard = self.inner();
        let inner = &mut *guard;
        let mut out = Vec::new();
        for entry in entries {
            let response = apply_entry(
                &mut inner.state,
                &mut inner.meta,
                entry.log_id,
                &entry.payload,
                &mut Dirty::default(),
            )
            .map_err(|e| StorageIOError::apply(entry.log_id, &e))?;
            out.push(response);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let bytes = snapshot.into_inner();
        let data: SmData = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let mut inner = self.inner();
        inner.state = SmState::from_data(data);
        inner
            .state
            .set_applied_index(meta.last_log_id.map_or(0, |l| l.index));
        inner.meta = AppliedMeta {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        inner.durable = Some((inner.meta.clone(), data_bytes(&inner.state)));
        inner.snapshot = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<SimConfig>>> {
        Ok(self.inner().snapshot.clone().map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

// ---------------------------------------------------------------- network

/// Which nodes run and which are cut off; every call goes through it.
#[derive(Default)]
struct Router {
    nodes: Mutex<BTreeMap<NodeId, Raft>>,
    cut: Mutex<BTreeSet<NodeId>>,
}

impl Router {
    fn reachable(&self, from: NodeId, to: NodeId) -> Option<Raft> {
        let cut = self.cut.lock().unwrap_or_else(|p| p.into_inner());
        if cut.contains(&from) || cut.contains(&to) {
            return None;
        }
        drop(cut);
        self.nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&to)
            .cloned()
    }

    fn raft(&self, id: NodeId) -> Option<Raft> {
        self.nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }
}

struct Network {
    router: Arc<Router>,
    from: NodeId,
}

struct Connection {
    router: Arc<Router>,
    from: NodeId,
    to: NodeId,
}

impl RaftNetworkFactory<SimConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

fn unreachable<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other("cut off or down")))
}

/// One way of a call: a seeded latency of 1-4 ms.
async fn hop() {
    tokio::time::sleep(Duration::from_micros(range(1_000, 4_000))).await;
}

impl Connection {
    /// Sends `call` to the target if it is reachable both ways.
    async fn call<T, E, F, Fut>(&mut self, call: F) -> Result<T, RPCError<NodeId, BasicNode, E>>
    where
        E: std::error::Error,
        F: FnOnce(Raft) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        hop().await;
        let raft = self
            .router
            .reachable(self.from, self.to)
            .ok_or_else(unreachable)?;
        let answer = call(raft).await;
        hop().await;
        if self.router.reachable(self.from, self.to).is_none() {
            // The answer is lost on the way back.
            return Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other("answer lost"),
            )));
        }
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e)))
    }
}

impl RaftNetwork<SimConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<SimConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(|raft| async move { raft.append_entries(rpc).await })
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<SimConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(|raft| async move { raft.install_snapshot(rpc).await })
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(|raft| async move { raft.vote(rpc).await }).await
    }
}

// ---------------------------------------------------------------- cluster

struct Cluster {
    router: Arc<Router>,
    logs: BTreeMap<NodeId, MemLog>,
    machines: BTreeMap<NodeId, MemSm>,
    /// What happened, in order, with virtual times: the replay trace.
    trace: Arc<Mutex<Vec<String>>>,
}

fn config() -> Arc<Config> {
    Arc::new(
        Config {
            cluster_name: "berth-raft-sim".into(),
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            // Snapshots and purges often, so lagging nodes get snapshots.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(40),
            max_in_snapshot_log_to_keep: 5,
            ..Default::default()
        }
        .validate()
        .expect("a valid config"),
    )
}

thread_local! {
    /// When this run began (virtual time).
    static START: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) };
}

/// Virtual ms since this run began.
fn now_ms() -> u64 {
    START.with(|s| s.get().map_or(0, |t| t.elapsed().as_millis() as u64))
}

impl Cluster {
    fn note(&self, line: String) {
        self.trace
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!("{} {line}", now_ms()));
    }

    async fn start(&mut self, id: NodeId) {
        let log = self.logs.entry(id).or_default().clone();
        let sm = self.machines.entry(id).or_default().clone();
        log.attach(sm.clone());
        let network = Network {
            router: self.router.clone(),
            from: id,
        };
        let raft = Raft::new(id, config(), network, log, sm)
            .await
            .expect("a node starts");
        self.router
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, raft);
    }

    /// Stops node `id` abruptly; its log and vote stay (fsynced), its
    /// state machine is read back as from disk at the restart. Returns how
    /// many applied entries that state machine lost (to be re-applied).
    async fn crash(&mut self, id: NodeId) -> u64 {
        let raft = self
            .router
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(raft) = raft {
            let _ = raft.shutdown().await;
        }
        if let Some(log) = self.logs.get(&id) {
            log.crash();
        }
        let Some(sm) = self.machines.get(&id) else {
            return 0;
        };
        let (reloaded, behind) = sm.reloaded();
        self.machines.insert(id, reloaded);
        behind
    }

    fn set_cut(&self, id: NodeId, cut: bool) {
        let mut set = self.router.cut.lock().unwrap_or_else(|p| p.into_inner());
        if cut {
            set.insert(id);
        } else {
            set.remove(&id);
        }
    }
}

/// Submits `count` jobs with request ids `c<client>-<n>`, each retried with
/// the same id until acknowledged; returns (request id, job id) acked.
async fn client(
    router: Arc<Router>,
    trace: Arc<Mutex<Vec<String>>>,
    client: u64,
    count: u64,
) -> Vec<(String, u64)> {
    let mut acked = Vec::new();
    let mut target = 1 + client % NODES;
    for n in 0..count {
        let request_id = format!("c{client}-{n}");
        let command = Command::SubmitJob {
            request_id: request_id.clone(),
            spec: JobSpec {
                name: "sim".into(),
                user: format!("u{client}"),
                command: "true".into(),
                cpus: 1,
                ..JobSpec::default()
            },
            now_ms: now_ms(),
        };
        for attempt in 0..=ATTEMPTS_MAX {
            assert!(
                attempt < ATTEMPTS_MAX,
                "{request_id}: no answer after {ATTEMPTS_MAX} attempts"
            );
            let Some(raft) = router.raft(target) else {
                target = 1 + (target % NODES);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let write = raft.client_write(Request::new(command.clone()));
            match tokio::time::timeout(CALL_TIMEOUT, write).await {
                Ok(Ok(written)) => {
                    match written.data {
                        Response::Submitted { job_id, .. } => {
                            trace
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(format!("{} ack {request_id} job {job_id}", now_ms()));
                            acked.push((request_id.clone(), job_id));
                        }
                        other => panic!("{request_id}: answered {other:?}"),
                    }
                    break;
                }
                Ok(Err(e)) => {
                    target = match e.forward_to_leader().and_then(|f| f.leader_id) {
                        Some(leader) => leader,
                        None => 1 + (target % NODES),
                    };
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(_) => target = 1 + (target % NODES),
            }
        }
        tokio::time::sleep(Duration::from_millis(range(1, 30))).await;
    }
    acked
}

/// Every 5 ms: the leader each running node claims, per term. Two leaders
/// in one term is a violation.
async fn watch_leaders(
    router: Arc<Router>,
    trace: Arc<Mutex<Vec<String>>>,
    stop: Arc<Mutex<bool>>,
) -> Vec<String> {
    let mut leaders: BTreeMap<u64, NodeId> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut reported = BTreeSet::new();
    while !*stop.lock().unwrap_or_else(|p| p.into_inner()) {
        let nodes: Vec<(NodeId, Raft)> = router
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, r)| (*id, r.clone()))
            .collect();
        for (id, raft) in nodes {
            let m = raft.metrics().borrow().clone();
            if m.state == ServerState::Leader {
                let term = m.current_term;
                match leaders.get(&term) {
                    Some(other) if *other != id => {
                        if reported.insert(term) {
                            problems
                                .push(format!("term {term}: node {other} and node {id} both lead"));
                        }
                    }
                    Some(_) => {}
                    None => {
                        leaders.insert(term, id);
                        trace
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{} leader {id} term {term}", now_ms()));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    problems
}

/// One seeded run; returns its trace and what it found wrong.
async fn run(seed: u64) -> (Vec<String>, Vec<String>, usize) {
    seed_rng(seed);
    START.with(|s| s.set(Some(tokio::time::Instant::now())));
    let mut cluster = Cluster {
        router: Arc::new(Router::default()),
        logs: BTreeMap::new(),
        machines: BTreeMap::new(),
        trace: Arc::new(Mutex::new(Vec::new())),
    };
    for id in 1..=NODES {
        cluster.start(id).await;
    }
    let members: BTreeMap<NodeId, BasicNode> =
        (1..=NODES).map(|id| (id, BasicNode::default())).collect();
    cluster
        .router
        .raft(1)
        .expect("node 1")
        .initialize(members)
        .await
        .expect("the cluster initializes");

    let stop = Arc::new(Mutex::new(false));
    let watcher = tokio::spawn(watch_leaders(
        cluster.router.clone(),
        cluster.trace.clone(),
        stop.clone(),
    ));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            tokio::spawn(client(
                cluster.router.clone(),
                cluster.trace.clone(),
                c,
                SUBMITS_PER_CLIENT,
            ))
        })
        .collect();

    for _ in 0..FAULTS {
        tokio::time::sleep(Duration::from_millis(range(200, 900))).await;
        let victim = range(1, NODES);
        let hold = Duration::from_millis(range(300, 1_500));
        if range(0, 1) == 0 {
            let behind = cluster.crash(victim).await;
            cluster.note(format!(
                "crash {victim} for {} ms, its state machine {behind} entries behind",
                hold.as_millis()
            ));
            tokio::time::sleep(hold).await;
            cluster.start(victim).await;
            cluster.note(format!("restart {victim}"));
        } else {
            cluster.note(format!("cut {victim} for {} ms", hold.as_millis()));
            cluster.set_cut(victim, true);
            tokio::time::sleep(hold).await;
            cluster.set_cut(victim, false);
            cluster.note(format!("heal {victim}"));
        }
    }

    let mut acked = Vec::new();
    for c in clients {
        acked.extend(c.await.expect("a client ends"));
    }
    cluster.note(format!("{} submits acknowledged", acked.len()));

    // Settle: every node applies the leader's last index.
    let mut problems = Vec::new();
    let started = tokio::time::Instant::now();
    loop {
        let applied: Vec<Option<u64>> = (1..=NODES)
            .map(|id| {
                cluster
                    .machines
                    .get(&id)
                    .and_then(|m| m.inner().meta.last_applied.map(|l| l.index))
            })
            .collect();
        let last = cluster
            .router
            .raft(1)
            .map(|r| r.metrics().borrow().last_log_index);
        if applied.iter().all(|a| *a == applied[0])
            && applied[0].is_some()
            && last.flatten() == applied[0]
        {
            break;
        }
        if started.elapsed() > SETTLE_DEADLINE {
            problems.push(format!("nodes did not converge: applied {applied:?}"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    *stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
    problems.extend(watcher.await.expect("the watcher ends"));

    let datas: Vec<Vec<u8>> = (1..=NODES)
        .map(|id| data_bytes(&cluster.machines[&id].inner().state))
        .collect();
    if datas.iter().any(|d| *d != datas[0]) {
        problems.push("the nodes' state data differ".into());
    }
    for id in 1..=NODES {
        let m = cluster.machines[&id].inner();
        for (request_id, job_id) in &acked {
            match m.state.data.request_ids.get(request_id) {
                Some(j) if j == job_id => {}
                other => problems.push(format!(
                    "node {id}: acknowledged {request_id} -> job {job_id}, state has {other:?}"
                )),
            }
        }
    }
    for id in 1..=NODES {
        if let Some(raft) = cluster.router.raft(id) {
            let _ = raft.shutdown().await;
        }
    }
    let trace = cluster
        .trace
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    (trace, problems, acked.len())
}

fn run_seed(seed: u64) -> (Vec<String>, Vec<String>, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(run(seed))
}

#[test]
fn acknowledged_writes_survive_crashes_and_cuts_and_every_seed_replays() {
    let seeds: Vec<u64> = match std::env::var("BERTH_SIM_SEED") {
        Ok(s) => vec![s.trim().parse().expect("BERTH_SIM_SEED is a number")],
        Err(_) => (1..=16).collect(),
    };
    let all_seeds = seeds.len() > 1;
    let mut lost_applies = 0;
    for seed in seeds {
        let (trace, problems, acked) = run_seed(seed);
        let replay =
            format!("replay: BERTH_SIM_SEED={seed} cargo test -p berth-raft-store --test raft_sim");
        assert!(problems.is_empty(), "seed {seed}: {problems:#?}\n{replay}");
        assert_eq!(
            acked as u64,
            CLIENTS * SUBMITS_PER_CLIENT,
            "seed {seed}\n{replay}"
        );
        let (again, _, _) = run_seed(seed);
        if trace != again {
            let at = trace.iter().zip(&again).position(|(a, b)| a != b);
            panic!(
                "seed {seed} did not replay the same: first difference at line {at:?}\n{trace:#?}\n{again:#?}"
            );
        }
        let leaders = trace.iter().filter(|l| l.contains(" leader ")).count();
        lost_applies += trace
            .iter()
            .filter_map(|l| l.split(" its state machine ").nth(1))
            .filter_map(|rest| rest.split(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        println!(
            "seed {seed}: {acked} submits acknowledged and found on every node, {leaders} leaders, {} trace lines, ends at {}",
            trace.len(),
            trace.last().map_or("", String::as_str)
        );
    }
    // The store's unsynced apply batches are only exercised if some crash
    // lost applied entries that openraft then had to re-apply.
    println!("applied entries lost at crashes and re-applied: {lost_applies}");
    assert!(
        !all_seeds || lost_applies > 0,
        "no crash in any seed left a state machine behind its log"
    );
}
