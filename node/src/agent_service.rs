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
use berth_state::{Command, Response as SmResponse};
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
    /// The term of this node's leadership, confirmed by a recent quorum
    /// acknowledgement; otherwise the "not leader" error naming the leader
    /// this node knows, if another.
    fn require_leader(&self) -> Result<u64, Status> {
        if let Some(term) = self.node.confirmed_leader_term() {
            return Ok(term);
        }
        let me = self.node.id;
        Err(ProposeError::NotLeader {
            leader_addr: self
                .node
                .leader()
                .filter(|(id, _)| *id != me)
                .map(|(_, a)| a),
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
        let term = self.require_leader()?;
        let req = request.into_inner();
        valid_host(&req.host)?;
        if req.drain_reason.len() > berth_state::HOST_DRAIN_REASON_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "drain_reason is {} bytes, at most {} are accepted",
                req.drain_reason.len(),
                berth_state::HOST_DRAIN_REASON_BYTES_MAX
            )));
        }
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
            drain_reason: req.drain_reason.clone(),
            step_addr: req.step_addr.clone(),
        };
        match self.node.propose(command).await? {
            SmResponse::HostRegistered => {}
            SmResponse::Rejected { reason } => return Err(Status::invalid_argument(reason)),
            other => return Err(Status::internal(format!("unexpected answer {other:?}"))),
        }
        self.node
            .liveness
            .heard_from(&req.host, term, Instant::now());
        if req.drain_reason.is_empty() {
            tracing::info!(host = %req.host, running = req.running.len(), "agent registered");
        } else {
            tracing::warn!(
                host = %req.host,
                running = req.running.len(),
                reason = %req.drain_reason,
                "agent registered and drained its host"
            );
        }
        Ok(Response::new(RegisterResponse {
            heartbeat_interval_ms: self.node.config.agents.heartbeat_interval_ms,
            log_index: *self.node.applied.borrow(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let term = self.require_leader()?;
        let req = request.into_inner();
        let known = self.node.read(|s| s.data.hosts.contains_key(&req.host));
        if known {
            self.node
                .liveness
                .heard_from(&req.host, term, Instant::now());
        }
        Ok(Response::new(HeartbeatResponse { known, term }))
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
            let mut last_sent: Option<(Vec<Assignment>, Vec<u64>, Vec<Assignment>)> = None;
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
                // Any change but the index is worth a new set: an
                // allocation added or stopped, and also a signal asked for
                // a running one or its time limit changed.
                let ids: (Vec<Assignment>, Vec<u64>, Vec<Assignment>) = (
                    set.assignments.clone(),
                    set.stopping.iter().map(|a| a.alloc_id).collect(),
                    set.members.clone(),
                );
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

    async fn report_step(
        &self,
        request: Request<StepReport>,
    ) -> Result<Response<ReportAck>, Status> {
        let r = request.into_inner();
        self.report(Command::StepReported {
            job_id: r.job_id,
            alloc_id: r.alloc_id,
            host: r.host,
            report: berth_state::StepReport {
                step_id: r.step_id,
                exit_code: r.ended.then_some(r.exit_code),
                name: r.name,
                hosts: r.hosts,
                ntasks: r.ntasks,
            },
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
    let default_grace_s = node.config.agents.stop_grace_s;
    let leader_now_ms = crate::node::now_ms();
    node.read(|s| AssignmentSet {
        leader_now_ms,
        applied_index: s.applied_index(),
        assignments: s
            .assignments_for(host)
            .into_iter()
            .filter_map(|r| assignment(s, r, host, default_grace_s))
            .collect(),
        // Only the ids: the agent needs nothing else to report an
        // allocation it never received as ended.
        stopping: s
            .stopping_on(host)
            .into_iter()
            .filter_map(|r| {
                Some(Assignment {
                    job_id: r.job.id,
                    alloc_id: r.job.alloc.as_ref()?.alloc_id,
                    ..Assignment::default()
                })
            })
            .collect(),
        members: s
            .members_on(host)
            .into_iter()
            .filter_map(|r| assignment(s, r, host, default_grace_s))
            .collect(),
    })
}

/// One allocation as `host`'s agent sees it: the GPU devices it holds
/// there, and every host's step address for the job's srun.
fn assignment(
    s: &berth_state::SmState,
    r: &berth_state::JobRecord,
    host: &str,
    default_grace_s: u64,
) -> Option<Assignment> {
    let alloc = r.job.alloc.as_ref()?;
    let stop_grace_s = s.stop_grace_s(r, default_grace_s);
    let emulator_kind = if alloc.resources.emu > 0 {
        r.job
            .spec
            .shape()
            .map(|shape| shape.emu_kind)
            .unwrap_or_default()
    } else {
        String::new()
    };
    let step_addrs = s.step_addrs(alloc.hosts());
    Some(Assignment {
        job_id: r.job.id,
        alloc_id: alloc.alloc_id,
        spec: Some(convert::spec_to_proto(&r.job.spec)),
        cpus: alloc.resources.cpus,
        mem_mb: alloc.resources.mem_mb,
        hosts: alloc.hosts().map(str::to_string).collect(),
        start_ms: alloc.start_ms,
        stop_grace_s,
        gpu_indices: alloc.gpu_indices_on(host).to_vec(),
        emulator_units: alloc.resources.emu,
        emulator_kind,
        restart_count: r.job.restarts,
        signals: r
            .signals
            .iter()
            .filter(|sig| sig.alloc_id == alloc.alloc_id)
            .map(|sig| SignalRequest {
                seq: sig.seq,
                signal: sig.signal,
                batch_only: sig.batch_only,
            })
            .collect(),
        step_addrs,
    })
}
