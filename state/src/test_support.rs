//! Helpers the state machine's newer test modules share: applying a
//! command, registering a host, submitting a spec, and a plan of starts.

use berth_scheduler::{GangPlacement, Inventory, JobId, JobSpec, Placement, Resources};

use super::{Dirty, SmState};
use crate::command::{Command, Response};

pub(super) fn apply(s: &mut SmState, command: Command) -> Response {
    s.apply(&command, &mut Dirty::default())
}

/// Registers `name` with `inventory` (a fresh agent, at time 1).
pub(super) fn register(s: &mut SmState, name: &str, inventory: Inventory) {
    apply(
        s,
        Command::RegisterHost {
            name: name.into(),
            inventory,
            agent_restarted: false,
            running_allocs: Vec::new(),
            now_ms: 1,
            drain_reason: String::new(),
            step_addr: String::new(),
        },
    );
}

/// Submits `spec` at time 10.
pub(super) fn submit(s: &mut SmState, request_id: &str, spec: JobSpec) -> Response {
    apply(
        s,
        Command::SubmitJob {
            request_id: request_id.into(),
            spec,
            now_ms: 10,
        },
    )
}

/// The id of an accepted submit; panics on anything else.
pub(super) fn accepted(response: Response) -> JobId {
    match response {
        Response::Submitted { job_id, .. } => job_id,
        other => panic!("expected a submit's answer, got {other:?}"),
    }
}

/// The reason of a refusal; panics on anything else.
pub(super) fn rejected(response: Response) -> String {
    match response {
        Response::Rejected { reason } => reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// `job_id` on one host, by its path `path` in `partition` ("" = none).
pub(super) fn placement(
    job_id: JobId,
    host: &str,
    resources: Resources,
    partition: &str,
    path: usize,
) -> Placement {
    Placement {
        job_id,
        host: host.into(),
        resources,
        partition: partition.into(),
        path,
        released: Vec::new(),
    }
}

/// A plan at time 20 with these starts and nothing else.
pub(super) fn plan(starts: Vec<Placement>, gang_starts: Vec<GangPlacement>) -> Command {
    Command::ApplyPlan {
        snapshot_index: 0,
        now_ms: 20,
        starts,
        gang_starts,
        evictions: Vec::new(),
        borrowed: Vec::new(),
    }
}

/// How many of a plan's starts began; panics when it was no plan.
pub(super) fn started(response: Response) -> u32 {
    match response {
        Response::PlanApplied { started, .. } => started,
        other => panic!("expected a plan's outcome, got {other:?}"),
    }
}
