//! Backups of the replicated state (`berth admin backup`) and restoring one
//! into a new store (`berthd store restore`).
//!
//! # The backup file
//!
//! ```text
//! offset  bytes  what
//!      0      8  magic "BERTHBAK"
//!      8      4  file format version, u32 big-endian (BACKUP_FORMAT_VERSION)
//!     12      4  header length h, u32 big-endian (at most BACKUP_HEADER_BYTES_MAX)
//!     16      4  CRC-32 of the header bytes, u32 big-endian
//!     20      h  header: JSON of [`BackupHeader`] (log id, membership, sizes,
//!                the snapshot's CRC-32)
//!   20+h      n  the snapshot: exactly the bytes a Raft snapshot of this
//!                store carries (the JSON of `SmData`), n = header.data_bytes
//! ```
//!
//! CRC-32 is the IEEE 802.3 polynomial (as zlib, gzip and PNG use), computed
//! by [`crc32`]. A file is accepted only when the magic, the version, both
//! checksums and every length agree, the header's store format is this
//! berthd's, and the snapshot decodes.
//!
//! # Restoring
//!
//! [`restore`] builds a new store whose state machine holds the backed-up
//! state and whose membership is the new cluster's, as if the new cluster
//! had installed a Raft snapshot of it:
//!
//! - the state is installed through the same `install_snapshot` openraft
//!   uses, at the log id `(term 0, node 0, index I)`, where `I` is the index
//!   the backup was taken at. Term 0 is below every term the new cluster
//!   will elect, so the first leader's entries (term 1 and up, index I+1
//!   and up) follow it in log order; every node restored from the same file
//!   gets the same log id, so they agree on it;
//! - the membership is the new cluster's voters, stamped with that log id;
//! - the log is empty with everything up to that log id purged, and the
//!   committed log id is that log id; the vote is left unset;
//! - the current snapshot is rebuilt from the restored tables.
//!
//! The store is thereby initialised: `bootstrap` finds it so and does
//! nothing. The restored node starts as a follower of a cluster it knows,
//! times out, and asks for votes; empty peers grant them (its log is ahead
//! of theirs), and because its log starts after the purged prefix, the new
//! leader brings every empty peer up to date by sending the snapshot. So
//! one restored node and empty peers make a whole cluster; restoring the
//! same file on every node works too. Restoring into `initialize` instead
//! (state tables under a pristine Raft log) would not: the leader would send
//! empty peers only the log, and they would never see the restored state.
//!
//! The new store is built beside the target (`<dir>.restoring`) and renamed
//! into place only after `check` finds nothing wrong with it, so a failed
//! restore leaves the target as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::store::{store_path, FORMAT_VERSION};
use crate::{NodeId, SnapshotData, StoreError};
use berth_state::SmData;

/// The first bytes of every backup file.
pub const BACKUP_MAGIC: &[u8; 8] = b"BERTHBAK";
/// Version of the backup file layout described in the module docs.
pub const BACKUP_FORMAT_VERSION: u32 = 1;
/// Fixed bytes before the header: magic, version, header length, header CRC.
pub const BACKUP_PREFIX_BYTES: usize = 20;
/// Largest header accepted, in bytes. A real header is a few hundred bytes
/// (a membership of a handful of nodes); the bound keeps a damaged length
/// field from asking for gigabytes.
pub const BACKUP_HEADER_BYTES_MAX: u32 = 1024 * 1024;

/// What a backup holds, stored as JSON after the fixed prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The store format (`store::FORMAT_VERSION`) of the node that wrote it.
    pub store_format: u32,
    /// The last log entry applied to the state in this backup.
    pub last_log_id: Option<LogId<NodeId>>,
    /// The membership in effect at that entry (the old cluster's).
    pub membership: StoredMembership<NodeId, BasicNode>,
    /// When the backup was taken, ms since the Unix epoch (leader's clock).
    pub created_ms: u64,
    /// Jobs in the state.
    pub jobs: u64,
    /// Hosts in the state.
    pub hosts: u64,
    /// Length of the snapshot bytes after the header.
    pub data_bytes: u64,
    /// CRC-32 of the snapshot bytes.
    pub data_crc32: u32,
}

/// A backup: its header and the snapshot bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub header: BackupHeader,
    pub data: Vec<u8>,
}

/// Why a backup could not be read or restored. Every variant names the
/// file or directory concerned.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot read backup {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a Berth backup (it does not start with \"BERTHBAK\")")]
    NotABackup { path: PathBuf },
    #[error(
        "backup {path} has file format version {found}; this berthd reads version \
         {supported}; use a berthd that matches the one that took it"
    )]
    UnsupportedVersion {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// Taken from a store of another format, older or newer: no format is
    /// migrated before 1.0.
    #[error(
        "backup {path} was taken from a store of format {found}, which is not supported: \
         this berthd reads format {supported} only; formats may change before 1.0 (use \
         the berthd version that took it)"
    )]
    UnsupportedStoreFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("backup {path} is truncated: {detail}")]
    Truncated { path: PathBuf, detail: String },
    #[error("backup {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "cannot restore into {path}: it is not empty; restore into a new, empty data \
         directory (a restore never overwrites a store)"
    )]
    NotEmpty { path: PathBuf },
    #[error("cannot restore into {path}: it is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("cannot restore: {0}")]
    Members(String),
    #[error("the backup header would be {bytes} bytes, over {BACKUP_HEADER_BYTES_MAX}")]
    HeaderTooLarge { bytes: u64 },
    #[error("cannot restore into {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot restore into {path}: {detail}")]
    Restore { path: PathBuf, detail: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), as zlib's
/// `crc32()`: `crc32(b"123456789") == 0xCBF43926`.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0, bytes)
}

/// Continues a CRC-32 over more bytes: `crc32_update(crc32(a), b)` is the
/// CRC-32 of `a` followed by `b`.
pub fn crc32_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in bytes {
        c = CRC32_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

const CRC32_TABLE: [u32; 256] = crc32_table();

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

impl Backup {
    /// A backup of `data` (snapshot bytes) taken at `last_log_id`.
    pub fn new(
        last_log_id: Option<LogId<NodeId>>,
        membership: StoredMembership<NodeId, BasicNode>,
        created_ms: u64,
        jobs: u64,
        hosts: u64,
        data: Vec<u8>,
    ) -> Backup {
        Backup {
            header: BackupHeader {
                store_format: FORMAT_VERSION,
                last_log_id,
                membership,
                created_ms,
                jobs,
                hosts,
                data_bytes: data.len() as u64,
                data_crc32: crc32(&data),
            },
            data,
        }
    }

    /// The whole file, as described in the module docs.
    pub fn to_bytes(&self) -> Result<Vec<u8>, BackupError> {
        let header = serde_json::to_vec(&self.header).map_err(StoreError::Json)?;
        let header_len = u32::try_from(header.len())
            .ok()
            .filter(|len| *len <= BACKUP_HEADER_BYTES_MAX)
            .ok_or(BackupError::HeaderTooLarge {
                bytes: header.len() as u64,
            })?;
        let mut out = Vec::with_capacity(BACKUP_PREFIX_BYTES + header.len() + self.data.len());
        out.extend_from_slice(BACKUP_MAGIC);
        out.extend_from_slice(&BACKUP_FORMAT_VERSION.to_be_bytes());
        out.extend_from_slice(&header_len.to_be_bytes());
        out.extend_from_slice(&crc32(&header).to_be_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.data);
        Ok(out)
    }

    /// Parses and verifies a whole file's bytes; `path` only names the file
    /// in errors. Checks the magic, the version, the header's length and
    /// checksum, the snapshot's length and checksum, that nothing follows
    /// the snapshot, and the store format. It does not decode the snapshot (see
    /// [`Backup::decode_state`]).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Backup, BackupError> {
        let header_len = check_prefix(bytes, path)?;
        let truncated = |detail: String| BackupError::Truncated {
            path: path.to_path_buf(),
            detail,
        };
        let corrupt = |detail: String| BackupError::Corrupt {
            path: path.to_path_buf(),
            detail,
        };
        let header_end = BACKUP_PREFIX_BYTES + header_len as usize;
        let header_bytes = bytes.get(BACKUP_PREFIX_BYTES..header_end).ok_or_else(|| {
            truncated(format!(
                "the header is {header_len} bytes but the file ends {} bytes into it",
                bytes.len() - BACKUP_PREFIX_BYTES
            ))
        })?;
        let want_crc = read_u32(bytes, 16);
        let found_crc = crc32(header_bytes);
        if want_crc != found_crc {
            return Err(corrupt(format!(
                "the header's checksum is {found_crc:#010x}, expected {want_crc:#010x}"
            )));
        }
        let header: BackupHeader = serde_json::from_slice(header_bytes)
            .map_err(|e| corrupt(format!("the header does not decode: {e}")))?;
        let data = &bytes[header_end..];
        let have = data.len() as u64;
        if have < header.data_bytes {
            return Err(truncated(format!(
                "the snapshot is {} bytes but only {have} are present",
                header.data_bytes
            )));
        }
        if have > header.data_bytes {
            return Err(corrupt(format!(
                "{} bytes follow the {}-byte snapshot",
                have - header.data_bytes,
                header.data_bytes
            )));
        }
        let found_crc = crc32(data);
        if found_crc != header.data_crc32 {
            return Err(corrupt(format!(
                "the snapshot's checksum is {found_crc:#010x}, expected {:#010x}",
                header.data_crc32
            )));
        }
        if header.store_format != FORMAT_VERSION {
            return Err(BackupError::UnsupportedStoreFormat {
                path: path.to_path_buf(),
                found: header.store_format,
                supported: FORMAT_VERSION,
            });
        }
        Ok(Backup {
            header,
            data: data.to_vec(),
        })
    }

    /// Decodes the snapshot into the state it holds.
    pub fn decode_state(&self, path: &Path) -> Result<SmData, BackupError> {
        serde_json::from_slice(&self.data).map_err(|e| BackupError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("the snapshot does not decode: {e}"),
        })
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_be_bytes(word)
}

/// Checks the fixed prefix; returns the header length.
fn check_prefix(bytes: &[u8], path: &Path) -> Result<u32, BackupError> {
    let magic_seen = &bytes[..bytes.len().min(BACKUP_MAGIC.len())];
    if magic_seen != &BACKUP_MAGIC[..magic_seen.len()] || bytes.is_empty() {
        return Err(BackupError::NotABackup {
            path: path.to_path_buf(),
        });
    }
    if bytes.len() < BACKUP_PREFIX_BYTES {
        return Err(BackupError::Truncated {
            path: path.to_path_buf(),
            detail: format!(
                "it is {} bytes, shorter than the {BACKUP_PREFIX_BYTES}-byte prefix",
                bytes.len()
            ),
        });
    }
    let version = read_u32(bytes, 8);
    if version != BACKUP_FORMAT_VERSION {
        return Err(BackupError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: BACKUP_FORMAT_VERSION,
        });
    }
    let header_len = read_u32(bytes, 12);
    if header_len > BACKUP_HEADER_BYTES_MAX {
        return Err(BackupError::Corrupt {
            path: path.to_path_buf(),
            detail: format!(
                "the header length {header_len} exceeds {BACKUP_HEADER_BYTES_MAX} bytes"
            ),
        });
    }
    Ok(header_len)
}

/// Reads and verifies a backup file (see [`Backup::from_bytes`]). The
/// prefix is checked before the rest is read, so a file that is not a
/// backup is refused without reading it whole.
pub fn read_file(path: &Path) -> Result<Backup, BackupError> {
    let read_err = |source: std::io::Error| BackupError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(read_err)?;
    let mut prefix = Vec::with_capacity(BACKUP_PREFIX_BYTES);
    (&mut file)
        .take(BACKUP_PREFIX_BYTES as u64)
        .read_to_end(&mut prefix)
        .map_err(read_err)?;
    check_prefix(&prefix, path)?;
    let mut bytes = prefix;
    file.read_to_end(&mut bytes).map_err(read_err)?;
    Backup::from_bytes(&bytes, path)
}

/// What [`restore`] made.
#[derive(Debug, Clone)]
pub struct RestoreReport {
    /// The store created (`<data_dir>/raft`).
    pub store: PathBuf,
    /// The log id the backup was taken at, in the old cluster.
    pub backup_log_id: Option<LogId<NodeId>>,
    /// The log id the restored state is at in the new store.
    pub restored_log_id: LogId<NodeId>,
    pub voters: Vec<NodeId>,
    pub jobs: u64,
    pub hosts: u64,
    pub next_job_id: u64,
}

/// The log id a restored state is given: term 0 and node 0 (below every
/// term a new cluster elects, the same on every node restored from one
/// file), at the index the backup was taken at.
pub fn restored_log_id(backup: &BackupHeader) -> LogId<NodeId> {
    let index = backup.last_log_id.map(|l| l.index).unwrap_or(0);
    LogId::new(CommittedLeaderId::new(0, 0), index)
}

/// Restores the backup in `file` as a new store under `data_dir` (a node's
/// data directory, which must be absent or empty) for node `node_id` of a
/// new cluster whose voters are `members`. See the module docs for how
/// openraft sees the result. On error nothing is left behind and
/// `data_dir` is as it was.
pub fn restore(
    file: &Path,
    data_dir: &Path,
    node_id: NodeId,
    members: &BTreeMap<NodeId, BasicNode>,
) -> Result<RestoreReport, BackupError> {
    if members.is_empty() {
        return Err(BackupError::Members("no members given".into()));
    }
    if members.contains_key(&0) {
        return Err(BackupError::Members("member ids start at 1".into()));
    }
    if !members.contains_key(&node_id) {
        return Err(BackupError::Members(format!(
            "node {node_id} is not one of the members ({})",
            members
                .keys()
                .map(|id| id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if data_dir.exists() {
        if !data_dir.is_dir() {
            return Err(BackupError::NotADirectory {
                path: data_dir.to_path_buf(),
            });
        }
        let mut entries = std::fs::read_dir(data_dir).map_err(|source| BackupError::Write {
            path: data_dir.to_path_buf(),
            source,
        })?;
        if entries.next().is_some() {
            return Err(BackupError::NotEmpty {
                path: data_dir.to_path_buf(),
            });
        }
    }
    let backup = read_file(file)?;
    // Decoded up front so a snapshot that does not decode is refused
    // before anything is written.
    let state = backup.decode_state(file)?;

    let staging = sibling(data_dir, ".restoring");
    let write_err = |source: std::io::Error| BackupError::Write {
        path: staging.clone(),
        source,
    };
    if staging.exists() {
        // Left by a restore that crashed; it never was a live store (it is
        // renamed into place only when whole).
        std::fs::remove_dir_all(&staging).map_err(write_err)?;
    }
    std::fs::create_dir_all(&staging).map_err(write_err)?;
    let result = build_restored(&staging, &backup, &state, members);
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    let parent = data_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let placed = std::fs::rename(&staging, data_dir)
        .and_then(|()| std::fs::File::open(parent).and_then(|d| d.sync_all()));
    if let Err(source) = placed {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(BackupError::Write {
            path: data_dir.to_path_buf(),
            source,
        });
    }
    tracing::info!(
        store = %store_path(data_dir).display(),
        index = report.restored_log_id.index,
        jobs = report.jobs,
        "backup restored"
    );
    Ok(RestoreReport {
        store: store_path(data_dir),
        ..report
    })
}

/// `<path><suffix>` beside `path`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// Builds the restored store under `staging` and checks it.
fn build_restored(
    staging: &Path,
    backup: &Backup,
    state: &SmData,
    members: &BTreeMap<NodeId, BasicNode>,
) -> Result<RestoreReport, BackupError> {
    let store = store_path(staging);
    let failed = |what: &str, e: &dyn std::fmt::Display| BackupError::Restore {
        path: store.clone(),
        detail: format!("{what}: {e}"),
    };
    let log_id = restored_log_id(&backup.header);
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = StoredMembership::new(
        Some(log_id),
        Membership::new(vec![voters.clone()], members.clone()),
    );
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: membership,
        snapshot_id: format!("restored-{}", log_id.index),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| failed("cannot start a runtime", &e))?;
    {
        let mut handles = crate::store::open(&store)?;
        runtime.block_on(async {
            handles
                .state_machine
                .install_snapshot(
                    &meta,
                    Box::new(SnapshotData::from_bytes(backup.data.clone())),
                )
                .await
                .map_err(|e| failed("installing the state", &e))?;
            handles
                .log
                .purge(log_id)
                .await
                .map_err(|e| failed("writing the purged log id", &e))?;
            handles
                .log
                .save_committed(Some(log_id))
                .await
                .map_err(|e| failed("writing the committed log id", &e))?;
            Ok::<(), BackupError>(())
        })?;
    }
    let check = crate::check(&store)?;
    if !check.is_ok() {
        return Err(BackupError::Restore {
            path: store.clone(),
            detail: format!(
                "the restored store does not check: {}",
                check.problems.join("; ")
            ),
        });
    }
    Ok(RestoreReport {
        store,
        backup_log_id: backup.header.last_log_id,
        restored_log_id: log_id,
        voters: voters.into_iter().collect(),
        jobs: state.jobs.len() as u64,
        hosts: state.hosts.len() as u64,
        next_job_id: state.counters.next_job_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
        assert_eq!(crc32_update(crc32(b"12345"), b"6789"), 0xCBF4_3926);
    }
}
