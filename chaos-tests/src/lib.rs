//! Fault drills and the local-cluster harness they and the integration
//! tests run on.

pub mod bench;
pub mod harness;
pub mod snapshot_transfer;
