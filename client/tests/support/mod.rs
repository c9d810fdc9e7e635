//! A fake Berth node for tests that must not need a real cluster: either
//! it answers UNAVAILABLE to everything (a follower that lost its leader),
//! or it keeps jobs in memory and answers the calls the CLI makes.

// Not every test file uses every helper; and the Status-returning
// signatures are fixed by the generated server trait.
#![allow(dead_code, clippy::result_large_err)]

use berth_proto::api::berth_api_server::{BerthApi, BerthApiServer};
use berth_proto::api::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

type Reply<T> = Result<Response<T>, Status>;

/// One call a node saw: its name and, for submits, the request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: &'static str,
    pub request_id: String,
}

#[derive(Default)]
pub struct Jobs {
    pub jobs: BTreeMap<u64, Job>,
    pub by_request: HashMap<String, u64>,
    /// (job id, signal, batch only) of every ControlJob SIGNAL accepted.
    pub signals: Vec<(u64, u32, bool)>,
    /// Every UpdateJob request accepted.
    pub updates: Vec<UpdateJobRequest>,
}

/// Hosts, partitions and policy objects the fake answers with and keeps.
#[derive(Default)]
pub struct Cluster {
    pub hosts: Vec<Host>,
    pub partitions: Vec<Partition>,
    pub qos: BTreeMap<String, Qos>,
    pub accounts: BTreeMap<String, Account>,
    pub users: BTreeMap<String, User>,
    /// What GetPriorities answers with (a test sets it), by job id.
    pub priorities: BTreeMap<u64, PriorityFactors>,
}

#[derive(Clone)]
pub struct FakeNode {
    pub available: bool,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub jobs: Arc<Mutex<Jobs>>,
    pub cluster: Arc<Mutex<Cluster>>,
}

impl FakeNode {
    pub fn new(available: bool) -> Self {
        FakeNode {
            available,
            seen: Arc::default(),
            jobs: Arc::default(),
            cluster: Arc::default(),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    /// Serves this node on a free loopback port; returns "127.0.0.1:port".
    pub async fn start(&self) -> String {
        let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let addr = incoming.local_addr().expect("local addr").to_string();
        let service = BerthApiServer::new(self.clone());
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        addr
    }

    fn enter(&self, method: &'static str, request_id: &str) -> Result<(), Status> {
        self.seen.lock().expect("lock").push(Seen {
            method,
            request_id: request_id.to_string(),
        });
        if self.available {
            Ok(())
        } else {
            Err(Status::unavailable("no leader known"))
        }
    }

    fn job(&self, job_id: u64) -> Result<Job, Status> {
        let jobs = self.jobs.lock().expect("lock");
        jobs.jobs
            .get(&job_id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("job {job_id} not found")))
    }
}

fn unimplemented<T>() -> Reply<T> {
    Err(Status::unimplemented("not in the fake"))
}

#[tonic::async_trait]
impl BerthApi for FakeNode {
    async fn submit_job(&self, request: Request<SubmitJobRequest>) -> Reply<SubmitJobResponse> {
        let request = request.into_inner();
        self.enter("submit_job", &request.request_id)?;
        let mut jobs = self.jobs.lock().expect("lock");
        if let Some(&job_id) = jobs.by_request.get(&request.request_id) {
            return Ok(Response::new(SubmitJobResponse {
                job_id,
                duplicate: true,
            }));
        }
        let job_id = jobs.jobs.len() as u64 + 1;
        jobs.by_request.insert(request.request_id, job_id);
        jobs.jobs.insert(
            job_id,
            Job {
                job_id,
                spec: request.spec,
                state: JobState::Pending as i32,
                reason: "Priority".into(),
                reason_text: "higher priority jobs wait".into(),
                submit_ms: 1_700_000_000_000,
                ..Default::default()
            },
        );
        Ok(Response::new(SubmitJobResponse {
            job_id,
            duplicate: false,
        }))
    }

    async fn cancel_job(&self, request: Request<CancelJobRequest>) -> Reply<CancelJobResponse> {
        self.enter("cancel_job", "")?;
        let job_id = request.into_inner().job_id;
        let mut jobs = self.jobs.lock().expect("lock");
        let job = jobs
            .jobs
            .get_mut(&job_id)
            .ok_or_else(|| Status::not_found(format!("job {job_id} not found")))?;
        let previous_state = job.state;
        job.state = JobState::Cancelled as i32;
        Ok(Response::new(CancelJobResponse { previous_state }))
    }

    async fn get_job(&self, request: Request<GetJobRequest>) -> Reply<Job> {
        self.enter("get_job", "")?;
        self.job(request.into_inner().job_id).map(Response::new)
    }

    async fn get_step_access(&self, _: Request<GetStepAccessRequest>) -> Reply<StepAccess> {
        unimplemented()
    }

    async fn release_allocation(
        &self,
        _: Request<ReleaseAllocationRequest>,
    ) -> Reply<ReleaseAllocationResponse> {
        unimplemented()
    }

    async fn list_jobs(&self, request: Request<ListJobsRequest>) -> Reply<ListJobsResponse> {
        self.enter("list_jobs", "")?;
        let request = request.into_inner();
        let states = if request.states.is_empty() {
            vec![JobState::Pending as i32, JobState::Running as i32]
        } else {
            request.states
        };
        let jobs = self.jobs.lock().expect("lock");
        let jobs = jobs
            .jobs
            .values()
            .filter(|j| states.contains(&j.state))
            .filter(|j| {
                request.user.is_empty() || j.spec.as_ref().is_some_and(|s| s.user == request.user)
            })
            .cloned()
            .collect();
        Ok(Response::new(ListJobsResponse {
            jobs,
            truncated: false,
        }))
    }

    async fn get_priorities(
        &self,
        request: Request<GetPrioritiesRequest>,
    ) -> Reply<GetPrioritiesResponse> {
        self.enter("get_priorities", "")?;
        let request = request.into_inner();
        let cluster = self.cluster.lock().expect("lock");
        let jobs = cluster
            .priorities
            .values()
            .filter(|p| request.job_ids.is_empty() || request.job_ids.contains(&p.job_id))
            .filter(|p| request.user.is_empty() || p.user == request.user)
            .cloned()
            .collect();
        Ok(Response::new(GetPrioritiesResponse { jobs }))
    }

    async fn explain_job(&self, request: Request<ExplainJobRequest>) -> Reply<ExplainJobResponse> {
        self.enter("explain_job", "")?;
        let job = self.job(request.into_inner().job_id)?;
        Ok(Response::new(ExplainJobResponse {
            job_id: job.job_id,
            state: job.state,
            reason: job.reason,
            reason_text: job.reason_text,
            hosts: vec![HostRejection {
                host: "h1".into(),
                lacks: "cpus: needs 8, 2 free".into(),
            }],
        }))
    }

    type WatchJobEventsStream = tonic::codegen::tokio_stream::Empty<Result<JobEvent, Status>>;

    async fn watch_job_events(
        &self,
        _request: Request<WatchJobEventsRequest>,
    ) -> Reply<Self::WatchJobEventsStream> {
        unimplemented()
    }

    async fn cluster_status(
        &self,
        _request: Request<ClusterStatusRequest>,
    ) -> Reply<ClusterStatusResponse> {
        self.enter("cluster_status", "")?;
        Ok(Response::new(ClusterStatusResponse {
            node_id: 2,
            leader_id: 2,
            leader_addr: "fake:2".into(),
            term: 5,
            role: "Leader".into(),
            commit_index: 10,
            applied_index: 10,
            next_job_id: self.jobs.lock().expect("lock").jobs.len() as u64 + 1,
            members: vec![Member {
                node_id: 2,
                addr: "fake:2".into(),
                voter: true,
                matched_index: 10,
            }],
        }))
    }

    async fn add_learner(&self, _r: Request<AddLearnerRequest>) -> Reply<MembershipResponse> {
        unimplemented()
    }
    async fn change_membership(
        &self,
        _r: Request<ChangeMembershipRequest>,
    ) -> Reply<MembershipResponse> {
        unimplemented()
    }
    async fn list_hosts(&self, _r: Request<ListHostsRequest>) -> Reply<ListHostsResponse> {
        self.enter("list_hosts", "")?;
        let hosts = self.cluster.lock().expect("lock").hosts.clone();
        Ok(Response::new(ListHostsResponse { hosts }))
    }
    async fn upsert_qos(&self, r: Request<Qos>) -> Reply<AdminResponse> {
        self.enter("upsert_qos", "")?;
        let q = r.into_inner();
        self.cluster
            .lock()
            .expect("lock")
            .qos
            .insert(q.name.clone(), q);
        Ok(Response::new(AdminResponse { log_index: 1 }))
    }
    async fn list_qos(&self, _r: Request<ListQosRequest>) -> Reply<ListQosResponse> {
        self.enter("list_qos", "")?;
        let qos = self
            .cluster
            .lock()
            .expect("lock")
            .qos
            .values()
            .cloned()
            .collect();
        Ok(Response::new(ListQosResponse { qos }))
    }
    async fn upsert_account(&self, r: Request<Account>) -> Reply<AdminResponse> {
        self.enter("upsert_account", "")?;
        let a = r.into_inner();
        self.cluster
            .lock()
            .expect("lock")
            .accounts
            .insert(a.name.clone(), a);
        Ok(Response::new(AdminResponse { log_index: 1 }))
    }
    async fn list_accounts(&self, _r: Request<ListAccountsRequest>) -> Reply<ListAccountsResponse> {
        self.enter("list_accounts", "")?;
        let accounts = self
            .cluster
            .lock()
            .expect("lock")
            .accounts
            .values()
            .cloned()
            .collect();
        Ok(Response::new(ListAccountsResponse { accounts }))
    }
    async fn upsert_partition(&self, _r: Request<Partition>) -> Reply<AdminResponse> {
        unimplemented()
    }
    async fn list_partitions(
        &self,
        _r: Request<ListPartitionsRequest>,
    ) -> Reply<ListPartitionsResponse> {
        self.enter("list_partitions", "")?;
        let partitions = self.cluster.lock().expect("lock").partitions.clone();
        Ok(Response::new(ListPartitionsResponse { partitions }))
    }
    async fn control_job(&self, r: Request<ControlJobRequest>) -> Reply<ControlJobResponse> {
        self.enter("control_job", "")?;
        let r = r.into_inner();
        let mut jobs = self.jobs.lock().expect("lock");
        let job = jobs
            .jobs
            .get_mut(&r.job_id)
            .ok_or_else(|| Status::not_found(format!("job {} not found", r.job_id)))?;
        use control_job_request::Action;
        match Action::try_from(r.action) {
            Ok(Action::Hold) => job.reason = "JobHeldUser".into(),
            Ok(Action::HoldAdmin) => job.reason = "JobHeldAdmin".into(),
            Ok(Action::Release) => job.reason = "Priority".into(),
            Ok(Action::Requeue) | Ok(Action::RequeueHold) => {
                job.state = JobState::Pending as i32;
            }
            Ok(Action::Signal) => {
                if job.state != JobState::Running as i32 {
                    return Err(Status::failed_precondition(format!(
                        "job {} is not running: only a running job can be signalled",
                        r.job_id
                    )));
                }
                jobs.signals.push((r.job_id, r.signal, r.batch_only));
            }
            _ => return Err(Status::invalid_argument("no action")),
        }
        Ok(Response::new(ControlJobResponse {}))
    }
    async fn update_job(&self, r: Request<UpdateJobRequest>) -> Reply<UpdateJobResponse> {
        self.enter("update_job", "")?;
        let r = r.into_inner();
        let mut jobs = self.jobs.lock().expect("lock");
        let job = jobs
            .jobs
            .get_mut(&r.job_id)
            .ok_or_else(|| Status::not_found(format!("job {} does not exist", r.job_id)))?;
        if job.state != JobState::Pending as i32 {
            return Err(Status::failed_precondition(format!(
                "job {} is no longer pending execution: only TimeLimit can change while it runs",
                r.job_id
            )));
        }
        let mut changes = Vec::new();
        if let (Some(spec), Some(t)) = (job.spec.as_mut(), r.time_limit_s) {
            changes.push(format!("TimeLimit {} -> {t}", spec.time_limit_s));
            spec.time_limit_s = t;
        }
        jobs.updates.push(r);
        Ok(Response::new(UpdateJobResponse { changes }))
    }
    async fn upsert_user(&self, r: Request<User>) -> Reply<AdminResponse> {
        self.enter("upsert_user", "")?;
        let u = r.into_inner();
        self.cluster
            .lock()
            .expect("lock")
            .users
            .insert(u.name.clone(), u);
        Ok(Response::new(AdminResponse { log_index: 1 }))
    }
    async fn list_users(&self, _r: Request<ListUsersRequest>) -> Reply<ListUsersResponse> {
        self.enter("list_users", "")?;
        let users = self
            .cluster
            .lock()
            .expect("lock")
            .users
            .values()
            .cloned()
            .collect();
        Ok(Response::new(ListUsersResponse { users }))
    }
    async fn delete_qos(&self, r: Request<DeletePolicyRequest>) -> Reply<AdminResponse> {
        self.enter("delete_qos", "")?;
        let name = r.into_inner().name;
        self.cluster.lock().expect("lock").qos.remove(&name);
        Ok(Response::new(AdminResponse { log_index: 1 }))
    }
    async fn delete_account(&self, r: Request<DeletePolicyRequest>) -> Reply<AdminResponse> {
        self.enter("delete_account", "")?;
        let name = r.into_inner().name;
        self.cluster.lock().expect("lock").accounts.remove(&name);
        Ok(Response::new(AdminResponse { log_index: 1 }))
    }
    async fn delete_partition(&self, _r: Request<DeletePolicyRequest>) -> Reply<AdminResponse> {
        unimplemented()
    }
    async fn create_reservation(&self, _r: Request<Reservation>) -> Reply<AdminResponse> {
        unimplemented()
    }
    async fn delete_reservation(
        &self,
        _r: Request<DeleteReservationRequest>,
    ) -> Reply<AdminResponse> {
        unimplemented()
    }
    async fn list_reservations(
        &self,
        _r: Request<ListReservationsRequest>,
    ) -> Reply<ListReservationsResponse> {
        unimplemented()
    }

    type BackupStateStream = tonic::codegen::tokio_stream::Empty<Result<BackupChunk, Status>>;

    async fn backup_state(
        &self,
        _r: Request<BackupStateRequest>,
    ) -> Reply<Self::BackupStateStream> {
        unimplemented()
    }
}
