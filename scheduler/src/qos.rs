//! Quality of service: Slurm's QOS with its priority, limits, flags and
//! preemption settings (`slurm-qos.html` is the specification). The same
//! [`Limits`] set also sits on accounts (associations).

use serde::{Deserialize, Serialize};

/// The trackable resources limits are written in (Slurm's TRES). Per-host
/// amounts multiply by the job's node count; `node` counts hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TresKind {
    Node,
    Cpu,
    #[serde(rename = "mem_mb")]
    Mem,
    Gpu,
    Emu,
}

impl TresKind {
    pub const ALL: [TresKind; 5] = [
        TresKind::Node,
        TresKind::Cpu,
        TresKind::Mem,
        TresKind::Gpu,
        TresKind::Emu,
    ];

    /// The key in scenario files and `sacctmgr` TRES strings.
    pub fn key(self) -> &'static str {
        match self {
            TresKind::Node => "node",
            TresKind::Cpu => "cpu",
            TresKind::Mem => "mem_mb",
            TresKind::Gpu => "gpu",
            TresKind::Emu => "emu",
        }
    }

    /// The plural word used in reason sentences (`gpus 12 in use ...`).
    pub fn words(self) -> &'static str {
        match self {
            TresKind::Node => "nodes",
            TresKind::Cpu => "cpus",
            TresKind::Mem => "memory MiB",
            TresKind::Gpu => "gpus",
            TresKind::Emu => "emulator units",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// An amount of each TRES (what a job asks, what a group holds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TresAmounts(pub [u64; 5]);

impl TresAmounts {
    pub fn get(&self, kind: TresKind) -> u64 {
        self.0[kind.index()]
    }

    pub fn set(&mut self, kind: TresKind, value: u64) {
        self.0[kind.index()] = value;
    }

    pub fn add(&mut self, other: &TresAmounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    pub fn sub(&mut self, other: &TresAmounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_sub(b);
        }
    }
}

/// A limit per TRES; `None` is no limit. Scenario form: `{ node = 4, gpu = 16 }`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TresLimits {
    pub node: Option<u64>,
    pub cpu: Option<u64>,
    pub mem_mb: Option<u64>,
    pub gpu: Option<u64>,
    pub emu: Option<u64>,
}

impl TresLimits {
    pub fn get(&self, kind: TresKind) -> Option<u64> {
        match kind {
            TresKind::Node => self.node,
            TresKind::Cpu => self.cpu,
            TresKind::Mem => self.mem_mb,
            TresKind::Gpu => self.gpu,
            TresKind::Emu => self.emu,
        }
    }

    pub fn set(&mut self, kind: TresKind, value: Option<u64>) {
        let slot = match kind {
            TresKind::Node => &mut self.node,
            TresKind::Cpu => &mut self.cpu,
            TresKind::Mem => &mut self.mem_mb,
            TresKind::Gpu => &mut self.gpu,
            TresKind::Emu => &mut self.emu,
        };
        *slot = value;
    }

    pub fn is_empty(&self) -> bool {
        TresKind::ALL.iter().all(|&k| self.get(k).is_none())
    }

    /// The set limits, in [`TresKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (TresKind, u64)> + '_ {
        TresKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|v| (k, v)))
    }
}

/// Slurm's QOS/association limits. `None` or empty is no limit. Times are
/// seconds (Slurm writes minutes; the unit is in our names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// What all running jobs of the group may hold at once.
    pub grp_tres: TresLimits,
    /// TRES-minutes the group may consume (decayed usage plus what running
    /// jobs will still use by their time limits).
    pub grp_tres_mins: TresLimits,
    /// Running jobs of the group at once.
    pub grp_jobs: Option<u32>,
    /// Pending plus running jobs of the group (checked at submit).
    pub grp_submit_jobs: Option<u32>,
    /// Wall-clock seconds the group's jobs may consume (decayed).
    pub grp_wall_s: Option<u64>,
    pub max_tres_per_job: TresLimits,
    pub max_tres_per_node: TresLimits,
    /// What one user's running jobs may hold at once.
    pub max_tres_per_user: TresLimits,
    pub max_jobs_per_user: Option<u32>,
    /// Pending plus running jobs of one user (checked at submit).
    pub max_submit_jobs_per_user: Option<u32>,
    /// A job's time limit may not exceed it.
    pub max_wall_s: Option<u64>,
    pub min_tres_per_job: TresLimits,
}

/// Slurm's QOS flags (`Flags=` in `sacctmgr`), each a switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct QosFlags {
    pub deny_on_limit: bool,
    pub no_reserve: bool,
    pub over_part_qos: bool,
    pub partition_max_nodes: bool,
    pub partition_min_nodes: bool,
    pub partition_time_limit: bool,
    pub requires_reservation: bool,
    pub relative: bool,
    pub usage_factor_safe: bool,
    pub no_decay: bool,
    pub enforce_usage_threshold: bool,
}

impl QosFlags {
    /// Every flag with its Slurm spelling.
    pub const NAMES: [&'static str; 11] = [
        "DenyOnLimit",
        "NoReserve",
        "OverPartQOS",
        "PartitionMaxNodes",
        "PartitionMinNodes",
        "PartitionTimeLimit",
        "RequiresReservation",
        "Relative",
        "UsageFactorSafe",
        "NoDecay",
        "EnforceUsageThreshold",
    ];

    /// Sets the flag named `name` (Slurm's spelling, case-insensitive);
    /// `false` when there is no such flag.
    pub fn set_by_name(&mut self, name: &str) -> bool {
        let slot = match name.to_ascii_lowercase().as_str() {
            "denyonlimit" => &mut self.deny_on_limit,
            "noreserve" => &mut self.no_reserve,
            "overpartqos" => &mut self.over_part_qos,
            "partitionmaxnodes" => &mut self.partition_max_nodes,
            "partitionminnodes" => &mut self.partition_min_nodes,
            "partitiontimelimit" => &mut self.partition_time_limit,
            "requiresreservation" => &mut self.requires_reservation,
            "relative" => &mut self.relative,
            "usagefactorsafe" => &mut self.usage_factor_safe,
            "nodecay" => &mut self.no_decay,
            "enforceusagethreshold" => &mut self.enforce_usage_threshold,
            _ => return false,
        };
        *slot = true;
        true
    }
}

/// What happens to a job chosen as a preemption victim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptMode {
    #[default]
    Off,
    Requeue,
    Cancel,
    Suspend,
}

/// A QOS. The one named [`NORMAL_QOS`] always exists unless defined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Qos {
    pub name: String,
    /// Its priority factor input (normalised by the highest QOS priority),
    /// and its standing in the opportunistic tier. Signed so that a burst
    /// QOS can sit far below every other, as the idle-fill reference
    /// expects.
    pub priority: i64,
    pub limits: Limits,
    pub flags: QosFlags,
    /// Multiplies the usage its jobs accrue (fair share, GrpTRESMins).
    pub usage_factor: f64,
    /// The lowest fair-share factor an association may have to run jobs in
    /// this QOS (with `EnforceUsageThreshold`).
    pub usage_threshold: Option<f64>,
    /// QOS names whose jobs this QOS may preempt.
    pub preempt: Vec<String>,
    pub preempt_mode: PreemptMode,
    pub preempt_exempt_time_s: Option<u64>,
    pub grace_time_s: Option<u64>,
    pub idle_fill_preemptable: bool,
}

/// The QOS every cluster has, as in Slurm.
pub const NORMAL_QOS: &str = "normal";

impl Default for Qos {
    fn default() -> Self {
        Qos {
            name: NORMAL_QOS.to_string(),
            priority: 0,
            limits: Limits::default(),
            flags: QosFlags::default(),
            usage_factor: 1.0,
            usage_threshold: None,
            preempt: Vec::new(),
            preempt_mode: PreemptMode::Off,
            preempt_exempt_time_s: None,
            grace_time_s: None,
            idle_fill_preemptable: false,
        }
    }
}

impl Qos {
    pub fn named(name: impl Into<String>) -> Qos {
        Qos {
            name: name.into(),
            ..Qos::default()
        }
    }
}
