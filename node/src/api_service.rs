//! The public API (`berth.v1.BerthApi`).
//!
//! Writes go through [`Node::propose`] (forwarded to the leader when this
//! node is a follower). Reads are linearizable unless the request says
//! `stale`: the leader answers after a read-index barrier, and a follower
//! hands the read to the leader.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use berth_proto::api::berth_api_client::BerthApiClient;
use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::*;
use berth_raft_store::StateMachineStore;
use berth_scheduler::evict::requeued_detail;
use berth_scheduler::explain::explain_hosts;
use berth_scheduler::priority::PriorityBreakdown;
use berth_scheduler::JobState as SmJobState;
use berth_scheduler::{HostState, Lack};
use berth_state::policy::PolicyChange;
use berth_state::validate_submit;
use berth_state::{Command, Response as SmResponse};
use futures::Stream;
use openraft::BasicNode;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::authz::{authenticate, Caller};
use crate::convert;
use crate::network::channel;
use crate::node::{Node, ProposeError};
use crate::policy_convert;
use berth_auth::grpc::CredentialedChannel;

/// Most jobs one ListJobs answer carries.
pub const LIST_JOBS_MAX: usize = 10_000;
/// Events buffered per WatchJobEvents stream before the sender waits.
const EVENT_STREAM_BUFFER: usize = 64;

pub struct ApiService {
    pub node: Arc<Node>,
    leader_api: Mutex<Option<(String, BerthApiClient<CredentialedChannel>)>>,
    /// The state-machine store, read for backups (`BackupState`).
    state_machine: StateMachineStore,
}

impl ApiService {
    pub fn new(node: Arc<Node>, state_machine: StateMachineStore) -> ApiService {
        ApiService {
            node,
            leader_api: Mutex::new(None),
            state_machine,
        }
    }

    /// A client for the leader's API, when this node is not the leader.
    /// Proposes a policy change; a refusal comes back as INVALID_ARGUMENT
    /// with the state machine's words.
    async fn set_policy(&self, change: PolicyChange) -> Result<Response<AdminResponse>, Status> {
        self.propose_admin(Command::SetPolicy { change, now_ms: 0 })
            .await
    }

    /// Proposes an admin change (policy, reservations) and answers with
    /// the index it was applied at, or the state machine's refusal.
    async fn propose_admin(&self, command: Command) -> Result<Response<AdminResponse>, Status> {
        match self.node.propose(command).await? {
            SmResponse::PolicySet => Ok(Response::new(AdminResponse {
                log_index: self.node.read(|s| s.applied_index()),
            })),
            SmResponse::Rejected { reason } => Err(rejected(reason)),
            other => Err(unexpected(other)),
        }
    }

    /// Who is calling (see `authz`).
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        authenticate(&self.node.auth, request)
    }

    /// Refuses a user acting on someone else's job. A job that does not
    /// exist is left to the command to report.
    fn require_job_owner(&self, caller: &Caller, job_id: u64, what: &str) -> Result<(), Status> {
        let owner = self
            .node
            .read(|s| s.job(job_id).map(|r| r.job.spec.user.clone()));
        match owner {
            Some(owner) => caller.require_owner(&owner, what),
            None => Ok(()),
        }
    }

    /// A client for the leader's API when this node is not the leader. Its
    /// calls carry the cluster secret: this node authorized them already.
    fn leader_client(&self) -> Result<Option<BerthApiClient<CredentialedChannel>>, Status> {
        if self.node.is_leader() {
            return Ok(None);
        }
        let Some((_, addr)) = self.node.leader() else {
            return Err(ProposeError::NoLeader.into());
        };
        let mut cached = self.leader_api.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((a, c)) = cached.as_ref() {
            if *a == addr {
                return Ok(Some(c.clone()));
            }
        }
        let ch = channel(&addr).map_err(|e| Status::unavailable(format!("leader {addr}: {e}")))?;
        let client = BerthApiClient::with_interceptor(ch, self.node.credentials.clone())
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
        *cached = Some((addr, client.clone()));
        Ok(Some(client))
    }

    fn reason_of(&self, record: &berth_state::JobRecord) -> berth_scheduler::Reason {
        let reasons = self
            .node
            .last_reasons
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        convert::effective_reason(record, reasons.get(&record.job.id))
    }

    /// A job with its reason and, for a pending one, the last pass's
    /// sentence with the numbers.
    fn job_to_proto(&self, record: &berth_state::JobRecord) -> Job {
        let mut job = convert::job_to_proto(record, &self.reason_of(record));
        if record.job.state == SmJobState::Pending {
            let details = self
                .node
                .last_details
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let pass_detail = details.get(&record.job.id).map(String::as_str);
            let detail = match record.job.requeued_for {
                0 => pass_detail.map(str::to_string),
                by => Some(requeued_detail(&format!("job {by}"), pass_detail)),
            };
            if let Some(detail) = detail {
                job.reason_text = format!("{}: {detail}", job.reason_text);
            }
            drop(details);
            let starts = self
                .node
                .last_starts
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            job.predicted_start_ms = starts.get(&record.job.id).copied().unwrap_or(0);
            drop(starts);
            let priorities = self
                .node
                .last_priorities
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            job.priority = priorities
                .get(&record.job.id)
                .map(convert::priority_value)
                .unwrap_or(0);
        }
        job
    }

    /// An array's id names the whole array (`scancel 12`, `scontrol
    /// update JobId=12`) unless only that task was asked for (`12_0`).
    fn names_whole_array(&self, job_id: u64, only_task: bool) -> bool {
        !only_task
            && self.node.read(|s| {
                s.job(job_id)
                    .is_some_and(|r| r.job.spec.array_job_id == job_id)
            })
    }

    fn job_proto(&self, job_id: u64) -> Result<Job, Status> {
        self.node
            .read(|s| s.job(job_id).map(|r| self.job_to_proto(r)))
            .ok_or_else(|| Status::not_found(format!("job {job_id} does not exist")))
    }
}

/// Whether a job submitted at `submit_ms` and ended at `end_ms` (0: not
/// yet) was active at some time in `[since_ms, until_ms]`; a bound of 0
/// is no bound.
pub fn active_in(submit_ms: u64, end_ms: u64, since_ms: u64, until_ms: u64) -> bool {
    let after_since = since_ms == 0 || end_ms == 0 || end_ms >= since_ms;
    let before_until = until_ms == 0 || submit_ms <= until_ms;
    after_since && before_until
}

fn rejected(reason: String) -> Status {
    Status::invalid_argument(reason)
}

fn unexpected(r: SmResponse) -> Status {
    Status::internal(format!("unexpected state-machine answer {r:?}"))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<JobEvent, Status>> + Send>>;

#[tonic::async_trait]
impl BerthApi for ApiService {
    async fn submit_job(
        &self,
        request: Request<SubmitJobRequest>,
    ) -> Result<Response<SubmitJobResponse>, Status> {
        let caller = self.caller(&request)?;
        let req = request.into_inner();
        let mut spec = convert::spec_from_proto(
            req.spec
                .ok_or_else(|| rejected("spec is required".into()))?,
        );
        if let Some(user) = caller.submit_as(&spec.user)? {
            spec.user = user;
        }
        validate_submit(&req.request_id, &spec).map_err(rejected)?;
        let command = Command::SubmitJob {
            request_id: req.request_id,
            spec,
            now_ms: 0,
        };
        match self.node.propose(command).await? {
            SmResponse::Submitted { job_id, duplicate } => {
                Ok(Response::new(SubmitJobResponse { job_id, duplicate }))
            }
            SmResponse::Rejected { reason } => Err(rejected(reason)),
            other => Err(unexpected(other)),
        }
    }

    async fn cancel_job(
        &self,
        request: Request<CancelJobRequest>,
    ) -> Result<Response<CancelJobResponse>, Status> {
        let caller = self.caller(&request)?;
        let CancelJobRequest { job_id, only_task } = request.into_inner();
        self.require_job_owner(&caller, job_id, "cancel")?;
        // Every task has the same owner, so the check above covers them
        // all.
        let whole_array = self.names_whole_array(job_id, only_task);
        let command = if whole_array {
            Command::CancelArray {
                array_job_id: job_id,
                now_ms: 0,
            }
        } else {
            Command::CancelJob { job_id, now_ms: 0 }
        };
        match self.node.propose(command).await? {
            SmResponse::Cancelled { previous_state } => Ok(Response::new(CancelJobResponse {
                previous_state: convert::state_to_proto(previous_state) as i32,
            })),
            SmResponse::Rejected { reason } => Err(Status::failed_precondition(reason)),
            other => Err(unexpected(other)),
        }
    }

    async fn control_job(
        &self,
        request: Request<ControlJobRequest>,
    ) -> Result<Response<ControlJobResponse>, Status> {
        let caller = self.caller(&request)?;
        use berth_state::JobAction;
        use control_job_request::Action;
        let req = request.into_inner();
        self.require_job_owner(&caller, req.job_id, "hold, release, requeue or signal")?;
        if req.action == Action::HoldAdmin as i32
            || (req.action == Action::Release as i32 && req.admin)
        {
            caller.require_admin("an admin hold or release")?;
        }
        let action = match Action::try_from(req.action) {
            Ok(Action::Hold) => JobAction::Hold,
            Ok(Action::HoldAdmin) => JobAction::HoldAdmin,
            Ok(Action::Release) => JobAction::Release { admin: req.admin },
            Ok(Action::Requeue) => JobAction::Requeue { hold: false },
            Ok(Action::RequeueHold) => JobAction::Requeue { hold: true },
            Ok(Action::Signal) => {
                if !berth_scheduler::signal::signal_known(req.signal) {
                    return Err(rejected(format!(
                        "signal {} is not a signal: expected 1 to 31",
                        req.signal
                    )));
                }
                JobAction::Signal {
                    signal: req.signal,
                    batch_only: req.batch_only,
                }
            }
            Ok(Action::Unspecified) | Err(_) => {
                return Err(rejected(format!(
                "action {} is not one of HOLD, HOLD_ADMIN, RELEASE, REQUEUE, REQUEUE_HOLD, SIGNAL",
                req.action
            )))
            }
        };
        match self
            .node
            .propose(Command::ControlJob {
                job_id: req.job_id,
                action,
                now_ms: 0,
            })
            .await?
        {
            SmResponse::JobControlled => Ok(Response::new(ControlJobResponse {})),
            SmResponse::Rejected { reason } => Err(Status::failed_precondition(reason)),
            other => Err(unexpected(other)),
        }
    }

    async fn update_job(
        &self,
        request: Request<UpdateJobRequest>,
    ) -> Result<Response<UpdateJobResponse>, Status> {
        let caller = self.caller(&request)?;
        let req = request.into_inner();
        self.require_job_owner(&caller, req.job_id, "update")?;
        let update = berth_state::JobUpdate {
            time_limit_s: req.time_limit_s,
            partitions: req.set_partitions.then(|| req.partitions.clone()),
            qos: req.qos.clone(),
            nice: req.nice,
            dependency: req.dependency.clone(),
            begin_ms: req.begin_ms,
            name: req.name.clone(),
            comment: req.comment.clone(),
            features: req.set_features.then(|| req.features.clone()),
            priority: req.priority,
        };
        // Every task has the same owner, so the check above covers them
        // all.
        let whole_array = self.names_whole_array(req.job_id, req.only_task);
        match self
            .node
            .propose(Command::UpdateJob {
                job_id: req.job_id,
                update,
                admin: caller.is_admin(),
                now_ms: 0,
                whole_array,
            })
            .await?
        {
            SmResponse::JobUpdated { changes } => Ok(Response::new(UpdateJobResponse { changes })),
            SmResponse::Rejected { reason }
                if reason.ends_with("does not exist") && reason.starts_with("job ") =>
            {
                Err(Status::not_found(reason))
            }
            SmResponse::Rejected { reason } => Err(Status::failed_precondition(reason)),
            other => Err(unexpected(other)),
        }
    }

    async fn get_job(&self, request: Request<GetJobRequest>) -> Result<Response<Job>, Status> {
        self.caller(&request)?;
        let req = request.into_inner();
        if !req.stale {
            if let Some(mut leader) = self.leader_client()? {
                return leader.get_job(req).await;
            }
            self.node.read_barrier().await?;
        }
        Ok(Response::new(self.job_proto(req.job_id)?))
    }

    async fn get_step_access(
        &self,
        request: Request<GetStepAccessRequest>,
    ) -> Result<Response<StepAccess>, Status> {
        let caller = self.caller(&request)?;
        let req = request.into_inner();
        self.require_job_owner(&caller, req.job_id, "run steps in")?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.get_step_access(req).await;
        }
        self.node.read_barrier().await?;
        let secret = self.node.auth.cluster.clone();
        self.node
            .read(|s| crate::step_access::step_access(s, req.job_id, secret.as_deref()))
            .map(Response::new)
    }

    async fn release_allocation(
        &self,
        request: Request<ReleaseAllocationRequest>,
    ) -> Result<Response<ReleaseAllocationResponse>, Status> {
        let caller = self.caller(&request)?;
        let req = request.into_inner();
        self.require_job_owner(&caller, req.job_id, "release")?;
        crate::step_access::release(&self.node, req.job_id, req.exit_code)
            .await
            .map(Response::new)
    }

    async fn list_jobs(
        &self,
        request: Request<ListJobsRequest>,
    ) -> Result<Response<ListJobsResponse>, Status> {
        self.caller(&request)?;
        let req = request.into_inner();
        if !req.stale {
            if let Some(mut leader) = self.leader_client()? {
                return leader.list_jobs(req).await;
            }
            self.node.read_barrier().await?;
        }
        let mut states = Vec::new();
        for s in &req.states {
            match JobState::try_from(*s) {
                Ok(JobState::Unspecified) | Err(_) => {
                    return Err(rejected(format!("unknown job state {s}")))
                }
                // A valid state no job can be in yet (e.g. PREEMPTED) matches nothing.
                Ok(state) => states.extend(convert::state_from_proto(state)),
            }
        }
        if req.states.is_empty() {
            states = vec![SmJobState::Pending, SmJobState::Running];
        }
        let limit = match req.limit as usize {
            0 => LIST_JOBS_MAX,
            n => n.min(LIST_JOBS_MAX),
        };
        let (jobs, truncated) = self.node.read(|s| {
            let mut matched = s
                .jobs()
                .filter(|r| states.contains(&r.job.state))
                .filter(|r| req.user.is_empty() || r.job.spec.user == req.user)
                .filter(|r| {
                    active_in(
                        r.job.submit_ms,
                        r.job.end_ms,
                        req.active_since_ms,
                        req.active_until_ms,
                    )
                });
            let jobs: Vec<Job> = matched
                .by_ref()
                .take(limit)
                .map(|r| self.job_to_proto(r))
                .collect();
            (jobs, matched.next().is_some())
        });
        Ok(Response::new(ListJobsResponse { jobs, truncated }))
    }

    async fn get_priorities(
        &self,
        request: Request<GetPrioritiesRequest>,
    ) -> Result<Response<GetPrioritiesResponse>, Status> {
        self.caller(&request)?;
        let req = request.into_inner();
        // Only the leader runs passes; a follower's map is empty or old.
        if let Some(mut leader) = self.leader_client()? {
            return leader.get_priorities(req).await;
        }
        if req.job_ids.len() > LIST_JOBS_MAX {
            return Err(rejected(format!(
                "at most {LIST_JOBS_MAX} job ids per call, got {}",
                req.job_ids.len()
            )));
        }
        let mut wanted = req.job_ids;
        wanted.sort_unstable();
        wanted.dedup();
        // State first, then the map: the order `job_to_proto` takes them in.
        let jobs = self.node.read(|s| {
            let priorities = self
                .node
                .last_priorities
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // Asked-for ids are looked up, not searched for: either way the
            // work is one step per answer at most.
            let chosen: Box<dyn Iterator<Item = &PriorityBreakdown>> = if wanted.is_empty() {
                Box::new(priorities.values())
            } else {
                Box::new(wanted.iter().filter_map(|id| priorities.get(id)))
            };
            chosen
                .filter_map(|b| {
                    let record = s.job(b.job_id)?;
                    // Started or ended since the pass: no longer pending.
                    if record.job.state != SmJobState::Pending {
                        return None;
                    }
                    if !req.user.is_empty() && record.job.spec.user != req.user {
                        return None;
                    }
                    Some(convert::priority_to_proto(record, b))
                })
                .take(LIST_JOBS_MAX)
                .collect()
        });
        Ok(Response::new(GetPrioritiesResponse { jobs }))
    }

    async fn explain_job(
        &self,
        request: Request<ExplainJobRequest>,
    ) -> Result<Response<ExplainJobResponse>, Status> {
        self.caller(&request)?;
        let req = request.into_inner();
        if let Some(mut leader) = self.leader_client()? {
            return leader.explain_job(req).await;
        }
        let job = self.job_proto(req.job_id)?;
        let now = Instant::now();
        let hosts = self.node.read(|s| {
            let Some(record) = s.job(req.job_id) else {
                return Vec::new();
            };
            if record.job.state != SmJobState::Pending {
                return Vec::new();
            }
            // The same view the pass has: hosts with their partitions and
            // liveness, the job with its resolved account, QOS and paths.
            let snapshot = s.scheduler_snapshot(|h| self.node.liveness.state(h, now));
            let Some(job) = snapshot.pending.iter().find(|j| j.id == req.job_id) else {
                return Vec::new();
            };
            explain_hosts(&snapshot, job)
                .into_iter()
                .map(|v| {
                    // A drained host says why its agent drained it.
                    let drained = v.lacks.contains(&Lack::NotUp(HostState::Drain));
                    let lacks = match s.data.hosts.get(&v.host) {
                        Some(h) if drained && !h.drain_reason.is_empty() => {
                            format!("host is drained: {}", h.drain_reason)
                        }
                        _ => v.text(),
                    };
                    HostRejection {
                        lacks,
                        host: v.host,
                    }
                })
                .collect()
        });
        Ok(Response::new(ExplainJobResponse {
            job_id: job.job_id,
            state: job.state,
            reason: job.reason,
            reason_text: job.reason_text,
            hosts,
        }))
    }

    type WatchJobEventsStream = EventStream;

    async fn watch_job_events(
        &self,
        request: Request<WatchJobEventsRequest>,
    ) -> Result<Response<Self::WatchJobEventsStream>, Status> {
        self.caller(&request)?;
        let req = request.into_inner();
        let job_id = req.job_id;
        self.job_proto(job_id)?;
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_STREAM_BUFFER);
        let node = self.node.clone();
        tokio::spawn(async move {
            let mut applied = node.applied.clone();
            // By sequence number, not position: the oldest events of a long
            // history are dropped, which shifts positions but not seqs.
            let mut last_seq = req.after_seq;
            loop {
                let (fresh, done) = node.read(|s| match s.job(job_id) {
                    Some(r) => (
                        r.events
                            .iter()
                            .filter(|e| e.seq > last_seq)
                            .map(|e| convert::event_to_proto(job_id, e))
                            .collect::<Vec<_>>(),
                        r.job.state.is_final(),
                    ),
                    None => (Vec::new(), true),
                });
                if let Some(last) = fresh.last() {
                    last_seq = last.seq;
                }
                for event in fresh {
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                if done || req.no_follow {
                    return;
                }
                if applied.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn cluster_status(
        &self,
        request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        self.caller(&request)?;
        let metrics = self.node.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: Vec<u64> = membership.voter_ids().collect();
        let matched = metrics.replication.clone().unwrap_or_default();
        let members = membership
            .nodes()
            .map(|(id, node): (&u64, &BasicNode)| Member {
                node_id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
                matched_index: matched
                    .get(id)
                    .and_then(|m| m.map(|l| l.index))
                    .unwrap_or(0),
            })
            .collect();
        let leader_id = crate::node::named_leader(&metrics).unwrap_or(0);
        let leader_addr = self.node.leader().map(|(_, a)| a).unwrap_or_default();
        Ok(Response::new(ClusterStatusResponse {
            node_id: self.node.id,
            leader_id,
            leader_addr,
            term: metrics.current_term,
            role: format!("{:?}", metrics.state),
            commit_index: commit_index(&metrics, &voters),
            applied_index: metrics.last_applied.map(|l| l.index).unwrap_or(0),
            members,
            next_job_id: self.node.read(|s| s.data.counters.next_job_id),
        }))
    }

    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.caller(&request)?.require_admin("AddLearner")?;
        let req = request.into_inner();
        if let Some(mut leader) = self.leader_client()? {
            return leader.add_learner(req).await;
        }
        if req.node_id == 0 || req.addr.is_empty() {
            return Err(rejected("node_id (>= 1) and addr are required".into()));
        }
        let written = self
            .node
            .raft
            .add_learner(req.node_id, BasicNode { addr: req.addr }, true)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(MembershipResponse {
            log_index: written.log_id.index,
        }))
    }

    async fn change_membership(
        &self,
        request: Request<ChangeMembershipRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.caller(&request)?.require_admin("ChangeMembership")?;
        let req = request.into_inner();
        if let Some(mut leader) = self.leader_client()? {
            return leader.change_membership(req).await;
        }
        if req.voter_ids.is_empty() {
            return Err(rejected("voter_ids must not be empty".into()));
        }
        let written = self
            .node
            .raft
            .change_membership(
                req.voter_ids
                    .into_iter()
                    .collect::<std::collections::BTreeSet<_>>(),
                false,
            )
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(MembershipResponse {
            log_index: written.log_id.index,
        }))
    }

    async fn list_hosts(
        &self,
        request: Request<ListHostsRequest>,
    ) -> Result<Response<ListHostsResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_hosts(ListHostsRequest {}).await;
        }
        let now = Instant::now();
        let hosts = self.node.read(|s| {
            s.hosts()
                .map(|h| {
                    let up =
                        self.node.liveness.state(&h.name, now) == berth_scheduler::HostState::Up;
                    convert::host_to_proto(h, up)
                })
                .collect()
        });
        Ok(Response::new(ListHostsResponse { hosts }))
    }

    async fn upsert_qos(&self, request: Request<Qos>) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("UpsertQos")?;
        let qos = policy_convert::qos_from(request.get_ref()).map_err(rejected)?;
        self.set_policy(PolicyChange::UpsertQos(qos)).await
    }
    async fn list_qos(
        &self,
        request: Request<ListQosRequest>,
    ) -> Result<Response<ListQosResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_qos(request.into_inner()).await;
        }
        self.node.read_barrier().await?;
        let qos = self.node.read(|s| {
            s.data
                .policy
                .qos
                .values()
                .map(policy_convert::qos_to)
                .collect()
        });
        Ok(Response::new(ListQosResponse { qos }))
    }
    async fn upsert_account(
        &self,
        request: Request<Account>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("UpsertAccount")?;
        let account = policy_convert::account_from(request.get_ref()).map_err(rejected)?;
        self.set_policy(PolicyChange::UpsertAccount(account)).await
    }
    async fn list_accounts(
        &self,
        request: Request<ListAccountsRequest>,
    ) -> Result<Response<ListAccountsResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_accounts(request.into_inner()).await;
        }
        self.node.read_barrier().await?;
        let accounts = self.node.read(|s| {
            s.data
                .policy
                .accounts
                .values()
                .map(policy_convert::account_to)
                .collect()
        });
        Ok(Response::new(ListAccountsResponse { accounts }))
    }
    async fn upsert_partition(
        &self,
        request: Request<Partition>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("UpsertPartition")?;
        let partition = policy_convert::partition_from(request.get_ref()).map_err(rejected)?;
        self.set_policy(PolicyChange::UpsertPartition(partition))
            .await
    }
    async fn list_partitions(
        &self,
        request: Request<ListPartitionsRequest>,
    ) -> Result<Response<ListPartitionsResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_partitions(request.into_inner()).await;
        }
        self.node.read_barrier().await?;
        let partitions = self.node.read(|s| {
            s.data
                .policy
                .partitions
                .values()
                .map(policy_convert::partition_to)
                .collect()
        });
        Ok(Response::new(ListPartitionsResponse { partitions }))
    }
    async fn upsert_user(&self, request: Request<User>) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("UpsertUser")?;
        let user = policy_convert::user_from(request.get_ref());
        self.set_policy(PolicyChange::UpsertUser(user)).await
    }
    async fn list_users(
        &self,
        request: Request<ListUsersRequest>,
    ) -> Result<Response<ListUsersResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_users(request.into_inner()).await;
        }
        self.node.read_barrier().await?;
        let users = self.node.read(|s| {
            s.data
                .policy
                .users
                .values()
                .map(policy_convert::user_to)
                .collect()
        });
        Ok(Response::new(ListUsersResponse { users }))
    }
    async fn delete_qos(
        &self,
        request: Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("DeleteQos")?;
        self.set_policy(PolicyChange::DeleteQos(request.into_inner().name))
            .await
    }
    async fn delete_account(
        &self,
        request: Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("DeleteAccount")?;
        self.set_policy(PolicyChange::DeleteAccount(request.into_inner().name))
            .await
    }
    async fn delete_partition(
        &self,
        request: Request<DeletePolicyRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("DeletePartition")?;
        self.set_policy(PolicyChange::DeletePartition(request.into_inner().name))
            .await
    }
    async fn create_reservation(
        &self,
        request: Request<Reservation>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("CreateReservation")?;
        let r = request.into_inner();
        let reservation = berth_scheduler::AdminReservation {
            name: r.name,
            hosts: r.hosts,
            start_ms: r.start_ms,
            end_ms: r.end_ms,
            users: r.users,
            accounts: r.accounts,
        };
        self.propose_admin(Command::CreateReservation {
            reservation,
            now_ms: 0,
        })
        .await
    }
    async fn delete_reservation(
        &self,
        request: Request<DeleteReservationRequest>,
    ) -> Result<Response<AdminResponse>, Status> {
        self.caller(&request)?.require_admin("DeleteReservation")?;
        let name = request.into_inner().name;
        self.propose_admin(Command::DeleteReservation { name, now_ms: 0 })
            .await
    }
    async fn list_reservations(
        &self,
        request: Request<ListReservationsRequest>,
    ) -> Result<Response<ListReservationsResponse>, Status> {
        self.caller(&request)?;
        if let Some(mut leader) = self.leader_client()? {
            return leader.list_reservations(request.into_inner()).await;
        }
        self.node.read_barrier().await?;
        let reservations = self.node.read(|s| {
            s.reservation_list()
                .into_iter()
                .map(|r| Reservation {
                    name: r.name,
                    hosts: r.hosts,
                    start_ms: r.start_ms,
                    end_ms: r.end_ms,
                    users: r.users,
                    accounts: r.accounts,
                })
                .collect()
        });
        Ok(Response::new(ListReservationsResponse { reservations }))
    }

    type BackupStateStream = crate::backup_service::BackupStream;

    async fn backup_state(
        &self,
        request: Request<BackupStateRequest>,
    ) -> Result<Response<Self::BackupStateStream>, Status> {
        self.caller(&request)?.require_admin("BackupState")?;
        let req = request.into_inner();
        if let Some(mut leader) = self.leader_client()? {
            let upstream = leader.backup_state(req).await?.into_inner();
            return Ok(Response::new(Box::pin(upstream)));
        }
        let stream = crate::backup_service::backup_state(&self.node, &self.state_machine).await?;
        Ok(Response::new(stream))
    }
}

/// The commit index as this node can know it: on the leader, the highest
/// index a majority of voters hold; elsewhere the applied index (a follower
/// applies only committed entries, so it is a lower bound).
pub(crate) fn commit_index(metrics: &openraft::RaftMetrics<u64, BasicNode>, voters: &[u64]) -> u64 {
    let applied = metrics.last_applied.map(|l| l.index).unwrap_or(0);
    let Some(replication) = metrics.replication.as_ref() else {
        return applied;
    };
    let own = metrics.last_log_index.unwrap_or(0);
    let mut matched: Vec<u64> = voters
        .iter()
        .map(|id| {
            if *id == metrics.id {
                own
            } else {
                replication
                    .get(id)
                    .and_then(|m| m.map(|l| l.index))
                    .unwrap_or(0)
            }
        })
        .collect();
    if matched.is_empty() {
        return applied;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched[matched.len() / 2].max(applied)
}

#[cfg(test)]
mod tests {
    use super::active_in;

    #[test]
    fn activity_windows_bound_each_side() {
        // Submitted at 100, ended at 200.
        assert!(active_in(100, 200, 0, 0));
        assert!(active_in(100, 200, 200, 0));
        assert!(!active_in(100, 200, 201, 0));
        assert!(active_in(100, 200, 0, 100));
        assert!(!active_in(100, 200, 0, 99));
        assert!(active_in(100, 200, 150, 150));
        // Not ended: active from its submit on.
        assert!(active_in(100, 0, 10_000, 0));
        assert!(!active_in(100, 0, 10_000, 50));
    }
}
