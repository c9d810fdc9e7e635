//! `apply` of a plan's evictions and of admin reservations: the re-check
//! (stale allocation, victim not running, claimant gone), the victim's
//! stop and requeue or PREEMPTED end, borrowed starts, and that replicas
//! applying the same commands agree.

use super::*;
use berth_scheduler::{EvictCause, Inventory};

fn spec(user: &str, cpus: u32) -> JobSpec {
    JobSpec {
        user: user.into(),
        command: "true".into(),
        cpus,
        time_limit_s: 600,
        ..JobSpec::default()
    }
}

fn apply(s: &mut SmState, command: Command) -> Response {
    s.apply(&command, &mut Dirty::default())
}

fn submit(s: &mut SmState, id: &str, spec: JobSpec) -> JobId {
    match apply(
        s,
        Command::SubmitJob {
            request_id: id.into(),
            spec,
            now_ms: 1_000,
        },
    ) {
        Response::Submitted { job_id, .. } => job_id,
        other => panic!("{other:?}"),
    }
}

fn register(s: &mut SmState, name: &str, cpus: u32) {
    let r = apply(
        s,
        Command::RegisterHost {
            name: name.into(),
            inventory: Inventory::cpu_mem(cpus, 4096),
            agent_restarted: false,
            running_allocs: Vec::new(),
            drain_reason: String::new(),
            now_ms: 1,
            step_addr: String::new(),
        },
    );
    assert_eq!(r, Response::HostRegistered);
}

fn placement(job_id: JobId, host: &str, cpus: u32) -> Placement {
    Placement {
        job_id,
        host: host.into(),
        resources: Resources::cpu_mem(cpus, 0),
        partition: String::new(),
        path: 0,
        released: Vec::new(),
    }
}

fn plan(
    s: &mut SmState,
    now_ms: u64,
    starts: Vec<Placement>,
    evictions: Vec<Eviction>,
    borrowed: Vec<JobId>,
) -> (u32, u32, u32) {
    match apply(
        s,
        Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms,
            starts,
            evictions,
            borrowed,
        },
    ) {
        Response::PlanApplied {
            started,
            dropped,
            evicted,
        } => (started, dropped, evicted),
        other => panic!("{other:?}"),
    }
}

fn eviction(job: JobId, for_job: JobId, alloc_id: u64, requeue: bool) -> Eviction {
    Eviction {
        job,
        for_job,
        cause: EvictCause::Preempt,
        requeue,
        alloc_id,
        grace_s: 0,
    }
}

fn alloc_of(s: &SmState, job: JobId) -> u64 {
    s.job(job)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id)
        .expect("allocated")
}

fn exited(s: &mut SmState, job: JobId, alloc_id: u64, now_ms: u64) -> Response {
    apply(
        s,
        Command::JobExited {
            job_id: job,
            alloc_id,
            host: "h1".into(),
            exit_code: 0,
            signal: 15,
            launch_error: String::new(),
            now_ms,
        },
    )
}

/// A 4-CPU host running a 4-CPU victim (job 1), and a pending 4-CPU job 2.
fn victim_and_claimant() -> (SmState, JobId, JobId, u64) {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    let victim = submit(&mut s, "v", spec("bob", 4));
    let claimant = submit(&mut s, "c", spec("alice", 4));
    assert_eq!(
        plan(
            &mut s,
            2_000,
            vec![placement(victim, "h1", 4)],
            vec![],
            vec![]
        )
        .0,
        1
    );
    let alloc = alloc_of(&s, victim);
    (s, victim, claimant, alloc)
}

#[test]
fn an_eviction_stops_the_victim_and_requeues_it_without_spending_a_restart() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, claimant, alloc, true)],
            vec![]
        ),
        (0, 0, 1)
    );
    let v = &s.job(victim).expect("victim").job;
    assert_eq!(
        v.state,
        JobState::Running,
        "it runs until its agent reports the stop"
    );
    assert!(v.stopping());
    assert!(
        s.assignments_for("h1").is_empty(),
        "it left its host's assignment set"
    );
    assert_eq!(s.stopping_on("h1").len(), 1);
    // The snapshot marks it evicted for the claimant, and the claimant
    // first in line for its room.
    let snap = s.scheduler_snapshot(|_| HostState::Up);
    let run = snap
        .running
        .iter()
        .find(|r| r.id == victim)
        .expect("running");
    assert_eq!(run.evicted_for, Some(claimant));
    assert_eq!(run.alloc_id, alloc);
    assert!(snap
        .pending
        .iter()
        .any(|p| p.id == claimant && p.room_freed));
    let last = |s: &SmState, id| {
        s.job(id)
            .and_then(|r| r.events.last().cloned())
            .expect("event")
    };
    assert_eq!(
        last(&s, victim).message,
        format!("Preempted by job {claimant} (PreemptMode=Requeue); stopping on h1")
    );
    assert_eq!(last(&s, claimant).kind, "preempting");
    // A second eviction of the same victim is dropped: it is stopping.
    assert_eq!(
        plan(
            &mut s,
            71_000,
            vec![],
            vec![eviction(victim, claimant, alloc, true)],
            vec![]
        )
        .2,
        0
    );
    assert_eq!(
        exited(&mut s, victim, alloc, 75_000),
        Response::Report { accepted: true }
    );
    let v = &s.job(victim).expect("victim");
    assert_eq!(v.job.state, JobState::Pending);
    assert_eq!(v.job.restarts, 0, "an eviction spends no restart budget");
    assert!(v.job.evicted.is_none() && v.job.alloc.is_none());
    assert!(v.events.iter().any(|e| e.message
        == format!(
            "PREEMPTED on h1: Preempted by job {claimant} (PreemptMode=Requeue); queued again"
        )));
    assert_eq!(s.data.hosts["h1"].allocated, Resources::default());
    // It waits saying whom it was preempted for, until it starts again.
    assert_eq!(v.job.requeued_for, claimant);
    // The claimant keeps the first claim on the room until it starts.
    let snap = s.scheduler_snapshot(|_| HostState::Up);
    assert!(snap
        .pending
        .iter()
        .any(|p| p.id == claimant && p.room_freed));
    assert!(snap.pending.iter().any(|p| p.id == victim && !p.room_freed));
    assert_eq!(
        plan(
            &mut s,
            76_000,
            vec![placement(claimant, "h1", 4)],
            vec![],
            vec![]
        )
        .0,
        1
    );
    assert_eq!(s.job(claimant).expect("c").job.room_freed_ms, 0);
    assert_eq!(
        plan(
            &mut s,
            90_000,
            vec![placement(victim, "h1", 4)],
            vec![],
            vec![]
        )
        .0,
        0,
        "h1 is the claimant's"
    );
    assert_eq!(s.job(victim).expect("victim").job.requeued_for, claimant);
}

#[test]
fn a_requeued_victim_forgets_its_preemptor_once_it_starts_again() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    plan(
        &mut s,
        71_000,
        vec![],
        vec![eviction(victim, claimant, alloc, true)],
        vec![],
    );
    exited(&mut s, victim, alloc, 75_000);
    assert_eq!(s.job(victim).expect("victim").job.requeued_for, claimant);
    register(&mut s, "h2", 4);
    assert_eq!(
        plan(
            &mut s,
            76_000,
            vec![placement(victim, "h2", 4)],
            vec![],
            vec![]
        )
        .0,
        1
    );
    assert_eq!(s.job(victim).expect("victim").job.requeued_for, 0);
}

#[test]
fn stale_and_not_running_victims_are_ignored() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    // A stale allocation id.
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, claimant, alloc + 7, true)],
            vec![]
        ),
        (0, 0, 0)
    );
    // The victim evicted for itself, or for a job that does not exist.
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, victim, alloc, true)],
            vec![]
        )
        .2,
        0
    );
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, 99, alloc, true)],
            vec![]
        )
        .2,
        0
    );
    assert!(!s.job(victim).expect("v").job.stopping());
    // A victim that has ended meanwhile.
    assert_eq!(
        exited(&mut s, victim, alloc, 71_000),
        Response::Report { accepted: true }
    );
    assert_eq!(s.job(victim).expect("v").job.state, JobState::Failed);
    assert_eq!(
        plan(
            &mut s,
            72_000,
            vec![],
            vec![eviction(victim, claimant, alloc, true)],
            vec![]
        ),
        (0, 0, 0)
    );
    assert_eq!(s.job(victim).expect("v").job.state, JobState::Failed);
    // A pending job (never started) is no victim either.
    let other = submit(&mut s, "o", spec("bob", 1));
    assert_eq!(
        plan(
            &mut s,
            73_000,
            vec![],
            vec![eviction(other, claimant, 0, true)],
            vec![]
        )
        .2,
        0
    );
    assert_eq!(s.job(other).expect("o").job.state, JobState::Pending);
}

#[test]
fn a_victim_being_cancelled_or_its_claimant_gone_is_not_evicted() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    assert_eq!(
        apply(
            &mut s,
            Command::CancelJob {
                job_id: claimant,
                now_ms: 3_000
            }
        ),
        Response::Cancelled {
            previous_state: JobState::Pending
        }
    );
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, claimant, alloc, true)],
            vec![]
        )
        .2,
        0,
        "no one to free the room for"
    );
    let other = submit(&mut s, "c2", spec("alice", 4));
    assert!(matches!(
        apply(
            &mut s,
            Command::CancelJob {
                job_id: victim,
                now_ms: 71_000
            }
        ),
        Response::Cancelled { .. }
    ));
    assert_eq!(
        plan(
            &mut s,
            72_000,
            vec![],
            vec![eviction(victim, other, alloc, true)],
            vec![]
        )
        .2,
        0,
        "already stopping"
    );
}

#[test]
fn preempt_mode_cancel_ends_the_victim_preempted() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    assert_eq!(
        plan(
            &mut s,
            70_000,
            vec![],
            vec![eviction(victim, claimant, alloc, false)],
            vec![]
        )
        .2,
        1
    );
    exited(&mut s, victim, alloc, 71_000);
    let v = s.job(victim).expect("v");
    assert_eq!(v.job.state, JobState::Preempted);
    assert_eq!(v.job.end_ms, 71_000);
    assert_eq!(
        v.events.last().map(|e| e.message.clone()),
        Some(format!(
            "PREEMPTED on h1: Preempted by job {claimant} (PreemptMode=Cancel)"
        ))
    );
}

#[test]
fn a_reclaim_counts_and_a_borrowed_start_is_recorded() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    // Restart the victim as a borrowed run to see the flag.
    let mut e = eviction(victim, claimant, alloc, true);
    e.cause = EvictCause::Reclaim;
    assert_eq!(plan(&mut s, 70_000, vec![], vec![e], vec![]).2, 1);
    exited(&mut s, victim, alloc, 71_000);
    let v = &s.job(victim).expect("v").job;
    assert_eq!((v.state, v.reclaims, v.restarts), (JobState::Pending, 1, 0));
    assert_eq!(
        plan(
            &mut s,
            72_000,
            vec![placement(victim, "h1", 4)],
            vec![],
            vec![victim]
        )
        .0,
        1
    );
    assert!(s.job(victim).expect("v").job.borrowed);
    let snap = s.scheduler_snapshot(|_| HostState::Up);
    let run = snap
        .running
        .iter()
        .find(|r| r.id == victim)
        .expect("running");
    assert!(run.borrowed && run.reclaims == 1);
}

#[test]
fn replicas_applying_the_same_evictions_agree() {
    let run = || {
        let (mut s, victim, claimant, alloc) = victim_and_claimant();
        let evictions = vec![
            eviction(victim, claimant, alloc + 1, true),
            eviction(victim, claimant, alloc, true),
            eviction(victim, claimant, alloc, true),
        ];
        let answer = plan(&mut s, 70_000, vec![], evictions, vec![]);
        exited(&mut s, victim, alloc, 71_000);
        (answer, serde_json::to_string(&s.data.jobs).expect("json"))
    };
    let (a, b) = (run(), run());
    assert_eq!(
        a.0,
        (0, 0, 1),
        "one of three: stale, valid, then already stopping"
    );
    assert_eq!(a, b);
}

fn reservation(name: &str, hosts: &[&str], start_ms: u64, end_ms: u64) -> AdminReservationArg {
    AdminReservationArg {
        name: name.into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        start_ms,
        end_ms,
        ..AdminReservationArg::default()
    }
}

type AdminReservationArg = berth_scheduler::AdminReservation;

fn create(s: &mut SmState, r: AdminReservationArg, now_ms: u64) -> Response {
    apply(
        s,
        Command::CreateReservation {
            reservation: r,
            now_ms,
        },
    )
}

#[test]
fn reservations_are_validated_and_keep_jobs_off_their_hosts() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    register(&mut s, "h2", 4);
    let rejected = |r: Response| match r {
        Response::Rejected { reason } => reason,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        rejected(create(
            &mut s,
            reservation("m", &["h9"], 10_000, 20_000),
            1_000
        )),
        "reservation m: no host named h9"
    );
    assert!(rejected(create(
        &mut s,
        reservation("m", &["h1"], 20_000, 10_000),
        1_000
    ))
    .contains("ends"));
    assert!(
        rejected(create(&mut s, reservation("m", &["h1"], 10, 500), 1_000))
            .contains("already over")
    );
    assert!(rejected(create(
        &mut s,
        reservation("m x", &["h1"], 10_000, 20_000),
        1_000
    ))
    .contains("whitespace"));
    assert_eq!(
        create(
            &mut s,
            reservation("maint", &["h1"], 100_000, 200_000),
            1_000
        ),
        Response::PolicySet
    );
    assert_eq!(
        rejected(create(
            &mut s,
            reservation("other", &["h2", "h1"], 150_000, 300_000),
            1_000
        )),
        "reservation other overlaps reservation maint on host h1"
    );
    assert!(rejected(create(
        &mut s,
        reservation("maint", &["h2"], 10_000, 20_000),
        1_000
    ))
    .contains("already exists"));
    // A 600 s job would reach the window on h1: its placement there is
    // dropped; on h2 it starts.
    let job = submit(&mut s, "j", spec("alice", 1));
    assert_eq!(
        plan(&mut s, 2_000, vec![placement(job, "h1", 1)], vec![], vec![]),
        (0, 1, 0)
    );
    assert_eq!(
        plan(&mut s, 2_000, vec![placement(job, "h2", 1)], vec![], vec![]),
        (1, 0, 0)
    );
    // A short job that ends before the window may use h1.
    let short = submit(
        &mut s,
        "short",
        JobSpec {
            time_limit_s: 60,
            ..spec("alice", 1)
        },
    );
    assert_eq!(
        plan(
            &mut s,
            2_000,
            vec![placement(short, "h1", 1)],
            vec![],
            vec![]
        )
        .0,
        1
    );
    // The snapshot hands the window to the scheduler.
    let snap = s.scheduler_snapshot(|_| HostState::Up);
    assert_eq!(snap.reservations.len(), 1);
    assert!(snap.reservations[0].is_maintenance());
    // Submits naming it: a maintenance window admits no one; an unknown
    // one is refused by name.
    let named = |r: &str| JobSpec {
        reservation: r.into(),
        ..spec("alice", 1)
    };
    let refused = |s: &mut SmState, id: &str, spec: JobSpec| {
        rejected(apply(
            s,
            Command::SubmitJob {
                request_id: id.into(),
                spec,
                now_ms: 1_000,
            },
        ))
    };
    assert!(refused(&mut s, "r1", named("maint")).starts_with("Access denied"));
    assert_eq!(
        refused(&mut s, "r2", named("nope")),
        "Requested reservation is invalid: no reservation named nope"
    );
    assert_eq!(
        apply(
            &mut s,
            Command::DeleteReservation {
                name: "maint".into(),
                now_ms: 3_000
            }
        ),
        Response::PolicySet
    );
    assert_eq!(
        rejected(apply(
            &mut s,
            Command::DeleteReservation {
                name: "maint".into(),
                now_ms: 3_000
            }
        )),
        "no reservation named maint"
    );
}

#[test]
fn a_job_in_a_user_reservation_runs_only_on_its_hosts_inside_the_window() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    register(&mut s, "h2", 4);
    let r = AdminReservationArg {
        users: vec!["alice".into()],
        ..reservation("team", &["h1"], 5_000, 900_000)
    };
    assert_eq!(create(&mut s, r, 1_000), Response::PolicySet);
    let job = submit(
        &mut s,
        "in",
        JobSpec {
            reservation: "team".into(),
            ..spec("alice", 1)
        },
    );
    assert_eq!(
        plan(&mut s, 2_000, vec![placement(job, "h1", 1)], vec![], vec![]).1,
        1,
        "before the window"
    );
    assert_eq!(
        plan(&mut s, 6_000, vec![placement(job, "h2", 1)], vec![], vec![]).1,
        1,
        "not its host"
    );
    assert_eq!(
        plan(&mut s, 6_000, vec![placement(job, "h1", 1)], vec![], vec![]).0,
        1
    );
    // bob's job is kept off h1 during the window.
    let bob = submit(&mut s, "bob", spec("bob", 1));
    assert_eq!(
        plan(&mut s, 6_000, vec![placement(bob, "h1", 1)], vec![], vec![]).1,
        1
    );
}

/// A host, account `lab` for bob and alice, and bob's 4-CPU job started as a
/// borrowed run at 2 s.
fn borrowed_run() -> (SmState, JobId, u64) {
    let mut s = SmState::default();
    register(&mut s, "h1", 4);
    let change = crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
        name: "lab".into(),
        users: vec!["bob".into(), "alice".into()],
        ..Default::default()
    });
    assert_eq!(
        apply(
            &mut s,
            Command::SetPolicy {
                change,
                now_ms: 1_500
            }
        ),
        Response::PolicySet
    );
    let job = submit(
        &mut s,
        "b",
        JobSpec {
            account: "lab".into(),
            ..spec("bob", 4)
        },
    );
    let started = plan(
        &mut s,
        2_000,
        vec![placement(job, "h1", 4)],
        vec![],
        vec![job],
    );
    assert_eq!(started.0, 1);
    assert!(s.job(job).expect("job").job.borrowed);
    let alloc = alloc_of(&s, job);
    (s, job, alloc)
}

fn cpu_seconds_charged(s: &SmState, account: &str) -> f64 {
    s.data.usage.usage.accounts.get(account).map_or(0.0, |r| {
        r.tres_s[berth_scheduler::qos::TresKind::Cpu.index()]
    })
}

#[test]
fn a_reclaimed_borrowed_run_is_not_charged_to_fair_share() {
    let (mut s, job, alloc) = borrowed_run();
    let claimant = submit(&mut s, "c", spec("alice", 4));
    let mut e = eviction(job, claimant, alloc, true);
    e.cause = EvictCause::Reclaim;
    // Passes while it runs charge nothing yet.
    assert_eq!(plan(&mut s, 60_000, vec![], vec![e], vec![]).2, 1);
    assert_eq!(cpu_seconds_charged(&s, "lab"), 0.0);
    exited(&mut s, job, alloc, 62_000);
    assert_eq!(s.job(job).expect("job").job.state, JobState::Pending);
    assert_eq!(cpu_seconds_charged(&s, "lab"), 0.0);
}

#[test]
fn a_borrowed_run_that_ends_on_its_own_is_charged_whole_when_it_ends() {
    let (mut s, job, alloc) = borrowed_run();
    assert_eq!(plan(&mut s, 30_000, vec![], vec![], vec![]).0, 0);
    assert_eq!(cpu_seconds_charged(&s, "lab"), 0.0);
    let r = apply(
        &mut s,
        Command::JobExited {
            job_id: job,
            alloc_id: alloc,
            host: "h1".into(),
            exit_code: 0,
            signal: 0,
            launch_error: String::new(),
            now_ms: 62_000,
        },
    );
    assert_eq!(r, Response::Report { accepted: true });
    assert_eq!(s.job(job).expect("job").job.state, JobState::Completed);
    // 4 CPUs for the 60 s from its start to its end.
    assert_eq!(cpu_seconds_charged(&s, "lab"), 240.0);
}

#[test]
fn a_first_claim_ends_for_a_pass_at_its_hold_though_no_plan_dropped_it() {
    let (mut s, victim, claimant, alloc) = victim_and_claimant();
    plan(
        &mut s,
        71_000,
        vec![],
        vec![eviction(victim, claimant, alloc, true)],
        vec![],
    );
    exited(&mut s, victim, alloc, 75_000);
    let claimed_at = |s: &SmState, now_ms: u64| {
        s.pass_input(|_| HostState::Up)
            .into_snapshot_at(now_ms)
            .pending
            .iter()
            .any(|p| p.id == claimant && p.room_freed)
    };
    assert!(claimed_at(&s, 75_000));
    assert!(claimed_at(&s, 75_000 + ROOM_FREED_HOLD_MS - 1));
    assert!(!claimed_at(&s, 75_000 + ROOM_FREED_HOLD_MS));
    // Still stored until a plan drops it; a display snapshot shows it.
    assert_eq!(s.job(claimant).expect("c").job.room_freed_ms, 75_000);
    assert!(s
        .scheduler_snapshot(|_| HostState::Up)
        .pending
        .iter()
        .any(|p| p.id == claimant && p.room_freed));
}
