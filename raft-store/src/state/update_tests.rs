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

fn start(s: &mut SmState, job_id: JobId) {
    let r = s.apply(
        &Command::ApplyPlan {
            snapshot_index: 0,
            now_ms: 2_000,
            starts: vec![Placement {
                job_id,
                host: "h1".into(),
                resources: Resources::cpu_mem(1, 0),
                partition: String::new(),
                path: 0,
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
    for change in [
        crate::policy::PolicyChange::UpsertQos(berth_scheduler::Qos::named("team")),
        crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
            name: "lab".into(),
            users: vec!["alice".into()],
            qos: vec!["normal".into(), "team".into()],
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
