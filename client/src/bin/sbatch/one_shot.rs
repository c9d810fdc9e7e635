//! The client side of the one-shot submit protocol
//! (`berth_proto::submit_wire`): the request in one write, the answer
//! read until it is whole, in blocking I/O.
//!
//! A server that does not speak the protocol (a `berthd` older than it)
//! answers with HTTP/2's SETTINGS frame instead, having read no request:
//! that is [`OneShotError::NotSpoken`], and the caller asks again over
//! HTTP/2.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use berth_proto::submit_wire::{self, WireError};

/// Why a one-shot exchange gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum OneShotError {
    /// The server speaks another protocol; nothing was submitted.
    #[error("the server does not speak the one-shot protocol: {0}")]
    NotSpoken(WireError),
    /// The answer broke the protocol.
    #[error("bad answer: {0}")]
    Wire(WireError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the connection closed after {0} bytes of the answer")]
    Closed(usize),
    #[error("no answer before the deadline")]
    Deadline,
}

/// Writes `request` (from `submit_wire::encode_request`) and reads the
/// answer: its gRPC code and payload.
pub fn call(
    tcp: &mut TcpStream,
    request: &[u8],
    deadline: Instant,
) -> Result<(u8, Vec<u8>), OneShotError> {
    tcp.write_all(request)?;
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    // Each round reads at least one byte or ends, and the answer is
    // bounded (`answer_bytes`), so the loop is too.
    loop {
        let needed = match submit_wire::answer_bytes(&answer) {
            Ok(needed) => needed,
            Err(e @ WireError::NotSpoken(_)) => return Err(OneShotError::NotSpoken(e)),
            Err(e) => return Err(OneShotError::Wire(e)),
        };
        if let Some(needed) = needed {
            if answer.len() >= needed {
                let (code, payload) =
                    submit_wire::decode_answer(&answer).map_err(OneShotError::Wire)?;
                return Ok((code, payload.to_vec()));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(OneShotError::Deadline);
        }
        tcp.set_read_timeout(Some(left))?;
        match tcp.read(&mut chunk) {
            Ok(0) => return Err(OneShotError::Closed(answer.len())),
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(OneShotError::Deadline)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    /// A server on loopback that reads `read` bytes and writes `reply`
    /// in `pieces` writes, then closes.
    fn server(
        read: usize,
        reply: Vec<u8>,
        pieces: usize,
    ) -> (String, std::thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut got = vec![0u8; read];
            conn.read_exact(&mut got).unwrap();
            let size = reply.len().div_ceil(pieces.max(1)).max(1);
            for piece in reply.chunks(size) {
                conn.write_all(piece).unwrap();
                conn.flush().unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
            got
        });
        (addr, handle)
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn an_answer_in_pieces_is_read_whole() {
        let request = submit_wire::encode_request(Some("tok"), b"job").unwrap();
        let (addr, handle) = server(request.len(), submit_wire::encode_answer(0, b"\x08\x07"), 5);
        let mut tcp = TcpStream::connect(addr).unwrap();
        let (code, payload) = call(&mut tcp, &request, deadline()).unwrap();
        assert_eq!((code, payload.as_slice()), (0, &b"\x08\x07"[..]));
        assert_eq!(
            handle.join().unwrap(),
            request,
            "the request went out as encoded"
        );
    }

    #[test]
    fn an_http2_server_is_told_apart() {
        let request = submit_wire::encode_request(None, b"job").unwrap();
        // What a server speaking only HTTP/2 writes first: a SETTINGS frame.
        let settings = vec![0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        let (addr, _handle) = server(request.len(), settings, 1);
        let mut tcp = TcpStream::connect(addr).unwrap();
        let e = call(&mut tcp, &request, deadline()).unwrap_err();
        assert!(matches!(e, OneShotError::NotSpoken(_)), "{e}");
    }

    #[test]
    fn a_cut_answer_is_named() {
        let request = submit_wire::encode_request(None, b"job").unwrap();
        let mut answer = submit_wire::encode_answer(14, b"no leader");
        answer.truncate(answer.len() - 2);
        let (addr, _handle) = server(request.len(), answer.clone(), 1);
        let mut tcp = TcpStream::connect(addr).unwrap();
        let e = call(&mut tcp, &request, deadline()).unwrap_err();
        assert!(
            matches!(e, OneShotError::Closed(n) if n == answer.len()),
            "{e}"
        );
    }

    #[test]
    fn silence_ends_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_held, _) = listener.accept().unwrap();
        let since = Instant::now();
        let e = call(&mut tcp, b"x", Instant::now() + Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, OneShotError::Deadline), "{e}");
        assert!(since.elapsed() >= Duration::from_millis(100));
    }
}
