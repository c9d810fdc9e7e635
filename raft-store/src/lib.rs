//! Berth's replicated state: openraft log and state-machine storage on
//! RocksDB, and the state machine's command set.
//!
//! - [`command`]: what can be proposed (`Request`, versioned) and answered.
//! - [`state`]: the in-memory scheduler state and its deterministic `apply`.
//! - [`policy`]: the replicated policy objects (QOS, accounts, users,
//!   partitions) and usage, and how a change to them is validated.
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

pub mod backup;
pub mod check;
pub mod codec;
pub mod command;
pub mod error;
pub mod policy;
pub mod snapshot_data;
pub mod state;
pub mod store;

pub use backup::{Backup, BackupError, BackupHeader};
pub use check::{check, CheckReport};
pub use command::{Command, JobAction, JobUpdate, Request, Response, COMMAND_VERSION};
pub use error::StoreError;
pub use snapshot_data::SnapshotData;
pub use state::{
    HostRecord, JobEvent, JobRecord, PassInput, SharedState, SignalRequest, SmState, StepRecord,
    StepReport, HOST_DRAIN_REASON_BYTES_MAX, HOST_STEP_ADDR_BYTES_MAX, SIGNALS_PER_JOB_MAX,
    STEPS_PER_JOB_MAX,
};
pub use store::{open, LogStore, StateMachineStore, StoreHandles};

/// Raft node ids.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft type configuration for Berth.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot_data::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft instance type.
pub type Raft = openraft::Raft<TypeConfig>;
