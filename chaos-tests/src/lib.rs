//! Fault drills and the local-cluster harness they and the integration
//! tests run on.

pub mod bench;
pub mod child_run;
pub mod compose;
pub mod drill;
pub mod failover;
pub mod harness;
pub mod netlab;
pub mod pass_grid;
pub mod plots;
pub mod procs;
pub mod simulated_hosts;
pub mod slurm_peer;
pub mod snapshot_transfer;
