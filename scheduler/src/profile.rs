//! A host's availability profile: what it has free from now on, as a step
//! function of time. Running jobs add steps when their time limits run out;
//! placements and reservations made during a pass subtract over their span.
//! Backfill asks it two questions: is this much free throughout a window,
//! and when is the earliest window that has it.

use crate::model::Resources;

/// Free resources on one host from `now_ms` on. `steps[i]` holds from its
/// time until the next step's time; the last step holds forever.
/// Steps a new profile has room for beyond its releases.
const STEPS_SPARE: usize = 5;

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
        releases.sort_by_key(|r| r.0);
        Profile::from_sorted(now_ms, free_now, &releases)
    }

    /// [`Profile::new`] from releases already in time order.
    pub fn from_sorted(now_ms: u64, free_now: Resources, releases: &[(u64, Resources)]) -> Profile {
        debug_assert!(releases.is_sorted_by_key(|r| r.0));
        let soonest_ms = now_ms.saturating_add(1);
        // Room for the few steps a pass's placements and reservations
        // split in, so that taking rarely reallocates.
        let mut steps = Vec::with_capacity(releases.len() + STEPS_SPARE);
        steps.push((now_ms, free_now));
        let mut free = free_now;
        for &(at_ms, freed) in releases {
            // Clamping keeps the order: `max` with a constant is monotone.
            let at_ms = at_ms.max(soonest_ms);
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
    ///
    /// One sweep over the steps, O(steps): when the window from a candidate
    /// meets a step that lacks `need`, every candidate up to that step
    /// would meet it too, so the next candidate is the step after it.
    pub fn earliest(&self, need: Resources, from_ms: u64, duration_ms: Option<u64>) -> Option<u64> {
        let first = self.step_at(from_ms);
        earliest_in(
            self.steps[first..].iter().copied(),
            need,
            from_ms,
            duration_ms,
        )
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

    /// Gives `freed` back over `[from_ms, until_ms)`: the inverse of
    /// [`Profile::take`], for a running job stopped before its end.
    pub fn give(&mut self, freed: Resources, from_ms: u64, until_ms: Option<u64>) {
        let start = self.split_at(from_ms);
        let end = match until_ms {
            Some(u) => self.split_at(u),
            None => self.steps.len(),
        };
        for step in &mut self.steps[start..end] {
            step.1 = step.1.saturating_add(freed);
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

/// [`Profile::earliest`] over `steps`, the first of which holds at
/// `from_ms`: one forward sweep, so it also runs over steps that were never
/// stored (a host's running jobs' releases, see [`steps_of`]).
pub fn earliest_in(
    steps: impl Iterator<Item = (u64, Resources)>,
    need: Resources,
    from_ms: u64,
    duration_ms: Option<u64>,
) -> Option<u64> {
    let mut start_ms = from_ms;
    // The step being looked at is the candidate's own (its window always
    // includes it) rather than a later one.
    let mut first_of_window = true;
    // The last step lacked `need`: the next step's time is the candidate.
    let mut restart = false;
    for (at_ms, free) in steps {
        if restart {
            start_ms = at_ms;
            first_of_window = true;
            restart = false;
        }
        let until_ms = duration_ms.map(|d| start_ms.saturating_add(d));
        if !first_of_window && until_ms.is_some_and(|u| at_ms >= u) {
            return Some(start_ms);
        }
        if need.within(free) {
            first_of_window = false;
        } else {
            restart = true;
        }
    }
    (!restart).then_some(start_ms)
}

/// The steps [`Profile::from_sorted`] would store for `free_now` at
/// `now_ms` and `releases` (in time order), made as they are read: what a
/// pass that never takes room on a host needs to know of it.
pub fn steps_of(
    now_ms: u64,
    free_now: Resources,
    releases: &[(u64, Resources)],
) -> impl Iterator<Item = (u64, Resources)> + '_ {
    let soonest_ms = now_ms.saturating_add(1);
    let mut free = free_now;
    let mut i = 0;
    let mut first = true;
    std::iter::from_fn(move || {
        if first {
            first = false;
            return Some((now_ms, free_now));
        }
        let at_ms = releases.get(i)?.0.max(soonest_ms);
        // Releases at the same (clamped) time are one step.
        while let Some(&(t, freed)) = releases.get(i) {
            if t.max(soonest_ms) != at_ms {
                break;
            }
            free = free.saturating_add(freed);
            i += 1;
        }
        Some((at_ms, free))
    })
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

    /// The sweep answers as trying every candidate start in turn would.
    #[test]
    fn earliest_matches_trying_every_start() {
        let mut p = Profile::new(
            0,
            r(1),
            vec![(100, r(2)), (300, r(1)), (600, r(4)), (900, r(1))],
        );
        p.take(r(3), 650, Some(800));
        p.take(r(2), 350, Some(450));
        for need in 0..=10 {
            for from_ms in [0, 50, 100, 320, 640, 700, 1_000] {
                for duration_ms in [None, Some(0), Some(1), Some(100), Some(250), Some(5_000)] {
                    let first = p.step_at(from_ms);
                    let direct = std::iter::once(from_ms)
                        .chain(p.steps[first + 1..].iter().map(|s| s.0))
                        .find(|&t| p.holds(r(need), t, duration_ms));
                    assert_eq!(
                        p.earliest(r(need), from_ms, duration_ms),
                        direct,
                        "need {need} from {from_ms} for {duration_ms:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn steps_made_as_read_are_the_stored_ones() {
        let releases = [
            (500, r(1)),
            (900, r(2)),
            (1_000, r(1)),
            (1_000, r(3)),
            (1_001, r(1)),
            (4_000, r(2)),
        ];
        for now_ms in [0, 999, 1_000, 2_000, 5_000] {
            let stored = Profile::from_sorted(now_ms, r(1), &releases);
            let made: Vec<(u64, Resources)> = steps_of(now_ms, r(1), &releases).collect();
            assert_eq!(made, stored.steps, "now {now_ms}");
            for need in 0..=11 {
                for duration_ms in [None, Some(0), Some(1), Some(2_000)] {
                    assert_eq!(
                        earliest_in(
                            steps_of(now_ms, r(1), &releases),
                            r(need),
                            now_ms,
                            duration_ms
                        ),
                        stored.earliest(r(need), now_ms, duration_ms),
                        "now {now_ms} need {need} for {duration_ms:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn overdue_releases_count_from_just_after_now() {
        let p = Profile::new(1_000, r(0), vec![(500, r(4))]);
        assert_eq!(p.free_now(), r(0));
        assert_eq!(p.earliest(r(4), 1_000, None), Some(1_001));
    }
}
