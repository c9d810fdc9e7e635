//! gRPC's length-prefixed message framing, for the clients that speak
//! HTTP/2 themselves (`sbatch`, `berthd`'s calls to its peers): a
//! compression flag, a 4-byte big-endian length, then the message.

use prost::Message;

/// The prefix before each message: the compression flag and the length.
pub const PREFIX_BYTES: usize = 5;

/// Why a frame could not be read as one message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the prefix.
    #[error("{bytes} bytes, shorter than a gRPC frame")]
    Short { bytes: usize },
    /// The compression flag is set; these clients never ask for it.
    #[error("compressed, and none was asked for")]
    Compressed,
    /// The prefix's length is not the number of bytes that follow it.
    #[error("the frame's length says {said} bytes and {came} came")]
    Length { said: u32, came: usize },
    /// The bytes are not the expected message.
    #[error("{0}")]
    Message(prost::DecodeError),
}

/// `message` as one uncompressed frame.
pub fn encode(message: &impl Message) -> Vec<u8> {
    let length = message.encoded_len();
    let mut frame = Vec::with_capacity(PREFIX_BYTES + length);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    message.encode_raw(&mut frame);
    frame
}

/// The message length the prefix at the start of `bytes` declares, once
/// the whole prefix is there: what a reader of several frames in a row
/// waits for after the prefix.
pub fn declared_length(bytes: &[u8]) -> Option<usize> {
    let prefix = bytes.get(..PREFIX_BYTES)?;
    let said = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    Some(usize::try_from(said).unwrap_or(usize::MAX))
}

/// The one uncompressed message `frame` holds, and nothing after it.
pub fn decode<M: Message + Default>(frame: &[u8]) -> Result<M, FrameError> {
    let (prefix, message) = frame
        .split_at_checked(PREFIX_BYTES)
        .ok_or(FrameError::Short { bytes: frame.len() })?;
    if prefix[0] != 0 {
        return Err(FrameError::Compressed);
    }
    let said = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if usize::try_from(said).ok() != Some(message.len()) {
        return Err(FrameError::Length {
            said,
            came: message.len(),
        });
    }
    M::decode(message).map_err(FrameError::Message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::RaftReply;

    #[test]
    fn a_frame_round_trips_and_each_bad_one_is_named() {
        let reply = RaftReply {
            payload: b"payload".to_vec(),
            error: Vec::new(),
            encoding: 1,
            reads_messagepack: true,
        };
        let frame = encode(&reply);
        assert_eq!(frame.len(), PREFIX_BYTES + reply.encoded_len());
        assert_eq!(decode::<RaftReply>(&frame), Ok(reply));
        assert_eq!(
            decode::<RaftReply>(&frame[..3]),
            Err(FrameError::Short { bytes: 3 })
        );
        let mut compressed = frame.clone();
        compressed[0] = 1;
        assert_eq!(
            decode::<RaftReply>(&compressed),
            Err(FrameError::Compressed)
        );
        let came = frame.len() - PREFIX_BYTES - 1;
        assert_eq!(
            decode::<RaftReply>(&frame[..frame.len() - 1]),
            Err(FrameError::Length {
                said: u32::try_from(came + 1).unwrap(),
                came
            })
        );
        // A whole frame whose bytes are not the message.
        let mut garbage = vec![0, 0, 0, 0, 2];
        garbage.extend_from_slice(&[0xff, 0xff]);
        assert!(matches!(
            decode::<RaftReply>(&garbage),
            Err(FrameError::Message(_))
        ));
    }
}
