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
use berth_proto::raft::{PayloadEncoding, RaftMessage, RaftReply};
use berth_state::{Command, Response, COMMAND_VERSION};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::network::PeerClient;
use crate::node::ProposeError;
use crate::peer_call::PeerMethod;
use crate::wire::{self, PeerEncoding};

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
    /// How `request` is encoded: what the leader was known to read when
    /// the command was queued.
    encoding: PayloadEncoding,
    request: Vec<u8>,
    reply: oneshot::Sender<Result<Response, ProposeError>>,
}

/// What each leader address is known to read ([`crate::wire`]), bounded
/// like the clients.
#[derive(Default)]
struct LeaderEncodings {
    by_addr: std::sync::Mutex<HashMap<String, Arc<PeerEncoding>>>,
}

impl LeaderEncodings {
    fn of(&self, addr: &str) -> Arc<PeerEncoding> {
        // Entries are whole or absent: a panic elsewhere leaves it usable.
        let mut by_addr = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = by_addr.get(addr) {
            return e.clone();
        }
        if by_addr.len() >= LEADER_CLIENTS_MAX {
            by_addr.clear();
        }
        let e = Arc::new(PeerEncoding::default());
        by_addr.insert(addr.to_string(), e.clone());
        e
    }
}

/// A follower's forwarder: one task batching forwarded commands.
pub struct Forwarder {
    queue: mpsc::Sender<Forwarded>,
    encodings: Arc<LeaderEncodings>,
}

impl Forwarder {
    /// Starts the forwarding task; every call it makes carries
    /// `credentials`. Must run inside a tokio runtime.
    pub fn start(credentials: AttachCredentials) -> Forwarder {
        let (queue, waiting) = mpsc::channel(FORWARDS_QUEUED_MAX);
        let encodings = Arc::new(LeaderEncodings::default());
        tokio::spawn(run(waiting, credentials, encodings.clone()));
        Forwarder { queue, encodings }
    }

    /// Sends `command` to the leader at `leader_addr` and waits for its
    /// answer (committed and applied there).
    pub async fn forward(
        &self,
        leader_addr: &str,
        command: &Command,
    ) -> Result<Response, ProposeError> {
        let encoding = self.encodings.of(leader_addr).current();
        let request = wire::encode(
            encoding,
            &RequestRef {
                version: COMMAND_VERSION,
                command,
            },
        )
        .map_err(ProposeError::Fatal)?;
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Forwarded {
                leader_addr: leader_addr.to_string(),
                encoding,
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
async fn run(
    mut waiting: mpsc::Receiver<Forwarded>,
    credentials: AttachCredentials,
    encodings: Arc<LeaderEncodings>,
) {
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
        let encoding = first.encoding;
        // The array's header, brackets and commas included.
        let mut bytes = first.request.len() + ARRAY_OVERHEAD_BYTES_MAX;
        let mut batch = vec![first];
        while batch.len() < FORWARD_BATCH_COMMANDS_MAX {
            match waiting.try_recv() {
                Ok(f)
                    if f.leader_addr != leader_addr
                        || f.encoding != encoding
                        || bytes + f.request.len() + 1 > FORWARD_BATCH_BYTES_MAX =>
                {
                    carried = Some(f);
                    break;
                }
                Ok(f) => {
                    bytes += f.request.len() + 1;
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
        let leader_encoding = encodings.of(&leader_addr);
        tokio::spawn(async move {
            let to = Leader {
                addr: &leader_addr,
                encoding: &leader_encoding,
            };
            send(client, to, encoding, batch).await;
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
    if status.code() == tonic::Code::FailedPrecondition {
        ProposeError::NotLeader { leader_addr: None }
    } else {
        ProposeError::Unavailable(format!(
            "forwarding to leader {leader_addr}: {}",
            status.message()
        ))
    }
}

/// The leader a call goes to, and what it is known to read.
#[derive(Clone, Copy)]
struct Leader<'a> {
    addr: &'a str,
    encoding: &'a PeerEncoding,
}

impl Leader<'_> {
    /// One call of `method` carrying `payload`.
    async fn call(
        &self,
        client: &PeerClient,
        method: PeerMethod,
        encoding: PayloadEncoding,
        payload: Vec<u8>,
    ) -> Result<RaftReply, tonic::Status> {
        wire::count_sent(method.name(), encoding);
        let message = RaftMessage {
            payload,
            encoding: encoding.into(),
        };
        client
            .call(method, message, Duration::from_millis(FORWARD_TIMEOUT_MS))
            .await
    }

    /// Decodes a reply's payload, learning from it what the leader reads.
    fn decode<T: serde::de::DeserializeOwned>(&self, reply: RaftReply) -> Result<T, String> {
        self.encoding.replied(reply.reads_messagepack);
        wire::decode(wire::named(reply.encoding)?, &reply.payload)
    }

    /// What a failed call means for each command it carried.
    fn call_error(&self, status: &tonic::Status) -> ProposeError {
        self.encoding.failed();
        call_error(self.addr, status)
    }
}

/// One command in one `Forward` call.
async fn forward_one(
    client: &PeerClient,
    to: Leader<'_>,
    encoding: PayloadEncoding,
    request: Vec<u8>,
) -> Result<Response, ProposeError> {
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "Forward").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(1);
    match to
        .call(client, PeerMethod::Forward, encoding, request)
        .await
    {
        Ok(reply) => to
            .decode(reply)
            .map_err(|e| ProposeError::Fatal(format!("undecodable reply from leader: {e}"))),
        Err(status) => Err(to.call_error(&status)),
    }
}

/// Bytes an array of encoded requests adds around them at most: JSON's
/// brackets, or MessagePack's header (at most 5 bytes).
const ARRAY_OVERHEAD_BYTES_MAX: usize = 5;

/// The requests of `batch`, each already encoded as `encoding`, as one
/// array.
fn batch_payload(encoding: PayloadEncoding, batch: &[Forwarded]) -> Vec<u8> {
    let total: usize = batch.iter().map(|f| f.request.len() + 1).sum();
    let mut payload = Vec::with_capacity(total + ARRAY_OVERHEAD_BYTES_MAX);
    match encoding {
        PayloadEncoding::Json => {
            payload.push(b'[');
            for (n, f) in batch.iter().enumerate() {
                if n > 0 {
                    payload.push(b',');
                }
                payload.extend_from_slice(&f.request);
            }
            payload.push(b']');
        }
        PayloadEncoding::Messagepack => {
            let len = u32::try_from(batch.len()).unwrap_or(u32::MAX);
            berth_raft_store::codec::write_array_len(&mut payload, len);
            for f in batch {
                payload.extend_from_slice(&f.request);
            }
        }
    }
    payload
}

/// Sends `batch` (a lone command as a plain `Forward`), every command
/// encoded as `encoding`, and answers each command.
async fn send(
    client: PeerClient,
    to: Leader<'_>,
    encoding: PayloadEncoding,
    mut batch: Vec<Forwarded>,
) {
    assert!(!batch.is_empty() && batch.len() <= FORWARD_BATCH_COMMANDS_MAX);
    assert!(batch.iter().all(|f| f.encoding == encoding));
    if batch.len() == 1 {
        if let Some(f) = batch.pop() {
            let result = forward_one(&client, to, encoding, f.request).await;
            let _ = f.reply.send(result);
        }
        return;
    }
    let payload = batch_payload(encoding, &batch);
    metrics::counter!(FORWARD_CALLS_TOTAL, "call" => "ForwardBatch").increment(1);
    metrics::counter!(FORWARDED_COMMANDS_TOTAL).increment(batch.len() as u64);
    match to
        .call(&client, PeerMethod::ForwardBatch, encoding, payload)
        .await
    {
        Ok(reply) => {
            let outcomes = to.decode::<Vec<ForwardOutcome>>(reply);
            match outcomes {
                Ok(outcomes) if outcomes.len() == batch.len() => {
                    for (f, outcome) in batch.into_iter().zip(outcomes) {
                        let _ = f.reply.send(outcome.into_result(to.addr));
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
                let client = &client;
                async move {
                    let result = forward_one(client, to, encoding, f.request).await;
                    let _ = f.reply.send(result);
                }
            });
            futures::future::join_all(calls).await;
        }
        Err(status) => {
            let e = to.call_error(&status);
            for f in batch {
                let _ = f.reply.send(Err(e.clone()));
            }
        }
    }
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
        for encoding in [PayloadEncoding::Json, PayloadEncoding::Messagepack] {
            let borrowed = wire::encode(
                encoding,
                &RequestRef {
                    version: COMMAND_VERSION,
                    command: &command,
                },
            )
            .expect("encode");
            let owned = wire::encode(encoding, &Request::new(command.clone())).expect("encode");
            assert_eq!(borrowed, owned, "{encoding:?}");
            let back: Request = wire::decode(encoding, &borrowed).expect("decode");
            assert_eq!(back.version, COMMAND_VERSION);
        }
    }

    #[test]
    fn a_batch_is_an_array_of_requests_in_either_encoding() {
        for encoding in [PayloadEncoding::Json, PayloadEncoding::Messagepack] {
            for len in [2u64, 17] {
                let batch: Vec<Forwarded> = (0..len)
                    .map(|job_id| {
                        let command = Command::CancelJob { job_id, now_ms: 9 };
                        Forwarded {
                            leader_addr: "l:1".into(),
                            encoding,
                            request: wire::encode(encoding, &Request::new(command))
                                .expect("encode"),
                            reply: oneshot::channel().0,
                        }
                    })
                    .collect();
                let payload = batch_payload(encoding, &batch);
                let overhead = payload.len() - batch.iter().map(|f| f.request.len()).sum::<usize>();
                assert!(
                    overhead <= ARRAY_OVERHEAD_BYTES_MAX + batch.len(),
                    "{encoding:?}: {overhead}"
                );
                let back: Vec<Request> = wire::decode(encoding, &payload).expect("decode");
                let ids: Vec<u64> = back
                    .iter()
                    .map(|r| match r.command.as_ref() {
                        Command::CancelJob { job_id, .. } => *job_id,
                        other => panic!("{other:?}"),
                    })
                    .collect();
                assert_eq!(ids, (0..len).collect::<Vec<_>>(), "{encoding:?}");
            }
        }
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
