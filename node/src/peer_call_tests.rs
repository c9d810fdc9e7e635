//! `PeerCall` against a real tonic `RaftTransport` server, as a node's
//! peers run it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_auth::grpc::{AttachCredentials, RequireClusterSecret};
use berth_proto::raft::raft_transport_server::{RaftTransport, RaftTransportServer};
use berth_proto::raft::{RaftMessage, RaftReply};
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Request, Response, Status};

use super::*;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SECRET: &str = "a-cluster-secret-of-thirty-two-bytes-or-more";

/// Answers each method with its name and the payload it got, reversed;
/// a payload that names a status is answered with that status, "stall"
/// is never answered. Answers AppendEntriesStream when `streams` is set,
/// as a node does, else UNIMPLEMENTED, as an older node does.
struct Echo {
    streams: bool,
    shutdown: watch::Receiver<bool>,
    counts: Arc<Counts>,
}

/// What an `Echo` server was asked.
#[derive(Default)]
struct Counts {
    unary_append_entries: AtomicUsize,
    streams_asked: AtomicUsize,
    stream_messages: AtomicUsize,
}

impl Counts {
    fn get(&self) -> (usize, usize, usize) {
        (
            self.unary_append_entries.load(Ordering::SeqCst),
            self.streams_asked.load(Ordering::SeqCst),
            self.stream_messages.load(Ordering::SeqCst),
        )
    }
}

fn echo(method: &str, request: &Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
    echo_message(method, request.get_ref()).map(Response::new)
}

fn echo_message(method: &str, message: &RaftMessage) -> Result<RaftReply, Status> {
    match message.payload.as_slice() {
        b"failed-precondition" => return Err(Status::failed_precondition("not leader")),
        b"unavailable" => return Err(Status::unavailable("going away")),
        _ => {}
    }
    let mut payload = message.payload.clone();
    payload.reverse();
    Ok(RaftReply {
        payload,
        error: method.as_bytes().to_vec(),
        encoding: message.encoding,
        reads_messagepack: true,
    })
}

async fn stall_if_asked(message: &RaftMessage) {
    if message.payload == b"stall" {
        tokio::time::sleep(Duration::from_secs(3_600)).await;
    }
}

#[tonic::async_trait]
impl RaftTransport for Echo {
    type AppendEntriesStreamStream = crate::raft_service::ReplyStream;

    async fn append_entries_stream(
        &self,
        request: Request<tonic::Streaming<RaftMessage>>,
    ) -> Result<Response<Self::AppendEntriesStreamStream>, Status> {
        self.counts.streams_asked.fetch_add(1, Ordering::SeqCst);
        if !self.streams {
            return Err(Status::unimplemented("an older node"));
        }
        let counts = self.counts.clone();
        Ok(Response::new(crate::raft_service::answer_in_order(
            request.into_inner(),
            self.shutdown.clone(),
            move |message| {
                counts.stream_messages.fetch_add(1, Ordering::SeqCst);
                async move {
                    stall_if_asked(&message).await;
                    echo_message("AppendEntriesStream", &message)
                }
            },
        )))
    }

    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        self.counts
            .unary_append_entries
            .fetch_add(1, Ordering::SeqCst);
        stall_if_asked(request.get_ref()).await;
        echo("AppendEntries", &request)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
        echo("Vote", &request)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        echo("InstallSnapshot", &request)
    }

    async fn forward(&self, request: Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
        echo("Forward", &request)
    }

    async fn forward_batch(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        echo("ForwardBatch", &request)
    }
}

/// A tonic server on `listener` that asks for the cluster secret, as a
/// node's does; it stops when the returned sender is dropped.
fn serve(listener: TcpListener) -> watch::Sender<bool> {
    serve_counted(listener, true).0
}

/// As [`serve`], with or without AppendEntriesStream; what it was asked,
/// and the server's task, which ends once it has stopped.
fn serve_counted(
    listener: TcpListener,
    streams: bool,
) -> (
    watch::Sender<bool>,
    Arc<Counts>,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
) {
    let (stop, mut stopped) = watch::channel(false);
    let counts = Arc::new(Counts::default());
    let echo = Echo {
        streams,
        shutdown: stopped.clone(),
        counts: counts.clone(),
    };
    let service = InterceptedService::new(
        RaftTransportServer::new(echo)
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES),
        RequireClusterSecret::new(Some(SECRET.as_bytes().to_vec())),
    );
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }),
    );
    (stop, counts, task)
}

async fn server() -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    (addr, serve(listener))
}

fn peer(addr: SocketAddr, secret: Option<&str>, reply_bytes_max: usize) -> PeerCall {
    let mut metadata = MetadataMap::new();
    AttachCredentials::cluster_secret(secret.map(str::as_bytes)).apply(&mut metadata);
    PeerCall::new(
        &addr.to_string(),
        metadata,
        CONNECT_TIMEOUT,
        reply_bytes_max,
    )
}

/// A Vote call carrying `payload`, with the usual timeout.
async fn vote(peer: &PeerCall, payload: &[u8]) -> Result<RaftReply, Status> {
    peer.call(PeerMethod::Vote, &message(payload), CALL_TIMEOUT)
        .await
}

fn message(payload: &[u8]) -> RaftMessage {
    RaftMessage {
        payload: payload.to_vec(),
        encoding: 1,
    }
}

#[tokio::test]
async fn each_method_reaches_its_handler_and_the_reply_comes_back() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    for (method, name) in [
        (PeerMethod::AppendEntries, "AppendEntries"),
        (PeerMethod::Vote, "Vote"),
        (PeerMethod::InstallSnapshot, "InstallSnapshot"),
    ] {
        // Twice each: the second call goes over the same connection.
        for _ in 0..2 {
            let reply = peer
                .call(method, &message(b"abc"), CALL_TIMEOUT)
                .await
                .expect("a reply");
            assert_eq!(reply.payload, b"cba");
            assert_eq!(reply.error, name.as_bytes());
            assert_eq!(reply.encoding, 1);
            assert!(reply.reads_messagepack);
        }
    }
}

#[tokio::test]
async fn a_call_without_the_cluster_secret_is_refused() {
    let (addr, _stop) = server().await;
    for secret in [None, Some("not-the-secret-though-thirty-two-bytes-long")] {
        let status = peer(addr, secret, berth_proto::MAX_MESSAGE_BYTES)
            .call(PeerMethod::Vote, &message(b"x"), CALL_TIMEOUT)
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::Unauthenticated, "{status}");
    }
}

#[tokio::test]
async fn messages_larger_than_the_flow_control_windows_cross_both_ways() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    // Far past HTTP/2's initial 65,535-byte windows, in both directions.
    let payload: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    for _ in 0..2 {
        let reply = peer
            .call(
                PeerMethod::InstallSnapshot,
                &message(&payload),
                CALL_TIMEOUT,
            )
            .await
            .expect("a reply");
        assert_eq!(reply.payload.len(), payload.len());
        assert!(reply.payload.iter().rev().eq(payload.iter()));
    }
}

#[tokio::test]
async fn a_reply_over_the_bound_is_refused_and_the_connection_kept() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), 1_000);
    let status = vote(&peer, &[7; 2_000]).await.expect_err("too large");
    assert_eq!(status.code(), Code::OutOfRange, "{status}");
    let reply = vote(&peer, b"small").await.expect("a reply");
    assert_eq!(reply.payload, b"llams");
}

#[tokio::test]
async fn the_servers_status_is_the_calls_error() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let status = vote(&peer, b"failed-precondition")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "not leader");
    let status = vote(&peer, b"unavailable").await.expect_err("refused");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "going away");
}

#[tokio::test]
async fn a_peer_that_is_down_is_unavailable_and_is_reached_once_it_is_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let status = vote(&peer, b"x").await.expect_err("nobody listens");
    assert_eq!(status.code(), Code::Unavailable, "{status}");

    let stop = serve(TcpListener::bind(addr).await.expect("bind again"));
    let reply = vote(&peer, b"up").await.expect("a reply");
    assert_eq!(reply.payload, b"pu");

    // The server goes away with the connection open: the next call fails
    // UNAVAILABLE (or finds no listener), and one after a restart works.
    stop.send_replace(true);
    drop(stop);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let outcome = vote(&peer, b"x").await;
        match outcome {
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status}");
                break;
            }
            // The server drains open connections before it stops.
            Ok(_) => assert!(Instant::now() < deadline, "the server never stopped"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _stop = serve(TcpListener::bind(addr).await.expect("bind a third time"));
    let reply = vote(&peer, b"again").await.expect("a reply");
    assert_eq!(reply.payload, b"niaga");
}

#[tokio::test]
async fn a_call_with_no_answer_ends_at_its_timeout_and_the_next_call_works() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let status = peer
        .call(
            PeerMethod::AppendEntries,
            &message(b"stall"),
            Duration::from_millis(200),
        )
        .await
        .expect_err("no answer");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    let reply = peer
        .call(PeerMethod::AppendEntries, &message(b"ok"), CALL_TIMEOUT)
        .await
        .expect("a reply");
    assert_eq!(reply.payload, b"ko");
}

#[test]
fn a_short_or_compressed_reply_frame_is_an_error() {
    let reply = RaftReply {
        payload: b"p".to_vec(),
        error: Vec::new(),
        encoding: 1,
        reads_messagepack: true,
    };
    let mut frame = vec![0, 0, 0, 0, 0];
    frame[1..5].copy_from_slice(&u32::try_from(reply.encoded_len()).unwrap().to_be_bytes());
    reply.encode_raw(&mut frame);
    assert_eq!(decode_reply(&frame).expect("whole"), reply);
    assert_eq!(
        decode_reply(&frame[..3]).unwrap_err().code(),
        Code::Internal
    );
    assert_eq!(
        decode_reply(&frame[..frame.len() - 1]).unwrap_err().code(),
        Code::Internal
    );
    let mut compressed = frame.clone();
    compressed[0] = 1;
    assert_eq!(
        decode_reply(&compressed).unwrap_err().code(),
        Code::Internal
    );
}

#[test]
fn http_statuses_map_as_grpc_says() {
    for (http, code) in [
        (400, Code::Internal),
        (401, Code::Unauthenticated),
        (403, Code::PermissionDenied),
        (404, Code::Unimplemented),
        (503, Code::Unavailable),
        (500, Code::Unknown),
    ] {
        let status = http::StatusCode::from_u16(http).expect("a status");
        assert_eq!(status_of_http(status).code(), code, "{http}");
    }
}

#[tokio::test]
async fn calls_made_at_once_share_the_connection_each_with_its_own_answer() {
    let (addr, _stop) = server().await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let payloads: Vec<Vec<u8>> = (0..32u8).map(|n| vec![n; usize::from(n) + 1]).collect();
    let messages: Vec<RaftMessage> = payloads.iter().map(|p| message(p)).collect();
    let replies = futures::future::join_all(
        messages
            .iter()
            .map(|m| peer.call(PeerMethod::ForwardBatch, m, CALL_TIMEOUT)),
    )
    .await;
    for (payload, reply) in payloads.iter().zip(replies) {
        let reply = reply.expect("a reply");
        assert_eq!(&reply.payload, payload, "each call its own answer");
        assert_eq!(reply.error, b"ForwardBatch");
    }
    let reply = peer
        .call(PeerMethod::Forward, &message(b"one"), CALL_TIMEOUT)
        .await
        .expect("a reply");
    assert_eq!(reply.error, b"Forward");
}

#[tokio::test]
async fn a_connection_the_peer_closed_is_replaced_without_failing_the_call() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let stop = serve(listener);
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    assert_eq!(vote(&peer, b"ab").await.expect("a reply").payload, b"ba");

    // The peer restarts: its old connection closes, a new server listens.
    stop.send_replace(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !peer.open_connection_is_closed().await {
        assert!(Instant::now() < deadline, "the connection never closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(e) => assert!(Instant::now() < deadline, "cannot bind again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let _stop = serve(listener);
    // The first call after it goes out on a new connection and succeeds.
    assert_eq!(vote(&peer, b"cd").await.expect("a reply").payload, b"dc");
}

async fn counted_server(streams: bool) -> (SocketAddr, watch::Sender<bool>, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, counts, _task) = serve_counted(listener, streams);
    (addr, stop, counts)
}

async fn open_stream(peer: &PeerCall) -> CallStream {
    peer.open_append_stream(CALL_TIMEOUT)
        .await
        .unwrap_or_else(|status| panic!("no stream: {status}"))
}

async fn stream_call(
    peer: &PeerCall,
    stream: &mut CallStream,
    payload: &[u8],
) -> Result<RaftReply, Status> {
    peer.stream_call(stream, &message(payload), CALL_TIMEOUT)
        .await
}

#[tokio::test]
async fn an_append_entries_stream_answers_each_message_in_order_on_one_stream() {
    let (addr, _stop, counts) = counted_server(true).await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let mut stream = open_stream(&peer).await;
    // Past the initial flow-control windows too, so capacity is released.
    let large: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
    for payload in [b"one".to_vec(), large, b"three".to_vec()] {
        let reply = stream_call(&peer, &mut stream, &payload)
            .await
            .expect("a reply");
        assert!(reply.payload.iter().rev().eq(payload.iter()));
        assert_eq!(reply.error, b"AppendEntriesStream");
    }
    assert_eq!(counts.get(), (0, 1, 3), "(unary, streams, messages)");
}

#[tokio::test]
async fn a_stream_without_the_cluster_secret_is_refused() {
    let (addr, _stop, counts) = counted_server(true).await;
    let peer = peer(addr, None, berth_proto::MAX_MESSAGE_BYTES);
    let status = peer
        .open_append_stream(CALL_TIMEOUT)
        .await
        .err()
        .expect("refused");
    assert_eq!(status.code(), Code::Unauthenticated, "{status}");
    assert_eq!(counts.get(), (0, 0, 0));
}

#[tokio::test]
async fn a_peer_without_the_stream_answers_unimplemented() {
    let (addr, _stop, _counts) = counted_server(false).await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let status = peer
        .open_append_stream(CALL_TIMEOUT)
        .await
        .err()
        .expect("refused");
    assert_eq!(status.code(), Code::Unimplemented, "{status}");
}

#[tokio::test]
async fn a_failed_request_ends_its_stream_with_its_status_and_a_new_stream_works() {
    let (addr, _stop, counts) = counted_server(true).await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let mut stream = open_stream(&peer).await;
    let status = stream_call(&peer, &mut stream, b"failed-precondition")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    assert_eq!(status.message(), "not leader");
    stream_call(&peer, &mut stream, b"after")
        .await
        .expect_err("the stream has ended");
    let mut stream = open_stream(&peer).await;
    let reply = stream_call(&peer, &mut stream, b"ab")
        .await
        .expect("a reply");
    assert_eq!(reply.payload, b"ba");
    assert_eq!(counts.get().1, 2);
}

#[tokio::test]
async fn a_stream_request_with_no_answer_ends_at_its_timeout() {
    let (addr, _stop, _counts) = counted_server(true).await;
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let mut stream = open_stream(&peer).await;
    let status = peer
        .stream_call(&mut stream, &message(b"stall"), Duration::from_millis(200))
        .await
        .expect_err("no answer");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    let mut stream = open_stream(&peer).await;
    let reply = stream_call(&peer, &mut stream, b"ok")
        .await
        .expect("a reply");
    assert_eq!(reply.payload, b"ko");
}

#[tokio::test]
async fn a_server_that_shuts_down_ends_its_open_streams_and_stops() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, _counts, server) = serve_counted(listener, true);
    let peer = peer(addr, Some(SECRET), berth_proto::MAX_MESSAGE_BYTES);
    let mut stream = open_stream(&peer).await;
    stream_call(&peer, &mut stream, b"up")
        .await
        .expect("a reply");
    // A graceful stop waits for open streams: this one ends, so the
    // server stops instead of waiting for the client to close it.
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server kept the stream open and did not stop")
        .expect("the server task")
        .expect("the server");
    let status = stream_call(&peer, &mut stream, b"late")
        .await
        .expect_err("the stream has ended");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
}

/// A node's connection to a peer, as openraft gets it.
async fn peer_connection(addr: SocketAddr) -> crate::network::PeerConnection {
    use openraft::network::RaftNetworkFactory;
    let mut network =
        crate::network::Network::new(AttachCredentials::cluster_secret(Some(SECRET.as_bytes())));
    network
        .new_client(2, &openraft::BasicNode::new(addr.to_string()))
        .await
}

#[tokio::test]
async fn a_connections_first_append_entries_is_unary_and_the_rest_share_one_stream() {
    let (addr, _stop, counts) = counted_server(true).await;
    let mut connection = peer_connection(addr).await;
    for (n, payload) in [b"a1", b"a2", b"a3", b"a4"].into_iter().enumerate() {
        let reply = connection
            .append_entries_message(message(payload))
            .await
            .expect("a reply");
        assert_eq!(reply.payload, [payload[1], payload[0]]);
        let expected: &[u8] = if n == 0 {
            b"AppendEntries"
        } else {
            b"AppendEntriesStream"
        };
        assert_eq!(reply.error, expected, "call {n}");
    }
    assert_eq!(counts.get(), (1, 1, 3), "(unary, streams, messages)");

    // A failed call drops the stream; the next call opens another.
    connection
        .append_entries_message(message(b"failed-precondition"))
        .await
        .expect_err("refused");
    let reply = connection
        .append_entries_message(message(b"b1"))
        .await
        .expect("a reply");
    assert_eq!(reply.error, b"AppendEntriesStream");
    assert_eq!(counts.get(), (1, 2, 5));
}

#[tokio::test]
async fn an_older_peer_gets_unary_append_entries_after_one_refused_stream() {
    let (addr, _stop, counts) = counted_server(false).await;
    let mut connection = peer_connection(addr).await;
    for payload in [b"a1", b"a2", b"a3", b"a4"] {
        let reply = connection
            .append_entries_message(message(payload))
            .await
            .expect("a reply");
        assert_eq!(reply.error, b"AppendEntries");
    }
    assert_eq!(counts.get(), (4, 1, 0), "(unary, streams, messages)");
}
