//! A Raft snapshot's bytes (openraft's `SnapshotData`), made only when
//! something reads them.
//!
//! The state machine is whole in RocksDB after every apply batch, so a
//! snapshot needs no copy of its own. A snapshot handed out by the store
//! pins the state as of its metadata (a RocksDB snapshot: a sequence number
//! that compaction respects, not a copy) and serializes it when it is first
//! read or sought, which happens only when a leader sends it to a follower
//! that is too far behind for the log. Built snapshots are never read:
//! openraft keeps their metadata only.
//!
//! The pin lives on a thread of its own, because a RocksDB snapshot
//! borrows the database it was taken from. The thread reads the
//! metadata, then waits: asked, it serializes and sends the bytes back
//! (so the seconds a large state takes never run on an async worker);
//! when the handle is dropped unread, it lets the pin go and ends.

use std::future::Future;
use std::io::{Cursor, SeekFrom};
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll};

use rocksdb::DB;
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

use crate::apply_entry::AppliedMeta;
use crate::error::StoreError;
use crate::store::{read_applied_at, serialize_state_at, SerializedState};

/// Bytes of a snapshot: received from a leader, or the pinned state that
/// a leader sends, serialized on first use.
pub struct SnapshotData {
    data: Data,
    /// A seek asked for before the bytes existed, done once they do.
    pending_seek: Option<SeekFrom>,
}

enum Data {
    Pinned(PinnedState),
    Serializing(Answer),
    Bytes(Cursor<Vec<u8>>),
    /// Serializing failed; every later read says why.
    Failed(String),
}

impl SnapshotData {
    /// Snapshot bytes already in hand (received, or read from a backup).
    pub fn from_bytes(bytes: Vec<u8>) -> SnapshotData {
        SnapshotData {
            data: Data::Bytes(Cursor::new(bytes)),
            pending_seek: None,
        }
    }

    pub(crate) fn pinned(state: PinnedState) -> SnapshotData {
        SnapshotData {
            data: Data::Pinned(state),
            pending_seek: None,
        }
    }

    /// The whole snapshot's bytes, serializing the pinned state first if
    /// it has not been.
    pub async fn into_bytes(mut self) -> std::io::Result<Vec<u8>> {
        std::future::poll_fn(|cx| self.poll_bytes(cx).map_ok(|_| ())).await?;
        match self.data {
            Data::Bytes(cursor) => Ok(cursor.into_inner()),
            Data::Pinned(_) | Data::Serializing(_) | Data::Failed(_) => Err(std::io::Error::other(
                "snapshot bytes missing after serializing",
            )),
        }
    }

    /// The bytes, once they exist: asks the pin thread for them on the
    /// first call and waits for its answer without blocking.
    fn poll_bytes(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<&mut Cursor<Vec<u8>>>> {
        // At most two steps: Pinned → Serializing → Bytes (or Failed).
        for _ in 0..3 {
            let next = match &mut self.data {
                Data::Pinned(pinned) => match pinned.ask() {
                    Ok(answer) => Data::Serializing(answer),
                    Err(e) => Data::Failed(e.to_string()),
                },
                Data::Serializing(answer) => match Pin::new(answer).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(Ok(state))) => {
                        let mut cursor = Cursor::new(state.bytes);
                        match self
                            .pending_seek
                            .take()
                            .map(|pos| seek_now(&mut cursor, pos))
                        {
                            Some(Err(e)) => Data::Failed(e.to_string()),
                            Some(Ok(_)) | None => Data::Bytes(cursor),
                        }
                    }
                    Poll::Ready(Ok(Err(e))) => {
                        Data::Failed(format!("serializing the snapshot: {e}"))
                    }
                    Poll::Ready(Err(_)) => {
                        Data::Failed("the snapshot's pin thread ended without an answer".into())
                    }
                },
                Data::Bytes(_) | Data::Failed(_) => break,
            };
            self.data = next;
        }
        match &mut self.data {
            Data::Bytes(cursor) => Poll::Ready(Ok(cursor)),
            Data::Failed(why) => Poll::Ready(Err(std::io::Error::other(why.clone()))),
            Data::Pinned(_) | Data::Serializing(_) => Poll::Ready(Err(std::io::Error::other(
                "snapshot bytes not made after serializing",
            ))),
        }
    }
}

/// `std::io::Seek` on a cursor, which cannot fail except on a position
/// before the start.
fn seek_now(cursor: &mut Cursor<Vec<u8>>, pos: SeekFrom) -> std::io::Result<u64> {
    std::io::Seek::seek(cursor, pos)
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match this.poll_bytes(cx) {
            Poll::Ready(Ok(cursor)) => Pin::new(cursor).poll_read(cx, buf),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().data {
            Data::Bytes(cursor) => Pin::new(cursor).poll_write(cx, buf),
            Data::Pinned(_) | Data::Serializing(_) | Data::Failed(_) => Poll::Ready(Err(
                std::io::Error::other("a snapshot of this node's own state is read-only"),
            )),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, position: SeekFrom) -> std::io::Result<()> {
        let this = self.get_mut();
        match &mut this.data {
            Data::Bytes(cursor) => seek_now(cursor, position).map(|_| ()),
            Data::Pinned(_) | Data::Serializing(_) => {
                this.pending_seek = Some(position);
                Ok(())
            }
            Data::Failed(why) => Err(std::io::Error::other(why.clone())),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<u64>> {
        match self.get_mut().poll_bytes(cx) {
            Poll::Ready(Ok(cursor)) => Poll::Ready(Ok(cursor.position())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// How the pin thread answers a request to serialize, and where the
/// answer is awaited.
type Reply = oneshot::Sender<Result<SerializedState, StoreError>>;
type Answer = oneshot::Receiver<Result<SerializedState, StoreError>>;

/// A handle on a pinned state. Dropped unasked, it lets the pin go and
/// waits for the thread to end, so the database is not held open after
/// its owner closes it (the thread is idle then and ends at once).
pub(crate) struct PinnedState {
    asker: Option<mpsc::Sender<Reply>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PinnedState {
    /// Asks the thread to serialize; it then ends on its own once it has
    /// answered (not waited for: that takes as long as serializing).
    fn ask(&mut self) -> std::io::Result<Answer> {
        let (reply, answer) = oneshot::channel();
        let sent = self.asker.take().map(|asker| asker.send(reply).is_ok());
        if sent != Some(true) {
            return Err(std::io::Error::other(
                "the snapshot's pin thread has stopped",
            ));
        }
        drop(self.thread.take());
        Ok(answer)
    }
}

impl Drop for PinnedState {
    fn drop(&mut self) {
        drop(self.asker.take());
        if let Some(thread) = self.thread.take() {
            // A panic on that thread has been reported already.
            let _ = thread.join();
        }
    }
}

/// Pins the store's state as it is now and reads its metadata. Blocks
/// for as long as starting a thread and two reads take.
pub(crate) fn pin(db: Arc<DB>) -> Result<(AppliedMeta, PinnedState), StoreError> {
    let (meta_tx, meta_rx) = mpsc::sync_channel::<Result<AppliedMeta, StoreError>>(1);
    let (asker, asked) = mpsc::channel::<Reply>();
    let thread = std::thread::Builder::new()
        .name("berth-snapshot-pin".into())
        .spawn(move || {
            let snap = db.snapshot();
            let meta = read_applied_at(&db, &snap);
            let pinned = meta.is_ok();
            if meta_tx.send(meta).is_err() || !pinned {
                return;
            }
            // One request at most: the bytes are kept by the handle.
            if let Ok(reply) = asked.recv() {
                let started = std::time::Instant::now();
                let serialized = serialize_state_at(&db, &snap);
                if let Ok(state) = &serialized {
                    // Read by operators and by `berth-drill snapshot-transfer`,
                    // which reports serialization times from this line.
                    tracing::info!(
                        last_applied = %state.last_applied.map(|l| l.to_string()).unwrap_or_default(),
                        jobs = state.jobs,
                        bytes = state.bytes.len(),
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "snapshot serialized"
                    );
                }
                let _ = reply.send(serialized);
            }
        })
        .map_err(|e| StoreError::SnapshotPin(format!("cannot start its thread: {e}")))?;
    let meta = meta_rx
        .recv()
        .map_err(|_| StoreError::SnapshotPin("its thread ended before pinning".into()))??;
    Ok((
        meta,
        PinnedState {
            asker: Some(asker),
            thread: Some(thread),
        },
    ))
}
