//! Job arrays as Slurm keeps them: one submit with `--array` makes one job
//! per task, with consecutive ids; the first task's id is the array's id
//! (`ArrayJobId`), and every task carries it with its own index
//! (`ArrayTaskId`), the array's size, lowest and highest index, and its
//! `%max`. A cancel of the array's id cancels every task; the pass and
//! `apply` keep at most `%max` of them running.

use std::collections::BTreeMap;

use berth_scheduler::array::{self, ARRAY_INDEX_MAX};
use berth_scheduler::{ArrayTask, JobId, JobSpec, JobState};

use super::{Dirty, SmState};
use crate::command::Response;

/// The specs of the tasks of `spec`'s array, the first to get job id
/// `first_id`; `spec` alone when it is no array. The text was checked by
/// [`validate`].
pub(super) fn task_specs(spec: &JobSpec, first_id: JobId) -> Result<Vec<JobSpec>, String> {
    if spec.array.is_empty() {
        return Ok(vec![spec.clone()]);
    }
    let parsed = array::parse(&spec.array).map_err(|e| e.to_string())?;
    let (Some(&min), Some(&max)) = (parsed.indexes.first(), parsed.indexes.last()) else {
        return Err(format!("--array {:?} has no task indexes", spec.array));
    };
    let count = u32::try_from(parsed.indexes.len()).map_err(|_| "too many array tasks")?;
    Ok(parsed
        .indexes
        .iter()
        .map(|&task| JobSpec {
            array_job_id: first_id,
            array_task_id: task,
            array_task_count: count,
            array_task_min: min,
            array_task_max: max,
            array_max_running: parsed.max_running,
            ..spec.clone()
        })
        .collect())
}

/// Submit checks of the array fields: the text parses, and the fields the
/// cluster sets are not set by the submitter.
pub(super) fn validate(spec: &JobSpec) -> Result<(), String> {
    if spec.array_job_id != 0
        || spec.array_task_id != 0
        || spec.array_task_count != 0
        || spec.array_task_min != 0
        || spec.array_task_max != 0
        || spec.array_max_running != 0
    {
        return Err(
            "array_job_id, array_task_id, array_task_count/min/max and array_max_running \
             are set by the cluster: give the array as `array` (e.g. \"0-15%4\")"
                .into(),
        );
    }
    if !spec.array.is_empty() {
        array::parse(&spec.array).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The pass's view of an array task.
pub(super) fn task_of(spec: &JobSpec) -> Option<ArrayTask> {
    (spec.array_job_id != 0).then_some(ArrayTask {
        array_id: spec.array_job_id,
        max_running: spec.array_max_running,
    })
}

/// At most this many tasks one array may have (every index is at most
/// [`ARRAY_INDEX_MAX`]).
pub const ARRAY_TASKS_MAX: usize = ARRAY_INDEX_MAX as usize + 1;

impl SmState {
    /// Running tasks of each limited array a plan places a task of: what
    /// `apply` re-checks `%max` against (invariant 3).
    pub(super) fn array_running(
        &self,
        starts: impl Iterator<Item = JobId>,
    ) -> BTreeMap<JobId, u32> {
        let mut counts: BTreeMap<JobId, u32> = starts
            .filter_map(|id| self.data.jobs.get(&id))
            .filter(|r| r.job.spec.array_max_running > 0)
            .map(|r| (r.job.spec.array_job_id, 0))
            .collect();
        if counts.is_empty() {
            return counts;
        }
        for id in &self.running {
            if let Some(r) = self.data.jobs.get(id) {
                if let Some(n) = counts.get_mut(&r.job.spec.array_job_id) {
                    *n += 1;
                }
            }
        }
        counts
    }

    /// Every task of the array `array_job_id` with its state, in task
    /// order; an error naming it when the id is no job or no array's.
    pub(super) fn array_tasks(
        &self,
        array_job_id: JobId,
    ) -> Result<Vec<(JobId, JobState)>, String> {
        let Some(first) = self.data.jobs.get(&array_job_id) else {
            return Err(format!("job {array_job_id} does not exist"));
        };
        let spec = &first.job.spec;
        if spec.array_job_id != array_job_id {
            return Err(format!("job {array_job_id} is not a job array's id"));
        }
        // Tasks have consecutive ids from the array's id.
        let last = array_job_id.saturating_add(u64::from(spec.array_task_count.max(1)) - 1);
        Ok(self
            .data
            .jobs
            .range(array_job_id..=last)
            .filter(|(_, r)| r.job.spec.array_job_id == array_job_id)
            .map(|(id, r)| (*id, r.job.state))
            .collect())
    }

    /// Cancels every unfinished task of the array `array_job_id`: pending
    /// ones end at once, running ones are stopped as a cancel does. An id
    /// that is no array's is refused and changes nothing.
    pub(super) fn cancel_array(
        &mut self,
        array_job_id: JobId,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let tasks = match self.array_tasks(array_job_id) {
            Ok(tasks) => tasks,
            Err(reason) => return Response::Rejected { reason },
        };
        // The array's id is its first task's.
        let previous_state = tasks.first().map_or(JobState::Pending, |&(_, state)| state);
        let live: Vec<JobId> = tasks
            .into_iter()
            .filter(|(_, state)| !state.is_final())
            .map(|(id, _)| id)
            .collect();
        if live.is_empty() {
            return Response::Rejected {
                reason: format!("every task of job array {array_job_id} has already ended"),
            };
        }
        for id in live {
            // Each is unfinished, so each cancel is accepted.
            self.cancel(id, now_ms, dirty);
        }
        Response::Cancelled { previous_state }
    }
}
