//! The REST API's JSON shapes and their conversions to and from the
//! protobuf messages. Written out field by field rather than derived from
//! the generated types, so the JSON stays stable when the proto grows, and
//! enums travel as their names ("RUNNING"), never as numbers.
//!
//! Request bodies reject unknown fields: a misspelt key is an error naming
//! it, never a silently ignored setting.

use std::collections::BTreeMap;

use berth_proto::api;
use serde::{Deserialize, Serialize};

/// A job state's name, as the proto spells it ("PENDING", "RUNNING", ...).
/// A number this build does not know is shown as such, not hidden.
pub fn state_name(state: i32) -> String {
    match api::JobState::try_from(state) {
        Ok(s) => s.as_str_name().to_string(),
        Err(_) => format!("UNKNOWN_{state}"),
    }
}

/// Job states a filter may name (every state but UNSPECIFIED).
pub const STATE_NAMES: &[&str] = &[
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "SUSPENDED",
];

/// Parses a `state` filter: names separated by commas, any case, or `ALL`.
pub fn parse_states(text: &str) -> Result<Vec<i32>, String> {
    let mut states = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let upper = word.to_ascii_uppercase();
        if upper == "ALL" {
            for name in STATE_NAMES {
                states.extend(api::JobState::from_str_name(name).map(|s| s as i32));
            }
            continue;
        }
        match api::JobState::from_str_name(&upper) {
            Some(s) if s != api::JobState::Unspecified => states.push(s as i32),
            _ => {
                return Err(format!(
                    "unknown job state {word:?} (one of {}, or ALL)",
                    STATE_NAMES.join(", ")
                ))
            }
        }
    }
    states.sort_unstable();
    states.dedup();
    Ok(states)
}

/// What a job asks for and what it runs (the proto's `JobSpec`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobSpecJson {
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
    pub dependency: String,
    pub begin_ms: u64,
    pub exclusive: bool,
    pub features: Vec<String>,
    pub reservation: String,
    pub preemptible: bool,
    pub array: String,
    pub array_job_id: u64,
    pub array_task_id: u32,
    pub array_task_count: u32,
    pub array_task_min: u32,
    pub array_task_max: u32,
    pub array_max_running: u32,
    pub warn_signal: u32,
    pub warn_signal_before_s: u32,
    pub warn_signal_batch_only: bool,
    pub alternatives: Vec<ResourceSetJson>,
}

/// One alternative resource set (the proto's `ResourceSet`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceSetJson {
    pub gres: Vec<String>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub nodes: u32,
    pub partition: String,
}

impl From<api::ResourceSet> for ResourceSetJson {
    fn from(a: api::ResourceSet) -> Self {
        ResourceSetJson {
            gres: a.gres,
            cpus: a.cpus,
            mem_mb: a.mem_mb,
            nodes: a.nodes,
            partition: a.partition,
        }
    }
}

impl From<ResourceSetJson> for api::ResourceSet {
    fn from(a: ResourceSetJson) -> Self {
        api::ResourceSet {
            gres: a.gres,
            cpus: a.cpus,
            mem_mb: a.mem_mb,
            nodes: a.nodes,
            partition: a.partition,
        }
    }
}

impl From<api::JobSpec> for JobSpecJson {
    fn from(s: api::JobSpec) -> Self {
        JobSpecJson {
            name: s.name,
            user: s.user,
            command: s.command,
            workdir: s.workdir,
            env: s.env.into_iter().collect(),
            cpus: s.cpus,
            mem_mb: s.mem_mb,
            nodes: s.nodes,
            time_limit_s: s.time_limit_s,
            partitions: s.partitions,
            qos: s.qos,
            account: s.account,
            gres: s.gres,
            stdout_path: s.stdout_path,
            stderr_path: s.stderr_path,
            requeue: s.requeue,
            hold: s.hold,
            nice: s.nice,
            comment: s.comment,
            dependency: s.dependency,
            begin_ms: s.begin_ms,
            exclusive: s.exclusive,
            features: s.features,
            reservation: s.reservation,
            preemptible: s.preemptible,
            array: s.array,
            array_job_id: s.array_job_id,
            array_task_id: s.array_task_id,
            array_task_count: s.array_task_count,
            array_task_min: s.array_task_min,
            array_task_max: s.array_task_max,
            array_max_running: s.array_max_running,
            warn_signal: s.warn_signal,
            warn_signal_before_s: s.warn_signal_before_s,
            warn_signal_batch_only: s.warn_signal_batch_only,
            alternatives: s.alternatives.into_iter().map(Into::into).collect(),
        }
    }
}

/// `POST /v1/jobs`: the job spec's fields, flat, plus the request id that
/// makes a retry return the first job instead of a second one. (serde's
/// `flatten` does not combine with `deny_unknown_fields`, hence the
/// repetition of the spec's fields.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubmitJobJson {
    pub request_id: String,
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
    pub dependency: String,
    pub begin_ms: u64,
    pub exclusive: bool,
    pub features: Vec<String>,
    pub reservation: String,
    pub preemptible: bool,
    /// Job array indexes with an optional %max ("0-15%4").
    pub array: String,
    /// `--signal`: Linux signal number (0 = none), seconds before the
    /// time limit, batch shell only.
    pub warn_signal: u32,
    pub warn_signal_before_s: u32,
    pub warn_signal_batch_only: bool,
    /// Alternative resource sets, tried in order (`--alt`).
    pub alternatives: Vec<ResourceSetJson>,
}

impl From<SubmitJobJson> for api::SubmitJobRequest {
    fn from(s: SubmitJobJson) -> Self {
        api::SubmitJobRequest {
            request_id: s.request_id,
            spec: Some(api::JobSpec {
                name: s.name,
                user: s.user,
                command: s.command,
                workdir: s.workdir,
                env: s.env.into_iter().collect(),
                cpus: s.cpus,
                mem_mb: s.mem_mb,
                nodes: s.nodes,
                time_limit_s: s.time_limit_s,
                partitions: s.partitions,
                qos: s.qos,
                account: s.account,
                gres: s.gres,
                stdout_path: s.stdout_path,
                stderr_path: s.stderr_path,
                requeue: s.requeue,
                hold: s.hold,
                nice: s.nice,
                comment: s.comment,
                dependency: s.dependency,
                begin_ms: s.begin_ms,
                exclusive: s.exclusive,
                features: s.features,
                reservation: s.reservation,
                preemptible: s.preemptible,
                array: s.array,
                warn_signal: s.warn_signal,
                warn_signal_before_s: s.warn_signal_before_s,
                warn_signal_batch_only: s.warn_signal_batch_only,
                alternatives: s.alternatives.into_iter().map(Into::into).collect(),
                ..Default::default()
            }),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmitJobResponseJson {
    pub job_id: u64,
    /// True when the request id had been seen and no new job was made.
    pub duplicate: bool,
}

impl From<api::SubmitJobResponse> for SubmitJobResponseJson {
    fn from(r: api::SubmitJobResponse) -> Self {
        SubmitJobResponseJson {
            job_id: r.job_id,
            duplicate: r.duplicate,
        }
    }
}

/// A job as the cluster sees it (the proto's `Job`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobJson {
    pub job_id: u64,
    pub spec: JobSpecJson,
    pub state: String,
    pub reason: String,
    pub reason_text: String,
    pub submit_ms: u64,
    pub start_ms: u64,
    pub end_ms: u64,
    pub hosts: Vec<String>,
    pub exit_code: i32,
    pub exit_signal: i32,
    pub alloc_id: u64,
    pub priority: u64,
    /// On borrowed (idle-fill) capacity; false until idle-fill exists.
    #[serde(default)]
    pub borrowed: bool,
    /// A pending job's predicted start from the last pass; 0 for none.
    #[serde(default)]
    pub predicted_start_ms: u64,
    /// The alternative resource set its run got, 1-based; 0 = none.
    #[serde(default)]
    pub alternative: u32,
}

impl From<api::Job> for JobJson {
    fn from(j: api::Job) -> Self {
        JobJson {
            job_id: j.job_id,
            spec: j.spec.map(JobSpecJson::from).unwrap_or_default(),
            state: state_name(j.state),
            reason: j.reason,
            reason_text: j.reason_text,
            submit_ms: j.submit_ms,
            start_ms: j.start_ms,
            end_ms: j.end_ms,
            hosts: j.hosts,
            exit_code: j.exit_code,
            exit_signal: j.exit_signal,
            alloc_id: j.alloc_id,
            priority: j.priority,
            borrowed: j.borrowed,
            predicted_start_ms: j.predicted_start_ms,
            alternative: j.alternative,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobListJson {
    pub jobs: Vec<JobJson>,
    /// True when more jobs matched than were returned.
    pub truncated: bool,
}

/// `GET /v1/priorities` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioritiesQuery {
    /// Job ids separated by commas; none: every pending job.
    pub job: Option<String>,
    pub user: Option<String>,
}

/// One pending job's priority and its weighted parts (sprio).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityJson {
    pub job_id: u64,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub priority: i64,
    pub site: i64,
    pub age: i64,
    pub assoc: i64,
    pub fairshare: i64,
    pub job_size: i64,
    pub partition_factor: i64,
    pub qos: i64,
    pub nice: i64,
}

impl From<api::PriorityFactors> for PriorityJson {
    fn from(p: api::PriorityFactors) -> Self {
        PriorityJson {
            job_id: p.job_id,
            user: p.user,
            account: p.account,
            partition: p.partition,
            priority: p.total,
            site: p.site,
            age: p.age,
            assoc: p.assoc,
            fairshare: p.fairshare,
            job_size: p.jobsize,
            partition_factor: p.partition_factor,
            qos: p.qos,
            nice: p.nice,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PriorityListJson {
    pub jobs: Vec<PriorityJson>,
}

/// `GET /v1/jobs` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListJobsQuery {
    /// States separated by commas, or ALL; none: PENDING and RUNNING.
    pub state: Option<String>,
    pub user: Option<String>,
    /// Jobs that asked for this partition (or asked for none while it is
    /// the default partition).
    pub partition: Option<String>,
    pub limit: Option<u32>,
    /// Answer from the receiving node's applied state, without a leader
    /// round trip.
    pub stale: Option<bool>,
}

/// `GET /v1/jobs/{id}` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetJobQuery {
    pub stale: Option<bool>,
}

/// `GET /v1/jobs/{id}/events` query parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Only events with a larger sequence number.
    pub after_seq: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelJobResponseJson {
    pub job_id: u64,
    pub previous_state: String,
}

/// `POST /v1/jobs/{id}/hold`: `admin` makes it an admin hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HoldJson {
    pub admin: bool,
}

/// `POST /v1/jobs/{id}/release`: `admin` also lifts an admin hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReleaseJson {
    pub admin: bool,
}

/// `POST /v1/jobs/{id}/requeue`: `hold` brings the job back held.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequeueJson {
    pub hold: bool,
}

/// `PATCH /v1/jobs/{id}` (`scontrol update`): each key given replaces the
/// job's value; unknown keys are refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpdateJobJson {
    pub time_limit_s: Option<u64>,
    pub partitions: Option<Vec<String>>,
    pub qos: Option<String>,
    pub nice: Option<i32>,
    pub dependency: Option<String>,
    pub begin_ms: Option<u64>,
    pub name: Option<String>,
    pub comment: Option<String>,
    pub features: Option<Vec<String>>,
    /// N > 0 fixes the priority (administrators); 0 holds the job.
    pub priority: Option<u32>,
    /// With an array's id: only that task, not the whole array.
    pub only_task: bool,
}

impl UpdateJobJson {
    pub fn into_request(self, job_id: u64) -> api::UpdateJobRequest {
        api::UpdateJobRequest {
            job_id,
            time_limit_s: self.time_limit_s,
            set_partitions: self.partitions.is_some(),
            partitions: self.partitions.unwrap_or_default(),
            qos: self.qos,
            nice: self.nice,
            dependency: self.dependency,
            begin_ms: self.begin_ms,
            name: self.name,
            comment: self.comment,
            set_features: self.features.is_some(),
            features: self.features.unwrap_or_default(),
            priority: self.priority,
            only_task: self.only_task,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateJobResponseJson {
    pub job_id: u64,
    pub changes: Vec<String>,
}

/// `POST /v1/jobs/{id}/signal`: a signal name (`USR1`, `SIGUSR1`) or
/// number, and whether only the batch shell gets it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalJson {
    pub signal: String,
    #[serde(default)]
    pub batch_only: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ControlJobResponseJson {
    pub job_id: u64,
    /// The ControlJob action taken: HOLD, HOLD_ADMIN, RELEASE, REQUEUE or
    /// REQUEUE_HOLD.
    pub action: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostRejectionJson {
    pub host: String,
    pub lacks: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExplainJson {
    pub job_id: u64,
    pub state: String,
    pub reason: String,
    pub reason_text: String,
    pub hosts: Vec<HostRejectionJson>,
}

impl From<api::ExplainJobResponse> for ExplainJson {
    fn from(e: api::ExplainJobResponse) -> Self {
        ExplainJson {
            job_id: e.job_id,
            state: state_name(e.state),
            reason: e.reason,
            reason_text: e.reason_text,
            hosts: e
                .hosts
                .into_iter()
                .map(|h| HostRejectionJson {
                    host: h.host,
                    lacks: h.lacks,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobEventJson {
    pub seq: u64,
    pub time_ms: u64,
    pub kind: String,
    pub message: String,
}

impl From<api::JobEvent> for JobEventJson {
    fn from(e: api::JobEvent) -> Self {
        JobEventJson {
            seq: e.seq,
            time_ms: e.time_ms,
            kind: e.kind,
            message: e.message,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobEventsJson {
    pub job_id: u64,
    pub events: Vec<JobEventJson>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuJson {
    pub index: u32,
    pub model: String,
    pub memory_mb: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmulatorSetJson {
    pub kind: String,
    pub name: String,
    pub group: String,
    pub unit_ids: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InventoryJson {
    pub cpus: u32,
    pub memory_mb: u64,
    pub gpus: Vec<GpuJson>,
    pub emulators: Vec<EmulatorSetJson>,
    pub features: Vec<String>,
    pub partitions: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostJson {
    pub name: String,
    pub inventory: InventoryJson,
    /// "idle", "mixed", "allocated", "drain" or "down".
    pub state: String,
    pub alloc_cpus: u32,
    pub alloc_memory_mb: u64,
    pub reason: String,
}

impl From<api::Host> for HostJson {
    fn from(h: api::Host) -> Self {
        let inv = h.inventory.unwrap_or_default();
        HostJson {
            name: h.name,
            inventory: InventoryJson {
                cpus: inv.cpus,
                memory_mb: inv.memory_mb,
                gpus: inv
                    .gpus
                    .into_iter()
                    .map(|g| GpuJson {
                        index: g.index,
                        model: g.model,
                        memory_mb: g.memory_mb,
                    })
                    .collect(),
                emulators: inv
                    .emulators
                    .into_iter()
                    .map(|e| EmulatorSetJson {
                        kind: e.kind,
                        name: e.name,
                        group: e.group,
                        unit_ids: e.unit_ids,
                    })
                    .collect(),
                features: inv.features,
                partitions: inv.partitions,
            },
            state: h.state,
            alloc_cpus: h.alloc_cpus,
            alloc_memory_mb: h.alloc_memory_mb,
            reason: h.reason,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostListJson {
    pub hosts: Vec<HostJson>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberJson {
    pub node_id: u64,
    /// gRPC address, host:port.
    pub addr: String,
    pub voter: bool,
    pub matched_index: u64,
}

/// `GET /v1/cluster`: the answering node's view (ClusterStatus).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterJson {
    pub node_id: u64,
    pub leader_id: u64,
    pub leader_addr: String,
    pub term: u64,
    pub role: String,
    pub commit_index: u64,
    pub applied_index: u64,
    pub members: Vec<MemberJson>,
    pub next_job_id: u64,
}

impl From<api::ClusterStatusResponse> for ClusterJson {
    fn from(c: api::ClusterStatusResponse) -> Self {
        ClusterJson {
            node_id: c.node_id,
            leader_id: c.leader_id,
            leader_addr: c.leader_addr,
            term: c.term,
            role: c.role,
            commit_index: c.commit_index,
            applied_index: c.applied_index,
            members: c
                .members
                .into_iter()
                .map(|m| MemberJson {
                    node_id: m.node_id,
                    addr: m.addr,
                    voter: m.voter,
                    matched_index: m.matched_index,
                })
                .collect(),
            next_job_id: c.next_job_id,
        }
    }
}

/// Slurm's QOS and association limits (the proto's `Limits`). An absent
/// key or field is no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsJson {
    pub grp_tres: BTreeMap<String, u64>,
    pub grp_tres_mins: BTreeMap<String, u64>,
    pub grp_jobs: Option<u32>,
    pub grp_submit_jobs: Option<u32>,
    pub grp_wall_s: Option<u64>,
    pub max_tres_per_job: BTreeMap<String, u64>,
    pub max_tres_per_node: BTreeMap<String, u64>,
    pub max_tres_per_user: BTreeMap<String, u64>,
    pub max_jobs_per_user: Option<u32>,
    pub max_submit_jobs_per_user: Option<u32>,
    pub max_wall_s: Option<u64>,
    pub min_tres_per_job: BTreeMap<String, u64>,
}

impl From<api::Limits> for LimitsJson {
    fn from(l: api::Limits) -> Self {
        LimitsJson {
            grp_tres: l.grp_tres.into_iter().collect(),
            grp_tres_mins: l.grp_tres_mins.into_iter().collect(),
            grp_jobs: l.grp_jobs,
            grp_submit_jobs: l.grp_submit_jobs,
            grp_wall_s: l.grp_wall_s,
            max_tres_per_job: l.max_tres_per_job.into_iter().collect(),
            max_tres_per_node: l.max_tres_per_node.into_iter().collect(),
            max_tres_per_user: l.max_tres_per_user.into_iter().collect(),
            max_jobs_per_user: l.max_jobs_per_user,
            max_submit_jobs_per_user: l.max_submit_jobs_per_user,
            max_wall_s: l.max_wall_s,
            min_tres_per_job: l.min_tres_per_job.into_iter().collect(),
        }
    }
}

impl From<LimitsJson> for api::Limits {
    fn from(l: LimitsJson) -> Self {
        api::Limits {
            grp_tres: l.grp_tres.into_iter().collect(),
            grp_tres_mins: l.grp_tres_mins.into_iter().collect(),
            grp_jobs: l.grp_jobs,
            grp_submit_jobs: l.grp_submit_jobs,
            grp_wall_s: l.grp_wall_s,
            max_tres_per_job: l.max_tres_per_job.into_iter().collect(),
            max_tres_per_node: l.max_tres_per_node.into_iter().collect(),
            max_tres_per_user: l.max_tres_per_user.into_iter().collect(),
            max_jobs_per_user: l.max_jobs_per_user,
            max_submit_jobs_per_user: l.max_submit_jobs_per_user,
            max_wall_s: l.max_wall_s,
            min_tres_per_job: l.min_tres_per_job.into_iter().collect(),
        }
    }
}

/// A QOS (the proto's `Qos`). In a `PUT /v1/qos/{name}` body `name` may be
/// left out; when given it must match the path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QosJson {
    pub name: String,
    pub priority: i64,
    pub max_wall_s: u64,
    pub max_jobs_per_user: u32,
    pub preempt: Vec<String>,
    pub grace_time_s: u64,
    pub limits: Option<LimitsJson>,
    pub flags: Vec<String>,
    pub usage_factor: Option<f64>,
    pub usage_threshold: Option<f64>,
    pub preempt_mode: String,
    pub preempt_exempt_time_s: Option<u64>,
    pub idle_fill_preemptable: bool,
}

impl From<api::Qos> for QosJson {
    fn from(q: api::Qos) -> Self {
        QosJson {
            name: q.name,
            priority: q.priority,
            max_wall_s: q.max_wall_s,
            max_jobs_per_user: q.max_jobs_per_user,
            preempt: q.preempt,
            grace_time_s: q.grace_time_s,
            limits: q.limits.map(LimitsJson::from),
            flags: q.flags,
            usage_factor: q.usage_factor,
            usage_threshold: q.usage_threshold,
            preempt_mode: q.preempt_mode,
            preempt_exempt_time_s: q.preempt_exempt_time_s,
            idle_fill_preemptable: q.idle_fill_preemptable,
        }
    }
}

impl From<QosJson> for api::Qos {
    fn from(q: QosJson) -> Self {
        api::Qos {
            name: q.name,
            priority: q.priority,
            max_wall_s: q.max_wall_s,
            max_jobs_per_user: q.max_jobs_per_user,
            preempt: q.preempt,
            grace_time_s: q.grace_time_s,
            limits: q.limits.map(api::Limits::from),
            flags: q.flags,
            usage_factor: q.usage_factor,
            usage_threshold: q.usage_threshold,
            preempt_mode: q.preempt_mode,
            preempt_exempt_time_s: q.preempt_exempt_time_s,
            idle_fill_preemptable: q.idle_fill_preemptable,
        }
    }
}

/// An account of the association tree (the proto's `Account`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountJson {
    pub name: String,
    pub parent: String,
    pub shares: u32,
    pub users: Vec<String>,
    pub default_qos: String,
    pub priority: i64,
    pub max_priority: i64,
    pub qos: Vec<String>,
    pub limits: Option<LimitsJson>,
    pub preempt: Vec<String>,
}

impl From<api::Account> for AccountJson {
    fn from(a: api::Account) -> Self {
        AccountJson {
            name: a.name,
            parent: a.parent,
            shares: a.shares,
            users: a.users,
            default_qos: a.default_qos,
            priority: a.priority,
            max_priority: a.max_priority,
            qos: a.qos,
            limits: a.limits.map(LimitsJson::from),
            preempt: a.preempt,
        }
    }
}

impl From<AccountJson> for api::Account {
    fn from(a: AccountJson) -> Self {
        api::Account {
            name: a.name,
            parent: a.parent,
            shares: a.shares,
            users: a.users,
            default_qos: a.default_qos,
            priority: a.priority,
            max_priority: a.max_priority,
            qos: a.qos,
            limits: a.limits.map(api::Limits::from),
            preempt: a.preempt,
        }
    }
}

/// A user's own settings (the proto's `User`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserJson {
    pub name: String,
    pub priority: i64,
    pub default_account: String,
}

impl From<api::User> for UserJson {
    fn from(u: api::User) -> Self {
        UserJson {
            name: u.name,
            priority: u.priority,
            default_account: u.default_account,
        }
    }
}

impl From<UserJson> for api::User {
    fn from(u: UserJson) -> Self {
        api::User {
            name: u.name,
            priority: u.priority,
            default_account: u.default_account,
        }
    }
}

/// A partition (the proto's `Partition`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PartitionJson {
    pub name: String,
    pub hosts: Vec<String>,
    pub is_default: bool,
    pub default_time_s: u64,
    pub max_time_s: u64,
    pub qos: String,
    pub max_nodes: Option<u32>,
    pub min_nodes: Option<u32>,
    pub priority_job_factor: u32,
    pub preempt_mode: String,
    pub reserve_all_alternatives: bool,
}

impl From<api::Partition> for PartitionJson {
    fn from(p: api::Partition) -> Self {
        PartitionJson {
            name: p.name,
            hosts: p.hosts,
            is_default: p.is_default,
            default_time_s: p.default_time_s,
            max_time_s: p.max_time_s,
            qos: p.qos,
            max_nodes: p.max_nodes,
            min_nodes: p.min_nodes,
            priority_job_factor: p.priority_job_factor,
            preempt_mode: p.preempt_mode,
            reserve_all_alternatives: p.reserve_all_alternatives,
        }
    }
}

impl From<PartitionJson> for api::Partition {
    fn from(p: PartitionJson) -> Self {
        api::Partition {
            name: p.name,
            hosts: p.hosts,
            is_default: p.is_default,
            default_time_s: p.default_time_s,
            max_time_s: p.max_time_s,
            qos: p.qos,
            max_nodes: p.max_nodes,
            min_nodes: p.min_nodes,
            priority_job_factor: p.priority_job_factor,
            preempt_mode: p.preempt_mode,
            reserve_all_alternatives: p.reserve_all_alternatives,
        }
    }
}

/// A reservation (the proto's `Reservation`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReservationJson {
    pub name: String,
    pub hosts: Vec<String>,
    pub start_ms: u64,
    pub end_ms: u64,
    pub users: Vec<String>,
    pub accounts: Vec<String>,
}

impl From<api::Reservation> for ReservationJson {
    fn from(r: api::Reservation) -> Self {
        ReservationJson {
            name: r.name,
            hosts: r.hosts,
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            users: r.users,
            accounts: r.accounts,
        }
    }
}

impl From<ReservationJson> for api::Reservation {
    fn from(r: ReservationJson) -> Self {
        api::Reservation {
            name: r.name,
            hosts: r.hosts,
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            users: r.users,
            accounts: r.accounts,
        }
    }
}

/// The answer to a policy change: the log index it was committed at.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdminJson {
    pub log_index: u64,
}

/// Lists of policy objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QosListJson {
    pub qos: Vec<QosJson>,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountListJson {
    pub accounts: Vec<AccountJson>,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserListJson {
    pub users: Vec<UserJson>,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PartitionListJson {
    pub partitions: Vec<PartitionJson>,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReservationListJson {
    pub reservations: Vec<ReservationJson>,
}

/// The body of every error answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorJson {
    /// Stable, one per gRPC status (`invalid_argument`, `not_found`, ...)
    /// plus the REST layer's own (`payload_too_large`, `no_such_route`,
    /// `method_not_allowed`).
    pub code: String,
    pub message: String,
    /// With `unavailable`: the leader, when this node knows one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<u64>,
    /// Its gRPC address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_addr: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_travel_as_names_and_filters_parse_names() {
        assert_eq!(state_name(api::JobState::Running as i32), "RUNNING");
        assert_eq!(state_name(api::JobState::NodeFail as i32), "NODE_FAIL");
        assert_eq!(state_name(99), "UNKNOWN_99");
        assert_eq!(
            parse_states("pending, RUNNING,pending").expect("valid"),
            vec![api::JobState::Pending as i32, api::JobState::Running as i32]
        );
        assert_eq!(parse_states("all").expect("valid").len(), STATE_NAMES.len());
        let err = parse_states("RUNNING,bogus").unwrap_err();
        assert!(err.contains("\"bogus\""), "{err}");
        assert!(parse_states("JOB_STATE_UNSPECIFIED").is_err());
    }

    #[test]
    fn a_job_serializes_with_its_state_name() {
        let job = api::Job {
            job_id: 7,
            state: api::JobState::Cancelled as i32,
            spec: Some(api::JobSpec {
                command: "sleep 1".into(),
                env: [("A".to_string(), "1".to_string())].into_iter().collect(),
                ..Default::default()
            }),
            hosts: vec!["h1".into()],
            ..Default::default()
        };
        let value = serde_json::to_value(JobJson::from(job)).expect("serializes");
        assert_eq!(value["job_id"], 7);
        assert_eq!(value["state"], "CANCELLED");
        assert_eq!(value["spec"]["command"], "sleep 1");
        assert_eq!(value["spec"]["env"]["A"], "1");
        assert_eq!(value["hosts"][0], "h1");
    }

    #[test]
    fn a_submit_body_becomes_a_request_and_refuses_unknown_fields() {
        let body: SubmitJobJson = serde_json::from_str(
            r#"{"request_id":"r1","command":"true","cpus":2,"gres":["gpu:a100:1"],"env":{"X":"y"}}"#,
        )
        .expect("parses");
        let req = api::SubmitJobRequest::from(body);
        assert_eq!(req.request_id, "r1");
        let spec = req.spec.expect("spec");
        assert_eq!(spec.command, "true");
        assert_eq!(spec.cpus, 2);
        assert_eq!(spec.gres, vec!["gpu:a100:1".to_string()]);
        assert_eq!(spec.env.get("X").map(String::as_str), Some("y"));
        let err = serde_json::from_str::<SubmitJobJson>(r#"{"comand":"true"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `comand`"), "{err}");
    }

    #[test]
    fn policy_objects_round_trip_through_json() {
        let qos = api::Qos {
            name: "high".into(),
            priority: 100,
            flags: vec!["DenyOnLimit".into()],
            limits: Some(api::Limits {
                grp_tres: [("gpu".to_string(), 8)].into_iter().collect(),
                max_wall_s: Some(3600),
                ..Default::default()
            }),
            usage_factor: Some(2.0),
            ..Default::default()
        };
        let text = serde_json::to_string(&QosJson::from(qos.clone())).expect("serializes");
        let back: QosJson = serde_json::from_str(&text).expect("parses");
        assert_eq!(api::Qos::from(back), qos);
        // A burst QOS sits at a large negative priority.
        let burst: QosJson =
            serde_json::from_str(r#"{"name":"burst","priority":-1000000}"#).expect("parses");
        assert_eq!(api::Qos::from(burst).priority, -1_000_000);

        let account = api::Account {
            name: "team".into(),
            parent: "root".into(),
            shares: 10,
            users: vec!["ann".into()],
            limits: None,
            preempt: vec!["scavengers".into()],
            ..Default::default()
        };
        let text = serde_json::to_string(&AccountJson::from(account.clone())).expect("json");
        assert!(text.contains(r#""preempt":["scavengers"]"#), "{text}");
        assert_eq!(
            api::Account::from(serde_json::from_str::<AccountJson>(&text).expect("parses")),
            account
        );
        let partition = api::Partition {
            name: "gpu".into(),
            is_default: true,
            max_nodes: Some(4),
            ..Default::default()
        };
        let text = serde_json::to_string(&PartitionJson::from(partition.clone())).expect("json");
        assert_eq!(
            api::Partition::from(serde_json::from_str::<PartitionJson>(&text).expect("parses")),
            partition
        );
        let err = serde_json::from_str::<LimitsJson>(r#"{"grp_tress":{}}"#).unwrap_err();
        assert!(err.to_string().contains("grp_tress"), "{err}");
    }
}
