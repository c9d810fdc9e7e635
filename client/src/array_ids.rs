//! Job array ids as Slurm writes them: a task is `ARRAYID_TASK` (`12_3`);
//! squeue shows an array's pending tasks as one line, `12_[3-5%2]`.

use berth_proto::api::{Job, JobState};

/// Whether `job` is what `-j` names: `id` alone is that job, or every task
/// of the array whose id it is (`12`); with `task`, only that task of the
/// array `id` (`12_3`). As squeue and sacct read `-j`.
pub fn selects(job: &Job, id: u64, task: Option<u32>) -> bool {
    let spec = job.spec.as_ref();
    match task {
        None => job.job_id == id || spec.is_some_and(|s| s.array_job_id == id),
        Some(task) => spec.is_some_and(|s| s.array_job_id == id && s.array_task_id == task),
    }
}

/// A job id as squeue's `%i` shows it: `12_3` for an array task, the id
/// otherwise; a line standing for several pending tasks (see
/// [`collapse_pending`]) shows them as `12_[3-5,7%2]`.
pub fn display_id(job: &Job) -> String {
    let Some(spec) = job.spec.as_ref().filter(|s| s.array_job_id != 0) else {
        return job.job_id.to_string();
    };
    if spec.array.starts_with('[') {
        format!("{}_{}", spec.array_job_id, spec.array)
    } else {
        format!("{}_{}", spec.array_job_id, spec.array_task_id)
    }
}

/// squeue's view of arrays: the pending tasks of one array become one
/// line (its lowest pending task's), whose `array` field is rewritten to
/// the bracketed list of those tasks with the array's `%max`, where
/// [`display_id`] reads it. Other jobs and running tasks keep their own
/// lines, in the order given.
pub fn collapse_pending(jobs: Vec<Job>) -> Vec<Job> {
    use std::collections::BTreeMap;
    let is_pending_task = |j: &Job| {
        j.state == JobState::Pending as i32 && j.spec.as_ref().is_some_and(|s| s.array_job_id != 0)
    };
    let mut tasks: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for job in jobs.iter().filter(|j| is_pending_task(j)) {
        if let Some(spec) = &job.spec {
            tasks
                .entry(spec.array_job_id)
                .or_default()
                .push(spec.array_task_id);
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for mut job in jobs {
        if !is_pending_task(&job) {
            out.push(job);
            continue;
        }
        let Some(spec) = job.spec.as_mut() else {
            continue;
        };
        // The first pending task of its array stands for all of them.
        let Some(mut ids) = tasks.remove(&spec.array_job_id) else {
            continue;
        };
        if ids.len() > 1 {
            ids.sort_unstable();
            let max = if spec.array_max_running > 0 {
                format!("%{}", spec.array_max_running)
            } else {
                String::new()
            };
            spec.array = format!("[{}{max}]", berth_scheduler::array::ranges(&ids));
        }
        out.push(job);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    fn task(job_id: u64, array: u64, task: u32, state: JobState) -> Job {
        Job {
            job_id,
            state: state as i32,
            spec: Some(JobSpec {
                array: "0-9%2".into(),
                array_job_id: array,
                array_task_id: task,
                array_max_running: 2,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn tasks_show_as_array_underscore_index() {
        let plain = Job {
            job_id: 7,
            ..Default::default()
        };
        assert_eq!(display_id(&plain), "7");
        assert_eq!(display_id(&task(14, 12, 3, JobState::Running)), "12_3");
    }

    #[test]
    fn pending_tasks_of_an_array_collapse_into_one_line() {
        let jobs = vec![
            task(12, 12, 0, JobState::Running),
            task(13, 12, 1, JobState::Pending),
            task(14, 12, 2, JobState::Pending),
            task(15, 12, 3, JobState::Pending),
            task(16, 12, 5, JobState::Pending),
            Job {
                job_id: 20,
                ..Default::default()
            },
            task(21, 21, 4, JobState::Pending),
        ];
        let shown: Vec<String> = collapse_pending(jobs).iter().map(display_id).collect();
        assert_eq!(shown, ["12_0", "12_[1-3,5%2]", "20", "21_4"]);
    }
}
