//! How Raft transport payloads are encoded (`berth.raft.v1`'s
//! `PayloadEncoding`): JSON, which every version reads, or MessagePack with
//! field names ([`berth_raft_store::codec`]), which costs less than half as
//! much to write and read. A node sends MessagePack to a peer only once the
//! peer's replies said it reads it, and answers each request in the
//! request's encoding, so old and new nodes run side by side during a
//! rolling upgrade.

use std::sync::atomic::{AtomicBool, Ordering};

use berth_proto::raft::PayloadEncoding;
use berth_raft_store::codec::Encoding;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Messages this node sent to its peers, by call (`AppendEntries`, `Vote`,
/// `InstallSnapshot`, `Forward`, `ForwardBatch`) and encoding (`json`,
/// `messagepack`): during a rolling upgrade, JSON goes to the nodes not yet
/// upgraded, and once all are, only the first message to each peer is
/// JSON.
pub const PEER_MESSAGES_SENT_TOTAL: &str = "berth_peer_messages_sent_total";

/// Counts one message sent to a peer.
pub fn count_sent(call: &'static str, encoding: PayloadEncoding) {
    let encoding = match encoding {
        PayloadEncoding::Json => "json",
        PayloadEncoding::Messagepack => "messagepack",
    };
    metrics::counter!(PEER_MESSAGES_SENT_TOTAL, "call" => call, "encoding" => encoding)
        .increment(1);
}

/// The codec that `encoding` names.
fn codec(encoding: PayloadEncoding) -> Encoding {
    match encoding {
        PayloadEncoding::Json => Encoding::Json,
        PayloadEncoding::Messagepack => Encoding::MessagePack,
    }
}

/// Encodes `value` as `encoding` says.
pub fn encode<T: Serialize + ?Sized>(
    encoding: PayloadEncoding,
    value: &T,
) -> Result<Vec<u8>, String> {
    codec(encoding).encode(value)
}

/// Decodes `bytes`, encoded as `encoding` says.
pub fn decode<T: DeserializeOwned>(encoding: PayloadEncoding, bytes: &[u8]) -> Result<T, String> {
    codec(encoding).decode(bytes)
}

/// The encoding a message names; one this version does not know is an
/// error, not a guess.
pub fn named(encoding: i32) -> Result<PayloadEncoding, String> {
    PayloadEncoding::try_from(encoding).map_err(|_| format!("unknown payload encoding {encoding}"))
}

/// What one peer is known to read. Starts at JSON; a reply that says the
/// peer reads MessagePack switches it, and a failed call switches it back
/// (the peer may have been replaced by an older version meanwhile).
#[derive(Debug, Default)]
pub struct PeerEncoding {
    reads_messagepack: AtomicBool,
}

impl PeerEncoding {
    /// The encoding to send the peer now.
    pub fn current(&self) -> PayloadEncoding {
        if self.reads_messagepack.load(Ordering::Relaxed) {
            PayloadEncoding::Messagepack
        } else {
            PayloadEncoding::Json
        }
    }

    /// Records what a reply said.
    pub fn replied(&self, reads_messagepack: bool) {
        self.reads_messagepack
            .store(reads_messagepack, Ordering::Relaxed);
    }

    /// Records a failed call.
    pub fn failed(&self) {
        self.reads_messagepack.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_state::{Command, Request};

    fn request() -> Request {
        Request::new(Command::CancelJob {
            job_id: 7,
            now_ms: 1_000,
        })
    }

    #[test]
    fn both_encodings_round_trip_a_request() {
        for encoding in [PayloadEncoding::Json, PayloadEncoding::Messagepack] {
            let bytes = encode(encoding, &request()).expect("encode");
            let back: Request = decode(encoding, &bytes).expect("decode");
            assert_eq!(
                serde_json::to_value(&back).expect("json"),
                serde_json::to_value(request()).expect("json"),
                "{encoding:?}"
            );
        }
        // The two are different bytes: neither reads as the other.
        let packed = encode(PayloadEncoding::Messagepack, &request()).expect("encode");
        assert!(decode::<Request>(PayloadEncoding::Json, &packed).is_err());
    }

    /// Through MessagePack and back, compared by their Debug text (not
    /// every openraft type has PartialEq).
    fn packed_round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug>(value: T) {
        let bytes = encode(PayloadEncoding::Messagepack, &value).expect("encode");
        let back: T = decode(PayloadEncoding::Messagepack, &bytes).expect("decode");
        assert_eq!(format!("{back:?}"), format!("{value:?}"));
    }

    #[test]
    fn openraft_replies_and_errors_travel_packed() {
        use openraft::error::{Fatal, InstallSnapshotError, RaftError, SnapshotMismatch};
        use openraft::raft::AppendEntriesResponse;
        use openraft::{CommittedLeaderId, LogId, SnapshotSegmentId, Vote};

        let log_id = LogId::new(CommittedLeaderId::new(3, 2), 41);
        packed_round_trip(AppendEntriesResponse::<u64>::Success);
        packed_round_trip(AppendEntriesResponse::<u64>::PartialSuccess(Some(log_id)));
        packed_round_trip(AppendEntriesResponse::<u64>::PartialSuccess(None));
        packed_round_trip(AppendEntriesResponse::<u64>::Conflict);
        packed_round_trip(AppendEntriesResponse::<u64>::HigherVote(Vote::new(4, 3)));
        packed_round_trip(RaftError::<u64>::Fatal(Fatal::Stopped));
        packed_round_trip(RaftError::<u64, InstallSnapshotError>::APIError(
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
    fn unknown_encodings_are_refused() {
        assert_eq!(named(0), Ok(PayloadEncoding::Json));
        assert_eq!(named(1), Ok(PayloadEncoding::Messagepack));
        assert!(named(2).unwrap_err().contains("unknown payload encoding 2"));
    }

    #[test]
    fn a_peer_is_sent_messagepack_only_after_saying_it_reads_it() {
        let peer = PeerEncoding::default();
        assert_eq!(peer.current(), PayloadEncoding::Json);
        peer.replied(true);
        assert_eq!(peer.current(), PayloadEncoding::Messagepack);
        peer.failed();
        assert_eq!(peer.current(), PayloadEncoding::Json);
        peer.replied(true);
        peer.replied(false);
        assert_eq!(peer.current(), PayloadEncoding::Json);
    }
}
