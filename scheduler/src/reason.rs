//! Slurm reason codes for jobs that are not running (invariant 7), spelled
//! exactly as Slurm's `squeue` prints them, each with its words.

use serde::{Deserialize, Serialize};

use crate::qos::TresKind;

/// Whose limit holds a job: its QOS (or the partition QOS) or its
/// association (account, or the user within the account).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LimitScope {
    Qos,
    Assoc,
}

/// Which limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LimitKind {
    GrpTres(TresKind),
    GrpTresMins(TresKind),
    GrpJobs,
    GrpWall,
    MaxTresPerJob(TresKind),
    MaxTresPerNode(TresKind),
    MaxTresPerUser(TresKind),
    MaxJobsPerUser,
    MaxWall,
    MinTresPerJob(TresKind),
    UsageThreshold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Held by an admin (or by the controller, e.g. after too many requeues).
    JobHeldAdmin,
    /// Waiting for the jobs it depends on.
    Dependency,
    /// A job it depends on ended in a way that can never satisfy it.
    DependencyNeverSatisfied,
    /// Its begin time has not come.
    BeginTime,
    /// Its time limit exceeds the partition's.
    PartitionTimeLimit,
    /// Its node count is outside the partition's limits.
    PartitionNodeLimit,
    /// Its array already runs as many tasks as its `%max` allows.
    JobArrayTaskLimit,
    /// Its account no longer exists or does not list its user.
    InvalidAccount,
    /// Its QOS no longer exists.
    InvalidQos,
    /// A QOS or association limit.
    Limit(LimitScope, LimitKind),
    /// Waiting for its admin reservation's window to start.
    Reservation,
    /// The reservation it names does not exist, has ended, or does not
    /// admit its user or account.
    InvalidReservation,
    /// Only hosts held by a maintenance window (reserved for no one) could
    /// take it now.
    ReservedForMaintenance,
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
            Reason::JobHeldAdmin => "JobHeldAdmin",
            Reason::Dependency => "Dependency",
            Reason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            Reason::BeginTime => "BeginTime",
            Reason::PartitionTimeLimit => "PartitionTimeLimit",
            Reason::PartitionNodeLimit => "PartitionNodeLimit",
            Reason::JobArrayTaskLimit => "JobArrayTaskLimit",
            Reason::InvalidAccount => "InvalidAccount",
            Reason::InvalidQos => "InvalidQOS",
            Reason::Limit(scope, kind) => limit_code(*scope, *kind),
            Reason::Reservation => "Reservation",
            Reason::InvalidReservation => "InvalidReservation",
            // Slurm prints the two together for nodes in a MAINT reservation.
            Reason::ReservedForMaintenance => "ReqNodeNotAvail, Reserved for maintenance",
        }
    }

    /// The reason in words (without the numbers; those come with the pass's
    /// detail sentence).
    pub fn text(&self) -> &'static str {
        match self {
            Reason::None => "not waiting",
            Reason::Priority => "waiting behind a job that comes first in the queue",
            Reason::Resources => "no host has the requested resources free now",
            Reason::ReqNodeNotAvail => "no host that is up could ever satisfy the request",
            Reason::JobHeldUser => "held by its user",
            Reason::JobHeldAdmin => "held by an administrator",
            Reason::Dependency => "waiting for the jobs it depends on",
            Reason::DependencyNeverSatisfied => "a job it depends on can no longer satisfy it",
            Reason::BeginTime => "its begin time has not come",
            Reason::PartitionTimeLimit => "its time limit exceeds the partition's",
            Reason::PartitionNodeLimit => "its node count is outside the partition's limits",
            Reason::JobArrayTaskLimit => "its array runs as many tasks as its limit allows",
            Reason::InvalidAccount => "its account does not exist or does not list its user",
            Reason::InvalidQos => "its QOS does not exist",
            Reason::Limit(LimitScope::Qos, _) => "its QOS has reached a limit",
            Reason::Limit(LimitScope::Assoc, _) => "its account has reached a limit",
            Reason::Reservation => "waiting for its reservation's window to start",
            Reason::InvalidReservation => {
                "its reservation does not exist, has ended, or does not admit it"
            }
            Reason::ReservedForMaintenance => {
                "the hosts it could use now are reserved for maintenance"
            }
        }
    }

    /// Every code this crate can give, for documentation and tests.
    pub fn is_limit(&self) -> bool {
        matches!(self, Reason::Limit(..))
    }
}

/// Slurm's spelling of each limit reason. Slurm names GPUs and emulators
/// through GRES (`...GRES`); the association's per-user TRES limit is what
/// Slurm calls a user association's `GrpTRES`, so it reads `AssocGrp...`.
fn limit_code(scope: LimitScope, kind: LimitKind) -> &'static str {
    use LimitKind as K;
    use LimitScope::{Assoc, Qos};
    use TresKind as T;
    match (scope, kind) {
        (Qos, K::GrpTres(T::Node)) => "QOSGrpNodeLimit",
        (Qos, K::GrpTres(T::Cpu)) => "QOSGrpCpuLimit",
        (Qos, K::GrpTres(T::Mem)) => "QOSGrpMemLimit",
        (Qos, K::GrpTres(_)) => "QOSGrpGRES",
        (Qos, K::GrpTresMins(T::Cpu)) => "QOSGrpCPUMinutesLimit",
        (Qos, K::GrpTresMins(T::Mem)) => "QOSGrpMemoryMinutes",
        (Qos, K::GrpTresMins(T::Node)) => "QOSGrpNodeMinutes",
        (Qos, K::GrpTresMins(_)) => "QOSGrpGRESMinutes",
        (Qos, K::GrpJobs) => "QOSGrpJobsLimit",
        (Qos, K::GrpWall) => "QOSGrpWallLimit",
        (Qos, K::MaxTresPerJob(T::Node)) => "QOSMaxNodePerJobLimit",
        (Qos, K::MaxTresPerJob(T::Cpu)) => "QOSMaxCpuPerJobLimit",
        (Qos, K::MaxTresPerJob(T::Mem)) => "QOSMaxMemoryPerJob",
        (Qos, K::MaxTresPerJob(_)) => "QOSMaxGRESPerJob",
        (Qos, K::MaxTresPerNode(T::Cpu | T::Node)) => "QOSMaxCpuPerNode",
        (Qos, K::MaxTresPerNode(T::Mem)) => "QOSMaxMemoryPerNode",
        (Qos, K::MaxTresPerNode(_)) => "QOSMaxGRESPerNode",
        (Qos, K::MaxTresPerUser(T::Node)) => "QOSMaxNodePerUserLimit",
        (Qos, K::MaxTresPerUser(T::Cpu)) => "QOSMaxCpuPerUserLimit",
        (Qos, K::MaxTresPerUser(T::Mem)) => "QOSMaxMemoryPerUser",
        (Qos, K::MaxTresPerUser(_)) => "QOSMaxGRESPerUser",
        (Qos, K::MaxJobsPerUser) => "QOSMaxJobsPerUserLimit",
        (Qos, K::MaxWall) => "QOSMaxWallDurationPerJobLimit",
        (Qos, K::MinTresPerJob(T::Node)) => "QOSMinNode",
        (Qos, K::MinTresPerJob(T::Cpu)) => "QOSMinCpuNotSatisfied",
        (Qos, K::MinTresPerJob(T::Mem)) => "QOSMinMemory",
        (Qos, K::MinTresPerJob(_)) => "QOSMinGRES",
        (Qos, K::UsageThreshold) => "QOSUsageThreshold",
        (Assoc, K::GrpTres(T::Node) | K::MaxTresPerUser(T::Node)) => "AssocGrpNodeLimit",
        (Assoc, K::GrpTres(T::Cpu) | K::MaxTresPerUser(T::Cpu)) => "AssocGrpCpuLimit",
        (Assoc, K::GrpTres(T::Mem) | K::MaxTresPerUser(T::Mem)) => "AssocGrpMemLimit",
        (Assoc, K::GrpTres(_) | K::MaxTresPerUser(_)) => "AssocGrpGRES",
        (Assoc, K::GrpTresMins(T::Cpu)) => "AssocGrpCPUMinutesLimit",
        (Assoc, K::GrpTresMins(T::Mem)) => "AssocGrpMemMinutes",
        (Assoc, K::GrpTresMins(T::Node)) => "AssocGrpNodeMinutes",
        (Assoc, K::GrpTresMins(_)) => "AssocGrpGRESMinutes",
        (Assoc, K::GrpJobs) => "AssocGrpJobsLimit",
        (Assoc, K::GrpWall) => "AssocGrpWallLimit",
        (Assoc, K::MaxTresPerJob(T::Node)) => "AssocMaxNodePerJobLimit",
        (Assoc, K::MaxTresPerJob(T::Cpu)) => "AssocMaxCpuPerJobLimit",
        (Assoc, K::MaxTresPerJob(T::Mem)) => "AssocMaxMemPerJob",
        (Assoc, K::MaxTresPerJob(_)) => "AssocMaxGRESPerJob",
        (Assoc, K::MaxTresPerNode(T::Cpu | T::Node)) => "AssocMaxCpuPerNode",
        (Assoc, K::MaxTresPerNode(T::Mem)) => "AssocMaxMemPerNode",
        (Assoc, K::MaxTresPerNode(_)) => "AssocMaxGRESPerNode",
        (Assoc, K::MaxJobsPerUser) => "AssocMaxJobsLimit",
        (Assoc, K::MaxWall) => "AssocMaxWallDurationPerJobLimit",
        (Assoc, K::MinTresPerJob(_)) => "AssocMinTRESNotSatisfied",
        (Assoc, K::UsageThreshold) => "AssocUsageThreshold",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_codes_are_slurms() {
        let q = |k| Reason::Limit(LimitScope::Qos, k).code();
        let a = |k| Reason::Limit(LimitScope::Assoc, k).code();
        assert_eq!(q(LimitKind::GrpTres(TresKind::Node)), "QOSGrpNodeLimit");
        assert_eq!(q(LimitKind::GrpTres(TresKind::Gpu)), "QOSGrpGRES");
        assert_eq!(a(LimitKind::GrpTres(TresKind::Cpu)), "AssocGrpCpuLimit");
        assert_eq!(q(LimitKind::MaxWall), "QOSMaxWallDurationPerJobLimit");
        assert_eq!(q(LimitKind::MaxJobsPerUser), "QOSMaxJobsPerUserLimit");
    }
}
