//! `berth queue` / `squeue`: the job table.

use super::ids::{parse_job_ref, JobRef};
use super::{output, GlobalArgs};
use anyhow::{bail, Result};
use berth_client::json::jobs_json;
use berth_client::squeue_format::{
    parse_format, parse_long_format, Format, RowContext, DEFAULT_FORMAT, LONG_FORMAT, START_FORMAT,
};
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
    /// Only jobs that may run in these partitions, comma-separated
    #[arg(short = 'p', long = "partition", value_name = "PARTITION[,...]")]
    pub partition: Option<String>,
    /// Output format: %[.][size]letter fields (%i %P %j %u %t %T %M %D %R %N
    /// %r %l %L %C %m %p %Q %V %S %e %a %q %k %Z %o %b %y %W) and text
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Output format by name: Name[:[.]size[suffix]],... (JobID, Partition,
    /// Name, UserName, StateCompact, State, TimeUsed, NumNodes, ReasonList,
    /// NodeList, Reason, TimeLimit, TimeLeft, NumCPUs, MinMemory, Priority,
    /// PriorityLong, SubmitTime, StartTime, EndTime, Account, QOS, Comment,
    /// WorkDir, Command, tres-per-node, Nice, ExitCode, Borrowed)
    #[arg(short = 'O', long = "Format", value_name = "FIELDS")]
    pub long_format: Option<String>,
    /// The long default format (full state name and time limit)
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// Pending jobs with their predicted start: when the last scheduling
    /// pass reserved room for them (N/A for jobs holding no reservation)
    #[arg(long = "start")]
    pub start: bool,
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
    /// One line per array task, pending ones too (without it an array's
    /// pending tasks share one line, 12_[3-5%2])
    #[arg(short = 'r', long = "array")]
    pub array: bool,
    /// Print the jobs as JSON
    #[arg(long)]
    pub json: bool,
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
}

/// The format the options ask for; -o and -O win over -l and --start.
pub fn chosen_format(args: &QueueArgs) -> Result<Format> {
    if args.format.is_some() && args.long_format.is_some() {
        bail!("-o/--format and -O/--Format cannot be used together");
    }
    Ok(match (&args.format, &args.long_format) {
        (Some(f), _) => parse_format(f)?,
        (_, Some(f)) => parse_long_format(f)?,
        _ if args.start => parse_format(START_FORMAT)?,
        _ if args.long => parse_format(LONG_FORMAT)?,
        _ => parse_format(DEFAULT_FORMAT)?,
    })
}

pub async fn run(global: &GlobalArgs, args: QueueArgs) -> Result<ExitCode> {
    let format = chosen_format(&args)?;
    let filter = match (&args.states, args.start) {
        (Some(states), _) => parse_state_filter(states)?,
        (None, true) => StateFilter::Only(vec![berth_proto::api::JobState::Pending]),
        (None, false) => StateFilter::Default,
    };
    let partitions: Vec<String> = args
        .partition
        .as_deref()
        .map(|p| {
            p.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let ids = args
        .jobs
        .as_deref()
        .map(|list| {
            list.split(',')
                .map(parse_job_ref)
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?;
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
                ..Default::default()
            };
            let response = cluster.list_jobs(request).await?;
            (response.jobs, response.truncated)
        }
    };
    if !users.is_empty() {
        jobs.retain(|job| job.spec.as_ref().is_some_and(|s| users.contains(&s.user)));
    }
    if !partitions.is_empty() {
        jobs.retain(|job| {
            let spec = job.spec.clone().unwrap_or_default();
            let mine = if spec.partitions.is_empty() {
                vec![berth_client::queue::DEFAULT_PARTITION.to_string()]
            } else {
                spec.partitions
            };
            mine.iter().any(|p| partitions.contains(p))
        });
    }
    if args.start {
        // squeue --start lists the soonest first; jobs with no prediction last.
        jobs.sort_by_key(|j| (j.predicted_start_ms == 0, j.predicted_start_ms, j.job_id));
    }
    if truncated {
        eprintln!(
            "warning: the server returned only the first {} matching jobs",
            jobs.len()
        );
    }

    if args.json {
        output::emit_json(&jobs_json(&jobs, truncated))?;
    } else {
        let ctx = RowContext { now_ms: now_ms() };
        let jobs = if args.array {
            jobs
        } else {
            berth_client::array_ids::collapse_pending(jobs)
        };
        output::emit(&format.table(&jobs, ctx, args.noheader))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `-j`: each job by id, in the order given; an array's id (`12`) stands
/// for all its tasks and `12_3` for one. Like squeue, an unknown id is
/// skipped, and it is an error only when none of them exists. Without -t a
/// job is shown in whatever state it is in.
async fn fetch_ids(
    cluster: &mut Cluster,
    refs: &[JobRef],
    filter: &StateFilter,
) -> Result<Vec<Job>> {
    let mut jobs = Vec::new();
    for &r in refs {
        let first = match r {
            JobRef::Job(id) => id,
            JobRef::Task { array, .. } => array,
        };
        let Some(job) = get_if_exists(cluster, first).await? else {
            continue;
        };
        let spec = job.spec.clone().unwrap_or_default();
        let is_array = spec.array_job_id == first;
        match r {
            JobRef::Job(id) => {
                jobs.push(job);
                if is_array {
                    // Tasks have consecutive ids from the array's.
                    for k in 1..u64::from(spec.array_task_count) {
                        if let Some(task) = get_if_exists(cluster, id + k).await? {
                            if task.spec.as_ref().is_some_and(|s| s.array_job_id == id) {
                                jobs.push(task);
                            }
                        }
                    }
                }
            }
            JobRef::Task { array, task } => {
                if !is_array {
                    continue;
                }
                let indexes = berth_scheduler::array::parse(&spec.array)?.indexes;
                if let Some(position) = indexes.iter().position(|&i| i == task) {
                    if let Some(job) = get_if_exists(cluster, array + position as u64).await? {
                        jobs.push(job);
                    }
                }
            }
        }
    }
    if jobs.is_empty() {
        let list: Vec<String> = refs.iter().map(JobRef::to_string).collect();
        bail!("invalid job id specified: {}", list.join(","));
    }
    if let StateFilter::Only(_) = filter {
        jobs.retain(|job| filter.matches(job_state(job)));
    }
    Ok(jobs)
}

/// One job, or None when the cluster has no such job.
async fn get_if_exists(cluster: &mut Cluster, id: u64) -> Result<Option<Job>> {
    match cluster.get_job(id).await {
        Ok(job) => Ok(Some(job)),
        Err(err) if err.code() == Some(tonic::Code::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}
