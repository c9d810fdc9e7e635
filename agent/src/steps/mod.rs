//! The step service: srun's tasks on the hosts of a multi-host job.
//!
//! Slurm runs a batch script on the first host of an allocation and the
//! script's `srun` starts tasks on every host through each node's slurmd.
//! Here the batch host's srun calls `StepService.RunTasks` on each other
//! host's agent (addresses in the job's `BERTH_STEP_AGENTS`). The agent
//! starts the tasks only for an allocation its latest assignment set lists
//! for this host (a gang member, or its batch allocation), and only for a
//! caller holding that allocation's step credential. Tasks run as the
//! job's user, their output streams back to srun, and they end with the
//! allocation: killed when it leaves this host's set (after the stop
//! grace) or when srun goes away.

mod sweep;
mod task;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use sweep::{sweep_leftovers, sweep_on_changes, STEP_TAG_VAR};

use berth_proto::agent::step_service_server::StepService;
use berth_proto::agent::{
    Assignment, AssignmentSet, EndStepRequest, EndStepResponse, NextStepIdRequest,
    NextStepIdResponse, RunTasksRequest, StepReport, TaskOutput,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::user::JobUser;

/// Tasks one call may start (srun's own bound is the same).
pub const STEP_TASKS_PER_HOST_MAX: usize = 1024;
/// Arguments of a task's command, at most.
pub const STEP_ARGS_MAX: usize = 4096;
/// Environment variables one call may pass, at most.
pub const STEP_ENV_MAX: usize = 4096;
/// Longest step name passed on, in characters (the leader keeps 256
/// bytes at most).
pub const STEP_NAME_CHARS_MAX: usize = 64;
/// Most hosts of a step passed on.
pub const STEP_HOSTS_MAX: usize = 4096;
/// Output messages buffered per call before the tasks' pipes wait.
pub const STEP_OUTPUT_BUFFER: usize = 64;

/// What the service needs from the agent.
#[derive(Debug, Clone)]
pub struct StepContext {
    pub host: String,
    /// Step credentials are checked with it; `None`: a cluster without
    /// auth, whose steps carry none.
    pub secret: Option<Vec<u8>>,
    pub job_user: JobUser,
    pub allow_root_jobs: bool,
    /// The latest assignment set (published by the session).
    pub desired: watch::Receiver<Option<AssignmentSet>>,
    /// The agent's token on this machine (see `StateDir::instance`): step
    /// tasks carry it in their tag, so a later agent process finds what an
    /// earlier one left.
    pub instance: String,
    /// Where the step starts and ends this host numbers go, for the
    /// leader's record (sacct).
    pub outbox: crate::outbox::Outbox,
    /// Where each allocation's next step id is kept, so that a restarted
    /// agent does not number its steps from 0 again (`None`: in memory
    /// only).
    pub state: Option<crate::statedir::StateDir>,
}

pub struct StepServer {
    ctx: Arc<StepContext>,
    /// Numbers calls, so each call's tasks have a tag of their own.
    calls: AtomicU64,
    /// The next step id of each allocation listed here that has asked;
    /// entries of allocations no longer listed are dropped at every ask,
    /// so it holds at most the listed ones. Also kept in the state
    /// directory, where a restarted agent reads it back.
    step_ids: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
}

impl StepServer {
    pub fn new(ctx: StepContext) -> StepServer {
        StepServer {
            ctx: Arc::new(ctx),
            calls: AtomicU64::new(0),
            step_ids: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Queues a step's start or end for the leader, from this host.
    fn report_step(&self, report: StepReport) {
        self.ctx
            .outbox
            .push(crate::outbox::Report::Step(StepReport {
                host: self.ctx.host.clone(),
                ..report
            }));
    }

    /// The allocation, when the caller holds its credential and this host
    /// lists it.
    fn authorized(
        &self,
        job_id: u64,
        alloc_id: u64,
        credential: &str,
    ) -> Result<Assignment, Box<Status>> {
        let ctx = &self.ctx;
        if let Some(secret) = &ctx.secret {
            berth_auth::step::verify(secret, job_id, alloc_id, credential)
                .map_err(|e| Box::new(Status::permission_denied(e.to_string())))?;
        }
        listed(ctx.desired.borrow().as_ref(), job_id, alloc_id).ok_or_else(|| {
            Box::new(Status::failed_precondition(format!(
                "job {job_id} allocation {alloc_id} does not hold host {} (it ended, or this agent has not heard of it yet)",
                ctx.host
            )))
        })
    }
}

/// The allocation `(job_id, alloc_id)` as this host's latest set lists it.
pub fn listed(set: Option<&AssignmentSet>, job_id: u64, alloc_id: u64) -> Option<Assignment> {
    let set = set?;
    set.members
        .iter()
        .chain(set.assignments.iter())
        .find(|a| a.job_id == job_id && a.alloc_id == alloc_id)
        .cloned()
}

/// The address this agent registers for its step service: `advertise`
/// when configured; else the bound address, or this host's name with the
/// bound port when bound to every interface.
pub fn advertised_addr(advertise: Option<&str>, bound: SocketAddr, host: &str) -> String {
    match advertise {
        Some(a) => a.to_string(),
        None if bound.ip().is_unspecified() => format!("{host}:{}", bound.port()),
        None => bound.to_string(),
    }
}

/// What is wrong with a request, in words.
fn check_request(r: &RunTasksRequest) -> Result<(), String> {
    if r.argv.is_empty() || r.argv[0].is_empty() {
        return Err("argv: no command to run".into());
    }
    if r.argv.len() > STEP_ARGS_MAX {
        return Err(format!(
            "argv has {} arguments, at most {STEP_ARGS_MAX} are accepted",
            r.argv.len()
        ));
    }
    if r.argv.iter().any(|a| a.contains('\0')) {
        return Err("argv contains a NUL byte".into());
    }
    if r.tasks.is_empty() || r.tasks.len() > STEP_TASKS_PER_HOST_MAX {
        return Err(format!(
            "{} tasks asked for, 1 to {STEP_TASKS_PER_HOST_MAX} are accepted",
            r.tasks.len()
        ));
    }
    if r.env.len() > STEP_ENV_MAX {
        return Err(format!(
            "{} environment variables, at most {STEP_ENV_MAX} are accepted",
            r.env.len()
        ));
    }
    if let Some((k, _)) = r
        .env
        .iter()
        .find(|(k, v)| k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0'))
    {
        return Err(format!("invalid environment variable {k:?}"));
    }
    if r.cwd.contains('\0') {
        return Err("cwd contains a NUL byte".into());
    }
    Ok(())
}

#[tonic::async_trait]
impl StepService for StepServer {
    type RunTasksStream = ReceiverStream<Result<TaskOutput, Status>>;

    async fn run_tasks(
        &self,
        request: Request<RunTasksRequest>,
    ) -> Result<Response<Self::RunTasksStream>, Status> {
        let r = request.into_inner();
        check_request(&r).map_err(Status::invalid_argument)?;
        let ctx = &self.ctx;
        let alloc = self
            .authorized(r.job_id, r.alloc_id, &r.credential)
            .map_err(|e| *e)?;
        let user = alloc.spec.as_ref().map_or("", |s| s.user.as_str());
        let run_as = crate::user::resolve(user, ctx.job_user, ctx.allow_root_jobs)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let (tx, rx) = mpsc::channel(STEP_OUTPUT_BUFFER);
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let step = task::Step {
            tag: sweep::tag(&ctx.instance, r.alloc_id, std::process::id(), call),
            host: ctx.host.clone(),
            request: r,
            alloc,
            run_as,
        };
        tracing::info!(
            job_id = step.request.job_id,
            alloc_id = step.request.alloc_id,
            step_id = step.request.step_id,
            tasks = step.request.tasks.len(),
            "starting step tasks"
        );
        tokio::spawn(task::run(step, ctx.desired.clone(), tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn next_step_id(
        &self,
        request: Request<NextStepIdRequest>,
    ) -> Result<Response<NextStepIdResponse>, Status> {
        let r = request.into_inner();
        self.authorized(r.job_id, r.alloc_id, &r.credential)
            .map_err(|e| *e)?;
        let live = self
            .ctx
            .desired
            .borrow()
            .as_ref()
            .map(sweep::listed_ids)
            .unwrap_or_default();
        let mut ids = self
            .step_ids
            .lock()
            .map_err(|_| Status::internal("step counter lock poisoned"))?;
        ids.retain(|alloc_id, _| live.contains(alloc_id));
        let state = self.ctx.state.as_ref();
        let next = ids.entry(r.alloc_id).or_insert_with(|| {
            state
                .and_then(|s| s.read_next_step(r.alloc_id))
                .unwrap_or(0)
        });
        let step_id = *next;
        *next = next.saturating_add(1);
        let after = *next;
        drop(ids);
        // Counters of allocations that have gone are removed by
        // `sweep_on_changes`.
        if let Some(state) = state {
            if let Err(e) = state.write_next_step(r.alloc_id, after) {
                // Numbering goes on in memory; only a restart would reuse.
                tracing::warn!(alloc_id = r.alloc_id, error = %e, "step counter not saved");
            }
        }
        self.report_step(StepReport {
            job_id: r.job_id,
            alloc_id: r.alloc_id,
            step_id,
            name: r.name.chars().take(STEP_NAME_CHARS_MAX).collect(),
            hosts: r.hosts.into_iter().take(STEP_HOSTS_MAX).collect(),
            ntasks: r.ntasks,
            ..StepReport::default()
        });
        Ok(Response::new(NextStepIdResponse { step_id }))
    }

    async fn end_step(
        &self,
        request: Request<EndStepRequest>,
    ) -> Result<Response<EndStepResponse>, Status> {
        let r = request.into_inner();
        self.authorized(r.job_id, r.alloc_id, &r.credential)
            .map_err(|e| *e)?;
        self.report_step(StepReport {
            job_id: r.job_id,
            alloc_id: r.alloc_id,
            step_id: r.step_id,
            ended: true,
            exit_code: r.exit_code,
            ..StepReport::default()
        });
        Ok(Response::new(EndStepResponse {}))
    }
}

/// Serves the step service on `listener` (with TLS when given) until the
/// process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: StepContext,
    tls: Option<tonic::transport::ServerTlsConfig>,
) {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let service =
        berth_proto::agent::step_service_server::StepServiceServer::new(StepServer::new(ctx))
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = match builder.tls_config(tls) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "step service TLS setup failed: serving no steps");
                return;
            }
        };
    }
    if let Err(e) = builder
        .add_service(service)
        .serve_with_incoming(incoming)
        .await
    {
        tracing::error!(error = %e, "step service stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RunTasksRequest {
        RunTasksRequest {
            job_id: 1,
            alloc_id: 2,
            argv: vec!["true".into()],
            tasks: vec![0],
            ..Default::default()
        }
    }

    #[test]
    fn advertised_address_forms() {
        let any: SocketAddr = "0.0.0.0:6818".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(advertised_addr(None, any, "gpu01"), "gpu01:6818");
        assert_eq!(advertised_addr(None, lo, "gpu01"), "127.0.0.1:4000");
        assert_eq!(
            advertised_addr(Some("10.1.2.3:7000"), lo, "gpu01"),
            "10.1.2.3:7000"
        );
    }

    #[test]
    fn bad_requests_are_refused_by_name() {
        assert!(check_request(&request()).is_ok());
        let cases: Vec<(RunTasksRequest, &str)> = vec![
            (
                RunTasksRequest {
                    argv: vec![],
                    ..request()
                },
                "no command",
            ),
            (
                RunTasksRequest {
                    tasks: vec![],
                    ..request()
                },
                "0 tasks",
            ),
            (
                RunTasksRequest {
                    tasks: (0..1025).collect(),
                    ..request()
                },
                "1025 tasks",
            ),
            (
                RunTasksRequest {
                    env: [("A=B".to_string(), "x".to_string())].into(),
                    ..request()
                },
                "invalid environment variable \"A=B\"",
            ),
            (
                RunTasksRequest {
                    argv: vec!["a\0b".into()],
                    ..request()
                },
                "NUL",
            ),
        ];
        for (r, want) in cases {
            let err = check_request(&r).expect_err(want);
            assert!(err.contains(want), "{err} !~ {want}");
        }
    }

    #[test]
    fn only_listed_allocations_take_steps() {
        let member = Assignment {
            job_id: 5,
            alloc_id: 50,
            ..Default::default()
        };
        let set = AssignmentSet {
            members: vec![member.clone()],
            ..Default::default()
        };
        assert_eq!(listed(Some(&set), 5, 50), Some(member));
        assert_eq!(listed(Some(&set), 5, 51), None, "an older allocation");
        assert_eq!(listed(Some(&set), 6, 50), None);
        assert_eq!(listed(None, 5, 50), None);
    }
}
