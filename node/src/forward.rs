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
use berth_proto::raft::RaftReply;
use berth_state::{Command, Response, COMMAND_VERSION};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::network::{PeerClient, PeerMethod};
use crate::node::ProposeError;
use crate::wire::{self, WireError};

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

/// `berth_state::Request` for a borrowed command, so a command is
/// encoded without being cloned first.
#[derive(Serialize)]
struct RequestRef<'a> {
    version: u32,
    command: &'a Command,
}

/// A command waiting to be forwarded, encoded as a `Request`.
struct Forwarded {
    leader_addr: String,
    request: Vec<u8>,
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
        let request = wire::encode(&RequestRef {
            version: COMMAND_VERSION,
            command,
        })
        .map_err(|e| ProposeError::Fatal(e.to_string()))?;
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Forwarded {
                leader_addr: leader_addr.to_string(),
                request,
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
    let mut clients: HashMap<String, PeerClient> = HashMap::new();
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
        // The array's header included.
        let mut bytes = first.request.len() + ARRAY_OVERHEAD_BYTES_MAX;
        let mut batch = vec![first];
        while batch.len() < FORWARD_BATCH_COMMANDS_MAX {
            match waiting.try_recv() {
                Ok(f)
                    if f.leader_addr != leader_addr
                        || bytes + f.request.len() > FORWARD_BATCH_BYTES_MAX =>
                {
                    carried = Some(f);
                    break;
                }
                Ok(f) => {
                    bytes += f.request.len();
                    batch.push(f);
                }
                Err(_) => break,
            }
        }
        let client = match client_for(&mut clients, &leader_addr, &credentials) {
            Ok(c) => c,
            Err(e) => {
                for f in batch {
                    let _ = f.reply.send(Err(e.clone()));
                }
                continue;
            }
        };
        tokio::spawn(async move {
            send(client, &leader_addr, batch).await;
            drop(slot);
        });
    }
}

fn client_for(
    clients: &mut HashMap<String, PeerClient>,
    addr: &str,
    credentials: &AttachCredentials,
) -> Result<PeerClient, ProposeError> {
    if let Some(c) = clients.get(addr) {
        return Ok(c.clone());
    }
    let client = PeerClient::new(addr, credentials)
        .map_err(|e| ProposeError::Unavailable(format!("leader address {addr}: {e}")))?;
    if clients.len() >= LEADER_CLIENTS_MAX {
        clients.clear();
    }
    clients.insert(addr.to_string(), client.clone());
    Ok(client)
}

/// What a failed call means for each command it carried.
fn call_error(leader_addr: &str, status: &tonic::Status) -> ProposeError {
    if wire::is_format_refusal(status) {
        // Retrying cannot help: the leader runs another version.
        ProposeError::Fatal(format!(
            "forwarding to leader {leader_addr}: {}",
            status.message()
        ))
    } else if status.code() == tonic::Code::FailedPrecondition {
        ProposeError::NotLeader { leader_addr: None }
    } else {
        ProposeError::Unavailable(format!(
            "forwarding to leader {leader_addr}: {}",
            status.message()
        ))
    }
}

/// One call of `method` carrying `payload` to the leader.
async fn call(
    client: &PeerClient,
    method: PeerMethod,
    payload: Vec<u8>,
) -> Result<RaftReply, tonic::Status> {
    client
        .call(
            method,
            method.message(payload),
            Duration::from_millis(FORWARD_TIMEOUT_MS),
        )
        .await
}

/// A reply's payload, in this node's format.
fn decode<T: serde::de::DeserializeOwned>(reply: &RaftReply) -> Result<T, WireError> {
    wire::check_format(reply.format_version)?;
    wire::decode(&reply.payload)
}

/// One command in one `Forward` call.
async fn forward_one(
    client: &PeerClient,
    leader_addr: &str,
    request: Vec<u8>,
) -> Result<Response, ProposeError> {
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "Forward").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(1);
    match call(client, PeerMethod::Forward, request).await {
        Ok(reply) => decode(&reply)
            .map_err(|e| ProposeError::Fatal(format!("undecodable reply from leader: {e}"))),
        Err(status) => Err(call_error(leader_addr, &status)),
    }
}

/// Bytes an array of encoded requests adds around them at most:
/// MessagePack's header.
const ARRAY_OVERHEAD_BYTES_MAX: usize = 5;

/// The requests of `batch`, each already encoded, as one array.
fn batch_payload(batch: &[Forwarded]) -> Vec<u8> {
    let total: usize = batch.iter().map(|f| f.request.len()).sum();
    let mut payload = Vec::with_capacity(total + ARRAY_OVERHEAD_BYTES_MAX);
    let len = u32::try_from(batch.len()).unwrap_or(u32::MAX);
    berth_raft_store::codec::write_array_len(&mut payload, len);
    for f in batch {
        payload.extend_from_slice(&f.request);
    }
    payload
}

/// Sends `batch` (a lone command as a plain `Forward`) and answers each
/// command.
async fn send(client: PeerClient, leader_addr: &str, mut batch: Vec<Forwarded>) {
    assert!(!batch.is_empty() && batch.len() <= FORWARD_BATCH_COMMANDS_MAX);
    if batch.len() == 1 {
        if let Some(f) = batch.pop() {
            let result = forward_one(&client, leader_addr, f.request).await;
            let _ = f.reply.send(result);
        }
        return;
    }
    let payload = batch_payload(&batch);
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "ForwardBatch").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(batch.len() as u64);
    let outcomes = match call(&client, PeerMethod::ForwardBatch, payload).await {
        Ok(reply) => batch_outcomes(&reply, batch.len()),
        Err(status) => Err(call_error(leader_addr, &status)),
    };
    match outcomes {
        Ok(outcomes) => {
            for (f, outcome) in batch.into_iter().zip(outcomes) {
                let _ = f.reply.send(outcome.into_result(leader_addr));
            }
        }
        Err(e) => {
            for f in batch {
                let _ = f.reply.send(Err(e.clone()));
            }
        }
    }
}

/// The outcomes a `ForwardBatch` reply holds, one for each of `commands`.
fn batch_outcomes(reply: &RaftReply, commands: usize) -> Result<Vec<ForwardOutcome>, ProposeError> {
    let outcomes: Vec<ForwardOutcome> = decode(reply)
        .map_err(|e| ProposeError::Fatal(format!("undecodable reply from leader: {e}")))?;
    if outcomes.len() != commands {
        return Err(ProposeError::Fatal(format!(
            "the leader answered {} outcomes for {commands} commands",
            outcomes.len()
        )));
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_state::Request;

    #[test]
    fn a_borrowed_request_encodes_as_a_request() {
        let command = Command::CancelJob {
            job_id: 7,
            now_ms: 9,
        };
        let borrowed = wire::encode(&RequestRef {
            version: COMMAND_VERSION,
            command: &command,
        })
        .expect("encode");
        let owned = wire::encode(&Request::new(command.clone())).expect("encode");
        assert_eq!(borrowed, owned);
        let back: Request = wire::decode(&borrowed).expect("decode");
        assert_eq!(back.version, COMMAND_VERSION);
    }

    #[test]
    fn a_batch_is_an_array_of_requests() {
        for len in [2u64, 17] {
            let batch: Vec<Forwarded> = (0..len)
                .map(|job_id| {
                    let command = Command::CancelJob { job_id, now_ms: 9 };
                    Forwarded {
                        leader_addr: "l:1".into(),
                        request: wire::encode(&Request::new(command)).expect("encode"),
                        reply: oneshot::channel().0,
                    }
                })
                .collect();
            let payload = batch_payload(&batch);
            let overhead = payload.len() - batch.iter().map(|f| f.request.len()).sum::<usize>();
            assert!(overhead <= ARRAY_OVERHEAD_BYTES_MAX, "{overhead}");
            let back: Vec<Request> = wire::decode(&payload).expect("decode");
            let ids: Vec<u64> = back
                .iter()
                .map(|r| match r.command.as_ref() {
                    Command::CancelJob { job_id, .. } => *job_id,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(ids, (0..len).collect::<Vec<_>>());
        }
    }

    fn reply_of<T: Serialize>(value: &T, format_version: u32) -> RaftReply {
        RaftReply {
            payload: wire::encode(value).expect("encode"),
            error: Vec::new(),
            format_version,
        }
    }

    #[test]
    fn a_batch_reply_is_read_only_in_this_format_and_whole() {
        let outcomes = vec![ForwardOutcome::NotLeader, ForwardOutcome::NotLeader];
        let read = batch_outcomes(&reply_of(&outcomes, wire::PEER_FORMAT_VERSION), 2);
        assert_eq!(read.expect("read"), outcomes);
        match batch_outcomes(&reply_of(&outcomes, 2), 2) {
            Err(ProposeError::Fatal(m)) => assert!(
                m.contains("peer message format 2, this node reads format 1"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        match batch_outcomes(&reply_of(&outcomes, wire::PEER_FORMAT_VERSION), 3) {
            Err(ProposeError::Fatal(m)) => assert!(m.contains("2 outcomes for 3"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_format_refusal_is_not_taken_for_not_leader() {
        let refusal = wire::format_refusal(&WireError::Format { got: 1 });
        assert!(matches!(
            call_error("l:1", &refusal),
            ProposeError::Fatal(_)
        ));
        assert!(matches!(
            call_error("l:1", &tonic::Status::failed_precondition("not leader")),
            ProposeError::NotLeader { leader_addr: None }
        ));
        assert!(matches!(
            call_error("l:1", &tonic::Status::unavailable("down")),
            ProposeError::Unavailable(_)
        ));
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
