//! `berthd store check`: verifies a store without changing it and says what
//! it holds.
//!
//! The store is opened read-only (RocksDB's `open_cf_for_read_only`: no
//! lock, no write, no compaction), so a check can run beside a live node or
//! on a copy of a damaged directory. Every problem found is listed in the
//! report; only a store that cannot be read at all is an error: one that
//! cannot be opened, or one of another format than this berthd's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use berth_scheduler::{JobState, Resources};
use openraft::{BasicNode, Entry, LogId, SnapshotMeta, StoredMembership, Vote};
use rocksdb::{IteratorMode, Options, DB};

use crate::store::{
    cf, cf_descriptors, db_options, decode, key_to_index, open_error, ALL_CFS, CF_LOGS, CF_META,
    CF_SM_HOSTS, CF_SM_JOBS, CF_SM_META, CF_SM_REQUESTS, FORMAT_VERSION, KEY_COMMITTED,
    KEY_COUNTERS, KEY_FORMAT, KEY_LAST_APPLIED, KEY_LAST_PURGED, KEY_MEMBERSHIP, KEY_SNAPSHOT_META,
    KEY_VOTE,
};
use crate::{NodeId, StoreError, TypeConfig};
use berth_state::{Counters, HostRecord, JobRecord};

/// Problems listed one by one at most; past this only their number is
/// kept, so a thoroughly damaged store gives a readable report.
pub const CHECK_PROBLEMS_LISTED_MAX: usize = 50;

/// The last snapshot built or installed, as recorded (its bytes are made
/// from the tables when a follower needs them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub snapshot_id: String,
    pub last_log_id: Option<LogId<NodeId>>,
}

/// What a store holds, and what is wrong with it.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub path: PathBuf,
    pub format_version: Option<u32>,
    pub vote: Option<Vote<NodeId>>,
    pub committed: Option<LogId<NodeId>>,
    pub last_purged: Option<LogId<NodeId>>,
    /// Log entries stored (after the purged prefix).
    pub log_entries: u64,
    pub first_log_id: Option<LogId<NodeId>>,
    pub last_log_id: Option<LogId<NodeId>>,
    /// Stored log entries per term.
    pub entries_per_term: BTreeMap<u64, u64>,
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: Option<StoredMembership<NodeId, BasicNode>>,
    pub counters: Option<Counters>,
    pub jobs: u64,
    /// Jobs by Slurm state name.
    pub jobs_by_state: BTreeMap<&'static str, u64>,
    pub hosts: u64,
    pub request_ids: u64,
    pub snapshot: Option<SnapshotSummary>,
    /// What is wrong, at most [`CHECK_PROBLEMS_LISTED_MAX`] of it.
    pub problems: Vec<String>,
    /// Problems found beyond those listed.
    pub problems_not_listed: u64,
}

impl CheckReport {
    /// True when nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.problems_not_listed == 0
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < CHECK_PROBLEMS_LISTED_MAX {
            self.problems.push(what);
        } else {
            self.problems_not_listed += 1;
        }
    }
}

/// Verifies the store at `path` read-only and reports what it holds.
///
/// Errors only when the store cannot be read at all (no store there, not
/// Berth's, RocksDB's own files damaged, a format other than
/// [`FORMAT_VERSION`], whose values this berthd cannot decode); everything
/// else it finds wrong is in [`CheckReport::problems`].
pub fn check(path: &Path) -> Result<CheckReport, StoreError> {
    if path.exists() && !path.is_dir() {
        return Err(StoreError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    if !path.join("CURRENT").exists() {
        return Err(StoreError::Missing {
            path: path.to_path_buf(),
        });
    }
    let names = DB::list_cf(&Options::default(), path).map_err(|e| open_error(path, e))?;
    let present: Vec<&str> = ALL_CFS
        .iter()
        .copied()
        .filter(|n| names.iter().any(|m| m == n))
        .collect();
    if present.is_empty() {
        return Err(StoreError::ForeignRocksDb {
            path: path.to_path_buf(),
        });
    }
    let mut report = CheckReport {
        path: path.to_path_buf(),
        ..CheckReport::default()
    };
    for name in ALL_CFS.iter().filter(|n| !present.contains(n)) {
        report.problem(format!("column family {name} is missing"));
    }
    if present.len() < ALL_CFS.len() {
        // The tables below assume every column family; what is there was
        // listed, and the rest cannot be judged.
        return Ok(report);
    }
    // Read-only: no lock is taken and nothing is written, not even the
    // recovery of a WAL left by a crash (it is replayed in memory only).
    let db = DB::open_cf_descriptors_read_only(&db_options(), path, cf_descriptors(), false)
        .map_err(|e| open_error(path, e))?;
    check_meta(&db, &mut report)?;
    check_log(&db, &mut report)?;
    check_state(&db, &mut report)?;
    check_snapshot(&db, &mut report)?;
    cross_checks(&mut report);
    Ok(report)
}

/// Reads and decodes one key; a value that does not decode is a problem.
fn read<T: serde::de::DeserializeOwned>(
    db: &DB,
    cf_name: &str,
    key: &[u8],
    what: &str,
    report: &mut CheckReport,
) -> Result<Option<T>, StoreError> {
    let Some(bytes) = db.get_cf(cf(db, cf_name), key)? else {
        return Ok(None);
    };
    match decode(&bytes) {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            report.problem(format!(
                "{what} ({cf_name}/{}) does not decode: {e}",
                String::from_utf8_lossy(key)
            ));
            Ok(None)
        }
    }
}

fn check_meta(db: &DB, report: &mut CheckReport) -> Result<(), StoreError> {
    // The format version is JSON, so that any berthd reads it. A store
    // without a readable one is damaged, and read as this format.
    match db.get_cf(cf(db, CF_META), KEY_FORMAT)? {
        None => report.problem("the format version is missing".into()),
        Some(bytes) => match serde_json::from_slice::<u32>(&bytes) {
            Ok(FORMAT_VERSION) => report.format_version = Some(FORMAT_VERSION),
            Ok(found) => {
                return Err(StoreError::UnsupportedFormat {
                    path: report.path.clone(),
                    found,
                    supported: FORMAT_VERSION,
                })
            }
            Err(e) => report.problem(format!(
                "the format version (meta/format_version) does not decode: {e}"
            )),
        },
    }
    report.vote = read(db, CF_META, KEY_VOTE, "the vote", report)?;
    report.committed =
        read::<Option<LogId<NodeId>>>(db, CF_META, KEY_COMMITTED, "the committed log id", report)?
            .flatten();
    report.last_purged = read(
        db,
        CF_META,
        KEY_LAST_PURGED,
        "the last purged log id",
        report,
    )?;
    Ok(())
}

fn check_log(db: &DB, report: &mut CheckReport) -> Result<(), StoreError> {
    // The first entry after a purge is last_purged + 1; a log never purged
    // starts where openraft put its first entry (index 0 on a bootstrap).
    let mut expected_index: Option<u64> = report.last_purged.map(|l| l.index.saturating_add(1));
    let mut previous: Option<LogId<NodeId>> = None;
    for item in db.iterator_cf(cf(db, CF_LOGS), IteratorMode::Start) {
        let (key, value) = item?;
        let index = match key_to_index(&key) {
            Ok(i) => i,
            Err(_) => {
                report.problem(format!("a log key is {} bytes, not 8", key.len()));
                continue;
            }
        };
        if let Some(expected) = expected_index {
            if index != expected {
                report.problem(format!(
                    "the log has a gap: entry {index} follows where {expected} was expected"
                ));
            }
        }
        expected_index = Some(index.saturating_add(1));
        let entry: Entry<TypeConfig> = match decode(&value) {
            Ok(e) => e,
            Err(e) => {
                report.problem(format!("log entry {index} does not decode: {e}"));
                continue;
            }
        };
        if entry.log_id.index != index {
            report.problem(format!(
                "log entry {} is stored under index {index}",
                entry.log_id.index
            ));
        }
        if let Some(prev) = previous {
            if entry.log_id.leader_id < prev.leader_id {
                report.problem(format!(
                    "log entry {index} has term {} after term {} at {}",
                    entry.log_id.leader_id.term, prev.leader_id.term, prev.index
                ));
            }
        }
        report.log_entries += 1;
        *report
            .entries_per_term
            .entry(entry.log_id.leader_id.term)
            .or_insert(0) += 1;
        if report.first_log_id.is_none() {
            report.first_log_id = Some(entry.log_id);
        }
        report.last_log_id = Some(entry.log_id);
        previous = Some(entry.log_id);
    }
    Ok(())
}

fn check_state(db: &DB, report: &mut CheckReport) -> Result<(), StoreError> {
    report.last_applied =
        read::<Option<LogId<NodeId>>>(db, CF_SM_META, KEY_LAST_APPLIED, "last applied", report)?
            .flatten();
    report.membership = read(db, CF_SM_META, KEY_MEMBERSHIP, "the membership", report)?;
    report.counters = read(db, CF_SM_META, KEY_COUNTERS, "the id counters", report)?;

    let mut max_job_id = 0u64;
    let mut max_alloc_id = 0u64;
    // Running allocations per host, to compare with the host's inventory.
    let mut allocated: BTreeMap<String, Resources> = BTreeMap::new();
    let mut job_ids = std::collections::BTreeSet::new();
    for item in db.iterator_cf(cf(db, CF_SM_JOBS), IteratorMode::Start) {
        let (key, value) = item?;
        let Ok(id) = key_to_index(&key) else {
            report.problem(format!("a job key is {} bytes, not 8", key.len()));
            continue;
        };
        let record: JobRecord = match decode(&value) {
            Ok(r) => r,
            Err(e) => {
                report.problem(format!("job {id} does not decode: {e}"));
                continue;
            }
        };
        if record.job.id != id {
            report.problem(format!("job {} is stored under id {id}", record.job.id));
        }
        report.jobs += 1;
        *report
            .jobs_by_state
            .entry(record.job.state.slurm_name())
            .or_insert(0) += 1;
        max_job_id = max_job_id.max(id);
        job_ids.insert(id);
        if let Some(alloc) = &record.job.alloc {
            max_alloc_id = max_alloc_id.max(alloc.alloc_id);
            if record.job.state == JobState::Running {
                for host in alloc.hosts() {
                    let sum = allocated.entry(host.to_string()).or_default();
                    *sum = sum.saturating_add(alloc.resources);
                }
            }
        } else if record.job.state == JobState::Running {
            report.problem(format!("job {id} is RUNNING without an allocation"));
        }
    }

    let mut hosts: BTreeMap<String, HostRecord> = BTreeMap::new();
    for item in db.iterator_cf(cf(db, CF_SM_HOSTS), IteratorMode::Start) {
        let (key, value) = item?;
        let name = String::from_utf8_lossy(&key).into_owned();
        match decode::<HostRecord>(&value) {
            Ok(record) => {
                if record.name != name {
                    report.problem(format!(
                        "host {} is stored under the name {name}",
                        record.name
                    ));
                }
                hosts.insert(name, record);
            }
            Err(e) => report.problem(format!("host {name} does not decode: {e}")),
        }
    }
    report.hosts = hosts.len() as u64;
    for (host, sum) in &allocated {
        match hosts.get(host) {
            None => report.problem(format!("jobs run on host {host}, which is not registered")),
            Some(record) if !sum.within(record.inventory.resources()) => {
                report.problem(format!("host {host} has more allocated than it holds"))
            }
            Some(_) => {}
        }
    }

    for item in db.iterator_cf(cf(db, CF_SM_REQUESTS), IteratorMode::Start) {
        let (key, value) = item?;
        let request_id = String::from_utf8_lossy(&key).into_owned();
        report.request_ids += 1;
        match decode::<u64>(&value) {
            Ok(job_id) if !job_ids.contains(&job_id) => report.problem(format!(
                "request id {request_id} names job {job_id}, which does not exist"
            )),
            Ok(_) => {}
            Err(e) => report.problem(format!("request id {request_id} does not decode: {e}")),
        }
    }

    match report.counters {
        Some(c) => {
            if c.next_job_id <= max_job_id {
                report.problem(format!(
                    "next job id {} is not above the highest job id {max_job_id}",
                    c.next_job_id
                ));
            }
            if c.next_alloc_id <= max_alloc_id {
                report.problem(format!(
                    "next allocation id {} is not above the highest allocation id {max_alloc_id}",
                    c.next_alloc_id
                ));
            }
        }
        None if report.jobs > 0 => {
            report.problem("jobs are stored but the id counters are missing".into())
        }
        None => {}
    }
    Ok(())
}

fn check_snapshot(db: &DB, report: &mut CheckReport) -> Result<(), StoreError> {
    let meta: Option<SnapshotMeta<NodeId, BasicNode>> = read(
        db,
        CF_SM_META,
        KEY_SNAPSHOT_META,
        "the snapshot metadata",
        report,
    )?;
    if let Some(meta) = meta {
        report.snapshot = Some(SnapshotSummary {
            snapshot_id: meta.snapshot_id,
            last_log_id: meta.last_log_id,
        });
    }
    Ok(())
}

fn cross_checks(report: &mut CheckReport) {
    // The last log id openraft sees: the last entry, or the purge point
    // when every entry is purged.
    let last_log = report.last_log_id.or(report.last_purged);
    if let Some(applied) = report.last_applied {
        if last_log.is_none_or(|l| applied.index > l.index) {
            report.problem(format!(
                "last applied {applied} is past the last log entry ({})",
                last_log
                    .map(|l| l.to_string())
                    .unwrap_or_else(|| "none".into())
            ));
        }
    }
    if let (Some(purged), applied) = (report.last_purged, report.last_applied) {
        if applied.is_none_or(|a| a.index < purged.index) {
            report.problem(format!("entries up to {purged} are purged but not applied"));
        }
    }
    if let (Some(vote), Some(last)) = (report.vote, report.last_log_id) {
        if vote.leader_id.term < last.leader_id.term {
            report.problem(format!(
                "the vote's term {} is below the last entry's term {}",
                vote.leader_id.term, last.leader_id.term
            ));
        }
    }
    if let (Some(snapshot), applied) = (&report.snapshot, report.last_applied) {
        if snapshot.last_log_id > applied {
            report.problem(format!(
                "the snapshot {} is ahead of what is applied",
                snapshot.snapshot_id
            ));
        }
    }
}
