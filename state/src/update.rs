//! `scontrol update JobId=N KEY=VALUE...`: a change to a submitted job's
//! spec, checked as a submit is (the spec rules, the dependencies' jobs,
//! the policy: account, QOS, partitions, nice entitlement, submit limits),
//! and recorded as one job event naming each change
//! (`Updated: TimeLimit 10:00 -> 5:00`).
//!
//! Slurm's rules: a pending job may change any of these keys; a running
//! one only its time limit; a finished one nothing. Only an administrator
//! may raise a time limit (or lift it), or fix a job's priority
//! (`Priority=N`, which clears its nice and takes it out of multifactor
//! until it is held and released); `Priority=0` holds the job. An
//! array's id changes every task of it that can change, all or none.

use berth_scheduler::{JobId, JobSpec, JobState};

use super::{spec_rules, Dirty, SmState};
use crate::command::{JobUpdate, Response};

/// One job's planned change: its new spec, the change list, and what
/// `Priority=` does beside the spec.
struct Planned {
    new: JobSpec,
    changes: Vec<String>,
    priority: Option<PrioritySet>,
}

/// What a job held before a tentative change, to put back when a later
/// task of the same array update is refused.
struct Saved {
    job_id: JobId,
    spec: JobSpec,
    admin_priority: u32,
    admin_hold: bool,
}

impl SmState {
    /// `whole_array`: `job_id` is an array's id and the update is for
    /// every task of it that can still change (Slurm's `JobId=<array
    /// id>`): its pending tasks, and its running ones too when only the
    /// time limit changes. All tasks change or none: a task that refuses
    /// the update refuses it for the array, naming the task.
    pub(super) fn update_job(
        &mut self,
        job_id: JobId,
        update: &JobUpdate,
        admin: bool,
        whole_array: bool,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        let refuse = |reason: String| Response::Rejected { reason };
        if !self.data.jobs.contains_key(&job_id) {
            return refuse(format!("job {job_id} does not exist"));
        }
        if update.is_empty() {
            return refuse("nothing to update: give at least one KEY=VALUE".into());
        }
        let targets = if whole_array {
            match self.array_tasks_to_update(job_id, update) {
                Ok(tasks) => tasks,
                Err(reason) => return refuse(reason),
            }
        } else {
            vec![job_id]
        };
        // Each task is checked against the state with the tasks before it
        // already changed (a QOS's submit limit counts them), then put back
        // if a later one refuses.
        let mut saved: Vec<Saved> = Vec::with_capacity(targets.len());
        let mut changed: Vec<(JobId, Vec<String>)> = Vec::new();
        for &task in &targets {
            let planned = match self.plan_update(task, update, admin) {
                Ok(planned) => planned,
                Err(reason) => {
                    self.put_back(saved);
                    return refuse(if whole_array {
                        format!("{}: {reason}", self.task_name(task))
                    } else {
                        reason
                    });
                }
            };
            let Some(planned) = planned else { continue };
            let Some(record) = self.data.jobs.get_mut(&task) else {
                continue;
            };
            saved.push(Saved {
                job_id: task,
                spec: std::mem::replace(&mut record.job.spec, planned.new),
                admin_priority: record.job.admin_priority,
                admin_hold: record.job.admin_hold,
            });
            match planned.priority {
                Some(PrioritySet::Fixed(value)) => record.job.admin_priority = value,
                Some(PrioritySet::Hold) if admin => record.job.admin_hold = true,
                Some(PrioritySet::Hold) => record.job.spec.hold = true,
                None => {}
            }
            changed.push((task, planned.changes));
        }
        // Every task took it: now the events. The answer lists each
        // distinct change once (an array's tasks mostly change alike).
        let mut answer: Vec<String> = Vec::new();
        for (task, changes) in changed {
            if let Some(record) = self.data.jobs.get_mut(&task) {
                record.push_event(
                    now_ms,
                    "updated",
                    format!("Updated: {}", changes.join(", ")),
                );
                dirty.jobs.insert(task);
            }
            for change in changes {
                if !answer.contains(&change) {
                    answer.push(change);
                }
            }
        }
        Response::JobUpdated { changes: answer }
    }

    /// The tasks of array `array_job_id` an update may change: unfinished,
    /// and pending unless only the time limit changes.
    fn array_tasks_to_update(
        &self,
        array_job_id: JobId,
        update: &JobUpdate,
    ) -> Result<Vec<JobId>, String> {
        let tasks: Vec<JobId> = self
            .array_tasks(array_job_id)?
            .into_iter()
            .filter(|(_, state)| match state {
                JobState::Pending => true,
                JobState::Running => update.only_time_limit(),
                _ => false,
            })
            .map(|(id, _)| id)
            .collect();
        if tasks.is_empty() {
            return Err(format!(
                "no task of job array {array_job_id} can change: every task has ended{}",
                if update.only_time_limit() {
                    ""
                } else {
                    " or is running (only TimeLimit can change while a task runs)"
                }
            ));
        }
        Ok(tasks)
    }

    /// `12_3` for an array task, the job id otherwise.
    fn task_name(&self, job_id: JobId) -> String {
        match self.data.jobs.get(&job_id) {
            Some(r) if r.job.spec.array_job_id != 0 => {
                format!("{}_{}", r.job.spec.array_job_id, r.job.spec.array_task_id)
            }
            _ => job_id.to_string(),
        }
    }

    /// Undoes tentative changes, last first.
    fn put_back(&mut self, saved: Vec<Saved>) {
        for s in saved.into_iter().rev() {
            if let Some(record) = self.data.jobs.get_mut(&s.job_id) {
                record.job.spec = s.spec;
                record.job.admin_priority = s.admin_priority;
                record.job.admin_hold = s.admin_hold;
            }
        }
    }

    /// What `update` would make of job `job_id`: `None` when it changes
    /// nothing, an error when the job or the new spec refuses it.
    fn plan_update(
        &self,
        job_id: JobId,
        update: &JobUpdate,
        admin: bool,
    ) -> Result<Option<Planned>, String> {
        let Some(record) = self.data.jobs.get(&job_id) else {
            return Err(format!("job {job_id} does not exist"));
        };
        match record.job.state {
            JobState::Pending => {}
            JobState::Running if update.only_time_limit() => {}
            JobState::Running => {
                return Err(format!(
                    "job {job_id} is no longer pending execution: only TimeLimit can change while it runs"
                ))
            }
            state => {
                return Err(format!(
                    "job {job_id} is {}: a finished job cannot be changed",
                    state.slurm_name().to_ascii_lowercase()
                ))
            }
        }
        let old = &record.job.spec;
        let (mut new, mut changes) = changed_spec(old, update, admin)?;
        let priority = priority_change(record.job.admin_priority, &mut new, update, admin)?;
        changes.extend(priority.note);
        if changes.is_empty() {
            return Ok(None);
        }
        self.check_updated(job_id, old, &new)?;
        let policy_touched =
            old.partitions != new.partitions || old.qos != new.qos || old.nice != new.nice;
        let new = if policy_touched {
            self.resolve_spec(&new, Some(job_id))?
        } else {
            new
        };
        Ok(Some(Planned {
            new,
            changes,
            priority: priority.set,
        }))
    }

    /// The submit checks a changed spec must pass again.
    fn check_updated(&self, job_id: JobId, old: &JobSpec, new: &JobSpec) -> Result<(), String> {
        new.shape()?;
        spec_rules::validate(new)?;
        if new.dependency != old.dependency {
            self.check_dependency_jobs(new)?;
            let parsed =
                berth_scheduler::deps::parse(&new.dependency).map_err(|e| e.to_string())?;
            if parsed.deps.iter().any(|d| d.jobs.contains(&job_id)) {
                return Err(format!("job {job_id} cannot depend on itself"));
            }
        }
        Ok(())
    }
}

/// The spec with `update` applied, and the change list (`Key old -> new`
/// for each value that differs). Refuses a user raising the time limit.
fn changed_spec(
    old: &JobSpec,
    update: &JobUpdate,
    admin: bool,
) -> Result<(JobSpec, Vec<String>), String> {
    let mut new = old.clone();
    let mut changes = Vec::new();
    let mut note = |key: &str, from: String, to: String| {
        if from != to {
            changes.push(format!("{key} {from} -> {to}"));
        }
    };
    if let Some(limit_s) = update.time_limit_s {
        // 0 is no limit, more than any number.
        let raises = match (old.time_limit_s, limit_s) {
            (0, _) => false,
            (_, 0) => true,
            (from, to) => to > from,
        };
        if raises && !admin {
            return Err(format!(
                "Access/permission denied: only an administrator can raise a job's TimeLimit ({} -> {})",
                limit_text(old.time_limit_s),
                limit_text(limit_s)
            ));
        }
        note(
            "TimeLimit",
            limit_text(old.time_limit_s),
            limit_text(limit_s),
        );
        new.time_limit_s = limit_s;
    }
    if let Some(partitions) = &update.partitions {
        if partitions.iter().any(|p| p.trim().is_empty()) {
            return Err("Partition: an empty partition name".into());
        }
        note(
            "Partition",
            list_text(&old.partitions),
            list_text(partitions),
        );
        new.partitions = partitions.clone();
    }
    if let Some(qos) = &update.qos {
        note("QOS", old.qos.clone(), qos.clone());
        new.qos = qos.clone();
    }
    if let Some(nice) = update.nice {
        note("Nice", old.nice.to_string(), nice.to_string());
        new.nice = nice;
    }
    if let Some(dependency) = &update.dependency {
        let canonical = if dependency.trim().is_empty() {
            String::new()
        } else {
            berth_scheduler::deps::parse(dependency)
                .map_err(|e| e.to_string())?
                .to_string()
        };
        note("Dependency", or_none(&old.dependency), or_none(&canonical));
        new.dependency = canonical;
    }
    if let Some(begin_ms) = update.begin_ms {
        note("StartTime", begin_text(old.begin_ms), begin_text(begin_ms));
        new.begin_ms = begin_ms;
    }
    if let Some(name) = &update.name {
        if name.is_empty() {
            return Err("Name: a job name cannot be empty".into());
        }
        note("JobName", old.name.clone(), name.clone());
        new.name = name.clone();
    }
    if let Some(comment) = &update.comment {
        note("Comment", or_none(&old.comment), or_none(comment));
        new.comment = comment.clone();
    }
    if let Some(features) = &update.features {
        note("Features", list_text(&old.features), list_text(features));
        new.features = features.clone();
    }
    Ok((new, changes))
}

/// What `Priority=` does to a job beside its spec.
enum PrioritySet {
    /// Fix its priority at this value (> 0).
    Fixed(u32),
    /// Hold it (an administrator's hold when an administrator asked).
    Hold,
}

#[derive(Default)]
struct PriorityChange {
    set: Option<PrioritySet>,
    /// The change-list entry, when something changes.
    note: Option<String>,
}

/// `Priority=` on a job whose fixed priority is `fixed_now` (0 = none):
/// an administrator's value > 0 fixes it and clears the nice in `new`;
/// 0 holds the job. Anyone else may only hold (Slurm lets users lower,
/// never raise, and a Berth priority has no fixed value to compare with).
fn priority_change(
    fixed_now: u32,
    new: &mut JobSpec,
    update: &JobUpdate,
    admin: bool,
) -> Result<PriorityChange, String> {
    let Some(value) = update.priority else {
        return Ok(PriorityChange::default());
    };
    if value == 0 {
        return Ok(PriorityChange {
            set: Some(PrioritySet::Hold),
            note: Some("Priority -> 0 (held)".into()),
        });
    }
    if !admin {
        return Err(format!(
            "Access/permission denied: only an administrator can set a job's Priority ({value}); Nice= lowers it, Priority=0 holds it"
        ));
    }
    if update.nice.is_some() {
        return Err("Priority= and Nice= together: a fixed priority clears the nice".into());
    }
    if value == fixed_now && new.nice == 0 {
        return Ok(PriorityChange::default());
    }
    new.nice = 0;
    let from = if fixed_now == 0 {
        "multifactor".to_string()
    } else {
        fixed_now.to_string()
    };
    Ok(PriorityChange {
        set: Some(PrioritySet::Fixed(value)),
        note: Some(format!("Priority {from} -> {value}")),
    })
}

/// A time limit as Slurm prints one: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`, or
/// `UNLIMITED` for none.
pub(super) fn limit_text(limit_s: u64) -> String {
    if limit_s == 0 {
        return "UNLIMITED".into();
    }
    let (days, rest) = (limit_s / 86_400, limit_s % 86_400);
    let (h, m, s) = (rest / 3_600, rest % 3_600 / 60, rest % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

fn list_text(items: &[String]) -> String {
    if items.is_empty() {
        "(null)".into()
    } else {
        items.join(",")
    }
}

fn or_none(text: &str) -> String {
    if text.is_empty() {
        "(null)".into()
    } else {
        text.to_string()
    }
}

/// A begin time in the event: ms since the epoch as a UTC date would need
/// a calendar here (apply stays free of them); `now` for 0.
fn begin_text(begin_ms: u64) -> String {
    if begin_ms == 0 {
        "now".into()
    } else {
        format!("@{}", begin_ms / 1000)
    }
}
