//! `UpdateJob` (`scontrol update`): which keys a pending, running and
//! finished job may change, who may raise a time limit, the submit checks
//! a changed spec passes again, and the job event that names the changes.

use super::*;
use crate::command::JobUpdate;
use berth_scheduler::Inventory;

fn spec(name: &str) -> JobSpec {
    JobSpec {
        name: name.into(),
        user: "alice".into(),
        command: "true".into(),
        cpus: 1,
        time_limit_s: 600,
        ..JobSpec::default()
    }
}

fn state() -> SmState {
    let mut s = SmState::default();
    let r = s.apply(
        &Command::RegisterHost {
            name: "h1".into(),
            inventory: Inventory::cpu_mem(4, 4096),
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

fn submit(s: &mut SmState, request_id: &str, spec: JobSpec) -> JobId {
    match s.apply(
        &Command::SubmitJob {
            request_id: request_id.into(),
            spec,
            now_ms: 1_000,
        },
        &mut Dirty::default(),
    ) {
        Response::Submitted { job_id, .. } => job_id,
        other => panic!("submit: {other:?}"),
    }
}

fn update(s: &mut SmState, job_id: JobId, update: JobUpdate, admin: bool) -> Response {
    s.apply(
        &Command::UpdateJob {
            job_id,
            update,
            admin,
            now_ms: 5_000,
            whole_array: false,
        },
        &mut Dirty::default(),
    )
}

fn refused(s: &mut SmState, job_id: JobId, u: JobUpdate, admin: bool) -> String {
    let before = s.job(job_id).map(|r| r.job.spec.clone());
    match update(s, job_id, u, admin) {
        Response::Rejected { reason } => {
            assert_eq!(
                s.job(job_id).map(|r| r.job.spec.clone()),
                before,
                "a refused update changed the spec"
            );
            reason
        }
        other => panic!("accepted: {other:?}"),
    }
}

/// Adds `qos` and account `lab`, whose user alice may use `normal` and it.
fn allow_qos(s: &mut SmState, qos: berth_scheduler::Qos) {
    let name = qos.name.clone();
    for change in [
        crate::policy::PolicyChange::UpsertQos(qos),
        crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
            name: "lab".into(),
            users: vec!["alice".into()],
            qos: vec!["normal".into(), name],
            ..Default::default()
        }),
    ] {
        assert_eq!(
            s.apply(
                &Command::SetPolicy { change, now_ms: 2 },
                &mut Dirty::default()
            ),
            Response::PolicySet
        );
    }
}

fn start(s: &mut SmState, job_id: JobId) {
    let r = s.apply(
        &Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms: 2_000,
            starts: vec![Placement {
                job_id,
                host: "h1".into(),
                resources: Resources::cpu_mem(1, 0),
                partition: String::new(),
                path: 0,
                released: Vec::new(),
            }],
            evictions: Vec::new(),
            borrowed: Vec::new(),
        },
        &mut Dirty::default(),
    );
    assert!(
        matches!(r, Response::PlanApplied { started: 1, .. }),
        "{r:?}"
    );
}

#[test]
fn a_pending_job_changes_and_the_event_names_each_change() {
    let mut s = state();
    let a = submit(&mut s, "a", spec("a"));
    let b = submit(&mut s, "b", spec("b"));
    let r = update(
        &mut s,
        b,
        JobUpdate {
            time_limit_s: Some(300),
            name: Some("renamed".into()),
            comment: Some("look".into()),
            dependency: Some(format!("afterok:{a}")),
            begin_ms: Some(9_000_000),
            features: Some(vec!["ib".into()]),
            nice: Some(10),
            ..JobUpdate::default()
        },
        false,
    );
    let expected = vec![
        "TimeLimit 10:00 -> 5:00".to_string(),
        "Nice 0 -> 10".into(),
        format!("Dependency (null) -> afterok:{a}"),
        "StartTime now -> @9000".into(),
        "JobName b -> renamed".into(),
        "Comment (null) -> look".into(),
        "Features (null) -> ib".into(),
    ];
    assert_eq!(
        r,
        Response::JobUpdated {
            changes: expected.clone()
        }
    );
    let record = s.job(b).expect("job");
    let spec = &record.job.spec;
    assert_eq!(
        (
            spec.time_limit_s,
            spec.name.as_str(),
            spec.nice,
            spec.begin_ms
        ),
        (300, "renamed", 10, 9_000_000)
    );
    assert_eq!(spec.dependency, format!("afterok:{a}"));
    assert_eq!(
        record.events.last().map(|e| e.message.clone()),
        Some(format!("Updated: {}", expected.join(", ")))
    );
    // The same values again change nothing and add no event.
    let events = record.events_total;
    assert_eq!(
        update(
            &mut s,
            b,
            JobUpdate {
                time_limit_s: Some(300),
                ..JobUpdate::default()
            },
            false
        ),
        Response::JobUpdated { changes: vec![] }
    );
    assert_eq!(s.job(b).expect("job").events_total, events);
}

#[test]
fn bad_values_are_refused_like_a_submit() {
    let mut s = state();
    let a = submit(&mut s, "a", spec("a"));
    let dep = |d: &str| JobUpdate {
        dependency: Some(d.into()),
        ..JobUpdate::default()
    };
    assert!(refused(&mut s, a, dep("afterok:99"), false).contains("job 99 does not exist"));
    assert!(refused(&mut s, a, dep("afterok"), false).contains("needs at least one job id"));
    assert_eq!(
        refused(&mut s, a, dep(&format!("afterok:{a}")), false),
        format!("job {a} cannot depend on itself")
    );
    let features = JobUpdate {
        features: Some(vec!["bad name".into()]),
        ..JobUpdate::default()
    };
    assert!(refused(&mut s, a, features, false).contains("feature name \"bad name\""));
    let name = JobUpdate {
        name: Some(String::new()),
        ..JobUpdate::default()
    };
    assert_eq!(
        refused(&mut s, a, name, false),
        "Name: a job name cannot be empty"
    );
    assert_eq!(
        refused(&mut s, a, JobUpdate::default(), false),
        "nothing to update: give at least one KEY=VALUE"
    );
    assert_eq!(
        refused(
            &mut s,
            42,
            JobUpdate {
                nice: Some(1),
                ..JobUpdate::default()
            },
            true
        ),
        "job 42 does not exist"
    );
}

#[test]
fn only_an_admin_raises_a_time_limit() {
    let mut s = state();
    let a = submit(&mut s, "a", spec("a"));
    let limit = |t: u64| JobUpdate {
        time_limit_s: Some(t),
        ..JobUpdate::default()
    };
    assert_eq!(
        refused(&mut s, a, limit(1200), false),
        "Access/permission denied: only an administrator can raise a job's TimeLimit (10:00 -> 20:00)"
    );
    // 0 is no limit at all: more than any.
    assert!(refused(&mut s, a, limit(0), false).contains("(10:00 -> UNLIMITED)"));
    assert_eq!(
        update(&mut s, a, limit(90_061), true),
        Response::JobUpdated {
            changes: vec!["TimeLimit 10:00 -> 1-01:01:01".into()]
        }
    );
}

#[test]
fn an_admin_fixes_a_priority_until_the_job_is_held_and_released() {
    let mut s = state();
    let mut niced = spec("a");
    niced.nice = 7;
    let a = submit(&mut s, "a", niced);
    let priority = |p: u32| JobUpdate {
        priority: Some(p),
        ..JobUpdate::default()
    };
    assert_eq!(
        refused(&mut s, a, priority(5000), false),
        "Access/permission denied: only an administrator can set a job's Priority (5000); Nice= lowers it, Priority=0 holds it"
    );
    let both = JobUpdate {
        nice: Some(1),
        ..priority(5000)
    };
    assert!(refused(&mut s, a, both, true).starts_with("Priority= and Nice= together"));
    assert_eq!(
        update(&mut s, a, priority(5000), true),
        Response::JobUpdated {
            changes: vec!["Priority multifactor -> 5000".into()]
        }
    );
    let record = s.job(a).expect("job");
    assert_eq!((record.job.admin_priority, record.job.spec.nice), (5000, 0));
    let snapshot = s.scheduler_snapshot(|_| HostState::Up);
    assert_eq!(snapshot.pending[0].admin_priority, 5000);
    // The same value again changes nothing; another value names both.
    assert_eq!(
        update(&mut s, a, priority(5000), true),
        Response::JobUpdated { changes: vec![] }
    );
    assert_eq!(
        update(&mut s, a, priority(10), true),
        Response::JobUpdated {
            changes: vec!["Priority 5000 -> 10".into()]
        }
    );

    // Priority=0 holds: the user's own hold, or an administrator's.
    assert_eq!(
        update(&mut s, a, priority(0), false),
        Response::JobUpdated {
            changes: vec!["Priority -> 0 (held)".into()]
        }
    );
    let record = s.job(a).expect("job");
    assert!(record.job.spec.hold && !record.job.admin_hold);
    let b = submit(&mut s, "b", spec("b"));
    update(&mut s, b, priority(0), true);
    assert!(s.job(b).expect("job").job.admin_hold);

    // Released, job a is back under multifactor.
    let r = s.apply(
        &Command::ControlJob {
            job_id: a,
            action: crate::JobAction::Release { admin: false },
            now_ms: 6_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(r, Response::JobControlled);
    let record = s.job(a).expect("job");
    assert_eq!(record.job.admin_priority, 0);
    assert_eq!(
        record.events.last().map(|e| e.message.as_str()),
        Some("Released; its priority is multifactor again")
    );
}

#[test]
fn a_running_job_changes_only_its_time_limit_and_a_finished_one_nothing() {
    let mut s = state();
    let a = submit(&mut s, "a", spec("a"));
    start(&mut s, a);
    assert_eq!(
        refused(
            &mut s,
            a,
            JobUpdate {
                name: Some("x".into()),
                time_limit_s: Some(60),
                ..JobUpdate::default()
            },
            true
        ),
        format!("job {a} is no longer pending execution: only TimeLimit can change while it runs")
    );
    assert_eq!(
        update(
            &mut s,
            a,
            JobUpdate {
                time_limit_s: Some(60),
                ..JobUpdate::default()
            },
            false
        ),
        Response::JobUpdated {
            changes: vec!["TimeLimit 10:00 -> 1:00".into()]
        }
    );
    // The new limit is the one enforced: 2 s start + 60 s.
    let r = s.apply(
        &Command::TimeLimitReached {
            allocations: vec![(
                a,
                s.job(a)
                    .and_then(|r| r.job.alloc.as_ref())
                    .map_or(0, |al| al.alloc_id),
            )],
            now_ms: 62_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(r, Response::TimeLimitsEnforced { stopping: 1 });
    let b = submit(&mut s, "b", spec("b"));
    s.apply(
        &Command::CancelJob {
            job_id: b,
            now_ms: 3_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(
        refused(
            &mut s,
            b,
            JobUpdate {
                comment: Some("late".into()),
                ..JobUpdate::default()
            },
            true
        ),
        format!("job {b} is cancelled: a finished job cannot be changed")
    );
}

#[test]
fn partition_and_qos_are_checked_against_the_policy() {
    let mut s = state();
    allow_qos(&mut s, berth_scheduler::Qos::named("team"));
    let a = submit(&mut s, "a", spec("a"));
    let qos = |q: &str| JobUpdate {
        qos: Some(q.into()),
        ..JobUpdate::default()
    };
    assert!(refused(&mut s, a, qos("ghost"), false).contains("QOS ghost does not exist"));
    assert_eq!(
        update(&mut s, a, qos("team"), false),
        Response::JobUpdated {
            changes: vec!["QOS normal -> team".into()]
        }
    );
    let partition = JobUpdate {
        partitions: Some(vec!["nowhere".into()]),
        ..JobUpdate::default()
    };
    assert!(refused(&mut s, a, partition, false).contains("partition nowhere does not exist"));
}

#[test]
fn time_limits_read_as_slurm_prints_them() {
    use super::update::limit_text;
    assert_eq!(limit_text(0), "UNLIMITED");
    assert_eq!(limit_text(59), "0:59");
    assert_eq!(limit_text(600), "10:00");
    assert_eq!(limit_text(3_600), "1:00:00");
    assert_eq!(limit_text(86_400 + 3_661), "1-01:01:01");
}

fn update_array(s: &mut SmState, array: JobId, update: JobUpdate) -> Response {
    s.apply(
        &Command::UpdateJob {
            job_id: array,
            update,
            admin: false,
            now_ms: 6_000,
            whole_array: true,
        },
        &mut Dirty::default(),
    )
}

#[test]
fn an_arrays_id_changes_every_task_that_can_change_or_none() {
    let mut s = state();
    let array = submit(
        &mut s,
        "arr",
        JobSpec {
            array: "0-3".into(),
            ..spec("arr")
        },
    );
    let tasks: Vec<JobId> = (array..array + 4).collect();
    start(&mut s, tasks[0]);
    let name = |s: &SmState, id: JobId| s.job(id).expect("task").job.spec.name.clone();
    let limit = |s: &SmState, id: JobId| s.job(id).expect("task").job.spec.time_limit_s;

    // A name changes on the pending tasks only; the running one keeps it.
    let renamed = JobUpdate {
        name: Some("renamed".into()),
        ..JobUpdate::default()
    };
    assert_eq!(
        update_array(&mut s, array, renamed),
        Response::JobUpdated {
            changes: vec!["JobName arr -> renamed".into()]
        }
    );
    let names: Vec<String> = tasks.iter().map(|&t| name(&s, t)).collect();
    assert_eq!(names, ["arr", "renamed", "renamed", "renamed"]);
    assert_eq!(
        s.job(tasks[3])
            .and_then(|r| r.events.last().map(|e| e.message.clone())),
        Some("Updated: JobName arr -> renamed".to_string())
    );

    // A time limit reaches the running task too.
    let shorter = JobUpdate {
        time_limit_s: Some(300),
        ..JobUpdate::default()
    };
    update_array(&mut s, array, shorter);
    assert!(tasks.iter().all(|&t| limit(&s, t) == 300));

    // One task refusing refuses it for all, naming the task; the tasks
    // before it are put back.
    let self_dependency = JobUpdate {
        dependency: Some(format!("afterok:{}", tasks[2])),
        comment: Some("late".into()),
        ..JobUpdate::default()
    };
    match update_array(&mut s, array, self_dependency) {
        Response::Rejected { reason } => assert_eq!(
            reason,
            format!("{array}_2: job {} cannot depend on itself", tasks[2])
        ),
        other => panic!("accepted: {other:?}"),
    }
    for &t in &tasks[1..] {
        let spec = &s.job(t).expect("task").job.spec;
        assert_eq!((spec.dependency.as_str(), spec.comment.as_str()), ("", ""));
    }

    // A plain job's id is not an array's; an array whose tasks all run
    // takes nothing but a time limit.
    let plain = submit(&mut s, "plain", spec("plain"));
    match update_array(&mut s, plain, JobUpdate::default()) {
        Response::Rejected { reason } => assert!(reason.starts_with("nothing to update")),
        other => panic!("{other:?}"),
    }
    let comment = JobUpdate {
        comment: Some("x".into()),
        ..JobUpdate::default()
    };
    match update_array(&mut s, plain, comment.clone()) {
        Response::Rejected { reason } => {
            assert_eq!(reason, format!("job {plain} is not a job array's id"))
        }
        other => panic!("{other:?}"),
    }
    for &t in &tasks[1..] {
        start(&mut s, t);
    }
    match update_array(&mut s, array, comment) {
        Response::Rejected { reason } => assert!(
            reason.starts_with(&format!("no task of job array {array} can change")),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
}

/// A QOS's submit limit counts the tasks an array update has moved so
/// far, and a task moved alone is one job, not the whole array.
#[test]
fn an_array_update_counts_its_tasks_against_a_submit_limit() {
    let mut s = state();
    let mut small = berth_scheduler::Qos::named("small");
    small.limits.max_submit_jobs_per_user = Some(2);
    allow_qos(&mut s, small);
    let array = submit(
        &mut s,
        "arr",
        JobSpec {
            array: "0-3".into(),
            ..spec("arr")
        },
    );
    let to_small = JobUpdate {
        qos: Some("small".into()),
        ..JobUpdate::default()
    };
    match update_array(&mut s, array, to_small.clone()) {
        Response::Rejected { reason } => {
            assert!(reason.starts_with(&format!("{array}_2: ")), "{reason}")
        }
        other => panic!("accepted: {other:?}"),
    }
    let qos_of = |s: &SmState, id: JobId| s.job(id).expect("task").job.spec.qos.clone();
    assert!((array..array + 4).all(|t| qos_of(&s, t) == "normal"));
    // One task alone fits.
    assert_eq!(
        update(&mut s, array + 3, to_small, false),
        Response::JobUpdated {
            changes: vec!["QOS normal -> small".into()]
        }
    );
}

#[test]
fn a_snapshot_after_an_update_sees_the_change_not_the_kept_view() {
    let mut s = state();
    let a = submit(&mut s, "a", spec("a"));
    let b = submit(&mut s, "b", spec("b"));
    let pending_of = |s: &SmState, id: JobId| {
        s.scheduler_snapshot(|_| berth_scheduler::HostState::Up)
            .pending
            .into_iter()
            .find(|p| p.id == id)
    };
    // The first snapshot keeps a view of both jobs.
    assert_eq!(
        pending_of(&s, b).map(|p| (p.nice, p.time_limit_s)),
        Some((0, 600))
    );
    let r = update(
        &mut s,
        b,
        JobUpdate {
            time_limit_s: Some(300),
            nice: Some(10),
            features: Some(vec!["ib".into()]),
            ..JobUpdate::default()
        },
        false,
    );
    assert!(matches!(r, Response::JobUpdated { .. }), "{r:?}");
    let seen = pending_of(&s, b).expect("b is pending");
    assert_eq!(
        (seen.nice, seen.time_limit_s, seen.shape.features.clone()),
        (10, 300, vec!["ib".to_string()])
    );
    // A job that leaves the queue leaves the snapshot and its view goes.
    apply_cancel(&mut s, a);
    assert!(pending_of(&s, a).is_none());
    assert!(pending_of(&s, b).is_some());
}

fn apply_cancel(s: &mut SmState, job_id: JobId) {
    let r = s.apply(
        &Command::CancelJob {
            job_id,
            now_ms: 7_000,
        },
        &mut Dirty::default(),
    );
    assert!(matches!(r, Response::Cancelled { .. }), "{r:?}");
}
