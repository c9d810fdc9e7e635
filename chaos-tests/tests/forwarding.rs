//! Writes a follower receives reach the leader in batches (`ForwardBatch`,
//! `node/src/forward.rs`). Many submits sent at once through one follower
//! must each get their own answer: a new job id per request id, the same
//! id for a retry of the same request id, and the leader holding exactly
//! those jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use berth_chaos::harness::{connect, status_of, ClusterOptions, LocalCluster};
use berth_proto::api::{JobSpec, SubmitJobRequest};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
/// Distinct request ids submitted; each is sent twice at the same time.
const REQUESTS: u64 = 128;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submits_through_a_follower_are_each_answered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 0,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start cluster");
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("leader");
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let client = connect(&cluster.addr(follower).expect("follower address"))
        .await
        .expect("connect to the follower");

    let mut calls = tokio::task::JoinSet::new();
    for n in 0..REQUESTS * 2 {
        let mut client = client.clone();
        calls.spawn(async move {
            let request_id = format!("fwd-{}", n % REQUESTS);
            let reply = client
                .submit_job(SubmitJobRequest {
                    request_id: request_id.clone(),
                    spec: Some(JobSpec {
                        name: "forwarded".into(),
                        user: "tester".into(),
                        command: "true".into(),
                        cpus: 1,
                        ..Default::default()
                    }),
                })
                .await
                .unwrap_or_else(|e| panic!("submit {request_id}: {e}"))
                .into_inner();
            (request_id, reply.job_id)
        });
    }
    let mut ids: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    while let Some(joined) = calls.join_next().await {
        let (request_id, job_id) = joined.expect("submit task");
        ids.entry(request_id).or_default().insert(job_id);
    }

    assert_eq!(ids.len() as u64, REQUESTS);
    for (request_id, job_ids) in &ids {
        assert_eq!(job_ids.len(), 1, "{request_id} got {job_ids:?}");
    }
    let all: BTreeSet<u64> = ids.values().flatten().copied().collect();
    // Nothing else was submitted: ids 1..=REQUESTS, each given once.
    assert_eq!(all, (1..=REQUESTS).collect::<BTreeSet<u64>>());
    let status = status_of(&cluster.addr(leader).expect("leader address"))
        .await
        .expect("leader status");
    assert_eq!(status.next_job_id, REQUESTS + 1);

    // The follower forwarded every call (a retry after an election may
    // forward one again) and put some of them in shared ForwardBatch calls.
    let metrics = cluster.scrape_metrics(follower).expect("follower metrics");
    let value = |prefix: &str| -> u64 {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    };
    let commands = value("berth_forwarded_commands_total ");
    let batches = value("berth_forward_calls_total{call=\"ForwardBatch\"}");
    assert!(commands >= REQUESTS * 2, "{commands} commands forwarded");
    assert!(
        batches >= 1,
        "no ForwardBatch call among {commands} commands"
    );
}
