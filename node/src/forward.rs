//! A follower's writes on their way to the leader, batched.
//!
//! Every write a follower receives is proposed by the leader. Sent one
//! gRPC call each, a busy follower makes thousands of calls a second, each
//! with its own HTTP/2 frames, headers and task on both sides. Instead, a
//! follower's forwarder sends a command at once while fewer than
//! `FORWARDS_IN_FLIGHT_MAX` calls are out, and the commands that arrive
//! meanwhile go together in one `ForwardBatch` call; the leader proposes
//! them together (so they also share its log entries) and answers each one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use berth_auth::grpc::AttachCredentials;
use berth_proto::raft::raft_transport_client::RaftTransportClient;
use berth_proto::raft::RaftMessage;
use berth_raft_store::{Command, Response, COMMAND_VERSION};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tonic::transport::Channel;

use crate::network::channel;
use crate::node::ProposeError;

/// Commands one `ForwardBatch` call carries at most; the leader refuses
/// more.
pub const FORWARD_BATCH_COMMANDS_MAX: usize = 256;
/// Encoded bytes of one `ForwardBatch` payload at most (a lone larger
/// command still travels alone), far inside the 16 MiB gRPC bound.
pub const FORWARD_BATCH_BYTES_MAX: usize = 1024 * 1024;
/// Forward calls a follower has out at once, at most. Commands arriving
/// while these are out wait and then go together.
const FORWARDS_IN_FLIGHT_MAX: usize = 2;
/// Commands waiting for the forwarder at most; beyond this callers wait.
const FORWARDS_QUEUED_MAX: usize = 4_096;
/// How long the leader may take to answer one forward call.
const FORWARD_TIMEOUT_MS: u64 = 10_000;
/// Leader addresses the forwarder keeps a client for at most; members
/// change rarely, so this only bounds a pathological churn.
const LEADER_CLIENTS_MAX: usize = 64;

/// Calls this follower made to the leader, by kind (`call="Forward"` or
/// `call="ForwardBatch"`).
pub const FORWARD_CALLS_TOTAL: &str = "berth_forward_calls_total";
/// Commands this follower sent to the leader, however batched.
pub const FORWARDED_COMMANDS_TOTAL: &str = "berth_forwarded_commands_total";

/// One forwarded command's outcome in a `ForwardBatch` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ForwardOutcome {
    /// Committed and applied; the state machine's answer.
    Applied(Response),
    /// The node was not the leader (any more); the follower retries.
    NotLeader,
    /// It could not be proposed now (no leader, the batcher gone); the
    /// message says why. The follower retries within its window.
    Unavailable(String),
}

impl ForwardOutcome {
    /// What the leader answers for one command, the same split as a single
    /// `Forward` call's status codes.
    pub fn from_result(result: Result<Response, ProposeError>) -> ForwardOutcome {
        match result {
            Ok(response) => ForwardOutcome::Applied(response),
            Err(ProposeError::NotLeader { .. }) => ForwardOutcome::NotLeader,
            Err(e) => ForwardOutcome::Unavailable(e.to_string()),
        }
    }

    fn into_result(self, leader_addr: &str) -> Result<Response, ProposeError> {
        match self {
            ForwardOutcome::Applied(response) => Ok(response),
            ForwardOutcome::NotLeader => Err(ProposeError::NotLeader { leader_addr: None }),
            ForwardOutcome::Unavailable(message) => Err(ProposeError::Unavailable(format!(
                "forwarding to leader {leader_addr}: {message}"
            ))),
        }
    }
}

/// The JSON of `berth_raft_store::Request` for a borrowed command, so a
/// command is encoded without being cloned first.
#[derive(Serialize)]
struct RequestRef<'a> {
    version: u32,
    command: &'a Command,
}

/// A command waiting to be forwarded, encoded as a `Request`.
struct Forwarded {
    leader_addr: String,
    request_json: Vec<u8>,
    reply: oneshot::Sender<Result<Response, ProposeError>>,
}

/// A follower's forwarder: one task batching forwarded commands.
pub struct Forwarder {
    queue: mpsc::Sender<Forwarded>,
}

impl Forwarder {
    /// Starts the forwarding task; every call it makes carries
    /// `credentials`. Must run inside a tokio runtime.
    pub fn start(credentials: AttachCredentials) -> Forwarder {
        let (queue, waiting) = mpsc::channel(FORWARDS_QUEUED_MAX);
        tokio::spawn(run(waiting, credentials));
        Forwarder { queue }
    }

    /// Sends `command` to the leader at `leader_addr` and waits for its
    /// answer (committed and applied there).
    pub async fn forward(
        &self,
        leader_addr: &str,
        command: &Command,
    ) -> Result<Response, ProposeError> {
        let request_json = serde_json::to_vec(&RequestRef {
            version: COMMAND_VERSION,
            command,
        })
        .map_err(|e| ProposeError::Fatal(e.to_string()))?;
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Forwarded {
                leader_addr: leader_addr.to_string(),
                request_json,
                reply,
            })
            .await
            .map_err(|_| ProposeError::Fatal("the forwarder has stopped".into()))?;
        answer
            .await
            .map_err(|_| ProposeError::Fatal("the forwarder dropped a command".into()))?
    }
}

/// Takes the first waiting command, waits for a free call slot, then takes
/// every command that arrived meanwhile for the same leader (within the
/// batch bounds) and sends them in one call.
async fn run(mut waiting: mpsc::Receiver<Forwarded>, credentials: AttachCredentials) {
    let slots = Arc::new(Semaphore::new(FORWARDS_IN_FLIGHT_MAX));
    let mut clients: HashMap<String, RaftTransportClient<Channel>> = HashMap::new();
    let mut carried: Option<Forwarded> = None;
    loop {
        let first = match carried.take() {
            Some(f) => f,
            None => match waiting.recv().await {
                Some(f) => f,
                // Every sender is gone: the node is shutting down.
                None => return,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let leader_addr = first.leader_addr.clone();
        // The array's brackets and commas included.
        let mut bytes = first.request_json.len() + 2;
        let mut batch = vec![first];
        while batch.len() < FORWARD_BATCH_COMMANDS_MAX {
            match waiting.try_recv() {
                Ok(f)
                    if f.leader_addr != leader_addr
                        || bytes + f.request_json.len() + 1 > FORWARD_BATCH_BYTES_MAX =>
                {
                    carried = Some(f);
                    break;
                }
                Ok(f) => {
                    bytes += f.request_json.len() + 1;
                    batch.push(f);
                }
                Err(_) => break,
            }
        }
        let client = match client_for(&mut clients, &leader_addr) {
            Ok(c) => c,
            Err(e) => {
                for f in batch {
                    let _ = f.reply.send(Err(e.clone()));
                }
                continue;
            }
        };
        let credentials = credentials.clone();
        tokio::spawn(async move {
            send(client, &credentials, &leader_addr, batch).await;
            drop(slot);
        });
    }
}

fn client_for(
    clients: &mut HashMap<String, RaftTransportClient<Channel>>,
    addr: &str,
) -> Result<RaftTransportClient<Channel>, ProposeError> {
    if let Some(c) = clients.get(addr) {
        return Ok(c.clone());
    }
    let ch = channel(addr)
        .map_err(|e| ProposeError::Unavailable(format!("leader address {addr}: {e}")))?;
    let client = RaftTransportClient::new(ch)
        .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
    if clients.len() >= LEADER_CLIENTS_MAX {
        clients.clear();
    }
    clients.insert(addr.to_string(), client.clone());
    Ok(client)
}

/// What a failed call means for each command it carried.
fn call_error(leader_addr: &str, status: &tonic::Status) -> ProposeError {
    if status.code() == tonic::Code::FailedPrecondition {
        ProposeError::NotLeader { leader_addr: None }
    } else {
        ProposeError::Unavailable(format!(
            "forwarding to leader {leader_addr}: {}",
            status.message()
        ))
    }
}

fn message(payload: Vec<u8>, credentials: &AttachCredentials) -> tonic::Request<RaftMessage> {
    let mut req = tonic::Request::new(RaftMessage { payload });
    req.set_timeout(Duration::from_millis(FORWARD_TIMEOUT_MS));
    credentials.apply(req.metadata_mut());
    req
}

/// One command in one `Forward` call.
async fn forward_one(
    mut client: RaftTransportClient<Channel>,
    credentials: &AttachCredentials,
    leader_addr: &str,
    request_json: Vec<u8>,
) -> Result<Response, ProposeError> {
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "Forward").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(1);
    match client.forward(message(request_json, credentials)).await {
        Ok(reply) => serde_json::from_slice(&reply.into_inner().payload)
            .map_err(|e| ProposeError::Fatal(format!("undecodable reply from leader: {e}"))),
        Err(status) => Err(call_error(leader_addr, &status)),
    }
}

/// Sends `batch` (a lone command as a plain `Forward`) and answers each
/// command.
async fn send(
    mut client: RaftTransportClient<Channel>,
    credentials: &AttachCredentials,
    leader_addr: &str,
    mut batch: Vec<Forwarded>,
) {
    assert!(!batch.is_empty() && batch.len() <= FORWARD_BATCH_COMMANDS_MAX);
    if batch.len() == 1 {
        if let Some(f) = batch.pop() {
            let result = forward_one(client, credentials, leader_addr, f.request_json).await;
            let _ = f.reply.send(result);
        }
        return;
    }
    let total: usize = batch.iter().map(|f| f.request_json.len() + 1).sum();
    let mut payload = Vec::with_capacity(total + 1);
    payload.push(b'[');
    for (n, f) in batch.iter().enumerate() {
        if n > 0 {
            payload.push(b',');
        }
        payload.extend_from_slice(&f.request_json);
    }
    payload.push(b']');
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "ForwardBatch").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(batch.len() as u64);
    match client.forward_batch(message(payload, credentials)).await {
        Ok(reply) => {
            let outcomes =
                serde_json::from_slice::<Vec<ForwardOutcome>>(&reply.into_inner().payload);
            match outcomes {
                Ok(outcomes) if outcomes.len() == batch.len() => {
                    for (f, outcome) in batch.into_iter().zip(outcomes) {
                        let _ = f.reply.send(outcome.into_result(leader_addr));
                    }
                }
                Ok(outcomes) => {
                    let e = ProposeError::Fatal(format!(
                        "the leader answered {} outcomes for {} commands",
                        outcomes.len(),
                        batch.len()
                    ));
                    for f in batch {
                        let _ = f.reply.send(Err(e.clone()));
                    }
                }
                Err(e) => {
                    let e = ProposeError::Fatal(format!("undecodable reply from leader: {e}"));
                    for f in batch {
                        let _ = f.reply.send(Err(e.clone()));
                    }
                }
            }
        }
        // A leader from before `ForwardBatch`: one call per command.
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            let calls = batch.into_iter().map(|f| {
                let client = client.clone();
                async move {
                    let result =
                        forward_one(client, credentials, leader_addr, f.request_json).await;
                    let _ = f.reply.send(result);
                }
            });
            futures::future::join_all(calls).await;
        }
        Err(status) => {
            let e = call_error(leader_addr, &status);
            for f in batch {
                let _ = f.reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_raft_store::Request;

    #[test]
    fn a_borrowed_request_encodes_as_a_request() {
        let command = Command::CancelJob {
            job_id: 7,
            now_ms: 9,
        };
        let borrowed = serde_json::to_vec(&RequestRef {
            version: COMMAND_VERSION,
            command: &command,
        })
        .expect("encode");
        let owned = serde_json::to_vec(&Request::new(command)).expect("encode");
        assert_eq!(borrowed, owned);
        let back: Request = serde_json::from_slice(&borrowed).expect("decode");
        assert_eq!(back.version, COMMAND_VERSION);
    }

    #[test]
    fn outcomes_keep_the_single_call_split() {
        let not_leader = ForwardOutcome::from_result(Err(ProposeError::NotLeader {
            leader_addr: Some("x:1".into()),
        }));
        assert_eq!(not_leader, ForwardOutcome::NotLeader);
        assert!(matches!(
            not_leader.into_result("l:1"),
            Err(ProposeError::NotLeader { leader_addr: None })
        ));
        let none = ForwardOutcome::from_result(Err(ProposeError::NoLeader));
        match none.into_result("l:1") {
            Err(ProposeError::Unavailable(m)) => {
                assert!(m.contains("l:1") && m.contains("no leader"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let ok = ForwardOutcome::from_result(Ok(Response::Submitted {
            job_id: 3,
            duplicate: false,
        }));
        let json = serde_json::to_vec(&vec![ok.clone()]).expect("encode");
        let back: Vec<ForwardOutcome> = serde_json::from_slice(&json).expect("decode");
        assert_eq!(back, vec![ok]);
        assert_eq!(
            back[0].clone().into_result("l:1").expect("applied"),
            Response::Submitted {
                job_id: 3,
                duplicate: false
            }
        );
    }
}
