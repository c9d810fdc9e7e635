//! Slurm reason codes for jobs that are not running (invariant 7).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Running or finished: nothing is holding it.
    None,
    /// Waiting behind a job ahead of it in the queue.
    Priority,
    /// No host has the resources free now.
    Resources,
    /// No host in the cluster could ever satisfy the request.
    ReqNodeNotAvail,
    /// Held by its user.
    JobHeldUser,
}

impl Reason {
    /// Slurm's reason code as squeue prints it.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::None => "None",
            Reason::Priority => "Priority",
            Reason::Resources => "Resources",
            Reason::ReqNodeNotAvail => "ReqNodeNotAvail",
            Reason::JobHeldUser => "JobHeldUser",
        }
    }

    /// The reason in words.
    pub fn text(&self) -> &'static str {
        match self {
            Reason::None => "not waiting",
            Reason::Priority => "waiting behind a job that comes first in the queue",
            Reason::Resources => "no host has the requested resources free now",
            Reason::ReqNodeNotAvail => "no host that is up could ever satisfy the request",
            Reason::JobHeldUser => "held by its user",
        }
    }
}
