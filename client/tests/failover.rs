//! The library's failover against fake nodes: a node that answers
//! UNAVAILABLE is skipped, and a submit keeps its request id throughout.

mod support;

use berth_client::{ClientError, Cluster, RetryPolicy};
use berth_proto::api::{JobSpec, SubmitJobRequest};
use support::FakeNode;

fn submit(request_id: &str) -> SubmitJobRequest {
    SubmitJobRequest {
        request_id: request_id.into(),
        spec: Some(JobSpec {
            command: "true".into(),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn an_unavailable_node_is_skipped_and_the_request_id_kept() {
    let follower = FakeNode::new(false);
    let leader = FakeNode::new(true);
    let servers = vec![follower.start().await, leader.start().await];
    let mut cluster = Cluster::new(servers.clone());

    let first = cluster
        .submit_job(submit("req-1"))
        .await
        .expect("submitted");
    assert_eq!((first.job_id, first.duplicate), (1, false));
    assert_eq!(cluster.current_server(), Some(servers[1].as_str()));
    assert_eq!(follower.seen().len(), 1);
    assert_eq!(follower.seen()[0].request_id, "req-1");
    assert_eq!(leader.seen()[0].request_id, "req-1");

    // Later calls go straight to the node that answered.
    let again = cluster
        .submit_job(submit("req-1"))
        .await
        .expect("resubmitted");
    assert_eq!((again.job_id, again.duplicate), (1, true));
    assert_eq!(follower.seen().len(), 1);
}

#[tokio::test]
async fn other_errors_are_answers_not_reasons_to_retry() {
    let leader = FakeNode::new(true);
    let other = FakeNode::new(true);
    let mut cluster = Cluster::new(vec![leader.start().await, other.start().await]);
    let err = cluster.get_job(99).await.expect_err("no such job");
    assert_eq!(err.code(), Some(tonic::Code::NotFound));
    assert!(
        err.to_string()
            .starts_with("job 99 not found (NotFound from 127.0.0.1:"),
        "{err}"
    );
    assert!(other.seen().is_empty());
}

#[tokio::test]
async fn a_leaderless_cluster_is_retried_a_bounded_number_of_times() {
    let a = FakeNode::new(false);
    let b = FakeNode::new(false);
    let mut cluster =
        Cluster::new(vec![a.start().await, b.start().await]).with_policy(RetryPolicy {
            rounds: 3,
            backoff_ms: 10,
            max_backoff_ms: 20,
        });
    let err = cluster.cluster_status().await.expect_err("no leader");
    // The nodes answered, so this is their answer, not "no server".
    assert!(matches!(err, ClientError::Rpc { .. }), "{err}");
    assert_eq!(err.code(), Some(tonic::Code::Unavailable));
    assert_eq!(a.seen().len() + b.seen().len(), 6);
}
