//! Alternative resource sets: the submit checks and `apply`'s re-check of
//! the alternative a plan chose.

use berth_scheduler::{Inventory, JobSpec, JobState, ResourceSet, Resources};

use super::test_support::{accepted, apply, placement, plan, rejected, started, submit};
use super::*;
use crate::command::Command;

fn register(s: &mut SmState, name: &str, cpus: u32, mem_mb: u64) {
    super::test_support::register(s, name, Inventory::cpu_mem(cpus, mem_mb));
}

/// Applies `job_id` on `host` by `path` with no partition.
fn place(s: &mut SmState, job_id: u64, host: &str, resources: Resources, path: usize) -> Response {
    apply(
        s,
        plan(
            vec![placement(job_id, host, resources, "", path)],
            Vec::new(),
        ),
    )
}

/// How many started of `job_id` on `host` in `partition` by `path`.
fn placed_in(
    s: &mut SmState,
    job_id: u64,
    host: &str,
    partition: &str,
    path: usize,
    resources: Resources,
) -> u32 {
    started(apply(
        s,
        plan(
            vec![placement(job_id, host, resources, partition, path)],
            Vec::new(),
        ),
    ))
}

fn set(cpus: u32, mem_mb: u64) -> ResourceSet {
    ResourceSet {
        cpus,
        mem_mb,
        ..ResourceSet::default()
    }
}

fn spec_with(alternatives: Vec<ResourceSet>) -> JobSpec {
    JobSpec {
        user: "alice".into(),
        command: "true".into(),
        cpus: 1,
        alternatives,
        ..JobSpec::default()
    }
}

#[test]
fn too_many_sets_are_refused_and_nothing_changes() {
    let mut s = SmState::default();
    let reason = rejected(submit(&mut s, "r1", spec_with(vec![set(1, 0); 33])));
    assert!(reason.contains("33 alternative resource sets"), "{reason}");
    assert!(reason.contains("at most 32"), "{reason}");
    assert!(s.data.jobs.is_empty());
    assert!(s.data.request_ids.is_empty());
    assert!(matches!(
        submit(&mut s, "r2", spec_with(vec![set(1, 0); 32])),
        Response::Submitted { .. }
    ));
}

#[test]
fn a_bad_set_is_refused_naming_it() {
    let mut s = SmState::default();
    let mut bad = set(1, 0);
    bad.gres = vec!["gpu:a100:x".into()];
    let reason = rejected(submit(&mut s, "r1", spec_with(vec![set(1, 0), bad])));
    assert!(reason.starts_with("alternative 2: "), "{reason}");

    let mut wide = set(1, 0);
    wide.nodes = 4097;
    let reason = rejected(submit(&mut s, "r2", spec_with(vec![wide])));
    assert_eq!(
        reason,
        "alternative 1: asks for 4097 nodes; at most 4096 are allowed"
    );

    let mut parted = set(1, 0);
    parted.partition = "emu,gpu".into();
    let reason = rejected(submit(&mut s, "r3", spec_with(vec![set(1, 0), parted])));
    assert_eq!(
        reason,
        "alternative 2: partition \"emu,gpu\" must be one name, without spaces or commas"
    );
    assert!(s.data.jobs.is_empty());
}

#[test]
fn the_pass_sees_every_set_as_a_path() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4, 4096);
    let mut emu = set(2, 512);
    emu.gres = vec!["emu:zebu:1".into()];
    submit(&mut s, "r1", spec_with(vec![set(64, 0), emu]));
    let snapshot = s.scheduler_snapshot(|_| berth_scheduler::HostState::Up);
    let job = &snapshot.pending[0];
    assert_eq!(job.alternatives.len(), 2);
    assert_eq!(job.alternatives[0].per_host.cpus, 64);
    assert_eq!(job.alternatives[1].per_host.emu, 1);
    assert_eq!(job.alternatives[1].emu_kind, "zebu");
}

#[test]
fn the_recheck_uses_the_chosen_set_and_records_it() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4, 4096);
    submit(&mut s, "r1", spec_with(vec![set(64, 0), set(2, 512)]));
    // The first set's request on a path that names the second: dropped.
    let r = place(&mut s, 1, "h1", Resources::cpu_mem(64, 0), 1);
    assert!(
        matches!(
            r,
            Response::PlanApplied {
                started: 0,
                dropped: 1,
                ..
            }
        ),
        "{r:?}"
    );
    // A path the job does not have: dropped.
    let r = place(&mut s, 1, "h1", Resources::cpu_mem(2, 512), 2);
    assert!(
        matches!(
            r,
            Response::PlanApplied {
                started: 0,
                dropped: 1,
                ..
            }
        ),
        "{r:?}"
    );
    // The job's own request (1 cpu) is not one of its paths any more.
    let r = place(&mut s, 1, "h1", Resources::cpu_mem(1, 0), 0);
    assert!(
        matches!(
            r,
            Response::PlanApplied {
                started: 0,
                dropped: 1,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(s.data.jobs[&1].job.state, JobState::Pending);
    // The second set, named as the second path: placed.
    let r = place(&mut s, 1, "h1", Resources::cpu_mem(2, 512), 1);
    assert!(
        matches!(
            r,
            Response::PlanApplied {
                started: 1,
                dropped: 0,
                ..
            }
        ),
        "{r:?}"
    );
    let record = &s.data.jobs[&1];
    assert_eq!(record.job.state, JobState::Running);
    assert_eq!(record.job.alloc.as_ref().map(|a| a.alternative), Some(2));
    let event = record
        .events
        .iter()
        .find(|e| e.kind == "alternative")
        .expect("an alternative event");
    assert_eq!(
        event.message,
        "Started on alternative 2 of 2 (cpus=2,mem=512M)"
    );
}

#[test]
fn the_recheck_refuses_a_host_of_another_kind() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4, 4096);
    let mut emu = set(1, 0);
    emu.gres = vec!["emu:zebu:1".into()];
    submit(&mut s, "r1", spec_with(vec![emu]));
    let mut need = Resources::cpu_mem(1, 0);
    need.emu = 1;
    let r = place(&mut s, 1, "h1", need, 0);
    assert!(
        matches!(
            r,
            Response::PlanApplied {
                started: 0,
                dropped: 1,
                ..
            }
        ),
        "{r:?}"
    );
}

#[test]
fn a_job_without_sets_runs_on_its_own_request_as_path_zero() {
    let mut s = SmState::default();
    register(&mut s, "h1", 4, 4096);
    submit(&mut s, "r1", spec_with(Vec::new()));
    let r = place(&mut s, 1, "h1", Resources::cpu_mem(1, 0), 0);
    assert!(
        matches!(r, Response::PlanApplied { started: 1, .. }),
        "{r:?}"
    );
    let record = &s.data.jobs[&1];
    assert_eq!(record.job.alloc.as_ref().map(|a| a.alternative), Some(0));
    assert!(record.events.iter().all(|e| e.kind != "alternative"));
}

/// Partitions cpu (c1, the default) and emu (e1), and account lab for
/// alice.
fn two_partitions(s: &mut SmState) {
    register(s, "c1", 4, 0);
    register(s, "e1", 8, 0);
    let partition = |name: &str, host: &str, default: bool| {
        crate::policy::PolicyChange::UpsertPartition(crate::policy::PartitionRecord {
            partition: berth_scheduler::Partition {
                name: name.into(),
                default,
                ..Default::default()
            },
            hosts: vec![host.into()],
        })
    };
    for change in [
        partition("cpu", "c1", true),
        partition("emu", "e1", false),
        crate::policy::PolicyChange::UpsertAccount(berth_scheduler::Account {
            name: "lab".into(),
            users: vec!["alice".into()],
            ..Default::default()
        }),
    ] {
        assert_eq!(
            apply(s, Command::SetPolicy { change, now_ms: 2 }),
            Response::PolicySet
        );
    }
}

#[test]
fn an_alternative_runs_in_its_own_partition_and_apply_holds_it_there() {
    let mut s = SmState::default();
    two_partitions(&mut s);
    let mut own = set(1, 0);
    own.partition = "emu".into();
    let spec = JobSpec {
        partitions: vec!["cpu".into()],
        ..spec_with(vec![set(8, 0), own])
    };
    assert!(matches!(
        submit(&mut s, "r1", spec.clone()),
        Response::Submitted { .. }
    ));
    // The pass: 8 CPUs never fit c1, so the second set runs on e1 in emu,
    // a partition the job itself does not name.
    let plan = berth_scheduler::schedule(
        &s.scheduler_snapshot(|_| berth_scheduler::HostState::Up),
        &berth_scheduler::Policy::default(),
        20,
    );
    let [start] = plan.starts.as_slice() else {
        panic!("one start expected: {plan:?}");
    };
    assert_eq!(
        (start.host.as_str(), start.partition.as_str(), start.path),
        ("e1", "emu", 1)
    );
    // apply holds every path to its partition and every host to it.
    let one = Resources::cpu_mem(1, 0);
    assert_eq!(
        placed_in(&mut s, 1, "e1", "emu", 0, Resources::cpu_mem(8, 0)),
        0
    );
    assert_eq!(placed_in(&mut s, 1, "c1", "emu", 1, one), 0);
    assert_eq!(placed_in(&mut s, 1, "e1", "cpu", 1, one), 0);
    assert_eq!(placed_in(&mut s, 1, "e1", "emu", 1, one), 1);
    assert_eq!(
        s.job(1)
            .and_then(|r| r.job.alloc.as_ref())
            .map(|a| a.alternative),
        Some(2)
    );

    // A partition no one defined is refused at submit, naming it.
    let mut ghost = set(1, 0);
    ghost.partition = "nowhere".into();
    let reason = rejected(submit(&mut s, "r2", spec_with(vec![ghost])));
    assert_eq!(
        reason,
        "invalid partition: partition nowhere does not exist"
    );
}

#[test]
fn with_no_policy_only_the_implicit_partition_may_be_named() {
    let mut s = SmState::default();
    // sinfo shows every host in `batch`: naming it is fine.
    let mut named = spec_with(Vec::new());
    named.partitions = vec!["batch".into()];
    accepted(submit(&mut s, "r1", named.clone()));
    // Any other name is a typo, refused as with partitions configured.
    named.partitions = vec!["batch".into(), "gpu".into()];
    assert_eq!(
        rejected(submit(&mut s, "r2", named)),
        "invalid partition: partition gpu does not exist"
    );
    let mut ghost = set(1, 0);
    ghost.partition = "nowhere".into();
    assert_eq!(
        rejected(submit(&mut s, "r3", spec_with(vec![set(1, 0), ghost]))),
        "invalid partition: partition nowhere does not exist"
    );
    assert_eq!(s.data.counters.next_job_id, 2, "only the first was made");
}

#[test]
fn a_job_naming_no_partition_is_stored_in_the_default_one() {
    let mut s = SmState::default();
    two_partitions(&mut s);
    let plain = accepted(submit(&mut s, "r1", spec_with(Vec::new())));
    let named = accepted(submit(
        &mut s,
        "r2",
        JobSpec {
            partitions: vec!["emu".into()],
            ..spec_with(Vec::new())
        },
    ));
    let partitions = |s: &SmState, id| s.job(id).map(|r| r.job.spec.partitions.clone());
    assert_eq!(partitions(&s, plain), Some(vec!["cpu".to_string()]));
    assert_eq!(partitions(&s, named), Some(vec!["emu".to_string()]));
}
