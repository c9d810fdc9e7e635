//! Partitions: named sets of hosts with their own time limits, node limits,
//! priority factor and an optional partition QOS.

use serde::{Deserialize, Serialize};

use crate::qos::PreemptMode;

/// The partition every host is in when none is configured (Slurm's usual
/// default name): a job may name it, and `sinfo` and `squeue` show it.
pub const IMPLICIT_PARTITION: &str = "batch";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Partition {
    pub name: String,
    /// Jobs that name no partition go to the default one.
    pub default: bool,
    /// Slurm's `MaxTime`: a job asking more waits with `PartitionTimeLimit`
    /// (unless its QOS has `PartitionTimeLimit`); it is also the default
    /// time limit when `default_time_s` is unset.
    pub max_time_s: Option<u64>,
    pub default_time_s: Option<u64>,
    /// Slurm's `MaxNodes` / `MinNodes` per job (`PartitionNodeLimit`).
    pub max_nodes: Option<u32>,
    pub min_nodes: Option<u32>,
    /// Slurm's `PriorityJobFactor`, normalised by the highest partition's.
    pub priority_job_factor: u32,
    /// The partition QOS ("" = none): its limits apply to every job in the
    /// partition, ahead of the job's own QOS unless that has `OverPartQOS`.
    pub qos: String,
    pub preempt_mode: PreemptMode,
    pub reserve_all_alternatives: bool,
}

impl Partition {
    /// The time limit a job gets when it asks for none.
    pub fn default_limit_s(&self) -> Option<u64> {
        self.default_time_s.or(self.max_time_s)
    }
}
