//! `sacct`: finished and live jobs with Slurm's accounting columns. Jobs
//! come from ListJobs in every state, narrowed by the server to one user
//! and the `-S`/`-E` window, then filtered here by users, partition,
//! account and id; the server returns at most LIST_JOBS_MAX jobs, and a
//! cut list is reported.

use super::{output, GlobalArgs};
use anyhow::Result;
use berth_client::json::jobs_json;
use berth_client::queue::DEFAULT_PARTITION;
use berth_client::sacct::{
    format_sacct, in_window, parse_fields, parse_sacct_job_id, parse_sacct_time, Layout, Options,
    DEFAULT_FIELDS,
};
use berth_client::state::{job_state, parse_state_filter, StateFilter, ALL_STATES};
use berth_client::user::current_user;
use berth_client::{now_ms, servers_from, Cluster};
use berth_proto::api::ListJobsRequest;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct SacctArgs {
    /// Only these jobs: ids, comma-separated, repeatable
    #[arg(short = 'j', long = "jobs", value_name = "JOB[,...]")]
    pub jobs: Vec<String>,
    /// Only these users' jobs [default: your own, unless -j or -a]
    #[arg(short = 'u', long = "user", alias = "uid", value_name = "USER[,...]")]
    pub user: Option<String>,
    /// Every user's jobs
    #[arg(short = 'a', long = "allusers")]
    pub allusers: bool,
    /// Only jobs charged to these accounts
    #[arg(short = 'A', long = "accounts", value_name = "ACCOUNT[,...]")]
    pub accounts: Option<String>,
    /// Only jobs in these partitions
    #[arg(short = 'r', long = "partition", value_name = "PARTITION[,...]")]
    pub partition: Option<String>,
    /// Only jobs in these states (codes or names, comma-separated)
    #[arg(short = 's', long = "state", value_name = "STATES")]
    pub state: Option<String>,
    /// Jobs active since this time (UTC) [default: midnight today, without -j]
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    pub starttime: Option<String>,
    /// Jobs active before this time (UTC) [default: now]
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    pub endtime: Option<String>,
    /// Jobs only, no step lines
    #[arg(short = 'X', long = "allocations")]
    pub allocations: bool,
    /// Fields separated by '|', one after every field
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// Fields separated by '|'
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    /// Leave out the header
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// Columns: Name[%WIDTH],... (JobID JobIDRaw JobName Partition Account
    /// AllocCPUS ReqCPUS State ExitCode User Submit Start End Elapsed
    /// ElapsedRaw Timelimit NNodes NodeList ReqMem QOS Priority WorkDir
    /// Comment Reason Borrowed)
    #[arg(short = 'o', long = "format", value_name = "FIELDS")]
    pub format: Option<String>,
    /// Print the jobs as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: SacctArgs) -> Result<ExitCode> {
    let now = now_ms();
    let columns = parse_fields(args.format.as_deref().unwrap_or(DEFAULT_FIELDS))?;
    let mut ids = Vec::new();
    for entry in &args.jobs {
        for id in entry.split(',').filter(|s| !s.trim().is_empty()) {
            ids.push(parse_sacct_job_id(id)?);
        }
    }
    let states = match &args.state {
        Some(s) => parse_state_filter(s)?,
        None => StateFilter::Only(ALL_STATES.to_vec()),
    };
    let start_ms = match &args.starttime {
        Some(t) => parse_sacct_time(t, now)?,
        None if ids.is_empty() => now - now % 86_400_000,
        None => 0,
    };
    let end_ms = match &args.endtime {
        Some(t) => parse_sacct_time(t, now)?,
        None => u64::MAX,
    };
    let mut users = berth_client::comma_list(args.user.as_deref());
    if users.is_empty() && !args.allusers && ids.is_empty() {
        users.push(current_user());
    }
    let accounts = berth_client::comma_list(args.accounts.as_deref());
    let partitions = berth_client::comma_list(args.partition.as_deref());
    let layout = if args.parsable2 {
        Layout::Parsable2
    } else if args.parsable {
        Layout::Parsable
    } else {
        Layout::Columns
    };

    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let response = cluster
        .list_jobs(ListJobsRequest {
            states: ALL_STATES.iter().map(|s| *s as i32).collect(),
            user: if users.len() == 1 {
                users[0].clone()
            } else {
                String::new()
            },
            stale: false,
            limit: 0,
            // The server narrows by the window too; the filter below keeps
            // the answer right with a server that does not.
            active_since_ms: start_ms,
            active_until_ms: if end_ms == u64::MAX { 0 } else { end_ms },
        })
        .await?;
    if response.truncated {
        eprintln!(
            "sacct: warning: the server returned only the first {} jobs; narrow with -u",
            response.jobs.len()
        );
    }
    let jobs: Vec<_> = response
        .jobs
        .into_iter()
        .filter(|j| {
            ids.is_empty()
                || ids
                    .iter()
                    .any(|&(id, task)| berth_client::array_ids::selects(j, id, task))
        })
        .filter(|j| {
            let spec = j.spec.clone().unwrap_or_default();
            let partition = spec
                .partitions
                .first()
                .cloned()
                .unwrap_or_else(|| DEFAULT_PARTITION.to_string());
            (users.is_empty() || users.contains(&spec.user))
                && (accounts.is_empty() || accounts.contains(&spec.account))
                && (partitions.is_empty() || partitions.contains(&partition))
        })
        .filter(|j| states.matches(job_state(j)))
        .filter(|j| in_window(j, start_ms, end_ms))
        .collect();
    if args.json {
        output::emit_json(&jobs_json(&jobs, false))?;
    } else {
        let options = Options {
            layout,
            noheader: args.noheader,
            allocations: args.allocations,
            now_ms: now,
        };
        output::emit(&format_sacct(&jobs, &columns, options))?;
    }
    Ok(ExitCode::SUCCESS)
}
