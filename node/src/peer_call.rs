//! Unary calls to a peer's `RaftTransport` over plain-text HTTP/2, driven
//! by the `h2` crate, so that each call's HEADERS and DATA frames leave in
//! one write.
//!
//! Through tonic's channel, hyper queues a request's HEADERS frame and
//! only then, from a task of its own once the new stream has been given
//! send capacity, its DATA frame: two `writev`s per call, and on loopback
//! or a LAN each may wake the peer to read a part of the call
//! ([`crate::whole_request`] already took the third, an empty DATA frame
//! that ended the stream). Here the whole body is queued on the stream in
//! the same poll that opens it, so the connection task encodes HEADERS and
//! DATA together and writes them at once: with two followers, four writes
//! fewer per log entry on the leader and two wake-ups fewer on each
//! follower (an entry's AppendEntries and the one that tells its commit).
//!
//! A leader's AppendEntries to a follower go on one long-lived stream
//! instead ([`CallStream`], `AppendEntriesStream` in `raft.proto`): each
//! request one DATA frame out and its reply one DATA frame back. A unary
//! call also costs its HEADERS (encoded by the leader, decoded, routed and
//! checked for the cluster secret by the follower), a new task on the
//! follower and the reply's trailers; per log entry that is twice per
//! follower, as openraft 0.9 sends every entry's commit index in an
//! AppendEntries of its own. In a storm of `sbatch` processes the stream
//! took 13% off each follower's CPU per job and 7% off the leader's
//! (BENCHMARKS.md, twenty-first session).
//!
//! The wire is plain gRPC, answered by the same tonic server as before.
//! A cluster with TLS keeps tonic's channel, which holds the TLS setup,
//! and unary calls.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use berth_proto::grpc_frame;
use berth_proto::raft::{RaftMessage, RaftReply};
use bytes::{Bytes, BytesMut};
use http::header::{HeaderValue, CONTENT_TYPE, TE};
use http::{HeaderMap, Method, Request, Uri};
use tokio::net::TcpStream;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

/// Header lists, from the peer, at most (a reply's headers and trailers
/// are a few hundred bytes).
const HEADER_LIST_BYTES_MAX: u32 = 64 * 1024;

/// The path of `RaftTransport`'s streaming AppendEntries.
const APPEND_ENTRIES_STREAM_PATH: &str = "/berth.raft.v1.RaftTransport/AppendEntriesStream";

/// A peer's unary `RaftTransport` methods.
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

    fn path(self) -> &'static str {
        match self {
            PeerMethod::AppendEntries => "/berth.raft.v1.RaftTransport/AppendEntries",
            PeerMethod::Vote => "/berth.raft.v1.RaftTransport/Vote",
            PeerMethod::InstallSnapshot => "/berth.raft.v1.RaftTransport/InstallSnapshot",
            PeerMethod::Forward => "/berth.raft.v1.RaftTransport/Forward",
            PeerMethod::ForwardBatch => "/berth.raft.v1.RaftTransport/ForwardBatch",
        }
    }
}

/// One peer's connection, made on the first call and again after one
/// broke. Calls made at once share it, each on a stream of its own.
pub struct PeerCall {
    addr: String,
    /// Headers every call carries: the credentials.
    extra_headers: HeaderMap,
    connect_timeout: Duration,
    /// Replies larger than this are refused, as tonic's
    /// `max_decoding_message_size` does.
    reply_bytes_max: usize,
    /// The connection, when one is open. A handle is cloned out for each
    /// call; the lock is never held across an await.
    sender: Mutex<Option<h2::client::SendRequest<Bytes>>>,
}

impl PeerCall {
    /// A peer at `addr` ("host:port"); every call carries `metadata`.
    pub fn new(
        addr: &str,
        metadata: MetadataMap,
        connect_timeout: Duration,
        reply_bytes_max: usize,
    ) -> PeerCall {
        PeerCall {
            addr: addr.to_string(),
            extra_headers: metadata.into_headers(),
            connect_timeout,
            reply_bytes_max,
            sender: Mutex::new(None),
        }
    }

    fn open_connection(&self) -> MutexGuard<'_, Option<h2::client::SendRequest<Bytes>>> {
        // Only ever a whole handle or none: a panic elsewhere leaves it
        // usable.
        self.sender.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the connection, so the next call connects again.
    fn drop_connection(&self) {
        *self.open_connection() = None;
    }

    /// Sends `message` to `method` and waits for the reply, all within
    /// `timeout`. A broken connection is UNAVAILABLE and dropped, so the
    /// next call connects again; a reply with a gRPC error is that status.
    pub async fn call(
        &self,
        method: PeerMethod,
        message: &RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Status> {
        let outcome = tokio::time::timeout(timeout, self.exchange(method, message, timeout)).await;
        self.settle(outcome, timeout)
    }

    /// Opens an `AppendEntriesStream` on the connection, within `timeout`.
    /// A peer without it answers UNIMPLEMENTED.
    pub async fn open_append_stream(&self, timeout: Duration) -> Result<CallStream, Status> {
        let outcome = tokio::time::timeout(timeout, self.start_append_stream()).await;
        self.settle(outcome, timeout)
    }

    /// Sends `message` on `stream` and waits for its reply, within
    /// `timeout`. After a failure the stream is not to be used again: a
    /// late reply would be read as the next message's.
    pub async fn stream_call(
        &self,
        stream: &mut CallStream,
        message: &RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Status> {
        let outcome = tokio::time::timeout(timeout, stream.exchange(message)).await;
        self.settle(outcome, timeout)
    }

    /// What a call or a stream's step came to, the connection dropped when
    /// it broke or did not answer in time.
    fn settle<T>(
        &self,
        outcome: Result<Result<T, Failure>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T, Status> {
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failure)) => {
                if failure.broken {
                    self.drop_connection();
                }
                Err(failure.status)
            }
            Err(_) => {
                // The stream is reset as its handles drop; the connection
                // itself may be sound, but a peer this slow is better met
                // with a fresh one.
                self.drop_connection();
                Err(Status::deadline_exceeded(format!(
                    "no answer from {} within {} ms",
                    self.addr,
                    timeout.as_millis()
                )))
            }
        }
    }

    async fn exchange(
        &self,
        method: PeerMethod,
        message: &RaftMessage,
        timeout: Duration,
    ) -> Result<RaftReply, Failure> {
        let mut sender = self.ready_connection().await?;
        let request = self.request(method.path(), Some(timeout))?;
        let (answer, mut stream) = sender
            .send_request(request, false)
            .map_err(|e| self.broken(&e))?;
        // Queued before the connection task next runs: it writes the
        // HEADERS and this DATA frame together.
        stream
            .send_data(Bytes::from(grpc_frame::encode(message)), true)
            .map_err(|e| self.broken(&e))?;
        let response = answer.await.map_err(|e| self.broken(&e))?;
        let (parts, mut body) = response.into_parts();
        refused_in_head(&parts)?;
        let mut frame = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(|e| self.broken(&e))?;
            // Lets the peer send more on this stream and connection.
            let _ = body.flow_control().release_capacity(chunk.len());
            if frame.len() + chunk.len() > grpc_frame::PREFIX_BYTES + self.reply_bytes_max {
                return Err(Failure::answered(Status::out_of_range(format!(
                    "the reply from {} is larger than {} bytes",
                    self.addr, self.reply_bytes_max
                ))));
            }
            frame.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.map_err(|e| self.broken(&e))?;
        let status = trailers
            .as_ref()
            .and_then(Status::from_header_map)
            .or_else(|| Status::from_header_map(&parts.headers))
            .unwrap_or_else(|| Status::internal("the reply has no grpc-status"));
        if status.code() != Code::Ok {
            return Err(Failure::answered(status));
        }
        decode_reply(&frame).map_err(Failure::answered)
    }

    async fn start_append_stream(&self) -> Result<CallStream, Failure> {
        let mut sender = self.ready_connection().await?;
        let request = self.request(APPEND_ENTRIES_STREAM_PATH, None)?;
        let (answer, send) = sender
            .send_request(request, false)
            .map_err(|e| self.broken(&e))?;
        // The server answers the stream's head at once; an older one
        // answers UNIMPLEMENTED in it ("trailers-only").
        let response = answer.await.map_err(|e| self.broken(&e))?;
        let (parts, recv) = response.into_parts();
        refused_in_head(&parts)?;
        Ok(CallStream {
            addr: self.addr.clone(),
            send,
            recv,
            received: BytesMut::new(),
            reply_bytes_max: self.reply_bytes_max,
        })
    }

    /// The open connection, ready for a new stream, or a new one. A
    /// connection found closed before this call sent anything on it (the
    /// peer restarted or went away since the last call) is replaced at
    /// once rather than failing the call: nothing of it reached the peer.
    async fn ready_connection(&self) -> Result<h2::client::SendRequest<Bytes>, Failure> {
        let open = self.open_connection().clone();
        if let Some(sender) = open {
            match sender.ready().await {
                Ok(sender) => return Ok(sender),
                Err(e) => {
                    tracing::debug!(peer = %self.addr, error = %e, "peer connection closed; reconnecting");
                    self.drop_connection();
                }
            }
        }
        let sender = self.connect().await?;
        *self.open_connection() = Some(sender.clone());
        sender.ready().await.map_err(|e| self.broken(&e))
    }

    /// Whether the open connection is known to be closed (tests wait on
    /// it).
    #[cfg(test)]
    async fn open_connection_is_closed(&self) -> bool {
        let open = self.open_connection().clone();
        match open {
            Some(sender) => sender.ready().await.is_err(),
            None => false,
        }
    }

    async fn connect(&self) -> Result<h2::client::SendRequest<Bytes>, Failure> {
        let unreachable = |why: String| Failure {
            status: Status::unavailable(format!("cannot connect to {}: {why}", self.addr)),
            broken: true,
        };
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no connection within {} ms",
                    self.connect_timeout.as_millis()
                ))
            })?
            .map_err(|e| unreachable(e.to_string()))?;
        // Small Raft messages go now rather than wait for an ACK.
        tcp.set_nodelay(true)
            .map_err(|e| unreachable(e.to_string()))?;
        let (sender, connection) = h2::client::Builder::new()
            .enable_push(false)
            .max_header_list_size(HEADER_LIST_BYTES_MAX)
            .handshake::<_, Bytes>(tcp)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let addr = self.addr.clone();
        tokio::spawn(async move {
            // Ends once every handle to it is dropped and its streams are
            // done, or when the connection breaks.
            if let Err(e) = connection.await {
                tracing::debug!(peer = %addr, error = %e, "peer connection closed");
            }
        });
        Ok(sender)
    }

    /// A call's request head. `timeout` becomes its `grpc-timeout`; a
    /// stream, which outlives any one exchange on it, has none.
    fn request(&self, path: &str, timeout: Option<Duration>) -> Result<Request<()>, Failure> {
        let uri = Uri::builder()
            .scheme("http")
            .authority(self.addr.as_str())
            .path_and_query(path)
            .build()
            .map_err(|e| {
                Failure::answered(Status::invalid_argument(format!(
                    "bad peer address {:?}: {e}",
                    self.addr
                )))
            })?;
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        // The deadline as tonic's client states it: at most 8 digits.
        if let Some(timeout) = timeout {
            let timeout_ms = timeout.as_millis().min(99_999_999);
            if let Ok(value) = HeaderValue::from_str(&format!("{timeout_ms}m")) {
                headers.insert("grpc-timeout", value);
            }
        }
        for (name, value) in &self.extra_headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
    }

    /// A transport error: the call failed and the connection is dropped.
    fn broken(&self, e: &h2::Error) -> Failure {
        Failure::broken(&self.addr, e)
    }
}

/// An open `AppendEntriesStream`: requests go out one at a time, each
/// answered before the next is sent.
pub struct CallStream {
    addr: String,
    send: h2::SendStream<Bytes>,
    recv: h2::RecvStream,
    /// Bytes received and not yet read as a reply.
    received: BytesMut,
    reply_bytes_max: usize,
}

impl CallStream {
    async fn exchange(&mut self, message: &RaftMessage) -> Result<RaftReply, Failure> {
        self.send
            .send_data(Bytes::from(grpc_frame::encode(message)), false)
            .map_err(|e| Failure::broken(&self.addr, &e))?;
        loop {
            if let Some(frame) = self.next_frame()? {
                return decode_reply(&frame).map_err(Failure::answered);
            }
            let Some(chunk) = self.recv.data().await else {
                // The server ended the stream: its status says why (OK when
                // it shut down, which a call did not expect either).
                let trailers = self
                    .recv
                    .trailers()
                    .await
                    .map_err(|e| Failure::broken(&self.addr, &e))?;
                let status = trailers
                    .as_ref()
                    .and_then(Status::from_header_map)
                    .filter(|status| status.code() != Code::Ok)
                    .unwrap_or_else(|| {
                        Status::unavailable(format!("{} ended the AppendEntries stream", self.addr))
                    });
                return Err(Failure::answered(status));
            };
            let chunk = chunk.map_err(|e| Failure::broken(&self.addr, &e))?;
            // Lets the peer send more on this stream and connection.
            let _ = self.recv.flow_control().release_capacity(chunk.len());
            self.received.extend_from_slice(&chunk);
        }
    }

    /// The first whole reply frame received, taken off the buffer.
    fn next_frame(&mut self) -> Result<Option<BytesMut>, Failure> {
        let Some(length) = grpc_frame::declared_length(&self.received) else {
            return Ok(None);
        };
        if length > self.reply_bytes_max {
            return Err(Failure::answered(Status::out_of_range(format!(
                "the reply from {} is larger than {} bytes",
                self.addr, self.reply_bytes_max
            ))));
        }
        let whole = grpc_frame::PREFIX_BYTES + length;
        if self.received.len() < whole {
            return Ok(None);
        }
        Ok(Some(self.received.split_to(whole)))
    }
}

/// Why a call failed, and whether its connection is to be dropped.
struct Failure {
    status: Status,
    broken: bool,
}

impl Failure {
    /// A transport error on the connection to `addr`.
    fn broken(addr: &str, e: &h2::Error) -> Failure {
        Failure {
            status: Status::unavailable(format!("HTTP/2 to {addr}: {e}")),
            broken: true,
        }
    }

    fn answered(status: Status) -> Failure {
        Failure {
            status,
            broken: false,
        }
    }
}

/// The refusal an answer's head carries, if any: an HTTP status other
/// than 200, or a "trailers-only" answer's gRPC status in its headers.
fn refused_in_head(parts: &http::response::Parts) -> Result<(), Failure> {
    if parts.status != http::StatusCode::OK {
        return Err(Failure::answered(status_of_http(parts.status)));
    }
    match Status::from_header_map(&parts.headers) {
        Some(status) if status.code() != Code::Ok => Err(Failure::answered(status)),
        _ => Ok(()),
    }
}

/// The one uncompressed `RaftReply` in `frame`.
fn decode_reply(frame: &[u8]) -> Result<RaftReply, Status> {
    grpc_frame::decode(frame).map_err(|e| Status::internal(format!("bad reply from the peer: {e}")))
}

/// The gRPC status an HTTP status other than 200 stands for, as gRPC's
/// HTTP mapping has it.
fn status_of_http(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("HTTP status {status} from the peer"))
}

#[cfg(test)]
#[path = "peer_call_tests.rs"]
mod tests;
