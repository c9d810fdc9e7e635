//! A host class's free-room index: its hosts' keys (free GPUs, free CPUs,
//! host; see `HostClass::key`) in order, so a job looks only at hosts with
//! enough free. A pass builds one per class and drops it at its end; for
//! a class of a few hundred hosts a sorted vector costs less to build, to
//! change (a short move) and to free than a B-tree's nodes, while a large
//! class keeps a B-tree, where a change moves no more than a node.

use std::collections::btree_set;
use std::collections::BTreeSet;

/// (free GPUs if the class has GPUs else 0, free CPUs, host).
pub(crate) type FreeKey = (u32, u32, usize);

/// Classes of at most this many hosts are kept in a sorted vector.
const VEC_HOSTS_MAX: usize = 256;

pub(crate) enum FreeIndex {
    /// Sorted, no key twice.
    Vec(Vec<FreeKey>),
    Tree(BTreeSet<FreeKey>),
}

impl FreeIndex {
    /// The index of `keys`, which must be sorted with no key twice.
    pub fn from_sorted(keys: Vec<FreeKey>) -> FreeIndex {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        if keys.len() <= VEC_HOSTS_MAX {
            FreeIndex::Vec(keys)
        } else {
            // Sorted input: the set is built in bulk.
            FreeIndex::Tree(keys.into_iter().collect())
        }
    }

    /// The keys from `from` on, in order.
    pub fn from(&self, from: FreeKey) -> FreeKeys<'_> {
        match self {
            FreeIndex::Vec(keys) => {
                let at = keys.partition_point(|k| *k < from);
                FreeKeys::Vec(keys[at..].iter())
            }
            FreeIndex::Tree(keys) => FreeKeys::Tree(keys.range(from..)),
        }
    }

    /// Replaces `before`, which the index holds, with `after`.
    pub fn replace(&mut self, before: FreeKey, after: FreeKey) {
        match self {
            FreeIndex::Vec(keys) => {
                debug_assert!(before == after || keys.binary_search(&after).is_err());
                let Ok(from) = keys.binary_search(&before) else {
                    let at = keys.partition_point(|k| *k < after);
                    keys.insert(at, after);
                    return;
                };
                // Only the keys between the old place and the new move,
                // one step, instead of the tail twice (remove, insert).
                if after < before {
                    let to = keys[..from].partition_point(|k| *k < after);
                    keys[to..=from].rotate_right(1);
                    keys[to] = after;
                } else {
                    let to = from + keys[from + 1..].partition_point(|k| *k < after);
                    keys[from..=to].rotate_left(1);
                    keys[to] = after;
                }
            }
            FreeIndex::Tree(keys) => {
                keys.remove(&before);
                keys.insert(after);
            }
        }
    }
}

/// The keys of a [`FreeIndex`] from some key on.
pub(crate) enum FreeKeys<'a> {
    Vec(std::slice::Iter<'a, FreeKey>),
    Tree(btree_set::Range<'a, FreeKey>),
}

impl Iterator for FreeKeys<'_> {
    type Item = FreeKey;

    fn next(&mut self) -> Option<FreeKey> {
        match self {
            FreeKeys::Vec(keys) => keys.next().copied(),
            FreeKeys::Tree(keys) => keys.next().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both forms answer alike through a series of changes.
    #[test]
    fn vector_and_tree_agree() {
        let keys: Vec<FreeKey> = (0..40).map(|i| (0, (i % 5) as u32, i)).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut small = FreeIndex::from_sorted(sorted.clone());
        let mut large = FreeIndex::Tree(sorted.iter().copied().collect());
        assert!(matches!(small, FreeIndex::Vec(_)));
        let mut state: Vec<FreeKey> = keys;
        for step in 0..200usize {
            let i = (step * 7) % state.len();
            let before = state[i];
            let after = (0, ((step * 3) % 6) as u32, before.2);
            small.replace(before, after);
            large.replace(before, after);
            state[i] = after;
            let from = (0, (step % 6) as u32, 0);
            let a: Vec<FreeKey> = small.from(from).collect();
            let b: Vec<FreeKey> = large.from(from).collect();
            let mut want: Vec<FreeKey> = state.iter().copied().filter(|k| *k >= from).collect();
            want.sort_unstable();
            assert_eq!(a, want);
            assert_eq!(b, want);
        }
    }

    #[test]
    fn large_classes_use_a_tree() {
        let keys: Vec<FreeKey> = (0..=VEC_HOSTS_MAX).map(|i| (0, 1, i)).collect();
        assert!(matches!(FreeIndex::from_sorted(keys), FreeIndex::Tree(_)));
    }
}
