//! berthd's configuration file (TOML). Unknown keys are rejected so a typo
//! never silently falls back to a default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use berth_scheduler::idlefill::IdleFill;
use berth_scheduler::preempt::PreemptPolicy;
use berth_scheduler::{Policy, PriorityWeights};

use crate::config_overlay::{self, Setting};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's Raft id; must appear in `members`.
    pub node_id: u64,
    /// gRPC address this node serves on (public API, agent protocol, Raft).
    pub listen: SocketAddr,
    /// Where Prometheus metrics are served (`/metrics`); none when absent.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Where the node keeps its RocksDB store.
    pub data_dir: PathBuf,
    /// Initialise the cluster from `members` if this node's store is new.
    /// Set it on exactly one node; it is harmless on restart.
    #[serde(default)]
    pub bootstrap: bool,
    /// The initial voters, this node included.
    pub members: Vec<MemberConfig>,
    #[serde(default)]
    pub raft: RaftTimings,
    #[serde(default)]
    pub scheduler: SchedulerConfig,
    #[serde(default)]
    pub agents: AgentPolicy,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub ui: UiConfig,
    /// Bounds on the gRPC and HTTP ports, each port its own.
    #[serde(default)]
    pub listener: ListenerLimits,
    /// Threads of the async runtime that serves the API, Raft and agents;
    /// 0 (the default) is one per CPU. Nodes that share a machine's cores
    /// (`berthd dev`, the test harness) each get their share
    /// ([`colocated_worker_threads`]), so they do not hand work back and
    /// forth between more threads than there are cores.
    #[serde(default)]
    pub worker_threads: usize,
}

/// Async runtime threads at most (`worker_threads`).
pub const WORKER_THREADS_MAX: usize = 1_024;

/// `worker_threads` for each of `nodes` nodes that share this machine's
/// cores: the cores divided among them, at least one. On 2 cores with 3
/// nodes that is 1 thread each, against tokio's 2: a storm of
/// one-process-per-job submits cost the three nodes 0.49 against 0.58 ms
/// of CPU per job, with a third fewer context switches (BENCHMARKS.md,
/// thirteenth session).
pub fn colocated_worker_threads(nodes: u64) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nodes = usize::try_from(nodes.max(1)).unwrap_or(usize::MAX);
    (cores / nodes).clamp(1, WORKER_THREADS_MAX)
}

/// The web UI under `/ui/` on the HTTP listener (`metrics_listen`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// With auth on, a user who is not an admin sees every job's public
    /// fields (id, name, user, account, partition, QOS, state, reason,
    /// resources) but the details (command, working directory,
    /// environment, output paths, comment, event history) of their own
    /// jobs only. Off by default: every authenticated user sees all.
    pub private_job_details: bool,
}

/// What a port holds for its callers at most (`listener.rs`). Each of the
/// two ports (gRPC, HTTP) has these bounds of its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerLimits {
    /// Connections open at once; further ones wait in the kernel's backlog
    /// until one closes. Every agent holds one to the node it reports to,
    /// so a site sets it above its host count.
    pub max_connections: usize,
    /// Requests in flight on one HTTP/2 connection (its concurrent streams).
    pub max_streams_per_connection: u32,
    /// The largest API or agent request, or REST body, in bytes. Raft
    /// messages between nodes keep their own bound (16 MiB).
    pub max_request_bytes: usize,
    /// A new connection must have sent its first request head (TLS
    /// handshake and HTTP/2 preface included) within this long, or it is
    /// closed.
    pub head_timeout_ms: u64,
}

/// Bounds of `max_request_bytes`: below the smallest, a batch script would
/// not fit; above the largest, a request exceeds what the gRPC codec takes.
pub const REQUEST_BYTES_MIN: usize = 64 * 1024;
pub const REQUEST_BYTES_MAX: usize = berth_proto::MAX_MESSAGE_BYTES;

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            max_connections: 16_384,
            max_streams_per_connection: 256,
            max_request_bytes: REQUEST_BYTES_MAX,
            head_timeout_ms: 10_000,
        }
    }
}

impl ListenerLimits {
    fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(format!(
                "listener.max_connections must be from 1 to {}, not {}",
                tokio::sync::Semaphore::MAX_PERMITS,
                self.max_connections
            ));
        }
        if self.max_streams_per_connection == 0 {
            return Err("listener.max_streams_per_connection must be at least 1".into());
        }
        if !(REQUEST_BYTES_MIN..=REQUEST_BYTES_MAX).contains(&self.max_request_bytes) {
            return Err(format!(
                "listener.max_request_bytes must be from {REQUEST_BYTES_MIN} to {REQUEST_BYTES_MAX}, not {}",
                self.max_request_bytes
            ));
        }
        if self.head_timeout_ms == 0 {
            return Err("listener.head_timeout_ms must be at least 1".into());
        }
        Ok(())
    }
}

/// TLS on the gRPC listener and on every connection this node opens. Off
/// when unset; all three files together turn it on.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// This node's certificate chain (PEM); its names must include the
    /// address others dial (e.g. `IP:10.0.0.5`).
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    pub key_file: Option<PathBuf>,
    /// The CA that signed every node's certificate (PEM).
    pub ca_file: Option<PathBuf>,
}

/// Authentication. Off by default (a local dev cluster); a site turns it
/// on with both secrets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Require a signed token on every API call, and the cluster secret
    /// between nodes and from agents.
    pub enabled: bool,
    /// The secret user tokens are signed with (`berth admin token issue`).
    pub token_secret_file: Option<PathBuf>,
    /// The secret nodes and agents share.
    pub cluster_secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    pub id: u64,
    /// gRPC address, host:port.
    pub addr: String,
}

/// Raft timings. Heartbeats every 100 ms and elections after 300–600 ms of
/// silence. openraft grants no vote while the old leader's lease (the
/// maximum election timeout) runs, so a killed leader is replaced about
/// 1.1 s later (p50 of `berth-drill failover` on loopback), while a GC
/// pause or a slow fsync (tens of ms) stays far below the timeout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTimings {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind a snapshot, for followers that lag.
    pub log_entries_kept_behind_snapshot: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        RaftTimings {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            snapshot_every_entries: 20_000,
            log_entries_kept_behind_snapshot: 5_000,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// A pass runs this often, and also right after a submit or an exit.
    pub pass_interval_ms: u64,
    /// Jobs examined per pass at most.
    pub max_jobs_per_pass: usize,
    /// The keys below are the simulator's `[scheduler]` keys (SIM.md), so
    /// a policy tried with `berth sim` is written the same way here.
    /// EASY backfill; `false` is strict priority order.
    pub backfill: bool,
    pub bf_reservations: usize,
    pub bf_resolution_s: u64,
    pub bf_window_s: u64,
    pub bf_max_job_test: usize,
    pub priority_weight_age: u32,
    pub priority_weight_fairshare: u32,
    pub priority_weight_job_size: u32,
    pub priority_weight_partition: u32,
    pub priority_weight_qos: u32,
    pub priority_weight_assoc: u32,
    pub priority_max_age_s: u64,
    /// Preemption (docs/preemption.md): off unless `preemption_enabled`.
    pub preemption_enabled: bool,
    pub min_preemption_runtime_s: u64,
    pub preemption_gap: u64,
    /// Percent utilization of a blocked job's hosts below which nothing is
    /// evicted (0 to 100).
    pub preemption_threshold: u32,
    pub preemption_multi_victim: bool,
    pub max_evictions_per_tick: usize,
    /// Idle-fill (docs/idle-fill.md): lending what quotas leave idle.
    pub idle_fill_enabled: bool,
    pub idle_fill_exempt_secs: u64,
    pub idle_fill_max_borrow_factor: f64,
    pub idle_fill_max_cluster_fraction: f64,
    /// Multi-path reservations (docs/multi-path.md); partitions opt in.
    pub reserve_all_alternatives_top_n: usize,
    pub max_reserve_time_s: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        let policy = Policy::default();
        let w = &policy.priority;
        SchedulerConfig {
            pass_interval_ms: 1_000,
            max_jobs_per_pass: 10_000,
            backfill: policy.backfill,
            bf_reservations: policy.bf_reservations,
            bf_resolution_s: policy.bf_resolution_s,
            bf_window_s: policy.bf_window_s,
            bf_max_job_test: policy.bf_max_job_test,
            priority_weight_age: w.age,
            priority_weight_fairshare: w.fairshare,
            priority_weight_job_size: w.job_size,
            priority_weight_partition: w.partition,
            priority_weight_qos: w.qos,
            priority_weight_assoc: w.assoc,
            priority_max_age_s: w.max_age_s,
            preemption_enabled: policy.preemption.enabled,
            min_preemption_runtime_s: policy.preemption.min_runtime_s,
            preemption_gap: policy.preemption.gap.max(0) as u64,
            preemption_threshold: policy.preemption.threshold_pct,
            preemption_multi_victim: policy.preemption.multi_victim,
            max_evictions_per_tick: policy.preemption.max_evictions_per_tick,
            idle_fill_enabled: policy.idle_fill.enabled,
            idle_fill_exempt_secs: policy.idle_fill.exempt_s,
            idle_fill_max_borrow_factor: policy.idle_fill.max_borrow_factor,
            idle_fill_max_cluster_fraction: policy.idle_fill.max_cluster_fraction,
            reserve_all_alternatives_top_n: policy.reserve_all_alternatives_top_n,
            max_reserve_time_s: policy.max_reserve_time_s,
        }
    }
}

impl SchedulerConfig {
    /// The scheduler's policy these settings make.
    pub fn policy(&self) -> Policy {
        let base = Policy::default();
        Policy {
            max_jobs_per_pass: self.max_jobs_per_pass,
            backfill: self.backfill,
            bf_reservations: self.bf_reservations,
            bf_resolution_s: self.bf_resolution_s,
            bf_window_s: self.bf_window_s,
            bf_max_job_test: self.bf_max_job_test,
            priority: PriorityWeights {
                age: self.priority_weight_age,
                fairshare: self.priority_weight_fairshare,
                job_size: self.priority_weight_job_size,
                partition: self.priority_weight_partition,
                qos: self.priority_weight_qos,
                assoc: self.priority_weight_assoc,
                max_age_s: self.priority_max_age_s.max(1),
                // The live state machine decays usage with a fixed 7-day
                // half-life (it must not depend on node-local config).
                decay_half_life_s: base.priority.decay_half_life_s,
            },
            preemption: PreemptPolicy {
                enabled: self.preemption_enabled,
                min_runtime_s: self.min_preemption_runtime_s,
                // Checked by `validate` to fit.
                gap: i64::try_from(self.preemption_gap).unwrap_or(i64::MAX),
                threshold_pct: self.preemption_threshold,
                multi_victim: self.preemption_multi_victim,
                max_evictions_per_tick: self.max_evictions_per_tick,
            },
            idle_fill: IdleFill {
                enabled: self.idle_fill_enabled,
                exempt_s: self.idle_fill_exempt_secs,
                max_borrow_factor: self.idle_fill_max_borrow_factor,
                max_cluster_fraction: self.idle_fill_max_cluster_fraction,
            },
            reserve_all_alternatives_top_n: self.reserve_all_alternatives_top_n,
            max_reserve_time_s: self.max_reserve_time_s,
            ..base
        }
    }

    /// The ranges the simulator's scenario parser enforces for the same
    /// keys, each error naming its key.
    pub fn validate(&self) -> Result<(), String> {
        if self.pass_interval_ms == 0 || self.max_jobs_per_pass == 0 {
            return Err(
                "scheduler.pass_interval_ms and scheduler.max_jobs_per_pass must be > 0".into(),
            );
        }
        if self.preemption_threshold > 100 {
            return Err(format!(
                "scheduler.preemption_threshold must be a percentage from 0 to 100, not {}",
                self.preemption_threshold
            ));
        }
        if i64::try_from(self.preemption_gap).is_err() {
            return Err(format!(
                "scheduler.preemption_gap {} is too large",
                self.preemption_gap
            ));
        }
        self.policy()
            .idle_fill
            .validate()
            .map_err(|e| format!("scheduler.{e}"))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentPolicy {
    /// How often agents heartbeat.
    pub heartbeat_interval_ms: u64,
    /// A host not heard from for this long takes no new work.
    pub heartbeat_timeout_ms: u64,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    pub stop_grace_s: u64,
}

impl Default for AgentPolicy {
    fn default() -> Self {
        AgentPolicy {
            heartbeat_interval_ms: 1_000,
            heartbeat_timeout_ms: 10_000,
            stop_grace_s: 30,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("config {path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
}

impl NodeConfig {
    /// The file alone.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        NodeConfig::load_with(path, &[])
    }

    /// The file with `settings` (from `BERTH_` variables and `--set` flags,
    /// see `config_overlay`) written over it, then checked as one.
    pub fn load_with(path: &Path, settings: &[Setting]) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|source| ConfigError::Parse {
                path: path.to_path_buf(),
                source,
            })?;
        config_overlay::apply(&mut table, settings).map_err(|problem| ConfigError::Invalid {
            path: path.to_path_buf(),
            problem,
        })?;
        let config: NodeConfig = table.try_into().map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        config.validate().map_err(|problem| ConfigError::Invalid {
            path: path.to_path_buf(),
            problem,
        })?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), String> {
        let tls = [&self.tls.cert_file, &self.tls.key_file, &self.tls.ca_file];
        if tls.iter().any(|f| f.is_some()) && !tls.iter().all(|f| f.is_some()) {
            return Err("tls needs cert_file, key_file and ca_file together".into());
        }
        if self.auth.enabled
            && (self.auth.token_secret_file.is_none() || self.auth.cluster_secret_file.is_none())
        {
            return Err(
                "auth.enabled needs auth.token_secret_file and auth.cluster_secret_file".into(),
            );
        }
        if self.node_id == 0 {
            return Err("node_id must be at least 1".into());
        }
        if !self.members.iter().any(|m| m.id == self.node_id) {
            return Err(format!("node_id {} is not listed in members", self.node_id));
        }
        let mut ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.members.len() {
            return Err("members lists the same id twice".into());
        }
        let r = &self.raft;
        if r.heartbeat_interval_ms == 0 || r.election_timeout_min_ms <= r.heartbeat_interval_ms {
            return Err(
                "raft.election_timeout_min_ms must exceed raft.heartbeat_interval_ms (> 0)".into(),
            );
        }
        if r.election_timeout_max_ms <= r.election_timeout_min_ms {
            return Err(
                "raft.election_timeout_max_ms must exceed raft.election_timeout_min_ms".into(),
            );
        }
        if self.worker_threads > WORKER_THREADS_MAX {
            return Err(format!(
                "worker_threads must be at most {WORKER_THREADS_MAX} (0: one per CPU), got {}",
                self.worker_threads
            ));
        }
        self.scheduler.validate()?;
        self.listener.validate()?;
        if self.agents.heartbeat_timeout_ms <= self.agents.heartbeat_interval_ms {
            return Err(
                "agents.heartbeat_timeout_ms must exceed agents.heartbeat_interval_ms".into(),
            );
        }
        Ok(())
    }

    pub fn member_addr(&self, id: u64) -> Option<&str> {
        self.members
            .iter()
            .find(|m| m.id == id)
            .map(|m| m.addr.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
node_id = 1
listen = "127.0.0.1:7101"
data_dir = "/tmp/x"
bootstrap = true
[[members]]
id = 1
addr = "127.0.0.1:7101"
"#;

    #[test]
    fn parses_with_defaults() {
        let c: NodeConfig = toml::from_str(GOOD).expect("parse");
        assert!(c.validate().is_ok());
        assert_eq!(c.scheduler.pass_interval_ms, 1_000);
        assert_eq!(c.worker_threads, 0, "one per CPU unless set");
    }

    #[test]
    fn worker_threads_are_bounded_and_shared_among_colocated_nodes() {
        let mut c: NodeConfig =
            toml::from_str(&format!("worker_threads = 4\n{GOOD}")).expect("parse");
        assert_eq!(c.worker_threads, 4);
        assert!(c.validate().is_ok());
        c.worker_threads = WORKER_THREADS_MAX + 1;
        let e = c.validate().expect_err("too many threads");
        assert!(e.contains("worker_threads must be at most"), "{e}");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(colocated_worker_threads(1), cores.min(WORKER_THREADS_MAX));
        assert_eq!(colocated_worker_threads(0), colocated_worker_threads(1));
        assert_eq!(colocated_worker_threads(u64::MAX), 1, "never below one");
        assert_eq!(colocated_worker_threads(3), (cores / 3).max(1));
    }

    #[test]
    fn environment_and_flags_override_the_file_and_typos_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node.toml");
        std::fs::write(&path, GOOD).expect("write");
        let mut settings = config_overlay::from_env([(
            "BERTH_SCHEDULER__PASS_INTERVAL_MS".to_string(),
            "250".to_string(),
        )]);
        settings.push(config_overlay::from_flag("agents.stop_grace_s=5").expect("flag"));
        let c = NodeConfig::load_with(&path, &settings).expect("load");
        assert_eq!(c.scheduler.pass_interval_ms, 250);
        assert_eq!(c.agents.stop_grace_s, 5);
        let typo =
            config_overlay::from_env([("BERTH_SCHEDULER__PASS_INTERVAL".into(), "1".into())]);
        let err = NodeConfig::load_with(&path, &typo).expect_err("typo accepted");
        assert!(err.to_string().contains("pass_interval"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected() {
        let text = format!("{GOOD}\nbootsrap = false\n");
        let err = toml::from_str::<NodeConfig>(&text).expect_err("typo accepted");
        assert!(err.to_string().contains("bootsrap"), "{err}");
    }

    #[test]
    fn preemption_idle_fill_and_multi_path_keys_reach_the_policy() {
        let c: NodeConfig = toml::from_str(GOOD).expect("parse");
        let p = c.scheduler.policy();
        assert!(
            !p.preemption.enabled && !p.idle_fill.enabled,
            "off by default"
        );
        assert_eq!(p.preemption, PreemptPolicy::default());
        assert_eq!(p.idle_fill, IdleFill::default());
        assert_eq!(p.reserve_all_alternatives_top_n, 1);
        let text = format!(
            "{GOOD}[scheduler]\npreemption_enabled = true\npreemption_gap = 5\n\
             preemption_threshold = 0\nmax_evictions_per_tick = 3\n\
             preemption_multi_victim = true\nmin_preemption_runtime_s = 2\n\
             idle_fill_enabled = true\nidle_fill_exempt_secs = 30\n\
             idle_fill_max_borrow_factor = 2.0\nidle_fill_max_cluster_fraction = 0.5\n\
             reserve_all_alternatives_top_n = 4\nmax_reserve_time_s = 600\n"
        );
        let c: NodeConfig = toml::from_str(&text).expect("parse");
        assert!(c.validate().is_ok());
        let p = c.scheduler.policy();
        assert_eq!(
            p.preemption,
            PreemptPolicy {
                enabled: true,
                min_runtime_s: 2,
                gap: 5,
                threshold_pct: 0,
                multi_victim: true,
                max_evictions_per_tick: 3,
            }
        );
        assert!(p.idle_fill.enabled && p.idle_fill.exempt_s == 30);
        assert_eq!(p.idle_fill.max_borrow_factor, 2.0);
        assert_eq!(p.idle_fill.max_cluster_fraction, 0.5);
        assert_eq!(
            (p.reserve_all_alternatives_top_n, p.max_reserve_time_s),
            (4, 600)
        );
        for (bad, named) in [
            ("preemption_threshold = 101", "preemption_threshold"),
            ("idle_fill_exempt_secs = 3601", "idle_fill_exempt_secs"),
            (
                "idle_fill_max_cluster_fraction = 1.5",
                "idle_fill_max_cluster_fraction",
            ),
            (
                "idle_fill_max_borrow_factor = -1.0",
                "idle_fill_max_borrow_factor",
            ),
        ] {
            let c: NodeConfig =
                toml::from_str(&format!("{GOOD}[scheduler]\n{bad}\n")).expect("parse");
            let err = c.validate().expect_err(bad);
            assert!(err.contains(named), "{bad}: {err}");
        }
        let typo = format!("{GOOD}[scheduler]\npreemption_enable = true\n");
        let err = toml::from_str::<NodeConfig>(&typo).expect_err("typo accepted");
        assert!(err.to_string().contains("preemption_enable"), "{err}");
    }

    #[test]
    fn node_must_be_a_member() {
        let mut c: NodeConfig = toml::from_str(GOOD).expect("parse");
        c.node_id = 2;
        assert!(c.validate().unwrap_err().contains("not listed"));
    }
}

#[cfg(test)]
mod docs_tests {
    use super::*;

    /// docs/config.md names every key of every section, so it cannot fall
    /// behind the code.
    #[test]
    fn every_key_is_documented() {
        let doc = include_str!("../../docs/config.md");
        let mut keys: Vec<String> = Vec::new();
        for value in [
            toml::Value::try_from(RaftTimings::default()),
            toml::Value::try_from(SchedulerConfig::default()),
            toml::Value::try_from(AgentPolicy::default()),
            toml::Value::try_from(AuthConfig {
                enabled: false,
                token_secret_file: Some("t".into()),
                cluster_secret_file: Some("c".into()),
            }),
            toml::Value::try_from(TlsConfig {
                cert_file: Some("c".into()),
                key_file: Some("k".into()),
                ca_file: Some("a".into()),
            }),
        ] {
            let table = value.expect("serialize defaults");
            keys.extend(table.as_table().into_iter().flat_map(|t| t.keys().cloned()));
        }
        keys.extend(
            [
                "node_id",
                "listen",
                "metrics_listen",
                "data_dir",
                "bootstrap",
                "members",
            ]
            .map(String::from),
        );
        for key in keys {
            assert!(
                doc.contains(&format!("`{key}`")),
                "docs/config.md lacks `{key}`"
            );
        }
    }
}
