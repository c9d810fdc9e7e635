//! `BackupState`: the leader's side of `berth admin backup`.
//!
//! After a read barrier (so every write committed before the call is in
//! it), the state machine is serialized from one RocksDB snapshot on a
//! blocking thread (`StateMachineStore::backup`, the bytes a Raft snapshot
//! carries), framed as a backup file (`berth_raft_store::backup`) and
//! streamed in chunks of at most [`BACKUP_CHUNK_BYTES`]. A follower passes
//! the call to the leader (see `ApiService`).

use std::pin::Pin;

use berth_proto::api::{BackupChunk, BackupInfo};
use berth_proto::BACKUP_CHUNK_BYTES;
use berth_raft_store::backup::{crc32, BACKUP_FORMAT_VERSION};
use berth_raft_store::StateMachineStore;
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::node::{now_ms, Node};

/// Chunks queued ahead of a slow receiver before the sender waits, so at
/// most this many MiB wait in the channel.
const BACKUP_STREAM_BUFFER_CHUNKS: usize = 4;

/// The stream of a `BackupState` answer.
pub type BackupStream = Pin<Box<dyn Stream<Item = Result<BackupChunk, Status>> + Send>>;

/// Takes a backup on this node, which must be the leader, and streams it.
///
/// The read barrier is passed before answering, so a node that cannot lead
/// says so in the call's status (and the client tries another). The state
/// is serialized after the answer's headers are sent, inside the stream: a
/// large state then takes as long as it needs without running into the
/// client's deadline for an answer; a failure there ends the stream with
/// an error.
pub async fn backup_state(node: &Node, store: &StateMachineStore) -> Result<BackupStream, Status> {
    node.read_barrier().await?;
    let store = store.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(BACKUP_STREAM_BUFFER_CHUNKS);
    tokio::spawn(async move {
        let (info, bytes) = match take_backup(store).await {
            Ok(taken) => taken,
            Err(status) => {
                let _ = tx.send(Err(status)).await;
                return;
            }
        };
        let mut info = Some(info);
        let mut offset = 0usize;
        // An empty file still sends one chunk, carrying the info.
        loop {
            let end = (offset + BACKUP_CHUNK_BYTES).min(bytes.len());
            let chunk = BackupChunk {
                info: info.take(),
                offset: offset as u64,
                data: bytes[offset..end].to_vec(),
            };
            if tx.send(Ok(chunk)).await.is_err() {
                tracing::info!(offset, "backup receiver went away");
                return;
            }
            offset = end;
            if offset >= bytes.len() {
                return;
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// Serializes the applied state on a blocking thread and frames it as a
/// backup file; returns its description and the file's bytes.
async fn take_backup(store: StateMachineStore) -> Result<(BackupInfo, Vec<u8>), Status> {
    let created_ms = now_ms();
    let started = std::time::Instant::now();
    let built = tokio::task::spawn_blocking(move || {
        let backup = store.backup(created_ms)?;
        let bytes = backup.to_bytes()?;
        Ok::<_, berth_raft_store::BackupError>((backup.header, bytes))
    })
    .await
    .map_err(|e| Status::internal(format!("backup task: {e}")))?;
    let (header, bytes) =
        built.map_err(|e| Status::internal(format!("cannot take a backup: {e}")))?;
    let last = header.last_log_id;
    let info = BackupInfo {
        format_version: BACKUP_FORMAT_VERSION,
        last_log_index: last.map(|l| l.index).unwrap_or(0),
        last_log_term: last.map(|l| l.leader_id.term).unwrap_or(0),
        voter_ids: header.membership.membership().voter_ids().collect(),
        jobs: header.jobs,
        hosts: header.hosts,
        snapshot_bytes: header.data_bytes,
        file_bytes: bytes.len() as u64,
        file_crc32: crc32(&bytes),
        created_ms,
    };
    tracing::info!(
        index = info.last_log_index,
        jobs = info.jobs,
        bytes = info.file_bytes,
        took_ms = started.elapsed().as_millis() as u64,
        "backup taken"
    );
    Ok((info, bytes))
}
