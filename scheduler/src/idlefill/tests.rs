//! Idle-fill's settings, and whole passes lending and reclaiming.

use super::IdleFill;
use crate::assoc::Account;
use crate::model::{Host, Inventory, Resources};
use crate::pass::{schedule, PendingJob, Plan, Policy, RunningJob, Snapshot};
use crate::qos::Qos;
use crate::reason::{LimitKind, LimitScope, Reason};
use crate::{EvictCause, Eviction, TresKind};

#[test]
fn exempt_window_doubles_up_to_an_hour() {
    let f = IdleFill {
        exempt_s: 60,
        ..IdleFill::default()
    };
    let windows: Vec<u64> = (0..8).map(|n| f.exempt_window_s(n)).collect();
    assert_eq!(windows, vec![60, 120, 240, 480, 960, 1920, 3600, 3600]);
    assert_eq!(f.exempt_window_s(200), 3600);
}

#[test]
fn ceilings_floor_and_the_tighter_wins() {
    let f = |factor, fraction| IdleFill {
        max_borrow_factor: factor,
        max_cluster_fraction: fraction,
        ..IdleFill::default()
    };
    assert_eq!(f(0.0, 0.0).loan_ceiling(4, 16), None);
    assert_eq!(f(2.0, 0.0).loan_ceiling(4, 16), Some(8));
    assert_eq!(f(1.5, 0.0).loan_ceiling(3, 16), Some(4));
    assert_eq!(f(0.0, 0.3).loan_ceiling(4, 10), Some(3));
    assert_eq!(f(2.0, 0.25).loan_ceiling(4, 16), Some(4));
    assert_eq!(f(0.5, 0.5).loan_ceiling(4, 16), Some(2));
}

#[test]
fn settings_out_of_range_are_named() {
    let bad = IdleFill {
        max_cluster_fraction: 1.5,
        ..IdleFill::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .contains("idle_fill_max_cluster_fraction"));
    let bad = IdleFill {
        exempt_s: 3601,
        ..IdleFill::default()
    };
    assert!(bad
        .validate()
        .unwrap_err()
        .contains("idle_fill_exempt_secs"));
    assert!(IdleFill::default().validate().is_ok());
}

fn hosts(n: usize) -> Vec<Host> {
    (1..=n)
        .map(|i| Host::new(format!("h{i}"), Inventory::cpu_mem(4, 0)))
        .collect()
}

/// A whole-host job of `user` with a 100 s limit.
fn job(id: u64, user: &str) -> PendingJob {
    let mut j = PendingJob::new(id, Resources::cpu_mem(4, 0));
    j.shape.exclusive = true;
    j.user = user.into();
    j.time_limit_s = 100;
    j
}

/// `ana` in QOS small (1 node, and `gpu_cap` GPUs when set), `bo` in
/// QOS big (no limit); `hosts` idle hosts.
fn world(n: usize, gpu_cap: Option<u64>) -> Snapshot {
    let mut small = Qos::named("small");
    small.limits.grp_tres.node = Some(1);
    small.limits.grp_tres.gpu = gpu_cap;
    let account = |name: &str, user: &str, qos: &str| Account {
        name: name.into(),
        users: vec![user.into()],
        qos: vec![qos.into()],
        ..Account::default()
    };
    Snapshot {
        hosts: hosts(n),
        qos: vec![small, Qos::named("big"), Qos::default()],
        accounts: vec![account("lab", "ana", "small"), account("phys", "bo", "big")],
        ..Snapshot::default()
    }
}

fn on() -> Policy {
    Policy {
        idle_fill: IdleFill {
            enabled: true,
            ..IdleFill::default()
        },
        ..Policy::default()
    }
}

fn started(plan: &Plan) -> Vec<(u64, &str)> {
    plan.starts
        .iter()
        .map(|p| (p.job_id, p.host.as_str()))
        .collect()
}

const NODE_LIMIT: Reason = Reason::Limit(LimitScope::Qos, LimitKind::GrpTres(TresKind::Node));

#[test]
fn off_lends_nothing_on_lends_idle_hosts_last() {
    let mut snap = world(3, None);
    snap.pending = PendingJob::queue([job(1, "ana"), job(2, "ana"), job(3, "ana")]);
    let plan = schedule(&snap, &Policy::default(), 0);
    assert_eq!(started(&plan), vec![(1, "h1")]);
    assert!(plan.borrowed.is_empty());
    let plan = schedule(&snap, &on(), 0);
    assert_eq!(started(&plan), vec![(1, "h1"), (2, "h2"), (3, "h3")]);
    assert_eq!(plan.borrowed, vec![2, 3]);
    assert!(plan.reasons.is_empty());
}

#[test]
fn a_job_over_another_cap_too_is_not_lent() {
    let mut snap = world(3, Some(1));
    for h in &mut snap.hosts {
        h.inventory.gpus = 1;
    }
    let gpu_job = |id| {
        let mut j = job(id, "ana");
        j.shape.per_host.gpus = 1;
        j
    };
    snap.pending = PendingJob::queue([gpu_job(1), gpu_job(2), job(3, "ana")]);
    let plan = schedule(&snap, &on(), 0);
    // Job 2 reports its node cap (the first breach) but its GPU cap
    // holds it too: only job 3, held by the node cap alone, borrows.
    assert_eq!(plan.reasons.get(&2), Some(&NODE_LIMIT));
    assert_eq!(plan.borrowed, vec![3]);
    assert_eq!(started(&plan), vec![(1, "h1"), (3, "h2")]);
}

#[test]
fn borrowed_runs_count_toward_no_quota_and_are_reclaimed_for_a_claim() {
    let mut snap = world(2, None);
    let run = |id: u64, host: &str, borrowed: bool| RunningJob {
        id,
        hosts: vec![host.into()],
        per_host: Resources::cpu_mem(4, 0),
        end_ms: Some(1_000_000),
        user: "ana".into(),
        borrowed,
        ..RunningJob::default()
    };
    for h in &mut snap.hosts {
        h.allocated = Resources::cpu_mem(4, 0);
    }
    snap.running = vec![run(7, "h1", true), run(8, "h2", true)];
    // Both of ana's runs are borrowed: her next job has its claim and
    // takes one host back (the cheapest: equal, so the first by name). It
    // starts once the run has left (the next pass), holding the room.
    snap.pending = PendingJob::queue([job(1, "ana")]);
    let plan = schedule(&snap, &on(), 60_000);
    assert_eq!(
        plan.evictions,
        vec![Eviction {
            job: 7,
            for_job: 1,
            cause: EvictCause::Reclaim,
            requeue: true,
            alloc_id: 0,
            grace_s: 0,
        }]
    );
    assert!(plan.starts.is_empty() && plan.borrowed.is_empty());
    assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
    // Inside the exempt window (60 s from start 0) nothing is taken.
    let plan = schedule(&snap, &on(), 59_999);
    assert!(plan.evictions.is_empty() && plan.starts.is_empty());
    assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
    // Counted in quota, the same runs would hold job 1 at its cap.
    snap.running[0].borrowed = false;
    let plan = schedule(&snap, &on(), 60_000);
    assert!(plan.evictions.is_empty() && plan.starts.is_empty());
    assert_eq!(plan.reasons.get(&1), Some(&NODE_LIMIT));
}

/// `world(2)` plus cy in QOS burst: idle_fill_preemptable at a large
/// negative priority, as the burst pattern sets it; small at priority 0,
/// so only a signed comparison puts burst below it.
fn burst_world() -> Snapshot {
    let mut snap = world(2, None);
    snap.qos.push(Qos {
        priority: -1_000_000,
        idle_fill_preemptable: true,
        ..Qos::named("burst")
    });
    snap.accounts.push(Account {
        name: "spare".into(),
        users: vec!["cy".into()],
        qos: vec!["burst".into()],
        ..Account::default()
    });
    for h in &mut snap.hosts {
        h.allocated = Resources::cpu_mem(4, 0);
    }
    snap
}

fn run_of(id: u64, user: &str, host: &str, borrowed: bool) -> RunningJob {
    RunningJob {
        id,
        hosts: vec![host.into()],
        per_host: Resources::cpu_mem(4, 0),
        end_ms: Some(1_000_000),
        user: user.into(),
        borrowed,
        ..RunningJob::default()
    }
}

fn reclaim(job: u64, for_job: u64) -> Eviction {
    Eviction {
        job,
        for_job,
        cause: EvictCause::Reclaim,
        requeue: true,
        alloc_id: 0,
        grace_s: 0,
    }
}

#[test]
fn a_claim_takes_the_negative_priority_burst_run_first() {
    let mut snap = burst_world();
    // h1 has ana's borrowed run (small, 0), h2 cy's burst run: by name h1
    // would go first, but burst is the cheaper.
    snap.running = vec![run_of(7, "ana", "h1", true), run_of(8, "cy", "h2", false)];
    snap.pending = PendingJob::queue([job(1, "bo")]);
    let plan = schedule(&snap, &on(), 60_000);
    assert_eq!(plan.evictions, vec![reclaim(8, 1)]);
}

#[test]
fn a_borrower_reclaims_from_a_negative_priority_burst_qos_never_the_reverse() {
    let mut snap = burst_world();
    // ana holds her one node in quota on h1; cy's burst run is on h2.
    snap.running = vec![run_of(7, "ana", "h1", false), run_of(8, "cy", "h2", false)];
    snap.pending = PendingJob::queue([job(1, "ana")]);
    let plan = schedule(&snap, &on(), 60_000);
    assert_eq!(plan.evictions, vec![reclaim(8, 1)]);

    // Once ana's second job runs borrowed on h2, cy's burst job (-1000000)
    // may not take it back from small (0).
    snap.running = vec![run_of(7, "ana", "h1", false), run_of(1, "ana", "h2", true)];
    snap.pending = PendingJob::queue([job(8, "cy")]);
    let plan = schedule(&snap, &on(), 60_000);
    assert!(plan.evictions.is_empty() && plan.starts.is_empty());
    assert_eq!(plan.reasons.get(&8), Some(&Reason::Resources));
}
