//! openraft's `RaftNetwork` over gRPC: each Raft message travels encoded in
//! a `berth.raft.v1.RaftMessage` (see `raft.proto`): JSON until the peer's
//! replies say it reads MessagePack ([`crate::wire`]).

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
use tonic::transport::Channel;

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
            client: channel(&node.addr).ok().map(|c| {
                RaftTransportClient::new(WholeRequest::new(c))
                    .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            }),
            addr: node.addr.clone(),
            credentials: self.credentials.clone(),
            encoding: PeerEncoding::default(),
        }
    }
}

/// One peer.
pub struct PeerConnection {
    target: NodeId,
    addr: String,
    client: Option<RaftTransportClient<WholeRequest<Channel>>>,
    credentials: AttachCredentials,
    /// What the peer reads: JSON until its replies say MessagePack.
    encoding: PeerEncoding,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl PeerConnection {
    async fn call<Req, Resp, E>(
        &mut self,
        method: Method,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let Some(client) = self.client.as_mut() else {
            let e = TransportError(format!("bad peer address {:?}", self.addr));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let encoding = self.encoding.current();
        let payload = wire::encode(encoding, request)
            .map_err(|e| RPCError::Network(NetworkError::new(&TransportError(e))))?;
        let mut req = tonic::Request::new(RaftMessage {
            payload,
            encoding: encoding.into(),
        });
        wire::count_sent(method.name(), encoding);
        req.set_timeout(option.hard_ttl());
        self.credentials.apply(req.metadata_mut());
        let reply = match method {
            Method::AppendEntries => client.append_entries(req).await,
            Method::Vote => client.vote(req).await,
            Method::InstallSnapshot => client.install_snapshot(req).await,
        };
        let reply: RaftReply = match reply {
            Ok(r) => r.into_inner(),
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

#[derive(Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::AppendEntries => "AppendEntries",
            Method::Vote => "Vote",
            Method::InstallSnapshot => "InstallSnapshot",
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Method::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Method::Vote, &rpc, &option).await
    }
}
