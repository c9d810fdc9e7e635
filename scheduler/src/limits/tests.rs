use super::*;
use crate::assoc::Account;
use crate::model::{Host, Inventory};
use crate::pass::RunningJob;
use crate::usage::UsageRecord;
use std::sync::Arc;

fn res(cpus: u32, gpus: u32) -> Resources {
    Resources {
        cpus,
        mem_mb: 1024,
        gpus,
        emu: 0,
    }
}

fn shape(nodes: u32, cpus: u32, gpus: u32) -> Shape {
    Shape {
        nodes,
        per_host: res(cpus, gpus),
        ..Shape::default()
    }
}

fn host(name: &str, partitions: &[&str]) -> Host {
    let mut h = Host::new(
        name,
        Inventory {
            cpus: 16,
            mem_mb: 65_536,
            gpus: 8,
            ..Inventory::default()
        },
    );
    h.partitions = partitions.iter().map(|p| p.to_string()).collect();
    h
}

fn qos(name: &str, f: impl FnOnce(&mut Qos)) -> Qos {
    let mut q = Qos::named(name);
    f(&mut q);
    q
}

fn account(name: &str, parent: &str, users: &[&str], f: impl FnOnce(&mut Account)) -> Account {
    let mut a = Account {
        name: name.into(),
        parent: parent.into(),
        users: users.iter().map(|u| u.to_string()).collect(),
        ..Account::default()
    };
    f(&mut a);
    a
}

fn run(user: &str, acct: &str, q: &str, hosts: &[&str], per_host: Resources) -> RunningJob {
    RunningJob {
        id: 100,
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        per_host,
        end_ms: None,
        user: user.into(),
        account: acct.into(),
        qos: q.into(),
        ..RunningJob::default()
    }
}

/// Eight hosts h0..h7 (16 cpus, 8 gpus each; h0..h3 in partition `gpu`,
/// all in `all`), accounts `physics` (under `science`) and `ml`, users
/// alice and bob.
fn world() -> Snapshot {
    let hosts = (0..8)
        .map(|i| {
            let name = format!("h{i}");
            if i < 4 {
                host(&name, &["gpu", "all"])
            } else {
                host(&name, &["all"])
            }
        })
        .collect();
    Snapshot {
        hosts,
        accounts: vec![
            account("science", "root", &[], |_| {}),
            account("physics", "science", &["alice", "bob"], |a| {
                a.qos = vec!["normal".into(), "team".into(), "short".into()];
            }),
            account("ml", "root", &["alice"], |_| {}),
        ],
        partitions: vec![
            Partition {
                name: "all".into(),
                default: true,
                ..Partition::default()
            },
            Partition {
                name: "gpu".into(),
                ..Partition::default()
            },
        ],
        qos: vec![Qos::named("normal")],
        ..Snapshot::default()
    }
}

struct Ask<'a> {
    user: &'a str,
    account: &'a str,
    qos: &'a str,
    partition: Option<&'a str>,
    shape: Shape,
    time_limit_s: u64,
    hosts: Option<&'a [&'a str]>,
    fairshare: Option<f64>,
    has_reservation: bool,
}

fn ask(q: &str, shape: Shape) -> Ask<'_> {
    Ask {
        user: "alice",
        account: "physics",
        qos: q,
        partition: None,
        shape,
        time_limit_s: 0,
        hosts: None,
        fairshare: None,
        has_reservation: false,
    }
}

fn check_in(snap: &Snapshot, a: &Ask<'_>) -> Result<(), LimitHit> {
    let catalog = Catalog::new(snap);
    let tally = Tally::new(snap, &catalog, 0);
    check_with(snap, &catalog, &tally, a)
}

fn check_with(
    snap: &Snapshot,
    catalog: &Catalog,
    tally: &Tally,
    a: &Ask<'_>,
) -> Result<(), LimitHit> {
    let q = catalog.qos(a.qos).expect("test QOS exists");
    let partition = a.partition.and_then(|p| catalog.partition(p));
    let req = LimitRequest {
        user: a.user,
        account: a.account,
        qos: q,
        partition,
        shape: &a.shape,
        time_limit_s: a.time_limit_s,
        hosts: a.hosts,
        fairshare: a.fairshare,
        has_reservation: a.has_reservation,
    };
    check(&req, catalog, tally, &snap.usage)
}

fn hit(snap: &Snapshot, a: &Ask<'_>) -> (String, String, bool) {
    let h = check_in(snap, a).expect_err("a limit holds the job");
    (h.reason.code().to_string(), h.detail, h.never)
}

fn expect(snap: &Snapshot, a: &Ask<'_>, code: &str, detail: &str, never: bool) {
    assert_eq!(hit(snap, a), (code.to_string(), detail.to_string(), never));
}

#[test]
fn job_tres_multiplies_per_host_by_nodes() {
    let t = job_tres(&Shape {
        nodes: 3,
        per_host: Resources {
            cpus: 4,
            mem_mb: 100,
            gpus: 2,
            emu: 1,
        },
        ..Shape::default()
    });
    assert_eq!(t, TresAmounts([3, 12, 300, 6, 3]));
    assert_eq!(job_tres(&shape(0, 1, 0)).get(TresKind::Node), 1);
}

#[test]
fn flat_tables_agree_with_kind_index() {
    for (i, kind) in FLAT_KINDS.into_iter().enumerate() {
        assert_eq!(kind_index(kind), i, "{kind:?}");
    }
    let mut seen = std::collections::BTreeSet::new();
    for (kind, index) in CHECK_ORDER {
        assert_eq!(kind_index(kind), index);
        assert!(seen.insert(index), "{kind:?} twice");
    }
    // Every limit but node-per-node is checked.
    assert_eq!(seen.len(), KINDS - 1);
    assert!(!seen.contains(&kind_index(LimitKind::MaxTresPerNode(TresKind::Node))));
}

#[test]
fn no_limits_pass() {
    let mut snap = world();
    snap.running
        .push(run("alice", "physics", "normal", &["h0"], res(16, 8)));
    assert_eq!(check_in(&snap, &ask("normal", shape(8, 16, 8))), Ok(()));
}

#[test]
fn grp_tres_waits_with_numbers() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.grp_tres.gpu = Some(16)));
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(1, 8)));
    snap.running
        .push(run("bob", "physics", "team", &["h1"], res(1, 4)));
    expect(
        &snap,
        &ask("team", shape(1, 1, 8)),
        "QOSGrpGRES",
        "gpus 12 in use + 8 asked > 16 (QOS team GrpTRES)",
        false,
    );
    assert_eq!(check_in(&snap, &ask("team", shape(1, 1, 4))), Ok(()));
    // Asking no GPUs does not wait on a GPU limit.
    assert_eq!(check_in(&snap, &ask("team", shape(1, 1, 0))), Ok(()));
}

#[test]
fn grp_tres_more_than_allowed_at_all_is_never() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.grp_tres.gpu = Some(16)));
    expect(
        &snap,
        &ask("team", shape(3, 1, 8)),
        "QOSGrpGRES",
        "asks gpus 24, more than QOS team's GrpTRES gpu=16 allows at all",
        true,
    );
}

#[test]
fn grp_cpu_and_mem_codes() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_tres.cpu = Some(8);
        q.limits.grp_tres.mem_mb = Some(1000);
    }));
    expect(
        &snap,
        &ask("team", shape(1, 4, 0)),
        "QOSGrpMemLimit",
        "asks memory MiB 1024, more than QOS team's GrpTRES mem_mb=1000 allows at all",
        true,
    );
    snap.qos[1].limits.grp_tres.mem_mb = None;
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(6, 0)));
    expect(
        &snap,
        &ask("team", shape(1, 4, 0)),
        "QOSGrpCpuLimit",
        "cpus 6 in use + 4 asked > 8 (QOS team GrpTRES)",
        false,
    );
}

#[test]
fn group_nodes_count_distinct_hosts() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.grp_tres.node = Some(4)));
    // Five jobs on four distinct hosts: h0 carries two.
    for h in ["h0", "h0", "h1", "h2", "h3"] {
        snap.running
            .push(run("bob", "physics", "team", &[h], res(1, 0)));
    }
    let mut a = ask("team", shape(1, 1, 0));
    expect(
        &snap,
        &a,
        "QOSGrpNodeLimit",
        "nodes 4 in use + 1 asked > 4 (QOS team GrpTRES)",
        false,
    );
    let occupied: &[&str] = &["h2"];
    a.hosts = Some(occupied);
    assert_eq!(check_in(&snap, &a), Ok(()));
    let fresh: &[&str] = &["h5"];
    a.hosts = Some(fresh);
    expect(
        &snap,
        &a,
        "QOSGrpNodeLimit",
        "nodes 4 in use + 1 asked > 4 (QOS team GrpTRES)",
        false,
    );
    let gang = ask("team", shape(5, 1, 0));
    expect(
        &snap,
        &gang,
        "QOSGrpNodeLimit",
        "asks nodes 5, more than QOS team's GrpTRES node=4 allows at all",
        true,
    );
}

#[test]
fn charge_adds_placements_of_this_pass() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_tres.node = Some(2);
        q.limits.grp_jobs = Some(3);
    }));
    let catalog = Catalog::new(&snap);
    let mut tally = Tally::new(&snap, &catalog, 0);
    let a = ask("team", shape(1, 1, 0));
    assert_eq!(check_with(&snap, &catalog, &tally, &a), Ok(()));
    let place = |tally: &mut Tally, host: &str| {
        tally.charge(&Charge {
            user: "alice",
            account: "physics",
            qos: "team",
            partition_qos: None,
            hosts: &[host],
            per_host: res(1, 0),
            time_limit_s: 60,
        })
    };
    place(&mut tally, "h0");
    place(&mut tally, "h1");
    let err = check_with(&snap, &catalog, &tally, &a).expect_err("two nodes held");
    assert_eq!(
        err.detail,
        "nodes 2 in use + 1 asked > 2 (QOS team GrpTRES)"
    );
    // On a host the QOS already occupies it adds no node.
    let on_h0 = Ask {
        hosts: Some(&["h0"]),
        ..ask("team", shape(1, 1, 0))
    };
    assert_eq!(check_with(&snap, &catalog, &tally, &on_h0), Ok(()));
    place(&mut tally, "h0");
    let err = check_with(&snap, &catalog, &tally, &on_h0).expect_err("three jobs");
    assert_eq!(err.reason.code(), "QOSGrpJobsLimit");
    assert_eq!(err.detail, "running jobs 3 + 1 > 3 (QOS team GrpJobs)");
}

#[test]
fn account_grp_jobs_at_account_and_ancestor() {
    let mut snap = world();
    snap.accounts[1].limits.grp_jobs = Some(3);
    for _ in 0..3 {
        snap.running
            .push(run("bob", "physics", "normal", &["h0"], res(1, 0)));
    }
    expect(
        &snap,
        &ask("normal", shape(1, 1, 0)),
        "AssocGrpJobsLimit",
        "running jobs 3 + 1 > 3 (account physics GrpJobs)",
        false,
    );
    // The parent's limit counts every job below it.
    snap.accounts[1].limits.grp_jobs = None;
    snap.accounts[0].limits.grp_tres.cpu = Some(4);
    expect(
        &snap,
        &ask("normal", shape(1, 2, 0)),
        "AssocGrpCpuLimit",
        "cpus 3 in use + 2 asked > 4 (account science GrpTRES)",
        false,
    );
    // Another account's usage does not count.
    let mut other = ask("normal", shape(1, 2, 0));
    other.account = "ml";
    assert_eq!(check_in(&snap, &other), Ok(()));
}

#[test]
fn grp_jobs_zero_is_never() {
    let mut snap = world();
    snap.accounts[1].limits.grp_jobs = Some(0);
    expect(
        &snap,
        &ask("normal", shape(1, 1, 0)),
        "AssocGrpJobsLimit",
        "asks 1 running job, more than account physics's GrpJobs=0 allows at all",
        true,
    );
}

#[test]
fn max_wall_is_never() {
    let mut snap = world();
    snap.qos
        .push(qos("short", |q| q.limits.max_wall_s = Some(3600)));
    let mut a = ask("short", shape(1, 1, 0));
    a.time_limit_s = 7200;
    expect(
        &snap,
        &a,
        "QOSMaxWallDurationPerJobLimit",
        "time limit 7200 s > 3600 s (QOS short MaxWall)",
        true,
    );
    a.time_limit_s = 3600;
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn per_job_and_per_node_and_min_limits() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.max_tres_per_job.gpu = Some(8);
        q.limits.max_tres_per_node.cpu = Some(8);
        q.limits.min_tres_per_job.cpu = Some(4);
        q.limits.max_tres_per_job.node = Some(2);
    }));
    expect(
        &snap,
        &ask("team", shape(2, 4, 6)),
        "QOSMaxGRESPerJob",
        "gpus 12 asked > 8 (QOS team MaxTRESPerJob)",
        true,
    );
    expect(
        &snap,
        &ask("team", shape(3, 4, 0)),
        "QOSMaxNodePerJobLimit",
        "nodes 3 asked > 2 (QOS team MaxTRESPerJob)",
        true,
    );
    expect(
        &snap,
        &ask("team", shape(1, 12, 0)),
        "QOSMaxCpuPerNode",
        "cpus 12 per node asked > 8 (QOS team MaxTRESPerNode)",
        true,
    );
    expect(
        &snap,
        &ask("team", shape(1, 2, 0)),
        "QOSMinCpuNotSatisfied",
        "cpus 2 asked < 4 (QOS team MinTRESPerJob)",
        true,
    );
    // Min counts over all nodes: 2 nodes x 2 cpus meets 4.
    assert_eq!(check_in(&snap, &ask("team", shape(2, 2, 0))), Ok(()));
}

#[test]
fn max_tres_per_user_counts_only_that_user() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.max_tres_per_user.gpu = Some(6)));
    snap.running
        .push(run("alice", "physics", "team", &["h0"], res(1, 4)));
    snap.running
        .push(run("bob", "physics", "team", &["h1"], res(1, 6)));
    expect(
        &snap,
        &ask("team", shape(1, 1, 4)),
        "QOSMaxGRESPerUser",
        "gpus of user alice 4 in use + 4 asked > 6 (QOS team MaxTRESPerUser)",
        false,
    );
    assert_eq!(check_in(&snap, &ask("team", shape(1, 1, 2))), Ok(()));
    let mut carol = ask("team", shape(1, 1, 6));
    carol.user = "bob";
    assert!(check_in(&snap, &carol).is_err());
    expect(
        &snap,
        &ask("team", shape(1, 1, 8)),
        "QOSMaxGRESPerUser",
        "asks gpus 8, more than QOS team's MaxTRESPerUser gpu=6 allows at all",
        true,
    );
}

#[test]
fn max_jobs_per_user_qos_and_inherited_assoc() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.max_jobs_per_user = Some(2)));
    snap.running
        .push(run("alice", "physics", "team", &["h0"], res(1, 0)));
    snap.running
        .push(run("alice", "physics", "team", &["h1"], res(1, 0)));
    snap.running
        .push(run("bob", "physics", "team", &["h1"], res(1, 0)));
    expect(
        &snap,
        &ask("team", shape(1, 1, 0)),
        "QOSMaxJobsPerUserLimit",
        "running jobs of user alice 2 + 1 > 2 (QOS team MaxJobsPerUser)",
        false,
    );
    // Set on the parent account, inherited by physics, counted per
    // (physics, user); the sentence names the account that sets it.
    snap.accounts[0].limits.max_jobs_per_user = Some(2);
    expect(
        &snap,
        &ask("normal", shape(1, 1, 0)),
        "AssocMaxJobsLimit",
        "running jobs of user alice 2 + 1 > 2 (account science MaxJobsPerUser)",
        false,
    );
    let mut bob = ask("normal", shape(1, 1, 0));
    bob.user = "bob";
    assert_eq!(check_in(&snap, &bob), Ok(()));
}

#[test]
fn assoc_max_tres_per_user_uses_assoc_grp_codes() {
    let mut snap = world();
    snap.accounts[1].limits.max_tres_per_user.cpu = Some(8);
    snap.running
        .push(run("alice", "physics", "normal", &["h0"], res(6, 0)));
    expect(
        &snap,
        &ask("normal", shape(1, 4, 0)),
        "AssocGrpCpuLimit",
        "cpus of user alice 6 in use + 4 asked > 8 (account physics MaxTRESPerUser)",
        false,
    );
}

#[test]
fn assoc_per_job_limit_inherited_from_parent() {
    let mut snap = world();
    snap.accounts[0].limits.max_wall_s = Some(600);
    let mut a = ask("normal", shape(1, 1, 0));
    a.time_limit_s = 601;
    expect(
        &snap,
        &a,
        "AssocMaxWallDurationPerJobLimit",
        "time limit 601 s > 600 s (account science MaxWall)",
        true,
    );
    // The child's own setting wins over the parent's.
    snap.accounts[1].limits.max_wall_s = Some(1200);
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn grp_wall_reads_decayed_usage() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.grp_wall_s = Some(7200)));
    snap.usage.qos.insert(
        "team".into(),
        UsageRecord {
            wall_s: 7300.0,
            ..UsageRecord::default()
        },
    );
    expect(
        &snap,
        &ask("team", shape(1, 1, 0)),
        "QOSGrpWallLimit",
        "wall time used 7300 s >= 7200 s (QOS team GrpWall)",
        false,
    );
    snap.usage.qos.get_mut("team").expect("record").wall_s = 7199.5;
    assert_eq!(check_in(&snap, &ask("team", shape(1, 1, 0))), Ok(()));
    // Account GrpWall reads the account's usage.
    snap.accounts[1].limits.grp_wall_s = Some(100);
    snap.usage.accounts.insert(
        "physics".into(),
        UsageRecord {
            wall_s: 100.0,
            ..UsageRecord::default()
        },
    );
    expect(
        &snap,
        &ask("normal", shape(1, 1, 0)),
        "AssocGrpWallLimit",
        "wall time used 100 s >= 100 s (account physics GrpWall)",
        false,
    );
}

#[test]
fn grp_tres_mins_counts_usage_running_and_own() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_tres_mins.cpu = Some(1000);
        q.usage_factor = 2.0;
    }));
    // 600 cpu-minutes used (stored in seconds, already with the factor).
    snap.usage.qos.insert(
        "team".into(),
        UsageRecord {
            tres_s: [0.0, 36_000.0, 0.0, 0.0, 0.0],
            wall_s: 0.0,
        },
    );
    // A running 2-cpu job with 50 minutes left, times factor 2: 200.
    let mut r = run("bob", "physics", "team", &["h0"], res(2, 0));
    r.end_ms = Some(3_000_000);
    snap.running.push(r);
    let mut a = ask("team", shape(1, 4, 0));
    a.time_limit_s = 3600; // 4 cpus x 60 min = 240
    expect(
        &snap,
        &a,
        "QOSGrpCPUMinutesLimit",
        "cpu-minutes 800 used + 240 asked > 1000 (QOS team GrpTRESMins)",
        false,
    );
    a.time_limit_s = 3000; // 200
    assert_eq!(check_in(&snap, &a), Ok(()));
    // UsageFactorSafe: the job must fit with its factor applied.
    snap.qos[1].flags.usage_factor_safe = true;
    expect(
        &snap,
        &a,
        "QOSGrpCPUMinutesLimit",
        "cpu-minutes 800 used + 400 asked > 1000 (QOS team GrpTRESMins)",
        false,
    );
    a.time_limit_s = 9000; // 600 x 2
    expect(
        &snap,
        &a,
        "QOSGrpCPUMinutesLimit",
        "asks cpu-minutes 1200, more than QOS team's GrpTRESMins cpu=1000 allows at all",
        true,
    );
    // Usage alone at the limit holds every job asking that TRES.
    snap.qos[1].flags.usage_factor_safe = false;
    snap.usage.qos.get_mut("team").expect("record").tres_s[1] = 60_000.0;
    a.time_limit_s = 60;
    expect(
        &snap,
        &a,
        "QOSGrpCPUMinutesLimit",
        "cpu-minutes used 1200 >= 1000 (QOS team GrpTRESMins)",
        false,
    );
}

#[test]
fn assoc_grp_tres_mins_code() {
    let mut snap = world();
    snap.accounts[1].limits.grp_tres_mins.gpu = Some(100);
    let mut a = ask("normal", shape(1, 1, 2));
    a.time_limit_s = 3600;
    expect(
        &snap,
        &a,
        "AssocGrpGRESMinutes",
        "asks gpu-minutes 120, more than account physics's GrpTRESMins gpu=100 allows at all",
        true,
    );
}

#[test]
fn usage_threshold_needs_the_flag() {
    let mut snap = world();
    snap.qos.push(qos("low", |q| q.usage_threshold = Some(0.5)));
    let mut a = ask("low", shape(1, 1, 0));
    a.fairshare = Some(0.25);
    assert_eq!(check_in(&snap, &a), Ok(()));
    snap.qos[1].flags.enforce_usage_threshold = true;
    expect(
        &snap,
        &a,
        "QOSUsageThreshold",
        "fair-share factor 0.25 < 0.5 (QOS low UsageThreshold)",
        false,
    );
    a.fairshare = Some(0.5);
    assert_eq!(check_in(&snap, &a), Ok(()));
    a.fairshare = None;
    assert_eq!(check_in(&snap, &ask("low", shape(1, 1, 0))), Ok(()));
}

/// Partition `gpu` has QOS `pq` with GrpTRES gpu=8; job QOS `team` has
/// gpu=16.
fn partition_qos_world(over_part: bool) -> Snapshot {
    let mut snap = world();
    snap.partitions[1].qos = "pq".into();
    snap.qos
        .push(qos("pq", |q| q.limits.grp_tres.gpu = Some(8)));
    snap.qos.push(qos("team", |q| {
        q.limits.grp_tres.gpu = Some(16);
        q.flags.over_part_qos = over_part;
    }));
    let mut r = run("bob", "physics", "normal", &["h0"], res(1, 6));
    r.partition = "gpu".into();
    snap.running.push(r);
    snap
}

#[test]
fn partition_qos_comes_before_the_job_qos() {
    let snap = partition_qos_world(false);
    let mut a = ask("team", shape(1, 1, 4));
    a.partition = Some("gpu");
    // The running job counts in pq through its partition, not in team.
    expect(
        &snap,
        &a,
        "QOSGrpGRES",
        "gpus 6 in use + 4 asked > 8 (partition gpu QOS pq GrpTRES)",
        false,
    );
    // Outside the partition only team's limit applies.
    a.partition = Some("all");
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn over_part_qos_puts_the_job_qos_first() {
    let snap = partition_qos_world(true);
    let mut a = ask("team", shape(1, 1, 4));
    a.partition = Some("gpu");
    assert_eq!(check_in(&snap, &a), Ok(()));
    let mut big = ask("team", shape(3, 1, 6));
    big.partition = Some("gpu");
    expect(
        &snap,
        &big,
        "QOSGrpGRES",
        "asks gpus 18, more than QOS team's GrpTRES gpu=16 allows at all",
        true,
    );
}

#[test]
fn partition_qos_limits_not_set_by_it_fall_to_the_job_qos() {
    let mut snap = partition_qos_world(false);
    snap.qos[2].limits.max_wall_s = Some(60);
    let mut a = ask("team", shape(1, 1, 0));
    a.partition = Some("gpu");
    a.time_limit_s = 120;
    expect(
        &snap,
        &a,
        "QOSMaxWallDurationPerJobLimit",
        "time limit 120 s > 60 s (QOS team MaxWall)",
        true,
    );
}

#[test]
fn qos_limit_overrides_the_association_same_limit() {
    let mut snap = world();
    snap.accounts[1].limits.grp_jobs = Some(1);
    snap.accounts[1].limits.max_wall_s = Some(60);
    snap.qos.push(qos("team", |q| {
        q.limits.grp_jobs = Some(5);
        q.limits.max_wall_s = Some(3600);
    }));
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(1, 0)));
    let mut a = ask("team", shape(1, 1, 0));
    a.time_limit_s = 600;
    assert_eq!(check_in(&snap, &a), Ok(()));
    // Under a QOS that does not set them, the account's limits hold.
    let mut n = ask("normal", shape(1, 1, 0));
    n.time_limit_s = 600;
    expect(
        &snap,
        &n,
        "AssocMaxWallDurationPerJobLimit",
        "time limit 600 s > 60 s (account physics MaxWall)",
        true,
    );
    n.time_limit_s = 60;
    expect(
        &snap,
        &n,
        "AssocGrpJobsLimit",
        "running jobs 1 + 1 > 1 (account physics GrpJobs)",
        false,
    );
}

#[test]
fn never_is_reported_before_waiting() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_jobs = Some(1);
        q.limits.grp_tres.gpu = Some(4);
    }));
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(1, 0)));
    expect(
        &snap,
        &ask("team", shape(1, 1, 8)),
        "QOSGrpGRES",
        "asks gpus 8, more than QOS team's GrpTRES gpu=4 allows at all",
        true,
    );
}

#[test]
fn relative_limits_are_percentages_of_the_cluster() {
    let mut snap = world();
    // 8 hosts x 8 gpus = 64; 25% = 16.
    snap.qos.push(qos("rel", |q| {
        q.flags.relative = true;
        q.limits.grp_tres.gpu = Some(25);
        q.limits.max_tres_per_job.node = Some(250);
    }));
    snap.running
        .push(run("bob", "physics", "rel", &["h0"], res(1, 8)));
    snap.running
        .push(run("bob", "physics", "rel", &["h1"], res(1, 4)));
    expect(
        &snap,
        &ask("rel", shape(1, 1, 8)),
        "QOSGrpGRES",
        "gpus 12 in use + 8 asked > 16 (QOS rel GrpTRES)",
        false,
    );
    // Over 100 means 100%: all 8 nodes, not 20.
    expect(
        &snap,
        &ask("rel", shape(9, 1, 0)),
        "QOSMaxNodePerJobLimit",
        "nodes 9 asked > 8 (QOS rel MaxTRESPerJob)",
        true,
    );
}

#[test]
fn relative_partition_qos_is_relative_to_the_partition() {
    let mut snap = world();
    snap.partitions[1].qos = "prel".into();
    // Partition gpu: 4 hosts x 8 gpus = 32; 50% = 16.
    snap.qos.push(qos("prel", |q| {
        q.flags.relative = true;
        q.limits.grp_tres.gpu = Some(50);
    }));
    let mut a = ask("normal", shape(3, 1, 8));
    a.partition = Some("gpu");
    expect(
        &snap,
        &a,
        "QOSGrpGRES",
        "asks gpus 24, more than partition gpu QOS prel's GrpTRES gpu=16 allows at all",
        true,
    );
    a.shape = shape(2, 1, 8);
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn partition_limits_and_qos_overrides() {
    let mut snap = world();
    snap.partitions[1].max_time_s = Some(3600);
    snap.partitions[1].max_nodes = Some(2);
    snap.partitions[1].min_nodes = Some(2);
    snap.qos.push(qos("long", |q| {
        q.flags.partition_time_limit = true;
        q.flags.partition_max_nodes = true;
        q.flags.partition_min_nodes = true;
    }));
    let mut a = ask("normal", shape(2, 1, 0));
    a.partition = Some("gpu");
    a.time_limit_s = 7200;
    expect(
        &snap,
        &a,
        "PartitionTimeLimit",
        "time limit 7200 s > 3600 s (partition gpu MaxTime)",
        true,
    );
    a.time_limit_s = 3600;
    a.shape = shape(3, 1, 0);
    expect(
        &snap,
        &a,
        "PartitionNodeLimit",
        "nodes 3 > 2 (partition gpu MaxNodes)",
        true,
    );
    a.shape = shape(1, 1, 0);
    expect(
        &snap,
        &a,
        "PartitionNodeLimit",
        "nodes 1 < 2 (partition gpu MinNodes)",
        true,
    );
    let long = qos("long", |q| {
        q.flags.partition_time_limit = true;
        q.flags.partition_max_nodes = true;
        q.flags.partition_min_nodes = true;
    });
    let p = &snap.partitions[1];
    assert_eq!(check_partition(&shape(1, 1, 0), 7200, p, &long), Ok(()));
    assert_eq!(check_partition(&shape(5, 1, 0), 0, p, &long), Ok(()));
    a.qos = "long";
    a.time_limit_s = 7200;
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn requires_reservation_in_check() {
    let mut snap = world();
    snap.qos
        .push(qos("resv", |q| q.flags.requires_reservation = true));
    expect(
        &snap,
        &ask("resv", shape(1, 1, 0)),
        "InvalidQOS",
        "QOS resv requires a reservation and the job names none",
        true,
    );
    let mut a = ask("resv", shape(1, 1, 0));
    a.has_reservation = true;
    assert_eq!(check_in(&snap, &a), Ok(()));
}

#[test]
fn run_mins_use_the_running_jobs_time_left() {
    let mut snap = world();
    snap.accounts[1].limits.grp_tres_mins.node = Some(100);
    let mut r = run("bob", "physics", "normal", &["h0", "h1"], res(1, 0));
    r.end_ms = Some(3_600_000);
    snap.running.push(r);
    let catalog = Catalog::new(&snap);
    // At 30 min: 2 nodes x 30 min left = 60 node-minutes.
    let tally = Tally::new(&snap, &catalog, 1_800_000);
    let mut a = ask("normal", shape(1, 1, 0));
    a.time_limit_s = 3000;
    let err = check_with(&snap, &catalog, &tally, &a).expect_err("over");
    assert_eq!(err.reason.code(), "AssocGrpNodeMinutes");
    assert_eq!(
        err.detail,
        "node-minutes 60 used + 50 asked > 100 (account physics GrpTRESMins)"
    );
    a.time_limit_s = 2400;
    assert_eq!(check_with(&snap, &catalog, &tally, &a), Ok(()));
}

// ---------------------------------------------------------------------------
// Submit.

fn pending(user: &str, account: &str, q: &str) -> PendingJob {
    PendingJob {
        id: 1,
        shape: shape(1, 1, 0),
        user: user.into(),
        account: account.into(),
        qos: q.into(),
        ..PendingJob::default()
    }
}

fn submit(snap: &Snapshot, job: &PendingJob) -> Result<(), SubmitRefusal> {
    let catalog = Catalog::new(snap);
    let counts = SubmitCounts::new(snap, &catalog);
    check_submit(job, &catalog, &counts)
}

fn refusal(snap: &Snapshot, job: &PendingJob) -> String {
    submit(snap, job).expect_err("refused").to_string()
}

#[test]
fn submit_accepts_a_plain_job() {
    let snap = world();
    assert_eq!(submit(&snap, &pending("alice", "physics", "")), Ok(()));
    assert_eq!(submit(&snap, &pending("alice", "", "")), Ok(()));
}

#[test]
fn submit_refuses_bad_names() {
    let mut snap = world();
    snap.qos.push(Qos::named("team"));
    snap.qos.push(Qos::named("other"));
    assert_eq!(
        refusal(&snap, &pending("alice", "nope", "")),
        "invalid account: account nope does not exist"
    );
    assert_eq!(
        refusal(&snap, &pending("carol", "", "")),
        "invalid account: user carol has no account"
    );
    assert_eq!(
        refusal(&snap, &pending("bob", "ml", "")),
        "invalid account: user bob is not in account ml"
    );
    assert_eq!(
        refusal(&snap, &pending("alice", "physics", "ghost")),
        "invalid QOS: QOS ghost does not exist"
    );
    assert_eq!(
        refusal(&snap, &pending("alice", "physics", "other")),
        "invalid QOS: account physics may not use QOS other (it may use normal,team,short)"
    );
    // An account that lists no QOS may use only normal.
    assert_eq!(
        refusal(&snap, &pending("alice", "ml", "team")),
        "invalid QOS: account ml may not use QOS team (it may use normal)"
    );
    assert_eq!(submit(&snap, &pending("alice", "ml", "normal")), Ok(()));
    let mut j = pending("alice", "physics", "");
    j.partitions = vec!["gpu".into(), "tpu".into()];
    assert_eq!(
        refusal(&snap, &j),
        "invalid partition: partition tpu does not exist"
    );
}

#[test]
fn with_no_partitions_configured_only_the_implicit_one_exists() {
    let mut snap = world();
    snap.partitions.clear();
    for h in &mut snap.hosts {
        h.partitions.clear();
    }
    let mut j = pending("alice", "physics", "");
    j.partitions = vec![crate::partition::IMPLICIT_PARTITION.into()];
    assert_eq!(submit(&snap, &j), Ok(()));
    j.partitions = vec!["gpu".into()];
    assert_eq!(
        refusal(&snap, &j),
        "invalid partition: partition gpu does not exist"
    );
}

#[test]
fn submit_refuses_missing_reservation() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.flags.requires_reservation = true));
    let mut j = pending("alice", "physics", "team");
    assert_eq!(
        submit(&snap, &j),
        Err(SubmitRefusal::ReservationRequired { qos: "team".into() })
    );
    j.reservation = "maint".into();
    assert_eq!(submit(&snap, &j), Ok(()));
}

#[test]
fn submit_refuses_relative_partition_qos_as_job_qos() {
    let mut snap = world();
    snap.partitions[1].qos = "team".into();
    snap.qos.push(qos("team", |q| q.flags.relative = true));
    assert_eq!(
        refusal(&snap, &pending("alice", "physics", "team")),
        "invalid QOS: QOS team is partition gpu's relative QOS and cannot be a job's QOS"
    );
}

#[test]
fn negative_nice_beyond_max_priority_is_permission_denied() {
    let mut snap = world();
    let mut j = pending("alice", "ml", "");
    j.nice = -50;
    let err = submit(&snap, &j).expect_err("refused");
    assert!(matches!(err, SubmitRefusal::PermissionDenied { .. }));
    assert_eq!(
        err.to_string(),
        "permission denied: nice -50 asks priority 50, above account ml's max_priority 0"
    );
    snap.accounts[2].max_priority = 50;
    assert_eq!(submit(&snap, &j), Ok(()));
    j.nice = 100;
    snap.accounts[2].max_priority = 0;
    assert_eq!(submit(&snap, &j), Ok(()));
    j.nice = i32::MIN;
    assert!(matches!(
        submit(&snap, &j),
        Err(SubmitRefusal::PermissionDenied { .. })
    ));
}

#[test]
fn submit_counts_pending_and_running() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_submit_jobs = Some(4);
        q.limits.max_submit_jobs_per_user = Some(2);
    }));
    snap.pending
        .push(Arc::new(pending("alice", "physics", "team")));
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(1, 0)));
    let catalog = Catalog::new(&snap);
    let mut counts = SubmitCounts::new(&snap, &catalog);
    let j = pending("alice", "physics", "team");
    assert_eq!(check_submit(&j, &catalog, &counts), Ok(()));
    counts.add(&j, &catalog);
    assert_eq!(
        check_submit(&j, &catalog, &counts)
            .expect_err("per user")
            .to_string(),
        "job submit limit reached: jobs submitted by user alice 2 + 1 > 2 (QOS team MaxSubmitJobsPerUser)"
    );
    let b = pending("bob", "physics", "team");
    counts.add(&b, &catalog);
    assert_eq!(
        check_submit(&b, &catalog, &counts)
            .expect_err("group")
            .to_string(),
        "job submit limit reached: jobs submitted 4 + 1 > 4 (QOS team GrpSubmitJobs)"
    );
}

#[test]
fn an_array_counts_each_task_against_the_submit_limits() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.limits.grp_submit_jobs = Some(6);
        q.limits.max_submit_jobs_per_user = Some(4);
    }));
    snap.pending
        .push(Arc::new(pending("alice", "physics", "team")));
    let catalog = Catalog::new(&snap);
    let counts = SubmitCounts::new(&snap, &catalog);
    let j = pending("alice", "physics", "team");
    // 1 pending + 3 tasks fits alice's 4; 1 + 4 does not.
    assert_eq!(check_submit_jobs(&j, &catalog, &counts, 3), Ok(()));
    assert_eq!(
        check_submit_jobs(&j, &catalog, &counts, 4)
            .expect_err("per user")
            .to_string(),
        "job submit limit reached: jobs submitted by user alice 1 + 4 > 4 (QOS team MaxSubmitJobsPerUser)"
    );
    let b = pending("bob", "physics", "team");
    assert_eq!(
        check_submit_jobs(&b, &catalog, &counts, 6)
            .expect_err("group")
            .to_string(),
        "job submit limit reached: jobs submitted 1 + 6 > 6 (QOS team GrpSubmitJobs)"
    );
    // 0 counts as the one job every submit makes.
    assert_eq!(
        check_submit_jobs(&j, &catalog, &counts, 0),
        check_submit(&j, &catalog, &counts)
    );
}

#[test]
fn submit_counts_accounts_and_partition_qos() {
    let mut snap = world();
    snap.accounts[0].limits.grp_submit_jobs = Some(1);
    snap.pending.push(Arc::new(pending("bob", "physics", "")));
    assert_eq!(
        refusal(&snap, &pending("alice", "physics", "")),
        "job submit limit reached: jobs submitted 1 + 1 > 1 (account science GrpSubmitJobs)"
    );
    assert_eq!(submit(&snap, &pending("alice", "ml", "")), Ok(()));

    let mut snap = world();
    snap.partitions[1].qos = "pq".into();
    snap.qos
        .push(qos("pq", |q| q.limits.max_submit_jobs_per_user = Some(1)));
    let mut in_gpu = pending("alice", "ml", "");
    in_gpu.partitions = vec!["gpu".into()];
    snap.pending.push(Arc::new(in_gpu.clone()));
    assert_eq!(
        refusal(&snap, &in_gpu),
        "job submit limit reached: jobs submitted by user alice 1 + 1 > 1 (partition gpu QOS pq MaxSubmitJobsPerUser)"
    );
    assert_eq!(submit(&snap, &pending("alice", "ml", "")), Ok(()));
}

#[test]
fn deny_on_limit_refuses_what_breaks_a_limit_alone() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| {
        q.flags.deny_on_limit = true;
        q.limits.max_tres_per_job.gpu = Some(8);
        q.limits.grp_tres.cpu = Some(32);
    }));
    // Busy groups do not matter at submit, only the job alone.
    snap.running
        .push(run("bob", "physics", "team", &["h0"], res(32, 0)));
    let mut j = pending("alice", "physics", "team");
    j.shape = shape(2, 1, 8);
    let err = submit(&snap, &j).expect_err("denied");
    assert_eq!(
        err,
        SubmitRefusal::DeniedOnLimit {
            reason: Reason::Limit(LimitScope::Qos, LimitKind::MaxTresPerJob(TresKind::Gpu)),
            detail: "gpus 16 asked > 8 (QOS team MaxTRESPerJob)".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "job violates a limit and its QOS has DenyOnLimit: gpus 16 asked > 8 (QOS team MaxTRESPerJob)"
    );
    j.shape = shape(3, 12, 0);
    assert_eq!(
        refusal(&snap, &j),
        "job violates a limit and its QOS has DenyOnLimit: asks cpus 36, more than QOS team's GrpTRES cpu=32 allows at all"
    );
    j.shape = shape(2, 12, 4);
    assert_eq!(submit(&snap, &j), Ok(()));
    // Another path within the limits is enough.
    j.alternatives = vec![shape(3, 12, 0), shape(1, 1, 1)];
    assert_eq!(submit(&snap, &j), Ok(()));
    // Without the flag the job is accepted and waits.
    snap.qos[1].flags.deny_on_limit = false;
    j.alternatives.clear();
    j.shape = shape(3, 12, 0);
    assert_eq!(submit(&snap, &j), Ok(()));
}

#[test]
fn deny_on_limit_covers_the_association_and_partition_qos() {
    let mut snap = world();
    snap.qos.push(qos("team", |q| q.flags.deny_on_limit = true));
    snap.accounts[1].limits.max_wall_s = Some(600);
    let mut j = pending("alice", "physics", "team");
    j.time_limit_s = 601;
    assert_eq!(
        refusal(&snap, &j),
        "job violates a limit and its QOS has DenyOnLimit: time limit 601 s > 600 s (account physics MaxWall)"
    );
    // A partition QOS with the flag denies on its own limits, and the
    // partition's default time limit is what the job is judged with.
    let mut snap = world();
    snap.partitions[1].qos = "pq".into();
    snap.partitions[1].default_time_s = Some(7200);
    snap.qos.push(qos("pq", |q| {
        q.flags.deny_on_limit = true;
        q.limits.max_wall_s = Some(3600);
    }));
    let mut j = pending("alice", "ml", "");
    j.partitions = vec!["gpu".into()];
    assert_eq!(
        refusal(&snap, &j),
        "job violates a limit and its QOS has DenyOnLimit: time limit 7200 s > 3600 s (partition gpu QOS pq MaxWall)"
    );
    // Denied only when every partition it may use denies it.
    j.partitions = vec!["gpu".into(), "all".into()];
    assert_eq!(submit(&snap, &j), Ok(()));
}

#[test]
fn tally_is_deterministic_over_repeated_builds() {
    let mut snap = world();
    snap.qos
        .push(qos("team", |q| q.limits.grp_tres.node = Some(3)));
    for (i, h) in ["h3", "h1", "h2", "h1"].iter().enumerate() {
        let mut r = run(
            if i % 2 == 0 { "alice" } else { "bob" },
            "physics",
            "team",
            &[h],
            res(1, 0),
        );
        r.id = i as u64;
        snap.running.push(r);
    }
    let first = check_in(&snap, &ask("team", shape(1, 1, 0)));
    for _ in 0..5 {
        assert_eq!(check_in(&snap, &ask("team", shape(1, 1, 0))), first);
    }
    assert_eq!(
        first.expect_err("full").detail,
        "nodes 3 in use + 1 asked > 3 (QOS team GrpTRES)"
    );
}
