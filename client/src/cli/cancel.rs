//! `berth cancel` / `scancel`: cancel jobs one by one, reporting each
//! failure as scancel does and going on with the rest. Jobs are named by
//! id, or picked by user, partition, state and name (scancel's filters,
//! which also narrow a list of ids).

use super::ids::{parse_job_ref, JobRef};
use super::{output, GlobalArgs, Tool};
use anyhow::{bail, Result};
use berth_client::json::cancel_json;
use berth_client::queue::DEFAULT_PARTITION;
use berth_client::state::{job_state, parse_state_filter, StateFilter};
use berth_client::{servers_from, ClientError, Cluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::{CancelJobRequest, ControlJobRequest, Job, ListJobsRequest};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct CancelArgs {
    /// Jobs to cancel
    #[arg(value_name = "JOB_ID")]
    pub ids: Vec<String>,
    /// Only (or all of) this user's jobs
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// Only (or all) jobs in this partition
    #[arg(short = 'p', long = "partition", value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Only (or all) jobs in these states: PENDING, RUNNING, SUSPENDED
    #[arg(short = 't', long = "state", value_name = "STATES")]
    pub state: Option<String>,
    /// Only (or all) jobs with this name
    #[arg(short = 'n', long = "name", alias = "jobname", value_name = "NAME")]
    pub name: Option<String>,
    /// Send this signal (a name such as USR1 or SIGUSR1, or a number) to
    /// the running jobs instead of cancelling them; they go on running
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// With --signal: only the batch shell gets it, not every process of
    /// the job
    #[arg(short = 'b', long = "batch", requires = "signal")]
    pub batch: bool,
    /// Print each job's previous state as JSON
    #[arg(long)]
    pub json: bool,
}

impl CancelArgs {
    fn filtered(&self) -> bool {
        self.user.is_some()
            || self.partition.is_some()
            || self.state.is_some()
            || self.name.is_some()
    }
}

/// Whether a job passes scancel's filters.
pub fn matches(args: &CancelArgs, states: &StateFilter, job: &Job) -> bool {
    let spec = job.spec.clone().unwrap_or_default();
    let partition_ok = match &args.partition {
        None => true,
        Some(p) if spec.partitions.is_empty() => p == DEFAULT_PARTITION,
        Some(p) => spec.partitions.contains(p),
    };
    args.user.as_ref().is_none_or(|u| &spec.user == u)
        && args.name.as_ref().is_none_or(|n| &spec.name == n)
        && partition_ok
        && states.matches(job_state(job))
}

pub async fn run(tool: Tool, global: &GlobalArgs, args: CancelArgs) -> Result<ExitCode> {
    let signal = args
        .signal
        .as_deref()
        .map(|text| berth_scheduler::signal::parse_signal(text).map_err(anyhow::Error::msg))
        .transpose()?;
    if args.ids.is_empty() && !args.filtered() {
        bail!("No job identification provided");
    }
    let states = match &args.state {
        Some(s) => parse_state_filter(s)?,
        None => StateFilter::Default,
    };
    let refs = args
        .ids
        .iter()
        .flat_map(|id| id.split(',').map(str::to_string).collect::<Vec<_>>())
        .map(|id| parse_job_ref(&id))
        .collect::<Result<Vec<JobRef>>>()?;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    // (job id, only that task): an array's id cancels the whole array.
    let mut targets = Vec::with_capacity(refs.len());
    for r in refs {
        targets.push(match r {
            JobRef::Job(id) => (id, false),
            JobRef::Task { array, task } => (task_job_id(&mut cluster, array, task).await?, true),
        });
    }
    let only_task: std::collections::BTreeMap<u64, bool> = targets.iter().copied().collect();
    let ids: Vec<u64> = targets.iter().map(|(id, _)| *id).collect();
    let ids = if args.filtered() {
        let listed = cluster
            .list_jobs(ListJobsRequest {
                states: Vec::new(),
                user: args.user.clone().unwrap_or_default(),
                stale: false,
                limit: 0,
                ..Default::default()
            })
            .await?;
        listed
            .jobs
            .iter()
            .filter(|job| ids.is_empty() || ids.contains(&job.job_id))
            .filter(|job| matches(&args, &states, job))
            .map(|job| job.job_id)
            .collect()
    } else {
        ids
    };
    if let Some(signal) = signal {
        let ids = with_running_tasks(&mut cluster, ids, &only_task).await?;
        return send_signal(tool, &mut cluster, &ids, signal, args.batch).await;
    }
    let mut answers = Vec::new();
    let mut failed = false;
    for id in ids {
        let request = CancelJobRequest {
            job_id: id,
            only_task: only_task.get(&id).copied().unwrap_or(false),
        };
        match cluster.cancel(request).await {
            Ok(response) => answers.push(cancel_json(id, response.previous_state)),
            Err(err @ ClientError::Rpc { .. }) => {
                eprintln!(
                    "{}: error: Kill job error on job id {id}: {}",
                    tool.prog(),
                    output::one_line(&err.to_string())
                );
                failed = true;
            }
            Err(err) => return Err(err.into()),
        }
    }
    if args.json {
        output::emit_json(&serde_json::Value::Array(answers))?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// For `--signal`: an array's id (not `12_3`) stands for its running
/// tasks, as scancel signals every task of an array.
async fn with_running_tasks(
    cluster: &mut Cluster,
    ids: Vec<u64>,
    only_task: &std::collections::BTreeMap<u64, bool>,
) -> Result<Vec<u64>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut running: Option<Vec<Job>> = None;
    for id in ids {
        let whole_array = !only_task.get(&id).copied().unwrap_or(false)
            && cluster
                .get_job(id)
                .await
                .ok()
                .and_then(|j| j.spec)
                .is_some_and(|s| s.array_job_id == id);
        if !whole_array {
            out.push(id);
            continue;
        }
        if running.is_none() {
            let listed = cluster
                .list_jobs(ListJobsRequest {
                    states: vec![berth_proto::api::JobState::Running as i32],
                    ..Default::default()
                })
                .await?;
            running = Some(listed.jobs);
        }
        let tasks: Vec<u64> = running
            .iter()
            .flatten()
            .filter(|j| j.spec.as_ref().is_some_and(|s| s.array_job_id == id))
            .map(|j| j.job_id)
            .collect();
        if tasks.is_empty() {
            // Signalling the array's id itself gets the cluster's answer
            // (its first task is not running).
            out.push(id);
        }
        out.extend(tasks);
    }
    Ok(out)
}

/// `scancel --signal`: each job gets the signal and goes on running. A
/// job that cannot be signalled (not running, not yours) is reported as
/// scancel does, and the rest are still signalled.
async fn send_signal(
    tool: Tool,
    cluster: &mut Cluster,
    ids: &[u64],
    signal: u32,
    batch_only: bool,
) -> Result<ExitCode> {
    let mut failed = false;
    for &job_id in ids {
        let request = ControlJobRequest {
            job_id,
            action: Action::Signal as i32,
            admin: false,
            signal,
            batch_only,
        };
        match cluster.control_job(request).await {
            Ok(_) => {}
            Err(err @ ClientError::Rpc { .. }) => {
                eprintln!(
                    "{}: error: Kill job error on job id {job_id}: {}",
                    tool.prog(),
                    output::one_line(&err.to_string())
                );
                failed = true;
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The job id of task `task` of array `array`: tasks have consecutive ids
/// from the array's id, in ascending index order.
pub(super) async fn task_job_id(cluster: &mut Cluster, array: u64, task: u32) -> Result<u64> {
    let first = cluster.get_job(array).await?;
    let spec = first.spec.unwrap_or_default();
    if spec.array_job_id != array {
        bail!("invalid job id \"{array}_{task}\": job {array} is not a job array");
    }
    let indexes = berth_scheduler::array::parse(&spec.array)?.indexes;
    let Some(position) = indexes.iter().position(|&i| i == task) else {
        bail!("invalid job id \"{array}_{task}\": array {array} has no task {task}");
    };
    Ok(array + position as u64)
}
