//! RocksDB layout and openraft storage (log + state machine).
//!
//! One RocksDB instance per node, with column families:
//! - `meta`: Raft metadata (vote, committed, last purged) and the store's
//!   format version;
//! - `logs`: Raft log entries keyed by big-endian index;
//! - `sm_meta`: state-machine metadata (last applied, membership, id
//!   counters) and the metadata of the last snapshot built or installed
//!   (a snapshot's bytes are never stored: see [`crate::snapshot_data`]);
//! - `sm_jobs`, `sm_hosts`, `sm_requests`: the state machine's tables.
//!
//! Every write that openraft relies on for durability is a `WriteBatch`
//! written with a synced WAL (`WriteOptions::set_sync(true)`) —
//! truncations, purges, votes and snapshot installs; a follower's log
//! appends too — or, for a leader's log appends, written and then synced
//! by the store's WAL thread before openraft is told they are durable
//! (`store/wal_sync`). A `kill -9` or a power loss
//! therefore never loses what was acknowledged, and a batch is either
//! wholly there or not at all.
//!
//! An apply batch is written to the same WAL without its own fsync (as
//! etcd's backend commits without one): it is derived data. Every column
//! family shares the one WAL, so the next synced write (the next log
//! append, at the latest) makes it durable along with everything before it;
//! a power loss in between leaves the state machine at an earlier, whole
//! apply batch (its `last_applied` is in the batch), and openraft re-applies
//! the committed entries after it from the log at startup
//! (`get_initial_state`), as it does after any crash. A `kill -9` loses
//! nothing at all: an unsynced write is in the kernel once `write` returns.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader, RaftSnapshotBuilder,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};

use crate::snapshot_data::{self, SnapshotData};

/// A RocksDB snapshot of the store: reads as of one sequence number.
pub(crate) type RocksSnapshot<'a> = rocksdb::SnapshotWithThreadMode<'a, DB>;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use crate::apply_entry::{apply_entry, AppliedMeta};
use crate::backup::Backup;
use crate::codec::CodecError;
use crate::error::StoreError;
use crate::{NodeId, TypeConfig};
use berth_state::command::{Command, Response};
use berth_state::{Counters, Dirty, SharedState, SmData, SmState};

/// Version of the on-disk layout: every value MessagePack with field names
/// ([`crate::codec`]), except the format version itself, which is JSON so
/// that any berthd reads it; a snapshot's metadata only under
/// `sm_meta/snapshot_meta` (its bytes are serialized from the tables when a
/// follower needs them). A store of any other version, older or newer, is
/// refused at open: formats may change before 1.0, and no format before
/// this one was released, so none is migrated.
pub const FORMAT_VERSION: u32 = 4;

pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_LOGS: &str = "logs";
pub(crate) const CF_SM_META: &str = "sm_meta";
pub(crate) const CF_SM_JOBS: &str = "sm_jobs";
pub(crate) const CF_SM_HOSTS: &str = "sm_hosts";
pub(crate) const CF_SM_REQUESTS: &str = "sm_requests";
pub(crate) const ALL_CFS: [&str; 6] = [
    CF_META,
    CF_LOGS,
    CF_SM_META,
    CF_SM_JOBS,
    CF_SM_HOSTS,
    CF_SM_REQUESTS,
];
/// RocksDB's own column family, present in every RocksDB; Berth keeps
/// nothing in it.
const CF_DEFAULT: &str = "default";

pub(crate) const KEY_FORMAT: &[u8] = b"format_version";
pub(crate) const KEY_VOTE: &[u8] = b"vote";
pub(crate) const KEY_COMMITTED: &[u8] = b"committed";
pub(crate) const KEY_LAST_PURGED: &[u8] = b"last_purged";
pub(crate) const KEY_LAST_APPLIED: &[u8] = b"last_applied";
pub(crate) const KEY_MEMBERSHIP: &[u8] = b"membership";
pub(crate) const KEY_COUNTERS: &[u8] = b"counters";
/// The policy tables (QOS, accounts, users, partitions): small, so one
/// value rewritten with each batch.
pub(crate) const KEY_POLICY: &[u8] = b"policy";
/// Decayed usage for fair share: one value, like the policy.
pub(crate) const KEY_USAGE: &[u8] = b"usage";
pub(crate) const KEY_SNAPSHOT_META: &[u8] = b"snapshot_meta";

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
///
/// Refuses, without changing anything, a path that is a file, a directory
/// that holds something other than a Berth store, a store of any format
/// but [`FORMAT_VERSION`], and a store that is damaged (RocksDB's own files, a
/// missing column family or format version, metadata that does not
/// decode).
pub fn open(path: &Path) -> Result<StoreHandles, StoreError> {
    if path.exists() && !path.is_dir() {
        return Err(StoreError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    if !path.join("CURRENT").exists() {
        if dir_has_entries(path) {
            return Err(StoreError::Foreign {
                path: path.to_path_buf(),
            });
        }
        create(path)?;
    }
    refuse_foreign_or_incomplete(path)?;
    // No create_missing_column_families: an existing store has them all
    // (checked above), and RocksDB must never add them to a store that
    // lost them, which would look like an empty store.
    let db = DB::open_cf_descriptors(&db_options(), path, cf_descriptors())
        .map_err(|e| open_error(path, e))?;
    let db = Arc::new(db);
    check_format(&db, path)?;
    check_raft_meta(&db, path)?;

    let (applied_meta, data) = load_state(&db, path)?;
    let applied_index = applied_meta.last_applied.map(|l| l.index).unwrap_or(0);
    let mut loaded = SmState::from_data(data);
    loaded.set_applied_index(applied_index);
    let state: SharedState = Arc::new(RwLock::new(loaded));
    let (applied_tx, applied) = watch::channel(applied_index);
    let syncer =
        wal_sync::WalSyncer::start(db.clone()).map_err(|source| StoreError::StoreThread {
            path: path.to_path_buf(),
            thread: "WAL sync",
            source,
        })?;
    Ok(StoreHandles {
        log: LogStore {
            db: db.clone(),
            recent: Arc::default(),
            syncer: Arc::new(syncer),
            local_node: Arc::default(),
        },
        state_machine: StateMachineStore {
            db,
            state: state.clone(),
            applied_meta,
            applied_tx: Arc::new(applied_tx),
            snapshot_lock: Arc::new(Mutex::new(())),
        },
        state,
        applied,
    })
}

/// Column family options. Records repeat their field names, which LZ4
/// shrinks several fold for little CPU; table files written before this
/// setting stay readable (compression is recorded per block).
pub(crate) fn cf_options(name: &str) -> Options {
    let mut opts = Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    if name == CF_SM_REQUESTS {
        // Request ids arrive in no order (UUIDs from the CLI), and each
        // submit also deletes the id of the job leaving the retained
        // window, elsewhere in the key order: in a skip list every such
        // insert is a search from the top. A vector memtable appends
        // and sorts once, when it is flushed or read; the ids live in
        // memory, so this column family is read only at open, for a
        // snapshot and by `store check`.
        opts.set_memtable_factory(rocksdb::MemtableFactory::Vector);
    }
    opts
}

/// Every column family with its options, to open a store with.
pub(crate) fn cf_descriptors() -> impl Iterator<Item = ColumnFamilyDescriptor> {
    ALL_CFS
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, cf_options(name)))
}

/// Database options every open of a store uses. A vector memtable
/// (`cf_options`) takes no concurrent inserts, and a node's writes come
/// from one task at a time anyway.
pub(crate) fn db_options() -> Options {
    let mut opts = Options::default();
    opts.set_allow_concurrent_memtable_write(false);
    opts
}

fn dir_has_entries(path: &Path) -> bool {
    std::fs::read_dir(path)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Where a store is built before it is renamed into place.
fn staging_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".creating");
    path.with_file_name(name)
}

/// Creates a new store atomically: RocksDB, every column family and the
/// format version are made in a staging directory, which is then renamed
/// onto `path` (replacing it if it is an empty directory). A crash leaves
/// either no store or a whole one, never a RocksDB without its column
/// families or format version, which open could not tell from a damaged
/// store.
fn create(path: &Path) -> Result<(), StoreError> {
    let io = |source: std::io::Error| StoreError::Create {
        path: path.to_path_buf(),
        source,
    };
    let staging = staging_path(path);
    if staging.exists() {
        // Left by a crash during an earlier creation; it never held data
        // (it is renamed into place before any is written).
        std::fs::remove_dir_all(&staging).map_err(io)?;
    }
    // A bare relative name ("raft") has the empty path as its parent.
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io)?;
    {
        let mut opts = db_options();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let db = DB::open_cf_descriptors(&opts, &staging, cf_descriptors())
            .map_err(|e| open_error(&staging, e))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(cf(&db, CF_META), KEY_FORMAT, encode_format(FORMAT_VERSION)?);
        db.write_opt(batch, &synced())?;
    }
    std::fs::rename(&staging, path).map_err(io)?;
    // The rename is durable once the parent directory is synced.
    std::fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(io)?;
    Ok(())
}

/// An existing RocksDB is opened read-write only when it has exactly
/// Berth's column families. One with none of them is someone else's; one
/// with only some is a Berth store whose RocksDB metadata is damaged.
fn refuse_foreign_or_incomplete(path: &Path) -> Result<(), StoreError> {
    let names = DB::list_cf(&Options::default(), path).map_err(|e| open_error(path, e))?;
    let ours = |n: &str| ALL_CFS.contains(&n);
    if names.iter().any(|n| n != CF_DEFAULT && !ours(n)) || !names.iter().any(|n| ours(n)) {
        return Err(StoreError::ForeignRocksDb {
            path: path.to_path_buf(),
        });
    }
    let missing: Vec<&str> = ALL_CFS
        .iter()
        .copied()
        .filter(|n| !names.iter().any(|m| m == n))
        .collect();
    if !missing.is_empty() {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("column families {} are missing", missing.join(", ")),
        });
    }
    Ok(())
}

/// RocksDB reports damaged files (a garbled CURRENT or MANIFEST, a bad
/// checksum) as corruption; say so in words rather than as an open failure.
pub(crate) fn open_error(path: &Path, source: rocksdb::Error) -> StoreError {
    match source.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("RocksDB cannot read its own files: {source}"),
        },
        _ => StoreError::Open {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// Refuses a store of any format but [`FORMAT_VERSION`], before anything
/// else of it is read (its values may be in another encoding).
fn check_format(db: &DB, path: &Path) -> Result<(), StoreError> {
    match read_format(db, path)? {
        FORMAT_VERSION => Ok(()),
        found => Err(StoreError::UnsupportedFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        }),
    }
}

/// The format version the store records. Stores are created with it (see
/// `create`), so one without it is damaged.
fn read_format(db: &DB, path: &Path) -> Result<u32, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let bytes = db
        .get_cf(cf(db, CF_META), KEY_FORMAT)?
        .ok_or_else(|| corrupt("the format version (meta/format_version) is missing".into()))?;
    serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("format version unreadable: {e}")))
}

/// Decodes the Raft metadata and the last log entry, so a damaged store is
/// refused at open with a message that names what is damaged, instead of
/// failing later inside openraft.
fn check_raft_meta(db: &DB, path: &Path) -> Result<(), StoreError> {
    let corrupt = |what: &str, e: &dyn std::fmt::Display| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("{what} does not decode: {e}"),
    };
    let meta = cf(db, CF_META);
    if let Some(v) = db.get_cf(meta, KEY_VOTE)? {
        decode::<Vote<NodeId>>(&v).map_err(|e| corrupt("the vote", &e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_COMMITTED)? {
        decode::<Option<LogId<NodeId>>>(&v).map_err(|e| corrupt("the committed log id", &e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_LAST_PURGED)? {
        decode::<LogId<NodeId>>(&v).map_err(|e| corrupt("the last purged log id", &e))?;
    }
    if let Some(item) = db.iterator_cf(cf(db, CF_LOGS), IteratorMode::End).next() {
        let (key, value) = item?;
        let index = key_to_index(&key).map_err(|e| corrupt("the last log key", &e))?;
        let entry: Entry<TypeConfig> =
            decode(&value).map_err(|e| corrupt(&format!("log entry {index}"), &e))?;
        if entry.log_id.index != index {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!(
                    "log entry {} is stored under index {index}",
                    entry.log_id.index
                ),
            });
        }
    }
    Ok(())
}

fn load_state(db: &DB, path: &Path) -> Result<(AppliedMeta, SmData), StoreError> {
    let corrupt = |what: &str, e: CodecError| StoreError::Corrupt {
        path: path.to_path_buf(),
        detail: format!("{what}: {e}"),
    };
    let meta = cf(db, CF_SM_META);
    let mut data = SmData::default();
    let mut applied = AppliedMeta::default();
    if let Some(v) = db.get_cf(meta, KEY_LAST_APPLIED)? {
        applied.last_applied = decode(&v).map_err(|e| corrupt("last applied", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_MEMBERSHIP)? {
        applied.membership = decode(&v).map_err(|e| corrupt("membership", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_COUNTERS)? {
        data.counters = decode::<Counters>(&v).map_err(|e| corrupt("counters", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_POLICY)? {
        data.policy = decode(&v).map_err(|e| corrupt("policy", e))?;
    }
    if let Some(v) = db.get_cf(meta, KEY_USAGE)? {
        data.usage = decode(&v).map_err(|e| corrupt("usage", e))?;
    }
    for item in db.iterator_cf(cf(db, CF_SM_JOBS), IteratorMode::Start) {
        let (_, v) = item?;
        let record: berth_state::JobRecord = decode(&v).map_err(|e| corrupt("job", e))?;
        data.jobs.insert(record.job.id, record);
    }
    for item in db.iterator_cf(cf(db, CF_SM_HOSTS), IteratorMode::Start) {
        let (_, v) = item?;
        let record: berth_state::HostRecord = decode(&v).map_err(|e| corrupt("host", e))?;
        data.hosts.insert(record.name.clone(), record);
    }
    for item in db.iterator_cf(cf(db, CF_SM_REQUESTS), IteratorMode::Start) {
        let (k, v) = item?;
        let job_id: u64 = decode(&v).map_err(|e| corrupt("request id", e))?;
        data.request_ids
            .insert(String::from_utf8_lossy(&k).into_owned(), job_id);
    }
    Ok((applied, data))
}

/// Every handle passed here comes from a DB opened with all of
/// [`ALL_CFS`] (a store missing one is refused before it is opened), so a
/// missing one is a programming error, not an input error.
pub(crate) fn cf<'a>(db: &'a DB, name: &str) -> &'a rocksdb::ColumnFamily {
    db.cf_handle(name)
        .unwrap_or_else(|| panic!("column family {name} is created at open"))
}

pub(crate) fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// Decodes a stored value (format 4: MessagePack, [`crate::codec`]).
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    crate::codec::from_slice(bytes)
}

/// Encodes a value to store (format 4: MessagePack, [`crate::codec`]).
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    crate::codec::to_vec(value)
}

/// The format version as every format stores it: JSON, so any berthd reads
/// it and refuses a format other than its own by name.
pub(crate) fn encode_format(format: u32) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&format)
}

/// The Raft log and Raft metadata.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    /// The newest entries as appended, shared by every clone (openraft's
    /// log readers): see [`recent`].
    recent: Arc<Mutex<recent::RecentEntries>>,
    /// Makes [`RaftLogStorage::append`]'s batches durable and tells
    /// openraft: see [`wal_sync`].
    syncer: Arc<wal_sync::WalSyncer>,
    /// This node's id once the node has said it ([`LogStore::set_local_node`]):
    /// how `append` tells entries it leads from entries it follows.
    local_node: Arc<std::sync::OnceLock<NodeId>>,
}

impl LogStore {
    /// Writes `entries` as one `WriteBatch` with a synced WAL. Public for
    /// tools and benchmarks, which cannot build openraft's callback;
    /// [`RaftLogStorage::append`] writes the same batch unsynced and has
    /// it synced off openraft's task ([`wal_sync`]).
    pub fn append_durable<I>(&self, entries: I) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        self.append_with(entries, &synced())
    }

    /// Tells the store which node it belongs to, so that `append` can sync
    /// a follower's entries in place (see there). Only the first call
    /// counts; a store never told keeps every append on the WAL thread.
    pub fn set_local_node(&self, id: NodeId) {
        let _ = self.local_node.set(id);
    }

    /// Whether `entry` was made by another node's leadership: entries a
    /// follower appends.
    fn made_elsewhere(&self, entry: &Entry<TypeConfig>) -> bool {
        self.local_node
            .get()
            .is_some_and(|local| entry.log_id.leader_id.node_id != *local)
    }

    /// Writes `entries` as one `WriteBatch` with `options`, then keeps them
    /// among the recent entries.
    fn append_with<I>(&self, entries: I, options: &WriteOptions) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        let logs = cf(&self.db, CF_LOGS);
        let mut batch = WriteBatch::default();
        let mut written = Vec::new();
        for entry in entries {
            let bytes = encode(&entry)?;
            batch.put_cf(logs, index_key(entry.log_id.index), &bytes);
            written.push((entry, bytes.len()));
        }
        self.db.write_opt(batch, options)?;
        let mut recent = self.recent();
        for (entry, size) in written {
            recent.push(entry, size);
        }
        Ok(())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, recent::RecentEntries> {
        // Entries pushed whole or not at all: a panic elsewhere leaves it
        // consistent.
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

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
        let end = match range.end_bound() {
            Bound::Included(x) => Some(x.saturating_add(1)),
            Bound::Excluded(x) => Some(*x),
            Bound::Unbounded => None,
        };
        if let Some(entries) = end.and_then(|end| self.recent().get(start, end)) {
            return Ok(entries);
        }
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
            let entry: Entry<TypeConfig> =
                decode(&value).map_err(|e| StorageIOError::read_logs(&e))?;
            if entry.log_id.index != index {
                let err = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "log entry {} is stored under index {index}",
                        entry.log_id.index
                    ),
                );
                return Err(StorageIOError::read_logs(&err).into());
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

pub(crate) fn key_to_index(key: &[u8]) -> Result<u64, std::io::Error> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "log key is not 8 bytes")
    })?;
    Ok(u64::from_be_bytes(bytes))
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last = self
            .db
            .iterator_cf(cf(&self.db, CF_LOGS), IteratorMode::End)
            .next();
        let last_log_id = match last {
            None => None,
            Some(item) => {
                let (_, value) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                let entry: Entry<TypeConfig> =
                    decode(&value).map_err(|e| StorageIOError::read_logs(&e))?;
                Some(entry.log_id)
            }
        };
        let last_purged_log_id: Option<LogId<NodeId>> = self
            .get_meta(KEY_LAST_PURGED)
            .map_err(|e| StorageIOError::read_logs(&e))?;
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
        self.get_meta(KEY_VOTE)
            .map_err(|e| StorageIOError::read_vote(&e).into())
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
        let committed: Option<Option<LogId<NodeId>>> = self
            .get_meta(KEY_COMMITTED)
            .map_err(|e| StorageIOError::read(&e))?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Written now and synced before openraft is told: an acknowledged
        // entry survives kill -9 and power loss. openraft 0.9's core waits
        // for the callback before it does anything else (a leader, before
        // it sends the entries to the followers), so where the fsync runs
        // decides only what else the node's runtime can do meanwhile. A
        // leader's WAL thread syncs, leaving the runtime to the requests
        // that make the next entry. A follower's runtime has little else
        // to do (clients' writes it forwards wait up to one fsync when it
        // has a single runtime thread), so it syncs in place: two thread
        // hand-offs fewer per entry (to the WAL thread and back), a fifth
        // of a follower's CPU per entry in a submit storm (BENCHMARKS.md).
        let mut entries = entries.into_iter().peekable();
        let following = entries.peek().is_some_and(|e| self.made_elsewhere(e));
        let options = if following {
            synced()
        } else {
            WriteOptions::default()
        };
        if let Err(e) = self.append_with(entries, &options) {
            callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            return Err(StorageIOError::write_logs(&e).into());
        }
        if following {
            callback.log_io_completed(Ok(()));
        } else {
            self.syncer.after_sync(callback);
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        // Forgotten first: no read may be answered with an entry the log
        // is losing.
        self.recent().truncate(log_id.index);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            cf(&self.db, CF_LOGS),
            index_key(log_id.index),
            index_key(u64::MAX),
        );
        // delete_range's end is exclusive; u64::MAX is never a real index.
        self.db
            .write_opt(batch, &synced())
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        self.recent().purge(log_id.index);
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

/// The state machine: applies committed entries to the shared in-memory
/// state and persists what each batch changed.
#[derive(Clone)]
pub struct StateMachineStore {
    db: Arc<DB>,
    state: SharedState,
    /// Where `state` stands in the log; changed only by apply and install
    /// (a snapshot builder's clone never reads it).
    applied_meta: AppliedMeta,
    applied_tx: Arc<watch::Sender<u64>>,
    /// Serializes replacing the stored snapshot, so a build that finishes
    /// after an install never overwrites the newer installed snapshot.
    snapshot_lock: Arc<Mutex<()>>,
}

/// Whether applying `command` may change the policy tables or the usage
/// record. Only those commands make an apply batch rewrite them (they are
/// encoded whole), so a batch of submits writes just its jobs, request ids
/// and counters. A submit only reads the policy (to resolve its account,
/// QOS and partition); any other command, including any added later, is
/// assumed to change both.
fn may_change_policy(command: &Command) -> bool {
    match command {
        Command::SubmitJob { .. } => false,
        Command::Batch { commands } => commands.iter().any(may_change_policy),
        _ => true,
    }
}

impl StateMachineStore {
    /// Writes what an apply batch changed, with the state-machine metadata,
    /// as one batch, not fsynced on its own (see the module documentation:
    /// the log it was applied from is, and the next synced write syncs it).
    /// `policy_changed`: the policy tables and usage are rewritten too (see
    /// [`may_change_policy`]).
    fn persist(
        &self,
        state: &SmState,
        dirty: &Dirty,
        policy_changed: bool,
    ) -> Result<(), StoreError> {
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
        write_sm_meta(
            &mut batch,
            &self.db,
            &self.applied_meta,
            &state.data,
            policy_changed,
        )?;
        self.db.write_opt(batch, &WriteOptions::default())?;
        Ok(())
    }

    /// A backup of the applied state (`berth admin backup`): the same bytes
    /// a Raft snapshot built now would carry, from one RocksDB snapshot, so
    /// it is the state after exactly one apply batch. Takes no lock; apply
    /// goes on meanwhile. Blocking: run it off the async threads.
    pub fn backup(&self, created_ms: u64) -> Result<Backup, StoreError> {
        let state = serialize_state(&self.db)?;
        Ok(Backup::new(
            state.last_applied,
            state.membership,
            created_ms,
            state.jobs,
            state.hosts,
            state.bytes,
        ))
    }

    /// Where the state stands in the log: the last entry applied and the
    /// membership it holds.
    pub fn applied_meta(&self) -> &AppliedMeta {
        &self.applied_meta
    }
}

/// The state's write lock. A poisoned lock means a panic mid-apply; the
/// state may be half changed and must not be served.
fn write_lock(state: &SharedState) -> std::sync::RwLockWriteGuard<'_, SmState> {
    state
        .write()
        .unwrap_or_else(|_| panic!("state machine lock poisoned"))
}

/// Puts the state-machine metadata into `batch`; the policy tables and
/// usage only when `with_policy` (they are unchanged otherwise, and are
/// the largest of these values).
fn write_sm_meta(
    batch: &mut WriteBatch,
    db: &DB,
    applied: &AppliedMeta,
    data: &SmData,
    with_policy: bool,
) -> Result<(), StoreError> {
    let meta = cf(db, CF_SM_META);
    batch.put_cf(meta, KEY_LAST_APPLIED, encode(&applied.last_applied)?);
    batch.put_cf(meta, KEY_MEMBERSHIP, encode(&applied.membership)?);
    batch.put_cf(meta, KEY_COUNTERS, encode(&data.counters)?);
    if with_policy {
        batch.put_cf(meta, KEY_POLICY, encode(&data.policy)?);
        batch.put_cf(meta, KEY_USAGE, encode(&data.usage)?);
    }
    Ok(())
}

/// Serializes the state machine as the JSON of [`SmData`] from one RocksDB
/// snapshot: sm_meta and every table are read at the same sequence number,
/// and each apply batch is one `WriteBatch`, so the result is the state
/// after exactly one apply batch. No lock is taken: apply goes on while this
/// runs. Records are stored as MessagePack and written out as JSON (the
/// snapshot's encoding).
pub(crate) fn serialize_state(db: &DB) -> Result<SerializedState, StoreError> {
    serialize_state_at(db, &db.snapshot())
}

/// The state machine's [`AppliedMeta`] as of `snap`.
pub(crate) fn read_applied_at(
    db: &DB,
    snap: &RocksSnapshot<'_>,
) -> Result<AppliedMeta, StoreError> {
    let sm_meta = cf(db, CF_SM_META);
    let last_applied: Option<LogId<NodeId>> = match snap.get_cf(sm_meta, KEY_LAST_APPLIED)? {
        Some(v) => decode(&v)?,
        None => None,
    };
    let membership: StoredMembership<NodeId, BasicNode> =
        match snap.get_cf(sm_meta, KEY_MEMBERSHIP)? {
            Some(v) => decode(&v)?,
            None => StoredMembership::default(),
        };
    Ok(AppliedMeta {
        last_applied,
        membership,
    })
}

/// [`serialize_state`] as of `snap`, a RocksDB snapshot of `db`.
pub(crate) fn serialize_state_at(
    db: &DB,
    snap: &RocksSnapshot<'_>,
) -> Result<SerializedState, StoreError> {
    let sm_meta = cf(db, CF_SM_META);
    let get = |key: &[u8]| snap.get_cf(sm_meta, key);
    let AppliedMeta {
        last_applied,
        membership,
    } = read_applied_at(db, snap)?;
    let counters: Counters = match get(KEY_COUNTERS)? {
        Some(v) => decode(&v)?,
        None => Counters::default(),
    };
    let policy: berth_state::policy::PolicyTables = match get(KEY_POLICY)? {
        Some(v) => decode(&v)?,
        None => Default::default(),
    };
    let usage: berth_state::policy::UsageState = match get(KEY_USAGE)? {
        Some(v) => decode(&v)?,
        None => Default::default(),
    };

    let mut rows = [0u64; 3];
    let mut out: Vec<u8> = Vec::new();
    out.extend_from_slice(b"{\"last_applied\":");
    serde_json::to_writer(&mut out, &last_applied)?;
    out.extend_from_slice(b",\"last_membership\":");
    serde_json::to_writer(&mut out, &membership)?;
    out.extend_from_slice(b",\"counters\":");
    serde_json::to_writer(&mut out, &counters)?;
    out.extend_from_slice(b",\"policy\":");
    serde_json::to_writer(&mut out, &policy)?;
    out.extend_from_slice(b",\"usage\":");
    serde_json::to_writer(&mut out, &usage)?;
    for (n, (field, table)) in [
        ("jobs", CF_SM_JOBS),
        ("hosts", CF_SM_HOSTS),
        ("request_ids", CF_SM_REQUESTS),
    ]
    .into_iter()
    .enumerate()
    {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\":{");
        let mut first = true;
        for item in snap.iterator_cf(cf(db, table), IteratorMode::Start) {
            let (key, value) = item?;
            if !first {
                out.push(b',');
            }
            first = false;
            // JSON object keys are strings: job ids as their decimal digits
            // (what serde_json writes for a u64-keyed map), names escaped.
            if table == CF_SM_JOBS {
                let id =
                    key_to_index(&key).map_err(|e| StoreError::Json(serde_json::Error::io(e)))?;
                out.push(b'"');
                out.extend_from_slice(id.to_string().as_bytes());
                out.push(b'"');
            } else {
                let name = std::str::from_utf8(&key).map_err(|e| {
                    StoreError::Json(serde_json::Error::io(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{field} key is not UTF-8: {e}"),
                    )))
                })?;
                serde_json::to_writer(&mut out, name)?;
            }
            out.push(b':');
            // Stored as MessagePack; a snapshot carries JSON, which every
            // version reads.
            match table {
                CF_SM_JOBS => {
                    serde_json::to_writer(&mut out, &decode::<berth_state::JobRecord>(&value)?)?
                }
                CF_SM_HOSTS => {
                    serde_json::to_writer(&mut out, &decode::<berth_state::HostRecord>(&value)?)?
                }
                _ => serde_json::to_writer(&mut out, &decode::<u64>(&value)?)?,
            }
            rows[n] += 1;
        }
        out.push(b'}');
    }
    out.push(b'}');
    Ok(SerializedState {
        bytes: out,
        last_applied,
        membership,
        jobs: rows[0],
        hosts: rows[1],
    })
}

/// A state serialized by [`serialize_state`].
pub(crate) struct SerializedState {
    pub bytes: Vec<u8>,
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// Rows of `sm_jobs` and `sm_hosts` serialized.
    pub jobs: u64,
    pub hosts: u64,
}

fn snapshot_id(last_applied: Option<LogId<NodeId>>) -> String {
    match last_applied {
        Some(l) => format!("{}-{}", l.leader_id, l.index),
        None => "empty".to_string(),
    }
}

/// Reads the stored snapshot's metadata.
fn stored_snapshot_meta(db: &DB) -> Result<Option<SnapshotMeta<NodeId, BasicNode>>, StoreError> {
    match db.get_cf(cf(db, CF_SM_META), KEY_SNAPSHOT_META)? {
        Some(v) => Ok(Some(decode(&v)?)),
        None => Ok(None),
    }
}

/// The state as of now, pinned, as a snapshot: its metadata read now, its
/// bytes made when first read (see [`crate::snapshot_data`]).
fn pinned_snapshot(db: &Arc<DB>) -> Result<Snapshot<TypeConfig>, StoreError> {
    let (pinned_meta, pinned) = snapshot_data::pin(db.clone())?;
    Ok(Snapshot {
        meta: SnapshotMeta {
            last_log_id: pinned_meta.last_applied,
            last_membership: pinned_meta.membership,
            snapshot_id: snapshot_id(pinned_meta.last_applied),
        },
        snapshot: Box::new(SnapshotData::pinned(pinned)),
    })
}

/// Builds a snapshot: pins the state as it is and records its metadata as
/// the current snapshot's, unless a newer one (installed meanwhile) is
/// recorded already. The record is a synced write: openraft purges the
/// log up to the snapshot next, and the sync makes every apply batch up to
/// it durable first (they share the WAL). Blocking: run off the async
/// threads.
fn build_snapshot_now(
    db: &Arc<DB>,
    snapshot_lock: &Mutex<()>,
) -> Result<Snapshot<TypeConfig>, StoreError> {
    let started = std::time::Instant::now();
    let snapshot = pinned_snapshot(db)?;
    // A poisoned lock only means another snapshot write panicked; the
    // stored metadata is one value, whole either way.
    let _guard = snapshot_lock.lock().unwrap_or_else(|p| p.into_inner());
    let newer_stored =
        stored_snapshot_meta(db)?.is_some_and(|m| m.last_log_id > snapshot.meta.last_log_id);
    if !newer_stored {
        let mut batch = WriteBatch::default();
        batch.put_cf(
            cf(db, CF_SM_META),
            KEY_SNAPSHOT_META,
            encode(&snapshot.meta)?,
        );
        db.write_opt(batch, &synced())?;
    }
    tracing::info!(
        snapshot_id = %snapshot.meta.snapshot_id,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "snapshot built"
    );
    Ok(snapshot)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let db = self.db.clone();
        let lock = self.snapshot_lock.clone();
        // A thread start and a synced write: quick, but blocking.
        let built = tokio::task::spawn_blocking(move || build_snapshot_now(&db, &lock))
            .await
            .map_err(|e| {
                StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string()))
            })?;
        built.map_err(|e| StorageIOError::write_snapshot(None, &e).into())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        Ok((
            self.applied_meta.last_applied,
            self.applied_meta.membership.clone(),
        ))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        let mut dirty = Dirty::default();
        let mut policy_changed = false;
        let applied_index;
        {
            let mut state = write_lock(&self.state);
            for entry in entries {
                if let EntryPayload::Normal(request) = &entry.payload {
                    policy_changed |= may_change_policy(&request.command);
                }
                let response = apply_entry(
                    &mut state,
                    &mut self.applied_meta,
                    entry.log_id,
                    &entry.payload,
                    &mut dirty,
                )
                .map_err(|e| StorageIOError::apply(entry.log_id, &e))?;
                responses.push(response);
            }
            self.persist(&state, &dirty, policy_changed)
                .map_err(|e| StorageIOError::write_state_machine(&e))?;
            applied_index = state.applied_index();
        }
        self.applied_tx.send_replace(applied_index);
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<SnapshotData>> {
        Ok(Box::new(SnapshotData::from_bytes(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<SnapshotData>,
    ) -> StorageResult<()> {
        let started = std::time::Instant::now();
        let signature = Some(meta.signature());
        let bytes = snapshot
            .into_bytes()
            .await
            .map_err(|e| StorageIOError::read_snapshot(signature.clone(), &e))?;
        let bytes_len = bytes.len();
        let data: SmData = serde_json::from_slice(&bytes)
            .map_err(|e| StorageIOError::read_snapshot(signature.clone(), &e))?;
        let applied = AppliedMeta {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };

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
                batch.put_cf(
                    cf(&self.db, CF_SM_REQUESTS),
                    request_id.as_bytes(),
                    encode(job_id)?,
                );
            }
            write_sm_meta(batch, &self.db, &applied, &data, true)?;
            batch.put_cf(cf(&self.db, CF_SM_META), KEY_SNAPSHOT_META, encode(meta)?);
            Ok(())
        };
        fill(&mut batch).map_err(to_io)?;
        {
            let _guard = self.snapshot_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.db
                .write_opt(batch, &synced())
                .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        }
        // The state is durable in the synced WAL already; flushing it into
        // tables keeps a restart from replaying a WAL that holds the whole
        // state (16 s instead of 4 s at 1,000,000 jobs). A failed flush
        // loses nothing, so it is logged, not returned.
        for name in [CF_SM_JOBS, CF_SM_HOSTS, CF_SM_REQUESTS, CF_SM_META] {
            if let Err(e) = self.db.flush_cf(cf(&self.db, name)) {
                tracing::warn!(table = name, error = %e, "flush after snapshot install failed");
            }
        }
        let jobs = data.jobs.len();
        let applied_index = {
            let mut state = write_lock(&self.state);
            *state = SmState::from_data(data);
            state.set_applied_index(applied.last_applied.map_or(0, |l| l.index));
            self.applied_meta = applied;
            state.applied_index()
        };
        self.applied_tx.send_replace(applied_index);
        // Read by operators and by `berth-drill snapshot-transfer`, which
        // reports install times from this line.
        tracing::info!(
            snapshot_id = %meta.snapshot_id,
            jobs,
            bytes = bytes_len,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "snapshot installed"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        // Until a snapshot is built or installed there is none, and
        // openraft keeps the whole log. After that, the current snapshot
        // is the state as it is now, pinned: at or past the recorded one,
        // and always whole, since the tables hold the state after exactly
        // one apply batch.
        let current = || -> Result<Option<Snapshot<TypeConfig>>, StoreError> {
            if stored_snapshot_meta(&self.db)?.is_none() {
                return Ok(None);
            }
            pinned_snapshot(&self.db).map(Some)
        };
        current().map_err(|e| StorageIOError::read_snapshot(None, &e).into())
    }
}

/// Where a node keeps its store under its data directory.
pub fn store_path(data_dir: &Path) -> PathBuf {
    data_dir.join("raft")
}

mod recent;
mod wal_sync;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod policy_persist_tests;
