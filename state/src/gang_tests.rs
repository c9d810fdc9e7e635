//! Multi-host jobs (gangs): the pass places them, `apply` re-checks every
//! host and starts all or none, and the allocation's room, assignments,
//! failure and end cover every host.

use berth_scheduler::{
    schedule, GangPlacement, HostState, Inventory, JobSpec, JobState, Policy, Resources,
};

use super::test_support::{apply, placement, plan, register, submit};
use super::*;
use crate::command::Command;

fn apply_gang(s: &mut SmState, job_id: u64, hosts: &[&str], resources: Resources) -> Response {
    let gang = GangPlacement {
        job_id,
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        resources,
        partition: String::new(),
        path: 0,
        released: Vec::new(),
    };
    apply(s, plan(Vec::new(), vec![gang]))
}

fn gang_spec(nodes: u32, cpus: u32) -> JobSpec {
    JobSpec {
        user: "alice".into(),
        command: "hostname".into(),
        cpus,
        nodes,
        time_limit_s: 600,
        ..JobSpec::default()
    }
}

fn three_hosts() -> SmState {
    let mut s = SmState::default();
    for name in ["h1", "h2", "h3"] {
        register(&mut s, name, Inventory::cpu_mem(8, 1024));
    }
    s
}

fn state_of(s: &SmState, job_id: u64) -> Option<JobState> {
    s.job(job_id).map(|r| r.job.state)
}

#[test]
fn the_pass_places_a_gang_and_apply_starts_it_on_every_host() {
    let mut s = three_hosts();
    assert!(matches!(
        submit(&mut s, "r1", gang_spec(2, 6)),
        Response::Submitted { .. }
    ));
    let plan = schedule(
        &s.scheduler_snapshot(|_| HostState::Up),
        &Policy::default(),
        20,
    );
    assert!(plan.starts.is_empty(), "{plan:?}");
    let [gang] = plan.gang_starts.as_slice() else {
        panic!("one gang expected: {plan:?}");
    };
    assert_eq!(gang.hosts.len(), 2);
    let response = apply(
        &mut s,
        super::test_support::plan(Vec::new(), plan.gang_starts.clone()),
    );
    assert_eq!(
        response,
        Response::PlanApplied {
            started: 1,
            dropped: 0,
            evicted: 0
        }
    );
    let alloc = s
        .job(1)
        .and_then(|r| r.job.alloc.clone())
        .expect("allocated");
    let hosts: Vec<&str> = alloc.hosts().collect();
    assert_eq!(
        hosts,
        gang.hosts.iter().map(String::as_str).collect::<Vec<_>>()
    );
    for host in &hosts {
        assert_eq!(s.data.hosts[*host].allocated, Resources::cpu_mem(6, 0));
    }
    // Only the batch host runs the script; the other hosts' room is held.
    assert_eq!(s.assignments_for(hosts[0]).len(), 1);
    assert!(s.assignments_for(hosts[1]).is_empty());
    let events: Vec<&str> = s.job(1).map_or(Vec::new(), |r| {
        r.events.iter().map(|e| e.message.as_str()).collect()
    });
    assert!(
        events.contains(&format!("Allocated on {},{} (allocation 1)", hosts[0], hosts[1]).as_str()),
        "{events:?}"
    );
    // The next pass sees both hosts taken: a second 6-CPU gang of two
    // does not fit on the one host left.
    submit(&mut s, "r2", gang_spec(2, 6));
    let plan = schedule(
        &s.scheduler_snapshot(|_| HostState::Up),
        &Policy::default(),
        30,
    );
    assert!(
        plan.gang_starts.is_empty() && plan.starts.is_empty(),
        "{plan:?}"
    );
}

#[test]
fn a_gang_starts_on_all_its_hosts_or_on_none() {
    let mut s = three_hosts();
    submit(&mut s, "r1", gang_spec(2, 6));
    // h2 is full: the whole gang is dropped and h1 keeps its room.
    submit(
        &mut s,
        "r-fill",
        JobSpec {
            nodes: 1,
            ..gang_spec(1, 8)
        },
    );
    let fill = apply(
        &mut s,
        super::test_support::plan(
            vec![placement(2, "h2", Resources::cpu_mem(8, 0), "", 0)],
            Vec::new(),
        ),
    );
    assert!(matches!(fill, Response::PlanApplied { started: 1, .. }));
    let response = apply_gang(&mut s, 1, &["h1", "h2"], Resources::cpu_mem(6, 0));
    assert!(matches!(
        response,
        Response::PlanApplied {
            started: 0,
            dropped: 1,
            ..
        }
    ));
    assert_eq!(state_of(&s, 1), Some(JobState::Pending));
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    // Too few hosts, a host twice, an unknown host, the wrong share: all
    // dropped the same way.
    for hosts in [&["h1"][..], &["h1", "h1"], &["h1", "nope"]] {
        let r = apply_gang(&mut s, 1, hosts, Resources::cpu_mem(6, 0));
        assert!(
            matches!(r, Response::PlanApplied { started: 0, .. }),
            "{hosts:?}"
        );
    }
    let r = apply_gang(&mut s, 1, &["h1", "h3"], Resources::cpu_mem(5, 0));
    assert!(matches!(r, Response::PlanApplied { started: 0, .. }));
    assert_eq!(state_of(&s, 1), Some(JobState::Pending));
    let r = apply_gang(&mut s, 1, &["h1", "h3"], Resources::cpu_mem(6, 0));
    assert!(matches!(r, Response::PlanApplied { started: 1, .. }));
}

#[test]
fn a_gang_ends_on_its_batch_hosts_report_and_frees_every_host() {
    let mut s = three_hosts();
    submit(&mut s, "r1", gang_spec(3, 4));
    apply_gang(&mut s, 1, &["h1", "h2", "h3"], Resources::cpu_mem(4, 0));
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.as_ref())
        .map_or(0, |a| a.alloc_id);
    // A member host cannot end it: nothing of the job runs there.
    let exited = |host: &str| Command::JobExited {
        job_id: 1,
        alloc_id,
        host: host.into(),
        exit_code: 0,
        signal: 0,
        launch_error: String::new(),
        now_ms: 40,
    };
    assert_eq!(
        apply(&mut s, exited("h2")),
        Response::Report { accepted: false }
    );
    assert_eq!(state_of(&s, 1), Some(JobState::Running));
    assert_eq!(
        apply(&mut s, exited("h1")),
        Response::Report { accepted: true }
    );
    assert_eq!(state_of(&s, 1), Some(JobState::Completed));
    for host in ["h1", "h2", "h3"] {
        assert_eq!(s.data.hosts[host].allocated, Resources::default(), "{host}");
    }
}

#[test]
fn a_silent_member_host_fails_the_whole_gang_but_a_restarted_member_agent_does_not() {
    let mut s = three_hosts();
    submit(&mut s, "r1", gang_spec(2, 4));
    apply_gang(&mut s, 1, &["h1", "h2"], Resources::cpu_mem(4, 0));
    assert_eq!(
        s.hosts_with_allocations().into_iter().collect::<Vec<_>>(),
        ["h1", "h2"]
    );
    // h2's agent restarts running nothing: it never ran anything of the
    // gang, so nothing was lost.
    agent_registers(&mut s, "h2", true, "");
    assert_eq!(state_of(&s, 1), Some(JobState::Running));
    // h2 goes silent: the gang has lost a host and ends NODE_FAIL.
    let r = apply(
        &mut s,
        Command::HostsSilent {
            hosts: vec!["h2".into()],
            timeout_ms: 10_000,
            now_ms: 50_000,
        },
    );
    assert_eq!(r, Response::HostsFailed { jobs_ended: 1 });
    assert_eq!(state_of(&s, 1), Some(JobState::NodeFail));
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    assert_eq!(s.data.hosts["h2"].allocated, Resources::default());
}

#[test]
fn gpu_devices_are_picked_on_each_host_of_a_gang() {
    let mut s = SmState::default();
    let gpus = |n| Inventory {
        gpus: n,
        gpu_type: "a100".into(),
        ..Inventory::cpu_mem(16, 4096)
    };
    register(&mut s, "g1", gpus(4));
    register(&mut s, "g2", gpus(4));
    let spec = JobSpec {
        gres: vec!["gpu:2".into()],
        ..gang_spec(2, 2)
    };
    submit(&mut s, "r1", spec.clone());
    submit(&mut s, "r2", spec);
    let each = Resources {
        gpus: 2,
        ..Resources::cpu_mem(2, 0)
    };
    apply_gang(&mut s, 1, &["g1", "g2"], each);
    apply_gang(&mut s, 2, &["g1", "g2"], each);
    let devices = |job: u64, host: &str| {
        s.job(job)
            .and_then(|r| r.job.alloc.as_ref())
            .map(|a| a.gpu_indices_on(host).to_vec())
            .unwrap_or_default()
    };
    assert_eq!(devices(1, "g1"), [0, 1]);
    assert_eq!(devices(1, "g2"), [0, 1]);
    assert_eq!(devices(2, "g1"), [2, 3]);
    assert_eq!(devices(2, "g2"), [2, 3]);
}

#[test]
fn a_gang_survives_a_reload_with_its_room_on_every_host() {
    let mut s = three_hosts();
    submit(&mut s, "r1", gang_spec(2, 4));
    apply_gang(&mut s, 1, &["h1", "h3"], Resources::cpu_mem(4, 0));
    let reloaded = SmState::from_data(s.data.clone());
    assert_eq!(
        reloaded.data.hosts["h1"].allocated,
        Resources::cpu_mem(4, 0)
    );
    assert_eq!(reloaded.data.hosts["h2"].allocated, Resources::default());
    assert_eq!(
        reloaded.data.hosts["h3"].allocated,
        Resources::cpu_mem(4, 0)
    );
}

#[test]
fn too_many_nodes_are_refused() {
    let mut s = SmState::default();
    match submit(&mut s, "r1", gang_spec(4097, 1)) {
        Response::Rejected { reason } => {
            assert_eq!(
                reason,
                "the job asks for 4097 nodes; at most 4096 are allowed"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(s.data.jobs.is_empty());
}

/// `name`'s agent registers (again), running nothing; `restarted`: a
/// fresh agent process.
fn agent_registers(s: &mut SmState, name: &str, restarted: bool, step_addr: &str) -> Response {
    apply(
        s,
        Command::RegisterHost {
            name: name.into(),
            inventory: Inventory::cpu_mem(8, 1024),
            agent_restarted: restarted,
            running_allocs: Vec::new(),
            now_ms: 30,
            drain_reason: String::new(),
            step_addr: step_addr.into(),
        },
    )
}

#[test]
fn member_hosts_list_the_gang_and_agents_register_where_steps_reach_them() {
    let mut s = three_hosts();
    assert_eq!(
        agent_registers(&mut s, "h2", false, "10.0.0.2:6818"),
        Response::HostRegistered
    );
    assert_eq!(s.data.hosts["h2"].step_addr, "10.0.0.2:6818");
    let long = "x".repeat(HOST_STEP_ADDR_BYTES_MAX + 1);
    assert!(matches!(
        agent_registers(&mut s, "h2", false, &long),
        Response::Rejected { reason } if reason.contains("step address of 256 bytes")
    ));
    assert_eq!(
        s.data.hosts["h2"].step_addr, "10.0.0.2:6818",
        "a refused registration changes nothing"
    );

    submit(&mut s, "r1", gang_spec(2, 4));
    apply_gang(&mut s, 1, &["h1", "h2"], Resources::cpu_mem(4, 0));
    let ids = |v: Vec<&JobRecord>| v.into_iter().map(|r| r.job.id).collect::<Vec<_>>();
    // The batch host runs the job; the member lists it for srun's steps.
    assert_eq!(ids(s.assignments_for("h1")), [1]);
    assert!(s.members_on("h1").is_empty());
    assert!(s.assignments_for("h2").is_empty());
    assert_eq!(ids(s.members_on("h2")), [1]);
    assert!(s.members_on("h3").is_empty());
    // A cancel committed: the member no longer lists it, so its agent
    // stops any task of it.
    apply(
        &mut s,
        Command::CancelJob {
            job_id: 1,
            now_ms: 60,
        },
    );
    assert!(s.members_on("h2").is_empty());
}

#[test]
fn an_interactive_allocation_runs_nothing_and_survives_its_batch_agent_restarting() {
    let mut s = three_hosts();
    let spec = JobSpec {
        interactive: true,
        ..gang_spec(2, 4)
    };
    submit(&mut s, "r1", spec);
    apply_gang(&mut s, 1, &["h1", "h2"], Resources::cpu_mem(4, 0));
    let ids = |v: Vec<&JobRecord>| v.into_iter().map(|r| r.job.id).collect::<Vec<_>>();
    // No host runs a batch script; every host serves its steps.
    assert!(s.assignments_for("h1").is_empty());
    assert_eq!(ids(s.members_on("h1")), [1]);
    assert_eq!(ids(s.members_on("h2")), [1]);
    // The batch host's agent restarts running nothing: nothing was lost.
    agent_registers(&mut s, "h1", true, "");
    assert_eq!(state_of(&s, 1), Some(JobState::Running));
    // A cancel: its hosts stop listing it, and the batch host's agent,
    // which never ran it, reports it ended (AssignmentSet::stopping).
    apply(
        &mut s,
        Command::CancelJob {
            job_id: 1,
            now_ms: 40,
        },
    );
    assert!(s.members_on("h1").is_empty() && s.members_on("h2").is_empty());
    assert_eq!(ids(s.stopping_on("h1")), [1]);
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id);
    apply(
        &mut s,
        Command::JobExited {
            job_id: 1,
            alloc_id: alloc_id.expect("allocated"),
            host: "h1".into(),
            exit_code: 0,
            signal: 0,
            launch_error: "stopped before it started".into(),
            now_ms: 50,
        },
    );
    assert_eq!(state_of(&s, 1), Some(JobState::Cancelled));
    // An interactive array is refused at submit.
    let array = JobSpec {
        interactive: true,
        array: "0-3".into(),
        ..gang_spec(1, 1)
    };
    assert!(matches!(
        submit(&mut s, "r2", array),
        Response::Rejected { reason } if reason.contains("cannot be a job array")
    ));
}

/// Account `lab` for alice, three 8-CPU hosts, and alice's job 1 of 6
/// CPUs per host on `hosts`, started at 20 ms.
fn lab_job_started(hosts: &[&str]) -> SmState {
    let mut s = three_hosts();
    let lab = crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
        name: "lab".into(),
        users: vec!["alice".into()],
        ..Default::default()
    });
    let set = apply(
        &mut s,
        Command::SetPolicy {
            change: lab,
            now_ms: 5,
        },
    );
    assert_eq!(set, Response::PolicySet);
    let nodes = hosts.len() as u32;
    let job = super::test_support::accepted(submit(&mut s, "r1", gang_spec(nodes, 6)));
    let six_cpus = Resources {
        cpus: 6,
        ..Resources::default()
    };
    let response = if nodes == 1 {
        apply(
            &mut s,
            plan(vec![placement(job, hosts[0], six_cpus, "", 0)], Vec::new()),
        )
    } else {
        apply_gang(&mut s, job, hosts, six_cpus)
    };
    assert!(
        matches!(response, Response::PlanApplied { started: 1, .. }),
        "{response:?}"
    );
    s
}

/// [`lab_job_started`], then a plan at 100,020 ms, 100 s later, charges
/// what ran meanwhile.
fn charged_after_100_s(hosts: &[&str]) -> SmState {
    let mut s = lab_job_started(hosts);
    let later = Command::ApplyPlan {
        snapshot_index: 0,
        now_ms: 100_020,
        starts: Vec::new(),
        gang_starts: Vec::new(),
        evictions: Vec::new(),
        borrowed: Vec::new(),
    };
    apply(&mut s, later);
    s
}

fn charged(s: &SmState, kind: berth_scheduler::TresKind) -> f64 {
    s.data.usage.usage.accounts["lab"].tres_s[kind.index()]
}

#[test]
fn a_multi_host_job_is_charged_for_every_host_it_holds() {
    use berth_scheduler::TresKind::{Cpu, Node};
    let one = charged_after_100_s(&["h1"]);
    let two = charged_after_100_s(&["h1", "h2"]);
    // 6 CPUs on each host for 100 s; a node-second per host per second.
    assert_eq!(charged(&one, Cpu), 600.0);
    assert_eq!(charged(&one, Node), 100.0);
    assert_eq!(charged(&two, Cpu), 1_200.0);
    assert_eq!(charged(&two, Node), 200.0);
    assert_eq!(
        two.data.usage.usage.qos["normal"].tres_s[Cpu.index()],
        1_200.0
    );
}

#[test]
fn a_run_is_charged_to_its_end_though_no_plan_follows_its_start() {
    use berth_scheduler::TresKind::{Cpu, Node};
    let mut s = lab_job_started(&["h1", "h2"]);
    let alloc_id = s
        .job(1)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id)
        .expect("allocated");
    let exited = Command::JobExited {
        job_id: 1,
        alloc_id,
        host: "h1".into(),
        exit_code: 0,
        signal: 0,
        launch_error: String::new(),
        now_ms: 50_020,
    };
    assert_eq!(apply(&mut s, exited), Response::Report { accepted: true });
    assert_eq!(state_of(&s, 1), Some(JobState::Completed));
    assert_eq!(charged(&s, Cpu), 600.0);
    assert_eq!(charged(&s, Node), 100.0);
}

#[test]
fn a_run_its_host_lost_is_charged_to_the_node_failure() {
    use berth_scheduler::TresKind::Cpu;
    let mut s = lab_job_started(&["h1"]);
    let silent = Command::HostsSilent {
        hosts: vec!["h1".into()],
        timeout_ms: 10_000,
        now_ms: 20_020,
    };
    assert_eq!(
        apply(&mut s, silent),
        Response::HostsFailed { jobs_ended: 1 }
    );
    assert_eq!(state_of(&s, 1), Some(JobState::NodeFail));
    // 6 CPUs for the 20 s it ran.
    assert_eq!(charged(&s, Cpu), 120.0);
}

/// A loan is judged against what ran before the plan, as the pass judged
/// it at its turn: a single-host start listed ahead of it in the plan
/// (singles come before gangs) does not count against it.
#[test]
fn a_gang_loan_is_not_judged_against_starts_listed_before_it() {
    let mut s = three_hosts();
    let mut normal = berth_scheduler::Qos {
        name: "normal".into(),
        ..Default::default()
    };
    normal.limits.max_jobs_per_user = Some(2);
    let lab = berth_scheduler::Account {
        name: "lab".into(),
        users: vec!["alice".into()],
        ..Default::default()
    };
    for change in [
        crate::policy::PolicyChange::UpsertQos(normal),
        crate::policy::PolicyChange::UpsertAccount(lab),
    ] {
        assert_eq!(
            apply(&mut s, Command::SetPolicy { change, now_ms: 5 }),
            Response::PolicySet
        );
    }
    let first = super::test_support::accepted(submit(&mut s, "r1", gang_spec(1, 2)));
    let two = Resources {
        cpus: 2,
        ..Resources::default()
    };
    apply(
        &mut s,
        plan(vec![placement(first, "h1", two, "", 0)], Vec::new()),
    );
    let single = super::test_support::accepted(submit(&mut s, "r2", gang_spec(1, 2)));
    let gang = super::test_support::accepted(submit(&mut s, "r3", gang_spec(2, 2)));
    let loan = GangPlacement {
        job_id: gang,
        hosts: vec!["h2".into(), "h3".into()],
        resources: two,
        partition: String::new(),
        path: 0,
        released: Vec::new(),
    };
    let response = apply(
        &mut s,
        Command::ApplyPlan {
            snapshot_index: 0,
            now_ms: 30,
            starts: vec![placement(single, "h1", two, "", 0)],
            gang_starts: vec![loan],
            evictions: Vec::new(),
            borrowed: vec![gang],
        },
    );
    assert_eq!(
        response,
        Response::PlanApplied {
            started: 2,
            dropped: 0,
            evicted: 0
        }
    );
    assert!(s.job(gang).is_some_and(|r| r.job.borrowed));
}

/// A pass's snapshot sees usage as of the pass, not as of the last
/// command that accrued it: exactly what `apply` would accrue then, for
/// every host the job holds, and the state itself unchanged.
#[test]
fn a_pass_sees_usage_as_apply_would_accrue_it_at_the_pass() {
    use berth_scheduler::TresKind::{Cpu, Node};
    let s = lab_job_started(&["h1", "h2"]);
    let before = s.data.usage.clone();
    let snapshot = s
        .pass_input(|_| berth_scheduler::HostState::Up)
        .into_snapshot_at(100_020);
    assert_eq!(s.data.usage, before, "a snapshot changes nothing");
    let accrued = charged_after_100_s(&["h1", "h2"]);
    assert_eq!(snapshot.usage, accrued.data.usage.usage);
    assert_eq!(snapshot.usage.accounts["lab"].tres_s[Cpu.index()], 1_200.0);
    assert_eq!(snapshot.usage.accounts["lab"].tres_s[Node.index()], 200.0);
}

/// `PriorityDecayHalfLife` is policy: refused past its bound with the
/// bound named, and usage accrued so far decays with the old one.
#[test]
fn the_decay_half_life_is_set_by_policy() {
    use crate::policy::{PolicyChange, DECAY_HALF_LIFE_S_DEFAULT, DECAY_HALF_LIFE_S_MAX};
    use berth_scheduler::TresKind::Cpu;
    let mut s = lab_job_started(&["h1"]);
    assert_eq!(s.data.policy.decay_half_life_s(), DECAY_HALF_LIFE_S_DEFAULT);
    let too_long = apply(
        &mut s,
        Command::SetPolicy {
            change: PolicyChange::SetDecayHalfLife(DECAY_HALF_LIFE_S_MAX + 1),
            now_ms: 100_020,
        },
    );
    assert!(
        matches!(&too_long, Response::Rejected { reason } if reason.contains("above the most accepted")),
        "{too_long:?}"
    );
    assert_eq!(s.data.policy.decay_half_life_s(), DECAY_HALF_LIFE_S_DEFAULT);
    let set = apply(
        &mut s,
        Command::SetPolicy {
            change: PolicyChange::SetDecayHalfLife(100),
            now_ms: 100_020,
        },
    );
    assert_eq!(set, Response::PolicySet);
    assert_eq!(s.data.policy.decay_half_life_s(), 100);
    // The 100 s before the change were accrued when it was made.
    assert_eq!(charged(&s, Cpu), 600.0);
    // The next 100 s: the 600 halve, and 6 CPUs x 100 s are added.
    let later = Command::ApplyPlan {
        snapshot_index: 0,
        now_ms: 200_020,
        starts: Vec::new(),
        gang_starts: Vec::new(),
        evictions: Vec::new(),
        borrowed: Vec::new(),
    };
    apply(&mut s, later);
    assert!(
        (charged(&s, Cpu) - 900.0).abs() < 1e-6,
        "{}",
        charged(&s, Cpu)
    );
}
