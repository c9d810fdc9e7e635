//! Calls that survive a leader failover: on UNAVAILABLE (or a node that
//! does not answer) the call moves on to the next server, and after a full
//! round over the list it waits a little and goes round again, a bounded
//! number of times.
//!
//! Only UNAVAILABLE is retried: it is what a node says (and what tonic
//! reports) when the call did not reach a working leader. Any other status
//! is the cluster's answer and is returned as it is. Submits are safe to
//! send again because they carry one `request_id` for all attempts.

use crate::connect::{connect_one, ApiClient, ConnectFailure};
use crate::error::ClientError;
use berth_proto::api::{
    BackupChunk, BackupStateRequest, CancelJobRequest, CancelJobResponse, ClusterStatusRequest,
    ClusterStatusResponse, ControlJobRequest, ControlJobResponse, ExplainJobRequest,
    ExplainJobResponse, GetJobRequest, GetPrioritiesRequest, GetPrioritiesResponse,
    GetStepAccessRequest, Job, JobEvent, ListJobsRequest, ListJobsResponse,
    ReleaseAllocationRequest, ReleaseAllocationResponse, StepAccess, SubmitJobRequest,
    SubmitJobResponse, UpdateJobRequest, UpdateJobResponse, WatchJobEventsRequest,
};
use std::future::Future;
use std::time::Duration;

/// How hard [`Cluster::call`] tries before giving up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Passes over the whole server list (at least 1).
    pub rounds: u32,
    /// Pause before the second round; doubled before each later one.
    pub backoff_ms: u64,
    /// Ceiling for the doubled pause.
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    /// Three rounds, pausing 200 ms then 400 ms: enough to ride out a
    /// leader election on a LAN, and a dead cluster still fails within
    /// about a second plus connect timeouts.
    fn default() -> Self {
        RetryPolicy {
            rounds: 3,
            backoff_ms: 200,
            max_backoff_ms: 2_000,
        }
    }
}

/// A cluster reached through a list of servers, remembering which one
/// answered last so later calls go straight to it.
#[derive(Debug, Clone)]
pub struct Cluster {
    servers: Vec<String>,
    policy: RetryPolicy,
    current: Option<(usize, ApiClient)>,
}

impl Cluster {
    /// A cluster behind `servers` ("host:port", tried in order). Nothing is
    /// connected until the first call.
    pub fn new(servers: Vec<String>) -> Self {
        Cluster {
            servers,
            policy: RetryPolicy::default(),
            current: None,
        }
    }

    /// The same, retrying as `policy` says.
    pub fn with_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The server list.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The server the last successful call went to, if any.
    pub fn current_server(&self) -> Option<&str> {
        let (index, _) = self.current.as_ref()?;
        self.servers.get(*index).map(String::as_str)
    }

    /// Runs one unary call, moving to the next server when the current one
    /// cannot be reached or answers UNAVAILABLE. `call` gets a client (a
    /// cheap clone of the channel) and is invoked once per attempt, so it
    /// must rebuild its request each time (clone it in).
    ///
    /// Errors: the first status other than UNAVAILABLE, as
    /// [`ClientError::Rpc`]; when every attempt failed, the last
    /// UNAVAILABLE answer, or [`ClientError::NoServer`] if no server ever
    /// answered.
    pub async fn call<T, F, Fut>(&mut self, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(ApiClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let count = self.servers.len();
        let start = self.current.as_ref().map_or(0, |(index, _)| *index);
        let mut tried: Vec<String> = Vec::new();
        let mut last_unavailable: Option<ClientError> = None;
        let mut backoff_ms = self.policy.backoff_ms;
        for round in 0..self.policy.rounds.max(1) {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = backoff_ms.saturating_mul(2).min(self.policy.max_backoff_ms);
            }
            for step in 0..count {
                let index = (start + step) % count;
                let server = self.servers[index].clone();
                let client = match self.client_for(index).await {
                    Ok(client) => client,
                    Err(ConnectFailure::Invalid(err)) => return Err(err),
                    Err(ConnectFailure::Unreachable) => {
                        if !tried.contains(&server) {
                            tried.push(server);
                        }
                        continue;
                    }
                };
                match call(client).await {
                    Ok(response) => return Ok(response.into_inner()),
                    Err(status) if status.code() == tonic::Code::Unavailable => {
                        // Drop the channel: the next call should not
                        // start with a node that just failed.
                        self.current = None;
                        last_unavailable = Some(ClientError::Rpc {
                            server,
                            status: Box::new(status),
                        });
                    }
                    Err(status) => {
                        return Err(ClientError::Rpc {
                            server,
                            status: Box::new(status),
                        })
                    }
                }
            }
        }
        Err(last_unavailable.unwrap_or(ClientError::NoServer { tried }))
    }

    /// The connected client for server `index`, connecting if needed.
    async fn client_for(&mut self, index: usize) -> Result<ApiClient, ConnectFailure> {
        if let Some((current, client)) = &self.current {
            if *current == index {
                return Ok(client.clone());
            }
        }
        let client = connect_one(&self.servers[index]).await?;
        self.current = Some((index, client.clone()));
        Ok(client)
    }

    /// Submits a job. The same request (and so the same `request_id`) is
    /// sent on every attempt, so a retry after failover cannot make a
    /// second job; the answer then has `duplicate` set.
    pub async fn submit_job(
        &mut self,
        request: SubmitJobRequest,
    ) -> Result<SubmitJobResponse, ClientError> {
        self.call(|mut c| {
            let request = request.clone();
            async move { c.submit_job(request).await }
        })
        .await
    }

    /// Cancels a job; returns the state it was in.
    /// Cancels a job; an array's id cancels every task of the array.
    pub async fn cancel_job(&mut self, job_id: u64) -> Result<CancelJobResponse, ClientError> {
        self.cancel(CancelJobRequest {
            job_id,
            only_task: false,
        })
        .await
    }

    /// Cancels as asked (`only_task`: just the task an array's id names).
    pub async fn cancel(
        &mut self,
        request: CancelJobRequest,
    ) -> Result<CancelJobResponse, ClientError> {
        self.call(|mut c| async move { c.cancel_job(request).await })
            .await
    }

    /// Hold, release or requeue a job.
    pub async fn control_job(
        &mut self,
        request: ControlJobRequest,
    ) -> Result<ControlJobResponse, ClientError> {
        self.call(|mut c| async move { c.control_job(request).await })
            .await
    }

    /// Change a submitted job (`scontrol update`).
    pub async fn update_job(
        &mut self,
        request: UpdateJobRequest,
    ) -> Result<UpdateJobResponse, ClientError> {
        // A retry sends the same values again, which changes nothing more.
        self.call(|mut c| {
            let request = request.clone();
            async move { c.update_job(request).await }
        })
        .await
    }

    /// One job, read through the leader (not stale).
    pub async fn get_job(&mut self, job_id: u64) -> Result<Job, ClientError> {
        self.call(|mut c| async move {
            c.get_job(GetJobRequest {
                job_id,
                stale: false,
            })
            .await
        })
        .await
    }

    /// What starting srun tasks on a running job's hosts takes.
    pub async fn get_step_access(&mut self, job_id: u64) -> Result<StepAccess, ClientError> {
        self.call(|mut c| async move { c.get_step_access(GetStepAccessRequest { job_id }).await })
            .await
    }

    /// Ends a running interactive allocation with `exit_code`.
    pub async fn release_allocation(
        &mut self,
        job_id: u64,
        exit_code: i32,
    ) -> Result<ReleaseAllocationResponse, ClientError> {
        self.call(|mut c| async move {
            c.release_allocation(ReleaseAllocationRequest { job_id, exit_code })
                .await
        })
        .await
    }

    /// Jobs matching `request`.
    pub async fn list_jobs(
        &mut self,
        request: ListJobsRequest,
    ) -> Result<ListJobsResponse, ClientError> {
        self.call(|mut c| {
            let request = request.clone();
            async move { c.list_jobs(request).await }
        })
        .await
    }

    /// Pending jobs' priority parts at the leader's last pass (sprio).
    pub async fn get_priorities(
        &mut self,
        request: GetPrioritiesRequest,
    ) -> Result<GetPrioritiesResponse, ClientError> {
        self.call(|mut c| {
            let request = request.clone();
            async move { c.get_priorities(request).await }
        })
        .await
    }

    /// Why a job is where it is.
    pub async fn explain_job(&mut self, job_id: u64) -> Result<ExplainJobResponse, ClientError> {
        self.call(|mut c| async move { c.explain_job(ExplainJobRequest { job_id }).await })
            .await
    }

    /// Starts a backup stream (`BackupState`). Only the start is retried
    /// across servers; a stream that breaks off must be asked for again.
    pub async fn backup_state(&mut self) -> Result<tonic::Streaming<BackupChunk>, ClientError> {
        self.call(|mut c| async move { c.backup_state(BackupStateRequest {}).await })
            .await
    }

    /// A job's events (`WatchJobEvents`): what exists, then, with
    /// `follow`, each new one until the job ends.
    pub async fn job_events(
        &mut self,
        job_id: u64,
        follow: bool,
    ) -> Result<tonic::Streaming<JobEvent>, ClientError> {
        self.call(|mut c| async move {
            c.watch_job_events(WatchJobEventsRequest {
                job_id,
                after_seq: 0,
                no_follow: !follow,
            })
            .await
        })
        .await
    }

    /// The answering node's view of the cluster.
    pub async fn cluster_status(&mut self) -> Result<ClusterStatusResponse, ClientError> {
        self.call(|mut c| async move { c.cluster_status(ClusterStatusRequest {}).await })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_dead_cluster_fails_fast_naming_each_server_once() {
        let mut cluster = Cluster::new(vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()]);
        let started = Instant::now();
        let err = cluster.cluster_status().await.expect_err("nobody listens");
        assert_eq!(
            err.to_string(),
            "no Berth server answered (tried 127.0.0.1:1, 127.0.0.1:2)"
        );
        // Two pauses (200 + 400 ms) and refused connects.
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(cluster.current_server(), None);
    }

    #[tokio::test]
    async fn an_empty_list_is_no_server() {
        let mut cluster = Cluster::new(vec![]).with_policy(RetryPolicy {
            rounds: 1,
            ..RetryPolicy::default()
        });
        let err = cluster.get_job(1).await.expect_err("no servers");
        assert!(matches!(err, ClientError::NoServer { tried } if tried.is_empty()));
    }

    #[tokio::test]
    async fn a_bad_address_is_reported_not_skipped() {
        let mut cluster = Cluster::new(vec!["nonsense".into(), "127.0.0.1:1".into()]);
        let err = cluster.get_job(1).await.expect_err("invalid");
        assert!(matches!(err, ClientError::InvalidServer { .. }), "{err}");
    }
}
