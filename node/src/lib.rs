//! berthd: one Berth controller node.
//!
//! - [`config`]: the TOML config file;
//! - [`node`]: a running node (Raft instance, store, proposals and forwarding);
//! - [`forward`]: a follower's writes batched on their way to the leader;
//! - [`network`]: the Raft transport client (openraft's `RaftNetwork` over gRPC);
//! - [`wire`]: how Raft transport payloads are encoded (JSON or MessagePack,
//!   as each peer reads);
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

// openraft's error types are large by design; its own crates allow this.
#![allow(clippy::result_large_err)]

pub mod agent_service;
pub mod api_metrics;
pub mod api_service;
pub mod authz;
pub mod backup_service;
pub mod config;
pub mod config_overlay;
pub mod convert;
pub mod dev;
pub mod forward;
pub mod leader;
pub mod listener;
pub mod metrics;
pub mod network;
pub mod node;
pub mod one_shot_submit;
pub mod peer_call;
pub mod policy_convert;
pub mod raft_service;
pub mod rest;
pub mod sd_notify;
pub mod server;
pub mod step_access;
pub mod ui;
pub mod whole_request;
pub mod wire;
