//! The state machine's command set. Every state change is one of these,
//! proposed through Raft (invariant 2). Time arrives inside the command,
//! stamped by the leader, so `apply` never reads a clock.

use std::sync::Arc;

use berth_scheduler::{
    AdminReservation, Eviction, GangPlacement, Inventory, JobId, JobSpec, JobState, Placement,
};
use serde::{Deserialize, Serialize};

use crate::policy::PolicyChange;

/// What `ControlJob` does (Slurm's `scontrol hold|release|requeue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobAction {
    /// A pending job stops being considered (`JobHeldUser`).
    Hold,
    /// An admin hold (`JobHeldAdmin`): only an admin release lifts it.
    HoldAdmin,
    /// Lifts a user hold; `admin` also lifts an admin hold.
    Release { admin: bool },
    /// A running job is stopped and goes back to the queue; a finished one
    /// is queued again. `hold`: it comes back held (`scontrol requeuehold`).
    Requeue { hold: bool },
    /// Sends `signal` (a Linux number) to the running job without stopping
    /// it (`scancel --signal`): to every process of the job, or only its
    /// batch shell when `batch_only`. Recorded on the job for its current
    /// allocation; its agent sends it once. Added in command version 8.
    Signal { signal: u32, batch_only: bool },
}

/// What `UpdateJob` changes (`scontrol update JobId=N KEY=VALUE...`);
/// `None` leaves a field as it is. Added in command version 8.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUpdate {
    /// `TimeLimit=`, in s; 0 = none (UNLIMITED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// `Partition=`: replaces the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    /// `Dependency=`; "" removes every dependency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// `StartTime=` (the begin time), ms since the epoch; 0 = now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_ms: Option<u64>,
    /// `Name=` (JobName).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// `Features=`: replaces the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// `Priority=`: N > 0 fixes the job's priority at N (administrators
    /// only; clears its nice); 0 holds it, as Slurm does. Added in command
    /// version 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

impl JobUpdate {
    /// True when it changes only the time limit (allowed for a running
    /// job).
    pub fn only_time_limit(&self) -> bool {
        self.time_limit_s.is_some()
            && *self
                == JobUpdate {
                    time_limit_s: self.time_limit_s,
                    ..JobUpdate::default()
                }
    }

    pub fn is_empty(&self) -> bool {
        *self == JobUpdate::default()
    }
}

/// Version of the command encoding this build writes and understands. A node
/// that meets a higher version refuses to apply it (and stops) rather than
/// misapplying it. History: 1 = the foundation's commands; 2 = adds
/// `SetPolicy` (a version-1 node must not skip a policy change silently);
/// 3 = adds `Batch` (a version-2 node cannot read one); 4 = adds
/// `RegisterHost::drain_reason` (a version-3 node would drop the drain);
/// 5 = `SubmitJob`'s spec carries `dependency`, `begin_ms`, `exclusive`,
/// `features`, `reservation` and `preemptible` (a version-4 node would
/// drop them and start such a job too early or beside others); 6 = job
/// arrays: `SubmitJob`'s spec carries `array` (a version-5 node would make
/// one job instead of one per task) and adds `CancelArray`; 7 =
/// `ApplyPlan` carries the plan's `evictions` and `borrowed` jobs (a
/// version-6 node would start a claimant beside victims it never stopped,
/// and count a loan against quotas), and adds `CreateReservation` and
/// `DeleteReservation`; 8 = `SubmitJob`'s spec carries
/// `warn_signal*` (`--signal`; a version-7 node would drop it), adds
/// `JobAction::Signal` (`scancel --signal`) and `UpdateJob` (`scontrol
/// update`), and `RegisterHost`'s inventory carries `features` (a
/// version-7 node would drop them and never place a constrained job);
/// 9 = `SubmitJob`'s spec carries `alternatives` and a placement's `path`
/// picks one (a version-8 node would drop them and place the job's own
/// request instead); 10 = `UpdateJob` carries `priority` (`scontrol
/// update Priority=`; a version-9 node would drop it and answer that
/// nothing changed) and `whole_array` (a version-9 node would change only
/// the array's first task); 11 = multi-host jobs: `ApplyPlan` carries
/// `gang_starts` and an allocation its `gang` hosts (a version-10 node
/// would drop the gangs, or hand a gang's room on its other hosts to other
/// jobs); 12 = `RegisterHost` carries the agent's `step_addr` (a
/// version-11 node would drop it, and srun could not reach the host); 13 =
/// `SubmitJob`'s spec carries `interactive` (a version-12 node would run
/// an interactive allocation's description as a batch script); 14 = adds
/// `StepReported` (a version-13 node cannot read it); 15 = adds
/// `PolicyChange::SetDecayHalfLife` (a version-14 node cannot read it),
/// and an account's preempt list is checked and deleting an account or
/// QOS takes it off every list (a version-14 node would keep dangling
/// names), a QOS's priority is signed (a version-14 node cannot read a
/// negative one), and a Relative QOS is the QOS of one partition at most
/// (a version-14 node would accept a second).
pub const COMMAND_VERSION: u32 = 15;

/// One Raft log payload.
///
/// The command is shared: openraft clones an entry each time it reads one
/// (the leader's replication to each follower and its apply read the
/// newest entries from memory, see `store/recent.rs`), and a clone of a
/// batch of submits would copy every job spec in it. Serialized as the
/// command itself, so the log's bytes are the same as an owned one's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub command: Arc<Command>,
}

impl Request {
    pub fn new(command: Command) -> Request {
        Request {
            version: COMMAND_VERSION,
            command: Arc::new(command),
        }
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{} {}", self.version, self.command.kind())
    }
}

// Commands live briefly (built, serialized, applied); boxing the large
// SubmitJob variant would buy nothing but indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A new job. Idempotent per `request_id`.
    SubmitJob {
        request_id: String,
        spec: JobSpec,
        now_ms: u64,
    },
    /// Cancel a job: pending ones end at once, running ones once their agent
    /// reports the stop.
    CancelJob { job_id: JobId, now_ms: u64 },
    /// Cancel every unfinished task of the array whose id (its first
    /// task's job id) is `array_job_id`. Added in command version 6.
    CancelArray { array_job_id: JobId, now_ms: u64 },
    /// An agent's host and inventory. When `agent_restarted`, allocations
    /// on the host whose ids are not in `running_allocs` are lost.
    RegisterHost {
        name: String,
        inventory: Inventory,
        agent_restarted: bool,
        running_allocs: Vec<u64>,
        now_ms: u64,
        /// Why the agent found its own host unfit (declared inventory that
        /// discovery contradicts, a GPU gone, a failing emulator health
        /// check): the host is drained with this reason. Empty: not
        /// drained by its agent. Added in command version 4.
        #[serde(default)]
        drain_reason: String,
        /// Where the host's agent serves srun steps (`StepService`), as
        /// other hosts dial it; empty: it serves none. Added in command
        /// version 12.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        step_addr: String,
    },
    /// One scheduling pass's placements, computed from the state at
    /// `snapshot_index`. `apply` re-checks each one (invariant 3).
    ApplyPlan {
        snapshot_index: u64,
        now_ms: u64,
        starts: Vec<Placement>,
        /// Multi-host jobs, each started on all its hosts or not at all.
        /// Added in command version 11.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gang_starts: Vec<GangPlacement>,
        /// Running jobs to stop for blocked ones (preemption, idle-fill
        /// reclaim); each re-checked against its allocation. Added in
        /// command version 7.
        #[serde(default)]
        evictions: Vec<Eviction>,
        /// Jobs of `starts` placed on lent capacity (idle-fill): checked
        /// with their QOS node cap lifted and counted in no quota. Added
        /// in command version 7.
        #[serde(default)]
        borrowed: Vec<JobId>,
    },
    /// An admin reservation: a window on hosts for users/accounts, or for
    /// no one (maintenance). Validated in `apply`. Added in command
    /// version 7.
    CreateReservation {
        reservation: AdminReservation,
        now_ms: u64,
    },
    /// Removes the admin reservation `name`. Added in command version 7.
    DeleteReservation { name: String, now_ms: u64 },
    /// Running jobs the leader found past their time limit at `now_ms`.
    /// `apply` re-checks each against the limit and the allocation.
    TimeLimitReached {
        allocations: Vec<(JobId, u64)>,
        now_ms: u64,
    },
    /// The leader stopped hearing from these hosts' agents for longer than
    /// `timeout_ms`: their running jobs end NODE_FAIL.
    HostsSilent {
        hosts: Vec<String>,
        timeout_ms: u64,
        now_ms: u64,
    },
    /// The agent started the job's process.
    JobStarted {
        job_id: JobId,
        alloc_id: u64,
        host: String,
        pid: i32,
        now_ms: u64,
    },
    /// An srun step of the job started or ended (its batch host's agent
    /// reports it). Added in command version 14.
    StepReported {
        job_id: JobId,
        alloc_id: u64,
        host: String,
        report: crate::StepReport,
        now_ms: u64,
    },
    /// A change to the policy tables (QOS, accounts, users, partitions).
    /// Added in command version 2.
    SetPolicy { change: PolicyChange, now_ms: u64 },
    /// Hold, release or requeue a job. Added in command version 2.
    ControlJob {
        job_id: JobId,
        action: JobAction,
        now_ms: u64,
    },
    /// Changes a job's spec (`scontrol update`): most keys while it is
    /// pending, its time limit also while it runs. `admin`: the caller is
    /// an administrator (may raise a time limit). `apply` checks the new
    /// spec as a submit would. Added in command version 8.
    UpdateJob {
        job_id: JobId,
        update: JobUpdate,
        admin: bool,
        now_ms: u64,
        /// `job_id` is an array's id and every task of it that can still
        /// change takes the update (Slurm's `JobId=<array id>`). Added in
        /// command version 10.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        whole_array: bool,
    },
    /// The job's process ended (or could not start).
    JobExited {
        job_id: JobId,
        alloc_id: u64,
        host: String,
        exit_code: i32,
        signal: i32,
        launch_error: String,
        now_ms: u64,
    },
    /// Commands proposed concurrently on the leader, carried by one log
    /// entry so they share one log write and its fsync; applied in order,
    /// each as if it were its own entry, answered by `Response::Batch` in
    /// the same order. Never nested. Added in command version 3.
    Batch { commands: Vec<Command> },
}

impl Command {
    /// Sets the command's time. The leader stamps every command it proposes
    /// with its own clock, so time in the log comes from one place.
    pub fn stamp(&mut self, now: u64) {
        match self {
            Command::SubmitJob { now_ms, .. }
            | Command::CancelJob { now_ms, .. }
            | Command::CancelArray { now_ms, .. }
            | Command::RegisterHost { now_ms, .. }
            | Command::ApplyPlan { now_ms, .. }
            | Command::TimeLimitReached { now_ms, .. }
            | Command::HostsSilent { now_ms, .. }
            | Command::JobStarted { now_ms, .. }
            | Command::StepReported { now_ms, .. }
            | Command::JobExited { now_ms, .. }
            | Command::SetPolicy { now_ms, .. }
            | Command::ControlJob { now_ms, .. }
            | Command::CreateReservation { now_ms, .. }
            | Command::DeleteReservation { now_ms, .. }
            | Command::UpdateJob { now_ms, .. } => *now_ms = now,
            Command::Batch { commands } => {
                for command in commands {
                    command.stamp(now);
                }
            }
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Command::SubmitJob { .. } => "SubmitJob",
            Command::SetPolicy { .. } => "SetPolicy",
            Command::ControlJob { .. } => "ControlJob",
            Command::UpdateJob { .. } => "UpdateJob",
            Command::CancelJob { .. } => "CancelJob",
            Command::CancelArray { .. } => "CancelArray",
            Command::RegisterHost { .. } => "RegisterHost",
            Command::ApplyPlan { .. } => "ApplyPlan",
            Command::TimeLimitReached { .. } => "TimeLimitReached",
            Command::HostsSilent { .. } => "HostsSilent",
            Command::JobStarted { .. } => "JobStarted",
            Command::StepReported { .. } => "StepReported",
            Command::JobExited { .. } => "JobExited",
            Command::CreateReservation { .. } => "CreateReservation",
            Command::DeleteReservation { .. } => "DeleteReservation",
            Command::Batch { .. } => "Batch",
        }
    }
}

/// What applying a command answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Blank and membership entries.
    None,
    Submitted {
        job_id: JobId,
        duplicate: bool,
    },
    Cancelled {
        previous_state: JobState,
    },
    HostRegistered,
    PlanApplied {
        started: u32,
        dropped: u32,
        /// Evictions that passed the re-check and were committed.
        #[serde(default)]
        evicted: u32,
    },
    /// How many of the named jobs were marked to stop for their time limit.
    TimeLimitsEnforced {
        stopping: u32,
    },
    /// How many jobs ended NODE_FAIL because their host went silent.
    HostsFailed {
        jobs_ended: u32,
    },
    /// A report about an allocation; `accepted` is false when it is stale.
    Report {
        accepted: bool,
    },
    /// A policy change was applied.
    PolicySet,
    /// A hold, release or requeue was applied.
    JobControlled,
    /// An `UpdateJob` was applied: what changed, `Key old -> new` each.
    JobUpdated {
        changes: Vec<String>,
    },
    /// The command was refused and changed nothing.
    Rejected {
        reason: String,
    },
    /// A `Command::Batch`'s answers, one per command, in order.
    Batch {
        responses: Vec<Response>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dirty, SmState};

    fn submit(request_id: &str) -> Command {
        Command::SubmitJob {
            request_id: request_id.into(),
            spec: JobSpec {
                user: "alice".into(),
                command: "true".into(),
                ..JobSpec::default()
            },
            now_ms: 0,
        }
    }

    #[test]
    fn a_batch_applies_each_command_in_order_and_refuses_nesting() {
        let mut batch = Command::Batch {
            commands: vec![
                submit("a"),
                submit("b"),
                submit("a"),
                Command::Batch {
                    commands: vec![submit("c")],
                },
            ],
        };
        batch.stamp(5_000);
        let Command::Batch { commands } = &batch else {
            unreachable!()
        };
        assert!(commands.iter().all(|c| match c {
            Command::SubmitJob { now_ms, .. } => *now_ms == 5_000,
            _ => true,
        }));
        let mut state = SmState::default();
        let mut dirty = Dirty::default();
        let Response::Batch { responses } = state.apply(&batch, &mut dirty) else {
            panic!("a batch answers a batch");
        };
        assert_eq!(responses.len(), 4);
        let Response::Submitted {
            job_id: first,
            duplicate: false,
        } = responses[0]
        else {
            panic!("{:?}", responses[0]);
        };
        assert!(
            matches!(responses[1], Response::Submitted { job_id, duplicate: false } if job_id > first)
        );
        assert_eq!(
            responses[2],
            Response::Submitted {
                job_id: first,
                duplicate: true
            }
        );
        assert!(matches!(responses[3], Response::Rejected { .. }));
        // The same batch applied to another replica gives the same answers.
        let mut other = SmState::default();
        let again = other.apply(&batch, &mut Dirty::default());
        assert_eq!(again, Response::Batch { responses });
    }
}
