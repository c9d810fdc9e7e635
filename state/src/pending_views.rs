//! The pass's view of each pending job, kept between passes.
//!
//! A snapshot used to rebuild every pending job's `PendingJob` from its
//! record each pass: a lookup in the job table, the spec's resource
//! strings parsed into shapes, its names copied. With a long queue that
//! was most of a pass (and all of it under the state's read lock, which
//! apply waits for). The part that follows from the record alone is now
//! made once per job and kept until the record changes; what depends on
//! other jobs (dependencies, room freed for it) is still judged each pass.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_scheduler::{JobId, PendingJob};

use super::{array, policy_apply, spec_rules, JobRecord};

/// Changed jobs past which [`PendingViews::forget`] drops every view:
/// several apply batches of submits under load.
const FORGET_ONE_BY_ONE_MAX: usize = 4_096;

/// One pending job's kept view.
#[derive(Debug, PartialEq)]
pub(super) struct PendingView {
    /// Without `dependency` and `room_freed`, which the snapshot sets;
    /// shared with the snapshots of the passes that see it unchanged.
    pub job: Arc<PendingJob>,
    /// It names dependencies, so the snapshot must judge them.
    pub has_dependency: bool,
    /// One of them is `singleton`.
    pub singleton: bool,
}

/// Views by job id, for pending jobs only (see [`PendingViews::sync`]).
///
/// Invariant: a kept view equals what [`view_of`] makes of the job's
/// record now. `SmState::apply` keeps it by forgetting the view of every
/// job it marks in `Dirty`, which every change to a record must do anyway
/// to be persisted; debug builds check it at every snapshot. Snapshots
/// taken inside `apply` neither read nor make views (a record may be
/// changed tentatively there): `SmState::snapshot_in_apply`.
#[derive(Debug, Default)]
pub(super) struct PendingViews {
    /// Shared, so a pass can take them without copying under the lock.
    views: BTreeMap<JobId, Arc<PendingView>>,
}

/// What the pass sees of `r` as far as its record alone decides.
pub(super) fn view_of(r: &JobRecord) -> PendingView {
    let spec = &r.job.spec;
    PendingView {
        job: Arc::new(PendingJob {
            id: r.job.id,
            submit_ms: r.job.submit_ms,
            held: r.job.held(),
            array: array::task_of(spec),
            admin_priority: r.job.admin_priority,
            ..policy_apply::pending_of(spec)
        }),
        has_dependency: !spec.dependency.is_empty(),
        singleton: spec_rules::has_singleton(spec),
    }
}

impl PendingViews {
    /// Drops the views of `changed` jobs. `apply` calls this after every
    /// command with all the jobs its apply batch has changed so far, so a
    /// long batch (a restarted node re-applying thousands of entries)
    /// drops every view at once instead of walking an ever longer set
    /// again per command; the next snapshot makes them anew.
    pub(super) fn forget(&mut self, changed: &BTreeSet<JobId>) {
        if self.views.is_empty() {
            return;
        }
        if changed.len() > FORGET_ONE_BY_ONE_MAX {
            self.views.clear();
            return;
        }
        for id in changed {
            self.views.remove(id);
        }
    }

    /// Makes the kept views exactly those of the `pending` jobs: one walk
    /// of both sorted id sequences side by side, then views made for the
    /// new jobs from their records and dropped for jobs no longer pending
    /// (their change dropped them already, unless a record was changed
    /// outside `apply`, as tests do).
    pub(super) fn sync(&mut self, pending: &BTreeSet<JobId>, jobs: &BTreeMap<JobId, JobRecord>) {
        let mut missing = Vec::new();
        let mut gone = Vec::new();
        let mut kept = self.views.keys().copied().peekable();
        for &id in pending {
            loop {
                match kept.peek().map(|k| k.cmp(&id)) {
                    Some(Ordering::Less) => {
                        gone.extend(kept.next());
                    }
                    Some(Ordering::Equal) => {
                        kept.next();
                        break;
                    }
                    Some(Ordering::Greater) | None => {
                        missing.push(id);
                        break;
                    }
                }
            }
        }
        gone.extend(kept);
        for id in gone {
            self.views.remove(&id);
        }
        for id in missing {
            if let Some(record) = jobs.get(&id) {
                self.views.insert(id, Arc::new(view_of(record)));
            }
        }
        debug_assert!(self.views.len() <= pending.len());
    }

    /// The views in job id order (the pending set's order).
    pub(super) fn iter(&self) -> impl Iterator<Item = &PendingView> + Clone {
        self.views.values().map(|v| &**v)
    }

    /// The views in job id order, shared; those of held jobs only when
    /// `with_held`.
    pub(super) fn shared(&self, with_held: bool) -> Vec<Arc<PendingView>> {
        self.views
            .values()
            .filter(|v| with_held || !v.job.held)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use berth_scheduler::{HostState, JobSpec, Reason};

    use super::super::test_support::{apply, submit};
    use super::super::{Dirty, SmState};
    use super::FORGET_ONE_BY_ONE_MAX;
    use crate::command::Command;

    fn kept(s: &SmState) -> usize {
        s.pending_views.lock().map_or(0, |v| v.views.len())
    }

    fn spec() -> JobSpec {
        JobSpec {
            user: "u".into(),
            command: "true".into(),
            cpus: 1,
            ..JobSpec::default()
        }
    }

    #[test]
    fn views_follow_the_queue_and_a_long_batch_drops_them_all() {
        let mut s = SmState::default();
        submit(&mut s, "a", spec());
        submit(&mut s, "b", spec());
        assert_eq!(kept(&s), 0, "made by the first snapshot, not by apply");
        assert_eq!(s.scheduler_snapshot(|_| HostState::Up).pending.len(), 2);
        assert_eq!(kept(&s), 2);
        apply(
            &mut s,
            Command::CancelJob {
                job_id: 1,
                now_ms: 20,
            },
        );
        assert_eq!(kept(&s), 1, "the cancelled job's view went with it");
        // An apply batch that has changed more jobs than that drops all.
        let mut dirty = Dirty {
            jobs: (1_000..1_000 + FORGET_ONE_BY_ONE_MAX as u64 + 1).collect::<BTreeSet<_>>(),
            ..Dirty::default()
        };
        s.apply(
            &Command::CancelJob {
                job_id: 99,
                now_ms: 30,
            },
            &mut dirty,
        );
        assert_eq!(kept(&s), 0);
        let pending = s.scheduler_snapshot(|_| HostState::Up).pending;
        assert_eq!(pending.iter().map(|p| p.id).collect::<Vec<_>>(), vec![2]);
        assert_eq!(kept(&s), 1);
    }

    #[test]
    fn snapshots_share_the_kept_views_but_of_jobs_held_by_dependencies() {
        let mut s = SmState::default();
        submit(&mut s, "a", spec());
        let waits = JobSpec {
            dependency: "afterok:1".into(),
            ..spec()
        };
        submit(&mut s, "b", waits);
        let first = s.scheduler_snapshot(|_| HostState::Up).pending;
        let second = s.scheduler_snapshot(|_| HostState::Up).pending;
        assert!(Arc::ptr_eq(&first[0], &second[0]), "job 1 is not copied");
        assert_eq!(first[0].dependency, None);
        // Job 2's view lacks the dependency, which each snapshot judges:
        // it gets a copy of its own that says so.
        assert!(!Arc::ptr_eq(&first[1], &second[1]));
        assert_eq!(first[1].dependency, Some(Reason::Dependency));
        let views = s
            .pending_views
            .lock()
            .map(|v| v.shared(true))
            .unwrap_or_default();
        assert!(Arc::ptr_eq(&views[0].job, &first[0]));
        assert_eq!(views[1].job.dependency, None, "the kept view is unchanged");
    }
}
