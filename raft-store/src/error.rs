//! Errors of opening and using the store.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the Berth store at {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    #[error("cannot create a Berth store at {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} holds a RocksDB without Berth's column families: another program's \
         database, or a Berth store whose MANIFEST is damaged; point data_dir elsewhere, \
         or restore this node from its peers"
    )]
    ForeignRocksDb { path: PathBuf },
    #[error("{path} is not a directory; point data_dir at a directory")]
    NotADirectory { path: PathBuf },
    #[error("there is no Berth store at {path} (no RocksDB CURRENT file)")]
    Missing { path: PathBuf },
    #[error(
        "{path} is not a Berth data directory (it holds files but no Berth store); \
         point data_dir at an empty or Berth-owned directory"
    )]
    Foreign { path: PathBuf },
    /// A store of another format, older or newer: no format is migrated
    /// before 1.0.
    #[error(
        "store format {found} at {path} is not supported: this berthd reads format \
         {supported} only; formats may change before 1.0 (restore from a backup taken \
         with this version)"
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("the store at {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("cannot start the {thread} thread for the store at {path}: {source}")]
    StoreThread {
        path: PathBuf,
        /// Which thread: "WAL sync".
        thread: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot pin the state for a snapshot: {0}")]
    SnapshotPin(String),
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A snapshot's or a backup's JSON.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A stored value (MessagePack).
    #[error("stored value: {0}")]
    Codec(#[from] crate::codec::CodecError),
}
