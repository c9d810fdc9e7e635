//! Dependencies, begin times, exclusive hosts and the names a spec
//! carries: refused at submit when wrong, turned into the pass's reasons,
//! and re-checked where a plan lands.

use super::*;
use berth_scheduler::{schedule, Inventory, Policy, Reason};

const HOST_CPUS: u32 = 4;

fn state_with_host() -> SmState {
    let mut s = SmState::default();
    let mut dirty = Dirty::default();
    let r = s.apply(
        &Command::RegisterHost {
            name: "h1".into(),
            inventory: Inventory::cpu_mem(HOST_CPUS, 4096),
            agent_restarted: false,
            running_allocs: Vec::new(),
            drain_reason: String::new(),
            now_ms: 1,
            step_addr: String::new(),
        },
        &mut dirty,
    );
    assert_eq!(r, Response::HostRegistered);
    s
}

fn spec(name: &str) -> JobSpec {
    JobSpec {
        name: name.into(),
        user: "alice".into(),
        command: "true".into(),
        cpus: 1,
        ..JobSpec::default()
    }
}

fn submit_spec(s: &mut SmState, request_id: &str, spec: JobSpec) -> Response {
    s.apply(
        &Command::SubmitJob {
            request_id: request_id.into(),
            spec,
            now_ms: 1_000,
        },
        &mut Dirty::default(),
    )
}

fn submitted(s: &mut SmState, request_id: &str, spec: JobSpec) -> JobId {
    match submit_spec(s, request_id, spec) {
        Response::Submitted { job_id, .. } => job_id,
        other => panic!("submit {request_id}: {other:?}"),
    }
}

fn rejected(s: &mut SmState, spec: JobSpec) -> String {
    let before = s.data.counters;
    let r = submit_spec(s, "refused", spec);
    assert_eq!(
        s.data.counters, before,
        "a refused submit changed the counters"
    );
    match r {
        Response::Rejected { reason } => reason,
        other => panic!("accepted: {other:?}"),
    }
}

/// Proposes `job_id` on h1 with `resources` at `now_ms`; true if it started.
fn place_at(s: &mut SmState, job_id: JobId, resources: Resources, now_ms: u64) -> bool {
    let r = s.apply(
        &Command::ApplyPlan {
            gang_starts: Vec::new(),
            snapshot_index: 0,
            now_ms,
            starts: vec![Placement {
                job_id,
                host: "h1".into(),
                resources,
                partition: String::new(),
                path: 0,
                released: Vec::new(),
            }],
            evictions: Vec::new(),
            borrowed: Vec::new(),
        },
        &mut Dirty::default(),
    );
    match r {
        Response::PlanApplied {
            started, dropped, ..
        } => {
            assert_eq!(started + dropped, 1);
            started == 1
        }
        other => panic!("{other:?}"),
    }
}

fn one_cpu() -> Resources {
    Resources::cpu_mem(1, 0)
}

fn exit(s: &mut SmState, job_id: JobId, exit_code: i32) {
    let alloc_id = s
        .job(job_id)
        .and_then(|r| r.job.alloc.as_ref())
        .map(|a| a.alloc_id);
    let r = s.apply(
        &Command::JobExited {
            job_id,
            alloc_id: alloc_id.expect("running"),
            host: "h1".into(),
            exit_code,
            signal: 0,
            launch_error: String::new(),
            now_ms: 5_000,
        },
        &mut Dirty::default(),
    );
    assert_eq!(r, Response::Report { accepted: true });
}

/// The reason the live snapshot gives `job_id` (from its dependencies).
fn dep_reason(s: &SmState, job_id: JobId) -> Option<Reason> {
    s.scheduler_snapshot(|_| HostState::Up)
        .pending
        .iter()
        .find(|p| p.id == job_id)
        .expect("pending")
        .dependency
}

fn with_dependency(name: &str, dependency: &str) -> JobSpec {
    JobSpec {
        dependency: dependency.into(),
        ..spec(name)
    }
}

#[test]
fn afterok_waits_until_its_job_completes() {
    let mut s = state_with_host();
    let a = submitted(&mut s, "a", spec("a"));
    let b = submitted(&mut s, "b", with_dependency("b", &format!("afterok:{a}")));
    assert_eq!(
        s.job(b).map(|r| r.job.spec.dependency.as_str()),
        Some("afterok:1")
    );
    assert_eq!(dep_reason(&s, b), Some(Reason::Dependency));
    // The pass itself gives the reason, and does not place B.
    let plan = schedule(
        &s.scheduler_snapshot(|_| HostState::Up),
        &Policy::default(),
        2_000,
    );
    assert_eq!(plan.reasons.get(&b), Some(&Reason::Dependency));
    assert!(plan.starts.iter().all(|p| p.job_id != b));
    // A plan that places B anyway is refused where it lands.
    assert!(!place_at(&mut s, b, one_cpu(), 2_000));
    assert!(place_at(&mut s, a, one_cpu(), 2_000));
    assert_eq!(dep_reason(&s, b), Some(Reason::Dependency));
    exit(&mut s, a, 0);
    assert_eq!(dep_reason(&s, b), None);
    let plan = schedule(
        &s.scheduler_snapshot(|_| HostState::Up),
        &Policy::default(),
        6_000,
    );
    assert_eq!(
        plan.starts.iter().map(|p| p.job_id).collect::<Vec<_>>(),
        [b]
    );
    assert!(place_at(&mut s, b, one_cpu(), 6_000));
}

#[test]
fn a_dependency_that_can_no_longer_hold_says_so() {
    let mut s = state_with_host();
    let a = submitted(&mut s, "a", spec("a"));
    let ok = submitted(&mut s, "ok", with_dependency("ok", "afterok:1"));
    let not_ok = submitted(&mut s, "notok", with_dependency("notok", "afternotok:1"));
    let any = submitted(
        &mut s,
        "any",
        with_dependency("any", "afterok:1?afternotok:1"),
    );
    assert!(place_at(&mut s, a, one_cpu(), 2_000));
    exit(&mut s, a, 3);
    assert_eq!(dep_reason(&s, ok), Some(Reason::DependencyNeverSatisfied));
    assert_eq!(dep_reason(&s, not_ok), None);
    assert_eq!(dep_reason(&s, any), None);
    assert!(!place_at(&mut s, ok, one_cpu(), 6_000));
    assert!(place_at(&mut s, not_ok, one_cpu(), 6_000));
}

#[test]
fn singleton_waits_for_the_earlier_job_of_its_name() {
    let mut s = state_with_host();
    let first = submitted(&mut s, "1", with_dependency("nightly", "singleton"));
    let second = submitted(&mut s, "2", with_dependency("nightly", "singleton"));
    let other_name = submitted(&mut s, "3", with_dependency("weekly", "singleton"));
    let bob = submitted(
        &mut s,
        "4",
        JobSpec {
            user: "bob".into(),
            ..with_dependency("nightly", "singleton")
        },
    );
    assert_eq!(dep_reason(&s, first), None);
    assert_eq!(dep_reason(&s, second), Some(Reason::Dependency));
    assert_eq!(dep_reason(&s, other_name), None);
    assert_eq!(dep_reason(&s, bob), None);
    assert!(place_at(&mut s, first, one_cpu(), 2_000));
    // Running, it still holds the second back.
    assert_eq!(dep_reason(&s, second), Some(Reason::Dependency));
    assert!(!place_at(&mut s, second, one_cpu(), 2_000));
    exit(&mut s, first, 0);
    assert_eq!(dep_reason(&s, second), None);
}

#[test]
fn bad_dependencies_are_refused_at_submit() {
    let mut s = state_with_host();
    submitted(&mut s, "a", spec("a"));
    assert_eq!(
        rejected(&mut s, with_dependency("b", "afterok:1:7")),
        "dependency afterok:7: job 7 does not exist"
    );
    assert_eq!(
        rejected(&mut s, with_dependency("b", "afterok:1,after:1")),
        "dependency \"after:1\": unknown kind \"after\" (afterok, afterany, afternotok or singleton)"
    );
    assert_eq!(
        rejected(
            &mut s,
            with_dependency("b", &"x".repeat(DEPENDENCY_BYTES_MAX + 1))
        ),
        format!("dependency is longer than {DEPENDENCY_BYTES_MAX} bytes")
    );
}

#[test]
fn begin_time_holds_the_job_until_it_comes() {
    let mut s = state_with_host();
    let later = submitted(
        &mut s,
        "later",
        JobSpec {
            begin_ms: 10_000,
            ..spec("later")
        },
    );
    let snapshot = s.scheduler_snapshot(|_| HostState::Up);
    assert_eq!(snapshot.pending[0].begin_ms, 10_000);
    let plan = schedule(&snapshot, &Policy::default(), 9_999);
    assert_eq!(plan.reasons.get(&later), Some(&Reason::BeginTime));
    assert!(plan.starts.is_empty());
    assert!(!place_at(&mut s, later, one_cpu(), 9_999));
    let plan = schedule(&snapshot, &Policy::default(), 10_000);
    assert_eq!(plan.starts.len(), 1);
    assert!(place_at(&mut s, later, one_cpu(), 10_000));
}

#[test]
fn an_exclusive_job_takes_the_whole_host() {
    let mut s = state_with_host();
    let whole = submitted(
        &mut s,
        "x",
        JobSpec {
            exclusive: true,
            ..spec("x")
        },
    );
    let shared = submitted(&mut s, "y", spec("y"));
    // The pass gives it the whole host, and apply takes nothing less.
    let plan = schedule(
        &s.scheduler_snapshot(|_| HostState::Up),
        &Policy::default(),
        2_000,
    );
    let host_total = Resources::cpu_mem(HOST_CPUS, 4096);
    assert_eq!(
        plan.starts
            .iter()
            .find(|p| p.job_id == whole)
            .map(|p| p.resources),
        Some(host_total)
    );
    assert!(!place_at(&mut s, whole, one_cpu(), 2_000));
    assert!(place_at(&mut s, whole, host_total, 2_000));
    assert_eq!(s.data.hosts["h1"].allocated, host_total);
    assert!(!place_at(&mut s, shared, one_cpu(), 2_000));
    exit(&mut s, whole, 0);
    // And an exclusive job does not start beside a running one.
    let again = submitted(
        &mut s,
        "z",
        JobSpec {
            exclusive: true,
            ..spec("z")
        },
    );
    assert!(place_at(&mut s, shared, one_cpu(), 6_000));
    assert!(!place_at(&mut s, again, host_total, 6_000));
}

#[test]
fn names_are_checked_and_reservations_must_exist() {
    let mut s = state_with_host();
    let features = |f: &[&str]| JobSpec {
        features: f.iter().map(|x| x.to_string()).collect(),
        ..spec("f")
    };
    assert_eq!(
        rejected(&mut s, features(&["ib", "nv link"])),
        "feature name \"nv link\" is not valid: 1 to 64 letters, digits, '_', '-' or '.'"
    );
    assert_eq!(
        rejected(&mut s, features(&[""])),
        "feature name \"\" is not valid: 1 to 64 letters, digits, '_', '-' or '.'"
    );
    let many: Vec<String> = (0..=FEATURES_PER_JOB_MAX)
        .map(|i| format!("f{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(
        rejected(&mut s, features(&many)),
        format!("33 features asked for; at most {FEATURES_PER_JOB_MAX}")
    );
    let reservation = |r: &str| JobSpec {
        reservation: r.into(),
        ..spec("r")
    };
    assert_eq!(
        rejected(&mut s, reservation("maint window")),
        "reservation name \"maint window\" is not valid: 1 to 64 letters, digits, '_', '-' or '.'"
    );
    assert_eq!(
        rejected(&mut s, reservation("maint")),
        "Requested reservation is invalid: no reservation named maint"
    );
    // Features and preemptible are carried as given.
    let id = submitted(
        &mut s,
        "ok",
        JobSpec {
            preemptible: true,
            ..features(&["ib", "gpu-a100"])
        },
    );
    let job = &s.job(id).expect("job").job.spec;
    assert!(job.preemptible);
    assert_eq!(job.features, ["ib", "gpu-a100"]);
    let snapshot = s.scheduler_snapshot(|_| HostState::Up);
    assert_eq!(snapshot.pending[0].shape.features, ["ib", "gpu-a100"]);
}

#[test]
fn specs_stored_before_these_fields_read_with_their_defaults() {
    let old = r#"{"name":"a","user":"u","command":"true","workdir":"","env":{},"cpus":1,
        "mem_mb":0,"nodes":0,"time_limit_s":0,"partitions":[],"qos":"","account":"",
        "gres":[],"stdout_path":"","stderr_path":"","requeue":false,"hold":false,"nice":0,
        "comment":""}"#;
    let spec: JobSpec = serde_json::from_str(old).expect("old spec reads");
    assert_eq!(
        (spec.dependency.as_str(), spec.begin_ms, spec.exclusive),
        ("", 0, false)
    );
    assert!(spec.features.is_empty() && spec.reservation.is_empty() && !spec.preemptible);
}
