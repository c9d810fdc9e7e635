//! Interactive allocations, as Slurm's `salloc` and `srun` outside a job
//! make them: the cluster places a job that runs no batch script
//! (`JobSpec.interactive`); once it runs, `salloc` runs its command here
//! with the job's variables (so `srun` inside starts steps on the
//! allocation), and `srun` runs its one step; either then releases the
//! allocation with the command's exit code, which ends the job COMPLETED
//! or FAILED. An allocation whose client dies without releasing it is
//! held until its time limit or a cancel.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use berth_client::state::{job_state, state_name};
use berth_client::{servers_from, Cluster};
use berth_proto::api::{JobState, StepAccess};
use clap::Args;

use super::srun::{self, SrunArgs, StepPlace};
use super::srun_remote::StepAlloc;
use super::submit::{build_request, Caller, Source, SubmitArgs};
use super::GlobalArgs;

/// Pause between looks at a pending allocation.
pub const GRANT_POLL_MS: u64 = 200;
/// Looks taken before giving up on a pending allocation (a week).
pub const GRANT_POLLS_MAX: u64 = 7 * 86_400 * 1_000 / GRANT_POLL_MS;

/// What a new allocation asks for besides hosts and tasks, named as
/// sbatch names them (salloc's options, and srun's outside a job).
#[derive(Args, Debug, Clone, Default)]
pub struct AllocOptions {
    /// Memory per host: a number with K, M, G or T [default unit: M]
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Time limit (sbatch's formats)
    #[arg(short = 't', long, value_name = "TIME")]
    pub time: Option<String>,
    /// Partitions the allocation may run in, comma-separated
    #[arg(short = 'p', long, value_name = "NAME[,...]")]
    pub partition: Option<String>,
    /// Quality of service
    #[arg(short = 'q', long, value_name = "QOS")]
    pub qos: Option<String>,
    /// Account to charge
    #[arg(short = 'A', long, value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// GPUs, all told ([TYPE:]N)
    #[arg(short = 'G', long, value_name = "[TYPE:]N")]
    pub gpus: Option<String>,
}

impl AllocOptions {
    /// The first option given (inside a job, srun refuses them).
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (self.time.is_some(), "--time"),
            (self.partition.is_some(), "--partition"),
            (self.qos.is_some(), "--qos"),
            (self.account.is_some(), "--account"),
            (self.mem.is_some(), "--mem"),
            (self.gpus.is_some(), "--gpus"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// `salloc`'s options: the resources, as sbatch names them, and the
/// command to run in the allocation.
#[derive(Args, Debug, Clone, Default)]
pub struct SallocArgs {
    /// Hosts, all allocated at once; MIN-MAX allocates MIN
    #[arg(short = 'N', long, value_name = "N[-M]")]
    pub nodes: Option<String>,
    /// Tasks, spread evenly over the hosts
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<u32>,
    /// CPUs per task
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Job name [default: the command's first word]
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    #[command(flatten)]
    pub alloc: AllocOptions,
    /// The command to run in the allocation [default: $SHELL]
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// An allocation granted to this client.
struct Granted {
    cluster: Cluster,
    job_id: u64,
    access: StepAccess,
}

/// The variables salloc's command runs with: the job's, as a batch
/// script would see them, less what names a host of its own.
pub fn allocation_env(access: &StepAccess, job_name: &str) -> Vec<(String, String)> {
    let job_id = access.job_id.to_string();
    let nodelist = berth_client::hostlist::compress(&access.hosts);
    let nodes = access.hosts.len().to_string();
    let agents = access
        .hosts
        .iter()
        .zip(&access.step_addrs)
        .filter(|(_, a)| !a.is_empty())
        .map(|(h, a)| format!("{h}={a}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut env = vec![
        ("SLURM_JOB_ID", job_id.clone()),
        ("SLURM_JOBID", job_id.clone()),
        ("SLURM_JOB_NAME", job_name.to_string()),
        ("SLURM_JOB_NODELIST", nodelist.clone()),
        ("SLURM_NODELIST", nodelist),
        ("SLURM_JOB_NUM_NODES", nodes.clone()),
        ("SLURM_NNODES", nodes),
        ("BERTH_JOB_ID", job_id),
        ("BERTH_ALLOC_ID", access.alloc_id.to_string()),
        ("BERTH_NODELIST", access.hosts.join(",")),
        ("BERTH_STEP_AGENTS", agents),
    ];
    if !access.credential.is_empty() {
        env.push(("BERTH_STEP_CREDENTIAL", access.credential.clone()));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

async fn allocate(
    global: &GlobalArgs,
    prog: &str,
    args: &SubmitArgs,
    description: &str,
) -> Result<Granted> {
    let global = super::with_config_file(global.clone())?;
    if global.token.is_some() {
        berth_client::set_token(global.token.clone());
    }
    berth_client::set_ca_file(global.ca.as_deref())?;
    let mut request = build_request(
        args,
        &Source::Wrap(description.to_string()),
        &Caller::real()?,
    )?;
    if let Some(spec) = request.spec.as_mut() {
        spec.interactive = true;
    }
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let job_id = cluster.submit_job(request).await?.job_id;
    eprintln!("{prog}: Pending job allocation {job_id}");
    let mut said_waiting = false;
    for _ in 0..GRANT_POLLS_MAX {
        let job = cluster.get_job(job_id).await?;
        match job_state(&job) {
            JobState::Running => {
                eprintln!("{prog}: Granted job allocation {job_id}");
                let access = cluster.get_step_access(job_id).await?;
                return Ok(Granted {
                    cluster,
                    job_id,
                    access,
                });
            }
            JobState::Pending => {
                if !said_waiting {
                    eprintln!("{prog}: job {job_id} queued and waiting for resources");
                    said_waiting = true;
                }
                tokio::time::sleep(Duration::from_millis(GRANT_POLL_MS)).await;
            }
            other => bail!(
                "job allocation {job_id} ended {} before it was granted",
                state_name(other)
            ),
        }
    }
    bail!("gave up waiting for job allocation {job_id}")
}

/// Releases the allocation, saying so as Slurm does.
async fn release(prog: &str, granted: &mut Granted, code: i32) {
    eprintln!("{prog}: Relinquishing job allocation {}", granted.job_id);
    if let Err(e) = granted
        .cluster
        .release_allocation(granted.job_id, code)
        .await
    {
        eprintln!(
            "{prog}: error: cannot release job allocation {}: {e}",
            granted.job_id
        );
    }
}

/// What the program asked for, as the submit's options.
fn submit_args(
    nodes: Option<String>,
    ntasks: Option<u32>,
    cpus_per_task: Option<u32>,
    job_name: Option<String>,
    alloc: &AllocOptions,
) -> SubmitArgs {
    let alloc = alloc.clone();
    SubmitArgs {
        nodes,
        ntasks,
        cpus_per_task,
        job_name,
        mem: alloc.mem,
        time: alloc.time,
        partition: alloc.partition,
        qos: alloc.qos,
        account: alloc.account,
        gpus: alloc.gpus,
        ..SubmitArgs::default()
    }
}

pub async fn salloc(global: &GlobalArgs, args: SallocArgs) -> Result<ExitCode> {
    let command = if args.command.is_empty() {
        vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".to_string())]
    } else {
        args.command.clone()
    };
    let submit = submit_args(
        args.nodes.clone(),
        args.ntasks,
        args.cpus_per_task,
        args.job_name.clone(),
        &args.alloc,
    );
    let description = format!("salloc {}", command.join(" "));
    let mut granted = allocate(global, "salloc", &submit, &description).await?;
    let name = args
        .job_name
        .clone()
        .unwrap_or_else(|| "salloc".to_string());
    let mut env = allocation_env(&granted.access, &name);
    if let Some(ca) = &global.ca {
        // The command's srun verifies the hosts' TLS with the same CA.
        env.push((berth_client::CA_ENV.to_string(), ca.display().to_string()));
    }
    let status = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(env)
        .status()
        .await;
    let code = match &status {
        Ok(s) => s.code().unwrap_or(1),
        Err(_) => 1,
    };
    release("salloc", &mut granted, code).await;
    status.with_context(|| format!("cannot run {}", command[0]))?;
    Ok(srun::exit_code(code))
}

/// `srun` outside a job: an allocation for this one step.
pub async fn srun_outside(global: &GlobalArgs, args: SrunArgs) -> Result<ExitCode> {
    let mut submit = submit_args(
        args.nodes.map(|n| n.to_string()),
        args.ntasks.or(args
            .ntasks_per_node
            .map(|per| per.saturating_mul(args.nodes.unwrap_or(1)))),
        args.cpus_per_task,
        args.job_name.clone(),
        &args.alloc,
    );
    submit.ntasks_per_node = args.ntasks_per_node;
    let description = format!("srun {}", args.command.join(" "));
    let mut granted = allocate(global, "srun", &submit, &description).await?;
    let place = StepPlace {
        job_id: granted.job_id.to_string(),
        hosts: granted.access.hosts.clone(),
        here: None,
        step_id: 0,
    };
    let alloc = StepAlloc::from_access(&granted.access);
    let step = tokio::select! {
        step = srun::run_step(&args, place, &alloc) => step,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("srun: interrupted: the step's tasks are stopped");
            Ok(130)
        }
    };
    let code = match &step {
        Ok(code) => *code,
        Err(e) => {
            eprintln!("srun: error: {e:#}");
            1
        }
    };
    release("srun", &mut granted, code).await;
    Ok(srun::exit_code(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salloc_shell_sees_the_allocation() {
        let access = StepAccess {
            job_id: 9,
            alloc_id: 90,
            hosts: vec!["n1".into(), "n2".into()],
            step_addrs: vec!["a:1".into(), String::new()],
            credential: "c0".into(),
        };
        let env = allocation_env(&access, "salloc");
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("SLURM_JOB_ID"), Some("9"));
        assert_eq!(get("SLURM_JOB_NODELIST"), Some("n[1-2]"));
        assert_eq!(get("SLURM_JOB_NUM_NODES"), Some("2"));
        assert_eq!(get("BERTH_NODELIST"), Some("n1,n2"));
        assert_eq!(get("BERTH_ALLOC_ID"), Some("90"));
        assert_eq!(get("BERTH_STEP_AGENTS"), Some("n1=a:1"));
        assert_eq!(get("BERTH_STEP_CREDENTIAL"), Some("c0"));
        assert_eq!(
            get("SLURM_NODEID"),
            None,
            "salloc's shell is on none of the hosts"
        );
    }
}
