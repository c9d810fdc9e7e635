//! The hosts a pass can place on: up hosts grouped into classes of equal
//! static attributes (inventory, GPU model, emulator, features,
//! partitions), each host's availability profile, and per class an index
//! of hosts by free room now, so that finding room looks only at hosts of
//! the right kind with enough free, never at every host per job.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::fit::eligible;
use crate::fxhash::FxMap;
use crate::model::{EmulatorInventory, Host, HostState, Resources};
use crate::pass::{need_on, Shape, Snapshot};
use crate::profile::Profile;

/// Hosts with the same static attributes.
struct HostClass {
    /// Its first host, standing for all (eligibility depends only on what
    /// the class shares).
    rep: usize,
    total: Resources,
    members: Vec<usize>,
    /// (free GPUs if the class has GPUs else 0, free CPUs, host): hosts
    /// in best-fit order, fullest first.
    free: BTreeSet<(u32, u32, usize)>,
    has_gpus: bool,
}

impl HostClass {
    fn key(&self, free: Resources, host: usize) -> (u32, u32, usize) {
        let gpus = if self.has_gpus { free.gpus } else { 0 };
        (gpus, free.cpus, host)
    }
}

/// What a static eligibility question is keyed on: the partition and the
/// shape's kind requirements, borrowed from the snapshot.
type EligibilityKey<'a> = (Option<&'a str>, &'a str, &'a str, &'a str, &'a [String]);

pub(crate) struct Pool<'a> {
    /// Up hosts, by name, borrowed from the snapshot (a pass copies no
    /// host).
    hosts: Vec<&'a Host>,
    /// By host: what is allocated now, this pass's placements included.
    allocated: Vec<Resources>,
    profiles: Vec<Profile>,
    class_of: Vec<usize>,
    classes: Vec<HostClass>,
    eligible_cache: HashMap<EligibilityKey<'a>, Vec<usize>>,
    /// Host examinations made so far (the pass budget counts them).
    pub host_checks: u64,
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

impl<'a> Pool<'a> {
    pub fn new(snapshot: &'a Snapshot, now_ms: u64) -> Pool<'a> {
        let mut hosts: Vec<&'a Host> = snapshot
            .hosts
            .iter()
            .filter(|h| h.state == HostState::Up)
            .collect();
        hosts.sort_by(|a, b| a.name.cmp(&b.name));
        let allocated: Vec<Resources> = hosts.iter().map(|h| h.allocated).collect();
        let index: FxMap<&str, usize> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name.as_str(), i))
            .collect();
        let mut releases: Vec<Vec<(u64, Resources)>> = vec![Vec::new(); hosts.len()];
        for job in &snapshot.running {
            let Some(end_ms) = job.end_ms else { continue };
            for host in &job.hosts {
                if let Some(&i) = index.get(host.as_str()) {
                    releases[i].push((end_ms, job.per_host));
                }
            }
        }
        let profiles: Vec<Profile> = hosts
            .iter()
            .zip(releases)
            .map(|(h, r)| Profile::new(now_ms, h.free(), r))
            .collect();
        // Classes in a stable order: smaller hosts first, so that a job
        // that fits on either kind takes the smaller one. Hosts of a kind
        // mostly sit together, so runs of equal keys go into the map at
        // once.
        let mut by_key: BTreeMap<ClassKey<'a>, Vec<usize>> = BTreeMap::new();
        let mut run: Option<(ClassKey<'a>, Vec<usize>)> = None;
        for (i, h) in hosts.iter().enumerate() {
            let key = class_key(h);
            match &mut run {
                Some((k, members)) if *k == key => members.push(i),
                _ => {
                    if let Some((k, members)) = run.replace((key, vec![i])) {
                        by_key.entry(k).or_default().extend(members);
                    }
                }
            }
        }
        if let Some((k, members)) = run {
            by_key.entry(k).or_default().extend(members);
        }
        let mut class_of = vec![0; hosts.len()];
        let mut classes = Vec::with_capacity(by_key.len());
        for (c, members) in by_key.into_values().enumerate() {
            let rep = members[0];
            let total = hosts[rep].inventory.resources();
            let mut class = HostClass {
                rep,
                total,
                members: Vec::new(),
                free: BTreeSet::new(),
                has_gpus: total.gpus > 0,
            };
            for &i in &members {
                class_of[i] = c;
                class.free.insert(class.key(profiles[i].free_now(), i));
            }
            class.members = members;
            classes.push(class);
        }
        Pool {
            hosts,
            allocated,
            profiles,
            class_of,
            classes,
            eligible_cache: HashMap::new(),
            host_checks: 0,
        }
    }

    /// The classes whose hosts `shape` may run on in `partition` and that
    /// could hold it if empty.
    pub fn eligible_classes(&mut self, shape: &'a Shape, partition: Option<&'a str>) -> Vec<usize> {
        let key: EligibilityKey<'a> = (
            partition,
            shape.gpu_type.as_str(),
            shape.emu_kind.as_str(),
            shape.emu_group.as_str(),
            shape.features.as_slice(),
        );
        let statically = match self.eligible_cache.get(&key) {
            Some(c) => c,
            None => {
                let found: Vec<usize> = (0..self.classes.len())
                    .filter(|&c| {
                        eligible(self.hosts[self.classes[c].rep], shape, partition).is_ok()
                    })
                    .collect();
                self.eligible_cache.entry(key).or_insert(found)
            }
        };
        statically
            .iter()
            .copied()
            .filter(|&c| shape.per_host.within(self.classes[c].total))
            .collect()
    }

    /// How many up hosts of `classes` there are.
    pub fn hosts_in(&self, classes: &[usize]) -> usize {
        classes.iter().map(|&c| self.classes[c].members.len()).sum()
    }

    /// Hosts of `classes` that can take `shape` now and keep it for
    /// `duration_ms` without touching room promised to a reservation, in
    /// name order. Looks only at hosts with enough free now, fullest first.
    /// `allowed` restricts the hosts further (e.g. to those a group already
    /// occupies).
    pub fn room_now(
        &mut self,
        shape: &Shape,
        classes: &[usize],
        now_ms: u64,
        duration_ms: Option<u64>,
        allowed: Option<&dyn Fn(usize) -> bool>,
    ) -> Option<Vec<usize>> {
        let wanted = shape.hosts_needed();
        let mut chosen = Vec::with_capacity(wanted);
        for &c in classes {
            let class = &self.classes[c];
            let need = if shape.exclusive {
                class.total
            } else {
                shape.per_host
            };
            let from = if class.has_gpus {
                (need.gpus, 0, 0)
            } else {
                (0, need.cpus, 0)
            };
            for &(_, cpus_free, i) in class.free.range(from..) {
                self.host_checks += 1;
                if cpus_free < need.cpus {
                    continue;
                }
                if allowed.is_some_and(|ok| !ok(i)) {
                    continue;
                }
                if !self.profiles[i].holds(need, now_ms, duration_ms) {
                    continue;
                }
                // `fits` on an up host: the check `apply` repeats.
                let free_now = self.hosts[i]
                    .inventory
                    .resources()
                    .saturating_sub(self.allocated[i]);
                if !need.within(free_now) {
                    continue;
                }
                chosen.push(i);
                if chosen.len() == wanted {
                    chosen.sort_unstable();
                    return Some(chosen);
                }
            }
        }
        None
    }

    /// The earliest time enough hosts of `classes` can hold `shape`
    /// together for `duration_ms`, and which. Each host's own earliest
    /// start is a candidate; the first candidate at which enough hosts hold
    /// the job wins (a host's room can close again at a later reservation,
    /// so each is checked at the candidate time itself).
    pub fn earliest_room(
        &mut self,
        shape: &Shape,
        classes: &[usize],
        now_ms: u64,
        duration_ms: Option<u64>,
    ) -> Option<(u64, Vec<usize>)> {
        let wanted = shape.hosts_needed();
        let mut starts: Vec<(u64, usize, Resources)> = Vec::new();
        for &c in classes {
            for &i in &self.classes[c].members {
                let Some(need) = need_on(self.hosts[i], shape.per_host, shape.exclusive) else {
                    continue;
                };
                self.host_checks += 1;
                if let Some(at_ms) = self.profiles[i].earliest(need, now_ms, duration_ms) {
                    starts.push((at_ms, i, need));
                }
            }
        }
        starts.sort_unstable_by_key(|s| (s.0, s.1));
        for k in wanted.saturating_sub(1)..starts.len() {
            let at_ms = starts[k].0;
            let mut chosen: Vec<usize> = starts[..=k]
                .iter()
                .filter(|(_, i, need)| self.profiles[*i].holds(*need, at_ms, duration_ms))
                .map(|s| s.1)
                .take(wanted)
                .collect();
            if chosen.len() == wanted {
                chosen.sort_unstable();
                return Some((at_ms, chosen));
            }
        }
        None
    }

    /// Takes `shape`'s room on `hosts` over `[from_ms, from_ms + duration)`
    /// and returns what it takes per host (the whole host when exclusive).
    pub fn take(
        &mut self,
        shape: &Shape,
        hosts: &[usize],
        from_ms: u64,
        duration_ms: Option<u64>,
        now_ms: u64,
    ) -> Resources {
        let until_ms = duration_ms.map(|d| from_ms.saturating_add(d));
        let mut first_need = Resources::default();
        for (n, &i) in hosts.iter().enumerate() {
            let Some(need) = need_on(self.hosts[i], shape.per_host, shape.exclusive) else {
                continue;
            };
            if n == 0 {
                first_need = need;
            }
            let class = &mut self.classes[self.class_of[i]];
            let before = class.key(self.profiles[i].free_now(), i);
            self.profiles[i].take(need, from_ms, until_ms);
            if from_ms <= now_ms {
                self.allocated[i] = self.allocated[i].saturating_add(need);
            }
            let after = class.key(self.profiles[i].free_now(), i);
            if before != after {
                class.free.remove(&before);
                class.free.insert(after);
            }
        }
        first_need
    }

    pub fn names(&self, hosts: &[usize]) -> Vec<String> {
        hosts.iter().map(|&i| self.hosts[i].name.clone()).collect()
    }
}
