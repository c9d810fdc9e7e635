//! End-to-end tests on a real 3-node cluster of `berthd` processes (each
//! with its own RocksDB directory) and a real `berth-agent` running real
//! processes, all on loopback. Every wait is a condition with a deadline.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use berth_chaos::harness::connect;
use berth_chaos::harness::{status_of, ClusterOptions, LocalCluster};
use berth_proto::api::{
    Account, GetJobRequest, GetPrioritiesRequest, JobSpec, JobState, Limits, ListJobsRequest,
    ListQosRequest, Qos, SubmitJobRequest, WatchJobEventsRequest,
};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const JOB_DEADLINE: Duration = Duration::from_secs(60);

/// A default cluster (3 nodes, 1 agent) under `tmp`, with its first
/// leader elected; returns the leader's id too.
async fn started_cluster(tmp: &tempfile::TempDir) -> (LocalCluster, u64) {
    let cluster =
        LocalCluster::start(tmp.path(), &ClusterOptions::default()).expect("start cluster");
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    (cluster, leader)
}

/// Submits through any live node, retrying on another with the same
/// request id (idempotent) while the cluster elects a leader.
async fn submit(cluster: &LocalCluster, request_id: &str, command: &str) -> u64 {
    submit_with_limit(cluster, request_id, command, 0).await
}

/// The tests' one-CPU job running `command`.
fn e2e_spec(command: &str) -> JobSpec {
    JobSpec {
        name: "e2e".into(),
        user: "tester".into(),
        command: command.into(),
        cpus: 1,
        ..Default::default()
    }
}

async fn submit_with_limit(
    cluster: &LocalCluster,
    request_id: &str,
    command: &str,
    time_limit_s: u64,
) -> u64 {
    let spec = JobSpec {
        time_limit_s,
        ..e2e_spec(command)
    };
    match cluster
        .submit_retrying(request_id, spec, JOB_DEADLINE)
        .await
    {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    }
}

async fn wait_for_state(cluster: &LocalCluster, job_id: u64, want: JobState) {
    wait_for_job(cluster, job_id, &format!("{want:?}"), |job| {
        job.state == want as i32
    })
    .await;
}

/// Waits until `done` holds for the job as a linearizable read shows it.
async fn wait_for_job(
    cluster: &LocalCluster,
    job_id: u64,
    what: &str,
    done: impl Fn(&berth_proto::api::Job) -> bool,
) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < JOB_DEADLINE {
        if let Ok(mut client) = cluster.client().await {
            match client
                .get_job(GetJobRequest {
                    job_id,
                    stale: false,
                })
                .await
            {
                Ok(job) => {
                    let job = job.into_inner();
                    if done(&job) {
                        return;
                    }
                    last = format!(
                        "state {:?} reason {} ({})",
                        JobState::try_from(job.state),
                        job.reason,
                        job.reason_text
                    );
                }
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {job_id} did not reach {what} within {JOB_DEADLINE:?}; last seen: {last}");
}

/// A day from now, in ms since the epoch: a begin time that keeps a job
/// pending for the whole test.
fn day_from_now_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    u64::try_from(now.as_millis()).expect("ms fit u64") + 86_400_000
}

async fn all_job_ids(cluster: &LocalCluster) -> Vec<u64> {
    let states = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
    ];
    let mut client = cluster.client().await.expect("client");
    let jobs = client
        .list_jobs(ListJobsRequest {
            states: states.iter().map(|s| *s as i32).collect(),
            ..Default::default()
        })
        .await
        .expect("list jobs")
        .into_inner()
        .jobs;
    jobs.iter().map(|j| j.job_id).collect()
}

fn read_output(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_and_cluster_survives_leader_kill() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cluster, leader) = started_cluster(&tmp).await;

    let out1 = tmp.path().join("job1.txt");
    let job1 = submit(
        &cluster,
        "e2e-job-1",
        &format!("echo first > {}", out1.display()),
    )
    .await;
    wait_for_state(&cluster, job1, JobState::Completed).await;
    assert_eq!(read_output(&out1), "first\n");

    // The leader's metrics say so too.
    let metrics = cluster.scrape_metrics(leader).expect("scrape metrics");
    for line in [
        "berth_raft_is_leader 1",
        "berth_jobs{state=\"COMPLETED\"} 1",
        "berth_hosts 1",
        "berth_hosts_by_state{state=\"up\"} 1",
        "berth_raft_apply_lag_entries 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no line {line:?} in:\n{metrics}"
        );
    }
    for needle in [
        "berth_raft_commit_index ",
        "berth_raft_leader_changes_total ",
        "berth_scheduler_pass_seconds",
        "berth_api_request_duration_seconds",
        "method=\"SubmitJob\"",
    ] {
        assert!(metrics.contains(needle), "no {needle:?} in:\n{metrics}");
    }
    assert_eq!(
        cluster.http_get(leader, "/healthz").expect("healthz").0,
        200
    );
    let (status, body) = cluster.http_get(leader, "/readyz").expect("readyz");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(&format!("ready: leader {leader}")),
        "{body}"
    );

    // Abrupt leader loss: a new leader within 3 s.
    let killed_at = Instant::now();
    cluster.kill_node(leader).expect("kill leader");
    let new_leader = cluster
        .wait_for_leader(Duration::from_secs(3))
        .await
        .expect("new leader within 3 s");
    let failover = killed_at.elapsed();
    eprintln!("leader {leader} killed; node {new_leader} leads after {failover:?}");
    assert_ne!(new_leader, leader);
    assert!(
        failover <= Duration::from_secs(3),
        "failover took {failover:?}"
    );

    let out2 = tmp.path().join("job2.txt");
    let job2 = submit(
        &cluster,
        "e2e-job-2",
        &format!("echo second > {}", out2.display()),
    )
    .await;
    wait_for_state(&cluster, job2, JobState::Completed).await;
    assert_eq!(read_output(&out2), "second\n");

    // Both jobs exactly once, with distinct ids.
    let ids = all_job_ids(&cluster).await;
    assert_eq!(ids, vec![job1, job2], "jobs after failover");
    assert_ne!(job1, job2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_of_all_nodes_keeps_jobs_and_id_counter() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cluster, _) = started_cluster(&tmp).await;

    let ok = submit(&cluster, "restart-ok", "exit 0").await;
    let bad = submit(&cluster, "restart-bad", "exit 3").await;
    wait_for_state(&cluster, ok, JobState::Completed).await;
    wait_for_state(&cluster, bad, JobState::Failed).await;
    let before_ids = all_job_ids(&cluster).await;
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("leader");
    let addr = cluster.servers()[(leader - 1) as usize].clone();
    let next_before = status_of(&addr).await.expect("status").next_job_id;

    cluster.kill_all_nodes().expect("kill all");
    cluster.start_stopped_nodes().expect("restart");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("leader after restart");

    assert_eq!(all_job_ids(&cluster).await, before_ids);
    wait_for_state(&cluster, ok, JobState::Completed).await;
    wait_for_state(&cluster, bad, JobState::Failed).await;
    // Every node, once caught up, has the same id counter as before.
    let start = Instant::now();
    let mut counters = BTreeSet::new();
    while start.elapsed() < LEADER_DEADLINE {
        counters.clear();
        for addr in cluster.servers() {
            counters.insert(status_of(&addr).await.map(|s| s.next_job_id).unwrap_or(0));
        }
        if counters.len() == 1 && counters.contains(&next_before) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counters.into_iter().collect::<Vec<_>>(), vec![next_before]);

    // A retried submit from before the restart is still recognised, and a
    // new one takes the next id.
    assert_eq!(submit(&cluster, "restart-ok", "exit 0").await, ok);
    assert_eq!(submit(&cluster, "restart-new", "exit 0").await, next_before);
}

/// Invariant 6: an agent that restarts after kill -9 does not run the
/// allocation its predecessor was running a second time: it re-adopts it
/// from its state directory, the job ends COMPLETED once, and the host
/// takes new work. (A job that died while the agent was down ends
/// NODE_FAIL: `agent_jobs.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_agent_never_runs_a_job_twice() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cluster, _) = started_cluster(&tmp).await;

    let starts = tmp.path().join("starts.txt");
    let job = submit(
        &cluster,
        "agent-restart",
        &format!(
            "echo started >> {0}; sleep 3; echo ended >> {0}",
            starts.display()
        ),
    )
    .await;
    wait_for_state(&cluster, job, JobState::Running).await;
    let deadline = Instant::now() + JOB_DEADLINE;
    while !starts.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    cluster.kill_agent(1).expect("kill agent");
    cluster.start_agent(1).expect("restart agent");
    wait_for_state(&cluster, job, JobState::Completed).await;

    // The host is back in service: a new job runs to completion.
    let after = submit(&cluster, "after-agent-restart", "exit 0").await;
    wait_for_state(&cluster, after, JobState::Completed).await;

    // The re-adopted run finished; a second run would have been launched
    // right after the restart, so by now it would show.
    let deadline = Instant::now() + JOB_DEADLINE;
    while !read_output(&starts).contains("ended") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        read_output(&starts),
        "started\nended\n",
        "the job ran more than once"
    );

    let mut client = cluster.client().await.expect("client");
    let mut events = client
        .watch_job_events(WatchJobEventsRequest {
            job_id: job,
            after_seq: 0,
            no_follow: false,
        })
        .await
        .expect("events")
        .into_inner();
    let mut kinds = Vec::new();
    while let Ok(Some(e)) = events.message().await {
        kinds.push(e.kind);
    }
    assert_eq!(kinds.first().map(String::as_str), Some("submitted"));
    assert_eq!(
        kinds.iter().filter(|k| *k == "allocated").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last().map(String::as_str), Some("ended"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "node-fail"), "{kinds:?}");
}

/// A job past its time limit is stopped by its agent (SIGTERM to its
/// process group) and ends TIMEOUT; the host is free again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_over_its_time_limit_ends_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cluster, _) = started_cluster(&tmp).await;

    let marker = tmp.path().join("overran.txt");
    let job = submit_with_limit(
        &cluster,
        "time-limit",
        &format!("sleep 30; echo overran > {}", marker.display()),
        1,
    )
    .await;
    wait_for_state(&cluster, job, JobState::Timeout).await;
    assert!(!marker.exists(), "the job ran past its time limit");

    let after = submit(&cluster, "after-time-limit", "exit 0").await;
    wait_for_state(&cluster, after, JobState::Completed).await;
}

/// A host whose agent goes silent past the heartbeat timeout (5 s in the
/// harness) has its running jobs ended NODE_FAIL by the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_host_fails_its_running_jobs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut cluster, _) = started_cluster(&tmp).await;

    let job = submit(&cluster, "silent-host", "sleep 8").await;
    wait_for_state(&cluster, job, JobState::Running).await;
    cluster.kill_agent(1).expect("kill agent");
    wait_for_state(&cluster, job, JobState::NodeFail).await;
}

/// QOS and account limits reach the live cluster through the admin API: a
/// QOS with GrpJobs = 1 lets one of the account's jobs run and holds the
/// next with Slurm's reason and the numbers; a negative nice beyond the
/// account's max_priority is refused; raising the limit lets the waiting
/// job start.
#[tokio::test(flavor = "multi_thread")]
async fn qos_limits_hold_jobs_until_raised() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cluster, _) = started_cluster(&tmp).await;
    let mut client = cluster.client().await.expect("client");
    let team = |grp_jobs: u32| Qos {
        name: "team".into(),
        limits: Some(Limits {
            grp_jobs: Some(grp_jobs),
            ..Default::default()
        }),
        ..Default::default()
    };
    client.upsert_qos(team(1)).await.expect("upsert qos");
    client
        .upsert_account(Account {
            name: "lab".into(),
            users: vec!["tester".into()],
            default_qos: "team".into(),
            ..Default::default()
        })
        .await
        .expect("upsert account");
    let refused = client
        .upsert_account(Account {
            name: "orphan".into(),
            parent: "nowhere".into(),
            ..Default::default()
        })
        .await
        .expect_err("unknown parent");
    assert_eq!(
        refused.message(),
        "account orphan: no parent account nowhere"
    );

    let first = submit(&cluster, "qos-1", "sleep 30").await;
    let second = submit(&cluster, "qos-2", "sleep 30").await;
    wait_for_state(&cluster, first, JobState::Running).await;
    wait_for_job(&cluster, second, "QOSGrpJobsLimit", |job| {
        job.reason == "QOSGrpJobsLimit"
            && job
                .reason_text
                .ends_with("running jobs 1 + 1 > 1 (QOS team GrpJobs)")
    })
    .await;

    let nice = client
        .submit_job(SubmitJobRequest {
            request_id: "qos-nice".into(),
            spec: Some(JobSpec {
                user: "tester".into(),
                command: "true".into(),
                cpus: 1,
                nice: -5,
                ..Default::default()
            }),
        })
        .await
        .expect_err("nice above entitlement");
    assert_eq!(
        nice.message(),
        "permission denied: nice -5 asks priority 5, above account lab's max_priority 0"
    );

    client.upsert_qos(team(2)).await.expect("raise limit");
    wait_for_state(&cluster, second, JobState::Running).await;
    let listed = client
        .list_qos(ListQosRequest {})
        .await
        .expect("list qos")
        .into_inner()
        .qos;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].limits.as_ref().and_then(|l| l.grp_jobs), Some(2));
}

/// A pending job's priority and its parts reach the API from the leader's
/// last pass: through every node (followers hand the call to the leader),
/// in GetPriorities and in the job's own `priority`. The account's admin
/// priority is added as it is (sprio's SITE), so with the default weights
/// (age only, one unit per hour) a fresh job's total is exactly that. The
/// job stays pending by a begin time a day ahead: a held one would not be
/// in the pass at all (its priority is 0, as in Slurm).
#[tokio::test(flavor = "multi_thread")]
async fn pending_job_priority_reaches_the_api() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cluster, _) = started_cluster(&tmp).await;
    let mut client = cluster.client().await.expect("client");
    client
        .upsert_account(Account {
            name: "lab".into(),
            users: vec!["tester".into()],
            priority: 40,
            ..Default::default()
        })
        .await
        .expect("upsert account");
    let held = client
        .submit_job(SubmitJobRequest {
            request_id: "prio-held".into(),
            spec: Some(JobSpec {
                user: "tester".into(),
                account: "lab".into(),
                command: "true".into(),
                cpus: 1,
                hold: true,
                ..Default::default()
            }),
        })
        .await
        .expect("submit held")
        .into_inner()
        .job_id;
    let job_id = client
        .submit_job(SubmitJobRequest {
            request_id: "prio-1".into(),
            spec: Some(JobSpec {
                user: "tester".into(),
                account: "lab".into(),
                command: "true".into(),
                cpus: 1,
                begin_ms: day_from_now_ms(),
                ..Default::default()
            }),
        })
        .await
        .expect("submit")
        .into_inner()
        .job_id;
    wait_for_job(&cluster, job_id, "priority 40", |job| job.priority == 40).await;
    // The pass that priced it left the held job out: no priority, no sprio
    // line, as Slurm gives a held job priority 0.
    let held_job = cluster.get_job(held).await.expect("get held job");
    assert_eq!(
        (held_job.reason.as_str(), held_job.priority),
        ("JobHeldUser", 0)
    );
    let held_factors = client
        .get_priorities(GetPrioritiesRequest {
            job_ids: vec![held],
            user: String::new(),
        })
        .await
        .expect("get priorities of the held job")
        .into_inner()
        .jobs;
    assert!(held_factors.is_empty(), "{held_factors:?}");

    for addr in cluster.live_servers() {
        let start = Instant::now();
        let factors = loop {
            let answer = match connect(&addr).await {
                Ok(mut c) => c
                    .get_priorities(GetPrioritiesRequest {
                        job_ids: vec![job_id],
                        user: String::new(),
                    })
                    .await
                    .map(|r| r.into_inner().jobs)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match answer {
                Ok(jobs) if !jobs.is_empty() => break jobs,
                other if start.elapsed() < JOB_DEADLINE => {
                    eprintln!("{addr}: {other:?}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!("{addr}: no priorities within {JOB_DEADLINE:?}: {other:?}"),
            }
        };
        assert_eq!(factors.len(), 1, "{addr}: {factors:?}");
        let f = &factors[0];
        assert_eq!(
            (f.job_id, f.user.as_str(), f.account.as_str()),
            (job_id, "tester", "lab"),
            "{addr}"
        );
        assert_eq!((f.site, f.total, f.age, f.nice), (40, 40, 0, 0), "{addr}");
    }
    let mut client = cluster.client().await.expect("client");
    let others = client
        .get_priorities(GetPrioritiesRequest {
            job_ids: Vec::new(),
            user: "nobody".into(),
        })
        .await
        .expect("get priorities")
        .into_inner()
        .jobs;
    assert!(others.is_empty(), "{others:?}");
}

/// Requeue with hold stops the running job on its host (the agent carries
/// out the stop) and brings it back pending and held with the same id; a
/// release lets it run again under a new allocation.
#[tokio::test(flavor = "multi_thread")]
async fn requeue_hold_and_release_a_running_job() {
    use berth_proto::api::control_job_request::Action;
    use berth_proto::api::ControlJobRequest;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (cluster, _) = started_cluster(&tmp).await;
    let job = submit(&cluster, "rq-1", "sleep 60").await;
    wait_for_state(&cluster, job, JobState::Running).await;
    let mut client = cluster.client().await.expect("client");
    let first_alloc = client
        .get_job(GetJobRequest {
            job_id: job,
            stale: false,
        })
        .await
        .expect("get job")
        .into_inner()
        .alloc_id;
    let control = |action: Action| ControlJobRequest {
        job_id: job,
        action: action as i32,
        admin: false,
        ..Default::default()
    };
    let refused = client
        .control_job(control(Action::Hold))
        .await
        .expect_err("a running job cannot be held");
    assert_eq!(
        refused.message(),
        format!("job {job} is running: only a pending job can be held (requeue it with hold)")
    );
    client
        .control_job(control(Action::RequeueHold))
        .await
        .expect("requeue hold");
    wait_for_job(&cluster, job, "pending and held", |j| {
        j.state == JobState::Pending as i32 && j.reason == "JobHeldUser"
    })
    .await;
    client
        .control_job(control(Action::Release))
        .await
        .expect("release");
    wait_for_job(&cluster, job, "running again", |j| {
        j.state == JobState::Running as i32 && j.alloc_id != first_alloc
    })
    .await;
    // The history says so, through the CLI.
    let berth = berth_chaos::harness::tool("berth").expect("berth binary");
    let out = tokio::process::Command::new(berth)
        .args([
            "--server",
            &cluster.servers().join(","),
            "events",
            &job.to_string(),
        ])
        .output()
        .await
        .expect("run berth events");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    for kind in [
        "submitted",
        "allocated",
        "requeue-requested",
        "requeued",
        "released",
    ] {
        assert!(kinds.contains(&kind), "no {kind} event in:\n{text}");
    }
}

/// Waits until node `addr` answers ClusterStatus and `done` holds for it.
async fn wait_for_status(
    addr: &str,
    what: &str,
    done: impl Fn(&berth_proto::api::ClusterStatusResponse) -> bool,
) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < LEADER_DEADLINE {
        match status_of(addr).await {
            Ok(s) if done(&s) => return,
            Ok(s) => last = format!("{s:?}"),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {LEADER_DEADLINE:?}; last seen: {last}");
}

/// Membership changes while serving: a new node joins as a learner and
/// catches up; a dead member is replaced by it; every voter is restarted
/// in turn with a job acknowledged and run after each; a node whose disk
/// was wiped rejoins from a snapshot and ends with the same state.
#[tokio::test(flavor = "multi_thread")]
async fn membership_changes_and_rolling_restart_keep_serving() {
    use berth_proto::api::{AddLearnerRequest, ChangeMembershipRequest};
    let tmp = tempfile::tempdir().expect("tempdir");
    // Frequent snapshots and a short log: a node that joins or comes back
    // empty must be brought up to date by a snapshot, not the log.
    let options = ClusterOptions {
        spare_nodes: 1,
        snapshot_every_entries: Some(10),
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(tmp.path(), &options).expect("configure");
    for id in 1..=3 {
        cluster.start_node(id).expect("start voter");
    }
    cluster.start_agent(1).expect("start agent");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("leader");
    let before = submit(&cluster, "m-0", "true").await;
    wait_for_state(&cluster, before, JobState::Completed).await;

    // Node 4 joins as a learner once it listens; the call returns once it
    // has caught up.
    cluster.start_node(4).expect("start node 4");
    let addr4 = cluster.addr(4).expect("addr");
    wait_for_status(&addr4, "node 4 listening", |_| true).await;
    let mut client = cluster.client().await.expect("client");
    client
        .add_learner(AddLearnerRequest {
            node_id: 4,
            addr: cluster.addr(4).expect("addr"),
        })
        .await
        .expect("add learner");

    // Node 3 dies; node 4 takes its seat.
    cluster.kill_node(3).expect("kill node 3");
    let mut client = cluster.client().await.expect("client");
    client
        .change_membership(ChangeMembershipRequest {
            voter_ids: vec![1, 2, 4],
        })
        .await
        .expect("replace node 3 with node 4");
    wait_for_status(&addr4, "node 4 a voter with 1 and 2", |s| {
        let voters: BTreeSet<u64> = s
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.node_id)
            .collect();
        voters == BTreeSet::from([1, 2, 4])
    })
    .await;

    // Rolling restart of every voter; the cluster acknowledges and runs a
    // job after each.
    for (round, id) in [1u64, 2, 4].into_iter().enumerate() {
        cluster.kill_node(id).expect("kill");
        cluster.start_node(id).expect("restart");
        cluster
            .wait_caught_up(LEADER_DEADLINE)
            .await
            .expect("caught up after restart");
        let job = submit(&cluster, &format!("m-roll-{round}"), "true").await;
        wait_for_state(&cluster, job, JobState::Completed).await;
    }

    // Node 2 loses its disk. It comes back the Raft-safe way (its vote was
    // lost with the disk, so it must not vote as its old self): removed
    // from the voters, started empty, added as a learner, which the leader
    // brings up to date, then made a voter again.
    cluster.kill_node(2).expect("kill node 2");
    std::fs::remove_dir_all(cluster.data_dir(2)).expect("wipe node 2");
    let mut client = cluster.client().await.expect("client");
    client
        .change_membership(ChangeMembershipRequest {
            voter_ids: vec![1, 4],
        })
        .await
        .expect("remove node 2");
    cluster.start_node(2).expect("start wiped node 2");
    let addr2 = cluster.addr(2).expect("addr");
    wait_for_status(&addr2, "node 2 listening", |_| true).await;
    let mut client = cluster.client().await.expect("client");
    client
        .add_learner(AddLearnerRequest {
            node_id: 2,
            addr: addr2.clone(),
        })
        .await
        .expect("add node 2 back as a learner");
    client
        .change_membership(ChangeMembershipRequest {
            voter_ids: vec![1, 2, 4],
        })
        .await
        .expect("node 2 a voter again");
    let leader_id = cluster
        .wait_caught_up(LEADER_DEADLINE)
        .await
        .expect("wiped node caught up");
    let wiped = status_of(&cluster.addr(2).expect("addr"))
        .await
        .expect("status 2");
    let leader = status_of(&cluster.addr(leader_id).expect("addr"))
        .await
        .expect("status leader");
    assert_eq!(wiped.next_job_id, leader.next_job_id);
    assert_eq!(wiped.applied_index, leader.applied_index);
    let stale_ids = {
        let mut c = berth_chaos::harness::connect(&cluster.addr(2).expect("addr"))
            .await
            .expect("connect node 2");
        let mut ids: Vec<u64> = c
            .list_jobs(ListJobsRequest {
                stale: true,
                states: vec![JobState::Completed as i32],
                ..Default::default()
            })
            .await
            .expect("stale list on node 2")
            .into_inner()
            .jobs
            .iter()
            .map(|j| j.job_id)
            .collect();
        ids.sort_unstable();
        ids
    };
    let mut all = all_job_ids(&cluster).await;
    all.sort_unstable();
    assert_eq!(stale_ids, all);
}

/// A ChangeMembership that removes the leader itself: the new voters
/// elect a leader among them, and the old one, left running outside the
/// membership, steps down and names no leader. (openraft 0.9 keeps
/// naming it leader, from its own vote; it used to forward every read to
/// itself, a chain of calls to itself that never answered.)
#[tokio::test(flavor = "multi_thread")]
async fn a_leader_removed_from_the_voters_hands_off_and_names_no_leader() {
    use berth_proto::api::{AddLearnerRequest, ChangeMembershipRequest};
    /// Longer than a removed node takes to say it knows no leader, much
    /// shorter than a call that never ends.
    const ANSWER_DEADLINE: Duration = Duration::from_secs(3);
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        spare_nodes: 1,
        agents: 0,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(tmp.path(), &options).expect("configure");
    for id in 1..=3 {
        cluster.start_node(id).expect("start node");
    }
    let old = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("leader");
    let job = submit(&cluster, "rl-0", "true").await;
    let old_addr = cluster.addr(old).expect("addr");
    cluster.start_node(4).expect("start node 4");
    let addr4 = cluster.addr(4).expect("addr");
    wait_for_status(&addr4, "node 4 listening", |_| true).await;
    let mut client = connect(&old_addr).await.expect("connect to the leader");
    client
        .add_learner(AddLearnerRequest {
            node_id: 4,
            addr: addr4.clone(),
        })
        .await
        .expect("add node 4 as a learner");
    let new_voters: BTreeSet<u64> = (1..=3).filter(|id| *id != old).chain([4]).collect();
    client
        .change_membership(ChangeMembershipRequest {
            voter_ids: new_voters.iter().copied().collect(),
        })
        .await
        .expect("replace the leader with node 4");
    wait_for_status(&addr4, "a leader among the new voters", |s| {
        let voters: BTreeSet<u64> = s
            .members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.node_id)
            .collect();
        voters == new_voters && new_voters.contains(&s.leader_id)
    })
    .await;
    // The old leader has stepped down and knows it leads no more.
    wait_for_status(&old_addr, "the removed leader a learner", |s| {
        s.role == "Learner"
    })
    .await;
    let status = status_of(&old_addr)
        .await
        .expect("status of the old leader");
    assert_ne!(status.leader_id, old, "{status:?}");
    let (code, body) = cluster.http_get(old, "/readyz").expect("readyz");
    assert_eq!(code, 503, "{body}");
    // A read sent to it is refused at once, not forwarded to itself.
    let mut removed = connect(&old_addr).await.expect("connect to the old leader");
    let answer = tokio::time::timeout(
        ANSWER_DEADLINE,
        removed.get_job(GetJobRequest {
            job_id: job,
            ..Default::default()
        }),
    )
    .await
    .expect("the removed leader answers a read");
    let refused = answer.expect_err("a node outside the membership serves no read");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // So is a write: no leader will ever reach it, so it does not wait for
    // one.
    let answer = tokio::time::timeout(
        ANSWER_DEADLINE,
        removed.submit_job(SubmitJobRequest {
            request_id: "rl-removed".into(),
            spec: Some(e2e_spec("true")),
        }),
    )
    .await
    .expect("the removed leader answers a write");
    let refused = answer.expect_err("a node outside the membership takes no write");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // The cluster serves on with the new voters (through node 4: the
    // harness's client would pick the first running node, maybe the
    // removed one).
    let mut client4 = connect(&addr4).await.expect("connect to node 4");
    let after = client4
        .submit_job(SubmitJobRequest {
            request_id: "rl-1".into(),
            spec: Some(e2e_spec("true")),
        })
        .await
        .expect("submit through a new voter")
        .into_inner();
    assert!(after.job_id > job);
}
