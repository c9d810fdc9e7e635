//! `berth queue` / `squeue`: the job table.

use super::{ids::parse_job_ids, output, GlobalArgs};
use anyhow::{bail, Result};
use berth_client::json::jobs_json;
use berth_client::queue::{format_squeue, format_squeue_rows};
use berth_client::state::{job_state, parse_state_filter, StateFilter};
use berth_client::user::current_user;
use berth_client::{now_ms, servers_from, Cluster};
use berth_proto::api::{Job, ListJobsRequest};
use clap::{ArgAction, Args};
use std::process::ExitCode;

/// Options of `berth queue` / `squeue`. `-h` is squeue's --noheader, so
/// help is `--help` only.
#[derive(Args, Debug, Clone, Default)]
#[command(disable_help_flag = true)]
pub struct QueueArgs {
    /// Only these users' jobs, comma-separated
    #[arg(short = 'u', long = "user", value_name = "USER[,...]")]
    pub user: Option<String>,
    /// Only your own jobs
    #[arg(long)]
    pub me: bool,
    /// Only jobs in these states (names or codes, comma-separated), or all
    /// [default: PENDING,RUNNING]
    #[arg(short = 't', long = "states", value_name = "STATES")]
    pub states: Option<String>,
    /// Only these jobs, comma-separated; shown in any state unless -t is given
    #[arg(short = 'j', long = "jobs", value_name = "ID[,...]")]
    pub jobs: Option<String>,
    /// Leave out the header line
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Print the jobs as JSON
    #[arg(long)]
    pub json: bool,
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
}

pub async fn run(global: &GlobalArgs, args: QueueArgs) -> Result<ExitCode> {
    let filter = match &args.states {
        Some(states) => parse_state_filter(states)?,
        None => StateFilter::Default,
    };
    let ids = args.jobs.as_deref().map(parse_job_ids).transpose()?;
    let mut users: Vec<String> = args
        .user
        .as_deref()
        .map(|u| {
            u.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if args.me {
        users.push(current_user());
    }

    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let (mut jobs, truncated) = match (&filter, ids) {
        // Only states Berth never has (`-t CG`): nothing can match.
        (StateFilter::Only(states), _) if states.is_empty() => (Vec::new(), false),
        (_, Some(ids)) => (fetch_ids(&mut cluster, &ids, &filter).await?, false),
        (_, None) => {
            let states = match &filter {
                StateFilter::Default => Vec::new(),
                StateFilter::Only(states) => states.iter().map(|s| *s as i32).collect(),
            };
            let request = ListJobsRequest {
                states,
                // One user is filtered by the server; several, here.
                user: if users.len() == 1 {
                    users[0].clone()
                } else {
                    String::new()
                },
                stale: false,
                limit: 0,
            };
            let response = cluster.list_jobs(request).await?;
            (response.jobs, response.truncated)
        }
    };
    if !users.is_empty() {
        jobs.retain(|job| job.spec.as_ref().is_some_and(|s| users.contains(&s.user)));
    }
    if truncated {
        eprintln!(
            "warning: the server returned only the first {} matching jobs",
            jobs.len()
        );
    }

    if args.json {
        output::emit_json(&jobs_json(&jobs, truncated))?;
    } else if args.noheader {
        output::emit(&format_squeue_rows(&jobs, now_ms()))?;
    } else {
        output::emit(&format_squeue(&jobs, now_ms()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `-j`: each job by id, in the order given. Like squeue, an unknown id is
/// skipped, and it is an error only when none of them exists. Without -t a
/// job is shown in whatever state it is in.
async fn fetch_ids(cluster: &mut Cluster, ids: &[u64], filter: &StateFilter) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for &id in ids {
        match cluster.get_job(id).await {
            Ok(job) => jobs.push(job),
            Err(err) if err.code() == Some(tonic::Code::NotFound) => {}
            Err(err) => return Err(err.into()),
        }
    }
    if jobs.is_empty() {
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        bail!("invalid job id specified: {}", list.join(","));
    }
    if let StateFilter::Only(_) = filter {
        jobs.retain(|job| filter.matches(job_state(job)));
    }
    Ok(jobs)
}
