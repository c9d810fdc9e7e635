//! The state machine's command set. Every state change is one of these,
//! proposed through Raft (invariant 2). Time arrives inside the command,
//! stamped by the leader, so `apply` never reads a clock.

use berth_scheduler::{Inventory, JobId, JobSpec, JobState, Placement};
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
}

/// Version of the command encoding this build writes and understands. A node
/// that meets a higher version refuses to apply it (and stops) rather than
/// misapplying it. History: 1 = the foundation's commands; 2 = adds
/// `SetPolicy` (a version-1 node must not skip a policy change silently);
/// 3 = adds `Batch` (a version-2 node cannot read one).
pub const COMMAND_VERSION: u32 = 3;

/// One Raft log payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub command: Command,
}

impl Request {
    pub fn new(command: Command) -> Request {
        Request {
            version: COMMAND_VERSION,
            command,
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
    /// An agent's host and inventory. When `agent_restarted`, allocations
    /// on the host whose ids are not in `running_allocs` are lost.
    RegisterHost {
        name: String,
        inventory: Inventory,
        agent_restarted: bool,
        running_allocs: Vec<u64>,
        now_ms: u64,
    },
    /// One scheduling pass's placements, computed from the state at
    /// `snapshot_index`. `apply` re-checks each one (invariant 3).
    ApplyPlan {
        snapshot_index: u64,
        now_ms: u64,
        starts: Vec<Placement>,
    },
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
    /// A change to the policy tables (QOS, accounts, users, partitions).
    /// Added in command version 2.
    SetPolicy { change: PolicyChange, now_ms: u64 },
    /// Hold, release or requeue a job. Added in command version 2.
    ControlJob {
        job_id: JobId,
        action: JobAction,
        now_ms: u64,
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
            | Command::RegisterHost { now_ms, .. }
            | Command::ApplyPlan { now_ms, .. }
            | Command::TimeLimitReached { now_ms, .. }
            | Command::HostsSilent { now_ms, .. }
            | Command::JobStarted { now_ms, .. }
            | Command::JobExited { now_ms, .. }
            | Command::SetPolicy { now_ms, .. }
            | Command::ControlJob { now_ms, .. } => *now_ms = now,
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
            Command::CancelJob { .. } => "CancelJob",
            Command::RegisterHost { .. } => "RegisterHost",
            Command::ApplyPlan { .. } => "ApplyPlan",
            Command::TimeLimitReached { .. } => "TimeLimitReached",
            Command::HostsSilent { .. } => "HostsSilent",
            Command::JobStarted { .. } => "JobStarted",
            Command::JobExited { .. } => "JobExited",
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
    use crate::state::{Dirty, SmState};

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
