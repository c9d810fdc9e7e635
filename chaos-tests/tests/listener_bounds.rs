//! Every listener is bounded (docs/config.md, `[listener]`): a flood of
//! connections that never finish a request cannot take a node's ports or
//! its memory, and an oversized request is refused and changes nothing.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use berth_chaos::harness::{connect, metric_sum, ClusterOptions, LocalCluster};
use berth_proto::api::{ClusterStatusRequest, JobSpec, ListJobsRequest, SubmitJobRequest};

const DEADLINE: Duration = Duration::from_secs(60);
/// Connection slots per port in this test.
const SLOTS: usize = 32;
const HEAD_TIMEOUT_MS: u64 = 1_000;
const REQUEST_BYTES_MAX: usize = 65_536;
/// Connections the flood opens on each port: several times the bound,
/// few enough for any test machine's file limit.
const FLOOD: usize = 4 * SLOTS;

/// A one-node cluster with small bounds.
fn start(dir: &std::path::Path) -> LocalCluster {
    let options = ClusterOptions {
        nodes: 1,
        agents: 0,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(dir, &options).expect("configure");
    cluster
        .append_node_toml(&format!(
            "[listener]\nmax_connections = {SLOTS}\nhead_timeout_ms = {HEAD_TIMEOUT_MS}\n\
             max_request_bytes = {REQUEST_BYTES_MAX}\n"
        ))
        .expect("limits");
    cluster.start_all().expect("start");
    cluster
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// `count` connections to `addr` that send the start of `head` and then
/// nothing more (a slow-loris client).
fn trickling(addr: &str, head: &[u8], count: usize) -> Vec<TcpStream> {
    (0..count)
        .filter_map(|_| {
            let mut stream = TcpStream::connect(addr).ok()?;
            stream.write_all(&head[..head.len() / 2]).ok()?;
            Some(stream)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_flood_neither_stops_calls_nor_grows_memory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = start(tmp.path());
    cluster.wait_for_leader(DEADLINE).await.expect("leader");
    let grpc = cluster.addr(1).expect("address");
    let mut established = connect(&grpc).await.expect("client");
    established
        .cluster_status(ClusterStatusRequest {})
        .await
        .expect("status");
    let pid = cluster.node_pid(1).expect("pid");
    let rss_before = rss_kib(pid);
    let http = cluster.http_addr(1).expect("http address");

    let flood_grpc = trickling(&grpc, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", FLOOD);
    let flood_http = trickling(&http, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", FLOOD);
    assert_eq!(flood_grpc.len(), FLOOD, "the backlog takes the flood");

    // A client connected before the flood is answered throughout.
    for _ in 0..20 {
        established
            .cluster_status(ClusterStatusRequest {})
            .await
            .expect("status during the flood");
    }
    // A new client gets a slot once the silent ones have timed out.
    let started = Instant::now();
    let mut fresh = loop {
        match connect(&grpc).await {
            Ok(client) => break client,
            Err(e) => assert!(started.elapsed() < DEADLINE, "no new connection: {e}"),
        }
    };
    fresh
        .cluster_status(ClusterStatusRequest {})
        .await
        .expect("a new client's call");
    let metrics = cluster
        .scrape_metrics(1)
        .expect("metrics over the flooded port");
    let timed_out = metric_sum(&metrics, "berth_listener_head_timeouts_total", &[]);
    assert!(
        timed_out >= SLOTS as u64,
        "{timed_out} connections closed for want of a head"
    );
    let growth_kib = rss_kib(pid).saturating_sub(rss_before);
    assert!(growth_kib < 64 * 1024, "the node grew by {growth_kib} KiB");
    drop((flood_grpc, flood_http));
}

/// `SubmitJobRequest`'s field 2 (the spec, a message) sent as a number:
/// well-formed protobuf that no `SubmitJobRequest` decodes.
#[derive(Clone, PartialEq, prost::Message)]
struct MalformedSubmit {
    #[prost(uint64, tag = "2")]
    spec: u64,
}

/// A malformed `SubmitJob`, sent as the method's path with the wrong body.
async fn submit_malformed(addr: &str) -> tonic::Status {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let path = http::uri::PathAndQuery::from_static("/berth.v1.BerthApi/SubmitJob");
    let codec = tonic::codec::ProstCodec::<MalformedSubmit, MalformedSubmit>::default();
    grpc.unary(
        tonic::Request::new(MalformedSubmit { spec: 7 }),
        path,
        codec,
    )
    .await
    .expect_err("refused")
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_oversized_requests_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = start(tmp.path());
    cluster.wait_for_leader(DEADLINE).await.expect("leader");
    let status = submit_malformed(&cluster.addr(1).expect("address")).await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status}");
    assert!(status.message().contains("failed to decode"), "{status}");
    let mut client = cluster.client().await.expect("client");
    let request = SubmitJobRequest {
        request_id: "too-big".into(),
        spec: Some(JobSpec {
            user: "tester".into(),
            command: "x".repeat(REQUEST_BYTES_MAX + 1),
            cpus: 1,
            ..Default::default()
        }),
    };
    let status = client.submit_job(request).await.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status}");
    assert!(
        status.message().contains("message length too large"),
        "{status}"
    );
    let jobs = client
        .list_jobs(ListJobsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .jobs;
    assert!(jobs.is_empty(), "{jobs:?}");
}
