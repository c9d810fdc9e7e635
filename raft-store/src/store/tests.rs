//! openraft's storage conformance suite against the RocksDB store, and the
//! store's own open/recovery checks.

use openraft::testing::{StoreBuilder, Suite};
use std::collections::BTreeMap;

use openraft::StorageError;
use tempfile::TempDir;

use super::*;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(&e))?;
        let handles = open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, handles.log, handles.state_machine))
    }
}

#[test]
fn openraft_storage_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(Builder)?;
    Ok(())
}

/// A store told it is a node that leads none of the suite's entries, so
/// every append is a follower's, synced in place.
struct FollowerBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for FollowerBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let (dir, log, sm) = Builder.build().await?;
        log.set_local_node(NodeId::MAX);
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_as_a_follower() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(FollowerBuilder)?;
    Ok(())
}

#[tokio::test]
async fn a_followers_appends_are_synced_in_place_and_a_leaders_by_the_thread() {
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};
    let entry = |index: u64, leader: NodeId| Entry::<TypeConfig> {
        log_id: LogId::new(CommittedLeaderId::new(1, leader), index),
        payload: EntryPayload::Blank,
    };
    let dir = TempDir::new().expect("tempdir");
    let mut log = open(dir.path()).expect("open").log;
    // Not yet told which node it is: every append goes to the thread.
    log.blocking_append([entry(1, 2)]).await.expect("append");
    assert_eq!(log.syncer.handed(), 1);
    log.set_local_node(1);
    // Node 2's entry, appended by follower 1: synced in place.
    log.blocking_append([entry(2, 2)]).await.expect("append");
    assert_eq!(log.syncer.handed(), 1);
    // Its own entries, as leader: the thread.
    log.blocking_append([entry(3, 1), entry(4, 1)])
        .await
        .expect("append");
    assert_eq!(log.syncer.handed(), 2);
    let mut reader = log.get_log_reader().await;
    let read = reader.try_get_log_entries(1..5).await.expect("read");
    assert_eq!(
        read.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
}

#[test]
fn foreign_directory_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "hello").expect("write");
    match open(dir.path()) {
        Err(StoreError::Foreign { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a foreign directory was opened"),
    }
}

/// A store that claims `format`, as a berthd of that format would leave it
/// closed; its other values are whatever this version wrote.
fn store_of_format(dir: &Path, format: u32) {
    let handles = populated(dir, 3);
    let db = handles.log.db.clone();
    db.put_cf(
        cf(&db, CF_META),
        KEY_FORMAT,
        encode_format(format).expect("enc"),
    )
    .expect("put");
}

#[test]
fn a_store_of_another_format_is_refused_naming_both_formats() {
    for found in [FORMAT_VERSION - 1, FORMAT_VERSION + 1, 0, u32::MAX] {
        let dir = TempDir::new().expect("tempdir");
        store_of_format(dir.path(), found);
        let err = match open(dir.path()) {
            Err(e @ StoreError::UnsupportedFormat { .. }) => e,
            Err(e) => panic!("format {found}: wrong error: {e}"),
            Ok(_) => panic!("a store of format {found} was opened"),
        };
        let message = err.to_string();
        for needle in [
            format!(
                "store format {found} at {} is not supported",
                dir.path().display()
            ),
            format!("this berthd reads format {FORMAT_VERSION} only"),
            "formats may change before 1.0".to_string(),
            "restore from a backup".to_string(),
        ] {
            assert!(message.contains(&needle), "format {found}: {message}");
        }
        // Still of its format, and refused by a check as well.
        match crate::check::check(dir.path()) {
            Err(StoreError::UnsupportedFormat {
                found: f,
                supported,
                ..
            }) => {
                assert_eq!((f, supported), (found, FORMAT_VERSION));
            }
            Err(e) => panic!("format {found}: check: wrong error: {e}"),
            Ok(r) => panic!("format {found}: check read the store: {r:?}"),
        }
    }
}

// ---- helpers -------------------------------------------------------------

use berth_scheduler::{Inventory, JobSpec, Placement};
use openraft::{CommittedLeaderId, EntryPayload};

use berth_state::command::{Command, Request};

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(Request::new(command)),
    }
}

fn submit(request_id: &str) -> Command {
    Command::SubmitJob {
        request_id: request_id.into(),
        spec: JobSpec {
            user: "alice".into(),
            command: format!("echo {request_id}"),
            cpus: 1,
            ..JobSpec::default()
        },
        now_ms: 1_000,
    }
}

// The struct update keeps this compiling when the scheduler's Inventory
// gains fields.
#[allow(clippy::needless_update)]
fn register(name: &str) -> Command {
    Command::RegisterHost {
        name: name.into(),
        inventory: Inventory {
            cpus: 8,
            mem_mb: 4096,
            ..Inventory::default()
        },
        agent_restarted: false,
        running_allocs: Vec::new(),
        drain_reason: String::new(),
        step_addr: String::new(),
        now_ms: 5,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A store with a host, `jobs` submitted jobs (in apply batches of 1,000)
/// and two of them placed, and the log entries that made it.
fn populated(dir: &Path, jobs: u64) -> StoreHandles {
    const APPLY_BATCH_ENTRIES: u64 = 1_000;
    let mut handles = open(dir).expect("open");
    let rt = runtime();
    rt.block_on(async {
        let mut index = 1;
        let mut batch = vec![entry(index, register("h1"))];
        for n in 0..jobs {
            index += 1;
            batch.push(entry(index, submit(&format!("req-{n}"))));
            if batch.len() as u64 >= APPLY_BATCH_ENTRIES {
                handles.log.append_durable(batch.clone()).expect("append");
                handles
                    .state_machine
                    .apply(std::mem::take(&mut batch))
                    .await
                    .expect("apply");
            }
        }
        handles.log.append_durable(batch.clone()).expect("append");
        handles
            .state_machine
            .apply(std::mem::take(&mut batch))
            .await
            .expect("apply");
        index += 1;
        let first = handles
            .state
            .read()
            .expect("lock")
            .job(1)
            .map(|r| r.job.spec.per_host());
        if let Some(resources) = first {
            batch.push(entry(
                index,
                Command::ApplyPlan {
                    gang_starts: Vec::new(),
                    snapshot_index: index - 1,
                    now_ms: 2_000,
                    starts: vec![placement(1, "h1", resources)],
                    evictions: Vec::new(),
                    borrowed: Vec::new(),
                },
            ));
        }
        handles.log.append_durable(batch.clone()).expect("append");
        handles.state_machine.apply(batch).await.expect("apply");
    });
    handles
}

/// Built from JSON so these tests do not depend on every field of the
/// scheduler's type (fields added later have serde defaults).
fn placement(job_id: u64, host: &str, resources: berth_scheduler::Resources) -> Placement {
    serde_json::from_value(serde_json::json!({
        "job_id": job_id,
        "host": host,
        "resources": resources,
    }))
    .expect("placement")
}

/// The same data; where each stands in the log is the stores' to compare
/// (`AppliedMeta`).
fn same_state(a: &SmState, b: &SmState) {
    assert_eq!(a.data.counters, b.data.counters);
    assert_eq!(a.data.jobs, b.data.jobs);
    assert_eq!(a.data.hosts, b.data.hosts);
    assert_eq!(a.data.request_ids, b.data.request_ids);
    assert_eq!(
        a.pending_ids().collect::<Vec<_>>(),
        b.pending_ids().collect::<Vec<_>>()
    );
    assert_eq!(
        a.running_ids().collect::<Vec<_>>(),
        b.running_ids().collect::<Vec<_>>()
    );
    let alloc = |s: &SmState| {
        s.hosts()
            .map(|h| (h.name.clone(), h.allocated))
            .collect::<Vec<_>>()
    };
    assert_eq!(alloc(a), alloc(b));
}

fn expect_corrupt(result: Result<StoreHandles, StoreError>, what: &str) -> String {
    match result {
        Err(e @ StoreError::Corrupt { .. }) => e.to_string(),
        Err(e) => panic!("{what}: wrong error: {e}"),
        Ok(_) => panic!("{what}: a damaged store was opened"),
    }
}

// ---- damaged, foreign and odd directories ---------------------------------

#[test]
fn data_dir_that_is_a_file_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    let file = dir.path().join("raft");
    std::fs::write(&file, "not a directory").expect("write");
    match open(&file) {
        Err(StoreError::NotADirectory { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a file was opened as a store"),
    }
}

#[test]
fn garbage_or_empty_current_is_refused() {
    for content in [
        &b""[..],
        &b"MANIFEST-9999"[..],
        &b"\x00\xff garbage \x01"[..],
    ] {
        let dir = TempDir::new().expect("tempdir");
        drop(populated(dir.path(), 3));
        std::fs::write(dir.path().join("CURRENT"), content).expect("write");
        match open(dir.path()) {
            Err(StoreError::Corrupt { .. } | StoreError::Open { .. }) => {}
            Err(e) => panic!("CURRENT {content:?}: wrong error: {e}"),
            Ok(_) => panic!("CURRENT {content:?}: a damaged store was opened"),
        }
    }
}

#[test]
fn truncated_or_garbage_manifest_is_refused() {
    for truncate in [true, false] {
        let dir = TempDir::new().expect("tempdir");
        drop(populated(dir.path(), 3));
        let current = std::fs::read_to_string(dir.path().join("CURRENT")).expect("CURRENT");
        let manifest = dir.path().join(current.trim());
        let len = std::fs::metadata(&manifest).expect("manifest").len();
        if truncate {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&manifest)
                .expect("open manifest");
            f.set_len(len / 3).expect("truncate");
        } else {
            std::fs::write(&manifest, vec![0x5a; len as usize]).expect("write");
        }
        match open(dir.path()) {
            // A manifest cut short may lose the column families' records,
            // and then the store looks like someone else's RocksDB.
            Err(
                StoreError::Corrupt { .. }
                | StoreError::Open { .. }
                | StoreError::ForeignRocksDb { .. },
            ) => {}
            Err(e) => panic!("manifest (truncate={truncate}): wrong error: {e}"),
            Ok(h) => panic!(
                "manifest (truncate={truncate}): a damaged store was opened: {:?} jobs={} cfs={:?}",
                h.state_machine.applied_meta.last_applied,
                h.state.read().expect("lock").data.jobs.len(),
                DB::list_cf(&Options::default(), dir.path())
            ),
        }
    }
}

#[test]
fn undecodable_log_entry_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    {
        let handles = populated(dir.path(), 3);
        let db = handles.log.db.clone();
        db.put_cf(cf(&db, CF_LOGS), index_key(99), b"{not json")
            .expect("put");
    }
    let message = expect_corrupt(open(dir.path()), "bad log entry");
    assert!(message.contains("log entry 99"), "{message}");
}

#[test]
fn log_entry_under_the_wrong_index_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    {
        let handles = populated(dir.path(), 3);
        let db = handles.log.db.clone();
        let moved = encode(&entry(7, submit("x"))).expect("enc");
        db.put_cf(cf(&db, CF_LOGS), index_key(50), moved)
            .expect("put");
    }
    expect_corrupt(open(dir.path()), "misplaced log entry");
}

#[test]
fn undecodable_vote_and_job_are_refused() {
    for (cf_name, key) in [
        (CF_META, KEY_VOTE.to_vec()),
        (CF_SM_JOBS, index_key(2).to_vec()),
    ] {
        let dir = TempDir::new().expect("tempdir");
        {
            let handles = populated(dir.path(), 3);
            let db = handles.log.db.clone();
            db.put_cf(cf(&db, cf_name), &key, b"\x00garbage")
                .expect("put");
        }
        expect_corrupt(open(dir.path()), cf_name);
    }
}

#[test]
fn store_without_its_format_key_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    {
        let handles = populated(dir.path(), 3);
        let db = handles.log.db.clone();
        db.delete_cf(cf(&db, CF_META), KEY_FORMAT).expect("delete");
    }
    let message = expect_corrupt(open(dir.path()), "no format key");
    assert!(message.contains("format version"), "{message}");
}

#[test]
fn foreign_rocksdb_is_refused_and_left_untouched() {
    let dir = TempDir::new().expect("tempdir");
    {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let db = DB::open(&opts, dir.path()).expect("create");
        db.put(b"someone", b"else's data").expect("put");
    }
    match open(dir.path()) {
        Err(StoreError::ForeignRocksDb { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a foreign RocksDB was opened"),
    }
    let names = DB::list_cf(&Options::default(), dir.path()).expect("list");
    assert_eq!(
        names,
        vec!["default".to_string()],
        "the foreign RocksDB was changed"
    );
}

#[test]
fn interrupted_creation_is_started_again() {
    let parent = TempDir::new().expect("tempdir");
    let path = parent.path().join("raft");
    {
        // What a crash during creation leaves: a staging RocksDB with some
        // column families and no format version.
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        DB::open_cf(&opts, staging_path(&path), &ALL_CFS[..3]).expect("create");
    }
    let handles = open(&path).expect("a store whose creation was interrupted opens");
    let db = handles.log.db.clone();
    assert_eq!(stored_format(&db), FORMAT_VERSION);
    assert!(!staging_path(&path).exists());
}

#[test]
fn store_missing_column_families_is_refused_untouched() {
    let dir = TempDir::new().expect("tempdir");
    {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        DB::open_cf(&opts, dir.path(), &ALL_CFS[..3]).expect("create");
    }
    let message = expect_corrupt(open(dir.path()), "missing column families");
    assert!(message.contains("sm_jobs"), "{message}");
    assert_eq!(
        DB::list_cf(&Options::default(), dir.path())
            .expect("list")
            .len(),
        4
    );
}

/// The format version the store records.
fn stored_format(db: &DB) -> u32 {
    serde_json::from_slice(
        &db.get_cf(cf(db, CF_META), KEY_FORMAT)
            .expect("get")
            .expect("format"),
    )
    .expect("dec")
}

// ---- snapshots ------------------------------------------------------------

fn snapshot_round_trip(jobs: u64) {
    let source_dir = TempDir::new().expect("tempdir");
    let target_dir = TempDir::new().expect("tempdir");
    let mut source = populated(source_dir.path(), jobs);
    let rt = runtime();
    let snapshot = rt
        .block_on(source.state_machine.build_snapshot())
        .expect("build");
    assert_eq!(
        snapshot.meta.last_log_id,
        source.state_machine.applied_meta.last_applied
    );
    let current = rt
        .block_on(source.state_machine.get_current_snapshot())
        .expect("read")
        .expect("a snapshot once one is built");
    assert_eq!(
        current.meta, snapshot.meta,
        "nothing applied since the build"
    );
    let current_bytes = rt.block_on(current.snapshot.into_bytes()).expect("bytes");
    let backup = source.state_machine.backup(0).expect("backup");
    assert_eq!(
        current_bytes, backup.data,
        "a snapshot's bytes are a backup's"
    );

    let mut target = open(target_dir.path()).expect("open target");
    rt.block_on(
        target
            .state_machine
            .install_snapshot(&snapshot.meta, snapshot.snapshot),
    )
    .expect("install");
    same_state(
        &source.state.read().expect("lock"),
        &target.state.read().expect("lock"),
    );
    assert_eq!(
        target.state_machine.applied_meta,
        source.state_machine.applied_meta
    );
    drop(target);
    let reopened = open(target_dir.path()).expect("reopen target");
    same_state(
        &source.state.read().expect("lock"),
        &reopened.state.read().expect("lock"),
    );
    assert_eq!(
        reopened.state_machine.applied_meta,
        source.state_machine.applied_meta
    );
    let report = crate::check::check(target_dir.path()).expect("check");
    assert!(report.snapshot.is_some());
    assert_eq!(report.jobs, jobs);
}

#[test]
fn snapshot_installs_into_a_fresh_store() {
    snapshot_round_trip(50);
}

#[test]
fn snapshot_of_100k_jobs_installs() {
    snapshot_round_trip(100_000);
}

#[test]
fn apply_goes_on_while_a_snapshot_is_built() {
    // The build reads a RocksDB snapshot: entries applied after it started
    // are not in it, and the build never holds the state lock.
    let dir = TempDir::new().expect("tempdir");
    let mut handles = populated(dir.path(), 2_000);
    let rt = runtime();
    let before = handles.state_machine.applied_meta.last_applied;
    let guard = handles.state.write().expect("lock");
    // With the state write-locked (as apply holds it), a build completes.
    let snapshot = rt
        .block_on(handles.state_machine.build_snapshot())
        .expect("build");
    drop(guard);
    assert_eq!(snapshot.meta.last_log_id, before);
    let bytes = rt.block_on(snapshot.snapshot.into_bytes()).expect("bytes");
    let data: SmData = serde_json::from_slice(&bytes).expect("decode");
    assert_eq!(data.jobs.len(), 2_000);
}

#[test]
fn a_snapshot_reads_as_of_its_metadata_whatever_is_applied_after() {
    // Its bytes are made when first read; what is applied between the
    // pin and the read must not be in them, or a follower installing them
    // under this metadata would apply those entries twice.
    let dir = TempDir::new().expect("tempdir");
    let mut handles = populated(dir.path(), 20);
    let rt = runtime();
    let snapshot = rt
        .block_on(handles.state_machine.get_current_snapshot())
        .expect("read");
    assert!(snapshot.is_none(), "no snapshot before one is built");
    let built = rt
        .block_on(handles.state_machine.build_snapshot())
        .expect("build");
    let current = rt
        .block_on(handles.state_machine.get_current_snapshot())
        .expect("read")
        .expect("a snapshot");
    let pinned_at = current.meta.last_log_id.expect("applied").index;
    rt.block_on(async {
        let more: Vec<_> = (1..=5)
            .map(|n| entry(pinned_at + n, submit(&format!("later-{n}"))))
            .collect();
        handles.log.append_durable(more.clone()).expect("append");
        handles.state_machine.apply(more).await.expect("apply");
    });
    assert_eq!(handles.state.read().expect("lock").data.jobs.len(), 25);
    for snapshot in [built, current] {
        let bytes = rt.block_on(snapshot.snapshot.into_bytes()).expect("bytes");
        let data: SmData = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(data.jobs.len(), 20);
        let head: SnapshotHead = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(head.last_applied, snapshot.meta.last_log_id);
    }
    // A snapshot asked for now is the newer state, under newer metadata.
    let now = rt
        .block_on(handles.state_machine.get_current_snapshot())
        .expect("read")
        .expect("a snapshot");
    assert_eq!(now.meta.last_log_id.map(|l| l.index), Some(pinned_at + 5));
    let bytes = rt.block_on(now.snapshot.into_bytes()).expect("bytes");
    assert_eq!(
        serde_json::from_slice::<SmData>(&bytes)
            .expect("decode")
            .jobs
            .len(),
        25
    );
}

// ---- store check ----------------------------------------------------------

fn dir_contents(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for item in std::fs::read_dir(path).expect("read_dir") {
        let item = item.expect("entry");
        files.insert(
            item.file_name().to_string_lossy().into_owned(),
            std::fs::read(item.path()).expect("read"),
        );
    }
    files
}

#[test]
fn check_reports_a_good_store_and_changes_nothing() {
    let dir = TempDir::new().expect("tempdir");
    let mut handles = populated(dir.path(), 30);
    runtime()
        .block_on(handles.state_machine.build_snapshot())
        .expect("build");
    drop(handles);
    let before = dir_contents(dir.path());
    let report = crate::check::check(dir.path()).expect("check");
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.format_version, Some(FORMAT_VERSION));
    assert_eq!(report.jobs, 30);
    assert_eq!(report.jobs_by_state.get("RUNNING"), Some(&1));
    assert_eq!(report.jobs_by_state.get("PENDING"), Some(&29));
    assert_eq!(report.hosts, 1);
    assert_eq!(report.request_ids, 30);
    assert_eq!(report.log_entries, 32);
    assert_eq!(report.last_applied.map(|l| l.index), Some(32));
    assert_eq!(
        report.snapshot.as_ref().and_then(|s| s.last_log_id),
        report.last_applied
    );
    assert_eq!(dir_contents(dir.path()), before, "check changed the store");
}

#[test]
fn check_finds_damage() {
    let dir = TempDir::new().expect("tempdir");
    {
        let handles = populated(dir.path(), 10);
        let db = handles.log.db.clone();
        // A gap in the log, a job that does not decode, a request id that
        // names no job, counters behind the ids.
        db.delete_cf(cf(&db, CF_LOGS), index_key(5))
            .expect("delete");
        db.put_cf(cf(&db, CF_SM_JOBS), index_key(3), b"garbage")
            .expect("put");
        db.put_cf(
            cf(&db, CF_SM_REQUESTS),
            b"orphan",
            encode(&999u64).expect("enc"),
        )
        .expect("put");
        let counters = Counters {
            next_job_id: 4,
            next_alloc_id: 1,
        };
        db.put_cf(
            cf(&db, CF_SM_META),
            KEY_COUNTERS,
            encode(&counters).expect("enc"),
        )
        .expect("put");
    }
    let report = crate::check::check(dir.path()).expect("check");
    assert!(!report.is_ok());
    let all = report.problems.join("\n");
    for needle in [
        "gap",
        "job 3 does not decode",
        "orphan",
        "next job id",
        "next allocation id",
    ] {
        assert!(
            all.contains(needle),
            "no problem mentions {needle:?}:\n{all}"
        );
    }
}

#[test]
fn check_refuses_what_is_not_a_store() {
    let dir = TempDir::new().expect("tempdir");
    assert!(matches!(
        crate::check::check(dir.path()),
        Err(StoreError::Missing { .. })
    ));
    let file = dir.path().join("f");
    std::fs::write(&file, "x").expect("write");
    assert!(matches!(
        crate::check::check(&file),
        Err(StoreError::NotADirectory { .. })
    ));
}

#[test]
fn a_pinned_snapshot_is_read_as_openraft_sends_it() {
    // openraft's chunked sender seeks to the end for the length, then
    // seeks to each chunk and reads it; the first seek makes the bytes.
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
    let dir = TempDir::new().expect("tempdir");
    let mut handles = populated(dir.path(), 40);
    let rt = runtime();
    let mut snapshot = rt
        .block_on(handles.state_machine.build_snapshot())
        .expect("build");
    let expected = handles.state_machine.backup(0).expect("backup").data;
    rt.block_on(async {
        let data = &mut snapshot.snapshot;
        let end = data
            .seek(std::io::SeekFrom::End(0))
            .await
            .expect("seek end");
        assert_eq!(end, expected.len() as u64);
        let mut read = Vec::new();
        let chunk_bytes = 1_000;
        let mut offset = 0;
        while offset < end {
            data.seek(std::io::SeekFrom::Start(offset))
                .await
                .expect("seek");
            let mut chunk = vec![0; chunk_bytes];
            let n = data.read(&mut chunk).await.expect("read");
            assert!(n > 0, "a read before the end returned nothing");
            read.extend_from_slice(&chunk[..n]);
            offset += n as u64;
        }
        assert_eq!(read, expected);
    });
    // Bytes are written only into a snapshot being received.
    let mut unread = rt
        .block_on(handles.state_machine.get_current_snapshot())
        .expect("read")
        .expect("a snapshot");
    assert!(
        rt.block_on(unread.snapshot.write_all(b"x")).is_err(),
        "a node's own pinned state took a write"
    );
}

/// The column families' memtable kinds as the store's newest RocksDB
/// OPTIONS file records them, by column family name.
fn recorded_memtables(dir: &Path) -> BTreeMap<String, String> {
    let newest = std::fs::read_dir(dir)
        .expect("list the store")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("OPTIONS-"))
        .max()
        .expect("an OPTIONS file");
    let text = std::fs::read_to_string(dir.join(newest)).expect("read OPTIONS");
    let mut memtables = BTreeMap::new();
    let mut family = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("[CFOptions \"") {
            family = name.strip_suffix("\"]").map(str::to_string);
        } else if let (Some(name), Some(kind)) = (&family, line.strip_prefix("memtable_factory=")) {
            memtables.insert(name.clone(), kind.to_string());
        }
    }
    memtables
}

#[test]
fn request_ids_use_a_vector_memtable_and_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    // "req-10" sorts before "req-2": the ids are written out of key order.
    let before = populated(dir.path(), 50);
    let expected = before.state.read().expect("lock").data.clone();
    drop(before);
    let memtables = recorded_memtables(dir.path());
    for name in ALL_CFS {
        let kind = memtables.get(name).map(String::as_str);
        if name == CF_SM_REQUESTS {
            assert!(
                kind.is_some_and(|k| k.contains("VectorRepFactory")),
                "{name}: {kind:?}"
            );
        } else {
            assert_eq!(kind, Some("SkipListFactory"), "{name}");
        }
    }
    let reopened = open(dir.path()).expect("reopen");
    let state = reopened.state.read().expect("lock");
    assert_eq!(state.data.request_ids.len(), 50);
    same_state(&SmState::from_data(expected), &state);
}

/// Where a snapshot's bytes say their state stands in the log.
#[derive(serde::Deserialize)]
struct SnapshotHead {
    last_applied: Option<LogId<NodeId>>,
}
