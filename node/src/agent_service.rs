//! The agent protocol (`berth.agent.v1.AgentService`), served by the leader.
//!
//! Liveness is leader memory, and the assignment stream must come from a
//! node whose leadership is current, so followers answer every call with
//! FAILED_PRECONDITION "not leader; leader is ADDR" and agents follow it.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::agent::agent_service_server::AgentService;
use berth_proto::agent::*;
use berth_raft_store::{Command, Response as SmResponse};
use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::node::{Node, ProposeError};

/// Assignment sets buffered per stream before the sender waits.
const ASSIGNMENT_STREAM_BUFFER: usize = 8;
/// An unchanged set is re-sent this often, so an agent notices a silently
/// dead stream and a leader notices a gone agent.
const ASSIGNMENT_RESEND_MS: u64 = 5_000;

pub struct AgentServiceImpl {
    pub node: Arc<Node>,
}

impl AgentServiceImpl {
    fn require_leader(&self) -> Result<(), Status> {
        if self.node.is_leader() {
            return Ok(());
        }
        Err(ProposeError::NotLeader {
            leader_addr: self.node.leader().map(|(_, a)| a),
        }
        .into())
    }

    async fn report(&self, command: Command) -> Result<Response<ReportAck>, Status> {
        self.require_leader()?;
        match self.node.propose(command).await? {
            SmResponse::Report { accepted } => Ok(Response::new(ReportAck { accepted })),
            other => Err(Status::internal(format!(
                "unexpected state-machine answer {other:?}"
            ))),
        }
    }
}

type AssignmentStream = Pin<Box<dyn Stream<Item = Result<AssignmentSet, Status>> + Send>>;

fn valid_host(host: &str) -> Result<(), Status> {
    if host.is_empty() || host.len() > 255 {
        return Err(Status::invalid_argument("host name must be 1 to 255 bytes"));
    }
    Ok(())
}

#[tonic::async_trait]
impl AgentService for AgentServiceImpl {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        self.require_leader()?;
        let req = request.into_inner();
        valid_host(&req.host)?;
        let inventory = req
            .inventory
            .as_ref()
            .map(convert::inventory_from_proto)
            .ok_or_else(|| Status::invalid_argument("inventory is required"))?;
        let command = Command::RegisterHost {
            name: req.host.clone(),
            inventory,
            agent_restarted: req.agent_restarted,
            running_allocs: req.running.iter().map(|r| r.alloc_id).collect(),
            now_ms: 0,
        };
        match self.node.propose(command).await? {
            SmResponse::HostRegistered => {}
            SmResponse::Rejected { reason } => return Err(Status::invalid_argument(reason)),
            other => return Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
        self.node.liveness.heard_from(&req.host, Instant::now());
        tracing::info!(host = %req.host, running = req.running.len(), "agent registered");
        Ok(Response::new(RegisterResponse {
            heartbeat_interval_ms: self.node.config.agents.heartbeat_interval_ms,
            log_index: *self.node.applied.borrow(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        self.require_leader()?;
        let req = request.into_inner();
        let known = self.node.read(|s| s.data.hosts.contains_key(&req.host));
        if known {
            self.node.liveness.heard_from(&req.host, Instant::now());
        }
        Ok(Response::new(HeartbeatResponse { known }))
    }

    type WatchAssignmentsStream = AssignmentStream;

    async fn watch_assignments(
        &self,
        request: Request<WatchAssignmentsRequest>,
    ) -> Result<Response<Self::WatchAssignmentsStream>, Status> {
        self.require_leader()?;
        let host = request.into_inner().host;
        valid_host(&host)?;
        let (tx, rx) = tokio::sync::mpsc::channel(ASSIGNMENT_STREAM_BUFFER);
        let node = self.node.clone();
        tokio::spawn(async move {
            let mut applied = node.applied.clone();
            let mut last_sent: Option<Vec<u64>> = None;
            loop {
                if !node.is_leader() {
                    let _ = tx
                        .send(Err(Status::failed_precondition(format!(
                            "not leader; leader is {}",
                            node.leader()
                                .map(|(_, a)| a)
                                .unwrap_or_else(|| "unknown".into())
                        ))))
                        .await;
                    return;
                }
                let set = assignment_set(&node, &host);
                let ids: Vec<u64> = set.assignments.iter().map(|a| a.alloc_id).collect();
                if last_sent.as_ref() != Some(&ids) {
                    if tx.send(Ok(set)).await.is_err() {
                        return;
                    }
                    last_sent = Some(ids);
                }
                let wake = tokio::time::timeout(
                    Duration::from_millis(ASSIGNMENT_RESEND_MS),
                    applied.changed(),
                )
                .await;
                match wake {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => last_sent = None,
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_started(
        &self,
        request: Request<StartedReport>,
    ) -> Result<Response<ReportAck>, Status> {
        let r = request.into_inner();
        self.report(Command::JobStarted {
            job_id: r.job_id,
            alloc_id: r.alloc_id,
            host: r.host,
            pid: r.pid,
            now_ms: 0,
        })
        .await
    }

    async fn report_exited(
        &self,
        request: Request<ExitedReport>,
    ) -> Result<Response<ReportAck>, Status> {
        let r = request.into_inner();
        self.report(Command::JobExited {
            job_id: r.job_id,
            alloc_id: r.alloc_id,
            host: r.host,
            exit_code: r.exit_code,
            signal: r.signal,
            launch_error: r.launch_error,
            now_ms: 0,
        })
        .await
    }

    async fn ack_stop(&self, request: Request<StopAck>) -> Result<Response<ReportAck>, Status> {
        self.require_leader()?;
        let r = request.into_inner();
        // The exit report that accompanies a stop is what changes state; the
        // acknowledgement only confirms the agent carried the stop out.
        let accepted = self.node.read(|s| {
            s.job(r.job_id)
                .and_then(|rec| rec.job.alloc.as_ref())
                .is_some_and(|a| a.alloc_id == r.alloc_id && a.host == r.host)
        });
        tracing::info!(host = %r.host, job_id = r.job_id, alloc_id = r.alloc_id, accepted, "stop acknowledged");
        Ok(Response::new(ReportAck { accepted }))
    }
}

/// What should run on `host`, read from the applied (so committed) state.
fn assignment_set(node: &Node, host: &str) -> AssignmentSet {
    let stop_grace_s = node.config.agents.stop_grace_s;
    node.read(|s| AssignmentSet {
        applied_index: s.applied_index(),
        assignments: s
            .assignments_for(host)
            .into_iter()
            .filter_map(|r| {
                let alloc = r.job.alloc.as_ref()?;
                Some(Assignment {
                    job_id: r.job.id,
                    alloc_id: alloc.alloc_id,
                    spec: Some(convert::spec_to_proto(&r.job.spec)),
                    cpus: alloc.resources.cpus,
                    mem_mb: alloc.resources.mem_mb,
                    hosts: vec![alloc.host.clone()],
                    start_ms: alloc.start_ms,
                    stop_grace_s,
                })
            })
            .collect(),
    })
}
