//! A cluster whose every process runs in a network namespace of its own
//! (`berth_chaos::netlab`): the leader cut off the network is replaced by
//! the two others, which go on committing and running jobs; this process
//! cannot reach the cut node meanwhile; healed, the old leader catches up
//! and serves what it missed. The agent is cut off too at first, so the new
//! leader has never heard from it: a job submitted then waits for the agent
//! instead of being placed on its host (CI once saw such a job end
//! NODE_FAIL, never run, when the agent reached the new leader after its
//! grace). Needs root (namespaces); without it the test says so and checks
//! nothing else.

use std::time::Duration;

use berth_chaos::drill::faults::{wait_leader, wait_recovered};
use berth_chaos::harness::{connect, status_of, ClusterOptions, Isolation, LocalCluster};
use berth_proto::api::{JobSpec, JobState, ListHostsRequest, SubmitJobRequest};

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_the_network_is_replaced_and_follows_once_healed() {
    if let Err(e) = berth_chaos::netlab::available() {
        eprintln!("NOT RUN: {e}");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = LocalCluster::start(
        tmp.path(),
        &ClusterOptions {
            isolation: Isolation::Namespaces,
            ..ClusterOptions::default()
        },
    )
    .expect("a cluster in namespaces starts");
    assert!(cluster.can_cut());
    let old = wait_leader(&cluster, 3, &[]).await.expect("a leader");
    let addr = cluster.addr(old).expect("addr");
    // The agent heartbeats to the old leader before the cut, so it must
    // notice the cut and find the new leader.
    wait_host_up(&addr, &LocalCluster::agent_host(1)).await;

    cluster.cut_agent(1).expect("cut the agent");
    cluster.cut_node(old).expect("cut");
    let reached = tokio::time::timeout(Duration::from_secs(2), status_of(&addr)).await;
    assert!(
        !matches!(reached, Ok(Ok(_))),
        "node {old} answered while cut off"
    );
    let new = wait_leader(&cluster, 3, &[old])
        .await
        .expect("the two others elect a leader");
    assert_ne!(new, old);

    // The majority side commits and runs a job meanwhile.
    let mut client = connect(&cluster.addr(new).expect("addr"))
        .await
        .expect("connect to the new leader");
    let job_id = client
        .submit_job(SubmitJobRequest {
            request_id: "during-the-cut".into(),
            spec: Some(JobSpec {
                name: "cut".into(),
                user: "tester".into(),
                command: "true".into(),
                cpus: 1,
                ..Default::default()
            }),
        })
        .await
        .expect("the majority accepts a submit")
        .into_inner()
        .job_id;
    // A pass has looked at the job: it waits, its only host not heard from
    // in this term.
    let seen = cluster
        .wait_for_job(job_id, "a pass's verdict", DEADLINE, |j| {
            j.state != JobState::Pending as i32 || !j.reason.is_empty()
        })
        .await;
    assert_eq!(seen.state, JobState::Pending as i32, "{seen:?}");

    cluster.heal_agent(1).expect("heal the agent");
    cluster
        .wait_for_job(job_id, "COMPLETED", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;

    cluster.heal_node(old).expect("heal");
    wait_recovered(&cluster, 3)
        .await
        .expect("every node, the healed one too, catches up");
    let mut healed = connect(&addr).await.expect("connect to the healed node");
    let job = healed
        .get_job(berth_proto::api::GetJobRequest {
            job_id,
            stale: true,
        })
        .await
        .expect("the healed node answers")
        .into_inner();
    assert_eq!(job.state, JobState::Completed as i32, "{job:?}");
}

/// Waits until the node at `addr` lists `host` as up (its agent registered
/// and heartbeats there).
async fn wait_host_up(addr: &str, host: &str) {
    let start = std::time::Instant::now();
    loop {
        let state = match connect(addr).await {
            Ok(mut c) => c
                .list_hosts(ListHostsRequest {})
                .await
                .ok()
                .and_then(|r| r.into_inner().hosts.into_iter().find(|h| h.name == host))
                .map(|h| h.state),
            Err(_) => None,
        };
        if state.as_deref().is_some_and(|s| s != "down") {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{host} not up at {addr} within {DEADLINE:?}: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
