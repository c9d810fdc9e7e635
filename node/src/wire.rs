//! What a Raft transport payload is: MessagePack with field names
//! ([`berth_raft_store::codec`]), in the format [`PEER_FORMAT_VERSION`]
//! names. Peers run the same version, so there is nothing to negotiate; a
//! message of another format is refused, naming both, rather than misread.

use berth_raft_store::codec::{self, CodecError};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Code, Status};

/// The payload format this node writes and reads, carried in every
/// `RaftMessage` and `RaftReply` (`format_version`). A change to what a
/// payload holds that an older node would misread raises it.
pub const PEER_FORMAT_VERSION: u32 = 1;

/// Messages this node sent to its peers, by call (`AppendEntries`, `Vote`,
/// `InstallSnapshot`, `Forward`, `ForwardBatch`).
pub const PEER_MESSAGES_SENT_TOTAL: &str = "berth_peer_messages_sent_total";

/// Counts one message sent to a peer.
pub fn count_sent(call: &'static str) {
    metrics::counter!(PEER_MESSAGES_SENT_TOTAL, "call" => call).increment(1);
}

/// Why a payload could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("peer message format {got}, this node reads format {PEER_FORMAT_VERSION}")]
    Format { got: u32 },
}

/// Encodes `value` as a payload.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    Ok(codec::to_vec(value)?)
}

/// Decodes a payload.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    Ok(codec::from_slice(bytes)?)
}

/// Refuses a payload format other than this node's.
pub fn check_format(format_version: u32) -> Result<(), WireError> {
    if format_version == PEER_FORMAT_VERSION {
        Ok(())
    } else {
        Err(WireError::Format {
            got: format_version,
        })
    }
}

/// Set in the details of a format refusal: a forwarding follower must not
/// take it for "not leader", which is FAILED_PRECONDITION too, and retry.
const FORMAT_REFUSAL_DETAILS: &[u8] = b"berth.raft.v1 format_version";

/// The status a server refuses a request's format with.
pub fn format_refusal(e: &WireError) -> Status {
    Status::with_details(
        Code::FailedPrecondition,
        e.to_string(),
        Bytes::from_static(FORMAT_REFUSAL_DETAILS),
    )
}

/// Whether `status` is a peer's [`format_refusal`].
pub fn is_format_refusal(status: &Status) -> bool {
    status.code() == Code::FailedPrecondition && status.details() == FORMAT_REFUSAL_DETAILS
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_state::{Command, Request};

    /// Through a payload and back, compared by their Debug text (not
    /// every openraft type has PartialEq).
    fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(value: T) {
        let bytes = encode(&value).expect("encode");
        let back: T = decode(&bytes).expect("decode");
        assert_eq!(format!("{back:?}"), format!("{value:?}"));
    }

    #[test]
    fn a_request_travels_as_the_store_encodes_it() {
        let request = Request::new(Command::CancelJob {
            job_id: 7,
            now_ms: 1_000,
        });
        let bytes = encode(&request).expect("encode");
        assert_eq!(bytes, codec::to_vec(&request).expect("pack"));
        round_trip(request);
        assert!(decode::<Request>(b"{\"version\":1}").is_err(), "not JSON");
    }

    #[test]
    fn openraft_replies_and_errors_round_trip() {
        use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
        use openraft::raft::AppendEntriesResponse;
        use openraft::{CommittedLeaderId, LogId, SnapshotSegmentId, Vote};

        let log_id = LogId::new(CommittedLeaderId::new(3, 2), 41);
        round_trip(AppendEntriesResponse::<u64>::Success);
        round_trip(AppendEntriesResponse::<u64>::PartialSuccess(Some(log_id)));
        round_trip(AppendEntriesResponse::<u64>::PartialSuccess(None));
        round_trip(AppendEntriesResponse::<u64>::Conflict);
        round_trip(AppendEntriesResponse::<u64>::HigherVote(Vote::new(4, 3)));
        round_trip(RaftError::<u64>::Fatal(Fatal::Stopped));
        round_trip(RaftError::<u64, InstallSnapshotError>::APIError(
            InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                expect: SnapshotSegmentId {
                    id: "1-2-3".into(),
                    offset: 0,
                },
                got: SnapshotSegmentId {
                    id: "1-2-3".into(),
                    offset: 1 << 20,
                },
            }),
        ));
    }

    #[test]
    fn another_format_is_refused_naming_both() {
        assert!(check_format(PEER_FORMAT_VERSION).is_ok());
        for got in [0, 2] {
            let e = check_format(got).expect_err("refused");
            assert_eq!(
                e.to_string(),
                format!("peer message format {got}, this node reads format 1")
            );
            let status = format_refusal(&e);
            assert_eq!(status.code(), Code::FailedPrecondition);
            assert!(is_format_refusal(&status));
        }
        assert!(!is_format_refusal(&Status::failed_precondition(
            "not leader"
        )));
    }
}
