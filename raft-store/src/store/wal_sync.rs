//! A leader's log appends made durable off its runtime.
//!
//! `append` writes a leader's batch to the WAL unsynced and hands
//! openraft's flush callback to this thread, which fsyncs the WAL and then
//! completes the callback. openraft 0.9's core task waits for that
//! callback before it runs its next command, replication included, so the
//! leader's fsync is still on every entry's path ahead of the followers'
//! (an earlier version of this comment said the two overlapped; a trace of
//! the leader shows the AppendEntries leave after the fsync returns). What
//! the thread buys is the runtime's freedom during the fsync: with one
//! runtime thread per node, the leader goes on accepting, reading and
//! answering the requests that will make the next entry. A follower has
//! little such work and syncs in place (`LogStore::append`).
//!
//! One thread per store, callbacks in the order the appends were made. A
//! callback is queued only after its batch was written, and the fsync that
//! completes it starts after it was taken off the queue, so the fsync
//! covers that batch and every earlier one (all column families share the
//! one WAL). Callbacks that queued up during one fsync are completed by the
//! next, together: under load one fsync covers several appends.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use openraft::storage::LogFlushed;
use rocksdb::DB;

use crate::TypeConfig;

/// Appends waiting for their fsync, at most; `append` waits beyond this.
const CALLBACKS_QUEUED_MAX: usize = 4_096;
/// Callbacks one fsync completes at most.
const CALLBACKS_PER_SYNC_MAX: usize = 4_096;

/// The syncing thread of one store. Dropping it (with the last clone of
/// the log store) ends the thread and waits for it, so the store's files
/// are closed once the store is dropped.
pub(crate) struct WalSyncer {
    db: Arc<DB>,
    queue: Option<SyncSender<LogFlushed<TypeConfig>>>,
    thread: Option<JoinHandle<()>>,
    /// Callbacks handed to [`WalSyncer::after_sync`] so far: tests tell by
    /// it which appends were synced in place.
    #[cfg(test)]
    handed: std::sync::atomic::AtomicU64,
}

impl WalSyncer {
    pub(crate) fn start(db: Arc<DB>) -> std::io::Result<WalSyncer> {
        let (queue, waiting) = mpsc::sync_channel(CALLBACKS_QUEUED_MAX);
        let thread_db = db.clone();
        let thread = std::thread::Builder::new()
            .name("berth-wal-sync".into())
            .spawn(move || sync_loop(&thread_db, &waiting))?;
        Ok(WalSyncer {
            db,
            queue: Some(queue),
            thread: Some(thread),
            #[cfg(test)]
            handed: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Completes `callback` once the WAL, with every batch written before
    /// this call, is on disk: on the thread, or here if the thread is
    /// gone. Waits while the queue is full, as a synced write would have.
    pub(crate) fn after_sync(&self, callback: LogFlushed<TypeConfig>) {
        #[cfg(test)]
        self.handed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let unqueued = match &self.queue {
            Some(queue) => queue.send(callback).err().map(|e| e.0),
            None => Some(callback),
        };
        if let Some(callback) = unqueued {
            sync_and_complete(&self.db, [callback]);
        }
    }

    /// How many callbacks were handed to this syncer.
    #[cfg(test)]
    pub(crate) fn handed(&self) -> u64 {
        self.handed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for WalSyncer {
    fn drop(&mut self) {
        // Closing the queue ends the loop once it has completed what is
        // queued.
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the WAL sync thread panicked");
            }
        }
    }
}

fn sync_loop(db: &DB, waiting: &Receiver<LogFlushed<TypeConfig>>) {
    let mut batch = Vec::new();
    while let Ok(first) = waiting.recv() {
        batch.push(first);
        while batch.len() < CALLBACKS_PER_SYNC_MAX {
            match waiting.try_recv() {
                Ok(callback) => batch.push(callback),
                Err(_) => break,
            }
        }
        sync_and_complete(db, batch.drain(..));
    }
}

/// One fsync of the WAL, then each callback told how it went.
fn sync_and_complete(db: &DB, callbacks: impl IntoIterator<Item = LogFlushed<TypeConfig>>) {
    let synced = db.flush_wal(true);
    if let Err(e) = &synced {
        tracing::error!(error = %e, "WAL fsync failed; the appends it covered are not durable");
    }
    for callback in callbacks {
        callback.log_io_completed(
            synced
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
    }
}
