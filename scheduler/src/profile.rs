//! A host's availability profile: what it has free from now on, as a step
//! function of time. Running jobs add steps when their time limits run out;
//! placements and reservations made during a pass subtract over their span.
//! Backfill asks it two questions: is this much free throughout a window,
//! and when is the earliest window that has it.

use crate::model::Resources;

/// Free resources on one host from `now_ms` on. `steps[i]` holds from its
/// time until the next step's time; the last step holds forever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    steps: Vec<(u64, Resources)>,
}

impl Profile {
    /// `free_now` from `now_ms`, plus `releases` (time, resources freed then)
    /// from running jobs that are known to end. A release due at or before
    /// `now_ms` belongs to a job past its limit that has not exited yet: it
    /// is counted one millisecond from now, so nothing is promised room that
    /// is still taken.
    pub fn new(now_ms: u64, free_now: Resources, mut releases: Vec<(u64, Resources)>) -> Profile {
        let soonest_ms = now_ms.saturating_add(1);
        for release in releases.iter_mut() {
            release.0 = release.0.max(soonest_ms);
        }
        releases.sort_by_key(|r| r.0);
        let mut steps = Vec::with_capacity(releases.len() + 1);
        steps.push((now_ms, free_now));
        let mut free = free_now;
        for (at_ms, freed) in releases {
            free = free.saturating_add(freed);
            match steps.last_mut() {
                Some(last) if last.0 == at_ms => last.1 = free,
                _ => steps.push((at_ms, free)),
            }
        }
        Profile { steps }
    }

    /// Free at the start of the profile (now).
    pub fn free_now(&self) -> Resources {
        self.steps.first().map(|s| s.1).unwrap_or_default()
    }

    /// Index of the step that holds at `at_ms`.
    fn step_at(&self, at_ms: u64) -> usize {
        self.steps
            .partition_point(|s| s.0 <= at_ms)
            .saturating_sub(1)
    }

    /// The least free, component by component, over `[from_ms, until_ms)`;
    /// `None` for `until_ms` is forever.
    pub fn min_free(&self, from_ms: u64, until_ms: Option<u64>) -> Resources {
        let first = self.step_at(from_ms);
        let mut least = self.steps[first].1;
        for &(at_ms, free) in &self.steps[first + 1..] {
            if until_ms.is_some_and(|u| at_ms >= u) {
                break;
            }
            least = least.component_min(free);
        }
        least
    }

    /// True when `need` is free throughout `[from_ms, from_ms + duration)`.
    pub fn holds(&self, need: Resources, from_ms: u64, duration_ms: Option<u64>) -> bool {
        let until_ms = duration_ms.map(|d| from_ms.saturating_add(d));
        need.within(self.min_free(from_ms, until_ms))
    }

    /// The earliest time at or after `from_ms` from which `need` is free for
    /// `duration_ms` (forever when `None`); `None` when never. Only step
    /// times can start such a window, so only they are tried.
    pub fn earliest(&self, need: Resources, from_ms: u64, duration_ms: Option<u64>) -> Option<u64> {
        let first = self.step_at(from_ms);
        std::iter::once(from_ms)
            .chain(self.steps[first + 1..].iter().map(|s| s.0))
            .find(|&t| self.holds(need, t, duration_ms))
    }

    /// Takes `used` out of the profile over `[from_ms, until_ms)`.
    pub fn take(&mut self, used: Resources, from_ms: u64, until_ms: Option<u64>) {
        let start = self.split_at(from_ms);
        let end = match until_ms {
            Some(u) => self.split_at(u),
            None => self.steps.len(),
        };
        for step in &mut self.steps[start..end] {
            step.1 = step.1.saturating_sub(used);
        }
    }

    /// Makes sure a step begins exactly at `at_ms` and returns its index.
    fn split_at(&mut self, at_ms: u64) -> usize {
        let i = self.step_at(at_ms);
        if self.steps[i].0 == at_ms {
            return i;
        }
        if at_ms < self.steps[i].0 {
            // Before the profile's start: nothing to split; clamp to it.
            return i;
        }
        let free = self.steps[i].1;
        self.steps.insert(i + 1, (at_ms, free));
        i + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpus: u32) -> Resources {
        Resources::cpu_mem(cpus, 0)
    }

    #[test]
    fn releases_raise_the_free_level() {
        let p = Profile::new(0, r(0), vec![(200, r(2)), (100, r(1)), (100, r(1))]);
        assert_eq!(p.free_now(), r(0));
        assert_eq!(p.min_free(150, None), r(2));
        assert_eq!(p.earliest(r(2), 0, Some(10)), Some(100));
        assert_eq!(p.earliest(r(4), 0, None), Some(200));
        assert_eq!(p.earliest(r(5), 0, None), None);
    }

    #[test]
    fn taking_a_span_leaves_room_around_it() {
        let mut p = Profile::new(0, r(4), vec![]);
        p.take(r(4), 100, Some(400));
        assert!(p.holds(r(4), 0, Some(100)));
        assert!(!p.holds(r(4), 0, Some(101)));
        assert!(!p.holds(r(1), 50, None));
        assert_eq!(p.earliest(r(4), 0, Some(200)), Some(400));
        assert_eq!(p.earliest(r(1), 0, Some(100)), Some(0));
    }

    #[test]
    fn overdue_releases_count_from_just_after_now() {
        let p = Profile::new(1_000, r(0), vec![(500, r(4))]);
        assert_eq!(p.free_now(), r(0));
        assert_eq!(p.earliest(r(4), 1_000, None), Some(1_001));
    }
}
