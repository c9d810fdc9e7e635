//! Conversions between the wire types (`berth_proto`) and the scheduler's
//! model. Kept in one place so the two never drift apart silently.

use berth_proto::api;
use berth_scheduler::priority::PriorityBreakdown;
use berth_scheduler::{Inventory, JobSpec, JobState, Reason, ResourceSet};
use berth_state::{HostRecord, JobEvent, JobRecord};

pub fn spec_from_proto(s: api::JobSpec) -> JobSpec {
    JobSpec {
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
        interactive: s.interactive,
        alternatives: s
            .alternatives
            .into_iter()
            .map(|a| ResourceSet {
                gres: a.gres,
                cpus: a.cpus,
                mem_mb: a.mem_mb,
                nodes: a.nodes,
                partition: a.partition,
            })
            .collect(),
    }
}

pub fn spec_to_proto(s: &JobSpec) -> api::JobSpec {
    api::JobSpec {
        name: s.name.clone(),
        user: s.user.clone(),
        command: s.command.clone(),
        workdir: s.workdir.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        cpus: s.cpus,
        mem_mb: s.mem_mb,
        nodes: s.nodes,
        time_limit_s: s.time_limit_s,
        partitions: s.partitions.clone(),
        qos: s.qos.clone(),
        account: s.account.clone(),
        gres: s.gres.clone(),
        stdout_path: s.stdout_path.clone(),
        stderr_path: s.stderr_path.clone(),
        requeue: s.requeue,
        hold: s.hold,
        nice: s.nice,
        comment: s.comment.clone(),
        dependency: s.dependency.clone(),
        begin_ms: s.begin_ms,
        exclusive: s.exclusive,
        features: s.features.clone(),
        reservation: s.reservation.clone(),
        preemptible: s.preemptible,
        array: s.array.clone(),
        array_job_id: s.array_job_id,
        array_task_id: s.array_task_id,
        array_task_count: s.array_task_count,
        array_task_min: s.array_task_min,
        array_task_max: s.array_task_max,
        array_max_running: s.array_max_running,
        warn_signal: s.warn_signal,
        warn_signal_before_s: s.warn_signal_before_s,
        warn_signal_batch_only: s.warn_signal_batch_only,
        interactive: s.interactive,
        alternatives: s
            .alternatives
            .iter()
            .map(|a| api::ResourceSet {
                gres: a.gres.clone(),
                cpus: a.cpus,
                mem_mb: a.mem_mb,
                nodes: a.nodes,
                partition: a.partition.clone(),
            })
            .collect(),
    }
}

pub fn state_to_proto(s: JobState) -> api::JobState {
    match s {
        JobState::Pending => api::JobState::Pending,
        JobState::Running => api::JobState::Running,
        JobState::Completed => api::JobState::Completed,
        JobState::Failed => api::JobState::Failed,
        JobState::Cancelled => api::JobState::Cancelled,
        JobState::Timeout => api::JobState::Timeout,
        JobState::NodeFail => api::JobState::NodeFail,
        JobState::Preempted => api::JobState::Preempted,
    }
}

pub fn state_from_proto(s: api::JobState) -> Option<JobState> {
    Some(match s {
        api::JobState::Pending => JobState::Pending,
        api::JobState::Running => JobState::Running,
        api::JobState::Completed => JobState::Completed,
        api::JobState::Failed => JobState::Failed,
        api::JobState::Cancelled => JobState::Cancelled,
        api::JobState::Timeout => JobState::Timeout,
        api::JobState::NodeFail => JobState::NodeFail,
        api::JobState::Preempted => JobState::Preempted,
        api::JobState::Unspecified | api::JobState::Suspended => return None,
    })
}

/// The reason shown for a job: a pending job's from the last pass (or
/// `Priority` before the first pass has seen it), `None` otherwise.
pub fn effective_reason(record: &JobRecord, last_pass: Option<&Reason>) -> Reason {
    match record.job.state {
        JobState::Pending => record
            .job
            .hold_reason()
            .or_else(|| last_pass.cloned())
            .unwrap_or(Reason::Priority),
        _ => Reason::None,
    }
}

/// A pending job's priority parts as `sprio` shows them. SITE is the
/// admin-set account and user inputs, which are added unweighted as
/// Slurm's site factor is.
pub fn priority_to_proto(record: &JobRecord, b: &PriorityBreakdown) -> api::PriorityFactors {
    let spec = &record.job.spec;
    api::PriorityFactors {
        job_id: b.job_id,
        user: spec.user.clone(),
        account: spec.account.clone(),
        partition: spec.partitions.join(","),
        total: b.total,
        age: b.age,
        fairshare: b.fairshare,
        jobsize: b.job_size,
        partition_factor: b.partition,
        qos: b.qos,
        assoc: b.assoc,
        nice: b.nice,
        site: b.account.saturating_add(b.user),
        fixed: b.fixed,
    }
}

/// `Job.priority` from a breakdown's total: Slurm's priority is unsigned,
/// so a total pushed below zero by nice shows as 0.
pub fn priority_value(b: &PriorityBreakdown) -> u64 {
    u64::try_from(b.total).unwrap_or(0)
}

pub fn job_to_proto(record: &JobRecord, reason: &Reason) -> api::Job {
    let job = &record.job;
    api::Job {
        job_id: job.id,
        spec: Some(spec_to_proto(&job.spec)),
        state: state_to_proto(job.state) as i32,
        reason: reason.code().to_string(),
        reason_text: reason.text().to_string(),
        submit_ms: job.submit_ms,
        start_ms: job.alloc.as_ref().map(|a| a.start_ms).unwrap_or(0),
        end_ms: job.end_ms,
        hosts: job
            .alloc
            .iter()
            .flat_map(|a| a.hosts().map(str::to_string))
            .collect(),
        exit_code: job.exit_code,
        exit_signal: job.exit_signal,
        alloc_id: job.alloc.as_ref().map(|a| a.alloc_id).unwrap_or(0),
        priority: 0,
        // Its current (or last) run was on lent capacity (idle-fill).
        borrowed: job.borrowed,
        // Filled by the API from the leader's last pass.
        predicted_start_ms: 0,
        alternative: job.alloc.as_ref().map_or(0, |a| a.alternative),
        steps: record
            .steps
            .iter()
            .map(|s| step_to_proto(s, job.state))
            .collect(),
    }
}

/// A step's record; one whose end never came takes its job's final state.
pub fn step_to_proto(s: &berth_state::StepRecord, job_state: JobState) -> api::JobStep {
    let state = match (s.end_ms, s.exit_code) {
        (0, _) if job_state.is_final() => job_state,
        (0, _) => JobState::Running,
        (_, 0) => JobState::Completed,
        _ => JobState::Failed,
    };
    api::JobStep {
        step_id: s.step_id,
        name: s.name.clone(),
        state: state_to_proto(state) as i32,
        exit_code: s.exit_code,
        start_ms: s.start_ms,
        end_ms: s.end_ms,
        hosts: s.hosts.clone(),
        ntasks: s.ntasks,
    }
}

pub fn event_to_proto(job_id: u64, e: &JobEvent) -> api::JobEvent {
    api::JobEvent {
        job_id,
        time_ms: e.time_ms,
        kind: e.kind.clone(),
        message: e.message.clone(),
        seq: e.seq,
    }
}

pub fn inventory_from_proto(i: &api::Inventory) -> Inventory {
    let mut inventory = Inventory::cpu_mem(i.cpus, i.memory_mb);
    inventory.gpus = u32::try_from(i.gpus.len()).unwrap_or(u32::MAX);
    // One model per host: the scheduler places by model, and a host with
    // mixed models is reported as the first one's (agents list GPUs in
    // device order).
    inventory.gpu_type = i.gpus.first().map(|g| g.model.clone()).unwrap_or_default();
    inventory.emulator = i
        .emulators
        .first()
        .map(|e| berth_scheduler::EmulatorInventory {
            kind: e.kind.clone(),
            group: e.group.clone(),
            units: u32::try_from(e.unit_ids.len()).unwrap_or(u32::MAX),
        });
    inventory.features = i.features.clone();
    inventory
}

pub fn host_to_proto(h: &HostRecord, up: bool) -> api::Host {
    let state = if !up {
        "down"
    } else if !h.drain_reason.is_empty() {
        "drain"
    } else if h.allocated.cpus == 0 && h.allocated.mem_mb == 0 {
        "idle"
    } else if h.allocated.cpus >= h.inventory.cpus {
        "allocated"
    } else {
        "mixed"
    };
    api::Host {
        name: h.name.clone(),
        inventory: Some(api::Inventory {
            cpus: h.inventory.cpus,
            memory_mb: h.inventory.mem_mb,
            // The record keeps count and model; devices are numbered as
            // allocations number them.
            gpus: (0..h.inventory.gpus)
                .map(|index| api::Gpu {
                    index,
                    model: h.inventory.gpu_type.clone(),
                    ..Default::default()
                })
                .collect(),
            emulators: h
                .inventory
                .emulator
                .iter()
                .map(|e| api::EmulatorSet {
                    kind: e.kind.clone(),
                    group: e.group.clone(),
                    unit_ids: (0..e.units).collect(),
                    ..Default::default()
                })
                .collect(),
            features: h.inventory.features.clone(),
            ..Default::default()
        }),
        state: state.to_string(),
        alloc_cpus: h.allocated.cpus,
        alloc_memory_mb: h.allocated.mem_mb,
        reason: if !up {
            "agent not heard from within the heartbeat timeout".into()
        } else {
            h.drain_reason.clone()
        },
    }
}
