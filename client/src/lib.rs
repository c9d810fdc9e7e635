//! `berth_client`: how the `berth` CLI, and tools such as the chaos-test
//! harness, talk to a Berth cluster and print what it says in Slurm's words.
//!
//! - [`connect`], [`Cluster`]: reach any node of a cluster, riding out a
//!   leader failover (any node accepts every call; followers forward
//!   writes to the leader).
//! - [`servers_from`]: the server list from `--server` / `BERTH_SERVER`.
//! - [`time`], [`mem`], [`state`], [`export`], [`script`], [`begin`]: Slurm's
//!   input formats (`-t`, `--mem`, `-t` states, `--export`, `#SBATCH`
//!   lines, `--begin`).
//! - [`queue`], [`show`], [`json`]: output as squeue, scontrol, or JSON.
//! - [`squeue_format`], [`sacct`], [`sinfo`], [`sacctmgr`], [`hostlist`]:
//!   squeue -o/-O, sacct, sinfo and scontrol show node/partition, sacctmgr's
//!   words, Slurm's compressed host lists.
//! - [`backup`]: receiving a backup stream into a file atomically.

pub mod alt;
pub mod array_ids;
pub mod backup;
pub mod begin;
pub mod cluster;
pub mod cluster_admin;
pub mod config_file;
pub mod connect;
pub mod error;
pub mod export;
pub mod hostlist;
pub mod json;
pub mod mem;
pub mod output;
pub mod queue;
pub mod reservation;
pub mod sacct;
pub mod sacctmgr;
pub mod script;
pub mod servers;
pub mod show;
pub mod sinfo;
pub mod squeue_format;
pub mod state;
pub mod time;
pub mod user;

pub use cluster::{Cluster, RetryPolicy};
pub use connect::{
    connect, set_ca_file, set_token, ApiClient, CA_ENV, CONNECT_TIMEOUT_MS, REQUEST_TIMEOUT_MS,
    TOKEN_ENV,
};
pub use error::ClientError;
pub use servers::{servers_from, DEFAULT_SERVER, SERVER_ENV};

/// A comma list with blanks and empty entries dropped (`-p a,b`,
/// `--user a,b`).
pub fn comma_list(text: Option<&str>) -> Vec<String> {
    text.map(|t| {
        t.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// A `--wrap` job's default name: the command's first word (api.proto's
/// default, filled by the client so every server agrees).
pub fn wrap_job_name(command: &str) -> String {
    command
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Now, in ms since the Unix epoch, for the TIME column. A clock before
/// 1970 reads as 0 rather than failing a listing.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
