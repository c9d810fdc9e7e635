//! openraft's `RaftNetwork` over gRPC: each Raft message travels encoded in
//! a `berth.raft.v1.RaftMessage` (see `raft.proto`): JSON until the peer's
//! replies say it reads MessagePack ([`crate::wire`]).

use std::sync::Arc;
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

use crate::peer_call::{PeerCall, PeerMethod};
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

/// Creates connections to peers; every call carries `credentials` (the
/// cluster secret when auth is on).
#[derive(Clone, Default)]
pub struct Network {
    pub credentials: AttachCredentials,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerConnection {
            target,
            client: PeerClient::new(&node.addr, &self.credentials).ok(),
            addr: node.addr.clone(),
            encoding: PeerEncoding::default(),
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
}

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
        let Some(client) = self.client.as_ref() else {
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
        let reply = client.call(method, message, option.hard_ttl()).await;
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
