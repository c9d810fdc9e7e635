//! `srun` inside a batch job: runs the command as a step on the job's
//! allocation, one process per task, each with Slurm's step variables
//! (`SLURM_STEP_ID`, `SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`).
//! Tasks on this host (the batch host) are its own children; tasks on the
//! job's other hosts are started by their agents (`srun_remote`), with
//! their output streamed back here. Outside a job (and as `salloc`) it
//! refuses, since Berth has no interactive allocations yet.

use anyhow::{bail, Context as _, Result};
use clap::Args;
use std::process::{ExitCode, Stdio};

use super::salloc::AllocOptions;
use super::srun_remote::{self, StepAlloc};
use super::GlobalArgs;

/// Tasks one step may start.
pub const STEP_TASKS_MAX: u32 = 1024;
#[derive(Args, Debug, Clone, Default)]
pub struct SrunArgs {
    /// Tasks to start (processes), spread over the step's hosts in blocks
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<u32>,
    /// Tasks per host
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<u32>,
    /// Hosts to run on: the first N of the job's [default: all of them,
    /// or as many as there are tasks]
    #[arg(short = 'N', long = "nodes", value_name = "N")]
    pub nodes: Option<u32>,
    /// CPUs per task (recorded in SLURM_CPUS_PER_TASK)
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Pass output on as it comes, not a whole line at a time
    #[arg(short = 'u', long = "unbuffered")]
    pub unbuffered: bool,
    /// Start each line of output with its task's number ("3: ")
    #[arg(short = 'l', long = "label")]
    pub label: bool,
    /// File for the tasks' stdout (%t task id, %j job id, %s step id)
    #[arg(short = 'o', long = "output", value_name = "PATTERN")]
    pub output: Option<String>,
    /// File for the tasks' stderr [default: as stdout]
    #[arg(short = 'e', long = "error", value_name = "PATTERN")]
    pub error: Option<String>,
    /// Step name (outside a job, the allocation's job name too)
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// Outside a job: what the allocation asks for
    #[command(flatten)]
    pub alloc: AllocOptions,
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
    /// The job's hosts, the batch host first (`BERTH_NODELIST`).
    pub hosts: Vec<String>,
    /// Which of them this is (`SLURM_NODEID`); `None` outside them (the
    /// shell of an interactive allocation): every task is then remote.
    pub here: Option<usize>,
    pub step_id: u32,
}

/// Reads the job context; `None` outside a job.
pub fn step_place(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<StepPlace>> {
    let Some(job_id) = env("SLURM_JOB_ID").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let nodes: usize = match env("SLURM_JOB_NUM_NODES") {
        Some(n) => n
            .parse()
            .with_context(|| format!("SLURM_JOB_NUM_NODES={n} is not a number"))?,
        None => 1,
    };
    let hosts: Vec<String> = match env("BERTH_NODELIST").filter(|l| !l.is_empty()) {
        Some(list) => list.split(',').map(str::to_string).collect(),
        // Not started by a Berth agent (a hand-made environment): one
        // host, this one.
        None => vec![env("SLURMD_NODENAME").unwrap_or_else(|| "localhost".into())],
    };
    if hosts.len() != nodes {
        bail!(
            "SLURM_JOB_NUM_NODES={nodes} but BERTH_NODELIST names {} hosts",
            hosts.len()
        );
    }
    let here = match env("SLURM_NODEID") {
        Some(n) => Some(
            n.parse::<usize>()
                .ok()
                .filter(|&i| i < hosts.len())
                .with_context(|| format!("SLURM_NODEID={n} is not a host of the job"))?,
        ),
        // salloc's shell: in the allocation, on none of its hosts.
        None if env("BERTH_NODELIST").is_some_and(|l| !l.is_empty()) => None,
        None => Some(0),
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
        hosts,
        here,
        step_id,
    }))
}

/// The tasks of a step on each of its hosts: `tasks[i]` are the ranks on
/// the job's host `i` (the step uses the job's first hosts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub tasks: Vec<Vec<u32>>,
}

impl Layout {
    pub fn ntasks(&self) -> u32 {
        self.tasks.iter().map(|t| t.len() as u32).sum()
    }

    /// Slurm's `SLURM_STEP_TASKS_PER_NODE` form: `2(x3),1`.
    pub fn tasks_per_node(&self) -> String {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for t in &self.tasks {
            match runs.last_mut() {
                Some((n, count)) if *n == t.len() => *count += 1,
                _ => runs.push((t.len(), 1)),
            }
        }
        runs.iter()
            .map(|(n, count)| {
                if *count == 1 {
                    n.to_string()
                } else {
                    format!("{n}(x{count})")
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Spreads the step's tasks over the job's first hosts in blocks, as
/// Slurm's default distribution does: the first hosts get one more when
/// the tasks do not divide evenly.
pub fn layout(args: &SrunArgs, job_hosts: usize) -> Result<Layout> {
    let job_hosts = u32::try_from(job_hosts).unwrap_or(u32::MAX).max(1);
    if let Some(n) = args.nodes {
        if n == 0 || n > job_hosts {
            bail!("-N {n}: the job has {job_hosts} host(s); a step runs on 1 to {job_hosts}");
        }
    }
    if args.ntasks == Some(0) || args.ntasks_per_node == Some(0) {
        bail!("invalid number of tasks 0: must be 1 to {STEP_TASKS_MAX}");
    }
    let nodes = match (args.nodes, args.ntasks) {
        (Some(n), _) => n,
        (None, Some(t)) if args.ntasks_per_node.is_none() => t.min(job_hosts),
        (None, _) => job_hosts,
    };
    let ntasks = args
        .ntasks
        .or(args.ntasks_per_node.map(|per| per.saturating_mul(nodes)))
        .unwrap_or(nodes);
    if ntasks > STEP_TASKS_MAX {
        bail!("invalid number of tasks {ntasks}: must be 1 to {STEP_TASKS_MAX}");
    }
    if ntasks < nodes {
        bail!("cannot run {ntasks} task(s) on {nodes} hosts: every host of a step runs a task");
    }
    let (base, extra) = (ntasks / nodes, ntasks % nodes);
    let mut next = 0;
    let mut tasks = Vec::with_capacity(nodes as usize);
    for i in 0..nodes {
        let here = base + u32::from(i < extra);
        if let Some(per) = args.ntasks_per_node {
            if here > per {
                bail!(
                    "{ntasks} tasks over {nodes} hosts puts {here} on one, above --ntasks-per-node {per}"
                );
            }
        }
        tasks.push((next..next + here).collect());
        next += here;
    }
    Ok(Layout { tasks })
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

/// The variables every task of the step shares.
pub fn step_env(args: &SrunArgs, place: &StepPlace, layout: &Layout) -> Vec<(String, String)> {
    let ntasks = layout.ntasks().to_string();
    let step_hosts: Vec<String> = place.hosts[..layout.tasks.len()].to_vec();
    let mut env = vec![
        ("SLURM_STEP_ID".to_string(), place.step_id.to_string()),
        ("SLURM_STEPID".to_string(), place.step_id.to_string()),
        ("SLURM_NTASKS".to_string(), ntasks.clone()),
        ("SLURM_NPROCS".to_string(), ntasks.clone()),
        ("SLURM_STEP_NUM_TASKS".to_string(), ntasks),
        (
            "SLURM_STEP_NUM_NODES".to_string(),
            layout.tasks.len().to_string(),
        ),
        (
            "SLURM_STEP_NODELIST".to_string(),
            berth_client::hostlist::compress(&step_hosts),
        ),
        (
            "SLURM_STEP_TASKS_PER_NODE".to_string(),
            layout.tasks_per_node(),
        ),
    ];
    if let Some(c) = args.cpus_per_task {
        env.push(("SLURM_CPUS_PER_TASK".to_string(), c.to_string()));
    }
    if let Some(name) = &args.job_name {
        env.push(("SLURM_STEP_NAME".to_string(), name.clone()));
    }
    env
}

/// Opens an output file of a task (appending, as srun's `-o` does).
pub fn open_output(pattern: &str, task: u32, place: &StepPlace) -> Result<std::fs::File> {
    let path = expand(pattern, task, place);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {path} for output"))
}

pub async fn run(global: &GlobalArgs, args: SrunArgs) -> Result<ExitCode> {
    let lookup = |name: &str| std::env::var(name).ok();
    let Some(place) = step_place(&lookup)? else {
        // Outside a job: allocate, run the step, release (as Slurm's srun).
        return super::salloc::srun_outside(global, args).await;
    };
    if let Some(option) = args.alloc.first_given() {
        bail!(
            "{option} asks for a new allocation; inside job {} a step runs on the job's own",
            place.job_id
        );
    }
    let alloc = StepAlloc::from_env(&place, &lookup)?;
    let worst = run_step(&args, place, &alloc).await?;
    Ok(exit_code(worst))
}

/// srun's exit status for the highest task exit code.
pub fn exit_code(worst: i32) -> ExitCode {
    ExitCode::from(u8::try_from(worst.clamp(0, 255)).unwrap_or(1))
}

/// Runs one step in `alloc` to its end: the tasks on this host (when it
/// is one of the job's) as children, the others through their agents.
/// Returns the highest task exit code.
pub async fn run_step(args: &SrunArgs, mut place: StepPlace, alloc: &StepAlloc) -> Result<i32> {
    let layout = layout(args, place.hosts.len())?;
    // Steps are numbered by the batch host's agent (which records them
    // for sacct), so two sruns of one script never share an id; without
    // one, from the environment.
    let numbered = srun_remote::next_step_id(&place, alloc, &step_name(args), &layout).await;
    match numbered {
        Ok(Some(id)) => place.step_id = id,
        Ok(None) => {}
        Err(ref e) => eprintln!(
            "srun: warning: cannot number the step with the batch host's agent ({e:#}); it is step {}",
            place.step_id
        ),
    }
    let shared = step_env(args, &place, &layout);
    // The other hosts' tasks first: if any host cannot start them, no
    // task has run here yet and the step fails whole.
    let remote = srun_remote::start(args, &place, &layout, &shared, alloc).await?;
    let local_tasks = place
        .here
        .and_then(|h| layout.tasks.get(h).cloned())
        .unwrap_or_default();
    let mut children = Vec::new();
    let mut pumps = Vec::new();
    for (local, &task) in local_tasks.iter().enumerate() {
        let mut command = tokio::process::Command::new(&args.command[0]);
        command
            .args(&args.command[1..])
            .envs(shared.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("SLURM_PROCID", task.to_string())
            .env("SLURM_LOCALID", local.to_string())
            .env("SLURM_NODEID", place.here.unwrap_or(0).to_string())
            .stdin(if task == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        match &args.output {
            Some(pattern) => {
                command.stdout(open_output(pattern, task, &place)?);
            }
            None if args.label => {
                command.stdout(Stdio::piped());
            }
            None => {}
        }
        match args.error.as_ref().or(args.output.as_ref()) {
            Some(pattern) => {
                command.stderr(open_output(pattern, task, &place)?);
            }
            None if args.label => {
                command.stderr(Stdio::piped());
            }
            None => {}
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot run {}", args.command[0]))?;
        // -l: this host's tasks' lines are labelled here too.
        if let Some(pipe) = child.stdout.take() {
            pumps.push(tokio::spawn(srun_remote::pump(
                pipe,
                srun_remote::Sink::terminal(false, task, true),
                args.unbuffered,
            )));
        }
        if let Some(pipe) = child.stderr.take() {
            pumps.push(tokio::spawn(srun_remote::pump(
                pipe,
                srun_remote::Sink::terminal(true, task, true),
                args.unbuffered,
            )));
        }
        children.push((task, child));
    }
    let remote_worst = tokio::spawn(srun_remote::finish(remote, args.clone(), place.clone()));
    // srun's exit code: the highest of its tasks'; a task killed by a
    // signal counts as failure.
    let mut worst = 0;
    let here = place.here.map_or("", |h| place.hosts[h].as_str());
    for (task, mut child) in children {
        let status = child.wait().await.context("waiting for a task")?;
        let code = status.code().unwrap_or(1);
        if code != 0 {
            eprintln!("srun: error: {here}: task {task}: Exited with exit code {code}");
        }
        worst = worst.max(code);
    }
    for pump in pumps {
        let _ = pump.await;
    }
    let remote = remote_worst.await.context("waiting for the other hosts")?;
    let worst = worst.max(remote);
    if matches!(numbered, Ok(Some(_))) {
        if let Err(e) = srun_remote::end_step(&place, alloc, worst).await {
            eprintln!("srun: warning: the step's end was not recorded ({e:#})");
        }
    }
    Ok(worst)
}

/// The step's name: `-J`, else its command's file name, as Slurm's.
pub fn step_name(args: &SrunArgs) -> String {
    args.job_name.clone().unwrap_or_else(|| {
        args.command
            .first()
            .map(|c| c.rsplit('/').next().unwrap_or(c).to_string())
            .unwrap_or_default()
    })
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
            step_place(&env(&[("SLURM_JOB_ID", "7"), ("SLURMD_NODENAME", "n1")])).expect("ok"),
            Some(StepPlace {
                job_id: "7".into(),
                hosts: vec!["n1".into()],
                here: Some(0),
                step_id: 0
            })
        );
        assert_eq!(
            step_place(&env(&[
                ("SLURM_JOB_ID", "7"),
                ("SLURM_JOB_NUM_NODES", "2"),
                ("BERTH_NODELIST", "n1,n2"),
                ("SLURM_NODEID", "0"),
                ("SLURM_STEP_ID", "0")
            ]))
            .expect("ok"),
            Some(StepPlace {
                job_id: "7".into(),
                hosts: vec!["n1".into(), "n2".into()],
                here: Some(0),
                step_id: 1
            })
        );
        for bad in [
            vec![("SLURM_JOB_ID", "7"), ("SLURM_JOB_NUM_NODES", "x")],
            vec![
                ("SLURM_JOB_ID", "7"),
                ("SLURM_JOB_NUM_NODES", "3"),
                ("BERTH_NODELIST", "a,b"),
            ],
            vec![
                ("SLURM_JOB_ID", "7"),
                ("BERTH_NODELIST", "a"),
                ("SLURM_NODEID", "1"),
            ],
        ] {
            assert!(step_place(&env(&bad)).is_err(), "{bad:?}");
        }
    }

    fn args(nodes: Option<u32>, ntasks: Option<u32>, per_node: Option<u32>) -> SrunArgs {
        SrunArgs {
            nodes,
            ntasks,
            ntasks_per_node: per_node,
            ..Default::default()
        }
    }

    fn ranks(l: &Layout) -> Vec<Vec<u32>> {
        l.tasks.clone()
    }

    #[test]
    fn tasks_spread_over_hosts_in_blocks() {
        // One task per host of the job by default.
        let l = layout(&args(None, None, None), 3).expect("ok");
        assert_eq!(ranks(&l), vec![vec![0], vec![1], vec![2]]);
        assert_eq!(l.tasks_per_node(), "1(x3)");
        // -n alone: as many hosts as tasks, up to the job's.
        assert_eq!(
            ranks(&layout(&args(None, Some(1), None), 3).expect("ok")),
            vec![vec![0]]
        );
        let l = layout(&args(None, Some(5), None), 2).expect("ok");
        assert_eq!(ranks(&l), vec![vec![0, 1, 2], vec![3, 4]]);
        assert_eq!(l.tasks_per_node(), "3,2");
        // -N 1 inside a multi-host job: the batch host only.
        assert_eq!(
            ranks(&layout(&args(Some(1), Some(3), None), 2).expect("ok")),
            vec![vec![0, 1, 2]]
        );
        // --ntasks-per-node over every host.
        let l = layout(&args(None, None, Some(2)), 2).expect("ok");
        assert_eq!(ranks(&l), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(l.ntasks(), 4);
        assert_eq!(l.tasks_per_node(), "2(x2)");
    }

    #[test]
    fn impossible_layouts_are_refused() {
        for (a, hosts, want) in [
            (args(Some(3), None, None), 2, "-N 3: the job has 2 host(s)"),
            (args(Some(0), None, None), 2, "-N 0"),
            (
                args(Some(2), Some(1), None),
                2,
                "cannot run 1 task(s) on 2 hosts",
            ),
            (args(None, Some(0), None), 1, "invalid number of tasks 0"),
            (
                args(None, Some(2000), None),
                1,
                "invalid number of tasks 2000",
            ),
            (
                args(Some(2), Some(5), Some(2)),
                2,
                "above --ntasks-per-node 2",
            ),
        ] {
            let err = layout(&a, hosts).expect_err(want).to_string();
            assert!(err.contains(want), "{err} !~ {want}");
        }
    }

    #[test]
    fn patterns_and_step_variables() {
        let place = StepPlace {
            job_id: "7".into(),
            hosts: vec!["n1".into(), "n2".into()],
            here: Some(0),
            step_id: 2,
        };
        assert_eq!(expand("out-%j.%s.%t-%%-%x", 3, &place), "out-7.2.3-%-%x");
        let a = args(None, Some(3), None);
        let l = layout(&a, 2).expect("ok");
        let env = step_env(&a, &place, &l);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("SLURM_NTASKS"), Some("3"));
        assert_eq!(get("SLURM_STEP_NUM_NODES"), Some("2"));
        assert_eq!(get("SLURM_STEP_NODELIST"), Some("n[1-2]"));
        assert_eq!(get("SLURM_STEP_TASKS_PER_NODE"), Some("2,1"));
        assert_eq!(get("SLURM_STEP_ID"), Some("2"));
    }
}
