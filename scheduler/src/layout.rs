//! The static part of a pass's host pool: which hosts are up, in name
//! order, and how they group into classes of equal static attributes
//! (inventory, GPU model, emulator, features, partitions).
//!
//! It depends only on the hosts' states and static attributes, never on
//! what is allocated, so a caller whose hosts stay the same from one pass
//! to the next (the simulator, between host events) builds it once and
//! hands it to [`crate::pass::schedule_in`]; [`crate::pass::schedule`]
//! builds it every pass. Building it was a quarter of a trace replay.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::fxhash::{same_str, FxMap};
use crate::model::{EmulatorInventory, Host, HostState, Resources};
use crate::pass::Snapshot;

/// Up hosts in name order, grouped into classes. Pool index `i` (what the
/// pool calls host `i`) is snapshot host `up[i]`.
///
/// Invariant: equal to `HostLayout::new` of the snapshot it is used with;
/// debug builds check it at every pass (`Pool::with_layout`), and
/// `schedule_in` makes anew one whose up hosts are not the snapshot's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLayout {
    pub(crate) up: Vec<usize>,
    /// Classes in a stable order: smaller hosts first, so that a job that
    /// fits on either kind takes the smaller one.
    pub(crate) classes: Vec<HostClass>,
    /// By pool index: its class.
    pub(crate) class_of: Vec<usize>,
    /// Pool index by host name, made when a pass first asks for it.
    names: NameIndex,
}

/// Pool index by host name, for finding a running job's hosts. Made once
/// for a layout its caller keeps between passes (`schedule_in`); a pass's
/// own layout (`schedule`) does without it where that is cheaper. Not part
/// of a layout's equality: it is derived from the names, which a lookup
/// checks (`HostLayout::find`), so a stale entry is never believed.
#[derive(Debug, Clone, Default)]
struct NameIndex(OnceLock<FxMap<Box<str>, usize>>);

impl PartialEq for NameIndex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for NameIndex {}

/// The index of the host named `name` in `hosts`, which are in name order
/// (a pool's hosts), by binary search.
pub(crate) fn search_by_name(hosts: &[&Host], name: &str) -> Option<usize> {
    hosts.binary_search_by(|h| h.name.as_str().cmp(name)).ok()
}

/// Hosts with the same static attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostClass {
    /// Its first host (pool index), standing for all: eligibility depends
    /// only on what the class shares.
    pub rep: usize,
    pub total: Resources,
    /// Pool indexes, ascending.
    pub members: Vec<usize>,
    pub has_gpus: bool,
}

impl HostClass {
    /// A host's key in its class's free-room index: (free GPUs if the
    /// class has GPUs else 0, free CPUs, host), so that the index lists
    /// hosts in best-fit order, fullest first.
    pub fn key(&self, free: Resources, host: usize) -> (u32, u32, usize) {
        let gpus = if self.has_gpus { free.gpus } else { 0 };
        (gpus, free.cpus, host)
    }
}

/// What makes hosts one class, borrowed from the snapshot: totals, GPU
/// model, emulator, features and partitions (the last two sorted, copied
/// only when a host lists them out of order).
type ClassKey<'a> = (
    (u32, u64, u32, u32),
    &'a str,
    Option<&'a EmulatorInventory>,
    Cow<'a, [String]>,
    Cow<'a, [String]>,
);

fn sorted(names: &[String]) -> Cow<'_, [String]> {
    if names.is_sorted() {
        Cow::Borrowed(names)
    } else {
        let mut owned = names.to_vec();
        owned.sort();
        Cow::Owned(owned)
    }
}

/// `a == b`, with the GPU model compared by [`same_str`]: on a site
/// without GPU models every host's is empty, and a derived compare calls
/// `memcmp` on each (see `same_str`); that was a quarter of a trace
/// replay's time, one compare per host per pass.
fn same_class(a: &ClassKey<'_>, b: &ClassKey<'_>) -> bool {
    a.0 == b.0 && same_str(a.1, b.1) && a.2 == b.2 && a.3 == b.3 && a.4 == b.4
}

/// Whether `a` and `b` have the same static attributes listed the same
/// way: then their [`class_key`]s are equal (the converse does not hold:
/// features or partitions may be listed in another order).
fn same_listing(a: &Host, b: &Host) -> bool {
    a.inventory.resources() == b.inventory.resources()
        && same_str(&a.inventory.gpu_type, &b.inventory.gpu_type)
        && a.inventory.emulator == b.inventory.emulator
        && a.features == b.features
        && a.partitions == b.partitions
}

fn class_key(h: &Host) -> ClassKey<'_> {
    let r = h.inventory.resources();
    (
        (r.cpus, r.mem_mb, r.gpus, r.emu),
        h.inventory.gpu_type.as_str(),
        h.inventory.emulator.as_ref(),
        sorted(&h.features),
        sorted(&h.partitions),
    )
}

impl HostLayout {
    pub fn new(snapshot: &Snapshot) -> HostLayout {
        let mut up: Vec<usize> = (0..snapshot.hosts.len())
            .filter(|&s| snapshot.hosts[s].state == HostState::Up)
            .collect();
        let name = |s: usize| snapshot.hosts[s].name.as_str();
        // Callers mostly keep hosts in name order already; checking is one
        // comparison per host, sorting costs more even on sorted input.
        if !up.is_sorted_by(|&a, &b| name(a) <= name(b)) {
            up.sort_by(|&a, &b| name(a).cmp(name(b)));
        }
        let hosts: Vec<&Host> = up.iter().map(|&s| &snapshot.hosts[s]).collect();
        // Hosts of a kind mostly sit together, so runs of equal keys go
        // into the map at once.
        let mut by_key: BTreeMap<ClassKey<'_>, Vec<usize>> = BTreeMap::new();
        let mut run: Option<(ClassKey<'_>, Vec<usize>)> = None;
        // Whether the last host continued its run: then the next one is
        // first compared with the run's first as listed, which spares
        // making its key in a long run of one kind; where kinds alternate,
        // that compare mostly fails and is skipped.
        let mut in_run = false;
        for (i, h) in hosts.iter().enumerate() {
            if let (true, Some((_, members))) = (in_run, &mut run) {
                if same_listing(hosts[members[0]], h) {
                    members.push(i);
                    continue;
                }
            }
            let key = class_key(h);
            match &mut run {
                Some((k, members)) if same_class(k, &key) => {
                    members.push(i);
                    in_run = true;
                }
                _ => {
                    if let Some((k, members)) = run.replace((key, vec![i])) {
                        by_key.entry(k).or_default().extend(members);
                    }
                    in_run = false;
                }
            }
        }
        if let Some((k, members)) = run {
            by_key.entry(k).or_default().extend(members);
        }
        let mut class_of = vec![0; hosts.len()];
        let mut classes = Vec::with_capacity(by_key.len());
        for (c, members) in by_key.into_values().enumerate() {
            // Runs join their class in the order met: ascending.
            debug_assert!(members.is_sorted());
            for &i in &members {
                class_of[i] = c;
            }
            let rep = members[0];
            let total = hosts[rep].inventory.resources();
            classes.push(HostClass {
                rep,
                total,
                members,
                has_gpus: total.gpus > 0,
            });
        }
        HostLayout {
            up,
            classes,
            class_of,
            names: NameIndex::default(),
        }
    }

    /// The pool index of the up host named `name` among `hosts` (the
    /// pool's hosts, in pool order), through the name index, which is made
    /// on the first call. `None` when no up host has that name.
    pub(crate) fn find(&self, hosts: &[&Host], name: &str) -> Option<usize> {
        let index = self.names.0.get_or_init(|| {
            hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (Box::from(h.name.as_str()), i))
                .collect()
        });
        match index.get(name) {
            Some(&i) if hosts.get(i).is_some_and(|h| h.name == name) => Some(i),
            // Not an up host; or the index was made from other names than
            // these hosts' (hosts renamed under a kept layout), which the
            // search in name order does not depend on.
            _ => search_by_name(hosts, name),
        }
    }

    /// Whether the hosts it has up are those `snapshot` has up: a cheap
    /// part of its invariant (no names or attributes compared), so that a
    /// layout kept past a host's going down or up is never used.
    pub(crate) fn same_up_hosts(&self, snapshot: &Snapshot) -> bool {
        let up = |s: usize| {
            snapshot
                .hosts
                .get(s)
                .is_some_and(|h| h.state == HostState::Up)
        };
        self.up.iter().all(|&s| up(s))
            && snapshot
                .hosts
                .iter()
                .filter(|h| h.state == HostState::Up)
                .count()
                == self.up.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Inventory;

    fn host(name: &str, features: &[&str]) -> Host {
        let mut h = Host::new(name, Inventory::cpu_mem(4, 0));
        h.features = features.iter().map(|f| f.to_string()).collect();
        h
    }

    /// The name index answers for the hosts it was made from, and a name
    /// it holds for another host (hosts renamed under a kept layout) is
    /// checked and searched for instead of believed.
    #[test]
    fn a_kept_layout_finds_hosts_by_name_and_never_believes_a_stale_entry() {
        let snapshot = Snapshot {
            hosts: vec![host("n1", &[]), host("n2", &[]), host("n3", &[])],
            ..Snapshot::default()
        };
        let layout = HostLayout::new(&snapshot);
        let hosts: Vec<&Host> = snapshot.hosts.iter().collect();
        assert_eq!(layout.find(&hosts, "n2"), Some(1));
        assert_eq!(layout.find(&hosts, "n9"), None);
        let renamed = Snapshot {
            hosts: vec![host("m1", &[]), host("n1", &[]), host("n2", &[])],
            ..Snapshot::default()
        };
        let hosts: Vec<&Host> = renamed.hosts.iter().collect();
        assert_eq!(layout.find(&hosts, "n2"), Some(2));
        assert_eq!(layout.find(&hosts, "n1"), Some(1));
        assert_eq!(layout.find(&hosts, "n3"), None);
    }

    #[test]
    fn hosts_listing_features_in_another_order_share_a_class() {
        let snapshot = Snapshot {
            hosts: vec![
                host("n1", &["a", "b"]),
                host("n2", &["b", "a"]),
                host("n3", &["a", "b"]),
                host("n4", &["c"]),
                host("n5", &["b", "a"]),
            ],
            ..Snapshot::default()
        };
        let layout = HostLayout::new(&snapshot);
        assert_eq!(layout.classes.len(), 2);
        assert_eq!(layout.class_of, vec![0, 0, 0, 1, 0]);
        assert_eq!(layout.classes[0].members, vec![0, 1, 2, 4]);
    }

    #[test]
    fn only_up_hosts_in_name_order() {
        let mut down = host("a0", &[]);
        down.state = HostState::Down;
        let snapshot = Snapshot {
            hosts: vec![host("n2", &[]), down, host("n1", &["x"])],
            ..Snapshot::default()
        };
        let layout = HostLayout::new(&snapshot);
        assert_eq!(layout.up, vec![2, 0]);
        // n1 lists a feature, n2 none: two classes, ordered by their keys.
        assert_eq!(layout.class_of, vec![1, 0]);
        assert!(layout.same_up_hosts(&snapshot));
    }

    #[test]
    fn a_layout_kept_past_a_host_going_down_is_stale() {
        let mut snapshot = Snapshot {
            hosts: vec![host("n1", &[]), host("n2", &[])],
            ..Snapshot::default()
        };
        let kept = HostLayout::new(&snapshot);
        snapshot.hosts[1].state = HostState::Down;
        assert!(!kept.same_up_hosts(&snapshot));
        snapshot.hosts.truncate(1);
        assert!(!kept.same_up_hosts(&snapshot));
        snapshot.hosts.push(host("n2", &[]));
        assert!(kept.same_up_hosts(&snapshot));
    }
}
