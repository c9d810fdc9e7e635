//! The Raft transport's client against a real tonic `RaftTransport`
//! server, guarded by the cluster secret as a node's is.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_auth::grpc::{AttachCredentials, RequireClusterSecret};
use berth_proto::raft::raft_transport_server::{RaftTransport, RaftTransportServer};
use berth_proto::raft::{RaftMessage, RaftReply};
use openraft::error::RPCError;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::VoteRequest;
use openraft::{BasicNode, Vote};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Request, Response, Status};

use super::*;
use crate::wire::PEER_FORMAT_VERSION;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const SECRET: &str = "a-cluster-secret-of-thirty-two-bytes-or-more";
const WRONG_SECRET: &str = "not-the-secret-though-thirty-two-bytes-long";

/// Answers each method with its name (in `error`) and the payload it got,
/// reversed, after checking the format as a node does. Some payloads ask
/// for something else: a status, a stall, a slow answer.
struct Echo {
    shutdown: watch::Receiver<bool>,
    counts: Arc<Counts>,
}

/// What an `Echo` server was asked.
#[derive(Default)]
struct Counts {
    unary_append_entries: AtomicUsize,
    streams_opened: AtomicUsize,
    stream_messages: AtomicUsize,
}

impl Counts {
    /// (unary AppendEntries, streams, messages on streams)
    fn get(&self) -> (usize, usize, usize) {
        (
            self.unary_append_entries.load(Ordering::SeqCst),
            self.streams_opened.load(Ordering::SeqCst),
            self.stream_messages.load(Ordering::SeqCst),
        )
    }
}

async fn echo(method: &str, message: &RaftMessage) -> Result<RaftReply, Status> {
    crate::raft_service::accept_format(message)?;
    match message.payload.as_slice() {
        b"failed-precondition" => return Err(Status::failed_precondition("not leader")),
        b"unavailable" => return Err(Status::unavailable("going away")),
        b"stall" => tokio::time::sleep(Duration::from_secs(3_600)).await,
        b"slow" => tokio::time::sleep(Duration::from_millis(400)).await,
        _ => {}
    }
    let mut payload = message.payload.clone();
    payload.reverse();
    Ok(RaftReply {
        payload,
        error: method.as_bytes().to_vec(),
        format_version: PEER_FORMAT_VERSION,
    })
}

async fn unary(method: &str, request: Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
    echo(method, request.get_ref()).await.map(Response::new)
}

#[tonic::async_trait]
impl RaftTransport for Echo {
    type AppendEntriesStreamStream = crate::raft_service::ReplyStream;

    async fn append_entries_stream(
        &self,
        request: Request<tonic::Streaming<RaftMessage>>,
    ) -> Result<Response<Self::AppendEntriesStreamStream>, Status> {
        self.counts.streams_opened.fetch_add(1, Ordering::SeqCst);
        let counts = self.counts.clone();
        Ok(Response::new(crate::raft_service::answer_in_order(
            request.into_inner(),
            self.shutdown.clone(),
            move |message| {
                counts.stream_messages.fetch_add(1, Ordering::SeqCst);
                async move { echo("AppendEntriesStream", &message).await }
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
        unary("AppendEntries", request).await
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
        unary("Vote", request).await
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        unary("InstallSnapshot", request).await
    }

    async fn forward(&self, request: Request<RaftMessage>) -> Result<Response<RaftReply>, Status> {
        unary("Forward", request).await
    }

    async fn forward_batch(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        unary("ForwardBatch", request).await
    }
}

/// A running `Echo` server: it stops when `stop` is dropped or set, and
/// `task` ends once it has.
struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// An `Echo` server on `listener` that asks for `secret` when there is one.
fn serve(listener: TcpListener, secret: Option<&str>) -> Server {
    let addr = listener.local_addr().expect("address");
    let (stop, mut stopped) = watch::channel(false);
    let counts = Arc::new(Counts::default());
    let echo = Echo {
        shutdown: stopped.clone(),
        counts: counts.clone(),
    };
    let service = InterceptedService::new(
        RaftTransportServer::new(echo)
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES),
        RequireClusterSecret::new(secret.map(|s| s.as_bytes().to_vec())),
    );
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let task = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }),
    );
    Server {
        addr,
        stop,
        counts,
        task,
    }
}

async fn server(secret: Option<&str>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    serve(listener, secret)
}

/// Binds `addr` again, waiting for the port to be free.
async fn bind_again(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => assert!(Instant::now() < deadline, "cannot bind again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn client(addr: SocketAddr, secret: Option<&str>) -> PeerClient {
    let credentials = AttachCredentials::cluster_secret(secret.map(str::as_bytes));
    PeerClient::new(&addr.to_string(), &credentials).expect("a client")
}

fn message(payload: &[u8]) -> RaftMessage {
    RaftMessage {
        payload: payload.to_vec(),
        format_version: PEER_FORMAT_VERSION,
    }
}

async fn vote(client: &PeerClient, payload: &[u8]) -> Result<RaftReply, Status> {
    client
        .call(PeerMethod::Vote, message(payload), CALL_TIMEOUT)
        .await
}

/// A node's connection to the peer at `addr`, as openraft gets it.
async fn connection(addr: SocketAddr, secret: Option<&str>) -> PeerConnection {
    let credentials = AttachCredentials::cluster_secret(secret.map(str::as_bytes));
    Network::new(credentials)
        .new_client(2, &BasicNode::new(addr.to_string()))
        .await
}

async fn append(connection: &mut PeerConnection, payload: &[u8]) -> Result<RaftReply, Status> {
    connection
        .append_entries_message(message(payload), CALL_TIMEOUT)
        .await
}

#[tokio::test]
async fn each_method_is_answered_with_and_without_a_cluster_secret() {
    for secret in [Some(SECRET), None] {
        let server = server(secret).await;
        let client = client(server.addr, secret);
        for (method, name) in [
            (PeerMethod::AppendEntries, "AppendEntries"),
            (PeerMethod::Vote, "Vote"),
            (PeerMethod::InstallSnapshot, "InstallSnapshot"),
            (PeerMethod::Forward, "Forward"),
            (PeerMethod::ForwardBatch, "ForwardBatch"),
        ] {
            // Twice each: the second call goes over the same connection.
            for _ in 0..2 {
                let reply = client
                    .call(method, message(b"abc"), CALL_TIMEOUT)
                    .await
                    .unwrap_or_else(|s| panic!("{name} with {secret:?}: {s}"));
                assert_eq!(reply.payload, b"cba");
                assert_eq!(reply.error, name.as_bytes());
                assert_eq!(reply.format_version, PEER_FORMAT_VERSION);
            }
        }
    }
}

#[tokio::test]
async fn a_call_without_the_cluster_secret_is_refused() {
    let server = server(Some(SECRET)).await;
    for secret in [None, Some(WRONG_SECRET)] {
        let status = vote(&client(server.addr, secret), b"x")
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::Unauthenticated, "{status}");
    }
}

#[tokio::test]
async fn a_stream_with_a_wrong_credential_is_refused() {
    let server = server(Some(SECRET)).await;
    for secret in [None, Some(WRONG_SECRET)] {
        let mut connection = connection(server.addr, secret).await;
        for _ in 0..2 {
            let status = append(&mut connection, b"a").await.expect_err("refused");
            assert_eq!(status.code(), Code::Unauthenticated, "{status}");
        }
    }
    assert_eq!(server.counts.get(), (0, 0, 0), "no handler ran");
}

#[tokio::test]
async fn messages_larger_than_the_flow_control_windows_cross_both_ways() {
    let server = server(Some(SECRET)).await;
    let client = client(server.addr, Some(SECRET));
    // Far past HTTP/2's initial 65,535-byte windows, in both directions.
    let payload: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let reply = client
        .call(PeerMethod::InstallSnapshot, message(&payload), CALL_TIMEOUT)
        .await
        .expect("a reply");
    assert!(reply.payload.iter().rev().eq(payload.iter()));
}

#[tokio::test]
async fn the_servers_status_is_the_calls_error() {
    let server = server(Some(SECRET)).await;
    let client = client(server.addr, Some(SECRET));
    let status = vote(&client, b"failed-precondition")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "not leader");
    assert!(!crate::wire::is_format_refusal(&status));
}

#[tokio::test]
async fn a_request_in_another_format_is_refused_naming_both() {
    let server = server(Some(SECRET)).await;
    let client = client(server.addr, Some(SECRET));
    let mut other = message(b"abc");
    other.format_version = 2;
    let status = client
        .call(PeerMethod::Forward, other, CALL_TIMEOUT)
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    assert_eq!(
        status.message(),
        "peer message format 2, this node reads format 1"
    );
    // Told apart from "not leader" on the calling side too.
    assert!(crate::wire::is_format_refusal(&status));
}

#[test]
fn a_reply_in_another_format_is_refused_naming_both() {
    let reply = RaftReply {
        payload: crate::wire::encode(&7u64).expect("encode"),
        error: Vec::new(),
        format_version: 2,
    };
    let refused = read_reply::<u64, openraft::error::Infallible>(2, &reply).expect_err("refused");
    match refused {
        RPCError::Network(e) => assert!(
            e.to_string()
                .ends_with("peer message format 2, this node reads format 1"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    let reply = RaftReply {
        format_version: PEER_FORMAT_VERSION,
        ..reply
    };
    let read = read_reply::<u64, openraft::error::Infallible>(2, &reply).expect("read");
    assert_eq!(read, 7);
}

fn vote_option() -> RPCOption {
    RPCOption::new(Duration::from_millis(500))
}

#[tokio::test]
async fn a_peer_that_is_down_is_unreachable_and_is_reached_once_it_is_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    let mut connection = connection(addr, Some(SECRET)).await;
    let request = VoteRequest::new(Vote::new(1, 1), None);
    let outcome = connection.vote(request.clone(), vote_option()).await;
    assert!(
        matches!(outcome, Err(RPCError::Unreachable(_))),
        "{outcome:?}"
    );
    let status = vote(&client(addr, Some(SECRET)), b"x")
        .await
        .expect_err("nobody listens");
    assert_eq!(status.code(), Code::Unavailable, "{status}");

    let _server = serve(bind_again(addr).await, Some(SECRET));
    let client = client(addr, Some(SECRET));
    assert_eq!(vote(&client, b"up").await.expect("a reply").payload, b"pu");
}

#[tokio::test]
async fn a_call_with_no_answer_ends_at_its_timeout_and_the_next_call_works() {
    let server = server(Some(SECRET)).await;
    let client = client(server.addr, Some(SECRET));
    let status = client
        .call(
            PeerMethod::Vote,
            message(b"stall"),
            Duration::from_millis(200),
        )
        .await
        .expect_err("no answer");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert_eq!(vote(&client, b"ok").await.expect("a reply").payload, b"ko");
}

#[tokio::test]
async fn a_connections_first_append_entries_is_unary_and_the_rest_share_one_stream() {
    let server = server(Some(SECRET)).await;
    let mut connection = connection(server.addr, Some(SECRET)).await;
    // Past the initial flow-control windows too.
    let large: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
    let payloads = [b"a1".to_vec(), b"a2".to_vec(), large, b"a4".to_vec()];
    for (n, payload) in payloads.iter().enumerate() {
        let reply = append(&mut connection, payload).await.expect("a reply");
        assert!(reply.payload.iter().rev().eq(payload.iter()), "call {n}");
        let expected: &[u8] = if n == 0 {
            b"AppendEntries"
        } else {
            b"AppendEntriesStream"
        };
        assert_eq!(reply.error, expected, "call {n}");
    }
    assert_eq!(server.counts.get(), (1, 1, 3), "(unary, streams, messages)");

    // A failed request ends the stream; the next call opens another.
    let status = append(&mut connection, b"failed-precondition")
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status}");
    let reply = append(&mut connection, b"b1").await.expect("a reply");
    assert_eq!(reply.payload, b"1b");
    assert_eq!(server.counts.get(), (1, 2, 5));
}

#[tokio::test]
async fn a_late_stream_reply_is_never_read_as_the_next_ones() {
    let server = server(Some(SECRET)).await;
    let mut connection = connection(server.addr, Some(SECRET)).await;
    append(&mut connection, b"unary").await.expect("a reply");
    append(&mut connection, b"opens").await.expect("a reply");
    // Answered after 400 ms, past this call's timeout.
    let status = connection
        .append_entries_message(message(b"slow"), Duration::from_millis(100))
        .await
        .expect_err("no answer in time");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    // Each request gets its own reply, on a new stream, whether the late
    // one came meanwhile or not.
    for payload in [b"n1", b"n2"] {
        let reply = append(&mut connection, payload).await.expect("a reply");
        assert_eq!(reply.payload, [payload[1], payload[0]]);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = append(&mut connection, b"n3").await.expect("a reply");
    assert_eq!(reply.payload, b"3n");
    assert_eq!(server.counts.get().1, 2, "one stream dropped, one opened");
}

#[tokio::test]
async fn a_stream_is_opened_again_after_the_peer_restarts() {
    let first = server(Some(SECRET)).await;
    let addr = first.addr;
    let mut connection = connection(addr, Some(SECRET)).await;
    append(&mut connection, b"unary").await.expect("a reply");
    append(&mut connection, b"stream").await.expect("a reply");

    // The peer stops: its open stream ends, and the server with it.
    first.stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), first.task)
        .await
        .expect("the server kept the stream open and did not stop")
        .expect("the server task")
        .expect("the server");
    let status = append(&mut connection, b"down").await.expect_err("no peer");
    assert_eq!(status.code(), Code::Unavailable, "{status}");

    // Back on the same address: a new connection and a new stream.
    let second = serve(bind_again(addr).await, Some(SECRET));
    let deadline = Instant::now() + Duration::from_secs(10);
    let reply = loop {
        match append(&mut connection, b"back").await {
            Ok(reply) => break reply,
            Err(status) => assert!(Instant::now() < deadline, "never reached: {status}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reply.payload, b"kcab");
    assert_eq!(reply.error, b"AppendEntriesStream");
    assert_eq!(second.counts.get(), (0, 1, 1));
}
