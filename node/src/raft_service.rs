//! The server side of the Raft transport, and the forwarding endpoint that
//! followers use to hand writes to the leader.

use std::sync::Arc;

use berth_proto::raft::raft_transport_server::RaftTransport;
use berth_proto::raft::{RaftMessage, RaftReply};
use berth_raft_store::Request;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Response, Status};

use crate::forward::{ForwardOutcome, FORWARD_BATCH_COMMANDS_MAX};
use crate::node::{Node, ProposeError};

pub struct RaftService {
    pub node: Arc<Node>,
}

fn decode<T: DeserializeOwned>(msg: &RaftMessage) -> Result<T, Status> {
    serde_json::from_slice(&msg.payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))
}

fn reply<T: Serialize, E: Serialize>(result: Result<T, E>) -> Result<Response<RaftReply>, Status> {
    let encoded = match result {
        Ok(v) => RaftReply {
            payload: serde_json::to_vec(&v).map_err(|e| Status::internal(e.to_string()))?,
            error: Vec::new(),
        },
        Err(e) => RaftReply {
            payload: Vec::new(),
            error: serde_json::to_vec(&e).map_err(|e| Status::internal(e.to_string()))?,
        },
    };
    Ok(Response::new(encoded))
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    async fn append_entries(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let req = decode(request.get_ref())?;
        reply(self.node.raft.append_entries(req).await)
    }

    async fn vote(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let req = decode(request.get_ref())?;
        reply(self.node.raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let req = decode(request.get_ref())?;
        reply(self.node.raft.install_snapshot(req).await)
    }

    async fn forward(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        let req: Request = decode(request.get_ref())?;
        // Only the leader proposes forwarded commands; a node that lost
        // leadership meanwhile says so and the caller retries.
        match self
            .node
            .propose_local(Arc::unwrap_or_clone(req.command))
            .await
        {
            Ok(response) => reply::<_, ()>(Ok(response)),
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
        let requests: Vec<Request> = decode(request.get_ref())?;
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
        reply::<_, ()>(Ok(outcomes))
    }
}
