//! The server side of the one-shot submit protocol
//! (`berth_proto::submit_wire`): one `SubmitJob` read from a connection of
//! its own, answered through the gRPC API's own `submit_job` (so the
//! token, the forwarding to the leader and the status codes are the
//! API's), written back in one write that leaves with the close's FIN
//! (see `Delivery`).
//!
//! `listener` hands a connection here when its first byte is the
//! protocol's. `sbatch` uses it: a process that submits one job and exits
//! would otherwise spend most of its exchange on HTTP/2's handshake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::SubmitJobRequest;
use berth_proto::submit_wire::{self, WireError};
use prost::Message;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::api_service::ApiService;

/// Counts one-shot connections by how they ended: `answered` (the code
/// is in the API's timing histogram), `malformed` (answered
/// INVALID_ARGUMENT), `unread` (no whole request) or `unwritten` (the
/// client left before its answer).
pub const ONE_SHOT_SUBMITS_TOTAL: &str = "berth_one_shot_submits_total";

/// Longest a client may take to send its whole request once connected.
const REQUEST_WAIT: Duration = Duration::from_secs(10);
/// Longest the answer may take, so a submit stuck behind a lost leader
/// does not hold its task for ever. Clients give up sooner
/// (`berth_client::REQUEST_TIMEOUT_MS`, 10 s) and retry under the same
/// request id, which the state machine answers once.
const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// What one read asks for: a whole usual request (a few hundred bytes).
const READ_CHUNK_BYTES: usize = 4096;

/// Reads one request from `stream`, answers it and closes the connection.
pub async fn serve(mut stream: TcpStream, api: Arc<ApiService>) {
    let started = Instant::now();
    let request = match tokio::time::timeout(REQUEST_WAIT, read_request(&mut stream)).await {
        Ok(Ok(request)) => request,
        Ok(Err(ReadError::Wire(e))) => {
            // A request this node cannot read: say why, as gRPC would.
            let status = Status::invalid_argument(format!("one-shot submit: {e}"));
            answer(&stream, &status_answer(&status), Delivery::Now, "malformed").await;
            return;
        }
        Ok(Err(ReadError::Io(e))) => {
            tracing::debug!(error = %e, "one-shot submit: connection failed before its request");
            metrics::counter!(ONE_SHOT_SUBMITS_TOTAL, "outcome" => "unread").increment(1);
            return;
        }
        Err(_) => {
            metrics::counter!(ONE_SHOT_SUBMITS_TOTAL, "outcome" => "unread").increment(1);
            return;
        }
    };
    let result = match tokio::time::timeout(ANSWER_WAIT, submit(&api, request)).await {
        Ok(result) => result,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {}s",
            ANSWER_WAIT.as_secs()
        ))),
    };
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    };
    crate::api_metrics::record(
        "SubmitJob".into(),
        crate::api_metrics::code_name(code as i32),
        started,
    );
    let bytes = match result {
        Ok(answer) => submit_wire::encode_answer(0, &answer.encode_to_vec()),
        Err(status) => status_answer(&status),
    };
    answer(&stream, &bytes, Delivery::WithTheClose, "answered").await;
}

/// A request read whole: its token and its decoded body.
struct OneShotRequest {
    token: Option<String>,
    body: SubmitJobRequest,
}

enum ReadError {
    /// The connection failed or closed before the request was whole.
    Io(std::io::Error),
    /// The bytes are not a request: the client is told why.
    Wire(String),
}

/// Reads the head, then exactly the token and body it announces. Usually
/// one read: the client writes its request at once.
async fn read_request(stream: &mut TcpStream) -> Result<OneShotRequest, ReadError> {
    let mut bytes: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut needed = submit_wire::REQUEST_HEAD_BYTES;
    let mut lengths = None;
    // Each round reads at least one byte or returns, and `needed` is
    // bounded by the protocol's maxima, so the loop is too.
    while bytes.len() < needed {
        bytes.reserve(needed - bytes.len());
        let read = stream.read_buf(&mut bytes).await.map_err(ReadError::Io)?;
        if read == 0 {
            return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if lengths.is_none() && bytes.len() >= submit_wire::REQUEST_HEAD_BYTES {
            let mut head = [0u8; submit_wire::REQUEST_HEAD_BYTES];
            head.copy_from_slice(&bytes[..submit_wire::REQUEST_HEAD_BYTES]);
            let (token_bytes, body_bytes) =
                submit_wire::decode_request_head(&head).map_err(wire_error)?;
            needed = submit_wire::REQUEST_HEAD_BYTES + token_bytes + body_bytes;
            lengths = Some(token_bytes);
        }
    }
    let token_bytes = lengths.unwrap_or(0);
    let rest = &bytes[submit_wire::REQUEST_HEAD_BYTES..];
    if rest.len() > needed - submit_wire::REQUEST_HEAD_BYTES {
        return Err(wire_error(WireError::Trailing {
            extra: bytes.len() - needed,
        }));
    }
    let (token, body) = submit_wire::split_request_rest(rest, token_bytes).map_err(wire_error)?;
    let body = SubmitJobRequest::decode(body)
        .map_err(|e| ReadError::Wire(format!("the body is not a SubmitJobRequest: {e}")))?;
    Ok(OneShotRequest {
        token: token.map(str::to_string),
        body,
    })
}

fn wire_error(e: WireError) -> ReadError {
    ReadError::Wire(e.to_string())
}

/// The API's own `submit_job`, with the token as gRPC would carry it.
async fn submit(
    api: &ApiService,
    request: OneShotRequest,
) -> Result<berth_proto::api::SubmitJobResponse, Status> {
    let mut call = tonic::Request::new(request.body);
    if let Some(token) = request.token {
        let value = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| Status::unauthenticated("the token is not a header value"))?;
        call.metadata_mut().insert("authorization", value);
    }
    api.submit_job(call).await.map(tonic::Response::into_inner)
}

fn status_answer(status: &Status) -> Vec<u8> {
    let code = u8::try_from(status.code() as i32).unwrap_or(Code::Unknown as u8);
    submit_wire::encode_answer(code, status.message().as_bytes())
}

/// How an answer leaves.
#[derive(Clone, Copy)]
enum Delivery {
    /// The request was read whole: the answer is held until the caller's
    /// close and goes out with the FIN in one segment (`MSG_MORE`). The
    /// client's ACK of it then rides on the client's own FIN (a socket
    /// that has received a FIN delays its ACK for the close), so a submit
    /// costs two packets fewer.
    WithTheClose,
    /// The request may not have been read whole. A close with unread
    /// bytes resets the connection and drops whatever is still queued, so
    /// the answer must leave before it.
    Now,
}

/// Writes the answer; the caller's drop of the stream closes it. A client
/// that went away is only counted.
async fn answer(stream: &TcpStream, bytes: &[u8], delivery: Delivery, outcome: &'static str) {
    let written = send_all(stream, bytes, delivery).await;
    let outcome = if written.is_ok() {
        outcome
    } else {
        "unwritten"
    };
    metrics::counter!(ONE_SHOT_SUBMITS_TOTAL, "outcome" => outcome).increment(1);
}

/// Writes all of `bytes` as `delivery` says. An answer is a few bytes to a
/// few KiB, which the socket's send buffer takes in one call; each round
/// writes at least one byte or waits for room, so the loop ends.
async fn send_all(stream: &TcpStream, bytes: &[u8], delivery: Delivery) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = match delivery {
        Delivery::WithTheClose => libc::MSG_MORE | libc::MSG_NOSIGNAL,
        Delivery::Now => libc::MSG_NOSIGNAL,
    };
    let fd = stream.as_raw_fd();
    let mut sent = 0;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        let n = stream
            .async_io(tokio::io::Interest::WRITABLE, || {
                // SAFETY: send(2) on the socket `stream` owns, reading
                // `rest`, which outlives the call.
                let n = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), flags) };
                // A negative count is an error, in errno.
                usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
            })
            .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        sent += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

    /// A connected pair: the node's side (tokio) and a blocking client.
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = std::net::TcpStream::connect(addr).expect("connect");
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let (node, _) = listener.accept().await.expect("accept");
        (node, client)
    }

    #[tokio::test]
    async fn an_answer_held_for_the_close_arrives_whole_with_the_end_of_stream() {
        let (node, mut client) = pair().await;
        let bytes = submit_wire::encode_answer(0, b"\x08\x2a");
        send_all(&node, &bytes, Delivery::WithTheClose)
            .await
            .expect("sent");
        drop(node);
        let mut got = Vec::new();
        client.read_to_end(&mut got).expect("read to the close");
        assert_eq!(got, bytes);
    }

    /// Bytes in `stream`'s send queue that the kernel has not sent yet
    /// (`SIOCOUTQNSD` from linux/sockios.h, which libc does not name).
    fn unsent_bytes(stream: &TcpStream) -> libc::c_int {
        use std::os::fd::AsRawFd;
        const SIOCOUTQNSD: libc::c_ulong = 0x894B;
        let mut unsent: libc::c_int = -1;
        // SAFETY: ioctl(2) on a socket the test owns, writing one c_int.
        let done = unsafe { libc::ioctl(stream.as_raw_fd(), SIOCOUTQNSD, &mut unsent) };
        assert_eq!(done, 0, "{}", std::io::Error::last_os_error());
        unsent
    }

    #[tokio::test]
    async fn an_answer_sent_now_leaves_before_the_close() {
        let (node, mut client) = pair().await;
        let bytes = submit_wire::encode_answer(3, b"bad head");
        send_all(&node, &bytes, Delivery::Now).await.expect("sent");
        // Not held back: a close with unread request bytes would reset the
        // connection and drop it. (An answer held for the close is let go
        // by the kernel after some 200 ms, so only this side is checked.)
        assert_eq!(unsent_bytes(&node), 0, "the answer is on its way");
        let mut got = vec![0u8; bytes.len()];
        client.read_exact(&mut got).expect("the answer");
        assert_eq!(got, bytes);
        drop(node);
    }
}
