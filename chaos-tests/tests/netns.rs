//! A cluster whose every process runs in a network namespace of its own
//! (`berth_chaos::netlab`): the leader cut off the network is replaced by
//! the two others, which go on committing and running jobs; this process
//! cannot reach the cut node meanwhile; healed, the old leader catches up
//! and serves what it missed. Needs root (namespaces); without it
//! the test says so and checks nothing else.

use std::time::Duration;

use berth_chaos::drill::faults::{wait_leader, wait_recovered};
use berth_chaos::harness::{connect, status_of, ClusterOptions, Isolation, LocalCluster};
use berth_proto::api::{JobSpec, JobState, SubmitJobRequest};

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

    cluster.cut_node(old).expect("cut");
    let addr = cluster.addr(old).expect("addr");
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
