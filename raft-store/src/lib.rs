//! Storage for Berth's replicated state: openraft log and state-machine
//! storage on RocksDB. The state machine itself, its commands and its
//! deterministic `apply`, is `berth-state`'s; this crate applies committed
//! entries with it and persists what they changed.
//!
//! - [`apply_entry`]: one committed entry applied, and where the state
//!   stands in the log.
//! - [`store`]: the RocksDB layout, log storage and state-machine storage.
//! - [`snapshot_data`]: a Raft snapshot's bytes, serialized from the
//!   store's tables only when a follower needs them.
//! - [`codec`]: how stored values and Raft messages are encoded
//!   (MessagePack with field names).
//! - [`check`]: read-only verification of a store (`berthd store check`).
//! - [`backup`]: the backup file (`berth admin backup`) and restoring one
//!   into a new store (`berthd store restore`).
//!
//! Durability (invariant 4): every log append, vote and state-machine batch
//! is written with a synced WAL before openraft is told it is durable.

// openraft's error types are large by design; its own crates allow this.
#![allow(clippy::result_large_err)]

pub mod apply_entry;
pub mod backup;
pub mod check;
pub mod codec;
pub mod error;
pub mod snapshot_data;
pub mod store;

pub use apply_entry::{apply_entry, AppliedMeta, NewerCommand};
pub use backup::{Backup, BackupError, BackupHeader};
use berth_state::Request;
pub use check::{check, CheckReport};
pub use error::StoreError;
pub use snapshot_data::SnapshotData;
pub use store::{open, LogStore, StateMachineStore, StoreHandles};

/// Raft node ids.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft type configuration for Berth.
    pub TypeConfig:
        D = Request,
        R = berth_state::Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot_data::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft instance type.
pub type Raft = openraft::Raft<TypeConfig>;
