//! openraft's `RaftNetwork` over gRPC through tonic, the same with TLS and
//! without: each Raft message travels encoded ([`crate::wire`]) in a
//! `berth.raft.v1.RaftMessage` (see `raft.proto`). A connection's
//! AppendEntries after its first share one stream ([`AppendStream`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_auth::grpc::AttachCredentials;
use berth_proto::raft::raft_transport_client::RaftTransportClient;
use berth_proto::raft::{RaftMessage, RaftReply};
use berth_raft_store::{NodeId, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use crate::wire::{self, WireError};

/// A peer that does not accept a TCP connection within this long is
/// reported unreachable, so openraft backs off instead of piling up calls.
const CONNECT_TIMEOUT_MS: u64 = 300;

/// Builds a lazily connecting gRPC channel to `addr` ("host:port").
pub fn channel(addr: &str) -> Result<Channel, tonic::transport::Error> {
    // https with the cluster's CA when the node runs with TLS.
    let endpoint = berth_auth::tls::endpoint(addr)?
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .tcp_nodelay(true);
    Ok(endpoint.connect_lazy())
}

/// Peers whose clients a node keeps at most; past it they are all made
/// anew (a cluster has 3 or 5 voters and a few learners).
const PEER_CLIENTS_MAX: usize = 64;

/// Creates connections to peers; every call carries `credentials` (the
/// cluster secret when auth is on).
#[derive(Clone, Default)]
pub struct Network {
    credentials: AttachCredentials,
    /// Each peer's client (its TCP connection), by node id with the
    /// address it was made for. openraft asks for a new connection for
    /// every replication stream and for every read-index confirmation
    /// (one per follower per linearizable read); sharing the client spares
    /// those a TCP and HTTP/2 handshake each: in a storm of `berth queue`
    /// a follower spent 0.2 ms of CPU per read, most of it on them.
    clients: Arc<Mutex<HashMap<NodeId, (String, PeerClient)>>>,
}

impl Network {
    pub fn new(credentials: AttachCredentials) -> Network {
        Network {
            credentials,
            clients: Arc::default(),
        }
    }

    /// The client for `target` at `addr`: the one made before, unless the
    /// peer has moved; `None` when `addr` cannot make one.
    fn client(&self, target: NodeId, addr: &str) -> Option<PeerClient> {
        // Whole entries or none: a panic elsewhere leaves the map usable.
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((made_for, client)) = clients.get(&target) {
            if made_for == addr {
                return Some(client.clone());
            }
        }
        let client = PeerClient::new(addr, &self.credentials).ok()?;
        if clients.len() >= PEER_CLIENTS_MAX {
            clients.clear();
        }
        clients.insert(target, (addr.to_string(), client.clone()));
        Some(client)
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerConnection {
            target,
            client: self.client(target, &node.addr),
            addr: node.addr.clone(),
            append_calls: 0,
            append_stream: None,
        }
    }
}

/// A peer's `RaftTransport` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerMethod {
    AppendEntries,
    Vote,
    InstallSnapshot,
    Forward,
    ForwardBatch,
}

impl PeerMethod {
    /// The method's name, as `raft.proto` spells it.
    pub fn name(self) -> &'static str {
        match self {
            PeerMethod::AppendEntries => "AppendEntries",
            PeerMethod::Vote => "Vote",
            PeerMethod::InstallSnapshot => "InstallSnapshot",
            PeerMethod::Forward => "Forward",
            PeerMethod::ForwardBatch => "ForwardBatch",
        }
    }

    /// The message that carries `payload` (already encoded) to a peer,
    /// counted as sent.
    pub fn message(self, payload: Vec<u8>) -> RaftMessage {
        wire::count_sent(self.name());
        RaftMessage {
            payload,
            format_version: wire::PEER_FORMAT_VERSION,
        }
    }
}

/// A peer's `RaftTransport` through tonic's channel (with TLS when the
/// node runs with it); every call carries the credentials the client was
/// made with. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct PeerClient(Arc<Peer>);

struct Peer {
    addr: String,
    client: RaftTransportClient<Channel>,
    credentials: AttachCredentials,
}

impl PeerClient {
    /// A client for the peer at `addr` ("host:port"), connecting on its
    /// first call.
    pub fn new(
        addr: &str,
        credentials: &AttachCredentials,
    ) -> Result<PeerClient, tonic::transport::Error> {
        let client = RaftTransportClient::new(channel(addr)?)
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
        Ok(PeerClient(Arc::new(Peer {
            addr: addr.to_string(),
            client,
            credentials: credentials.clone(),
        })))
    }

    fn request<T>(&self, body: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(body);
        self.0.credentials.apply(request.metadata_mut());
        request
    }

    /// One unary call of `method`, answered within `timeout`.
    pub async fn call(
        &self,
        method: PeerMethod,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Status> {
        let mut client = self.0.client.clone();
        let request = self.request(message);
        // Bounded here alone, not also by a `grpc-timeout` for tonic to
        // enforce: a call that runs out of time then always ends as
        // DEADLINE_EXCEEDED, and the peer drops its handler when the
        // abandoned call's stream is reset.
        let call = async move {
            match method {
                PeerMethod::AppendEntries => client.append_entries(request).await,
                PeerMethod::Vote => client.vote(request).await,
                PeerMethod::InstallSnapshot => client.install_snapshot(request).await,
                PeerMethod::Forward => client.forward(request).await,
                PeerMethod::ForwardBatch => client.forward_batch(request).await,
            }
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(response) => response.map(tonic::Response::into_inner),
            Err(_) => Err(self.no_answer(timeout)),
        }
    }

    fn no_answer(&self, timeout: Duration) -> Status {
        Status::deadline_exceeded(format!(
            "no answer from {} within {} ms",
            self.0.addr,
            timeout.as_millis()
        ))
    }

    /// Sends `message` on `stream`, or on a new stream when there is none,
    /// and reads its reply. The stream comes back only with a reply: after
    /// a failure it is dropped, which ends it.
    async fn stream_call(
        &self,
        stream: Option<AppendStream>,
        message: RaftMessage,
    ) -> Result<(RaftReply, AppendStream), Status> {
        let mut stream = match stream {
            Some(stream) => {
                stream
                    .requests
                    .send(message)
                    .await
                    .map_err(|_| self.stream_ended())?;
                stream
            }
            None => self.open_append_stream(message).await?,
        };
        match stream.next_reply().await? {
            Some(reply) => Ok((reply, stream)),
            // The server ended the stream without a status: it shut down.
            None => Err(self.stream_ended()),
        }
    }

    /// Opens an `AppendEntriesStream` whose first request is `first`.
    async fn open_append_stream(&self, first: RaftMessage) -> Result<AppendStream, Status> {
        let (requests, queued) = mpsc::channel(APPEND_STREAM_QUEUE);
        // Queued before the stream opens, so it leaves with the stream's
        // head instead of a round trip later.
        requests
            .try_send(first)
            .map_err(|_| Status::internal("a new AppendEntries stream's queue is full"))?;
        let mut client = self.0.client.clone();
        let replies = client
            .append_entries_stream(self.request(ReceiverStream::new(queued)))
            .await?
            .into_inner();
        Ok(AppendStream {
            requests,
            replies: Mutex::new(replies),
        })
    }

    fn stream_ended(&self) -> Status {
        Status::unavailable(format!("{} ended the AppendEntries stream", self.0.addr))
    }
}

/// One peer.
pub struct PeerConnection {
    target: NodeId,
    addr: String,
    /// `None` when the peer's address cannot make a channel.
    client: Option<PeerClient>,
    /// AppendEntries calls made through this connection so far.
    append_calls: u64,
    /// Where AppendEntries after the first go, once opened.
    append_stream: Option<AppendStream>,
}

/// A connection's `AppendEntriesStream`. openraft replicates to a follower
/// through one `PeerConnection`, one request at a time, for as long as the
/// leadership lasts; a connection made for a single call (the heartbeats
/// that confirm a read index) makes one call, and a stream would cost it
/// more than it saves. So the stream is opened on the second
/// AppendEntries, and again after one failed.
struct AppendStream {
    /// The stream's requests: one at a time, so one slot.
    requests: mpsc::Sender<RaftMessage>,
    /// Their replies, in order. In a mutex only so that the connection is
    /// `Sync`, as openraft asks; never locked, reached through `get_mut`.
    replies: Mutex<Streaming<RaftReply>>,
}

impl AppendStream {
    async fn next_reply(&mut self) -> Result<Option<RaftReply>, Status> {
        let replies = self.replies.get_mut().unwrap_or_else(|p| p.into_inner());
        replies.message().await
    }
}

/// Requests an [`AppendStream`] holds queued at most: the one in flight.
const APPEND_STREAM_QUEUE: usize = 1;

/// AppendEntries calls a connection makes unary before it opens a stream.
const APPEND_CALLS_BEFORE_STREAM: u64 = 1;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

type CallError<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &mut self,
        method: PeerMethod,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, CallError<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let Some(client) = self.client.clone() else {
            let e = TransportError(format!("bad peer address {:?}", self.addr));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let payload =
            wire::encode(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let message = method.message(payload);
        let timeout = option.hard_ttl();
        let reply = match method {
            PeerMethod::AppendEntries => self.append_entries_call(&client, message, timeout).await,
            _ => client.call(method, message, timeout).await,
        };
        match reply {
            Ok(reply) => read_reply(self.target, &reply),
            Err(status) => Err(self.failed(method, &status)),
        }
    }

    /// What a call that failed with `status` tells openraft.
    fn failed<E: std::error::Error>(&self, method: PeerMethod, status: &Status) -> CallError<E> {
        let e = TransportError(format!(
            "{} to node {}: {status}",
            method.name(),
            self.target
        ));
        match status.code() {
            tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&e)),
            _ => RPCError::Network(NetworkError::new(&e)),
        }
    }

    /// One AppendEntries: unary for the connection's first, else on its
    /// stream (opened if need be); all within `timeout`.
    async fn append_entries_call(
        &mut self,
        client: &PeerClient,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Status> {
        self.append_calls += 1;
        if self.append_calls <= APPEND_CALLS_BEFORE_STREAM {
            return client
                .call(PeerMethod::AppendEntries, message, timeout)
                .await;
        }
        // Taken out and put back only with a reply: a stream that failed
        // or ran out of time is dropped, so a late reply on it is never
        // read as the next request's.
        let stream = self.append_stream.take();
        match tokio::time::timeout(timeout, client.stream_call(stream, message)).await {
            Ok(Ok((reply, stream))) => {
                self.append_stream = Some(stream);
                Ok(reply)
            }
            Ok(Err(status)) => Err(status),
            Err(_) => Err(client.no_answer(timeout)),
        }
    }
}

/// A peer's reply: the response, or the Raft error it carries.
fn read_reply<Resp, E>(target: NodeId, reply: &RaftReply) -> Result<Resp, CallError<E>>
where
    Resp: DeserializeOwned,
    E: std::error::Error + DeserializeOwned,
{
    let unreadable = |e: WireError| RPCError::Network(NetworkError::new(&e));
    wire::check_format(reply.format_version).map_err(unreadable)?;
    if !reply.error.is_empty() {
        let err: RaftError<NodeId, E> = wire::decode(&reply.error).map_err(unreadable)?;
        return Err(RPCError::RemoteError(RemoteError::new(target, err)));
    }
    wire::decode(&reply.payload).map_err(unreadable)
}

#[cfg(test)]
impl PeerConnection {
    /// One AppendEntries carrying `message` as it is, through the path
    /// `append_entries` takes.
    pub(crate) async fn append_entries_message(
        &mut self,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Status> {
        let Some(client) = self.client.clone() else {
            return Err(Status::internal("no client"));
        };
        self.append_entries_call(&client, message, timeout).await
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(PeerMethod::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(PeerMethod::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(PeerMethod::Vote, &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use openraft::network::RaftNetworkFactory;

    use super::*;

    fn same(a: &PeerConnection, b: &PeerConnection) -> bool {
        match (&a.client, &b.client) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.0, &b.0),
            _ => false,
        }
    }

    #[tokio::test]
    async fn connections_to_a_peer_share_its_client_until_it_moves() {
        let mut network = Network::new(AttachCredentials::cluster_secret(None));
        let node = |addr: &str| BasicNode::new(addr);
        let first = network.new_client(2, &node("127.0.0.1:7102")).await;
        let again = network.new_client(2, &node("127.0.0.1:7102")).await;
        let other = network.new_client(3, &node("127.0.0.1:7103")).await;
        assert!(same(&first, &again), "one client for node 2");
        assert!(!same(&first, &other), "node 3 has its own");
        // Node 2 moved: a client for its new address, kept from then on.
        let moved = network.new_client(2, &node("127.0.0.1:7202")).await;
        let moved_again = network.new_client(2, &node("127.0.0.1:7202")).await;
        assert!(!same(&first, &moved));
        assert!(same(&moved, &moved_again));
        // A clone of the network (openraft keeps one) shares the clients.
        let mut clone = network.clone();
        let from_clone = clone.new_client(3, &node("127.0.0.1:7103")).await;
        assert!(same(&other, &from_clone));
    }

    #[tokio::test]
    async fn the_clients_kept_are_bounded() {
        let mut network = Network::new(AttachCredentials::cluster_secret(None));
        let first = network
            .new_client(0, &BasicNode::new("127.0.0.1:1000"))
            .await;
        for id in 1..=PEER_CLIENTS_MAX as u64 {
            let addr = format!("127.0.0.1:{}", 1000 + id);
            network.new_client(id, &BasicNode::new(addr)).await;
            let kept = network.clients.lock().map(|c| c.len()).unwrap_or(0);
            assert!(kept <= PEER_CLIENTS_MAX, "{kept} kept");
        }
        // Node 0's client went with the others when the bound was reached.
        let later = network
            .new_client(0, &BasicNode::new("127.0.0.1:1000"))
            .await;
        assert!(!same(&first, &later));
    }
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod network_tests;
