//! One request on a new HTTP/2 connection, with blocking I/O and no
//! runtime: what `sbatch` needs for its one gRPC call.
//!
//! Why not the `h2` crate: a submit process makes exactly one call, and a
//! tokio runtime (its epoll set, wakeups and the connection task) was most
//! of what this binary did itself (BENCHMARKS.md, "Slurm peer"). One
//! request on one stream needs little of HTTP/2 (RFC 9113): the preface
//! and SETTINGS, acknowledging the server's SETTINGS and PINGs, the
//! request's HEADERS and its DATA within the server's flow-control
//! windows, then the answer's frames until its stream ends.
//!
//! Our header block uses literal fields without Huffman coding or
//! indexing, which every decoder accepts. The answer's header blocks are
//! decoded with a whole HPACK decoder (`hpack`): a server may use all of
//! HPACK, Huffman strings and its dynamic table included.
//!
//! Bounds: the answer's body fits the initial receive window (this side
//! never grants more), header blocks are at most [`HEADER_BLOCK_BYTES_MAX`],
//! and at most [`FRAMES_MAX`] frames are read. Every read and write is
//! bounded by the caller's deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::hpack;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length, type, flags and stream id.
const FRAME_HEAD_BYTES: usize = 9;
/// The largest frame payload every peer accepts, and the largest this side
/// accepts: it never advertises more (RFC 9113 §6.5.2).
const FRAME_PAYLOAD_BYTES_DEFAULT: usize = 16_384;
/// The largest frame payload a peer may announce (2^24 - 1).
const FRAME_PAYLOAD_BYTES_LIMIT: u32 = (1 << 24) - 1;
/// Every flow-control window starts here (RFC 9113 §6.9.2).
const WINDOW_BYTES_INITIAL: i64 = 65_535;
/// No flow-control window may grow past 2^31 - 1.
const WINDOW_BYTES_LIMIT: i64 = (1 << 31) - 1;
/// The answer's body fits the window this side grants: it never sends a
/// WINDOW_UPDATE.
pub const ANSWER_BYTES_MAX: usize = WINDOW_BYTES_INITIAL as usize;
/// Largest header block (with its CONTINUATIONs) accepted from the server.
pub const HEADER_BLOCK_BYTES_MAX: usize = 64 * 1024;
/// Frames read at most before the answer must be complete. A unary answer
/// takes a handful; the bound is for a server that never ends it.
const FRAMES_MAX: usize = 4_096;
/// The one stream this connection opens.
const STREAM: u32 = 1;

/// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

/// Frame flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// SETTINGS parameters.
const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// Error code of a stream the server did not process (safe to retry).
const REFUSED_STREAM: u32 = 0x7;

/// What to send.
pub struct Request<'a> {
    /// `host:port`, sent as `:authority`.
    pub authority: &'a str,
    /// Sent as `:path`.
    pub path: &'a str,
    /// More header fields, names in lower case. A field whose name is in
    /// [`SENSITIVE`] is marked never to be indexed.
    pub fields: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// Fields a proxy or server must never put in a compression table.
const SENSITIVE: &[&str] = &["authorization"];

/// The server's answer.
#[derive(Debug)]
pub struct Answer {
    /// The final `:status`.
    pub status: u16,
    pub headers: HeaderMap,
    /// `None` when the stream ended with the headers or the body.
    pub trailers: Option<HeaderMap>,
    pub body: Vec<u8>,
}

/// Why a call has no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("no answer before the deadline")]
    TimedOut,
    #[error("the connection closed before the answer ended")]
    Closed,
    #[error("the server refused the request before processing it")]
    Refused,
    #[error("the server reset the request (HTTP/2 error code {0:#x})")]
    Reset(u32),
    #[error("the server is closing the connection (HTTP/2 error code {0:#x})")]
    GoingAway(u32),
    #[error("HTTP/2 protocol error from the server: {0}")]
    Protocol(&'static str),
    #[error("the answer's header block: {0}")]
    HeaderBlock(String),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
}

/// Sends `request` as the first and only stream of the new connection
/// `tcp` and reads its answer, all before `deadline`.
pub fn call(
    tcp: &mut TcpStream,
    request: &Request,
    deadline: Instant,
) -> Result<Answer, CallError> {
    let mut conn = Conn::new(request.body);
    let mut out = Vec::with_capacity(
        PREFACE.len() + 4 * FRAME_HEAD_BYTES + 64 + request.body.len().min(1 << 16),
    );
    out.extend_from_slice(PREFACE);
    // Push off: this side would have to refuse every promised stream.
    put_frame_head(&mut out, 6, SETTINGS, 0, 0);
    out.extend_from_slice(&SETTINGS_ENABLE_PUSH.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    put_header_block(&mut out, &encode_request(request), request.body.is_empty());
    conn.put_body(&mut out);
    let mut inbound = Vec::with_capacity(FRAME_HEAD_BYTES + FRAME_PAYLOAD_BYTES_DEFAULT);
    for _ in 0..FRAMES_MAX {
        if !out.is_empty() {
            write_all(tcp, &out, deadline)?;
            out.clear();
        }
        let Some(head) = next_frame(tcp, &mut inbound, deadline)? else {
            return Err(conn.closed());
        };
        let frame_end = FRAME_HEAD_BYTES + head.length;
        if let Some(answer) =
            conn.on_frame(head, &inbound[FRAME_HEAD_BYTES..frame_end], &mut out)?
        {
            return Ok(answer);
        }
        inbound.drain(..frame_end);
        conn.put_body(&mut out);
    }
    Err(CallError::Protocol("the answer did not end"))
}

/// A frame's first nine bytes.
#[derive(Debug, Clone, Copy)]
struct FrameHead {
    length: usize,
    kind: u8,
    flags: u8,
    stream: u32,
}

/// The state of the one exchange.
struct Conn<'a> {
    /// Body bytes not sent yet.
    body_left: &'a [u8],
    /// Send windows: the connection's and the stream's.
    conn_window: i64,
    stream_window: i64,
    /// The stream window the server's SETTINGS set for new streams.
    initial_window: i64,
    frame_payload_max: usize,
    /// A header block waiting for its CONTINUATIONs, and whether it ends
    /// the stream.
    block: Option<(Vec<u8>, bool)>,
    decoder: hpack::Decoder,
    /// The final headers, once received.
    head: Option<(u16, HeaderMap)>,
    answer_body: Vec<u8>,
    /// The error code of a GOAWAY that still lets our stream finish.
    going_away: Option<u32>,
}

impl<'a> Conn<'a> {
    fn new(body: &'a [u8]) -> Conn<'a> {
        Conn {
            body_left: body,
            conn_window: WINDOW_BYTES_INITIAL,
            stream_window: WINDOW_BYTES_INITIAL,
            initial_window: WINDOW_BYTES_INITIAL,
            frame_payload_max: FRAME_PAYLOAD_BYTES_DEFAULT,
            block: None,
            decoder: hpack::Decoder::new(),
            head: None,
            answer_body: Vec::new(),
            going_away: None,
        }
    }

    /// Appends DATA frames for as much of the body as the windows allow;
    /// the last one ends the stream.
    fn put_body(&mut self, out: &mut Vec<u8>) {
        while !self.body_left.is_empty() {
            let window = self.conn_window.min(self.stream_window);
            let Ok(window) = usize::try_from(window) else {
                return;
            };
            let n = self.body_left.len().min(window).min(self.frame_payload_max);
            if n == 0 {
                return;
            }
            let (now, rest) = self.body_left.split_at(n);
            let flags = if rest.is_empty() { END_STREAM } else { 0 };
            put_frame_head(out, n, DATA, flags, STREAM);
            out.extend_from_slice(now);
            self.body_left = rest;
            self.conn_window -= n as i64;
            self.stream_window -= n as i64;
        }
    }

    /// Why the connection's end came before the answer's.
    fn closed(&self) -> CallError {
        match self.going_away {
            Some(code) if code != 0 => CallError::GoingAway(code),
            _ => CallError::Closed,
        }
    }

    /// Handles one frame, appending what it calls for to `out`; the
    /// answer once the frame ended it.
    fn on_frame(
        &mut self,
        head: FrameHead,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Answer>, CallError> {
        if self.block.is_some() && (head.kind != CONTINUATION || head.stream != STREAM) {
            return Err(CallError::Protocol("a header block was interrupted"));
        }
        match head.kind {
            SETTINGS => self.on_settings(head, payload, out)?,
            PING => {
                if head.stream != 0 || payload.len() != 8 {
                    return Err(CallError::Protocol("a malformed PING"));
                }
                if head.flags & ACK == 0 {
                    put_frame_head(out, 8, PING, ACK, 0);
                    out.extend_from_slice(payload);
                }
            }
            WINDOW_UPDATE => self.on_window_update(head, payload)?,
            GOAWAY => {
                let (last, code) = two_words(payload)
                    .ok_or(CallError::Protocol("a GOAWAY shorter than 8 bytes"))?;
                if last & 0x7fff_ffff < STREAM {
                    return Err(CallError::Refused);
                }
                self.going_away = Some(code);
            }
            PUSH_PROMISE => return Err(CallError::Protocol("a push, which was turned off")),
            _ if head.stream != STREAM => {}
            RST_STREAM => {
                let code = word(payload)
                    .ok_or(CallError::Protocol("a RST_STREAM shorter than 4 bytes"))?;
                return Err(if code == REFUSED_STREAM {
                    CallError::Refused
                } else {
                    CallError::Reset(code)
                });
            }
            DATA => {
                if self.head.is_none() {
                    return Err(CallError::Protocol("DATA before the answer's headers"));
                }
                let data = unpad(head.flags, payload)?;
                if self.answer_body.len() + data.len() > ANSWER_BYTES_MAX {
                    return Err(CallError::TooLarge(ANSWER_BYTES_MAX));
                }
                self.answer_body.extend_from_slice(data);
                if head.flags & END_STREAM != 0 {
                    return Ok(Some(self.answer(None)));
                }
            }
            HEADERS => {
                let fragment = headers_fragment(head.flags, payload)?;
                self.block = Some((Vec::new(), head.flags & END_STREAM != 0));
                return self.on_fragment(head.flags, fragment);
            }
            CONTINUATION => {
                if self.block.is_none() {
                    return Err(CallError::Protocol("a CONTINUATION with no header block"));
                }
                return self.on_fragment(head.flags, payload);
            }
            // Unknown types, and PRIORITY, are ignored (RFC 9113 §4.1, §5.3.2).
            _ => {}
        }
        Ok(None)
    }

    fn on_settings(
        &mut self,
        head: FrameHead,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), CallError> {
        if head.stream != 0 || !payload.len().is_multiple_of(6) {
            return Err(CallError::Protocol("a malformed SETTINGS"));
        }
        if head.flags & ACK != 0 {
            return Ok(());
        }
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > WINDOW_BYTES_LIMIT {
                        return Err(CallError::Protocol("an initial window past 2^31-1"));
                    }
                    self.stream_window += value - self.initial_window;
                    self.initial_window = value;
                    if self.stream_window > WINDOW_BYTES_LIMIT {
                        return Err(CallError::Protocol("a window past 2^31-1"));
                    }
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(FRAME_PAYLOAD_BYTES_DEFAULT as u32..=FRAME_PAYLOAD_BYTES_LIMIT)
                        .contains(&value)
                    {
                        return Err(CallError::Protocol("a frame size limit out of range"));
                    }
                    self.frame_payload_max = value as usize;
                }
                // The others bind features this side does not use: its
                // header block indexes nothing and it opens one stream.
                _ => {}
            }
        }
        put_frame_head(out, 0, SETTINGS, ACK, 0);
        Ok(())
    }

    fn on_window_update(&mut self, head: FrameHead, payload: &[u8]) -> Result<(), CallError> {
        let increment = word(payload)
            .filter(|_| payload.len() == 4)
            .map(|w| i64::from(w & 0x7fff_ffff))
            .ok_or(CallError::Protocol("a WINDOW_UPDATE not 4 bytes long"))?;
        if increment == 0 {
            return Err(CallError::Protocol("a WINDOW_UPDATE of 0"));
        }
        let window = match head.stream {
            0 => &mut self.conn_window,
            STREAM => &mut self.stream_window,
            _ => return Ok(()),
        };
        *window += increment;
        if *window > WINDOW_BYTES_LIMIT {
            return Err(CallError::Protocol("a window past 2^31-1"));
        }
        Ok(())
    }

    /// Adds a fragment to the open header block and decodes the block once
    /// it ended.
    fn on_fragment(&mut self, flags: u8, fragment: &[u8]) -> Result<Option<Answer>, CallError> {
        let Some((block, ends_stream)) = self.block.as_mut() else {
            return Err(CallError::Protocol("a header fragment with no block"));
        };
        if block.len() + fragment.len() > HEADER_BLOCK_BYTES_MAX {
            return Err(CallError::TooLarge(HEADER_BLOCK_BYTES_MAX));
        }
        block.extend_from_slice(fragment);
        if flags & END_HEADERS == 0 {
            return Ok(None);
        }
        let ends_stream = *ends_stream;
        let Some((block, _)) = self.block.take() else {
            return Ok(None);
        };
        let (status, fields) = decode_block(&mut self.decoder, &block)?;
        if self.head.is_none() {
            let status = status.ok_or(CallError::Protocol("headers without :status"))?;
            // An informational answer (1xx) comes before the final one.
            if (100..200).contains(&status) && !ends_stream {
                return Ok(None);
            }
            self.head = Some((status, fields));
            return Ok(ends_stream.then(|| self.answer(None)));
        }
        if !ends_stream {
            return Err(CallError::Protocol("trailers that do not end the stream"));
        }
        Ok(Some(self.answer(Some(fields))))
    }

    fn answer(&mut self, trailers: Option<HeaderMap>) -> Answer {
        let (status, headers) = self.head.take().unwrap_or_default();
        Answer {
            status,
            headers,
            trailers,
            body: std::mem::take(&mut self.answer_body),
        }
    }
}

/// The request's header block: literal fields, no Huffman coding, no
/// indexing (RFC 7541 §6.2.2, §6.2.3).
fn encode_request(request: &Request) -> Vec<u8> {
    let mut block = Vec::with_capacity(64 + request.path.len() + request.authority.len());
    // Indexed static entries 3 and 6: `:method: POST`, `:scheme: http`.
    block.extend_from_slice(&[0x80 | 3, 0x80 | 6]);
    // Literal values for the static names 4 (`:path`) and 1 (`:authority`).
    hpack::put_integer(&mut block, 0x00, 4, 4);
    hpack::put_string(&mut block, request.path.as_bytes());
    hpack::put_integer(&mut block, 0x00, 4, 1);
    hpack::put_string(&mut block, request.authority.as_bytes());
    for (name, value) in request.fields {
        let never_indexed = SENSITIVE.contains(name);
        block.push(if never_indexed { 0x10 } else { 0x00 });
        hpack::put_string(&mut block, name.as_bytes());
        hpack::put_string(&mut block, value.as_bytes());
    }
    block
}

/// HEADERS, then as many CONTINUATIONs as the block needs at the default
/// frame size.
fn put_header_block(out: &mut Vec<u8>, block: &[u8], end_stream: bool) {
    let mut chunks = block.chunks(FRAME_PAYLOAD_BYTES_DEFAULT).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        put_frame_head(out, 0, HEADERS, flags | END_HEADERS, STREAM);
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        put_frame_head(out, chunk.len(), kind, flags, STREAM);
        out.extend_from_slice(chunk);
        kind = CONTINUATION;
        flags = 0;
    }
}

fn put_frame_head(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(length <= FRAME_PAYLOAD_BYTES_LIMIT as usize);
    let length = (length as u32).to_be_bytes();
    out.extend_from_slice(&length[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Two big-endian 32-bit words at the start of `payload`.
fn two_words(payload: &[u8]) -> Option<(u32, u32)> {
    Some((word(payload)?, word(payload.get(4..)?)?))
}

/// The big-endian 32-bit word at the start of `bytes`.
fn word(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

/// A padded frame's content (RFC 9113 §6.1).
fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], CallError> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload
        .split_first()
        .ok_or(CallError::Protocol("a padded frame with no pad length"))?;
    rest.len()
        .checked_sub(usize::from(pad))
        .map(|end| &rest[..end])
        .ok_or(CallError::Protocol("padding longer than the frame"))
}

/// A HEADERS frame's block fragment, past its padding and priority.
fn headers_fragment(flags: u8, payload: &[u8]) -> Result<&[u8], CallError> {
    let content = unpad(flags, payload)?;
    if flags & PRIORITY == 0 {
        return Ok(content);
    }
    content
        .get(5..)
        .ok_or(CallError::Protocol("a HEADERS shorter than its priority"))
}

/// `:status` and the other fields of a decoded header block.
fn decode_block(
    decoder: &mut hpack::Decoder,
    block: &[u8],
) -> Result<(Option<u16>, HeaderMap), CallError> {
    let mut status = None;
    let mut fields = HeaderMap::new();
    let mut bad: Option<String> = None;
    decoder
        .decode(block, |name, value| {
            if bad.is_some() {
                return;
            }
            if name == b":status" {
                status = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse::<u16>().ok());
                if status.is_none() {
                    bad = Some("a :status that is not a number".into());
                }
                return;
            }
            match (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
                (Ok(name), Ok(value)) => {
                    fields.append(name, value);
                }
                _ => bad = Some(format!("a field {:?}", String::from_utf8_lossy(name))),
            }
        })
        .map_err(|e| CallError::HeaderBlock(e.to_string()))?;
    match bad {
        Some(why) => Err(CallError::HeaderBlock(why)),
        None => Ok((status, fields)),
    }
}

/// Reads from `tcp` into `inbound` until it starts with a whole frame, and
/// that frame's head; the frame stays in `inbound` for the caller to read
/// and drain. `None` when the connection ended cleanly between frames.
fn next_frame(
    tcp: &mut TcpStream,
    inbound: &mut Vec<u8>,
    deadline: Instant,
) -> Result<Option<FrameHead>, CallError> {
    loop {
        if inbound.len() >= FRAME_HEAD_BYTES {
            let head = FrameHead {
                length: usize::from(inbound[0]) << 16
                    | usize::from(inbound[1]) << 8
                    | usize::from(inbound[2]),
                kind: inbound[3],
                flags: inbound[4],
                stream: u32::from_be_bytes([inbound[5], inbound[6], inbound[7], inbound[8]])
                    & 0x7fff_ffff,
            };
            if head.length > FRAME_PAYLOAD_BYTES_DEFAULT {
                return Err(CallError::Protocol("a frame larger than this side accepts"));
            }
            if inbound.len() >= FRAME_HEAD_BYTES + head.length {
                return Ok(Some(head));
            }
        }
        let had = inbound.len();
        inbound.resize(had + FRAME_HEAD_BYTES + FRAME_PAYLOAD_BYTES_DEFAULT, 0);
        let read = read_some(tcp, &mut inbound[had..], deadline);
        inbound.truncate(had + *read.as_ref().unwrap_or(&0));
        match read? {
            0 if had == 0 => return Ok(None),
            0 => return Err(CallError::Closed),
            _ => {}
        }
    }
}

/// The time left before `deadline`, or `TimedOut`.
fn time_left(deadline: Instant) -> Result<std::time::Duration, CallError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(CallError::TimedOut);
    }
    Ok(left)
}

fn timed_out(err: io::Error) -> CallError {
    match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => CallError::TimedOut,
        _ => CallError::Io(err),
    }
}

fn read_some(tcp: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, CallError> {
    tcp.set_read_timeout(Some(time_left(deadline)?))?;
    loop {
        match tcp.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(timed_out(e)),
        }
    }
}

fn write_all(tcp: &mut TcpStream, bytes: &[u8], deadline: Instant) -> Result<(), CallError> {
    tcp.set_write_timeout(Some(time_left(deadline)?))?;
    tcp.write_all(bytes).map_err(timed_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener};
    use std::time::Duration;

    const PATH: &str = "/berth.v1.BerthApi/SubmitJob";

    fn deadline_ms(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    fn request<'a>(
        authority: &'a str,
        fields: &'a [(&'a str, &'a str)],
        body: &'a [u8],
    ) -> Request<'a> {
        Request {
            authority,
            path: PATH,
            fields,
            body,
        }
    }

    /// An `h2` server on a loopback port that reads the one request of
    /// one connection whole and answers it with `answer`, which gets the
    /// request's head, the body's length and the stream to respond on.
    fn h2_server<F>(answer: F) -> (SocketAddr, std::thread::JoinHandle<()>)
    where
        F: FnOnce(http::request::Parts, usize, h2::server::SendResponse<bytes::Bytes>)
            + Send
            + 'static,
    {
        crate::test_server::on_thread(move |listener| async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(socket).await.unwrap();
            let (request, respond) = conn.accept().await.unwrap().unwrap();
            let (head, mut body) = request.into_parts();
            // Drive the connection while the body is read.
            let driver = tokio::spawn(async move {
                while let Some(next) = conn.accept().await {
                    if next.is_err() {
                        break;
                    }
                }
            });
            let mut length = 0;
            while let Some(chunk) = body.data().await {
                let chunk = chunk.unwrap();
                length += chunk.len();
                body.flow_control().release_capacity(chunk.len()).unwrap();
            }
            answer(head, length, respond);
            // Until the client closes.
            let _ = driver.await;
        })
    }

    /// A server that writes `bytes` to its one connection, then reads
    /// until the client closes it.
    fn raw_server(bytes: Vec<u8>) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            socket.write_all(&bytes).unwrap();
            let mut sink = Vec::new();
            let _ = socket.read_to_end(&mut sink);
        });
        (addr, server)
    }

    /// One call to the server at `addr`, then waits for `server` to end.
    fn call_once(
        (addr, server): (SocketAddr, std::thread::JoinHandle<()>),
        fields: &[(&str, &str)],
        body: &[u8],
        deadline: Instant,
    ) -> Result<Answer, CallError> {
        let authority = addr.to_string();
        let mut tcp = TcpStream::connect(addr).unwrap();
        let got = call(&mut tcp, &request(&authority, fields, body), deadline);
        drop(tcp);
        server.join().unwrap();
        got
    }

    #[test]
    fn a_large_body_flows_and_the_answer_comes_with_trailers() {
        let (addr, server) = h2_server(|head, length, mut respond| {
            assert_eq!(head.method, http::Method::POST);
            assert_eq!(head.uri.path(), PATH);
            assert_eq!(head.headers["content-type"], "application/grpc");
            assert_eq!(head.headers["te"], "trailers");
            assert_eq!(head.headers["authorization"], "Bearer secret");
            let answer = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .header("x-body-bytes", length.to_string())
                .body(())
                .unwrap();
            let mut stream = respond.send_response(answer, false).unwrap();
            stream
                .send_data(bytes::Bytes::from_static(b"hello"), false)
                .unwrap();
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            trailers.insert("grpc-message", HeaderValue::from_static("all%20good"));
            // Sent again: h2 refers to it in its dynamic table.
            trailers.insert(
                "x-body-bytes",
                HeaderValue::from_str(&length.to_string()).unwrap(),
            );
            stream.send_trailers(trailers).unwrap();
        });
        // Three times the initial window: the body waits for WINDOW_UPDATEs.
        let body = vec![7u8; 3 * 65_535 + 11];
        let fields = [
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("authorization", "Bearer secret"),
        ];
        let answer = call_once((addr, server), &fields, &body, deadline_ms(10_000)).unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.headers["x-body-bytes"],
            body.len().to_string().as_str()
        );
        assert_eq!(answer.body, b"hello");
        let trailers = answer.trailers.unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers["grpc-message"], "all%20good");
        assert_eq!(trailers["x-body-bytes"], body.len().to_string().as_str());
    }

    #[test]
    fn a_trailers_only_answer_ends_with_its_headers() {
        let (addr, server) = h2_server(|_, length, mut respond| {
            assert_eq!(length, 3);
            let answer = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .header("grpc-status", "5")
                .header("grpc-message", "no%20such%20job")
                .body(())
                .unwrap();
            respond.send_response(answer, true).unwrap();
        });
        let answer = call_once((addr, server), &[], b"abc", deadline_ms(10_000)).unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.headers["grpc-status"], "5");
        assert!(answer.trailers.is_none());
        assert!(answer.body.is_empty());
    }

    #[test]
    fn a_refused_stream_is_named_as_such() {
        let (addr, server) = h2_server(|_, _, mut respond| {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
        });
        let err = call_once((addr, server), &[], b"x", deadline_ms(10_000)).unwrap_err();
        assert!(matches!(err, CallError::Refused), "{err:?}");
    }

    #[test]
    fn a_goaway_before_the_stream_refuses_it() {
        let mut bytes = Vec::new();
        put_frame_head(&mut bytes, 0, SETTINGS, 0, 0);
        put_frame_head(&mut bytes, 8, GOAWAY, 0, 0);
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let (addr, server) = raw_server(bytes);
        let err = call_once((addr, server), &[], b"x", deadline_ms(10_000)).unwrap_err();
        assert!(matches!(err, CallError::Refused), "{err:?}");
    }

    /// SETTINGS, then a header block (`:status: 200`, `x-a: 1`) split over
    /// HEADERS and a CONTINUATION, with `between` written between the two.
    fn split_answer(between: &[u8]) -> Vec<u8> {
        let block = [0x88, 0x00, 0x03, b'x', b'-', b'a', 0x01, b'1'];
        let mut bytes = Vec::new();
        put_frame_head(&mut bytes, 0, SETTINGS, 0, 0);
        put_frame_head(&mut bytes, 3, HEADERS, 0, STREAM);
        bytes.extend_from_slice(&block[..3]);
        bytes.extend_from_slice(between);
        put_frame_head(
            &mut bytes,
            block.len() - 3,
            CONTINUATION,
            END_HEADERS,
            STREAM,
        );
        bytes.extend_from_slice(&block[3..]);
        put_frame_head(&mut bytes, 2, DATA, END_STREAM, STREAM);
        bytes.extend_from_slice(b"hi");
        bytes
    }

    #[test]
    fn a_header_block_continues_and_must_not_be_interrupted() {
        let mut ping = Vec::new();
        put_frame_head(&mut ping, 8, PING, 0, 0);
        ping.extend_from_slice(&[1; 8]);
        for (between, ok) in [(Vec::new(), true), (ping, false)] {
            let (addr, server) = raw_server(split_answer(&between));
            let got = call_once((addr, server), &[], b"x", deadline_ms(10_000));
            if ok {
                let answer = got.unwrap();
                assert_eq!(answer.status, 200);
                assert_eq!(answer.headers["x-a"], "1");
                assert_eq!(answer.body, b"hi");
                assert!(answer.trailers.is_none());
            } else {
                let err = got.unwrap_err();
                assert!(err.to_string().contains("interrupted"), "{err}");
            }
        }
    }

    #[test]
    fn a_silent_server_runs_into_the_deadline() {
        let (addr, server) = raw_server(Vec::new());
        let err = call_once((addr, server), &[], b"x", deadline_ms(200)).unwrap_err();
        assert!(matches!(err, CallError::TimedOut), "{err:?}");
    }

    #[test]
    fn an_oversized_or_truncated_frame_is_refused() {
        let mut oversized = Vec::new();
        put_frame_head(
            &mut oversized,
            FRAME_PAYLOAD_BYTES_DEFAULT + 1,
            DATA,
            0,
            STREAM,
        );
        let mut truncated = Vec::new();
        put_frame_head(&mut truncated, 100, SETTINGS, 0, 0);
        truncated.extend_from_slice(&[0; 10]);
        for (bytes, want) in [(oversized, "larger"), (truncated, "closed")] {
            // The server ends its side after writing, so the read sees the end.
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = std::thread::spawn(move || {
                let (mut socket, _) = listener.accept().unwrap();
                socket.write_all(&bytes).unwrap();
                socket.shutdown(std::net::Shutdown::Write).unwrap();
                let mut sink = Vec::new();
                let _ = socket.read_to_end(&mut sink);
            });
            let err = call_once((addr, server), &[], b"x", deadline_ms(10_000)).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn the_request_block_decodes_to_the_request() {
        let long = "v".repeat(300);
        let fields = [
            ("te", "trailers"),
            ("authorization", "Bearer t"),
            ("x-long", long.as_str()),
        ];
        let block = encode_request(&Request {
            authority: "node-1:7101",
            path: PATH,
            fields: &fields,
            body: b"",
        });
        let decoded = loona_hpack::Decoder::new().decode(&block).unwrap();
        let decoded: Vec<(String, String)> = decoded
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        let want: Vec<(String, String)> = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", "node-1:7101"),
            ("te", "trailers"),
            ("authorization", "Bearer t"),
            ("x-long", long.as_str()),
        ]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
        assert_eq!(decoded, want);
        // The token is marked never to be indexed (RFC 7541 §6.2.3).
        assert!(block.windows(15).any(|w| w == b"\x10\x0dauthorization"));
    }

    #[test]
    fn random_frames_never_panic_and_keep_the_windows_bounded() {
        // Seeded: the same frames every run.
        let mut next = crate::seeded_numbers(0x2545_f491_4f6c_dd1du64);
        let body = vec![1u8; 100_000];
        for _ in 0..2_000 {
            let mut conn = Conn::new(&body);
            let mut out = Vec::new();
            conn.put_body(&mut out);
            for _ in 0..16 {
                let payload: Vec<u8> = (0..next() % 24).map(|_| next() as u8).collect();
                let head = FrameHead {
                    length: payload.len(),
                    kind: (next() % 11) as u8,
                    flags: next() as u8,
                    stream: (next() % 3) as u32,
                };
                out.clear();
                match conn.on_frame(head, &payload, &mut out) {
                    Ok(None) => conn.put_body(&mut out),
                    Ok(Some(_)) | Err(_) => break,
                }
                assert!(conn.conn_window <= WINDOW_BYTES_LIMIT);
                assert!(conn.stream_window <= WINDOW_BYTES_LIMIT);
                assert!(conn.answer_body.len() <= ANSWER_BYTES_MAX);
            }
        }
    }

    #[test]
    fn a_settings_change_may_not_push_a_window_past_its_limit() {
        let mut conn = Conn::new(b"");
        let mut out = Vec::new();
        let grow = |stream: u32, by: u32| {
            (
                FrameHead {
                    length: 4,
                    kind: WINDOW_UPDATE,
                    flags: 0,
                    stream,
                },
                by.to_be_bytes().to_vec(),
            )
        };
        let (head, payload) = grow(STREAM, (1 << 31) - 1 - 65_535);
        conn.on_frame(head, &payload, &mut out).unwrap();
        assert_eq!(conn.stream_window, WINDOW_BYTES_LIMIT);
        let mut settings = SETTINGS_INITIAL_WINDOW_SIZE.to_be_bytes().to_vec();
        settings.extend_from_slice(&65_536u32.to_be_bytes());
        let head = FrameHead {
            length: 6,
            kind: SETTINGS,
            flags: 0,
            stream: 0,
        };
        let err = conn.on_frame(head, &settings, &mut out).unwrap_err();
        assert!(err.to_string().contains("window"), "{err}");
        let (head, payload) = grow(0, 0);
        assert!(conn.on_frame(head, &payload, &mut out).is_err());
    }

    #[test]
    fn padding_is_taken_off_and_bad_padding_refused() {
        assert_eq!(unpad(PADDED, &[2, b'a', b'b', 0, 0]).unwrap(), b"ab");
        assert_eq!(unpad(0, b"ab").unwrap(), b"ab");
        assert!(unpad(PADDED, &[3, b'a', 0]).is_err());
        assert!(unpad(PADDED, &[]).is_err());
        assert_eq!(
            headers_fragment(PRIORITY, &[0, 0, 0, 0, 9, b'h']).unwrap(),
            b"h"
        );
        assert!(headers_fragment(PRIORITY, &[0, 0]).is_err());
    }
}
