//! Format 4: every stored value is MessagePack with field names
//! ([`crate::codec`]); formats 1 to 3 stored JSON. A store of an older
//! format is converted at open, in place, in bounded batches.
//!
//! Each batch converts up to [`MIGRATE_BATCH_VALUES_MAX`] values and
//! records how far the conversion got (`meta/format4_progress`) in the same
//! `WriteBatch`, so a crash leaves every value either converted and counted
//! as such, or not; the next open resumes where the last batch ended. The
//! last batch stamps format 4 and drops the progress record, with a synced
//! write. The format version and the progress record stay JSON in every
//! format, so an older berthd still reads the version and refuses the store
//! by name.
//!
//! Values are converted through their types (a job is read as a
//! [`JobRecord`] and written again), so a value that does not decode stops
//! the conversion with the key that holds it, and maps keyed by numbers keep
//! numeric keys, as a fresh write makes them.

use openraft::{BasicNode, Entry, LogId, SnapshotMeta, StoredMembership, Vote};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions, DB};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    cf, synced, CF_LOGS, CF_META, CF_SM_HOSTS, CF_SM_JOBS, CF_SM_META, CF_SM_REQUESTS,
    KEY_COMMITTED, KEY_COUNTERS, KEY_FORMAT, KEY_LAST_APPLIED, KEY_LAST_PURGED, KEY_MEMBERSHIP,
    KEY_POLICY, KEY_SNAPSHOT_META, KEY_USAGE, KEY_VOTE,
};
use crate::codec::Encoding;
use crate::{NodeId, TypeConfig};
use berth_state::policy::{PolicyTables, UsageState};
use berth_state::{Counters, HostRecord, JobRecord};

/// The first format whose values are MessagePack.
pub(crate) const FORMAT_MESSAGEPACK: u32 = 4;

/// How far a conversion to format 4 got (JSON, in `meta`).
pub(crate) const KEY_FORMAT4_PROGRESS: &[u8] = b"format4_progress";

/// Values converted per batch: a job record is about a kilobyte, so a
/// batch holds a few megabytes however large the store.
pub(crate) const MIGRATE_BATCH_VALUES_MAX: usize = 4096;

/// The column families converted one batch at a time, in this order. The
/// small metadata families (`meta`, `sm_meta`) are converted first, in one
/// batch, which also writes the first progress record.
const LARGE_CFS: [&str; 4] = [CF_LOGS, CF_SM_JOBS, CF_SM_HOSTS, CF_SM_REQUESTS];

/// How far a conversion got: `meta` and `sm_meta` whole, the families of
/// [`LARGE_CFS`] before `cf` whole, and in `cf` every key up to `after`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Progress {
    pub cf: String,
    pub after: Option<Vec<u8>>,
}

impl Progress {
    /// Whether the value under `key` of `cf_name` is converted already.
    pub(crate) fn converted(&self, cf_name: &str, key: &[u8]) -> bool {
        let position = |name: &str| LARGE_CFS.iter().position(|c| *c == name);
        match (position(cf_name), position(&self.cf)) {
            // meta and sm_meta went first.
            (None, _) => true,
            (Some(at), Some(done_to)) if at < done_to => true,
            (Some(at), Some(done_to)) if at == done_to => {
                self.after.as_deref().is_some_and(|after| key <= after)
            }
            _ => false,
        }
    }
}

/// The encoding of the value under `key` of `cf_name` in a store of
/// `format`, partway converted as `progress` says. The format version and
/// the progress record are JSON in every format.
pub(crate) fn value_encoding(
    format: u32,
    progress: Option<&Progress>,
    cf_name: &str,
    key: &[u8],
) -> Encoding {
    if cf_name == CF_META && (key == KEY_FORMAT || key == KEY_FORMAT4_PROGRESS) {
        return Encoding::Json;
    }
    if format >= FORMAT_MESSAGEPACK {
        return Encoding::MessagePack;
    }
    match progress {
        Some(p) if p.converted(cf_name, key) => Encoding::MessagePack,
        _ => Encoding::Json,
    }
}

/// The recorded progress of a conversion to format 4, if one is under way.
pub(crate) fn read_progress(db: &DB) -> Result<Option<Progress>, String> {
    match db.get_cf(cf(db, CF_META), KEY_FORMAT4_PROGRESS) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("the format 4 conversion's progress does not decode: {e}")),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Re-encodes the value stored under `key` of `cf_name`, read as the type
/// stored there.
pub(crate) fn transcode(
    cf_name: &str,
    key: &[u8],
    bytes: &[u8],
    from: Encoding,
    to: Encoding,
) -> Result<Vec<u8>, String> {
    fn via<T: Serialize + DeserializeOwned>(
        bytes: &[u8],
        from: Encoding,
        to: Encoding,
    ) -> Result<Vec<u8>, String> {
        to.encode(&from.decode::<T>(bytes)?)
    }
    let unknown = || Err("no value is stored under this key".to_string());
    let converted = match cf_name {
        CF_META => match key {
            KEY_VOTE => via::<Vote<NodeId>>(bytes, from, to),
            KEY_COMMITTED => via::<Option<LogId<NodeId>>>(bytes, from, to),
            KEY_LAST_PURGED => via::<LogId<NodeId>>(bytes, from, to),
            _ => unknown(),
        },
        CF_LOGS => via::<Entry<TypeConfig>>(bytes, from, to),
        CF_SM_META => match key {
            KEY_LAST_APPLIED => via::<Option<LogId<NodeId>>>(bytes, from, to),
            KEY_MEMBERSHIP => via::<StoredMembership<NodeId, BasicNode>>(bytes, from, to),
            KEY_COUNTERS => via::<Counters>(bytes, from, to),
            KEY_POLICY => via::<PolicyTables>(bytes, from, to),
            KEY_USAGE => via::<UsageState>(bytes, from, to),
            KEY_SNAPSHOT_META => via::<SnapshotMeta<NodeId, BasicNode>>(bytes, from, to),
            _ => unknown(),
        },
        CF_SM_JOBS => via::<JobRecord>(bytes, from, to),
        CF_SM_HOSTS => via::<HostRecord>(bytes, from, to),
        CF_SM_REQUESTS => via::<u64>(bytes, from, to),
        _ => unknown(),
    };
    converted.map_err(|e| format!("{}: {e}", describe_key(cf_name, key)))
}

/// `cf/key` in words: log indexes and job ids as numbers, names as text.
fn describe_key(cf_name: &str, key: &[u8]) -> String {
    match <[u8; 8]>::try_from(key) {
        Ok(index) if cf_name == CF_LOGS || cf_name == CF_SM_JOBS => {
            format!("{cf_name}/{}", u64::from_be_bytes(index))
        }
        _ => format!("{cf_name}/{}", String::from_utf8_lossy(key)),
    }
}

/// Converts a format 3 store to format 4 (see the module documentation),
/// resuming a conversion a crash interrupted. Returns the values
/// converted by this call.
pub(crate) fn convert_to_messagepack(db: &DB) -> Result<u64, String> {
    let done = convert_batches(db, MIGRATE_BATCH_VALUES_MAX, usize::MAX)?;
    assert!(done.finished, "an unbounded conversion finishes");
    Ok(done.values)
}

/// What [`convert_batches`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Converted {
    pub values: u64,
    /// Format 4 is stamped: nothing is left to convert.
    pub finished: bool,
}

/// Converts at most `batches_max` batches of at most `batch_values_max`
/// values each (the first batch: every metadata value), as
/// [`convert_to_messagepack`] does without bounds.
pub(crate) fn convert_batches(
    db: &DB,
    batch_values_max: usize,
    batches_max: usize,
) -> Result<Converted, String> {
    assert!(batch_values_max > 0);
    let mut converted = 0u64;
    let mut batches = 0usize;
    let stopped = |values| {
        Ok(Converted {
            values,
            finished: false,
        })
    };
    if batches_max == 0 {
        return stopped(0);
    }
    let mut progress = match read_progress(db)? {
        Some(p) => p,
        None => {
            let mut batch = WriteBatch::default();
            for name in [CF_META, CF_SM_META] {
                for item in db.iterator_cf(cf(db, name), IteratorMode::Start) {
                    let (key, value) = item.map_err(|e| e.to_string())?;
                    if name == CF_META && key.as_ref() == KEY_FORMAT {
                        continue;
                    }
                    let bytes =
                        transcode(name, &key, &value, Encoding::Json, Encoding::MessagePack)?;
                    batch.put_cf(cf(db, name), &key, bytes);
                    converted += 1;
                }
            }
            let first = Progress {
                cf: LARGE_CFS[0].to_string(),
                after: None,
            };
            put_progress(&mut batch, db, &first)?;
            db.write_opt(batch, &WriteOptions::default())
                .map_err(|e| e.to_string())?;
            batches += 1;
            first
        }
    };
    // Each round converts one batch of one family: bounded by the number of
    // values in the store over the batch size, plus one round per family,
    // and by `batches_max`.
    loop {
        if batches == batches_max {
            return stopped(converted);
        }
        let Some(at) = LARGE_CFS.iter().position(|c| *c == progress.cf) else {
            return Err(format!(
                "the format 4 conversion's progress names {:?}, not a table",
                progress.cf
            ));
        };
        let name = LARGE_CFS[at];
        let mode = match &progress.after {
            Some(after) => IteratorMode::From(after, Direction::Forward),
            None => IteratorMode::Start,
        };
        let mut batch = WriteBatch::default();
        let mut last_key: Option<Vec<u8>> = None;
        let mut in_batch = 0usize;
        let mut exhausted = true;
        for item in db.iterator_cf(cf(db, name), mode) {
            let (key, value) = item.map_err(|e| e.to_string())?;
            if progress.after.as_deref() == Some(key.as_ref()) {
                continue;
            }
            if in_batch == batch_values_max {
                exhausted = false;
                break;
            }
            let bytes = transcode(name, &key, &value, Encoding::Json, Encoding::MessagePack)?;
            batch.put_cf(cf(db, name), &key, bytes);
            last_key = Some(key.to_vec());
            in_batch += 1;
        }
        converted += in_batch as u64;
        let next = if exhausted {
            LARGE_CFS.get(at + 1).map(|c| Progress {
                cf: c.to_string(),
                after: None,
            })
        } else {
            Some(Progress {
                cf: name.to_string(),
                after: last_key,
            })
        };
        match next {
            Some(next) => {
                put_progress(&mut batch, db, &next)?;
                db.write_opt(batch, &WriteOptions::default())
                    .map_err(|e| e.to_string())?;
                batches += 1;
                progress = next;
            }
            None => {
                batch.delete_cf(cf(db, CF_META), KEY_FORMAT4_PROGRESS);
                let format = super::encode_format(FORMAT_MESSAGEPACK).map_err(|e| e.to_string())?;
                batch.put_cf(cf(db, CF_META), KEY_FORMAT, format);
                db.write_opt(batch, &synced()).map_err(|e| e.to_string())?;
                return Ok(Converted {
                    values: converted,
                    finished: true,
                });
            }
        }
    }
}

fn put_progress(batch: &mut WriteBatch, db: &DB, progress: &Progress) -> Result<(), String> {
    let bytes = serde_json::to_vec(progress).map_err(|e| e.to_string())?;
    batch.put_cf(cf(db, CF_META), KEY_FORMAT4_PROGRESS, bytes);
    Ok(())
}
