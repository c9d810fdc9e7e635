//! berthd: one Berth controller node.
//!
//! - [`config`]: the TOML config file;
//! - [`node`]: a running node (Raft instance, store, proposals and forwarding);
//! - [`forward`]: a follower's writes batched on their way to the leader;
//! - [`network`]: the Raft transport client (openraft's `RaftNetwork` over gRPC);
//! - [`wire`]: the Raft transport's payload: MessagePack, with a format
//!   version;
//! - [`listener`]: the ports' bounds (connections, request heads);
//! - [`raft_service`], [`api_service`], [`agent_service`]: the gRPC services;
//! - [`backup_service`]: the leader's side of `berth admin backup`;
//! - [`leader`]: the leader's scheduling loop and host liveness (leader soft
//!   state, invariant 5);
//! - [`metrics`]: Prometheus metrics at `/metrics`;
//! - [`rest`]: the REST/JSON API on the same HTTP listener, over the
//!   gRPC service's own methods;
//! - [`ui`]: the read-only web UI under `/ui/`, over the same service
//!   methods as REST;
//! - [`convert`]: between the wire types and the scheduler's model;
//! - [`sd_notify`]: readiness for systemd `Type=notify` units;
//! - [`server`]: wiring it all together;
//! - [`dev`]: `berthd dev`, a whole local cluster in one command.

// Only what `berthd` and the tests outside this crate use is public; the
// rest is the node's own.
// openraft's error types are large by design; its own crates allow this.
#![allow(clippy::result_large_err)]

mod agent_service;
mod api_metrics;
mod api_service;
mod authz;
mod backup_service;
pub mod config;
pub mod config_overlay;
pub mod convert;
pub mod dev;
mod forward;
mod leader;
mod listener;
mod metrics;
mod network;
mod node;
mod policy_convert;
mod raft_service;
mod rest;
pub mod sd_notify;
pub mod server;
mod step_access;
mod ui;
mod wire;
