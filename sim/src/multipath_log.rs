//! The simulator's record of multi-path reservations between passes and
//! the lines it writes about them:
//!
//! - `{"event":"reserve","job":..,"paths":[..],"starts_s":[..],"released":[..]}`
//!   when the alternatives a pending job holds room on change (`paths` in
//!   index order with each one's promised start; `released` the ones it
//!   held before and holds no more, left out when none);
//! - `{"event":"reservation","job":..,"chosen":k,"released":[..]}` just
//!   before the start line of a job that held a multi-path reservation:
//!   the alternative it started on and the reservations let go with it.

use std::collections::BTreeMap;

use serde::Serialize;

use berth_scheduler::model::JobId;
use berth_scheduler::multipath::MultiPathReservation;

/// (path, promised start in ms) of each alternative a job holds.
type Paths = Vec<(usize, u64)>;

/// What each pending job held after the last pass.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub held: BTreeMap<JobId, Paths>,
}

/// A job whose held alternatives changed in a pass.
pub(crate) struct Change {
    pub job_id: JobId,
    pub paths: Paths,
    pub released: Vec<usize>,
}

impl Held {
    /// Replaces what is held with the pass's reservations and returns the
    /// jobs whose set changed, in id order. Jobs that started in the pass
    /// were taken out already (their dispatch line).
    pub fn update(&mut self, made: &[MultiPathReservation]) -> Vec<Change> {
        let mut now: BTreeMap<JobId, Paths> = made
            .iter()
            .map(|m| {
                let paths = m.paths.iter().map(|p| (p.path, p.start_ms)).collect();
                (m.job_id, paths)
            })
            .collect();
        let mut changes = Vec::new();
        let ids: Vec<JobId> = self.held.keys().chain(now.keys()).copied().collect();
        let mut ids = ids;
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let before = self.held.get(&id);
            let after = now.get(&id);
            if before == after {
                continue;
            }
            let released = before
                .map(|b| {
                    b.iter()
                        .map(|p| p.0)
                        .filter(|k| after.is_none_or(|a| !a.iter().any(|q| q.0 == *k)))
                        .collect()
                })
                .unwrap_or_default();
            changes.push(Change {
                job_id: id,
                paths: after.cloned().unwrap_or_default(),
                released,
            });
        }
        std::mem::swap(&mut self.held, &mut now);
        changes
    }
}

#[derive(Serialize)]
pub(crate) struct ReserveLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    paths: Vec<usize>,
    starts_s: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    released: Vec<usize>,
}

pub(crate) fn reserve_line<'a>(t_s: u64, job: &'a str, change: &Change) -> ReserveLine<'a> {
    ReserveLine {
        t_s,
        event: "reserve",
        job,
        paths: change.paths.iter().map(|p| p.0).collect(),
        starts_s: change.paths.iter().map(|p| p.1 / 1000).collect(),
        released: change.released.clone(),
    }
}

#[derive(Serialize)]
pub(crate) struct DispatchLine<'a> {
    t_s: u64,
    event: &'static str,
    job: &'a str,
    chosen: usize,
    released: Vec<usize>,
}

pub(crate) fn dispatch_line<'a>(
    t_s: u64,
    job: &'a str,
    chosen: usize,
    held: &[(usize, u64)],
) -> DispatchLine<'a> {
    DispatchLine {
        t_s,
        event: "reservation",
        job,
        chosen,
        released: held.iter().map(|p| p.0).filter(|&k| k != chosen).collect(),
    }
}
