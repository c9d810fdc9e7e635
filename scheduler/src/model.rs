//! The resource model: hosts with inventory, jobs with what they ask for.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Job ids are handed out by the replicated state machine, starting at 1,
/// never reused (invariant 4).
pub type JobId = u64;

/// The countable quantities a host has and a job holds on one host: CPUs,
/// memory, GPUs and emulator units. What kind of GPU or emulator they are is
/// a property of the host ([`Inventory`]) that decides whether a host is
/// eligible at all; once it is, these counts are all that is placed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: u32,
    pub mem_mb: u64,
    #[serde(default)]
    pub gpus: u32,
    /// Emulator units (of the host's one emulator kind).
    #[serde(default)]
    pub emu: u32,
}

impl Resources {
    /// CPUs and memory only.
    pub const fn cpu_mem(cpus: u32, mem_mb: u64) -> Resources {
        Resources {
            cpus,
            mem_mb,
            gpus: 0,
            emu: 0,
        }
    }

    pub fn saturating_sub(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_sub(other.cpus),
            mem_mb: self.mem_mb.saturating_sub(other.mem_mb),
            gpus: self.gpus.saturating_sub(other.gpus),
            emu: self.emu.saturating_sub(other.emu),
        }
    }

    pub fn saturating_add(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.saturating_add(other.cpus),
            mem_mb: self.mem_mb.saturating_add(other.mem_mb),
            gpus: self.gpus.saturating_add(other.gpus),
            emu: self.emu.saturating_add(other.emu),
        }
    }

    /// True when every component of `self` is at most that of `other`.
    pub fn within(self, other: Resources) -> bool {
        self.cpus <= other.cpus
            && self.mem_mb <= other.mem_mb
            && self.gpus <= other.gpus
            && self.emu <= other.emu
    }

    /// The smaller of each component: what is free throughout two spans.
    pub fn component_min(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.min(other.cpus),
            mem_mb: self.mem_mb.min(other.mem_mb),
            gpus: self.gpus.min(other.gpus),
            emu: self.emu.min(other.emu),
        }
    }

    pub fn component_max(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.max(other.cpus),
            mem_mb: self.mem_mb.max(other.mem_mb),
            gpus: self.gpus.max(other.gpus),
            emu: self.emu.max(other.emu),
        }
    }

    pub fn is_zero(self) -> bool {
        self == Resources::default()
    }
}

/// Emulator units attached to a host: one kind (e.g. `palladium`, `zebu`)
/// in one group (a rack or a frame). A host carries at most one emulator
/// attachment; a site with two emulators on one controller declares two
/// hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatorInventory {
    pub kind: String,
    #[serde(default)]
    pub group: String,
    pub units: u32,
}

/// What a host has, as its agent discovered it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub cpus: u32,
    pub mem_mb: u64,
    #[serde(default)]
    pub gpus: u32,
    /// The GPUs' model (e.g. `a100`, `mi300x`); empty when none or unknown.
    #[serde(default)]
    pub gpu_type: String,
    #[serde(default)]
    pub emulator: Option<EmulatorInventory>,
    /// Features its agent declares (`features` in the agent config), which
    /// `--constraint` asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

impl Inventory {
    /// CPUs and memory only.
    pub fn cpu_mem(cpus: u32, mem_mb: u64) -> Inventory {
        Inventory {
            cpus,
            mem_mb,
            ..Inventory::default()
        }
    }

    pub fn resources(&self) -> Resources {
        Resources {
            cpus: self.cpus,
            mem_mb: self.mem_mb,
            gpus: self.gpus,
            emu: self.emulator.as_ref().map_or(0, |e| e.units),
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
    /// Partitions it belongs to (admin configuration). When the snapshot
    /// defines no partitions at all, every host serves every job.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Features a job may require (`--constraint`), e.g. `ib`, `nvlink`.
    #[serde(default)]
    pub features: Vec<String>,
}

impl Host {
    /// An up host with nothing allocated, in no partition.
    pub fn new(name: impl Into<String>, inventory: Inventory) -> Host {
        Host {
            name: name.into(),
            inventory,
            state: HostState::Up,
            allocated: Resources::default(),
            partitions: Vec::new(),
            features: Vec::new(),
        }
    }

    pub fn free(&self) -> Resources {
        self.inventory.resources().saturating_sub(self.allocated)
    }

    /// Slurm's node state word as `sinfo` prints it.
    pub fn slurm_state(&self) -> &'static str {
        match self.state {
            HostState::Down => "down",
            HostState::Drain if self.allocated.is_zero() => "drained",
            HostState::Drain => "draining",
            HostState::Up if self.allocated.is_zero() => "idle",
            HostState::Up if self.free().cpus == 0 => "allocated",
            HostState::Up => "mixed",
        }
    }
}

/// What a job asks for and what it runs. Mirrors `berth.v1.JobSpec`.
///
/// Its JSON is every submit's log entry and part of every job's record.
/// Fields added after the first version are read with their default when
/// absent, so they are written only when they hold something else (a
/// submit's entry was 842 bytes with them, 617 without); the first
/// version's fields are always written, since nodes of that version
/// require them.
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
    /// Slurm's `--dependency` text (`afterok:12,singleton`), checked with
    /// [`crate::deps::parse`] at submit; "" = none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dependency: String,
    /// Not before this time (`--begin`), ms since the epoch; 0 = now.
    #[serde(default, skip_serializing_if = "u64_is_zero")]
    pub begin_ms: u64,
    /// Whole hosts (`--exclusive`): nothing else runs beside it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// Features every host must have (`--constraint`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// The admin reservation it runs in (`--reservation`); "" = none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reservation: String,
    /// It opted in to priority preemption (`--preemptible`); QOS preempt
    /// lists need no opt-in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptible: bool,
    /// `--array` as submitted: task indexes with an optional `%max`
    /// (`0-15%4`, `1,3,5`, `0-15:4`; see [`crate::array`]); "" = not an
    /// array. Each task is a job of its own with the fields below, which
    /// the cluster sets.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub array: String,
    /// The array's id (its first task's job id); 0 = not an array task.
    #[serde(default, skip_serializing_if = "u64_is_zero")]
    pub array_job_id: JobId,
    /// This task's index.
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub array_task_id: u32,
    /// How many tasks the array has, and its lowest and highest index.
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub array_task_count: u32,
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub array_task_min: u32,
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub array_task_max: u32,
    /// At most this many of its tasks run at once (`%max`); 0 = no limit.
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub array_max_running: u32,
    /// `--signal`: this signal (Linux number; 0 = none) goes to the job
    /// `warn_signal_before_s` seconds before its time limit, to the batch
    /// shell only when `warn_signal_batch_only` (see [`crate::signal`]).
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub warn_signal: u32,
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub warn_signal_before_s: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warn_signal_batch_only: bool,
    /// OR'd resource sets (`--alt`), tried in order; when not empty they
    /// replace the job's own request (`cpus`, `mem_mb`, `gres`). Each is
    /// complete: the client fills what a set leaves out from the job's
    /// own options. Added in command version 9.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<ResourceSet>,
    /// An interactive allocation (`salloc`, or `srun` outside a job): no
    /// batch script runs; the hosts are held for the submitter's steps
    /// until the submitter releases them. Added in command version 13.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
}

/// One alternative resource set of a job (`--alt`). Mirrors
/// `berth.v1.ResourceSet`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceSet {
    /// Generic resources per node, the job's `gres` syntax.
    pub gres: Vec<String>,
    /// CPUs per node; 0 means 1.
    pub cpus: u32,
    /// Memory per node in MiB.
    pub mem_mb: u64,
    /// Hosts; 0 means 1.
    pub nodes: u32,
    /// The partition this set runs in; "" = the job's partitions.
    pub partition: String,
}

fn u32_is_zero(n: &u32) -> bool {
    *n == 0
}

fn u64_is_zero(n: &u64) -> bool {
    *n == 0
}

impl JobSpec {
    /// What one host must provide for this job: CPUs, memory, and the
    /// GPUs and emulator units of its `gres`. A spec whose `gres` does not
    /// parse (refused at submit, so never stored) counts CPUs and memory.
    pub fn per_host(&self) -> Resources {
        self.shape().map_or_else(
            |_| Resources::cpu_mem(self.cpus.max(1), self.mem_mb),
            |s| s.per_host,
        )
    }

    /// Its resource request as the scheduler places it (`nodes` hosts,
    /// each whole when `exclusive`; `gres` gives the GPU model and emulator kind,
    /// `features` what the host must offer).
    pub fn shape(&self) -> Result<crate::pass::Shape, String> {
        let mut shape = crate::pass::Shape::one(Resources::cpu_mem(self.cpus.max(1), self.mem_mb));
        crate::gres::apply_gres(&mut shape, &self.gres)?;
        shape.nodes = self.nodes.max(1);
        shape.exclusive = self.exclusive;
        shape.features = self.features.clone();
        Ok(shape)
    }

    /// Its alternatives as the scheduler places them, in order (empty
    /// without any). Each keeps the job's `exclusive` and `features`. An
    /// error names the set (1-based) whose `gres` does not parse.
    pub fn alternative_shapes(&self) -> Result<Vec<crate::pass::Shape>, String> {
        self.alternatives
            .iter()
            .enumerate()
            .map(|(i, set)| {
                let mut shape =
                    crate::pass::Shape::one(Resources::cpu_mem(set.cpus.max(1), set.mem_mb));
                crate::gres::apply_gres(&mut shape, &set.gres)
                    .map_err(|e| format!("alternative {}: {e}", i + 1))?;
                shape.nodes = set.nodes.max(1);
                shape.exclusive = self.exclusive;
                shape.features = self.features.clone();
                Ok(shape)
            })
            .collect()
    }

    /// Its resource path `path` as the scheduler places it (an index into
    /// `alternatives`, or 0 for the job's own request without any).
    /// `None` when there is no such path or it does not parse.
    pub fn shape_on(&self, path: usize) -> Option<crate::pass::Shape> {
        if self.alternatives.is_empty() {
            return if path == 0 { self.shape().ok() } else { None };
        }
        self.alternative_shapes().ok()?.into_iter().nth(path)
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
    /// Evicted for another job with PreemptMode cancel: over for good.
    Preempted,
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
            JobState::Preempted => "PREEMPTED",
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
    /// The partition it runs in ("" when the site has none).
    #[serde(default)]
    pub partition: String,
    /// The GPU devices it holds on its host (positions in the host's
    /// reported GPU list), lowest free first.
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// Which of the job's alternative resource sets it runs on, 1-based;
    /// 0 = the job's own request (it has none).
    #[serde(default)]
    pub alternative: u32,
    /// The other hosts of a multi-host job (a gang), in name order after
    /// `host`, each holding `resources` too. The batch script runs on
    /// `host` only, as Slurm's does on the first node; the others' room is
    /// the job's until it ends. Empty for a one-host job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gang: Vec<GangMember>,
}

/// One more host of a multi-host allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangMember {
    pub host: String,
    /// The GPU devices it holds there.
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
}

impl Allocation {
    /// Every host it holds, the batch host first.
    pub fn hosts(&self) -> impl Iterator<Item = &str> + '_ {
        std::iter::once(self.host.as_str()).chain(self.gang.iter().map(|m| m.host.as_str()))
    }

    /// Whether it holds room on `host` (as its batch host or a gang member).
    pub fn holds(&self, host: &str) -> bool {
        self.hosts().any(|h| h == host)
    }

    /// The GPU devices it holds on `host` (empty where it holds none).
    pub fn gpu_indices_on(&self, host: &str) -> &[u32] {
        if self.host == host {
            return &self.gpu_indices;
        }
        self.gang
            .iter()
            .find(|m| m.host == host)
            .map_or(&[], |m| m.gpu_indices.as_slice())
    }
}

/// A job as the state machine keeps it. Written like [`JobSpec`]: later
/// fields (and `alloc`, an `Option`) only when not at their default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    pub submit_ms: u64,
    pub end_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc: Option<Allocation>,
    pub exit_code: i32,
    pub exit_signal: i32,
    /// Set when a cancel of a running job was committed: the agent stops it
    /// and the exit report finishes it as CANCELLED.
    pub cancel_requested: bool,
    /// Set when the leader found the job past its time limit: the agent
    /// stops it with the stop grace and the exit report ends it TIMEOUT.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub time_limit_reached: bool,
    /// Set when a requeue of the running job was committed: the agent stops
    /// it and the exit report puts it back in the queue.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue_requested: bool,
    /// Held by an admin or by the controller (e.g. after too many automatic
    /// requeues); only an admin release lifts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_hold: bool,
    /// Times it went back to the queue after starting (automatic and
    /// asked-for requeues; evictions spend none of this budget).
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub restarts: u32,
    /// Its current (or last) run was placed by idle-fill on capacity lent
    /// past its QOS node cap: outside every quota, reclaimable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub borrowed: bool,
    /// Times idle-fill reclaimed it (its exempt window doubles with each).
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub reclaims: u32,
    /// Set when an eviction of the running job was committed: it leaves
    /// its host's assignment set, and the exit report requeues or ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evicted: Option<EvictMark>,
    /// When a job evicted for this one last left its host (0 = never
    /// since this job last started): the room is this job's first.
    #[serde(default, skip_serializing_if = "u64_is_zero")]
    pub room_freed_ms: u64,
    /// A priority fixed by an administrator (`scontrol update
    /// Priority=N`): it replaces the multifactor total until the job is
    /// held and released; 0 = none, multifactor manages it. Added in
    /// command version 10.
    #[serde(default, skip_serializing_if = "u32_is_zero")]
    pub admin_priority: u32,
    /// The job it was last evicted for, while it waits in the queue again
    /// after that eviction (0 = none): its reason says so until it starts
    /// (`evict::requeued_detail`).
    #[serde(default, skip_serializing_if = "u64_is_zero")]
    pub requeued_for: JobId,
}

/// A committed eviction of a running job, for whom and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvictMark {
    /// The blocked job its room goes to.
    pub for_job: JobId,
    pub cause: crate::evict::EvictCause,
    /// Back to the queue (PreemptMode requeue) or ended PREEMPTED.
    pub requeue: bool,
    /// When the eviction was committed, and the GraceTime it was given.
    pub at_ms: u64,
    pub grace_s: u64,
}

impl EvictMark {
    /// `PreemptMode=Requeue` or `PreemptMode=Cancel`, Slurm's words.
    pub fn mode_word(&self) -> &'static str {
        if self.requeue {
            "PreemptMode=Requeue"
        } else {
            "PreemptMode=Cancel"
        }
    }
}

impl Job {
    /// True when a stop of the running job was committed (cancel, time
    /// limit, requeue, eviction): it leaves its host's assignment set.
    pub fn stopping(&self) -> bool {
        self.cancel_requested
            || self.time_limit_reached
            || self.requeue_requested
            || self.evicted.is_some()
    }

    /// Held by its user or by an admin.
    pub fn held(&self) -> bool {
        self.spec.hold || self.admin_hold
    }

    /// Why a pending job waits when a hold keeps it (the pass never sees
    /// held jobs, so their reason comes from the record): an admin's hold
    /// first, as only an admin can lift it.
    pub fn hold_reason(&self) -> Option<crate::reason::Reason> {
        if self.state != JobState::Pending {
            None
        } else if self.admin_hold {
            Some(crate::reason::Reason::JobHeldAdmin)
        } else if self.spec.hold {
            Some(crate::reason::Reason::JobHeldUser)
        } else {
            None
        }
    }
}
