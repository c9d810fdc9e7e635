//! The hosts a pass can place on: up hosts grouped into classes of equal
//! static attributes (inventory, GPU model, emulator, features,
//! partitions; see [`HostLayout`]), each host's availability profile, and
//! per class an index of hosts by free room now, so that finding room looks
//! only at hosts of the right kind with enough free, never at every host
//! per job.

use std::borrow::Cow;

use crate::fit::eligible;
use crate::free_index::{FreeIndex, FreeKey};
use crate::fxhash::{same_str, FxMap};
use crate::layout::{search_by_name, HostClass, HostLayout};
use crate::model::{Host, Resources};
use crate::pass::{Shape, Snapshot};
use crate::profile::{earliest_in, steps_of, Profile};

/// What a static eligibility question is keyed on: the partition and the
/// shape's kind requirements, borrowed from the snapshot. `fit::eligible`
/// asks about the GPU type only when GPUs are asked and about the emulator
/// only when emulator units are, so both questions are part of the key.
type KindKey<'a> = (
    Option<&'a str>,
    bool,
    &'a str,
    bool,
    &'a str,
    &'a str,
    &'a [String],
);

fn kind_key<'a>(shape: &'a Shape, partition: Option<&'a str>) -> KindKey<'a> {
    (
        partition,
        shape.per_host.gpus > 0,
        shape.gpu_type.as_str(),
        shape.per_host.emu > 0,
        shape.emu_kind.as_str(),
        shape.emu_group.as_str(),
        shape.features.as_slice(),
    )
}

/// A [`KindKey`] in the map of kinds asked: compared with [`same_key`], as
/// most of its names are empty (see [`same_str`]).
#[derive(Clone, Copy)]
struct KindMapKey<'a>(KindKey<'a>);

impl PartialEq for KindMapKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        same_key(&self.0, &other.0)
    }
}

impl Eq for KindMapKey<'_> {}

impl std::hash::Hash for KindMapKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

fn same_key(a: &KindKey<'_>, b: &KindKey<'_>) -> bool {
    a.1 == b.1
        && a.3 == b.3
        && match (a.0, b.0) {
            (None, None) => true,
            (Some(x), Some(y)) => same_str(x, y),
            _ => false,
        }
        && same_str(a.2, b.2)
        && same_str(a.4, b.4)
        && same_str(a.5, b.5)
        && a.6.len() == b.6.len()
        && (a.6.is_empty() || a.6 == b.6)
}

pub(crate) struct Pool<'a> {
    /// Up hosts, by name, borrowed from the snapshot (a pass copies no
    /// host).
    hosts: Vec<&'a Host>,
    /// By host: what is allocated now, this pass's placements included.
    allocated: Vec<Resources>,
    profiles: Profiles,
    /// Which hosts are up and their classes (see [`HostLayout`]).
    layout: Cow<'a, HostLayout>,
    /// By class: (free GPUs if the class has GPUs else 0, free CPUs, host)
    /// of its hosts, in best-fit order, fullest first (`HostClass::key`).
    free: Vec<FreeIndex>,
    /// Kinds of placement asked so far (partition and kind requirements),
    /// by id: the classes statically eligible for each.
    kinds: Vec<Vec<usize>>,
    kind_ids: FxMap<KindMapKey<'a>, u32>,
    /// The last kind asked: neighbouring jobs mostly ask the same.
    last_kind: Option<(KindKey<'a>, u32)>,
    /// Host examinations made so far (the pass budget counts them).
    pub host_checks: u64,
}

/// Each up host's availability profile, built the first time a pass asks
/// about the host (most passes look at few hosts): until then a host is
/// its free room now and its running jobs' releases.
struct Profiles {
    now_ms: u64,
    built: Vec<Option<Profile>>,
    /// Whether host `i`'s profile has had room taken (or given back) in
    /// this pass. One that has not is free room now plus releases, so it
    /// never falls: a host that holds a need from some time on holds it
    /// at every later time too.
    changed: Vec<bool>,
    /// A later room taken on host `i` (need, from, until) and not yet
    /// applied to a profile, as its profile is not built: a reservation
    /// on a host nothing else changed in this pass. Most are never looked
    /// at again; [`Profiles::get`] applies it when one is.
    deferred: Vec<Option<Deferred>>,
    free_now: Vec<Resources>,
    /// Host `i`'s releases (end time, room freed) are
    /// `releases[offsets[i]..offsets[i + 1]]`, in time order.
    releases: Vec<(u64, Resources)>,
    offsets: Vec<usize>,
}

/// Room taken later than now on a host whose profile is not built yet.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    need: Resources,
    from_ms: u64,
    until_ms: Option<u64>,
}

impl Profiles {
    /// O(running jobs × their hosts + hosts): no allocation per host.
    fn new(
        snapshot: &Snapshot,
        hosts: &[&Host],
        kept: Option<&HostLayout>,
        now_ms: u64,
    ) -> Profiles {
        let placements: usize = snapshot.running.iter().map(|r| r.hosts.len()).sum();
        let mut placed: Vec<(usize, u64, Resources)> = Vec::with_capacity(placements);
        // A gang's host is first looked for right after its previous one
        // (they are mostly neighbours in name order); other hosts in the
        // kept layout's name index, or, for a layout made for this pass, in
        // a map of every name when there are many running jobs for the
        // hosts, else by binary search in `hosts` (in name order). With few
        // jobs, building the map each pass cost more than all the searches
        // (a trace replay on 100 hosts); with many, less (`bench_snapshot`'s
        // 10,000 hosts with about five running jobs each). Only the speed
        // depends on the choice.
        let log2_hosts = usize::BITS - hosts.len().leading_zeros();
        let many =
            snapshot.running.len() * (log2_hosts.saturating_sub(2) as usize) > 4 * hosts.len();
        let index: Option<FxMap<&str, usize>> = (many && kept.is_none()).then(|| {
            hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (h.name.as_str(), i))
                .collect()
        });
        for job in &snapshot.running {
            let Some(end_ms) = job.end_ms else { continue };
            let mut next: Option<usize> = None;
            for host in &job.hosts {
                let found = match (next.and_then(|n| hosts.get(n)), &index) {
                    (Some(h), _) if h.name == *host => next,
                    (_, Some(index)) => index.get(host.as_str()).copied(),
                    (_, None) => match kept {
                        Some(layout) => layout.find(hosts, host),
                        None => search_by_name(hosts, host),
                    },
                };
                if let Some(i) = found {
                    placed.push((i, end_ms, job.per_host));
                    next = Some(i + 1);
                }
            }
        }
        // Counting sort by host, then each host's few releases by time.
        let mut offsets = vec![0usize; hosts.len() + 1];
        for &(i, ..) in &placed {
            offsets[i + 1] += 1;
        }
        for i in 0..hosts.len() {
            offsets[i + 1] += offsets[i];
        }
        let mut next = offsets.clone();
        let mut releases = vec![(0u64, Resources::default()); placed.len()];
        for (i, end_ms, freed) in placed {
            releases[next[i]] = (end_ms, freed);
            next[i] += 1;
        }
        for i in 0..hosts.len() {
            releases[offsets[i]..offsets[i + 1]].sort_unstable_by_key(|r| r.0);
        }
        Profiles {
            now_ms,
            built: vec![None; hosts.len()],
            changed: vec![false; hosts.len()],
            deferred: vec![None; hosts.len()],
            free_now: hosts.iter().map(|h| h.free()).collect(),
            releases,
            offsets,
        }
    }

    /// [`Profile::earliest`] of host `i`. A host the pass has not taken
    /// room on is read from its releases as they stand, without building
    /// its profile (finding the head's room reads every host).
    fn earliest(
        &mut self,
        i: usize,
        need: Resources,
        from_ms: u64,
        duration_ms: Option<u64>,
    ) -> Option<u64> {
        if !self.changed[i] && from_ms == self.now_ms {
            // Unchanged, its free room never falls (see `changed`): the
            // first step that has `need` starts a window of any length.
            let releases = &self.releases[self.offsets[i]..self.offsets[i + 1]];
            let at_ms = first_step_with(self.now_ms, self.free_now[i], releases, need);
            debug_assert_eq!(
                at_ms,
                earliest_in(
                    steps_of(self.now_ms, self.free_now[i], releases),
                    need,
                    from_ms,
                    duration_ms
                )
            );
            return at_ms;
        }
        self.get(i).earliest(need, from_ms, duration_ms)
    }

    /// Host `i`'s profile, to take room from or give it back to.
    fn change(&mut self, i: usize) -> &mut Profile {
        self.changed[i] = true;
        self.get(i)
    }

    /// Whether host `i`, whose earliest start for `need` is at or before
    /// `at_ms`, holds it from `at_ms` for `duration_ms`: always, while its
    /// profile is unchanged (see `changed`), which then is not built.
    fn holds_after_earliest(
        &mut self,
        i: usize,
        need: Resources,
        at_ms: u64,
        duration_ms: Option<u64>,
    ) -> bool {
        if !self.changed[i] {
            debug_assert!(self.fresh(i).holds(need, at_ms, duration_ms));
            return true;
        }
        self.get(i).holds(need, at_ms, duration_ms)
    }

    /// [`Profile::holds`] of host `i`. A host whose profile this pass has
    /// not changed has, from now on, its free room now or more (see
    /// `changed`): it holds `need` from now for any time exactly when it
    /// has it free now, and its profile is not built to say so. One with
    /// only a deferred reservation is read the same way (see
    /// [`Profiles::least_free_with`]).
    fn holds(&mut self, i: usize, need: Resources, from_ms: u64, duration_ms: Option<u64>) -> bool {
        if from_ms == self.now_ms && self.built[i].is_none() {
            let until_ms = duration_ms.map(|d| from_ms.saturating_add(d));
            let least = match self.deferred[i] {
                None if !self.changed[i] => Some(self.free_now[i]),
                Some(taken) => Some(self.least_free_with(i, taken, until_ms)),
                None => None,
            };
            if let Some(least) = least {
                let holds = need.within(least);
                debug_assert_eq!(holds, self.fresh(i).holds(need, from_ms, duration_ms));
                return holds;
            }
        }
        self.get(i).holds(need, from_ms, duration_ms)
    }

    /// The least host `i` has free over `[now, until_ms)` with `taken` out
    /// of its unchanged profile. That profile never falls, so its least
    /// over the window is now, and its least over the part `taken` covers
    /// is where that part begins.
    fn least_free_with(&self, i: usize, taken: Deferred, until_ms: Option<u64>) -> Resources {
        let free_now = self.free_now[i];
        if until_ms.is_some_and(|u| u <= taken.from_ms) {
            return free_now;
        }
        let releases = &self.releases[self.offsets[i]..self.offsets[i + 1]];
        // Releases clamp to just after now; `taken.from_ms` is later still.
        let mut free_then = free_now;
        for &(at_ms, freed) in releases {
            if at_ms > taken.from_ms {
                break;
            }
            free_then = free_then.saturating_add(freed);
        }
        free_now.component_min(free_then.saturating_sub(taken.need))
    }

    /// Takes `need` over `[from_ms, until_ms)`, later than now, on host
    /// `i` without building its profile, where nothing else has changed
    /// it in this pass; false (and nothing done) otherwise.
    fn defer_take(
        &mut self,
        i: usize,
        need: Resources,
        from_ms: u64,
        until_ms: Option<u64>,
    ) -> bool {
        if from_ms <= self.now_ms || self.changed[i] || self.built[i].is_some() {
            return false;
        }
        self.changed[i] = true;
        self.deferred[i] = Some(Deferred {
            need,
            from_ms,
            until_ms,
        });
        true
    }

    /// Host `i`'s profile as [`Profiles::get`] makes it, without keeping
    /// it (debug checks use it so as not to change what is built).
    fn fresh(&self, i: usize) -> Profile {
        let releases = &self.releases[self.offsets[i]..self.offsets[i + 1]];
        let mut profile = Profile::from_sorted(self.now_ms, self.free_now[i], releases);
        if let Some(taken) = self.deferred[i] {
            profile.take(taken.need, taken.from_ms, taken.until_ms);
        }
        profile
    }

    /// Host `i`'s profile, built (with its deferred reservation in it) the
    /// first time it is asked for.
    fn get(&mut self, i: usize) -> &mut Profile {
        let profile = match self.built[i].take() {
            Some(profile) => profile,
            None => {
                let profile = self.fresh(i);
                self.deferred[i] = None;
                profile
            }
        };
        self.built[i].insert(profile)
    }
}

/// `class`'s free-room keys ([`HostClass::key`]) in order, to build its
/// index from, given each host's free room now by pool index. Free GPUs
/// and CPUs are at most the class's totals, so where those are few next to
/// its hosts (a trace's 1-CPU hosts: two values) one counting pass orders
/// them: members come in index order and it is stable. Else a comparison
/// sort. Sorting was a twelfth of a trace replay.
fn free_keys_sorted(class: &HostClass, free_now: &[Resources]) -> Vec<FreeKey> {
    let keys = class.members.iter().map(|&i| class.key(free_now[i], i));
    let cpu_values = class.total.cpus as usize + 1;
    let gpu_values = if class.has_gpus {
        class.total.gpus as usize + 1
    } else {
        1
    };
    let values = cpu_values.saturating_mul(gpu_values);
    if values > 2 * class.members.len() {
        let mut keys: Vec<FreeKey> = keys.collect();
        keys.sort_unstable();
        return keys;
    }
    debug_assert!(class.members.is_sorted());
    // A host's free room is within its class's totals (`Host::free`
    // saturates), so every key falls in a bucket.
    let bucket = |k: &FreeKey| k.0 as usize * cpu_values + k.1 as usize;
    let mut starts = vec![0usize; values + 1];
    // The keys are made twice, once per sweep: collecting them once costs
    // a vector more each pass, which was dearer (5.61 -> 5.68 G a replay).
    for k in keys.clone() {
        starts[bucket(&k) + 1] += 1;
    }
    for b in 0..values {
        starts[b + 1] += starts[b];
    }
    let mut sorted = vec![(0, 0, 0); class.members.len()];
    for k in keys {
        let at = &mut starts[bucket(&k)];
        sorted[*at] = k;
        *at += 1;
    }
    debug_assert!(sorted.is_sorted());
    sorted
}

/// The time of the first step of [`steps_of`]`(now_ms, free_now,
/// releases)` that has `need` free; `None` when none has.
fn first_step_with(
    now_ms: u64,
    free_now: Resources,
    releases: &[(u64, Resources)],
    need: Resources,
) -> Option<u64> {
    if need.within(free_now) {
        return Some(now_ms);
    }
    let mut free = free_now;
    for &(at_ms, freed) in releases {
        free = free.saturating_add(freed);
        if need.within(free) {
            // Later releases at the same time are in this step too; they
            // only add to it.
            return Some(at_ms.max(now_ms.saturating_add(1)));
        }
    }
    None
}

/// Host classes (indexes into the layout's), as a shape's eligible ones
/// are: mostly one class, held without a vector, since every job a pass
/// looks at asks for its classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Classes {
    One(usize),
    Many(Vec<usize>),
}

impl std::ops::Deref for Classes {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        match self {
            Classes::One(c) => std::slice::from_ref(c),
            Classes::Many(cs) => cs,
        }
    }
}

impl<'a> Pool<'a> {
    /// A pool that builds its own [`HostLayout`].
    #[cfg(test)]
    pub fn new(snapshot: &'a Snapshot, now_ms: u64) -> Pool<'a> {
        Pool::with_layout(snapshot, Cow::Owned(HostLayout::new(snapshot)), now_ms)
    }

    /// The pool of `snapshot`'s hosts laid out as `layout`, which must be
    /// what [`HostLayout::new`] makes of `snapshot` (debug builds check).
    pub fn with_layout(
        snapshot: &'a Snapshot,
        layout: Cow<'a, HostLayout>,
        now_ms: u64,
    ) -> Pool<'a> {
        debug_assert!(
            *layout == HostLayout::new(snapshot),
            "the layout given is not the snapshot's"
        );
        let hosts: Vec<&'a Host> = layout.up.iter().map(|&s| &snapshot.hosts[s]).collect();
        let allocated: Vec<Resources> = hosts.iter().map(|h| h.allocated).collect();
        // A layout the caller keeps finds hosts by its name index, made once.
        let kept = matches!(layout, Cow::Borrowed(_)).then_some(&*layout);
        let profiles = Profiles::new(snapshot, &hosts, kept, now_ms);
        let free = layout
            .classes
            .iter()
            .map(|class| FreeIndex::from_sorted(free_keys_sorted(class, &profiles.free_now)))
            .collect();
        Pool {
            hosts,
            allocated,
            profiles,
            layout,
            free,
            kinds: Vec::new(),
            kind_ids: FxMap::default(),
            last_kind: None,
            host_checks: 0,
        }
    }

    /// The id of the kind of placement `shape` asks in `partition`: two
    /// shapes with the same id are eligible on the same classes (before
    /// their sizes are compared). Ids are dense, from 0, within a pass.
    pub fn kind(&mut self, shape: &'a Shape, partition: Option<&'a str>) -> u32 {
        let key = kind_key(shape, partition);
        if let Some((last, id)) = &self.last_kind {
            if same_key(last, &key) {
                return *id;
            }
        }
        let id = match self.kind_ids.get(&KindMapKey(key)) {
            Some(&id) => id,
            None => {
                let found: Vec<usize> = (0..self.layout.classes.len())
                    .filter(|&c| {
                        eligible(self.hosts[self.layout.classes[c].rep], shape, partition).is_ok()
                    })
                    .collect();
                let id = u32::try_from(self.kinds.len()).unwrap_or(u32::MAX);
                self.kinds.push(found);
                self.kind_ids.insert(KindMapKey(key), id);
                id
            }
        };
        self.last_kind = Some((key, id));
        id
    }

    /// The classes whose hosts `shape` (of kind `kind`, from [`Pool::kind`])
    /// may run on and that could hold it if empty.
    pub fn eligible_classes(&self, kind: u32, shape: &Shape) -> Classes {
        let kinds = &self.kinds[kind as usize];
        let mut fit = kinds
            .iter()
            .copied()
            .filter(|&c| shape.per_host.within(self.layout.classes[c].total));
        match (fit.next(), fit.next()) {
            (None, _) => Classes::Many(Vec::new()),
            (Some(c), None) => Classes::One(c),
            (Some(a), Some(b)) => {
                let mut many = Vec::with_capacity(kinds.len());
                many.extend([a, b]);
                many.extend(fit);
                Classes::Many(many)
            }
        }
    }

    /// How many up hosts of `classes` there are.
    pub fn hosts_in(&self, classes: &[usize]) -> usize {
        classes
            .iter()
            .map(|&c| self.layout.classes[c].members.len())
            .sum()
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
            let Some(need) = self.class_need(c, shape) else {
                continue;
            };
            let class = &self.layout.classes[c];
            let from = if class.has_gpus {
                (need.gpus, 0, 0)
            } else {
                (0, need.cpus, 0)
            };
            for (_, cpus_free, i) in self.free[c].from(from) {
                self.host_checks += 1;
                if cpus_free < need.cpus {
                    continue;
                }
                if allowed.is_some_and(|ok| !ok(i)) {
                    continue;
                }
                // `fits` on an up host: the check `apply` repeats. First, as
                // it is cheap and the index orders hosts by GPUs and CPUs
                // only: many a host it offers lacks memory now.
                if !need.within(self.free_physical(i)) {
                    continue;
                }
                if !self.profiles.holds(i, need, now_ms, duration_ms) {
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
    /// so each is checked at the candidate time itself). Of the hosts that
    /// hold it then, those whose own earliest start is latest are chosen.
    pub fn earliest_room(
        &mut self,
        shape: &Shape,
        classes: &[usize],
        now_ms: u64,
        duration_ms: Option<u64>,
    ) -> Option<(u64, Vec<usize>)> {
        let wanted = shape.hosts_needed();
        // (earliest start, host): kept small, as sorting them is much of
        // this function; each host's need is looked up again when tried.
        let mut starts: Vec<(u64, usize)> = Vec::with_capacity(self.hosts_in(classes));
        for &c in classes {
            // A class's hosts have one inventory, so one need.
            let Some(need) = self.class_need(c, shape) else {
                continue;
            };
            for &i in &self.layout.classes[c].members {
                self.host_checks += 1;
                if let Some(at_ms) = self.profiles.earliest(i, need, now_ms, duration_ms) {
                    starts.push((at_ms, i));
                }
            }
        }
        if wanted == 0 || starts.len() < wanted {
            return None;
        }
        // The candidates are tried in time order, and the first is mostly
        // the one that wins: only the hosts at or before the `wanted`-th
        // earliest start are sorted first (a selection finds them); the
        // rest are sorted only when that candidate fails. Either way the
        // order walked is the fully sorted one.
        let (_, &mut (first_ms, _), _) = starts.select_nth_unstable(wanted - 1);
        let mut by_first = wanted;
        for k in wanted..starts.len() {
            if starts[k].0 == first_ms {
                starts.swap(k, by_first);
                by_first += 1;
            }
        }
        starts[..by_first].sort_unstable();
        let mut chosen: Vec<usize> = Vec::with_capacity(wanted);
        for k in wanted - 1..starts.len() {
            if k == by_first {
                starts[by_first..].sort_unstable();
            }
            let at_ms = starts[k].0;
            // Of a run of equal times only the last needs trying: where an
            // earlier one finds enough hosts, the first `wanted` that hold
            // are the same ones.
            if starts.get(k + 1).is_some_and(|s| s.0 == at_ms) {
                continue;
            }
            // Which hosts hold it at `at_ms` decides whether it fits; which
            // of them it takes decides what is left for backfill. The hosts
            // that free last are taken first (in index order among equal
            // times): a host free now stays free for jobs that fit before
            // it or beside it, as textbook EASY's "extra nodes" are. A job
            // that starts now finds every candidate free now, so this is
            // index order.
            chosen.clear();
            let mut end = k + 1;
            while end > 0 {
                let group_ms = starts[end - 1].0;
                let mut begin = end - 1;
                while begin > 0 && starts[begin - 1].0 == group_ms {
                    begin -= 1;
                }
                for &(_, i) in &starts[begin..end] {
                    let Some(need) = self.class_need(self.layout.class_of[i], shape) else {
                        continue;
                    };
                    if self
                        .profiles
                        .holds_after_earliest(i, need, at_ms, duration_ms)
                    {
                        chosen.push(i);
                        if chosen.len() == wanted {
                            chosen.sort_unstable();
                            return Some((at_ms, chosen));
                        }
                    }
                }
                end = begin;
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
            let Some(need) = self.class_need(self.layout.class_of[i], shape) else {
                continue;
            };
            if n == 0 {
                first_need = need;
            }
            // Room taken later than now changes neither what the host has
            // free now nor its place in the free-room index.
            if self.profiles.defer_take(i, need, from_ms, until_ms) {
                continue;
            }
            self.adjust(i, |profile, allocated| {
                profile.take(need, from_ms, until_ms);
                if from_ms <= now_ms {
                    *allocated = allocated.saturating_add(need);
                }
            });
        }
        first_need
    }

    /// The up hosts of `classes`, by index (for preemption's fit check).
    pub fn members_of(&self, classes: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = classes
            .iter()
            .flat_map(|&c| self.layout.classes[c].members.iter().copied())
            .collect();
        out.sort_unstable();
        out
    }

    /// Up host `i` as the snapshot has it.
    pub fn host(&self, i: usize) -> &'a Host {
        self.hosts[i]
    }

    /// The index of the up host named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        search_by_name(&self.hosts, name)
    }

    /// What host `i` has allocated now, this pass's placements included.
    pub fn allocated_now(&self, i: usize) -> Resources {
        self.allocated[i]
    }

    /// The least host `i` has free over `[from_ms, until_ms)` (`None`:
    /// forever), this pass's placements and reservations taken out.
    pub fn min_free(&mut self, i: usize, from_ms: u64, until_ms: Option<u64>) -> Resources {
        self.host_checks += 1;
        self.profiles.get(i).min_free(from_ms, until_ms)
    }

    /// Whether anything was placed on host `i` in this pass.
    pub fn taken_in_pass(&self, i: usize) -> bool {
        self.allocated[i] != self.hosts[i].allocated
    }

    /// Gives back on host `i` the room a running job holds until
    /// `until_ms` (`None`: it has no end), as if it stopped now; used to
    /// try an eviction, undone by [`Pool::retake`].
    pub fn give(&mut self, i: usize, held: Resources, now_ms: u64, until_ms: Option<u64>) {
        self.adjust(i, |profile, allocated| {
            profile.give(held, now_ms, until_ms);
            *allocated = allocated.saturating_sub(held);
        });
    }

    /// Undoes [`Pool::give`].
    pub fn retake(&mut self, i: usize, held: Resources, now_ms: u64, until_ms: Option<u64>) {
        self.adjust(i, |profile, allocated| {
            profile.take(held, now_ms, until_ms);
            *allocated = allocated.saturating_add(held);
        });
    }

    /// Changes host `i`'s profile and allocation, keeping its class's
    /// free-room index in step.
    fn adjust(&mut self, i: usize, change: impl FnOnce(&mut Profile, &mut Resources)) {
        let c = self.layout.class_of[i];
        let class = &self.layout.classes[c];
        let profile = self.profiles.change(i);
        let before = class.key(profile.free_now(), i);
        change(profile, &mut self.allocated[i]);
        let after = class.key(profile.free_now(), i);
        if before != after {
            self.free[c].replace(before, after);
        }
    }

    /// What host `i` has free now, this pass's placements included (what
    /// `fits` checks), whatever its profile promises to others.
    pub fn free_physical(&self, i: usize) -> Resources {
        self.hosts[i]
            .inventory
            .resources()
            .saturating_sub(self.allocated[i])
    }

    /// Whether host `i`'s profile has `need` free over `[from_ms, until_ms)`
    /// (`None`: forever).
    pub fn holds_between(
        &mut self,
        i: usize,
        need: Resources,
        from_ms: u64,
        until_ms: Option<u64>,
    ) -> bool {
        self.host_checks += 1;
        need.within(self.profiles.get(i).min_free(from_ms, until_ms))
    }

    /// The hosts of `classes`.
    pub fn members<'s>(&'s self, classes: &'s [usize]) -> impl Iterator<Item = usize> + 's {
        classes
            .iter()
            .flat_map(move |&c| self.layout.classes[c].members.iter().copied())
    }

    /// Takes all of host `i` out of its profile over `[from_ms, until_ms)`
    /// without allocating anything: an admin reservation's window, which
    /// jobs outside it may not overlap.
    pub fn block(&mut self, i: usize, from_ms: u64, until_ms: u64) {
        let total = self.hosts[i].inventory.resources();
        self.adjust(i, |profile, _| profile.take(total, from_ms, Some(until_ms)));
    }

    pub fn names(&self, hosts: &[usize]) -> Vec<String> {
        hosts.iter().map(|&i| self.hosts[i].name.clone()).collect()
    }

    /// [`Pool::names`] borrowed from the snapshot, for a check that keeps
    /// none of them.
    pub fn name_refs(&self, hosts: &[usize]) -> Vec<&'a str> {
        hosts.iter().map(|&i| self.hosts[i].name.as_str()).collect()
    }

    /// What `shape` takes on each host of class `c`: [`crate::pass::need_on`]
    /// of any of them, as a class's hosts share one inventory (the layout's
    /// invariant, checked every pass in debug builds).
    fn class_need(&self, c: usize, shape: &Shape) -> Option<Resources> {
        let total = self.layout.classes[c].total;
        if !shape.per_host.within(total) {
            return None;
        }
        Some(if shape.exclusive {
            total
        } else {
            shape.per_host
        })
    }

    /// `hosts` (pool indexes) as indexes into the snapshot's hosts.
    pub fn snapshot_indexes(&self, hosts: &[usize]) -> Vec<usize> {
        hosts.iter().map(|&i| self.layout.up[i]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Inventory;
    use crate::pass::RunningJob;

    /// A reservation later than now on a host nothing else changed is kept
    /// aside, not built into a profile, and still keeps backfill out of
    /// its window (debug builds also compare each answer with a built
    /// profile's).
    #[test]
    fn a_later_reservation_is_kept_aside_and_still_holds_its_room() {
        let cpus = Resources::cpu_mem(4, 0);
        let mut hosts: Vec<Host> = ["n1", "n2"]
            .iter()
            .map(|n| Host::new(n.to_string(), Inventory::cpu_mem(4, 0)))
            .collect();
        hosts[0].allocated = cpus;
        let snapshot = Snapshot {
            hosts,
            running: vec![RunningJob {
                hosts: vec!["n1".to_string()],
                per_host: cpus,
                end_ms: Some(10_000),
                ..RunningJob::default()
            }],
            ..Snapshot::default()
        };
        let mut pool = Pool::new(&snapshot, 0);
        let head = Shape {
            nodes: 2,
            ..Shape::one(cpus)
        };
        let all = [0];
        let (at_ms, chosen) = pool
            .earliest_room(&head, &all, 0, Some(5_000))
            .expect("room once n1 frees");
        assert_eq!((at_ms, chosen.as_slice()), (10_000, &[0, 1][..]));
        pool.take(&head, &chosen, at_ms, Some(5_000), 0);
        assert!(pool.profiles.deferred[1].is_some());
        assert!(pool.profiles.built[1].is_none());

        // Ends before the reservation begins: fits on n2, which stays unbuilt.
        let short = Shape::one(Resources::cpu_mem(2, 0));
        assert_eq!(
            pool.room_now(&short, &all, 0, Some(10_000), None),
            Some(vec![1])
        );
        assert!(pool.profiles.built[1].is_none());
        // Runs into it: no room, on any CPUs asked.
        assert_eq!(pool.room_now(&short, &all, 0, Some(10_001), None), None);
        assert_eq!(pool.room_now(&short, &all, 0, None, None), None);

        // Taking room now builds n2's profile with the reservation in it.
        pool.take(&short, &[1], 0, Some(10_000), 0);
        assert!(pool.profiles.deferred[1].is_none());
        assert_eq!(pool.min_free(1, 10_000, Some(15_000)), Resources::default());
        assert_eq!(pool.min_free(1, 15_000, None), cpus);
    }

    #[test]
    fn running_jobs_hold_the_hosts_they_name_until_they_end() {
        let cpus = Resources::cpu_mem(4, 0);
        let mut hosts: Vec<Host> = (1..=6)
            .map(|i| Host::new(format!("n{i}"), Inventory::cpu_mem(4, 0)))
            .collect();
        // Named out of order and with a gap, as a gang's hosts may be.
        let busy = ["n5", "n2", "n3"];
        for h in &mut hosts {
            if busy.contains(&h.name.as_str()) {
                h.allocated = cpus;
            }
        }
        let snapshot = Snapshot {
            hosts,
            running: vec![RunningJob {
                hosts: busy.iter().map(|h| h.to_string()).collect(),
                per_host: cpus,
                end_ms: Some(10_000),
                ..RunningJob::default()
            }],
            ..Snapshot::default()
        };
        let mut pool = Pool::new(&snapshot, 0);
        let gang = |nodes| Shape {
            nodes,
            ..Shape::one(cpus)
        };
        let all = [0];
        assert_eq!(
            pool.earliest_room(&gang(6), &all, 0, Some(1_000)),
            Some((10_000, vec![0, 1, 2, 3, 4, 5]))
        );
        assert_eq!(
            pool.earliest_room(&gang(3), &all, 0, Some(1_000)),
            Some((0, vec![0, 3, 5]))
        );
        assert_eq!(
            pool.earliest_room(&gang(4), &all, 0, Some(1_000))
                .map(|r| r.0),
            Some(10_000)
        );
    }
}
