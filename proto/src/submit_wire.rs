//! The one-shot submit protocol: one `SubmitJob` on a connection of its
//! own, for `sbatch` processes that start, submit once and exit.
//!
//! Over HTTP/2 such a client and the server exchange three writes each
//! way before the answer (the server's SETTINGS at accept, the client's
//! preface and request, the SETTINGS ACKs), and each wakes the other. Here
//! the client writes its request once and the server writes its answer
//! once, then closes. A node tells the two apart by the first byte of a
//! connection: an HTTP/2 preface begins with `P`, a TLS handshake with
//! 0x16, this protocol with `B`.
//!
//! The request is the same `SubmitJobRequest` the gRPC API takes, and the
//! server answers it with the same code path (authentication, forwarding
//! to the leader, the status codes). Only plain TCP: a node with TLS never
//! reads this protocol.
//!
//! ```text
//! request: "BERTHSB1" | token bytes: u16 BE | body bytes: u32 BE | token | body
//! answer:  "BERTHSA1" | gRPC code: u8       | payload bytes: u32 BE | payload
//! ```
//!
//! The token is what gRPC would carry as `authorization: Bearer <token>`
//! (empty: none). The body is a protobuf `SubmitJobRequest`. The answer's
//! payload is a protobuf `SubmitJobResponse` when the code is OK (0), else
//! the status message in UTF-8.

/// The first bytes of a request; the last one is the version.
pub const REQUEST_MAGIC: [u8; 8] = *b"BERTHSB1";
/// The first bytes of an answer.
pub const ANSWER_MAGIC: [u8; 8] = *b"BERTHSA1";
/// A request's fixed head: magic, token length, body length.
pub const REQUEST_HEAD_BYTES: usize = 8 + 2 + 4;
/// An answer's fixed head: magic, code, payload length.
pub const ANSWER_HEAD_BYTES: usize = 8 + 1 + 4;
/// Longest token taken (a signed token is a few hundred bytes).
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;
/// Longest request body taken: a job spec with its batch script. The gRPC
/// API's bound, [`crate::MAX_MESSAGE_BYTES`], is for listings; a submit
/// needs far less.
pub const BODY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Longest answer payload taken: a job id or a status message.
pub const PAYLOAD_BYTES_MAX: usize = 64 * 1024;

/// Why bytes are not a request or an answer of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes do not begin with this protocol's magic (another
    /// protocol, or another version of this one).
    #[error("not the one-shot submit protocol (first bytes {0:02x?})")]
    NotSpoken(Vec<u8>),
    #[error("the token is {bytes} bytes, more than {TOKEN_BYTES_MAX}")]
    TokenTooLong { bytes: usize },
    #[error("the request body is {bytes} bytes, more than {BODY_BYTES_MAX}")]
    BodyTooLarge { bytes: usize },
    #[error("the answer's payload is {bytes} bytes, more than {PAYLOAD_BYTES_MAX}")]
    PayloadTooLarge { bytes: usize },
    #[error("{bytes} bytes, shorter than the {needed} the head says")]
    Short { bytes: usize, needed: usize },
    #[error("{extra} bytes after the end of the message")]
    Trailing { extra: usize },
    #[error("the token is not visible ASCII (what a header value may hold)")]
    TokenNotText,
}

/// The request for `body` (an encoded `SubmitJobRequest`) with `token`.
pub fn encode_request(token: Option<&str>, body: &[u8]) -> Result<Vec<u8>, WireError> {
    let token = token.unwrap_or("").as_bytes();
    if token.len() > TOKEN_BYTES_MAX {
        return Err(WireError::TokenTooLong { bytes: token.len() });
    }
    if body.len() > BODY_BYTES_MAX {
        return Err(WireError::BodyTooLarge { bytes: body.len() });
    }
    let mut out = Vec::with_capacity(REQUEST_HEAD_BYTES + token.len() + body.len());
    out.extend_from_slice(&REQUEST_MAGIC);
    out.extend_from_slice(&(token.len() as u16).to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(token);
    out.extend_from_slice(body);
    Ok(out)
}

/// The lengths a request's head announces: (token bytes, body bytes),
/// each within its bound.
pub fn decode_request_head(head: &[u8; REQUEST_HEAD_BYTES]) -> Result<(usize, usize), WireError> {
    if head[..8] != REQUEST_MAGIC {
        return Err(WireError::NotSpoken(head[..8].to_vec()));
    }
    let token = usize::from(u16::from_be_bytes([head[8], head[9]]));
    let body = u32::from_be_bytes([head[10], head[11], head[12], head[13]]) as usize;
    if token > TOKEN_BYTES_MAX {
        return Err(WireError::TokenTooLong { bytes: token });
    }
    if body > BODY_BYTES_MAX {
        return Err(WireError::BodyTooLarge { bytes: body });
    }
    Ok((token, body))
}

/// Splits what follows a request's head into its token (`None` when
/// empty) and body.
pub fn split_request_rest(
    rest: &[u8],
    token_bytes: usize,
) -> Result<(Option<&str>, &[u8]), WireError> {
    let (token, body) = rest.split_at_checked(token_bytes).ok_or(WireError::Short {
        bytes: rest.len(),
        needed: token_bytes,
    })?;
    if !token.iter().all(|&b| b == b' ' || b.is_ascii_graphic()) {
        return Err(WireError::TokenNotText);
    }
    // Visible ASCII is UTF-8.
    let token = std::str::from_utf8(token).map_err(|_| WireError::TokenNotText)?;
    Ok(((!token.is_empty()).then_some(token), body))
}

/// The answer with gRPC `code` and `payload` (an encoded
/// `SubmitJobResponse` when OK, else the status message). A payload over
/// the bound is cut to it: only a status message can be that long.
pub fn encode_answer(code: u8, payload: &[u8]) -> Vec<u8> {
    let payload = &payload[..payload.len().min(PAYLOAD_BYTES_MAX)];
    let mut out = Vec::with_capacity(ANSWER_HEAD_BYTES + payload.len());
    out.extend_from_slice(&ANSWER_MAGIC);
    out.push(code);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// How many bytes the whole answer takes, once `bytes` holds at least its
/// head; `None` while it holds less. An answer that is not this
/// protocol's is told as soon as its first bytes differ.
pub fn answer_bytes(bytes: &[u8]) -> Result<Option<usize>, WireError> {
    let seen = bytes.len().min(ANSWER_MAGIC.len());
    if bytes[..seen] != ANSWER_MAGIC[..seen] {
        return Err(WireError::NotSpoken(bytes[..seen].to_vec()));
    }
    let Some(head) = bytes.get(..ANSWER_HEAD_BYTES) else {
        return Ok(None);
    };
    let payload = u32::from_be_bytes([head[9], head[10], head[11], head[12]]) as usize;
    if payload > PAYLOAD_BYTES_MAX {
        return Err(WireError::PayloadTooLarge { bytes: payload });
    }
    Ok(Some(ANSWER_HEAD_BYTES + payload))
}

/// The code and payload of one whole answer, and nothing after it.
pub fn decode_answer(bytes: &[u8]) -> Result<(u8, &[u8]), WireError> {
    let needed = answer_bytes(bytes)?.ok_or(WireError::Short {
        bytes: bytes.len(),
        needed: ANSWER_HEAD_BYTES,
    })?;
    if bytes.len() < needed {
        return Err(WireError::Short {
            bytes: bytes.len(),
            needed,
        });
    }
    if bytes.len() > needed {
        return Err(WireError::Trailing {
            extra: bytes.len() - needed,
        });
    }
    Ok((bytes[8], &bytes[ANSWER_HEAD_BYTES..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips() {
        let wire = encode_request(Some("tok.en"), b"body").unwrap();
        assert_eq!(
            wire[0], b'B',
            "told apart from HTTP/2 and TLS by its first byte"
        );
        let head: [u8; REQUEST_HEAD_BYTES] = wire[..REQUEST_HEAD_BYTES].try_into().unwrap();
        let (token_bytes, body_bytes) = decode_request_head(&head).unwrap();
        assert_eq!((token_bytes, body_bytes), (6, 4));
        let rest = &wire[REQUEST_HEAD_BYTES..];
        assert_eq!(rest.len(), token_bytes + body_bytes);
        assert_eq!(
            split_request_rest(rest, token_bytes).unwrap(),
            (Some("tok.en"), &b"body"[..])
        );
        let none = encode_request(None, b"").unwrap();
        assert_eq!(
            split_request_rest(&none[REQUEST_HEAD_BYTES..], 0).unwrap(),
            (None, &b""[..])
        );
    }

    #[test]
    fn bad_requests_are_named() {
        let long = "t".repeat(TOKEN_BYTES_MAX + 1);
        assert_eq!(
            encode_request(Some(&long), b""),
            Err(WireError::TokenTooLong {
                bytes: TOKEN_BYTES_MAX + 1
            })
        );
        let mut head: [u8; REQUEST_HEAD_BYTES] =
            encode_request(None, b"").unwrap().try_into().unwrap();
        head[10..14].copy_from_slice(&(BODY_BYTES_MAX as u32 + 1).to_be_bytes());
        assert_eq!(
            decode_request_head(&head),
            Err(WireError::BodyTooLarge {
                bytes: BODY_BYTES_MAX + 1
            })
        );
        head[8..10].copy_from_slice(&(TOKEN_BYTES_MAX as u16 + 1).to_be_bytes());
        assert!(matches!(
            decode_request_head(&head),
            Err(WireError::TokenTooLong { .. })
        ));
        let mut other = head;
        other[7] = b'2';
        assert!(matches!(
            decode_request_head(&other),
            Err(WireError::NotSpoken(_))
        ));
        assert_eq!(
            split_request_rest(b"ab", 3),
            Err(WireError::Short {
                bytes: 2,
                needed: 3
            })
        );
        assert_eq!(split_request_rest(b"a\nb", 3), Err(WireError::TokenNotText));
    }

    #[test]
    fn an_answer_round_trips_and_is_measured_as_it_arrives() {
        let wire = encode_answer(0, b"\x08\x2a");
        for cut in 0..ANSWER_HEAD_BYTES {
            assert_eq!(answer_bytes(&wire[..cut]), Ok(None), "at {cut} bytes");
        }
        assert_eq!(answer_bytes(&wire), Ok(Some(wire.len())));
        assert_eq!(decode_answer(&wire), Ok((0, &b"\x08\x2a"[..])));
        let message = encode_answer(14, b"no leader");
        assert_eq!(decode_answer(&message), Ok((14, &b"no leader"[..])));
    }

    #[test]
    fn bad_answers_are_named() {
        // An HTTP/2 server's first frame: SETTINGS.
        assert!(matches!(
            answer_bytes(&[0, 0, 18, 4, 0]),
            Err(WireError::NotSpoken(_))
        ));
        let wire = encode_answer(0, b"xyz");
        assert_eq!(
            decode_answer(&wire[..wire.len() - 1]),
            Err(WireError::Short {
                bytes: wire.len() - 1,
                needed: wire.len()
            })
        );
        let mut longer = wire.clone();
        longer.push(0);
        assert_eq!(
            decode_answer(&longer),
            Err(WireError::Trailing { extra: 1 })
        );
        let mut huge = wire;
        huge[9..13].copy_from_slice(&(PAYLOAD_BYTES_MAX as u32 + 1).to_be_bytes());
        assert_eq!(
            answer_bytes(&huge),
            Err(WireError::PayloadTooLarge {
                bytes: PAYLOAD_BYTES_MAX + 1
            })
        );
        let cut = encode_answer(2, &vec![b'x'; PAYLOAD_BYTES_MAX + 10]);
        assert_eq!(cut.len(), ANSWER_HEAD_BYTES + PAYLOAD_BYTES_MAX);
    }
}
