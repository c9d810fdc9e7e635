//! RocksDB layout and openraft storage (log + state machine).
//!
//! One RocksDB instance per node, with column families:
//! - `meta`: Raft metadata (vote, committed, last purged) and the store's
//!   format version;
//! - `logs`: Raft log entries keyed by big-endian index;
//! - `sm_meta`: state-machine metadata (last applied, membership, id
//!   counters) and the current snapshot;
//! - `sm_jobs`, `sm_hosts`, `sm_requests`: the state machine's tables.
//!
//! Every write that openraft relies on for durability is a `WriteBatch`
//! written with a synced WAL (`WriteOptions::set_sync(true)`): log appends,
//! truncations, purges, votes, each apply batch and snapshot installs. A
//! `kill -9` therefore never loses what was acknowledged, and a batch is
//! either wholly there or not at all.

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::command::{Response, COMMAND_VERSION};
use crate::error::StoreError;
use crate::state::{Counters, Dirty, SharedState, SmData, SmState};
use crate::{NodeId, TypeConfig};

/// Version of the on-disk layout. A store written with a higher version is
/// refused at open.
pub const FORMAT_VERSION: u32 = 1;

const CF_META: &str = "meta";
const CF_LOGS: &str = "logs";
const CF_SM_META: &str = "sm_meta";
const CF_SM_JOBS: &str = "sm_jobs";
const CF_SM_HOSTS: &str = "sm_hosts";
const CF_SM_REQUESTS: &str = "sm_requests";
const ALL_CFS: [&str; 6] = [CF_META, CF_LOGS, CF_SM_META, CF_SM_JOBS, CF_SM_HOSTS, CF_SM_REQUESTS];

const KEY_FORMAT: &[u8] = b"format_version";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
const KEY_LAST_APPLIED: &[u8] = b"last_applied";
const KEY_MEMBERSHIP: &[u8] = b"membership";
const KEY_COUNTERS: &[u8] = b"counters";
const KEY_SNAPSHOT: &[u8] = b"snapshot";

/// Exclusive upper bound of every state-machine key: job keys are 8-byte
/// big-endian ids and 0xFF never occurs in UTF-8 strings, so
/// `[b"", TABLE_KEY_END)` spans a whole table.
const TABLE_KEY_END: &[u8] = &[0xFF; 9];

type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Everything a node needs from its store.
pub struct StoreHandles {
    pub log: LogStore,
    pub state_machine: StateMachineStore,
    /// The applied state, for readers.
    pub state: SharedState,
    /// The last applied log index, updated after every apply batch.
    pub applied: watch::Receiver<u64>,
}

/// Opens (or creates) the store under `path`.
pub fn open(path: &Path) -> Result<StoreHandles, StoreError> {
    let existed = path.join("CURRENT").exists();
    if !existed && path.is_dir() && std::fs::read_dir(path).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(StoreError::Foreign { path: path.to_path_buf() });
    }
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = ALL_CFS.iter().map(|name| ColumnFamilyDescriptor::new(*name, Options::default()));
    let db = DB::open_cf_descriptors(&opts, path, cfs).map_err(|source| StoreError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let db = Arc::new(db);
    check_format(&db, path, existed)?;

    let data = load_state(&db, path)?;
    let applied_index = data.last_applied.map(|l| l.index).unwrap_or(0);
    let state: SharedState = Arc::new(RwLock::new(SmState::from_data(data)));
    let (applied_tx, applied) = watch::channel(applied_index);
    Ok(StoreHandles {
        log: LogStore { db: db.clone() },
        state_machine: StateMachineStore {
            db,
            state: state.clone(),
            applied_tx: Arc::new(applied_tx),
        },
        state,
        applied,
    })
}

fn check_format(db: &DB, path: &Path, existed: bool) -> Result<(), StoreError> {
    let cf = cf(db, CF_META);
    match db.get_cf(cf, KEY_FORMAT)? {
        Some(bytes) => {
            let found: u32 = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("format version unreadable: {e}"),
            })?;
            if found > FORMAT_VERSION {
                return Err(StoreError::NewerFormat {
                    path: path.to_path_buf(),
                    found,
                    supported: FORMAT_VERSION,
                });
            }
            Ok(())
        }
        None if existed => Err(StoreError::Foreign { path: path.to_path_buf() }),
        None => {
            let mut batch = WriteBatch::default();
            batch.put_cf(cf, KEY_FORMAT, serde_json::to_vec(&FORMAT_VERSION)?);
            db.write_opt(batch, &synced())?;
            Ok(())
        }
    }
}

fn load_state(db: &DB, path: &Path) -> Result<SmData, StoreError> {
    let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("{what}: {e}"),
    };
    let meta = cf(db, CF_SM_META);
    let mut data = SmData::default();
    if let Some(v) = db.get_cf(meta, KEY_LAST_APPLIED)? {
        data.last_applied = serde_json::from_slice(&v).map_err(|e| corrupt("last applied", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_MEMBERSHIP)? {
        data.last_membership = serde_json::from_slice(&v).map_err(|e| corrupt("membership", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_COUNTERS)? {
        data.counters = serde_json::from_slice::<Counters>(&v).map_err(|e| corrupt("counters", e))?;
    }
    for item in db.iterator_cf(cf(db, CF_SM_JOBS), IteratorMode::Start) {
        let (_, v) = item?;
        let record: crate::JobRecord = serde_json::from_slice(&v).map_err(|e| corrupt("job", e))?;
        data.jobs.insert(record.job.id, record);
    }
    for item in db.iterator_cf(cf(db, CF_SM_HOSTS), IteratorMode::Start) {
        let (_, v) = item?;
        let record: crate::HostRecord = serde_json::from_slice(&v).map_err(|e| corrupt("host", e))?;
        data.hosts.insert(record.name.clone(), record);
    }
    for item in db.iterator_cf(cf(db, CF_SM_REQUESTS), IteratorMode::Start) {
        let (k, v) = item?;
        let job_id: u64 = serde_json::from_slice(&v).map_err(|e| corrupt("request id", e))?;
        data.request_ids.insert(String::from_utf8_lossy(&k).into_owned(), job_id);
    }
    Ok(data)
}

/// Column families are created at open, so a missing one is a programming
/// error, not an input error.
fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name)
        .unwrap_or_else(|| panic!("column family {name} is created at open"))
}

fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_slice(bytes)
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(value)
}

/// The Raft log and Raft metadata.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
}

impl LogStore {
    fn get_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, StoreError> {
        match self.db.get_cf(cf(&self.db, CF_META), key)? {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
    }

    fn put_meta_synced<T: Serialize>(&self, key: &[u8], value: &T) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(&self.db, CF_META), key, encode(value)?);
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let start_key = index_key(start);
        let mut entries = Vec::new();
        let iter = self.db.iterator_cf(
            cf(&self.db, CF_LOGS),
            IteratorMode::From(&start_key, Direction::Forward),
        );
        for item in iter {
            let (key, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            let index = key_to_index(&key).map_err(|e| StorageIOError::read_logs(&e))?;
            if !range.contains(&index) {
                break;
            }
            let entry: Entry<TypeConfig> = decode(&value).map_err(|e| StorageIOError::read_logs(&e))?;
            assert_eq!(entry.log_id.index, index, "log entry stored under the wrong key");
            entries.push(entry);
        }
        Ok(entries)
    }
}

fn key_to_index(key: &[u8]) -> Result<u64, std::io::Error> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "log key is not 8 bytes")
    })?;
    Ok(u64::from_be_bytes(bytes))
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last = self.db.iterator_cf(cf(&self.db, CF_LOGS), IteratorMode::End).next();
        let last_log_id = match last {
            None => None,
            Some(item) => {
                let (_, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                let entry: Entry<TypeConfig> = decode(&value).map_err(|e| StorageIOError::read_logs(&e))?;
                Some(entry.log_id)
            }
        };
        let last_purged_log_id: Option<LogId<NodeId>> =
            self.get_meta(KEY_LAST_PURGED).map_err(|e| StorageIOError::read_logs(&e))?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last_log_id.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.put_meta_synced(KEY_VOTE, vote)
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.get_meta(KEY_VOTE).map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        // Not synced: losing it only means re-applying from last_applied,
        // which openraft does anyway after a crash.
        let value = encode(&committed).map_err(|e| StorageIOError::write(&e))?;
        self.db
            .put_cf(cf(&self.db, CF_META), KEY_COMMITTED, value)
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        let committed: Option<Option<LogId<NodeId>>> =
            self.get_meta(KEY_COMMITTED).map_err(|e| StorageIOError::read(&e))?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let logs = cf(&self.db, CF_LOGS);
        let mut batch = WriteBatch::default();
        for entry in entries {
            let value = encode(&entry).map_err(|e| StorageIOError::write_logs(&e))?;
            batch.put_cf(logs, index_key(entry.log_id.index), value);
        }
        // Synced before openraft hears it is durable: an acknowledged entry
        // survives kill -9.
        let result = self.db.write_opt(batch, &synced());
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(&e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(cf(&self.db, CF_LOGS), index_key(log_id.index), index_key(u64::MAX));
        // delete_range's end is exclusive; u64::MAX is never a real index.
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let mut batch = WriteBatch::default();
        let value = encode(&log_id).map_err(|e| StorageIOError::write_logs(&e))?;
        batch.put_cf(cf(&self.db, CF_META), KEY_LAST_PURGED, value);
        batch.delete_range_cf(
            cf(&self.db, CF_LOGS),
            index_key(0),
            index_key(log_id.index.saturating_add(1)),
        );
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}

/// A snapshot as stored: its metadata and the serialized [`SmData`].
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// The state machine: applies committed entries to the shared in-memory
/// state and persists what each batch changed.
#[derive(Clone)]
pub struct StateMachineStore {
    db: Arc<DB>,
    state: SharedState,
    applied_tx: Arc<watch::Sender<u64>>,
}

impl StateMachineStore {
    fn persist(&self, state: &SmState, dirty: &Dirty) -> Result<(), StoreError> {
        let mut batch = WriteBatch::default();
        let jobs = cf(&self.db, CF_SM_JOBS);
        for id in &dirty.jobs {
            match state.job(*id) {
                Some(record) => batch.put_cf(jobs, index_key(*id), encode(record)?),
                None => batch.delete_cf(jobs, index_key(*id)),
            }
        }
        let hosts = cf(&self.db, CF_SM_HOSTS);
        for name in &dirty.hosts {
            match state.data.hosts.get(name) {
                Some(record) => batch.put_cf(hosts, name.as_bytes(), encode(record)?),
                None => batch.delete_cf(hosts, name.as_bytes()),
            }
        }
        let requests = cf(&self.db, CF_SM_REQUESTS);
        for (request_id, job_id) in &dirty.request_ids_put {
            batch.put_cf(requests, request_id.as_bytes(), encode(job_id)?);
        }
        for request_id in &dirty.request_ids_deleted {
            batch.delete_cf(requests, request_id.as_bytes());
        }
        write_sm_meta(&mut batch, &self.db, &state.data)?;
        self.db.write_opt(batch, &synced())?;
        Ok(())
    }

    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, SmState> {
        // A poisoned lock means a panic mid-apply; the state may be half
        // changed and must not be served.
        self.state.read().unwrap_or_else(|_| panic!("state machine lock poisoned"))
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, SmState> {
        self.state.write().unwrap_or_else(|_| panic!("state machine lock poisoned"))
    }
}

fn write_sm_meta(batch: &mut WriteBatch, db: &DB, data: &SmData) -> Result<(), StoreError> {
    let meta = cf(db, CF_SM_META);
    batch.put_cf(meta, KEY_LAST_APPLIED, encode(&data.last_applied)?);
    batch.put_cf(meta, KEY_MEMBERSHIP, encode(&data.last_membership)?);
    batch.put_cf(meta, KEY_COUNTERS, encode(&data.counters)?);
    Ok(())
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let (data, last_applied, membership) = {
            let state = self.read_state();
            let bytes = encode(&state.data).map_err(|e| StorageIOError::read_state_machine(&e))?;
            (bytes, state.data.last_applied, state.data.last_membership.clone())
        };
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}", l.leader_id, l.index),
            None => "empty".to_string(),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        let bytes = encode(&stored)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(&self.db, CF_SM_META), KEY_SNAPSHOT, bytes);
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let state = self.read_state();
        Ok((state.data.last_applied, state.data.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        let mut dirty = Dirty::default();
        let applied_index;
        {
            let mut state = self.write_state();
            for entry in entries {
                let response = match &entry.payload {
                    EntryPayload::Blank => Response::None,
                    EntryPayload::Normal(request) => {
                        if request.version > COMMAND_VERSION {
                            // Refuse rather than misapply: this node stops
                            // and must be upgraded before it can go on.
                            let err = std::io::Error::other(format!(
                                "log entry {} has command version {}, newer than this berthd \
                                 understands ({COMMAND_VERSION}); upgrade this node",
                                entry.log_id, request.version
                            ));
                            return Err(StorageIOError::apply(entry.log_id, &err).into());
                        }
                        state.apply(&request.command, &mut dirty)
                    }
                    EntryPayload::Membership(membership) => {
                        state.data.last_membership =
                            StoredMembership::new(Some(entry.log_id), membership.clone());
                        Response::None
                    }
                };
                state.data.last_applied = Some(entry.log_id);
                responses.push(response);
            }
            self.persist(&state, &dirty)
                .map_err(|e| StorageIOError::write_state_machine(&e))?;
            applied_index = state.applied_index();
        }
        self.applied_tx.send_replace(applied_index);
        Ok(responses)
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
        let signature = Some(meta.signature());
        let mut data: SmData =
            decode(&bytes).map_err(|e| StorageIOError::read_snapshot(signature.clone(), &e))?;
        data.last_applied = meta.last_log_id;
        data.last_membership = meta.last_membership.clone();

        // One synced batch replaces every table: a crash mid-install leaves
        // the previous state intact.
        let mut batch = WriteBatch::default();
        for name in [CF_SM_JOBS, CF_SM_HOSTS, CF_SM_REQUESTS] {
            batch.delete_range_cf(cf(&self.db, name), &b""[..], TABLE_KEY_END);
        }
        let to_io = |e: StoreError| StorageIOError::write_snapshot(signature.clone(), &e);
        let fill = |batch: &mut WriteBatch| -> Result<(), StoreError> {
            for (id, record) in &data.jobs {
                batch.put_cf(cf(&self.db, CF_SM_JOBS), index_key(*id), encode(record)?);
            }
            for (name, record) in &data.hosts {
                batch.put_cf(cf(&self.db, CF_SM_HOSTS), name.as_bytes(), encode(record)?);
            }
            for (request_id, job_id) in &data.request_ids {
                batch.put_cf(cf(&self.db, CF_SM_REQUESTS), request_id.as_bytes(), encode(job_id)?);
            }
            write_sm_meta(batch, &self.db, &data)?;
            let stored = StoredSnapshot {
                meta: meta.clone(),
                data: bytes.clone(),
            };
            batch.put_cf(cf(&self.db, CF_SM_META), KEY_SNAPSHOT, encode(&stored)?);
            Ok(())
        };
        fill(&mut batch).map_err(to_io)?;
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        let applied_index = {
            let mut state = self.write_state();
            *state = SmState::from_data(data);
            state.applied_index()
        };
        self.applied_tx.send_replace(applied_index);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let bytes = self
            .db
            .get_cf(cf(&self.db, CF_SM_META), KEY_SNAPSHOT)
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        let stored: StoredSnapshot =
            decode(&bytes).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(Some(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        }))
    }
}

/// Where a node keeps its store under its data directory.
pub fn store_path(data_dir: &Path) -> PathBuf {
    data_dir.join("raft")
}

#[cfg(test)]
mod tests;
