//! Job arrays in the state machine: one submit makes a job per task with
//! consecutive ids, the pass and `apply` keep `%max`, a cancel of the
//! array's id reaches every unfinished task.

use super::*;
use berth_scheduler::{schedule, Inventory, Policy, Reason};

fn state_with_host(cpus: u32) -> SmState {
    let mut s = SmState::default();
    let r = s.apply(
        &Command::RegisterHost {
            name: "h1".into(),
            inventory: Inventory::cpu_mem(cpus, 4096),
            agent_restarted: false,
            running_allocs: Vec::new(),
            drain_reason: String::new(),
            now_ms: 1,
            step_addr: String::new(),
        },
        &mut Dirty::default(),
    );
    assert_eq!(r, Response::HostRegistered);
    s
}

fn array_spec(array: &str) -> JobSpec {
    JobSpec {
        name: "arr".into(),
        user: "alice".into(),
        command: "true".into(),
        cpus: 1,
        array: array.into(),
        ..JobSpec::default()
    }
}

fn submit(s: &mut SmState, request_id: &str, spec: JobSpec) -> Response {
    s.apply(
        &Command::SubmitJob {
            request_id: request_id.into(),
            spec,
            now_ms: 1_000,
        },
        &mut Dirty::default(),
    )
}

fn plan(s: &mut SmState, ids: &[JobId]) -> (u32, u32) {
    let starts = ids
        .iter()
        .map(|&job_id| Placement {
            job_id,
            host: "h1".into(),
            resources: Resources::cpu_mem(1, 0),
            partition: String::new(),
            path: 0,
            released: Vec::new(),
        })
        .collect();
    match s.apply(
        &Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms: 2_000,
            starts,
            evictions: Vec::new(),
            borrowed: Vec::new(),
        },
        &mut Dirty::default(),
    ) {
        Response::PlanApplied {
            started, dropped, ..
        } => (started, dropped),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_array_submit_makes_one_job_per_task() {
    let mut s = state_with_host(8);
    // A plain job first, so the array's id is not 1.
    assert!(matches!(
        submit(&mut s, "plain", array_spec("")),
        Response::Submitted { job_id: 1, .. }
    ));
    assert_eq!(
        submit(&mut s, "arr", array_spec("1-3,7%2")),
        Response::Submitted {
            job_id: 2,
            duplicate: false
        }
    );
    // A retry answers the array's id and makes nothing.
    assert_eq!(
        submit(&mut s, "arr", array_spec("1-3,7%2")),
        Response::Submitted {
            job_id: 2,
            duplicate: true
        }
    );
    assert_eq!(s.data.counters.next_job_id, 6);
    let tasks: Vec<(JobId, u64, u32)> = (2..=5)
        .map(|id| {
            let spec = &s.job(id).expect("task").job.spec;
            assert_eq!(
                (
                    spec.array_task_count,
                    spec.array_task_min,
                    spec.array_task_max,
                    spec.array_max_running
                ),
                (4, 1, 7, 2)
            );
            assert_eq!(spec.array, "1-3,7%2");
            (id, spec.array_job_id, spec.array_task_id)
        })
        .collect();
    assert_eq!(tasks, [(2, 2, 1), (3, 2, 2), (4, 2, 3), (5, 2, 7)]);
    assert_eq!(s.job(1).expect("plain").job.spec.array_job_id, 0);
}

#[test]
fn max_running_holds_in_the_pass_and_where_the_plan_lands() {
    let mut s = state_with_host(8);
    submit(&mut s, "arr", array_spec("0-3%2"));
    let snapshot = s.scheduler_snapshot(|_| HostState::Up);
    let p = schedule(&snapshot, &Policy::default(), 2_000);
    assert_eq!(
        p.starts.iter().map(|p| p.job_id).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(p.reasons.get(&3), Some(&Reason::JobArrayTaskLimit));
    // A plan with three tasks keeps only two.
    assert_eq!(plan(&mut s, &[1, 2, 3]), (2, 1));
    // Two run: a third is refused until one ends.
    assert_eq!(plan(&mut s, &[3]), (0, 1));
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id);
    s.apply(
        &Command::JobExited {
            job_id: 1,
            alloc_id: alloc_id.expect("running"),
            host: "h1".into(),
            exit_code: 0,
            signal: 0,
            launch_error: String::new(),
            now_ms: 3_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(plan(&mut s, &[3]), (1, 0));
}

#[test]
fn cancelling_the_array_id_cancels_every_unfinished_task() {
    let mut s = state_with_host(8);
    submit(&mut s, "arr", array_spec("0-2"));
    assert_eq!(plan(&mut s, &[2]), (1, 0));
    let r = s.apply(
        &Command::CancelArray {
            array_job_id: 1,
            now_ms: 3_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(
        r,
        Response::Cancelled {
            previous_state: JobState::Pending
        }
    );
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::Cancelled));
    assert_eq!(s.job(3).map(|r| r.job.state), Some(JobState::Cancelled));
    // The running task is stopping; its exit report ends it.
    let running = s.job(2).expect("task");
    assert!(running.job.cancel_requested && running.job.state == JobState::Running);
    // A task's own id, or a plain job, is no array's id.
    let refused = s.apply(
        &Command::CancelArray {
            array_job_id: 2,
            now_ms: 3_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(
        refused,
        Response::Rejected {
            reason: "job 2 is not a job array's id".into()
        }
    );
}

#[test]
fn bad_arrays_are_refused_and_change_nothing() {
    let mut s = state_with_host(8);
    for (spec, want) in [
        (
            array_spec("5-1"),
            "--array \"5-1\": range 5-1 goes down (expected e.g. 0-15%4, 1,3,5 or 0-15:4)",
        ),
        (
            JobSpec {
                array_job_id: 9,
                ..array_spec("1-2")
            },
            "array_job_id, array_task_id, array_task_count/min/max and array_max_running are set by the cluster: give the array as `array` (e.g. \"0-15%4\")",
        ),
    ] {
        assert_eq!(
            submit(&mut s, "bad", spec),
            Response::Rejected {
                reason: want.into()
            }
        );
    }
    assert_eq!(s.data.counters.next_job_id, 1);
    assert!(s.data.jobs.is_empty());
}
