//! The resource model: hosts with inventory, jobs with what they ask for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Job ids are handed out by the replicated state machine, starting at 1,
/// never reused (invariant 4).
pub type JobId = u64;

/// CPUs and memory: the quantities the pass places.
/// GPUs and emulator units join here with the scheduler-core issue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: u32,
    pub mem_mb: u64,
}

impl Resources {
    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_sub(other.cpus),
            mem_mb: self.mem_mb.saturating_sub(other.mem_mb),
        }
    }

    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_add(other.cpus),
            mem_mb: self.mem_mb.saturating_add(other.mem_mb),
        }
    }

    /// True when every component of `self` is at most that of `other`.
    pub fn within(self, other: Resources) -> bool {
        self.cpus <= other.cpus && self.mem_mb <= other.mem_mb
    }

    /// The smaller of each component: what is free throughout two spans.
    pub fn component_min(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.min(other.cpus),
            mem_mb: self.mem_mb.min(other.mem_mb),
        }
    }
}

/// What a host has, as its agent discovered it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub cpus: u32,
    pub mem_mb: u64,
}

impl Inventory {
    pub fn resources(&self) -> Resources {
        Resources {
            cpus: self.cpus,
            mem_mb: self.mem_mb,
        }
    }
}

/// Whether a host may take new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostState {
    /// Its agent heartbeats; it takes work.
    Up,
    /// Its agent has not been heard within the heartbeat timeout.
    Down,
    /// An admin or a health check took it out of service.
    Drain,
}

/// A compute host as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    pub inventory: Inventory,
    pub state: HostState,
    /// Sum of the allocations running on it.
    pub allocated: Resources,
}

impl Host {
    pub fn free(&self) -> Resources {
        self.inventory.resources().saturating_sub(self.allocated)
    }
}

/// What a job asks for and what it runs. Mirrors `berth.v1.JobSpec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub user: String,
    pub command: String,
    pub workdir: String,
    pub env: BTreeMap<String, String>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub nodes: u32,
    pub time_limit_s: u64,
    pub partitions: Vec<String>,
    pub qos: String,
    pub account: String,
    pub gres: Vec<String>,
    pub stdout_path: String,
    pub stderr_path: String,
    pub requeue: bool,
    pub hold: bool,
    pub nice: i32,
    pub comment: String,
}

impl JobSpec {
    /// What one host must provide for this job.
    pub fn per_host(&self) -> Resources {
        Resources {
            cpus: self.cpus.max(1),
            mem_mb: self.mem_mb,
        }
    }
}

/// Lifecycle states, Slurm's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Pending,
    Running,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
}

impl JobState {
    pub fn is_final(self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running)
    }

    /// Slurm's upper-case name, as squeue and sacct print it.
    pub fn slurm_name(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
        }
    }
}

/// Where a job runs: one placement, fenced by its allocation id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub alloc_id: u64,
    pub host: String,
    pub resources: Resources,
    pub start_ms: u64,
}

/// A job as the state machine keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    pub submit_ms: u64,
    pub end_ms: u64,
    pub alloc: Option<Allocation>,
    pub exit_code: i32,
    pub exit_signal: i32,
    /// Set when a cancel of a running job was committed: the agent stops it
    /// and the exit report finishes it as CANCELLED.
    pub cancel_requested: bool,
    /// Set when the leader found the job past its time limit: the agent
    /// stops it with the stop grace and the exit report ends it TIMEOUT.
    #[serde(default)]
    pub time_limit_reached: bool,
}
