//! Backups (`berth admin backup`) and restores (`berthd store restore`)
//! through the public API: a store's state is written to a backup file,
//! read back, and restored as a new cluster's store holding the same jobs;
//! damaged, truncated and foreign files are refused by name and leave
//! nothing behind.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use berth_raft_store::backup::{self, restored_log_id, BACKUP_PREFIX_BYTES};
use berth_raft_store::store::{store_path, FORMAT_VERSION};
use berth_raft_store::{open, Backup, BackupError, StoreHandles, TypeConfig};
use berth_scheduler::JobSpec;
use berth_state::{Command, Request};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use tempfile::TempDir;

const JOBS: u64 = 40;
/// The old cluster's term: the restored store must not keep it.
const OLD_TERM: u64 = 7;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn entry(index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(OLD_TERM, 2), index),
        payload,
    }
}

fn submit(n: u64) -> EntryPayload<TypeConfig> {
    EntryPayload::Normal(Request::new(Command::SubmitJob {
        request_id: format!("req-{n}"),
        spec: JobSpec {
            user: "alice".into(),
            command: format!("echo {n}"),
            cpus: 1,
            ..JobSpec::default()
        },
        now_ms: 1_000 + n,
    }))
}

/// An old cluster's store (voters 1, 2, 3): a membership entry, `JOBS`
/// submits and one cancel, applied.
fn populated(dir: &Path) -> StoreHandles {
    let mut handles = open(dir).expect("open");
    let old_members: BTreeSet<u64> = [1, 2, 3].into();
    let mut entries = vec![entry(
        1,
        EntryPayload::Membership(Membership::new(vec![old_members], ())),
    )];
    for n in 0..JOBS {
        entries.push(entry(2 + n, submit(n)));
    }
    entries.push(entry(
        2 + JOBS,
        EntryPayload::Normal(Request::new(Command::CancelJob {
            job_id: 3,
            now_ms: 9_000,
        })),
    ));
    runtime().block_on(async {
        handles.log.append_durable(entries.clone()).expect("append");
        handles.state_machine.apply(entries).await.expect("apply");
    });
    handles
}

fn new_members(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
    ids.iter()
        .map(|id| {
            (
                *id,
                BasicNode {
                    addr: format!("10.0.0.{id}:7101"),
                },
            )
        })
        .collect()
}

/// A backup of a populated store, written to `<dir>/state.berth-backup`.
fn backup_file(dir: &Path) -> (PathBuf, Backup, StoreHandles) {
    let source = populated(&dir.join("old-node"));
    let backup = source.state_machine.backup(123).expect("backup");
    let path = dir.join("state.berth-backup");
    std::fs::write(&path, backup.to_bytes().expect("encode")).expect("write");
    (path, backup, source)
}

#[test]
fn backup_round_trip_restores_every_job_under_the_new_membership() {
    let tmp = TempDir::new().expect("tempdir");
    let (path, backup, source) = backup_file(tmp.path());
    let source_state = source.state.read().expect("lock").data.clone();
    let source_applied = source.state_machine.applied_meta().last_applied;
    assert_eq!(backup.header.jobs, JOBS);
    assert_eq!(backup.header.hosts, 0);
    assert_eq!(backup.header.created_ms, 123);
    assert_eq!(backup.header.last_log_id, source_applied);
    assert_eq!(backup.header.last_log_id.map(|l| l.index), Some(2 + JOBS));
    assert_eq!(
        backup
            .header
            .membership
            .membership()
            .voter_ids()
            .collect::<Vec<_>>(),
        vec![1, 2, 3]
    );

    // The file reads back as written.
    let read = backup::read_file(&path).expect("read back");
    assert_eq!(read, backup);
    assert_eq!(
        read.decode_state(&path).expect("decode").jobs,
        source_state.jobs
    );

    // Restored for node 1 of a new two-node cluster.
    let data_dir = tmp.path().join("new-node-1");
    let members = new_members(&[1, 2]);
    let report = backup::restore(&path, &data_dir, 1, &members).expect("restore");
    assert_eq!(report.store, store_path(&data_dir));
    assert_eq!(report.jobs, JOBS);
    assert_eq!(report.voters, vec![1, 2]);
    assert_eq!(report.backup_log_id, source_applied);
    let log_id = restored_log_id(&backup.header);
    assert_eq!(report.restored_log_id, log_id);
    assert_eq!(log_id.index, 2 + JOBS);
    assert_eq!(log_id.leader_id.term, 0, "the old term is not kept");
    assert!(!tmp.path().join("new-node-1.restoring").exists());

    let check = berth_raft_store::check(&store_path(&data_dir)).expect("check");
    assert!(check.is_ok(), "{:?}", check.problems);
    assert_eq!(check.jobs, JOBS);
    assert_eq!(check.last_purged, Some(log_id));
    assert_eq!(check.committed, Some(log_id));
    assert_eq!(check.vote, None);
    let snapshot = check.snapshot.expect("a snapshot to send to empty peers");
    assert_eq!(snapshot.last_log_id, Some(log_id));

    let mut restored = open(&store_path(&data_dir)).expect("open restored");
    {
        let state = restored.state.read().expect("lock");
        assert_eq!(state.data.jobs, source_state.jobs);
        assert_eq!(state.data.hosts, source_state.hosts);
        assert_eq!(state.data.request_ids, source_state.request_ids);
        assert_eq!(state.data.counters, source_state.counters);
        let applied = restored.state_machine.applied_meta();
        assert_eq!(applied.last_applied, Some(log_id));
        assert_eq!(state.applied_index(), log_id.index);
        let membership = &applied.membership;
        assert_eq!(membership.log_id(), &Some(log_id));
        assert_eq!(
            membership.membership().voter_ids().collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            membership
                .membership()
                .get_node(&2)
                .map(|n| n.addr.as_str()),
            Some("10.0.0.2:7101")
        );
    }
    // What openraft reads at start-up: an initialised node whose log
    // starts after the restored state, with its snapshot to send peers.
    let rt = runtime();
    let log_state = rt
        .block_on(restored.log.get_log_state())
        .expect("log state");
    assert_eq!(log_state.last_purged_log_id, Some(log_id));
    assert_eq!(log_state.last_log_id, Some(log_id));
    assert_eq!(rt.block_on(restored.log.read_vote()).expect("vote"), None);
    let (applied, membership) = rt
        .block_on(restored.state_machine.applied_state())
        .expect("applied");
    assert_eq!(applied, Some(log_id));
    assert_eq!(membership.log_id(), &Some(log_id));
    let current = rt
        .block_on(restored.state_machine.get_current_snapshot())
        .expect("snapshot")
        .expect("stored");
    assert_eq!(current.meta.last_log_id, Some(log_id));
    assert_eq!(current.meta.last_membership, membership);

    // Another node restored from the same file agrees on the log id.
    let other = backup::restore(&path, &tmp.path().join("new-node-2"), 2, &members)
        .expect("restore node 2");
    assert_eq!(other.restored_log_id, log_id);
}

/// Every way a file can be wrong, each refused with the file named, and
/// the target left absent.
#[test]
fn damaged_truncated_and_foreign_files_are_refused_and_change_nothing() {
    let tmp = TempDir::new().expect("tempdir");
    let (path, backup, _source) = backup_file(tmp.path());
    let good = std::fs::read(&path).expect("read");
    let header_len = good.len() - BACKUP_PREFIX_BYTES - backup.data.len();
    let flip = |at: usize| {
        let mut bytes = good.clone();
        bytes[at] ^= 0x40;
        bytes
    };
    let with_version = {
        let mut bytes = good.clone();
        bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
        bytes
    };
    let undecodable = Backup::new(
        backup.header.last_log_id,
        backup.header.membership.clone(),
        1,
        0,
        0,
        b"{\"jobs\": not json".to_vec(),
    )
    .to_bytes()
    .expect("encode");
    let of_store_format = |format: u32| {
        let mut other = backup.clone();
        other.header.store_format = format;
        other.to_bytes().expect("encode")
    };
    let mut trailing = good.clone();
    trailing.push(b'\n');
    let store_format_refused = |found: u32| {
        format!(
            "store of format {found}, which is not supported: this berthd reads format \
             {FORMAT_VERSION} only"
        )
    };
    let older_store_format = store_format_refused(FORMAT_VERSION - 1);
    let newer_store_format = store_format_refused(FORMAT_VERSION + 1);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "is not a Berth backup"),
        (
            "foreign",
            b"SQLite format 3\0 and more".to_vec(),
            "is not a Berth backup",
        ),
        ("magic only", good[..5].to_vec(), "is truncated"),
        ("cut in the prefix", good[..12].to_vec(), "is truncated"),
        (
            "cut in the header",
            good[..BACKUP_PREFIX_BYTES + header_len / 2].to_vec(),
            "is truncated",
        ),
        (
            "cut in the snapshot",
            good[..good.len() - 1].to_vec(),
            "is truncated",
        ),
        (
            "header bit flipped",
            flip(BACKUP_PREFIX_BYTES + 3),
            "header's checksum",
        ),
        (
            "snapshot bit flipped",
            flip(good.len() - 10),
            "snapshot's checksum",
        ),
        ("bytes after the snapshot", trailing, "follow the"),
        ("newer file format", with_version, "file format version 2"),
        (
            "older store format",
            of_store_format(FORMAT_VERSION - 1),
            older_store_format.as_str(),
        ),
        (
            "newer store format",
            of_store_format(FORMAT_VERSION + 1),
            newer_store_format.as_str(),
        ),
        ("snapshot does not decode", undecodable, "does not decode"),
    ];
    for (what, bytes, expect) in cases {
        let file = tmp.path().join(format!("{}.bak", what.replace(' ', "-")));
        std::fs::write(&file, &bytes).expect("write");
        let target = tmp
            .path()
            .join(format!("target-{}", what.replace(' ', "-")));
        let err = backup::restore(&file, &target, 1, &new_members(&[1]))
            .expect_err(what)
            .to_string();
        assert!(err.contains(expect), "{what}: {err}");
        assert!(err.contains(&file.display().to_string()), "{what}: {err}");
        assert!(!target.exists(), "{what}: the target was created");
        assert!(
            !tmp.path()
                .join(format!("target-{}.restoring", what.replace(' ', "-")))
                .exists(),
            "{what}: a staging directory was left"
        );
    }
}

#[test]
fn restore_refuses_a_used_directory_and_bad_members() {
    let tmp = TempDir::new().expect("tempdir");
    let (path, _backup, _source) = backup_file(tmp.path());

    let used = tmp.path().join("used");
    std::fs::create_dir_all(&used).expect("mkdir");
    std::fs::write(used.join("notes.txt"), "mine").expect("write");
    let err = backup::restore(&path, &used, 1, &new_members(&[1])).expect_err("non-empty");
    assert!(matches!(err, BackupError::NotEmpty { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(used.join("notes.txt")).expect("read"),
        "mine"
    );
    assert_eq!(std::fs::read_dir(&used).expect("ls").count(), 1);

    let err = backup::restore(&path, &tmp.path().join("n"), 4, &new_members(&[1, 2]))
        .expect_err("not a member");
    assert!(
        err.to_string().contains("node 4 is not one of the members"),
        "{err}"
    );
    let err =
        backup::restore(&path, &tmp.path().join("n"), 1, &BTreeMap::new()).expect_err("no members");
    assert!(err.to_string().contains("no members"), "{err}");
    assert!(!tmp.path().join("n").exists());

    // An empty directory is fine (e.g. a freshly mounted volume).
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    backup::restore(&path, &empty, 1, &new_members(&[1])).expect("restore into empty dir");
    assert!(store_path(&empty).join("CURRENT").exists());

    // A missing file is named.
    let missing = tmp.path().join("nope.bak");
    let err = backup::restore(&missing, &tmp.path().join("m"), 1, &new_members(&[1]))
        .expect_err("missing");
    assert!(err.to_string().contains("nope.bak"), "{err}");
}
