//! `srun` inside a batch job: runs the command as a step on the job's own
//! host, one process per task, each with Slurm's step variables
//! (`SLURM_STEP_ID`, `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`).
//! Only single-host allocations are handled: the agent cannot launch a
//! step on other hosts yet. Outside a job (and as `salloc`) it refuses,
//! since Berth has no interactive allocations yet.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use std::process::{ExitCode, Stdio};

/// Tasks one step may start on this host.
pub const STEP_TASKS_MAX: u32 = 1024;

#[derive(Args, Debug, Clone, Default)]
pub struct SrunArgs {
    /// Tasks to start (processes), all on this host
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<u32>,
    /// Tasks per node; with one node, the same as --ntasks
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<u32>,
    /// Nodes: only 1 is possible inside a Berth job
    #[arg(short = 'N', long = "nodes", value_name = "N")]
    pub nodes: Option<u32>,
    /// CPUs per task (recorded in SLURM_CPUS_PER_TASK)
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Output is passed straight through, so it is never buffered here
    #[arg(short = 'u', long = "unbuffered")]
    pub unbuffered: bool,
    /// File for the tasks' stdout (%t task id, %j job id, %s step id)
    #[arg(short = 'o', long = "output", value_name = "PATTERN")]
    pub output: Option<String>,
    /// File for the tasks' stderr [default: as stdout]
    #[arg(short = 'e', long = "error", value_name = "PATTERN")]
    pub error: Option<String>,
    /// Step name
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// The command and its arguments
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        required = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<String>,
}

/// Where a step runs: the job's variables read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepPlace {
    pub job_id: String,
    pub nodes: u32,
    pub step_id: u32,
}

/// Reads the job context; `None` outside a job.
pub fn step_place(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<StepPlace>> {
    let Some(job_id) = env("SLURM_JOB_ID").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let nodes = match env("SLURM_JOB_NUM_NODES") {
        Some(n) => n
            .parse()
            .with_context(|| format!("SLURM_JOB_NUM_NODES={n} is not a number"))?,
        None => 1,
    };
    // Steps are numbered per job; a step started from a step counts on.
    let step_id = match env("SLURM_STEP_ID") {
        Some(s) => s
            .parse::<u32>()
            .map(|s| s.saturating_add(1))
            .with_context(|| format!("SLURM_STEP_ID={s} is not a number"))?,
        None => 0,
    };
    Ok(Some(StepPlace {
        job_id,
        nodes,
        step_id,
    }))
}

/// The task count asked for: -n, else --ntasks-per-node, else 1.
pub fn task_count(args: &SrunArgs) -> Result<u32> {
    if let Some(n) = args.nodes {
        if n != 1 {
            bail!(
                "-N {n}: a step runs on the job's one host; multi-host steps are not supported yet"
            );
        }
    }
    let n = args.ntasks.or(args.ntasks_per_node).unwrap_or(1);
    if n == 0 || n > STEP_TASKS_MAX {
        bail!("invalid number of tasks {n}: must be 1 to {STEP_TASKS_MAX}");
    }
    Ok(n)
}

/// `%t` task, `%j` job, `%s` step, `%%` in an output pattern.
pub fn expand(pattern: &str, task: u32, place: &StepPlace) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push_str(&task.to_string()),
            Some('j') => out.push_str(&place.job_id),
            Some('s') => out.push_str(&place.step_id.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

pub async fn run(args: SrunArgs) -> Result<ExitCode> {
    let lookup = |name: &str| std::env::var(name).ok();
    let Some(place) = step_place(&lookup)? else {
        bail!("srun outside a job allocation is not supported yet: Berth has no interactive allocations; submit with sbatch and call srun inside the script");
    };
    // A step on the batch host alone is what `-N 1` asks for; spreading
    // tasks over the other hosts needs a launcher on their agents.
    if place.nodes > 1 && args.nodes != Some(1) {
        bail!(
            "job {} has {} hosts: steps across hosts are not supported yet; \
             srun -N 1 runs a step on this (the batch) host",
            place.job_id,
            place.nodes
        );
    }
    let tasks = task_count(&args)?;
    let mut children = Vec::new();
    for task in 0..tasks {
        let mut command = tokio::process::Command::new(&args.command[0]);
        command
            .args(&args.command[1..])
            .env("SLURM_STEP_ID", place.step_id.to_string())
            .env("SLURM_STEPID", place.step_id.to_string())
            .env("SLURM_PROCID", task.to_string())
            .env("SLURM_LOCALID", task.to_string())
            .env("SLURM_NTASKS", tasks.to_string())
            .env("SLURM_NPROCS", tasks.to_string())
            .env("SLURM_STEP_NUM_TASKS", tasks.to_string())
            .env("SLURM_STEP_NUM_NODES", "1")
            .env("SLURM_NODEID", "0")
            .stdin(if task == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if let Some(c) = args.cpus_per_task {
            command.env("SLURM_CPUS_PER_TASK", c.to_string());
        }
        if let Some(name) = &args.job_name {
            command.env("SLURM_STEP_NAME", name);
        }
        if let Some(pattern) = &args.output {
            let path = expand(pattern, task, &place);
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("cannot open {path} for output"))?;
            command.stdout(file);
        }
        if let Some(pattern) = args.error.as_ref().or(args.output.as_ref()) {
            let path = expand(pattern, task, &place);
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("cannot open {path} for errors"))?;
            command.stderr(file);
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot run {}", args.command[0]))?;
        children.push(child);
    }
    // srun's exit code: the highest of its tasks'; a task killed by a
    // signal counts as failure.
    let mut worst = 0;
    for mut child in children {
        let status = child.wait().await.context("waiting for a task")?;
        let code = status.code().unwrap_or(1);
        worst = worst.max(code);
    }
    Ok(ExitCode::from(
        u8::try_from(worst.clamp(0, 255)).unwrap_or(1),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn place_from_the_job_environment() {
        assert_eq!(step_place(&env(&[])).expect("ok"), None);
        assert_eq!(
            step_place(&env(&[("SLURM_JOB_ID", "7")])).expect("ok"),
            Some(StepPlace {
                job_id: "7".into(),
                nodes: 1,
                step_id: 0
            })
        );
        assert_eq!(
            step_place(&env(&[
                ("SLURM_JOB_ID", "7"),
                ("SLURM_JOB_NUM_NODES", "2"),
                ("SLURM_STEP_ID", "0")
            ]))
            .expect("ok"),
            Some(StepPlace {
                job_id: "7".into(),
                nodes: 2,
                step_id: 1
            })
        );
        assert!(step_place(&env(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NUM_NODES", "x")])).is_err());
    }

    #[test]
    fn patterns_and_task_counts() {
        let place = StepPlace {
            job_id: "7".into(),
            nodes: 1,
            step_id: 2,
        };
        assert_eq!(expand("out-%j.%s.%t-%%-%x", 3, &place), "out-7.2.3-%-%x");
        let args = SrunArgs {
            ntasks: Some(4),
            ..Default::default()
        };
        assert_eq!(task_count(&args).expect("ok"), 4);
        let args = SrunArgs {
            nodes: Some(2),
            ..Default::default()
        };
        assert!(task_count(&args).is_err());
        let args = SrunArgs {
            ntasks: Some(0),
            ..Default::default()
        };
        assert!(task_count(&args).is_err());
    }
}
