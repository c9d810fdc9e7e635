//! The newest log entries, kept in memory as appended.
//!
//! openraft reads every entry back from the log store after appending it:
//! the leader once per follower (to replicate it) and once more to apply
//! it, a follower once to apply it. From RocksDB each read is a lookup and
//! a JSON decode of what was encoded a moment before; under a submit storm
//! those decodes were a tenth of the leader's CPU (BENCHMARKS.md,
//! raft-writes). Reads of a range held here are answered with clones
//! instead; anything else still comes from RocksDB.

use std::collections::VecDeque;

use openraft::Entry;

use crate::TypeConfig;

/// Entries kept at most: several times what is in flight under load (2
/// proposals of up to 256 commands, and replication's batches).
pub(crate) const RECENT_ENTRIES_MAX: usize = 256;
/// Encoded bytes kept at most (each entry counted at its JSON size).
pub(crate) const RECENT_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A contiguous run of the newest entries, in index order.
///
/// Invariant: `entries[i].log_id.index == first + i`, each is exactly what
/// the store holds under that index (every append, truncation and purge
/// of the log passes through here in the same order as its write), and
/// `bytes` is the sum of `sizes`.
#[derive(Default)]
pub(crate) struct RecentEntries {
    entries: VecDeque<Entry<TypeConfig>>,
    sizes: VecDeque<usize>,
    bytes: usize,
}

impl RecentEntries {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|e| e.log_id.index)
    }

    fn end_index(&self) -> Option<u64> {
        self.entries.back().map(|e| e.log_id.index + 1)
    }

    /// Keeps `entry` (just written, `size` bytes encoded) as the newest.
    /// An entry that does not follow the newest kept one (after a
    /// truncation the store reported elsewhere, or a gap) starts a new run.
    pub(crate) fn push(&mut self, entry: Entry<TypeConfig>, size: usize) {
        if self.end_index() != Some(entry.log_id.index) {
            self.clear();
        }
        self.bytes += size;
        self.entries.push_back(entry);
        self.sizes.push_back(size);
        while self.entries.len() > RECENT_ENTRIES_MAX || self.bytes > RECENT_BYTES_MAX {
            self.pop_front();
        }
        debug_assert_eq!(self.entries.len(), self.sizes.len());
    }

    fn pop_front(&mut self) {
        self.entries.pop_front();
        if let Some(size) = self.sizes.pop_front() {
            self.bytes -= size;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.sizes.clear();
        self.bytes = 0;
    }

    /// The log from `index` on is gone.
    pub(crate) fn truncate(&mut self, index: u64) {
        while self.end_index().is_some_and(|end| end > index) {
            self.entries.pop_back();
            if let Some(size) = self.sizes.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// The log up to and including `index` is gone.
    pub(crate) fn purge(&mut self, index: u64) {
        while self.first_index().is_some_and(|first| first <= index) {
            self.pop_front();
        }
    }

    /// Clones of the entries `start..end` when every one of them is kept.
    pub(crate) fn get(&self, start: u64, end: u64) -> Option<Vec<Entry<TypeConfig>>> {
        let first = self.first_index()?;
        let kept_end = self.end_index()?;
        if start < first || end > kept_end || start >= end {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let to = usize::try_from(end - first).ok()?;
        Some(self.entries.range(from..to).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(v: Option<Vec<Entry<TypeConfig>>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn serves_only_ranges_it_holds_whole() {
        let mut r = RecentEntries::default();
        for i in 5..10 {
            r.push(entry(i), 10);
        }
        assert_eq!(indexes(r.get(5, 10)), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(indexes(r.get(7, 9)), Some(vec![7, 8]));
        assert_eq!(indexes(r.get(4, 9)), None);
        assert_eq!(indexes(r.get(8, 11)), None);
        assert_eq!(indexes(r.get(8, 8)), None);
    }

    #[test]
    fn truncation_purge_and_gaps_keep_it_exact() {
        let mut r = RecentEntries::default();
        for i in 1..=6 {
            r.push(entry(i), 100);
        }
        r.truncate(5);
        assert_eq!(indexes(r.get(1, 5)), Some(vec![1, 2, 3, 4]));
        assert_eq!(r.get(1, 6).map(|v| v.len()), None);
        r.purge(2);
        assert_eq!(indexes(r.get(3, 5)), Some(vec![3, 4]));
        assert_eq!(r.get(2, 5).map(|v| v.len()), None);
        assert_eq!(r.bytes, 200);
        // A gap starts a new run.
        r.push(entry(9), 100);
        assert_eq!(indexes(r.get(9, 10)), Some(vec![9]));
        assert_eq!(r.get(3, 5).map(|v| v.len()), None);
        assert_eq!(r.bytes, 100);
    }

    #[test]
    fn bounded_by_count_and_bytes() {
        let mut r = RecentEntries::default();
        for i in 0..(RECENT_ENTRIES_MAX as u64 + 10) {
            r.push(entry(i), 1);
        }
        assert_eq!(r.entries.len(), RECENT_ENTRIES_MAX);
        assert_eq!(r.first_index(), Some(10));
        let mut r = RecentEntries::default();
        for i in 0..4 {
            r.push(entry(i), RECENT_BYTES_MAX / 3);
        }
        assert_eq!(r.entries.len(), 3);
        assert_eq!(r.first_index(), Some(1));
    }
}
