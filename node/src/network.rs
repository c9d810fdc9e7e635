//! openraft's `RaftNetwork` over gRPC: each Raft message travels encoded in
//! a `berth.raft.v1.RaftMessage` (see `raft.proto`): JSON until the peer's
//! replies say it reads MessagePack ([`crate::wire`]). In plain text a
//! connection's AppendEntries after its first share one stream
//! ([`AppendStream`]).

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
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;

use crate::peer_call::{CallStream, PeerCall, PeerMethod};
use crate::whole_request::WholeRequest;
use crate::wire::{self, PeerEncoding};

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
            encoding: PeerEncoding::default(),
            append_calls: 0,
            append_stream: AppendStream::Closed,
        }
    }
}

/// How calls reach a peer's `RaftTransport`: HTTP/2 driven here in plain
/// text (each call one write, [`crate::peer_call`]), or tonic's channel
/// with TLS. Every call carries the credentials it was made with. Cheap
/// to clone; clones share the connection.
#[derive(Clone)]
pub enum PeerClient {
    H2(Arc<PeerCall>),
    Tonic(Arc<TonicPeer>),
}

/// A peer reached through tonic's channel.
pub struct TonicPeer {
    client: RaftTransportClient<WholeRequest<Channel>>,
    credentials: AttachCredentials,
}

impl PeerClient {
    /// A client for the peer at `addr` ("host:port"), connecting on its
    /// first call.
    pub fn new(
        addr: &str,
        credentials: &AttachCredentials,
    ) -> Result<PeerClient, tonic::transport::Error> {
        if berth_auth::tls::client_tls_on() {
            let client = RaftTransportClient::new(WholeRequest::new(channel(addr)?))
                .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
            return Ok(PeerClient::Tonic(Arc::new(TonicPeer {
                client,
                credentials: credentials.clone(),
            })));
        }
        let mut metadata = MetadataMap::new();
        credentials.apply(&mut metadata);
        Ok(PeerClient::H2(Arc::new(PeerCall::new(
            addr,
            metadata,
            Duration::from_millis(CONNECT_TIMEOUT_MS),
            berth_proto::MAX_MESSAGE_BYTES,
        ))))
    }

    /// One call of `method`, answered within `timeout`.
    pub async fn call(
        &self,
        method: PeerMethod,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, tonic::Status> {
        match self {
            PeerClient::H2(peer) => peer.call(method, &message, timeout).await,
            PeerClient::Tonic(peer) => {
                let mut client = peer.client.clone();
                let mut request = tonic::Request::new(message);
                request.set_timeout(timeout);
                peer.credentials.apply(request.metadata_mut());
                match method {
                    PeerMethod::AppendEntries => client.append_entries(request).await,
                    PeerMethod::Vote => client.vote(request).await,
                    PeerMethod::InstallSnapshot => client.install_snapshot(request).await,
                    PeerMethod::Forward => client.forward(request).await,
                    PeerMethod::ForwardBatch => client.forward_batch(request).await,
                }
                .map(tonic::Response::into_inner)
            }
        }
    }
}

/// One peer.
pub struct PeerConnection {
    target: NodeId,
    addr: String,
    /// `None` when the peer's address cannot make a channel.
    client: Option<PeerClient>,
    /// What the peer reads: JSON until its replies say MessagePack.
    encoding: PeerEncoding,
    /// AppendEntries calls made through this connection so far.
    append_calls: u64,
    /// Where AppendEntries after the first go (plain text only).
    append_stream: AppendStream,
}

/// A connection's `AppendEntriesStream`. openraft replicates to a follower
/// through one `PeerConnection`, one request at a time, for as long as the
/// leadership lasts; a connection made for a single call (the heartbeats
/// that confirm a read index) makes one call, and a stream would cost it a
/// round trip more than it saves. So the stream is opened on the second
/// AppendEntries, and again after one failed.
enum AppendStream {
    Closed,
    Open(CallStream),
    /// The peer answered UNIMPLEMENTED (an older version): unary calls.
    Unsupported,
}

/// AppendEntries calls a connection makes unary before it opens a stream.
const APPEND_CALLS_BEFORE_STREAM: u64 = 1;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &mut self,
        method: PeerMethod,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let Some(client) = self.client.clone() else {
            let e = TransportError(format!("bad peer address {:?}", self.addr));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let encoding = self.encoding.current();
        let payload = wire::encode(encoding, request)
            .map_err(|e| RPCError::Network(NetworkError::new(&TransportError(e))))?;
        let message = RaftMessage {
            payload,
            encoding: encoding.into(),
        };
        wire::count_sent(method.name(), encoding);
        let reply = match (&client, method) {
            (PeerClient::H2(peer), PeerMethod::AppendEntries) => {
                self.append_entries_call(peer, message, option.hard_ttl())
                    .await
            }
            _ => client.call(method, message, option.hard_ttl()).await,
        };
        let reply: RaftReply = match reply {
            Ok(r) => r,
            Err(status) => {
                self.encoding.failed();
                let e = TransportError(format!(
                    "{} to node {}: {status}",
                    method.name(),
                    self.target
                ));
                return Err(match status.code() {
                    tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&e)),
                    _ => RPCError::Network(NetworkError::new(&e)),
                });
            }
        };
        self.encoding.replied(reply.reads_messagepack);
        let undecodable = |e: String| RPCError::Network(NetworkError::new(&TransportError(e)));
        let reply_encoding = wire::named(reply.encoding).map_err(undecodable)?;
        if !reply.error.is_empty() {
            let err: RaftError<NodeId, E> =
                wire::decode(reply_encoding, &reply.error).map_err(undecodable)?;
            return Err(RPCError::RemoteError(RemoteError::new(self.target, err)));
        }
        wire::decode(reply_encoding, &reply.payload).map_err(undecodable)
    }
}

impl PeerConnection {
    /// One AppendEntries, on this connection's stream when it has one or
    /// should open one, else as a unary call; all within `timeout`.
    async fn append_entries_call(
        &mut self,
        peer: &PeerCall,
        message: RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, tonic::Status> {
        self.append_calls += 1;
        if self.append_calls <= APPEND_CALLS_BEFORE_STREAM
            || matches!(self.append_stream, AppendStream::Unsupported)
        {
            return peer
                .call(PeerMethod::AppendEntries, &message, timeout)
                .await;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if matches!(self.append_stream, AppendStream::Closed) {
            match peer.open_append_stream(timeout).await {
                Ok(stream) => self.append_stream = AppendStream::Open(stream),
                Err(status) if status.code() == tonic::Code::Unimplemented => {
                    tracing::info!(
                        peer = %self.addr,
                        "peer has no AppendEntries stream (an older version); calling AppendEntries"
                    );
                    self.append_stream = AppendStream::Unsupported;
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    return peer.call(PeerMethod::AppendEntries, &message, left).await;
                }
                Err(status) => return Err(status),
            }
        }
        let AppendStream::Open(stream) = &mut self.append_stream else {
            return Err(tonic::Status::internal(
                "the AppendEntries stream is not open",
            ));
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let reply = peer.stream_call(stream, &message, left).await;
        if reply.is_err() {
            // Not used again: a late answer would be read as the next one's.
            self.append_stream = AppendStream::Closed;
        }
        reply
    }
}

#[cfg(test)]
impl PeerConnection {
    /// One AppendEntries carrying `message` as it is, through the path
    /// `append_entries` takes (plain text).
    pub(crate) async fn append_entries_message(
        &mut self,
        message: RaftMessage,
    ) -> Result<RaftReply, tonic::Status> {
        let Some(PeerClient::H2(peer)) = self.client.clone() else {
            return Err(tonic::Status::internal("not a plain-text peer"));
        };
        self.append_entries_call(&peer, message, Duration::from_secs(10))
            .await
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
            (Some(PeerClient::H2(a)), Some(PeerClient::H2(b))) => Arc::ptr_eq(a, b),
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
