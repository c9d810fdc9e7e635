//! Evictions a pass decides: running jobs to stop so that a blocked job can
//! start. Preemption ([`crate::preempt`]) and idle-fill reclaim both produce
//! them; the simulator and the live plan applier carry them out.
//!
//! The applier re-checks each (invariant 3): the victim must still be
//! running under the same allocation (`alloc_id`), else the eviction is
//! dropped. A victim goes back to the queue when `requeue` is set (and
//! spends none of its restart budget), else it ends PREEMPTED for good.

use serde::{Deserialize, Serialize};

use crate::model::JobId;

/// Why a job is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvictCause {
    /// A higher-priority job (or a QOS allowed to) takes its room.
    Preempt,
    /// Idle-fill: lent capacity is taken back for a job with a claim.
    Reclaim,
}

impl EvictCause {
    /// The word the simulator prints (`"cause":"preempt"`).
    pub fn word(self) -> &'static str {
        match self {
            EvictCause::Preempt => "preempt",
            EvictCause::Reclaim => "reclaim",
        }
    }
}

/// What a job evicted and queued again says while it waits, the pass's
/// own sentence after it where there is one: the one wording the
/// cluster's reasons and the simulator's lines share. `by` names the job
/// it was evicted for as the reader knows it ("job 7", or a scenario's
/// name for it).
pub fn requeued_detail(by: &str, pass_detail: Option<&str>) -> String {
    match pass_detail {
        Some(detail) => format!("Preempted by {by}; queued again; {detail}"),
        None => format!("Preempted by {by}; queued again"),
    }
}

/// One running job to stop, and for whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eviction {
    /// The victim.
    pub job: JobId,
    /// The blocked job its room goes to.
    pub for_job: JobId,
    pub cause: EvictCause,
    /// Back to the queue (PreemptMode requeue) or ended (cancel).
    pub requeue: bool,
    /// The victim's allocation when the pass saw it: the applier drops the
    /// eviction when the job runs under another one (or not at all).
    #[serde(default)]
    pub alloc_id: u64,
    /// Seconds the victim keeps running before it is sent the stop signal
    /// (its QOS's GraceTime); 0 = stopped at once.
    #[serde(default)]
    pub grace_s: u64,
}
