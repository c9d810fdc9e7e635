//! A cheap test that a pass could start anything: a trace replay without
//! event lines skips the passes where it cannot (their outcome is known).

use berth_scheduler::model::Resources;
use berth_scheduler::pass::Shape;

/// How many hosts have at least so many CPUs free: counted by value where
/// free CPUs take few values (a sort cost more than the rest of the check
/// in a trace replay), else sorted.
enum RoomyHosts {
    /// `[c]`: hosts with at least `c` CPUs free.
    AtLeast(Vec<usize>),
    /// Free CPUs, most first.
    Sorted(Vec<u32>),
}

impl RoomyHosts {
    fn new(mut free_cpus: Vec<u32>) -> RoomyHosts {
        let most = free_cpus.iter().copied().max().unwrap_or(0) as usize;
        if most > 2 * free_cpus.len() + 64 {
            free_cpus.sort_unstable_by(|a, b| b.cmp(a));
            return RoomyHosts::Sorted(free_cpus);
        }
        let mut at_least = vec![0usize; most + 2];
        for &c in &free_cpus {
            at_least[c as usize] += 1;
        }
        for c in (0..=most).rev() {
            at_least[c] += at_least[c + 1];
        }
        RoomyHosts::AtLeast(at_least)
    }

    fn with_at_least(&self, cpus: u32) -> usize {
        match self {
            RoomyHosts::AtLeast(at_least) => at_least.get(cpus as usize).copied().unwrap_or(0),
            RoomyHosts::Sorted(free) => free.partition_point(|&c| c >= cpus),
        }
    }
}

/// A host as the check sees it: all it has, and what is allocated on it.
pub(super) struct HostRoom {
    pub total: Resources,
    pub allocated: Resources,
}

impl HostRoom {
    fn free(&self) -> Resources {
        self.total.saturating_sub(self.allocated)
    }
}

/// A necessary condition for any start now: some pending job has, on
/// one of its paths, enough up hosts whose free CPUs cover its per-host
/// ask, and its ask is within the most any up host has free (idle
/// hosts only, for an exclusive job). False means a pass would start
/// nothing. Costs one count of the hosts by free CPUs and a look at each
/// pending job's paths, without building the pass's snapshot.
pub(super) fn some_job_may_fit<'s>(
    up_hosts: &[HostRoom],
    mut pending_paths: impl Iterator<Item = &'s [Shape]>,
) -> bool {
    let mut free_cpus = Vec::with_capacity(up_hosts.len());
    let mut idle = 0usize;
    for h in up_hosts {
        free_cpus.push(h.total.cpus.saturating_sub(h.allocated.cpus));
        idle += usize::from(h.allocated.is_zero());
    }
    let roomy_hosts = RoomyHosts::new(free_cpus);
    // The most of each resource any up host has free, walked for only
    // when a job that passes the CPU count asks for more than CPUs (a
    // trace's jobs never do).
    let mut most_free: Option<Resources> = None;
    pending_paths.any(|paths| {
        paths.iter().any(|shape| {
            let wanted = shape.hosts_needed();
            if shape.exclusive {
                return idle >= wanted;
            }
            let need = shape.per_host;
            if roomy_hosts.with_at_least(need.cpus) < wanted {
                return false;
            }
            // A host with `need.cpus` free exists (wanted >= 1).
            if (Resources { cpus: 0, ..need }).is_zero() {
                return true;
            }
            let most = *most_free.get_or_insert_with(|| {
                up_hosts
                    .iter()
                    .fold(Resources::default(), |m, h| m.component_max(h.free()))
            });
            need.within(most)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::RoomyHosts;

    /// Both forms count what a plain count over the hosts does.
    #[test]
    fn roomy_hosts_count_alike_by_value_and_sorted() {
        for free in [
            vec![],
            vec![0, 1, 1, 0, 1],
            vec![4, 0, 2, 2, 7, 1],
            vec![500, 3, 0],
        ] {
            let roomy = RoomyHosts::new(free.clone());
            if free.contains(&500) {
                assert!(matches!(roomy, RoomyHosts::Sorted(_)));
            }
            for cpus in 0..=600 {
                let want = free.iter().filter(|&&c| c >= cpus).count();
                assert_eq!(roomy.with_at_least(cpus), want, "{free:?} at least {cpus}");
            }
        }
    }
}
