//! The server side of the Raft transport, and the forwarding endpoint that
//! followers use to hand writes to the leader.

use std::sync::Arc;

use berth_proto::raft::raft_transport_server::RaftTransport;
use berth_proto::raft::{PayloadEncoding, RaftMessage, RaftReply};
use berth_raft_store::Request;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Response, Status};

use crate::forward::{ForwardOutcome, FORWARD_BATCH_COMMANDS_MAX};
use crate::node::{Node, ProposeError};
use crate::wire;

pub struct RaftService {
    pub node: Arc<Node>,
}

/// Decodes a request; returns it with the encoding to answer in.
fn decode<T: DeserializeOwned>(msg: &RaftMessage) -> Result<(T, PayloadEncoding), Status> {
    let encoding = wire::named(msg.encoding).map_err(Status::invalid_argument)?;
    let value = wire::decode(encoding, &msg.payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))?;
    Ok((value, encoding))
}

/// Answers in the request's `encoding`, saying that this node reads
/// MessagePack (see [`crate::wire`]).
fn reply<T: Serialize, E: Serialize>(
    encoding: PayloadEncoding,
    result: Result<T, E>,
) -> Result<Response<RaftReply>, Status> {
    let (payload, error) = match result {
        Ok(v) => (
            wire::encode(encoding, &v).map_err(Status::internal)?,
            Vec::new(),
        ),
        Err(e) => (
            Vec::new(),
            wire::encode(encoding, &e).map_err(Status::internal)?,
        ),
    };
    Ok(Response::new(RaftReply {
        payload,
        error,
        encoding: encoding.into(),
        reads_messagepack: true,
    }))
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    async fn append_entries(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let (req, encoding) = decode(request.get_ref())?;
        reply(encoding, self.node.raft.append_entries(req).await)
    }

    async fn vote(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let (req, encoding) = decode(request.get_ref())?;
        reply(encoding, self.node.raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let (req, encoding) = decode(request.get_ref())?;
        reply(encoding, self.node.raft.install_snapshot(req).await)
    }

    async fn forward(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let (req, encoding): (Request, _) = decode(request.get_ref())?;
        // Only the leader proposes forwarded commands; a node that lost
        // leadership meanwhile says so and the caller retries.
        match self
            .node
            .propose_local(Arc::unwrap_or_clone(req.command))
            .await
        {
            Ok(response) => reply::<_, ()>(encoding, Ok(response)),
            Err(ProposeError::NotLeader { leader_addr }) => {
                Err(Status::failed_precondition(format!(
                    "not leader; leader is {}",
                    leader_addr.unwrap_or_else(|| "unknown".into())
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn forward_batch(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let (requests, encoding): (Vec<Request>, _) = decode(request.get_ref())?;
        if requests.len() > FORWARD_BATCH_COMMANDS_MAX {
            return Err(Status::invalid_argument(format!(
                "a forward batch carries at most {FORWARD_BATCH_COMMANDS_MAX} commands, not {}",
                requests.len()
            )));
        }
        // Proposed together, so they wait for the batcher side by side and
        // share its log entries; answered one by one, in order.
        let proposals = requests
            .into_iter()
            .map(|r| self.node.propose_local(Arc::unwrap_or_clone(r.command)));
        let outcomes: Vec<ForwardOutcome> = futures::future::join_all(proposals)
            .await
            .into_iter()
            .map(ForwardOutcome::from_result)
            .collect();
        reply::<_, ()>(encoding, Ok(outcomes))
    }
}
