//! How nodes encode what they send each other (`node/src/wire.rs`): a node
//! answers a request in the request's encoding and says that it reads
//! MessagePack; a node sends MessagePack only to a peer that said so. So a
//! node of an earlier version, which sends and reads only JSON, is still
//! answered in JSON, and a cluster of this version moves to MessagePack
//! after each peer's first reply.

use std::time::Duration;

use berth_chaos::harness::{connect, ClusterOptions, LocalCluster};
use berth_proto::api::{JobSpec, SubmitJobRequest};
use berth_proto::raft::raft_transport_client::RaftTransportClient;
use berth_proto::raft::{PayloadEncoding, RaftMessage};
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::Vote;

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
/// Submits sent through a follower.
const SUBMITS: u64 = 20;

/// The sum of every sample of `name` whose labels hold each of `labels`.
fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_answer_json_and_move_to_messagepack_between_themselves() {
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
    let follower_addr = cluster.addr(follower).expect("follower address");

    // A vote for term 0 from a node that is not a member: refused, and it
    // changes nothing, whichever encoding carries it.
    let vote = VoteRequest::<u64>::new(Vote::new(0, 99), None);
    let mut raft = RaftTransportClient::connect(format!("http://{follower_addr}"))
        .await
        .expect("connect to the follower's Raft transport");
    for encoding in [PayloadEncoding::Json, PayloadEncoding::Messagepack] {
        let payload = match encoding {
            PayloadEncoding::Json => serde_json::to_vec(&vote).expect("json"),
            PayloadEncoding::Messagepack => berth_raft_store::codec::to_vec(&vote).expect("pack"),
        };
        let reply = raft
            .vote(RaftMessage {
                payload,
                encoding: encoding.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("a {encoding:?} vote: {e}"))
            .into_inner();
        assert_eq!(reply.encoding, i32::from(encoding), "answered in kind");
        assert!(reply.reads_messagepack);
        assert!(reply.error.is_empty(), "{encoding:?}: a Raft error");
        let answer: VoteResponse<u64> = match encoding {
            PayloadEncoding::Json => serde_json::from_slice(&reply.payload).expect("json reply"),
            PayloadEncoding::Messagepack => {
                berth_raft_store::codec::from_slice(&reply.payload).expect("packed reply")
            }
        };
        assert!(
            !answer.vote_granted,
            "{encoding:?}: a stale vote was granted"
        );
    }
    // An encoding this version does not know is refused by name.
    let unknown = raft
        .vote(RaftMessage {
            payload: serde_json::to_vec(&vote).expect("json"),
            encoding: 7,
        })
        .await
        .expect_err("an unknown encoding is refused");
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument);
    assert!(
        unknown.message().contains("unknown payload encoding 7"),
        "{}",
        unknown.message()
    );

    // Submits through the follower are forwarded to the leader and
    // replicated back; after the first replies, in MessagePack.
    let mut client = connect(&follower_addr).await.expect("connect");
    for n in 0..SUBMITS {
        client
            .submit_job(SubmitJobRequest {
                request_id: format!("enc-{n}"),
                spec: Some(JobSpec {
                    name: "encoded".into(),
                    user: "tester".into(),
                    command: "true".into(),
                    cpus: 1,
                    ..Default::default()
                }),
            })
            .await
            .unwrap_or_else(|e| panic!("submit {n}: {e}"));
    }
    let sent = "berth_peer_messages_sent_total";
    let forwarded = cluster.scrape_metrics(follower).expect("follower metrics");
    let packed_forwards = metric_sum(&forwarded, sent, &["call=\"Forward", "messagepack"]);
    let json_forwards = metric_sum(&forwarded, sent, &["call=\"Forward", "\"json\""]);
    assert!(
        packed_forwards + json_forwards >= SUBMITS,
        "{packed_forwards} + {json_forwards} forwards for {SUBMITS} submits"
    );
    // The first forward goes as JSON (the leader has not answered yet), and
    // so would one after a failed call; the rest go packed.
    assert!(
        json_forwards < packed_forwards,
        "{json_forwards} forwards in JSON, {packed_forwards} in MessagePack"
    );
    let replicated = cluster.scrape_metrics(leader).expect("leader metrics");
    let packed_appends = metric_sum(
        &replicated,
        sent,
        &["call=\"AppendEntries\"", "messagepack"],
    );
    assert!(
        packed_appends >= SUBMITS,
        "{packed_appends} AppendEntries in MessagePack from the leader"
    );
}
