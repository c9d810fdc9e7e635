//! Interactive allocations and srun steps from outside a job: what the
//! owner of a running job needs to start tasks on its hosts (each host's
//! step address and the allocation's step credential, which only nodes
//! and agents can make, since it is keyed by the cluster secret), and the
//! end of an interactive allocation, reported by its owner in place of a
//! batch script's exit.

use berth_proto::api::{ReleaseAllocationResponse, StepAccess};
use berth_scheduler::JobState;
use berth_state::{Command, Response as SmResponse, SmState};
use tonic::Status;

use crate::node::Node;

/// The running job's step access, read from `s`.
pub fn step_access(s: &SmState, job_id: u64, secret: Option<&[u8]>) -> Result<StepAccess, Status> {
    let record = s
        .job(job_id)
        .ok_or_else(|| Status::not_found(format!("job {job_id} does not exist")))?;
    let alloc = match (&record.job.alloc, record.job.state) {
        (Some(alloc), JobState::Running) => alloc,
        (_, state) => {
            return Err(Status::failed_precondition(format!(
                "job {job_id} is {}: only a running job has hosts to run steps on",
                state.slurm_name()
            )))
        }
    };
    let hosts: Vec<String> = alloc.hosts().map(str::to_string).collect();
    let step_addrs = s.step_addrs(hosts.iter().map(String::as_str));
    let credential = match secret {
        Some(secret) => berth_auth::step::issue(secret, job_id, alloc.alloc_id)
            .map_err(|e| Status::internal(format!("step credential: {e}")))?,
        None => String::new(),
    };
    Ok(StepAccess {
        job_id,
        alloc_id: alloc.alloc_id,
        hosts,
        step_addrs,
        credential,
    })
}

/// Ends a running interactive allocation with `exit_code`, as a batch
/// host's exit report would end a batch job.
pub async fn release(
    node: &Node,
    job_id: u64,
    exit_code: i32,
) -> Result<ReleaseAllocationResponse, Status> {
    let found = node.read(|s| {
        s.job(job_id)
            .map(|r| (r.job.spec.interactive, r.job.state, r.job.alloc.clone()))
    });
    let (alloc_id, host) = match found {
        None => return Err(Status::not_found(format!("job {job_id} does not exist"))),
        Some((false, _, _)) => {
            return Err(Status::failed_precondition(format!(
                "job {job_id} is not an interactive allocation: it ends when its batch script does"
            )))
        }
        Some((true, JobState::Running, Some(alloc))) => (alloc.alloc_id, alloc.host),
        Some((true, _, _)) => return Ok(ReleaseAllocationResponse { released: false }),
    };
    let command = Command::JobExited {
        job_id,
        alloc_id,
        host,
        exit_code,
        signal: 0,
        launch_error: String::new(),
        now_ms: 0,
    };
    match node.propose(command).await? {
        SmResponse::Report { accepted } => Ok(ReleaseAllocationResponse { released: accepted }),
        other => Err(Status::internal(format!(
            "unexpected state-machine answer {other:?}"
        ))),
    }
}
