//! The server side of the Raft transport, and the forwarding endpoint that
//! followers use to hand writes to the leader.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use berth_proto::raft::raft_transport_server::RaftTransport;
use berth_proto::raft::{RaftMessage, RaftReply};
use berth_state::Request;
use futures::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;
use tonic::{Response, Status, Streaming};

use crate::forward::{ForwardOutcome, FORWARD_BATCH_COMMANDS_MAX};
use crate::node::{Node, ProposeError};
use crate::wire;

pub struct RaftService {
    pub node: Arc<Node>,
    /// Turns true when the node shuts down: open AppendEntries streams end
    /// then, so the server's graceful stop does not wait on the leader
    /// that holds them.
    pub shutdown: watch::Receiver<bool>,
}

/// The replies of one AppendEntries stream.
pub(crate) type ReplyStream = Pin<Box<dyn Stream<Item = Result<RaftReply, Status>> + Send>>;

/// Refuses a request in a payload format other than this node's.
pub(crate) fn accept_format(msg: &RaftMessage) -> Result<(), Status> {
    wire::check_format(msg.format_version).map_err(|e| wire::format_refusal(&e))
}

/// Decodes a request.
fn decode<T: DeserializeOwned>(msg: &RaftMessage) -> Result<T, Status> {
    accept_format(msg)?;
    wire::decode(&msg.payload)
        .map_err(|e| Status::invalid_argument(format!("undecodable Raft message: {e}")))
}

fn reply<T: Serialize, E: Serialize>(result: Result<T, E>) -> Result<Response<RaftReply>, Status> {
    encode_reply(result).map(Response::new)
}

fn encode_reply<T: Serialize, E: Serialize>(result: Result<T, E>) -> Result<RaftReply, Status> {
    let encode_error = |e: wire::WireError| Status::internal(e.to_string());
    let (payload, error) = match result {
        Ok(v) => (wire::encode(&v).map_err(encode_error)?, Vec::new()),
        Err(e) => (Vec::new(), wire::encode(&e).map_err(encode_error)?),
    };
    Ok(RaftReply {
        payload,
        error,
        format_version: wire::PEER_FORMAT_VERSION,
    })
}

/// One AppendEntries request, answered (a unary call, or one of a stream).
async fn append_entries_reply(node: &Node, message: &RaftMessage) -> Result<RaftReply, Status> {
    let req = decode(message)?;
    encode_reply(node.raft.append_entries(req).await)
}

/// Returns once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// What a stream does after a request: goes on, or ends.
enum Next {
    Reply(Result<RaftReply, Status>),
    End,
}

/// Answers the requests of one AppendEntries stream in order, each with
/// `answer` once its predecessor is answered (openraft's replication to a
/// follower has one request out at a time). Ends when the leader closes
/// the stream, an answer fails (with that status) or `shutdown` turns
/// true.
pub(crate) fn answer_in_order<A, F>(
    requests: Streaming<RaftMessage>,
    shutdown: watch::Receiver<bool>,
    answer: A,
) -> ReplyStream
where
    A: Fn(RaftMessage) -> F + Send + Sync + 'static,
    F: Future<Output = Result<RaftReply, Status>> + Send,
{
    let state = Some((requests, shutdown, answer));
    Box::pin(futures::stream::unfold(state, |state| async move {
        let (mut requests, mut shutdown, answer) = state?;
        let next = tokio::select! {
            biased;
            () = stopped(&mut shutdown) => Next::End,
            request = requests.message() => match request {
                Ok(Some(message)) => Next::Reply(answer(message).await),
                // The leader closed the stream.
                Ok(None) => Next::End,
                // A request that could not be read (larger than the
                // bound, say) ends the stream with why; a broken stream
                // has no one to tell.
                Err(status) => Next::Reply(Err(status)),
            },
        };
        match next {
            Next::Reply(Ok(reply)) => Some((Ok(reply), Some((requests, shutdown, answer)))),
            // The stream ends with the failure as its status.
            Next::Reply(Err(status)) => Some((Err(status), None)),
            Next::End => None,
        }
    }))
}

#[tonic::async_trait]
impl RaftTransport for RaftService {
    type AppendEntriesStreamStream = ReplyStream;

    async fn append_entries_stream(
        &self,
        request: tonic::Request<Streaming<RaftMessage>>,
    ) -> Result<Response<ReplyStream>, Status> {
        let node = self.node.clone();
        Ok(Response::new(answer_in_order(
            request.into_inner(),
            self.shutdown.clone(),
            move |message| {
                let node = node.clone();
                async move { append_entries_reply(&node, &message).await }
            },
        )))
    }

    async fn append_entries(
        &self,
        request: tonic::Request<RaftMessage>,
    ) -> Result<Response<RaftReply>, Status> {
        append_entries_reply(&self.node, request.get_ref())
            .await
            .map(Response::new)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_in_another_format_is_refused_naming_both() {
        let payload = wire::encode(&7u64).expect("encode");
        let message = |format_version| RaftMessage {
            payload: payload.clone(),
            format_version,
        };
        assert_eq!(decode::<u64>(&message(1)).expect("read"), 7);
        let status = decode::<u64>(&message(2)).expect_err("refused");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            "peer message format 2, this node reads format 1"
        );
        assert!(wire::is_format_refusal(&status));
    }

    #[test]
    fn replies_carry_this_nodes_format() {
        let reply = encode_reply::<_, ()>(Ok(7u64)).expect("encoded");
        assert_eq!(reply.format_version, wire::PEER_FORMAT_VERSION);
        assert!(reply.error.is_empty());
        assert_eq!(wire::decode::<u64>(&reply.payload).expect("read"), 7);
    }
}
