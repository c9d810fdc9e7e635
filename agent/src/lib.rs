//! berth-agent: runs on every compute host, reports the host's inventory to
//! the Berth leader, launches the allocations the leader assigns and stops
//! the ones it no longer wants.
//!
//! The moving parts, each in its own module:
//!
//! - [`config`]: the TOML config file and command-line overrides.
//! - [`inventory`]: what this host has (CPUs, memory, GPUs, emulators) and
//!   whether it is fit to take work.
//! - [`session`]: the connection to the cluster: register, heartbeat, the
//!   assignment stream, following the leader, reconnecting; [`discover`]
//!   finds the leader by asking every server at once.
//! - [`reconcile`]: pure logic deciding what to start, stop and forget.
//! - [`jobsignal`]: signals a running job gets without being stopped
//!   (`--signal` before the time limit, `scancel --signal`).
//! - [`supervisor`]: owns the local allocation table and applies reconcile.
//! - [`runner`]: launches one job (as its user, under the job shim, in its
//!   process group and cgroup) and stops it; [`jobenv`] its environment,
//!   [`output`] its output paths, [`user`] who it runs as, [`cgroup`] its
//!   cgroup, [`statedir`] the records that let a restarted agent re-adopt
//!   it.
//! - [`outbox`]: reports to the leader, retried until acknowledged.
//! - [`agent`]: wires the above together.
//! - [`simulate`]: many simulated hosts in one process, for scale tests.

pub mod agent;
pub mod backoff;
pub mod cgroup;
pub mod config;
pub mod credentials;
pub mod discover;
pub mod inventory;
pub mod jobenv;
pub mod jobsignal;
pub mod outbox;
pub mod output;
pub mod procgroup;
pub mod reconcile;
pub mod runner;
pub mod session;
pub mod simulate;
pub mod statedir;
pub mod steps;
pub mod supervisor;
pub mod user;
