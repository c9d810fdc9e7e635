//! berth-agent: runs on every compute host, reports the host's inventory to
//! the Berth leader, launches the allocations the leader assigns and stops
//! the ones it no longer wants.
//!
//! The moving parts, each in its own module:
//!
//! - [`config`]: the TOML config file and command-line overrides.
//! - [`inventory`]: what this host has (CPUs, memory).
//! - [`session`]: the connection to the cluster: register, heartbeat, the
//!   assignment stream, following the leader, reconnecting.
//! - [`reconcile`]: pure logic deciding what to start, stop and forget.
//! - [`supervisor`]: owns the local allocation table and applies reconcile.
//! - [`runner`]: launches one job's process group and stops it.
//! - [`outbox`]: reports to the leader, retried until acknowledged.
//! - [`agent`]: wires the above together.

pub mod agent;
pub mod backoff;
pub mod config;
pub mod credentials;
pub mod inventory;
pub mod outbox;
pub mod output;
pub mod procgroup;
pub mod reconcile;
pub mod runner;
pub mod session;
pub mod supervisor;
