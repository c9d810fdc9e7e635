//! srun steps of a job (sacct's `N.0`, `N.1`, ...), as its batch host's
//! agent reports them: a start with the step's name, hosts and task count,
//! then its end with the highest task exit code. Only a report for the
//! job's current allocation from its batch host counts; a retried report
//! changes nothing more. At most [`STEPS_PER_JOB_MAX`] are kept, the
//! oldest dropped first.

use serde::{Deserialize, Serialize};

use super::{Dirty, JobId, SmState};
use crate::command::Response;

/// Most steps kept per job.
pub const STEPS_PER_JOB_MAX: usize = 128;
/// Most hosts recorded per step (a job holds no more).
pub const STEP_HOSTS_MAX: usize = 4096;
/// Longest step name kept, in bytes.
pub const STEP_NAME_BYTES_MAX: usize = 256;

/// One srun step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step_id: u32,
    pub name: String,
    pub hosts: Vec<String>,
    pub ntasks: u32,
    /// Leader clock; `end_ms` 0 while it runs.
    pub start_ms: u64,
    pub end_ms: u64,
    pub exit_code: i32,
}

/// A step report as the command carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    pub step_id: u32,
    /// `None`: it started (with these facts); `Some(code)`: it ended.
    pub exit_code: Option<i32>,
    pub name: String,
    pub hosts: Vec<String>,
    pub ntasks: u32,
}

impl SmState {
    pub(super) fn report_step(
        &mut self,
        job_id: JobId,
        alloc_id: u64,
        host: &str,
        report: &StepReport,
        now_ms: u64,
        dirty: &mut Dirty,
    ) -> Response {
        if report.hosts.len() > STEP_HOSTS_MAX || report.name.len() > STEP_NAME_BYTES_MAX {
            return Response::Rejected {
                reason: format!(
                    "a step report names at most {STEP_HOSTS_MAX} hosts and {STEP_NAME_BYTES_MAX} bytes of name"
                ),
            };
        }
        let Some(record) = self.current_alloc_mut(job_id, alloc_id, host) else {
            return Response::Report { accepted: false };
        };
        let existing = record
            .steps
            .iter()
            .position(|s| s.step_id == report.step_id);
        match (existing, report.exit_code) {
            // A retried start.
            (Some(_), None) => {}
            (Some(i), Some(code)) => {
                let step = &mut record.steps[i];
                if step.end_ms == 0 {
                    step.end_ms = now_ms.max(step.start_ms);
                    step.exit_code = code;
                    dirty.jobs.insert(job_id);
                }
            }
            // A start, or an end whose start was dropped as the oldest.
            (None, code) => {
                if record.steps.len() >= STEPS_PER_JOB_MAX {
                    record.steps.remove(0);
                }
                record.steps.push(StepRecord {
                    step_id: report.step_id,
                    name: report.name.clone(),
                    hosts: report.hosts.clone(),
                    ntasks: report.ntasks,
                    start_ms: now_ms,
                    end_ms: if code.is_some() { now_ms } else { 0 },
                    exit_code: code.unwrap_or(0),
                });
                dirty.jobs.insert(job_id);
            }
        }
        Response::Report { accepted: true }
    }
}

#[cfg(test)]
mod tests {
    use berth_scheduler::{Inventory, JobSpec, Resources};

    use super::super::test_support::{apply, placement, plan, register, submit};
    use super::*;
    use crate::command::Command;

    fn report(step_id: u32, exit_code: Option<i32>) -> StepReport {
        StepReport {
            step_id,
            exit_code,
            name: "hostname".into(),
            hosts: vec!["h1".into()],
            ntasks: 2,
        }
    }

    fn reported(
        s: &mut SmState,
        alloc_id: u64,
        host: &str,
        r: StepReport,
        now_ms: u64,
    ) -> Response {
        apply(
            s,
            Command::StepReported {
                job_id: 1,
                alloc_id,
                host: host.into(),
                report: r,
                now_ms,
            },
        )
    }

    #[test]
    fn steps_are_recorded_from_the_batch_host_once_and_bounded() {
        let mut s = SmState::default();
        register(&mut s, "h1", Inventory::cpu_mem(8, 1024));
        register(&mut s, "h2", Inventory::cpu_mem(8, 1024));
        submit(
            &mut s,
            "r1",
            JobSpec {
                user: "a".into(),
                command: "true".into(),
                cpus: 1,
                ..JobSpec::default()
            },
        );
        apply(
            &mut s,
            plan(
                vec![placement(1, "h1", Resources::cpu_mem(1, 0), "", 0)],
                Vec::new(),
            ),
        );
        let alloc = s
            .job(1)
            .and_then(|r| r.job.alloc.as_ref())
            .map(|a| a.alloc_id)
            .expect("running");
        let accepted = Response::Report { accepted: true };
        assert_eq!(
            reported(&mut s, alloc, "h1", report(0, None), 100),
            accepted
        );
        assert_eq!(
            reported(&mut s, alloc, "h1", report(0, None), 150),
            accepted,
            "a retry"
        );
        assert_eq!(
            reported(&mut s, alloc, "h1", report(0, Some(3)), 200),
            accepted
        );
        assert_eq!(
            reported(&mut s, alloc, "h1", report(0, Some(0)), 250),
            accepted,
            "a retry"
        );
        // Another host, or another allocation, is not the job's batch run.
        let stale = Response::Report { accepted: false };
        assert_eq!(reported(&mut s, alloc, "h2", report(1, None), 300), stale);
        assert_eq!(
            reported(&mut s, alloc + 1, "h1", report(1, None), 300),
            stale
        );
        let steps = &s.job(1).expect("job").steps;
        assert_eq!(
            steps,
            &vec![StepRecord {
                step_id: 0,
                name: "hostname".into(),
                hosts: vec!["h1".into()],
                ntasks: 2,
                start_ms: 100,
                end_ms: 200,
                exit_code: 3,
            }]
        );
        for step in 1..=STEPS_PER_JOB_MAX as u32 {
            reported(&mut s, alloc, "h1", report(step, Some(0)), 400);
        }
        let steps = &s.job(1).expect("job").steps;
        assert_eq!(steps.len(), STEPS_PER_JOB_MAX);
        assert_eq!(steps[0].step_id, 1, "the oldest went first");
        let long = StepReport {
            name: "x".repeat(STEP_NAME_BYTES_MAX + 1),
            ..report(999, None)
        };
        assert!(matches!(
            reported(&mut s, alloc, "h1", long, 500),
            Response::Rejected { .. }
        ));
    }
}
