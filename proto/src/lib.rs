//! Berth's wire protocols, generated from the `.proto` files under `proto/`.
//!
//! - [`api`]: the public API (`berth.v1`) for users, admins and tools.
//! - [`agent`]: the agent protocol (`berth.agent.v1`) between `berth-agent`
//!   and the leader.
//! - [`raft`]: the Raft transport (`berth.raft.v1`) between `berthd` nodes.

#![allow(clippy::all, missing_docs)]

/// Generated code, nested as the protobuf packages are so that
/// cross-package references (`berth.agent.v1` uses `berth.v1`) resolve.
pub mod berth {
    /// Public API, package `berth.v1`.
    pub mod v1 {
        tonic::include_proto!("berth.v1");
    }
    pub mod agent {
        /// Agent protocol, package `berth.agent.v1`.
        pub mod v1 {
            tonic::include_proto!("berth.agent.v1");
        }
    }
    pub mod raft {
        /// Raft transport, package `berth.raft.v1`.
        pub mod v1 {
            tonic::include_proto!("berth.raft.v1");
        }
    }
}

pub use berth::agent::v1 as agent;
pub use berth::raft::v1 as raft;
pub use berth::v1 as api;

/// Largest gRPC message any Berth endpoint accepts or sends, in bytes.
/// Snapshot chunks are 1 MiB; job lists are bounded by `limit`.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Largest `data` of one `BackupChunk` in a `BackupState` stream, in bytes.
pub const BACKUP_CHUNK_BYTES: usize = 1024 * 1024;
