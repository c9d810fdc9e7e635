//! Fair-share usage of a multi-host job on a real cluster (3 `berthd`
//! processes, 3 real `berth-agent`s of 4 CPUs each, real job processes):
//! a 2-host job is charged for both hosts it holds, so per second of run
//! it costs twice the CPU-seconds and node-seconds of the same job on one
//! host. Usage is read from every node's store once the nodes are
//! stopped (there is no API for raw usage), so the test also sees that it
//! is replicated. Every wait is a condition with a deadline.
//!
//! Usage accrues, in the leader's clock, whenever a plan is applied and
//! whenever a run ends, so a run is charged from its start (its plan's
//! time) to its end (its exit report's time), nothing before or after.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_chaos::harness::{wait_until, ClusterOptions, LocalCluster};
use berth_proto::api::{Account, Job, JobSpec, JobState};
use berth_scheduler::usage::UsageRecord;
use berth_scheduler::TresKind;

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);
/// How long both measured jobs run at least: long enough that a pass's
/// worth of skew would show.
const CHARGED_RUN_MS: u64 = 3_000;
/// berthd's default scheduling pass interval: the most two starts can be
/// apart when both jobs are eligible at once.
const PASS_INTERVAL_MS: u64 = 1_000;
/// CPUs per host of both measured jobs.
const CPUS_PER_HOST: u32 = 3;
/// The user every job is submitted as, a user of every account.
const USER: &str = "tester";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A job of `nodes` hosts and `cpus` CPUs per host under `account`
/// running `command` in `dir`, eligible from `begin_ms` (0: at once).
fn spec(dir: &Path, account: &str, nodes: u32, cpus: u32, begin_ms: u64, command: &str) -> JobSpec {
    JobSpec {
        name: format!("{account}-job"),
        user: USER.into(),
        account: account.into(),
        command: command.into(),
        workdir: dir.to_str().expect("utf-8 path").into(),
        cpus,
        nodes,
        time_limit_s: 300,
        begin_ms,
        ..Default::default()
    }
}

/// A script that waits for `release` (at most a minute, then fails).
fn wait_for_release(release: &Path) -> String {
    format!(
        "for i in $(seq 600); do [ -e {} ] && exit 0; sleep 0.1; done; exit 3",
        release.display()
    )
}

async fn submit(cluster: &LocalCluster, request_id: &str, spec: JobSpec) -> u64 {
    cluster
        .submit_retrying(request_id, spec, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("submit {request_id}: {e}"))
        .job_id
}

async fn wait_running(cluster: &LocalCluster, id: u64) -> Job {
    cluster
        .wait_for_job(id, "running", DEADLINE, |j| {
            j.state == JobState::Running as i32
        })
        .await
}

async fn wait_completed(cluster: &LocalCluster, id: u64) -> Job {
    let job = cluster
        .wait_for_job(id, "ended", DEADLINE, |j| {
            j.state != JobState::Pending as i32 && j.state != JobState::Running as i32
        })
        .await;
    assert_eq!(job.state, JobState::Completed as i32, "{job:?}");
    job
}

/// Waits until the leader has all `count` hosts registered and idle with
/// `cpus` CPUs each, so the measured jobs can start in one pass.
async fn wait_for_idle_hosts(cluster: &LocalCluster, count: usize, cpus: u32) {
    let start = std::time::Instant::now();
    loop {
        let hosts = cluster.hosts().await;
        let idle = hosts
            .iter()
            .filter(|h| h.state == "idle" && h.inventory.as_ref().is_some_and(|i| i.cpus == cpus))
            .count();
        if idle == count {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{count} idle hosts of {cpus} CPUs not registered within {DEADLINE:?}: {hosts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `actual` is `expected` to within a millionth-scale float error (the
/// 7-day half-life's decay over a few seconds is about 1e-5 relative).
fn assert_close(what: &str, actual: f64, expected: f64) {
    let tolerance = expected.abs() * 1e-4 + 1e-6;
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: {actual} where {expected} was expected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_host_job_is_charged_usage_for_both_hosts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 3,
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    let dir = tmp.path();

    // Usage accrues only once an account exists. Each measured job has an
    // account of its own.
    let mut client = cluster.client().await.expect("client");
    for name in ["one", "two"] {
        client
            .upsert_account(Account {
                name: name.into(),
                users: vec![USER.into()],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("upsert account {name}: {e}"));
    }
    wait_for_idle_hosts(&cluster, 3, 4).await;

    // A: 1 host x 3 CPUs under `one`; B: 2 hosts x 3 CPUs under `two`.
    // On 3 hosts of 4 CPUs they take a host each. The same begin time
    // makes one pass start both, so their runs begin at the same instant.
    let begin_ms = now_ms() + 1_500;
    let release = dir.join("release");
    let script = wait_for_release(&release);
    let one = submit(
        &cluster,
        "usage-one",
        spec(dir, "one", 1, CPUS_PER_HOST, begin_ms, &script),
    )
    .await;
    let two = submit(
        &cluster,
        "usage-two",
        spec(dir, "two", 2, CPUS_PER_HOST, begin_ms, &script),
    )
    .await;
    let job_one = wait_running(&cluster, one).await;
    let job_two = wait_running(&cluster, two).await;
    assert_eq!(job_one.hosts.len(), 1, "{job_one:?}");
    assert_eq!(job_two.hosts.len(), 2, "{job_two:?}");
    assert_ne!(job_two.hosts[0], job_two.hosts[1], "{job_two:?}");
    assert!(job_one.start_ms > 0 && job_two.start_ms > 0);

    // Both run a while, with no plan applied meanwhile; released
    // together, both end.
    let later_start = job_one.start_ms.max(job_two.start_ms);
    wait_until("both jobs' run", DEADLINE, || {
        now_ms() >= later_start + CHARGED_RUN_MS
    })
    .await;
    std::fs::write(&release, b"").expect("release");
    let job_one = wait_completed(&cluster, one).await;
    let job_two = wait_completed(&cluster, two).await;
    let run_s = |j: &Job| (j.end_ms - j.start_ms) as f64 / 1000.0;

    // The stores can be read once their nodes are stopped; every node has
    // applied the same entries first.
    cluster
        .wait_caught_up(DEADLINE)
        .await
        .expect("every node caught up");
    drop(client);
    cluster.kill_all_nodes().expect("stop the nodes");
    let mut stores = Vec::new();
    for id in 1..=options.nodes {
        let path = cluster.data_dir(id).join("raft");
        let handles = berth_raft_store::open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let state = handles.state.read().expect("state lock");
        stores.push((id, state.data.usage.clone()));
    }

    // Replicated: every node holds the same usage.
    let (_, usage) = &stores[0];
    for (id, other) in &stores[1..] {
        assert_eq!(other.at_ms, usage.at_ms, "node {id}'s usage time");
        assert_eq!(other.usage, usage.usage, "node {id}'s usage");
    }
    // The last run's end was the last accrual.
    assert_eq!(usage.at_ms, job_one.end_ms.max(job_two.end_ms), "{usage:?}");
    let record = |account: &str| -> UsageRecord {
        *usage
            .usage
            .accounts
            .get(account)
            .unwrap_or_else(|| panic!("no usage for account {account}: {usage:?}"))
    };
    let (rec_one, rec_two) = (record("one"), record("two"));
    // Each run is charged from its start to its end.
    let (window_one, window_two) = (run_s(&job_one), run_s(&job_two));
    let cpu = TresKind::Cpu.index();
    let node = TresKind::Node.index();
    eprintln!(
        "one: {} host(s), ran {:.3} s, charged {:.3} s: {:.3} CPU-s, {:.3} node-s, {:.3} wall-s",
        job_one.hosts.len(),
        run_s(&job_one),
        window_one,
        rec_one.tres_s[cpu],
        rec_one.tres_s[node],
        rec_one.wall_s
    );
    eprintln!(
        "two: {} host(s), ran {:.3} s, charged {:.3} s: {:.3} CPU-s, {:.3} node-s, {:.3} wall-s",
        job_two.hosts.len(),
        run_s(&job_two),
        window_two,
        rec_two.tres_s[cpu],
        rec_two.tres_s[node],
        rec_two.wall_s
    );
    assert!(
        window_one * 1000.0 >= CHARGED_RUN_MS as f64,
        "one ran {window_one} s"
    );
    assert!(
        window_two * 1000.0 >= CHARGED_RUN_MS as f64,
        "two ran {window_two} s"
    );

    // Per second of run: CPUs per host times hosts, and hosts.
    // Charged as one host (the old bug), two's figures would be one's.
    let per_host = f64::from(CPUS_PER_HOST);
    assert_close("one's CPU-s", rec_one.tres_s[cpu], per_host * window_one);
    assert_close("one's node-s", rec_one.tres_s[node], window_one);
    assert_close(
        "two's CPU-s",
        rec_two.tres_s[cpu],
        2.0 * per_host * window_two,
    );
    assert_close("two's node-s", rec_two.tres_s[node], 2.0 * window_two);
    // Wall time is the job's, not its hosts'.
    assert_close("one's wall-s", rec_one.wall_s, window_one);
    assert_close("two's wall-s", rec_two.wall_s, window_two);
    // Against each other: twice one's, scaled by the difference between
    // their runs (their starts share a pass; their exits may differ by the
    // agents' reports, at most about a pass interval).
    let scale = window_two / window_one;
    assert!(
        (scale - 1.0).abs() <= PASS_INTERVAL_MS as f64 / CHARGED_RUN_MS as f64,
        "the two runs' charged windows differ: {window_one} s and {window_two} s"
    );
    assert_close(
        "two's CPU-s / one's",
        rec_two.tres_s[cpu] / rec_one.tres_s[cpu],
        2.0 * scale,
    );
    assert_close(
        "two's node-s / one's",
        rec_two.tres_s[node] / rec_one.tres_s[node],
        2.0 * scale,
    );
}
