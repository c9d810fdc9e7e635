//! The scenario file's format (SIM.md, `berth sim run`) as serde structs,
//! one per table: unknown keys are refused, a missing key without a
//! default is refused, and SIM.md's defaults fill the rest. Keys whose
//! default lives in the scheduler's own types (`[scheduler]`, a job's
//! resources, the QOS and limit keys) are `Option`s laid over those
//! defaults. What serde cannot check (names that must exist, ranges,
//! hostlists) is checked when the scenario is built from these.

use std::fmt;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use berth_scheduler::qos::{Limits, TresLimits};

/// A whole scenario file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    #[serde(default)]
    pub name: String,
    pub until_s: Option<u64>,
    #[serde(default)]
    pub scheduler: SchedulerFile,
    #[serde(default)]
    pub hosts: Vec<HostFile>,
    #[serde(default)]
    pub partitions: Vec<PartitionFile>,
    #[serde(default)]
    pub qos: Vec<QosFile>,
    #[serde(default)]
    pub accounts: Vec<AccountFile>,
    #[serde(default)]
    pub users: Vec<UserFile>,
    #[serde(default)]
    pub reservations: Vec<ReservationFile>,
    #[serde(default)]
    pub jobs: Vec<JobFile>,
    #[serde(default)]
    pub events: Vec<EventFile>,
}

/// `[scheduler]`: the replicated scheduler policy's keys; an absent key
/// keeps `Policy::default()`'s value (the documented default).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, expecting = "a [scheduler] table")]
pub struct SchedulerFile {
    pub backfill: Option<bool>,
    pub bf_reservations: Option<usize>,
    pub max_jobs_per_pass: Option<usize>,
    pub bf_resolution_s: Option<u64>,
    pub bf_window_s: Option<u64>,
    pub bf_max_job_test: Option<usize>,
    pub pass_budget_host_checks: Option<u64>,
    pub priority_weight_age: Option<u32>,
    pub priority_weight_fairshare: Option<u32>,
    pub priority_weight_job_size: Option<u32>,
    pub priority_weight_partition: Option<u32>,
    pub priority_weight_qos: Option<u32>,
    pub priority_weight_assoc: Option<u32>,
    pub priority_max_age_s: Option<u64>,
    pub priority_decay_half_life_s: Option<u64>,
    pub preemption_enabled: Option<bool>,
    pub min_preemption_runtime_s: Option<u64>,
    pub preemption_gap: Option<u64>,
    pub preemption_threshold: Option<u32>,
    pub preemption_multi_victim: Option<bool>,
    pub max_evictions_per_tick: Option<usize>,
    /// Default `STOP_GRACE_S_DEFAULT`.
    pub stop_grace_s: Option<u64>,
    pub idle_fill_enabled: Option<bool>,
    pub idle_fill_exempt_secs: Option<u64>,
    pub idle_fill_max_borrow_factor: Option<f64>,
    pub idle_fill_max_cluster_fraction: Option<f64>,
    pub reserve_all_alternatives_top_n: Option<usize>,
    pub max_reserve_time_s: Option<u64>,
}

/// `[[hosts]]`: a group of identical hosts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[hosts]] table")]
pub struct HostFile {
    pub names: String,
    pub cpus: u32,
    #[serde(default)]
    pub mem_mb: u64,
    #[serde(default)]
    pub gpus: u32,
    #[serde(default)]
    pub gpu_type: String,
    #[serde(default)]
    pub emulators: Vec<EmulatorFile>,
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub partitions: Vec<String>,
}

/// An emulator attachment (of a host) or request (of a job).
#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields, expecting = "a table { kind, group, units }")]
pub struct EmulatorFile {
    pub kind: String,
    #[serde(default)]
    pub group: String,
    pub units: u32,
}

/// `[[partitions]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[partitions]] table")]
pub struct PartitionFile {
    pub name: String,
    #[serde(default)]
    pub default: bool,
    pub max_time_s: Option<u64>,
    pub default_time_s: Option<u64>,
    pub max_nodes: Option<u32>,
    pub min_nodes: Option<u32>,
    #[serde(default)]
    pub priority_job_factor: u32,
    #[serde(default)]
    pub qos: String,
    /// `off` when absent.
    pub preempt_mode: Option<String>,
    #[serde(default)]
    pub reserve_all_alternatives: bool,
}

/// Declares a table's struct with its own fields, then the limit keys
/// that QOS and accounts share, and `limits_over` to lay the given ones
/// over a `Limits`. (serde's `flatten` would share them too, but it
/// loses `deny_unknown_fields` and the lines of errors.)
macro_rules! with_limit_keys {
    ($(#[$meta:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($own)*
            pub grp_tres: Option<TresLimits>,
            pub grp_tres_mins: Option<TresLimits>,
            pub grp_jobs: Option<u32>,
            pub grp_submit_jobs: Option<u32>,
            pub grp_wall_s: Option<u64>,
            pub max_tres_per_job: Option<TresLimits>,
            pub max_tres_per_node: Option<TresLimits>,
            pub max_tres_per_user: Option<TresLimits>,
            pub max_jobs_per_user: Option<u32>,
            pub max_submit_jobs_per_user: Option<u32>,
            pub max_wall_s: Option<u64>,
            pub min_tres_per_job: Option<TresLimits>,
        }

        impl $name {
            /// `base` with the limit keys given replaced, whole.
            pub fn limits_over(&self, base: Limits) -> Limits {
                Limits {
                    grp_tres: self.grp_tres.unwrap_or(base.grp_tres),
                    grp_tres_mins: self.grp_tres_mins.unwrap_or(base.grp_tres_mins),
                    grp_jobs: self.grp_jobs.or(base.grp_jobs),
                    grp_submit_jobs: self.grp_submit_jobs.or(base.grp_submit_jobs),
                    grp_wall_s: self.grp_wall_s.or(base.grp_wall_s),
                    max_tres_per_job: self.max_tres_per_job.unwrap_or(base.max_tres_per_job),
                    max_tres_per_node: self.max_tres_per_node.unwrap_or(base.max_tres_per_node),
                    max_tres_per_user: self.max_tres_per_user.unwrap_or(base.max_tres_per_user),
                    max_jobs_per_user: self.max_jobs_per_user.or(base.max_jobs_per_user),
                    max_submit_jobs_per_user: self
                        .max_submit_jobs_per_user
                        .or(base.max_submit_jobs_per_user),
                    max_wall_s: self.max_wall_s.or(base.max_wall_s),
                    min_tres_per_job: self.min_tres_per_job.unwrap_or(base.min_tres_per_job),
                }
            }
        }
    };
}

with_limit_keys! {
    /// `[[qos]]`, and the `set` of a `modify_qos` or `set_priority` event:
    /// the keys given change, over the QOS's defaults or its current
    /// values. `name` is required in `[[qos]]` and refused in a `set`;
    /// `priority` is a QOS's (negative for a burst QOS) or the new
    /// priority of `set_priority`.
    #[derive(Deserialize, Default, PartialEq)]
    #[serde(deny_unknown_fields, expecting = "a table of QOS keys such as { priority = 10 }")]
    pub struct QosFile {
        pub name: Option<String>,
        pub priority: Option<i64>,
        pub flags: Option<Vec<String>>,
        pub usage_factor: Option<f64>,
        pub usage_threshold: Option<f64>,
        pub preempt: Option<Vec<String>>,
        pub preempt_mode: Option<String>,
        pub preempt_exempt_time_s: Option<u64>,
        pub grace_time_s: Option<u64>,
        pub idle_fill_preemptable: Option<bool>,
    }
}

with_limit_keys! {
    /// `[[accounts]]`.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, expecting = "an [[accounts]] table")]
    pub struct AccountFile {
        pub name: String,
        /// `root` when absent.
        pub parent: Option<String>,
        #[serde(default = "one")]
        pub shares: u32,
        #[serde(default)]
        pub users: Vec<String>,
        #[serde(default)]
        pub qos: Vec<String>,
        #[serde(default)]
        pub priority: i64,
        #[serde(default)]
        pub max_priority: i64,
        #[serde(default)]
        pub preempt: Vec<String>,
    }
}

fn one() -> u32 {
    1
}

/// `[[users]]`: a user's own priority and default account.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[users]] table")]
pub struct UserFile {
    pub name: String,
    #[serde(default)]
    pub priority: i64,
    #[serde(default)]
    pub default_account: String,
}

/// `[[reservations]]`: an admin window.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[reservations]] table")]
pub struct ReservationFile {
    pub name: String,
    pub hosts: String,
    pub start_s: u64,
    pub duration_s: u64,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub accounts: Vec<String>,
}

/// The resource keys of a job or of one of its alternatives; absent keys
/// keep the job's (or, for the job, one CPU on one host).
#[derive(Default)]
pub struct ShapeKeys {
    pub nodes: Option<u32>,
    pub cpus: Option<u32>,
    pub mem_mb: Option<u64>,
    pub gpus: Option<u32>,
    pub gpu_type: Option<String>,
    pub emulators: Option<EmulatorFile>,
    pub exclusive: Option<bool>,
    pub features: Option<Vec<String>>,
}

/// Declares a table's struct with its own fields, then the resource keys
/// ([`ShapeKeys`]) that jobs and alternatives share, and `shape_keys` to
/// copy them out. (Not `flatten`: see `with_limit_keys`.)
macro_rules! with_shape_keys {
    ($(#[$meta:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($own)*
            pub nodes: Option<u32>,
            pub cpus: Option<u32>,
            pub mem_mb: Option<u64>,
            pub gpus: Option<u32>,
            pub gpu_type: Option<String>,
            pub emulators: Option<EmulatorFile>,
            pub exclusive: Option<bool>,
            pub features: Option<Vec<String>>,
        }

        impl $name {
            pub fn shape_keys(&self) -> ShapeKeys {
                ShapeKeys {
                    nodes: self.nodes,
                    cpus: self.cpus,
                    mem_mb: self.mem_mb,
                    gpus: self.gpus,
                    gpu_type: self.gpu_type.clone(),
                    emulators: self.emulators.clone(),
                    exclusive: self.exclusive,
                    features: self.features.clone(),
                }
            }
        }
    };
}

with_shape_keys! {
    /// `[[jobs]]`: one submission (an array's tasks are one entry).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, expecting = "a [[jobs]] table")]
    pub struct JobFile {
        pub id: String,
        /// Slurm's job name; the id when absent.
        pub name: Option<String>,
        pub at_s: u64,
        pub user: String,
        /// The user's default account when empty.
        #[serde(default)]
        pub account: String,
        #[serde(default)]
        pub qos: String,
        /// `"a,b"` or `["a", "b"]`; the default partition when absent.
        #[serde(default, deserialize_with = "partition_names")]
        pub partition: Vec<String>,
        pub time_limit_s: Option<u64>,
        pub runtime_s: Option<u64>,
        #[serde(default)]
        pub exit_code: i64,
        #[serde(default)]
        pub hold: bool,
        #[serde(default)]
        pub priority_nice: i64,
        pub dependency: Option<String>,
        pub array: Option<String>,
        pub begin_s: Option<u64>,
        #[serde(default)]
        pub alternatives: Vec<AlternativeFile>,
        #[serde(default)]
        pub preemptible: bool,
        #[serde(default)]
        pub stop_takes_s: u64,
        #[serde(default)]
        pub reservation: String,
    }
}

with_shape_keys! {
    /// One of a job's `alternatives`: resource keys that replace the job's
    /// on that path, and the partition it runs in (the job's when empty).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, expecting = "a table of resource keys")]
    pub struct AlternativeFile {
        #[serde(default)]
        pub partition: String,
    }
}

/// `[[events]]`: which keys an action needs is checked with the action.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [[events]] table")]
pub struct EventFile {
    pub at_s: u64,
    pub action: String,
    pub job: Option<String>,
    pub host: Option<String>,
    pub qos: Option<String>,
    pub account: Option<String>,
    pub user: Option<String>,
    pub set: Option<QosFile>,
}

/// A job's `partition`: one name, names separated by commas, or an array
/// of names.
fn partition_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Names;

    impl<'de> Visitor<'de> for Names {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a partition name, names separated by commas, or an array of names")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Vec<String>, E> {
            Ok(s.split(',').map(|p| p.trim().to_string()).collect())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut names = Vec::new();
            while let Some(name) = seq.next_element()? {
                names.push(name);
            }
            Ok(names)
        }
    }

    d.deserialize_any(Names)
}
