use super::*;
use berth_scheduler::Inventory;

fn spec(cmd: &str, cpus: u32) -> JobSpec {
    JobSpec {
        user: "alice".into(),
        command: cmd.into(),
        cpus,
        ..JobSpec::default()
    }
}

fn submit(state: &mut SmState, request_id: &str, cpus: u32) -> Response {
    let mut dirty = Dirty::default();
    state.apply(
        &Command::SubmitJob {
            request_id: request_id.into(),
            spec: spec("true", cpus),
            now_ms: 1_000,
        },
        &mut dirty,
    )
}

fn register(state: &mut SmState, name: &str, cpus: u32) {
    let mut dirty = Dirty::default();
    let r = state.apply(
        &Command::RegisterHost {
            name: name.into(),
            inventory: Inventory::cpu_mem(cpus, 4096),
            agent_restarted: false,
            running_allocs: Vec::new(),
            drain_reason: String::new(),
            now_ms: 1,
            step_addr: String::new(),
        },
        &mut dirty,
    );
    assert_eq!(r, Response::HostRegistered);
}

fn place(state: &mut SmState, job_id: JobId, host: &str, cpus: u32) -> Response {
    let mut dirty = Dirty::default();
    state.apply(
        &Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms: 2_000,
            starts: vec![Placement {
                job_id,
                host: host.into(),
                resources: Resources::cpu_mem(cpus, 0),
                partition: String::new(),
                path: 0,
                released: Vec::new(),
            }],
            evictions: Vec::new(),
            borrowed: Vec::new(),
        },
        &mut dirty,
    )
}

#[test]
fn ids_are_sequential_and_submits_idempotent() {
    let mut s = SmState::default();
    assert_eq!(
        submit(&mut s, "a", 1),
        Response::Submitted {
            job_id: 1,
            duplicate: false
        }
    );
    assert_eq!(
        submit(&mut s, "b", 1),
        Response::Submitted {
            job_id: 2,
            duplicate: false
        }
    );
    assert_eq!(
        submit(&mut s, "a", 1),
        Response::Submitted {
            job_id: 1,
            duplicate: true
        }
    );
    assert_eq!(s.data.counters.next_job_id, 3);
}

#[test]
fn invalid_submit_changes_nothing() {
    let mut s = SmState::default();
    let mut dirty = Dirty::default();
    let r = s.apply(
        &Command::SubmitJob {
            request_id: "x".into(),
            spec: spec("   ", 1),
            now_ms: 0,
        },
        &mut dirty,
    );
    assert!(matches!(r, Response::Rejected { .. }));
    assert_eq!(s.data.counters.next_job_id, 1);
    assert!(dirty.jobs.is_empty());
    assert!(s.data.request_ids.is_empty());
}

#[test]
fn plan_is_rechecked_against_current_state() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 3);
    submit(&mut s, "b", 3);
    assert_eq!(
        place(&mut s, 1, "h1", 3),
        Response::PlanApplied {
            started: 1,
            dropped: 0,
            evicted: 0
        }
    );
    // A second plan computed from a stale snapshot must not overcommit h1.
    assert_eq!(
        place(&mut s, 2, "h1", 3),
        Response::PlanApplied {
            started: 0,
            dropped: 1,
            evicted: 0
        }
    );
    // Nor start a job twice, nor place on an unknown host.
    assert_eq!(
        place(&mut s, 1, "h1", 1),
        Response::PlanApplied {
            started: 0,
            dropped: 1,
            evicted: 0
        }
    );
    assert_eq!(
        place(&mut s, 2, "nope", 3),
        Response::PlanApplied {
            started: 0,
            dropped: 1,
            evicted: 0
        }
    );
    assert_eq!(s.data.hosts["h1"].allocated.cpus, 3);
}

#[test]
fn exit_frees_resources_and_stale_reports_are_refused() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 4);
    place(&mut s, 1, "h1", 4);
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.clone())
        .map(|a| a.alloc_id)
        .unwrap_or(0);
    let mut dirty = Dirty::default();
    let stale = Command::JobExited {
        job_id: 1,
        alloc_id: alloc_id + 7,
        host: "h1".into(),
        exit_code: 0,
        signal: 0,
        launch_error: String::new(),
        now_ms: 3_000,
    };
    assert_eq!(
        s.apply(&stale, &mut dirty),
        Response::Report { accepted: false }
    );
    let real = Command::JobExited {
        job_id: 1,
        alloc_id,
        host: "h1".into(),
        exit_code: 2,
        signal: 0,
        launch_error: String::new(),
        now_ms: 3_000,
    };
    assert_eq!(
        s.apply(&real, &mut dirty),
        Response::Report { accepted: true }
    );
    assert_eq!(
        s.apply(&real, &mut dirty),
        Response::Report { accepted: true }
    );
    let job = &s
        .job(1)
        .map(|r| r.job.clone())
        .unwrap_or_else(|| panic!("job 1"));
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.exit_code, 2);
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    assert!(s.assignments_for("h1").is_empty());
}

#[test]
fn cancel_running_job_leaves_assignment_set_then_ends_cancelled() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 1);
    place(&mut s, 1, "h1", 1);
    assert_eq!(s.assignments_for("h1").len(), 1);
    let mut dirty = Dirty::default();
    let r = s.apply(
        &Command::CancelJob {
            job_id: 1,
            now_ms: 5,
        },
        &mut dirty,
    );
    assert_eq!(
        r,
        Response::Cancelled {
            previous_state: JobState::Running
        }
    );
    assert!(s.assignments_for("h1").is_empty());
    // Still running until its agent reports it: listed as stopping, so an
    // agent that never received it can say so.
    let stopping: Vec<JobId> = s.stopping_on("h1").iter().map(|r| r.job.id).collect();
    assert_eq!(stopping, vec![1]);
    assert!(s.stopping_on("h2").is_empty());
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.clone())
        .map(|a| a.alloc_id)
        .unwrap_or(0);
    s.apply(
        &Command::JobExited {
            job_id: 1,
            alloc_id,
            host: "h1".into(),
            exit_code: 0,
            signal: 15,
            launch_error: String::new(),
            now_ms: 6,
        },
        &mut dirty,
    );
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::Cancelled));
    assert!(s.stopping_on("h1").is_empty());
    let again = s.apply(
        &Command::CancelJob {
            job_id: 1,
            now_ms: 7,
        },
        &mut dirty,
    );
    assert!(matches!(again, Response::Rejected { .. }));
}

#[test]
fn request_ids_are_bounded() {
    let mut s = SmState::default();
    let n = REQUEST_IDS_RETAINED_JOBS + 10;
    for i in 0..n {
        submit(&mut s, &format!("r{i}"), 1);
    }
    assert_eq!(s.data.request_ids.len() as u64, REQUEST_IDS_RETAINED_JOBS);
    assert!(!s.data.request_ids.contains_key("r0"));
    assert!(s.data.request_ids.contains_key(&format!("r{}", n - 1)));
}

#[test]
fn rebuilding_from_data_restores_indexes() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 2);
    submit(&mut s, "b", 1);
    place(&mut s, 1, "h1", 2);
    let rebuilt = SmState::from_data(s.data.clone());
    assert_eq!(rebuilt.data.hosts["h1"].allocated.cpus, 2);
    assert_eq!(rebuilt.pending_ids().collect::<Vec<_>>(), vec![2]);
    assert_eq!(rebuilt.running_ids().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn restarted_agent_loses_allocations_it_does_not_run() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 1);
    submit(&mut s, "b", 1);
    place(&mut s, 1, "h1", 1);
    place(&mut s, 2, "h1", 1);
    let kept = alloc_of(&s, 2);
    let mut dirty = Dirty::default();
    s.apply(
        &Command::RegisterHost {
            name: "h1".into(),
            inventory: Inventory::cpu_mem(4, 4096),
            agent_restarted: true,
            running_allocs: vec![kept],
            drain_reason: String::new(),
            now_ms: 9,
            step_addr: String::new(),
        },
        &mut dirty,
    );
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::NodeFail));
    assert_eq!(s.job(2).map(|r| r.job.state), Some(JobState::Running));
    assert_eq!(s.data.hosts["h1"].allocated.cpus, 1);
    assert_eq!(s.assignments_for("h1").len(), 1);
}

#[test]
fn time_limit_stops_the_job_and_it_ends_timeout() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    let mut dirty = Dirty::default();
    s.apply(
        &Command::SubmitJob {
            request_id: "t".into(),
            spec: JobSpec {
                time_limit_s: 60,
                ..spec("sleep 1000", 1)
            },
            now_ms: 0,
        },
        &mut dirty,
    );
    place(&mut s, 1, "h1", 1); // starts at 2_000 ms
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.clone())
        .map(|a| a.alloc_id)
        .unwrap_or(0);
    assert!(s.time_limits_expired(61_999, 10).is_empty());
    assert_eq!(s.time_limits_expired(62_000, 10), vec![(1, alloc_id)]);

    // A stale or early proposal changes nothing.
    let early = Command::TimeLimitReached {
        allocations: vec![(1, alloc_id)],
        now_ms: 61_000,
    };
    assert_eq!(
        s.apply(&early, &mut dirty),
        Response::TimeLimitsEnforced { stopping: 0 }
    );
    let stale = Command::TimeLimitReached {
        allocations: vec![(1, alloc_id + 1)],
        now_ms: 62_000,
    };
    assert_eq!(
        s.apply(&stale, &mut dirty),
        Response::TimeLimitsEnforced { stopping: 0 }
    );
    assert_eq!(s.assignments_for("h1").len(), 1);

    let due = Command::TimeLimitReached {
        allocations: vec![(1, alloc_id)],
        now_ms: 62_000,
    };
    assert_eq!(
        s.apply(&due, &mut dirty),
        Response::TimeLimitsEnforced { stopping: 1 }
    );
    assert!(
        s.assignments_for("h1").is_empty(),
        "the agent is told to stop it"
    );
    assert!(
        s.time_limits_expired(99_000, 10).is_empty(),
        "proposed once"
    );
    s.apply(
        &Command::JobExited {
            job_id: 1,
            alloc_id,
            host: "h1".into(),
            exit_code: 143,
            signal: 15,
            launch_error: String::new(),
            now_ms: 63_000,
        },
        &mut dirty,
    );
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::Timeout));
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
}

#[test]
fn silent_host_fails_its_jobs_only() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    register(&mut s, "h2", 4);
    submit(&mut s, "a", 1);
    submit(&mut s, "b", 1);
    place(&mut s, 1, "h1", 1);
    place(&mut s, 2, "h2", 1);
    assert_eq!(
        s.hosts_with_allocations().into_iter().collect::<Vec<_>>(),
        vec!["h1".to_string(), "h2".to_string()]
    );
    let mut dirty = Dirty::default();
    let r = s.apply(
        &Command::HostsSilent {
            hosts: vec!["h1".into()],
            timeout_ms: 10_000,
            now_ms: 50_000,
        },
        &mut dirty,
    );
    assert_eq!(r, Response::HostsFailed { jobs_ended: 1 });
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::NodeFail));
    assert_eq!(s.job(2).map(|r| r.job.state), Some(JobState::Running));
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    assert!(s.assignments_for("h1").is_empty());
    // Proposed again (a retry), it finds nothing more to end.
    let again = s.apply(
        &Command::HostsSilent {
            hosts: vec!["h1".into()],
            timeout_ms: 10_000,
            now_ms: 51_000,
        },
        &mut dirty,
    );
    assert_eq!(again, Response::HostsFailed { jobs_ended: 0 });
}

#[test]
fn gpu_jobs_get_distinct_devices_and_policy_limits_are_rechecked() {
    let mut s = SmState::default();
    let mut dirty = Dirty::default();
    let mut inventory = Inventory::cpu_mem(16, 4096);
    // Room for all three jobs on the host: only the QOS limit refuses one.
    inventory.gpus = 8;
    inventory.gpu_type = "a100".into();
    s.apply(
        &Command::RegisterHost {
            name: "g1".into(),
            inventory,
            agent_restarted: false,
            running_allocs: Vec::new(),
            drain_reason: String::new(),
            now_ms: 1,
            step_addr: String::new(),
        },
        &mut dirty,
    );
    // A QOS allowing 4 GPUs at once for the account, so the third 2-GPU
    // job is refused by the limit even though a plan proposes it.
    let team = berth_scheduler::Qos {
        limits: berth_scheduler::Limits {
            grp_tres: berth_scheduler::TresLimits {
                gpu: Some(4),
                ..Default::default()
            },
            ..Default::default()
        },
        ..berth_scheduler::Qos::named("team")
    };
    for change in [
        crate::policy::PolicyChange::UpsertQos(team),
        crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
            name: "lab".into(),
            users: vec!["alice".into()],
            qos: vec!["team".into()],
            ..Default::default()
        }),
    ] {
        assert_eq!(
            s.apply(&Command::SetPolicy { change, now_ms: 2 }, &mut dirty),
            Response::PolicySet
        );
    }
    let gpu_spec = JobSpec {
        gres: vec!["gpu:a100:2".into()],
        ..spec("true", 1)
    };
    let mut ids = Vec::new();
    for n in 0..3 {
        match s.apply(
            &Command::SubmitJob {
                request_id: format!("g{n}"),
                spec: gpu_spec.clone(),
                now_ms: 3,
            },
            &mut dirty,
        ) {
            Response::Submitted { job_id, .. } => ids.push(job_id),
            other => panic!("submit: {other:?}"),
        }
    }
    let record = s.job(ids[0]).expect("job");
    assert_eq!(
        (
            record.job.spec.account.as_str(),
            record.job.spec.qos.as_str()
        ),
        ("lab", "team")
    );
    assert_eq!(
        record.events.last().map(|e| e.message.as_str()),
        Some("Priority set (qos: 0, account: 0, user: 0, nice: 0)")
    );
    let per_host = gpu_spec.per_host();
    assert_eq!(per_host.gpus, 2);
    let starts = ids
        .iter()
        .map(|&job_id| Placement {
            job_id,
            host: "g1".into(),
            resources: per_host,
            partition: String::new(),
            path: 0,
            released: Vec::new(),
        })
        .collect();
    let r = s.apply(
        &Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms: 4,
            starts,
            evictions: Vec::new(),
            borrowed: Vec::new(),
        },
        &mut dirty,
    );
    assert_eq!(
        r,
        Response::PlanApplied {
            started: 2,
            dropped: 1,
            evicted: 0
        }
    );
    let devices = |id| {
        s.job(id)
            .and_then(|r| r.job.alloc.as_ref())
            .map(|a| a.gpu_indices.clone())
    };
    assert_eq!(devices(ids[0]), Some(vec![0, 1]));
    assert_eq!(devices(ids[1]), Some(vec![2, 3]));
    assert_eq!(devices(ids[2]), None);
    // An unknown GRES is refused at submit, changing nothing.
    let bad = JobSpec {
        gres: vec!["fpga:1".into()],
        ..spec("true", 1)
    };
    let r = s.apply(
        &Command::SubmitJob {
            request_id: "bad".into(),
            spec: bad,
            now_ms: 5,
        },
        &mut dirty,
    );
    assert!(matches!(r, Response::Rejected { .. }), "{r:?}");
}

fn alloc_of(s: &SmState, id: JobId) -> u64 {
    s.job(id)
        .and_then(|r| r.job.alloc.clone())
        .map(|a| a.alloc_id)
        .unwrap_or(0)
}

fn control(s: &mut SmState, job_id: JobId, action: crate::JobAction) -> Response {
    let mut dirty = Dirty::default();
    s.apply(
        &Command::ControlJob {
            job_id,
            action,
            now_ms: 7_000,
        },
        &mut dirty,
    )
}

fn exit_current(s: &mut SmState, job_id: JobId) -> Response {
    let alloc = alloc_of(s, job_id);
    let mut dirty = Dirty::default();
    s.apply(
        &Command::JobExited {
            job_id,
            alloc_id: alloc,
            host: "h1".into(),
            exit_code: 0,
            signal: 15,
            launch_error: String::new(),
            now_ms: 8_000,
        },
        &mut dirty,
    )
}

#[test]
fn the_pass_reads_no_held_job_and_a_released_one_comes_back() {
    use crate::JobAction;
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 1);
    submit(&mut s, "b", 1);
    assert_eq!(control(&mut s, 1, JobAction::Hold), Response::JobControlled);
    let up = |_: &str| berth_scheduler::HostState::Up;
    let ids = |pending: &[std::sync::Arc<berth_scheduler::PendingJob>]| {
        pending.iter().map(|p| p.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(&s.pass_input(up).into_snapshot().pending), [2]);
    // `explain` still sees the held job, to say what it would need.
    assert_eq!(ids(&s.scheduler_snapshot(up).pending), [1, 2]);
    assert_eq!(
        control(&mut s, 1, JobAction::Release { admin: false }),
        Response::JobControlled
    );
    assert_eq!(ids(&s.pass_input(up).into_snapshot().pending), [1, 2]);
}

#[test]
fn hold_release_and_requeue_keep_the_job_id() {
    use crate::JobAction;
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 1);
    assert_eq!(control(&mut s, 1, JobAction::Hold), Response::JobControlled);
    let snap = s.scheduler_snapshot(|_| berth_scheduler::HostState::Up);
    assert!(snap.pending[0].held);
    // A placement for a held job is refused by apply.
    assert!(matches!(
        place(&mut s, 1, "h1", 1),
        Response::PlanApplied { started: 0, .. }
    ));
    assert_eq!(
        control(&mut s, 1, JobAction::Release { admin: false }),
        Response::JobControlled
    );
    place(&mut s, 1, "h1", 1);
    assert!(matches!(
        control(&mut s, 1, JobAction::Hold),
        Response::Rejected { .. }
    ));
    // Requeue of the running job: it leaves the host's assignment set, and
    // its exit report puts it back in the queue with the same id.
    assert_eq!(
        control(&mut s, 1, JobAction::Requeue { hold: true }),
        Response::JobControlled
    );
    assert!(s.assignments_for("h1").is_empty());
    assert_eq!(exit_current(&mut s, 1), Response::Report { accepted: true });
    let job = &s.job(1).expect("job").job;
    assert_eq!(
        (job.state, job.restarts, job.spec.hold),
        (JobState::Pending, 1, true)
    );
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    assert_eq!(s.pending_ids().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn node_fail_requeues_a_requeueable_job_until_the_bound_then_holds_it() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    let mut dirty = Dirty::default();
    s.apply(
        &Command::SubmitJob {
            request_id: "r".into(),
            spec: JobSpec {
                requeue: true,
                ..spec("true", 1)
            },
            now_ms: 1_000,
        },
        &mut dirty,
    );
    for round in 1..=super::lifecycle::AUTO_REQUEUES_MAX + 1 {
        assert!(!s.job(1).expect("job").job.held(), "round {round}");
        place(&mut s, 1, "h1", 1);
        let r = s.apply(
            &Command::HostsSilent {
                hosts: vec!["h1".into()],
                timeout_ms: 10_000,
                now_ms: 50_000 + u64::from(round),
            },
            &mut dirty,
        );
        assert_eq!(r, Response::HostsFailed { jobs_ended: 1 });
        let job = &s.job(1).expect("job").job;
        assert_eq!((job.state, job.restarts), (JobState::Pending, round));
    }
    let record = s.job(1).expect("job");
    assert!(record.job.admin_hold);
    assert!(record
        .events
        .last()
        .is_some_and(|e| e.message.starts_with("Held after 6 automatic requeues")));
    assert!(matches!(
        control(&mut s, 1, crate::JobAction::Release { admin: false }),
        Response::Rejected { .. }
    ));
    assert_eq!(
        control(&mut s, 1, crate::JobAction::Release { admin: true }),
        Response::JobControlled
    );
}

#[test]
fn event_sequence_numbers_survive_truncation() {
    let mut s = SmState::default();
    submit(&mut s, "a", 1);
    let record = s.data.jobs.get_mut(&1).expect("job");
    for n in 0..200 {
        record.push_event(n, "note", format!("event {n}"));
    }
    let record = s.job(1).expect("job");
    assert_eq!(record.events.len(), EVENTS_PER_JOB_MAX);
    assert_eq!(record.events_total, 201);
    assert_eq!(record.events.last().map(|e| e.seq), Some(201));
    assert_eq!(
        record.events.first().map(|e| e.seq),
        Some(201 - EVENTS_PER_JOB_MAX as u64 + 1)
    );
    // A store written before sequence numbers existed is numbered on load.
    let mut data = s.data.clone();
    if let Some(r) = data.jobs.get_mut(&1) {
        r.events_total = 0;
        for e in &mut r.events {
            e.seq = 0;
        }
    }
    let reloaded = SmState::from_data(data);
    let seqs: Vec<u64> = reloaded
        .job(1)
        .expect("job")
        .events
        .iter()
        .map(|e| e.seq)
        .take(3)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3]);
}

#[test]
fn an_agent_drained_host_takes_no_work_until_it_registers_clean() {
    let mut s = SmState::default();
    let mut dirty = Dirty::default();
    let registration = |drain_reason: &str| Command::RegisterHost {
        name: "h1".into(),
        inventory: Inventory::cpu_mem(4, 4096),
        agent_restarted: false,
        running_allocs: Vec::new(),
        drain_reason: drain_reason.into(),
        now_ms: 1,
        step_addr: String::new(),
    };
    let why = "declared 8 gpus of type h100, discovered 4 gpus of type h100";
    assert_eq!(
        s.apply(&registration(why), &mut dirty),
        Response::HostRegistered
    );
    assert_eq!(s.data.hosts["h1"].drain_reason, why);
    let snapshot = s.scheduler_snapshot(|_| HostState::Up);
    assert_eq!(snapshot.hosts[0].state, HostState::Drain);
    // Liveness still wins: a silent drained host is down.
    let snapshot = s.scheduler_snapshot(|_| HostState::Down);
    assert_eq!(snapshot.hosts[0].state, HostState::Down);

    // A plan computed before the drain landed is refused where it lands.
    let Response::Submitted { job_id, .. } = submit(&mut s, "r1", 1) else {
        panic!("submit failed");
    };
    assert_eq!(
        place(&mut s, job_id, "h1", 1),
        Response::PlanApplied {
            started: 0,
            dropped: 1,
            evicted: 0
        }
    );

    // Registering without a reason lifts the drain; the job then fits.
    assert_eq!(
        s.apply(&registration(""), &mut dirty),
        Response::HostRegistered
    );
    assert_eq!(
        s.scheduler_snapshot(|_| HostState::Up).hosts[0].state,
        HostState::Up
    );
    assert_eq!(
        place(&mut s, job_id, "h1", 1),
        Response::PlanApplied {
            started: 1,
            dropped: 0,
            evicted: 0
        }
    );

    // An over-long reason is refused and changes nothing.
    let long = "x".repeat(HOST_DRAIN_REASON_BYTES_MAX + 1);
    assert!(matches!(
        s.apply(&registration(&long), &mut dirty),
        Response::Rejected { reason } if reason.contains("drain reason")
    ));
    assert!(s.data.hosts["h1"].drain_reason.is_empty());
}

/// A job placed and then time-limited before its agent ever received the
/// allocation: the agent reports it "stopped before it started" and it
/// ends TIMEOUT, freeing its host, instead of running forever on paper.
#[test]
fn an_allocation_stopped_before_its_agent_saw_it_ends_on_the_agents_report() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    let mut dirty = Dirty::default();
    s.apply(
        &Command::SubmitJob {
            request_id: "t".into(),
            spec: JobSpec {
                time_limit_s: 60,
                ..spec("sleep 1000", 2)
            },
            now_ms: 0,
        },
        &mut dirty,
    );
    place(&mut s, 1, "h1", 2); // starts at 2_000 ms
    let alloc_id = alloc_of(&s, 1);
    s.apply(
        &Command::TimeLimitReached {
            allocations: vec![(1, alloc_id)],
            now_ms: 62_000,
        },
        &mut dirty,
    );
    assert!(s.assignments_for("h1").is_empty());
    assert_eq!(s.stopping_on("h1").len(), 1);
    let r = s.apply(
        &Command::JobExited {
            job_id: 1,
            alloc_id,
            host: "h1".into(),
            exit_code: 0,
            signal: 0,
            launch_error: "stopped before it started".into(),
            now_ms: 62_100,
        },
        &mut dirty,
    );
    assert_eq!(r, Response::Report { accepted: true });
    assert_eq!(s.job(1).map(|r| r.job.state), Some(JobState::Timeout));
    assert!(s.stopping_on("h1").is_empty());
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
}

#[test]
fn a_signal_is_recorded_for_the_running_allocation_only() {
    use crate::JobAction;
    let usr1 = JobAction::Signal {
        signal: 10,
        batch_only: false,
    };
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    submit(&mut s, "a", 1);
    // Pending: nothing to signal, nothing recorded.
    match control(&mut s, 1, usr1) {
        Response::Rejected { reason } => assert_eq!(
            reason,
            "job 1 is pending: only a running job can be signalled"
        ),
        other => panic!("accepted: {other:?}"),
    }
    assert!(s.job(1).expect("job").signals.is_empty());
    place(&mut s, 1, "h1", 1);
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id);
    assert_eq!(control(&mut s, 1, usr1), Response::JobControlled);
    assert_eq!(
        control(
            &mut s,
            1,
            JobAction::Signal {
                signal: 12,
                batch_only: true
            }
        ),
        Response::JobControlled
    );
    // Not a signal at all.
    assert!(matches!(
        control(
            &mut s,
            1,
            JobAction::Signal {
                signal: 0,
                batch_only: false
            }
        ),
        Response::Rejected { .. }
    ));
    let record = s.job(1).expect("job");
    assert_eq!(
        record
            .signals
            .iter()
            .map(|r| (r.seq, Some(r.alloc_id), r.signal, r.batch_only))
            .collect::<Vec<_>>(),
        vec![(1, alloc_id, 10, false), (2, alloc_id, 12, true)]
    );
    assert_eq!(
        record.job.state,
        JobState::Running,
        "a signal is not a stop"
    );
    assert!(record
        .events
        .iter()
        .any(|e| e.message == "Signal SIGUSR2 requested for its batch shell"));
    // Still assigned: the agent keeps it running and sends the signals.
    assert_eq!(s.assignments_for("h1").len(), 1);
    // The bound keeps the newest.
    for _ in 0..SIGNALS_PER_JOB_MAX {
        control(&mut s, 1, usr1);
    }
    let record = s.job(1).expect("job");
    assert_eq!(record.signals.len(), SIGNALS_PER_JOB_MAX);
    assert_eq!(
        record.signals.last().map(|r| r.seq),
        Some(2 + SIGNALS_PER_JOB_MAX as u64)
    );
}

#[test]
fn submit_checks_the_warn_signal_fields() {
    let check = |signal: u32, before_s: u32, batch_only: bool| {
        validate_submit(
            "r",
            &JobSpec {
                warn_signal: signal,
                warn_signal_before_s: before_s,
                warn_signal_batch_only: batch_only,
                ..spec("true", 1)
            },
        )
    };
    assert!(check(10, 60, true).is_ok());
    assert!(check(0, 0, false).is_ok());
    assert!(check(40, 60, false)
        .unwrap_err()
        .contains("warn_signal 40 is not a signal"));
    assert!(check(10, 70_000, false)
        .unwrap_err()
        .contains("warn_signal_before_s 70000 is more than 65535"));
    assert!(check(0, 60, false).is_err());
}

#[test]
fn a_spec_without_warn_signal_reads_and_writes_as_before() {
    // Stored jobs from before command version 7 have no warn_signal keys.
    let old = serde_json::to_value(spec("true", 1)).expect("json");
    assert!(old.get("warn_signal").is_none());
    let mut with = spec("true", 1);
    with.warn_signal = 10;
    with.warn_signal_before_s = 60;
    let text = serde_json::to_string(&with).expect("json");
    let back: JobSpec = serde_json::from_str(&text).expect("decodes");
    assert_eq!(back, with);
}

#[test]
fn account_preempt_lists_through_set_policy() {
    use crate::policy::PolicyChange;
    let mut s = SmState::default();
    let set = |s: &mut SmState, change: PolicyChange| {
        s.apply(
            &Command::SetPolicy { change, now_ms: 5 },
            &mut Dirty::default(),
        )
    };
    let account = |name: &str, preempt: &[&str]| berth_scheduler::Account {
        name: name.into(),
        users: vec![format!("{name}-user")],
        preempt: preempt.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    for a in [account("scav", &[]), account("lab", &["scav"])] {
        assert_eq!(
            set(&mut s, PolicyChange::UpsertAccount(a)),
            Response::PolicySet
        );
    }
    let before = s.data.policy.clone();
    assert_eq!(
        set(
            &mut s,
            PolicyChange::UpsertAccount(account("lab", &["scav", "ghost"]))
        ),
        Response::Rejected {
            reason: "account lab: preempts unknown account ghost".into()
        }
    );
    assert_eq!(s.data.policy, before, "a refused change changes nothing");
    assert_eq!(
        set(&mut s, PolicyChange::DeleteAccount("scav".into())),
        Response::PolicySet
    );
    assert_eq!(
        s.data.policy.accounts["lab"].preempt,
        Vec::<String>::new(),
        "the deleted account left lab's list"
    );
}
