//! `berth submit` / `sbatch`: build a job from options, `#SBATCH` lines and
//! a command or script, check all of it, then submit it once (retried on
//! failover under one request id).

use super::{clap_errors, output, GlobalArgs, SbatchCli, Tool};
use anyhow::{anyhow, bail, Context as _, Result};
use berth_client::alt::{parse_alt, AltDefaults};
use berth_client::begin::parse_begin;
use berth_client::export::parse_export;
use berth_client::json::submit_json;
use berth_client::mem::parse_mem_mb;
use berth_client::script::{check_script, sbatch_directives, script_command};
use berth_client::time::parse_time_limit;
use berth_client::user::current_user;
use berth_client::{comma_list, servers_from, wrap_job_name, Cluster};
use berth_proto::api::{JobSpec, ResourceSet, SubmitJobRequest};
use clap::{Args, Parser};
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `berth submit` / `sbatch`, named as sbatch names them.
#[derive(Args, Debug, Clone, Default)]
pub struct SubmitArgs {
    /// Run this command line (by /bin/sh) instead of a script
    #[arg(long, value_name = "CMD")]
    pub wrap: Option<String>,
    /// Job name [default: the script's file name, or --wrap's first word]
    #[arg(short = 'J', long = "job-name", value_name = "NAME")]
    pub job_name: Option<String>,
    /// CPUs per task
    #[arg(short = 'c', long = "cpus-per-task", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// Tasks, spread evenly over the job's hosts; CPUs asked per host =
    /// its tasks x cpus-per-task
    #[arg(short = 'n', long = "ntasks", value_name = "N")]
    pub ntasks: Option<u32>,
    /// Memory for the job: a number with K, M, G or T [default unit: M]
    #[arg(long, value_name = "SIZE")]
    pub mem: Option<String>,
    /// Time limit: minutes, minutes:seconds, hours:minutes:seconds,
    /// days-hours, days-hours:minutes, days-hours:minutes:seconds or UNLIMITED
    #[arg(short = 't', long, value_name = "TIME")]
    pub time: Option<String>,
    /// Hosts, all started at once; MIN-MAX allocates MIN
    #[arg(short = 'N', long, value_name = "N[-M]")]
    pub nodes: Option<String>,
    /// Partitions the job may run in, comma-separated
    #[arg(short = 'p', long, value_name = "NAME[,...]")]
    pub partition: Option<String>,
    /// Quality of service
    #[arg(short = 'q', long, value_name = "QOS")]
    pub qos: Option<String>,
    /// Account to charge
    #[arg(short = 'A', long, value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// Working directory of the job [default: the current directory]
    #[arg(short = 'D', long, value_name = "DIR")]
    pub chdir: Option<PathBuf>,
    /// File for stdout (%j job id, %x name, %u user, %N host)
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,
    /// File for stderr [default: same as stdout]
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,
    /// Submit held: the job waits until released
    #[arg(short = 'H', long)]
    pub hold: bool,
    /// Requeue the job after a node failure
    #[arg(long, overrides_with = "no_requeue")]
    pub requeue: bool,
    /// Never requeue the job (the default)
    #[arg(long = "no-requeue", overrides_with = "requeue")]
    pub no_requeue: bool,
    /// Lower the job's priority by N [default N: 100]
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "100",
        allow_negative_numbers = true
    )]
    pub nice: Option<i32>,
    /// Free-form comment
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
    /// Environment for the job: ALL, NONE, NAME or NAME=VALUE, comma-separated.
    /// Only named variables are passed; ALL does not copy your environment
    #[arg(long, value_name = "LIST")]
    pub export: Option<String>,
    /// Generic resources per host, e.g. gpu:a100:2,emu:palladium:4
    #[arg(long, value_name = "LIST")]
    pub gres: Option<String>,
    /// Memory per CPU: a number with K, M, G or T [default unit: M]
    #[arg(long = "mem-per-cpu", value_name = "SIZE", conflicts_with = "mem")]
    pub mem_per_cpu: Option<String>,
    /// Tasks per host
    #[arg(long = "ntasks-per-node", value_name = "N")]
    pub ntasks_per_node: Option<u32>,
    /// GPUs for the whole job, [type:]count, spread evenly over its hosts
    #[arg(short = 'G', long = "gpus", value_name = "[TYPE:]N")]
    pub gpus: Option<String>,
    /// GPUs per node, [type:]count
    #[arg(
        long = "gpus-per-node",
        value_name = "[TYPE:]N",
        conflicts_with = "gpus"
    )]
    pub gpus_per_node: Option<String>,
    /// Send SIG this many seconds [default: 60] before the time limit; B:
    /// sends it to the batch shell only, else to every process of the job
    #[arg(long, value_name = "[B:]SIG[@SECONDS]")]
    pub signal: Option<String>,
    /// append or truncate the output files. Not supported yet
    #[arg(long = "open-mode", value_name = "append|truncate")]
    pub open_mode: Option<String>,
    /// Workload characterization key. Not supported yet
    #[arg(long, value_name = "KEY")]
    pub wckey: Option<String>,
    /// Start no earlier than this time (UTC): HH:MM[:SS], YYYY-MM-DD[THH:MM[:SS]], now+COUNT[UNIT], tomorrow, ...
    #[arg(short = 'b', long, value_name = "TIME")]
    pub begin: Option<String>,
    /// Start after other jobs: afterok|afterany|afternotok:ID[:ID...] or singleton, joined by ',' (all) or '?' (any)
    #[arg(short = 'd', long, value_name = "LIST")]
    pub dependency: Option<String>,
    /// Job array: task indexes 0-15, 1,3,5 or 0-15:4, with an optional %MAX running at once
    #[arg(short = 'a', long, value_name = "INDEXES")]
    pub array: Option<String>,
    /// Whole hosts only: nothing else runs beside the job
    #[arg(long)]
    pub exclusive: bool,
    /// Features every host must have: NAME[&NAME...]
    #[arg(short = 'C', long, value_name = "LIST")]
    pub constraint: Option<String>,
    /// Run in this reservation
    #[arg(long, value_name = "NAME")]
    pub reservation: Option<String>,
    /// The job may be preempted (carried; nothing preempts yet)
    #[arg(long)]
    pub preemptible: bool,
    /// An alternative resource set, one per option, tried in order:
    /// KEY=VALUE,... with gres, cpus, mem, nodes; unset keys are the job's own
    #[arg(long = "alternative", visible_alias = "alt", value_name = "SET")]
    pub alternative: Vec<String>,
    /// Wait for the job to end; exit with its exit code
    #[arg(short = 'W', long)]
    pub wait: bool,
    /// Print only the job id
    #[arg(long)]
    pub parsable: bool,
    /// Print the answer as JSON
    #[arg(long)]
    pub json: bool,
    /// Batch script [default: read from standard input]
    #[arg(value_name = "SCRIPT")]
    pub script: Option<PathBuf>,
    /// Arguments for the script
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub script_args: Vec<String>,
}

/// What the job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--wrap CMD`.
    Wrap(String),
    /// A batch script, from a file or stdin.
    Script {
        text: String,
        /// The default job name: the file name, or "sbatch" for stdin.
        name: String,
        args: Vec<String>,
    },
}

const NO_COMMAND: &str =
    "no command to run: give --wrap CMD, a batch script file, or a script on standard input";

/// The caller's side of a submit, a parameter so building a job is a pure
/// function tests can drive.
pub struct Caller {
    pub cwd: PathBuf,
    pub user: String,
    pub lookup_env: EnvLookup,
    /// Now, for `--begin` times relative to it.
    pub now_ms: u64,
}

/// Reads one variable of the caller's environment.
pub type EnvLookup = Box<dyn Fn(&str) -> Option<String>>;

impl Caller {
    pub fn real() -> Result<Caller> {
        Ok(Caller {
            cwd: std::env::current_dir().context("cannot determine the current directory")?,
            user: current_user(),
            lookup_env: Box::new(|name| std::env::var(name).ok()),
            now_ms: berth_client::now_ms(),
        })
    }
}

pub async fn run(tool: Tool, global: &GlobalArgs, cli: SubmitArgs) -> Result<ExitCode> {
    let source = read_source(&cli)?;
    let args = match &source {
        Source::Script { text, .. } => cli.overlaid_on(directive_args(tool, text)?),
        Source::Wrap(_) => cli,
    };
    let request = build_request(&args, &source, &Caller::real()?)?;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let response = cluster.submit_job(request).await?;
    if args.json {
        output::emit_json(&submit_json(&response))?;
    } else if args.parsable {
        output::emit(&format!("{}\n", response.job_id))?;
    } else {
        output::emit(&format!("Submitted batch job {}\n", response.job_id))?;
    }
    if args.wait {
        return wait_for(&mut cluster, response.job_id).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Pause between looks at a job `--wait` follows.
pub const WAIT_POLL_MS: u64 = 1_000;
/// Looks `--wait` takes before giving up: a year at one a second.
pub const WAIT_POLLS_MAX: u64 = 366 * 86_400;

/// `--wait`: until the job is final, then exit as it did (its exit code;
/// 1 when it ended without one of its own, e.g. cancelled or timed out).
async fn wait_for(cluster: &mut Cluster, job_id: u64) -> Result<ExitCode> {
    use berth_client::state::{job_state, state_name};
    use berth_proto::api::JobState;
    for _ in 0..WAIT_POLLS_MAX {
        let job = cluster.get_job(job_id).await?;
        let state = job_state(&job);
        match state {
            JobState::Pending | JobState::Running | JobState::Suspended => {
                tokio::time::sleep(std::time::Duration::from_millis(WAIT_POLL_MS)).await;
            }
            JobState::Completed => {
                return Ok(ExitCode::from(u8::try_from(job.exit_code).unwrap_or(1)));
            }
            _ => {
                eprintln!("sbatch: job {job_id} ended {}", state_name(state));
                let code = u8::try_from(job.exit_code).ok().filter(|c| *c != 0);
                return Ok(ExitCode::from(code.unwrap_or(1)));
            }
        }
    }
    bail!("gave up waiting for job {job_id} after {WAIT_POLLS_MAX} looks")
}

/// Finds what the job runs: `--wrap`, the script file, or stdin.
fn read_source(args: &SubmitArgs) -> Result<Source> {
    match (&args.wrap, &args.script) {
        (Some(_), Some(_)) => bail!("script arguments are not permitted with --wrap"),
        (Some(command), None) if command.trim().is_empty() => bail!(NO_COMMAND),
        (Some(command), None) => Ok(Source::Wrap(command.clone())),
        (None, Some(path)) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("unable to open batch script {}", path.display()))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| anyhow!("batch script {} is not UTF-8 text", path.display()))?;
            check_script(&text).with_context(|| format!("batch script {}", path.display()))?;
            Ok(Source::Script {
                text,
                name: file_name(path),
                args: args.script_args.clone(),
            })
        }
        (None, None) => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                bail!(NO_COMMAND);
            }
            let mut text = String::new();
            stdin
                .read_to_string(&mut text)
                .context("cannot read a batch script from standard input")?;
            if text.trim().is_empty() {
                bail!(NO_COMMAND);
            }
            check_script(&text).context("batch script on standard input")?;
            Ok(Source::Script {
                text,
                name: "sbatch".to_string(),
                args: Vec::new(),
            })
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The options in a script's `#SBATCH` lines, parsed as sbatch's own.
fn directive_args(tool: Tool, text: &str) -> Result<SubmitArgs> {
    let words = sbatch_directives(text)?;
    if words.is_empty() {
        return Ok(SubmitArgs::default());
    }
    let argv = std::iter::once(tool.prog().to_string()).chain(words);
    let parsed = SbatchCli::try_parse_from(argv).map_err(|err| {
        anyhow!(
            "invalid directive found in batch script: {}",
            clap_errors::phrase(&err)
        )
    })?;
    let args = parsed.submit;
    if parsed.global.server.is_some() {
        bail!("invalid directive found in batch script: --server cannot be set in #SBATCH lines");
    }
    if args.wrap.is_some() {
        bail!("invalid directive found in batch script: --wrap cannot be set in #SBATCH lines");
    }
    if let Some(word) = args.script.as_ref() {
        bail!(
            "invalid directive found in batch script: unexpected argument '{}'",
            word.display()
        );
    }
    Ok(args)
}

impl SubmitArgs {
    /// These options (the command line) on top of `base` (the script's
    /// `#SBATCH` lines): as in sbatch, the command line wins.
    pub fn overlaid_on(self, base: SubmitArgs) -> SubmitArgs {
        let requeue_given = self.requeue || self.no_requeue;
        SubmitArgs {
            wrap: self.wrap.or(base.wrap),
            job_name: self.job_name.or(base.job_name),
            cpus_per_task: self.cpus_per_task.or(base.cpus_per_task),
            ntasks: self.ntasks.or(base.ntasks),
            mem: self.mem.or(base.mem),
            time: self.time.or(base.time),
            nodes: self.nodes.or(base.nodes),
            partition: self.partition.or(base.partition),
            qos: self.qos.or(base.qos),
            account: self.account.or(base.account),
            chdir: self.chdir.or(base.chdir),
            output: self.output.or(base.output),
            error: self.error.or(base.error),
            hold: self.hold || base.hold,
            requeue: if requeue_given {
                self.requeue
            } else {
                base.requeue
            },
            no_requeue: if requeue_given {
                self.no_requeue
            } else {
                base.no_requeue
            },
            nice: self.nice.or(base.nice),
            comment: self.comment.or(base.comment),
            export: self.export.or(base.export),
            gres: self.gres.or(base.gres),
            mem_per_cpu: self.mem_per_cpu.or(base.mem_per_cpu),
            ntasks_per_node: self.ntasks_per_node.or(base.ntasks_per_node),
            gpus: self.gpus.or(base.gpus),
            gpus_per_node: self.gpus_per_node.or(base.gpus_per_node),
            signal: self.signal.or(base.signal),
            open_mode: self.open_mode.or(base.open_mode),
            wckey: self.wckey.or(base.wckey),
            begin: self.begin.or(base.begin),
            dependency: self.dependency.or(base.dependency),
            array: self.array.or(base.array),
            exclusive: self.exclusive || base.exclusive,
            constraint: self.constraint.or(base.constraint),
            reservation: self.reservation.or(base.reservation),
            preemptible: self.preemptible || base.preemptible,
            // Sets are a list: the command line's replace the script's.
            alternative: if self.alternative.is_empty() {
                base.alternative
            } else {
                self.alternative
            },
            wait: self.wait || base.wait,
            parsable: self.parsable || base.parsable,
            json: self.json || base.json,
            script: self.script,
            script_args: self.script_args,
        }
    }
}

/// Checks every option and builds the request, with a fresh request id.
pub fn build_request(
    args: &SubmitArgs,
    source: &Source,
    caller: &Caller,
) -> Result<SubmitJobRequest> {
    let (command, default_name) = match source {
        Source::Wrap(command) => (command.clone(), wrap_job_name(command)),
        Source::Script { text, name, args } => (script_command(text, args), name.clone()),
    };
    refuse_unsupported(args)?;
    let nodes = args
        .nodes
        .as_deref()
        .map(parse_nodes)
        .transpose()?
        .unwrap_or(0);
    let tasks = tasks_per_node(args.ntasks, args.ntasks_per_node, nodes.max(1))?;
    let cpus = cpus(args.cpus_per_task, tasks)?;
    let mem_mb = match (&args.mem, &args.mem_per_cpu) {
        (Some(mem), _) => parse_mem_mb(mem)?,
        (None, Some(per_cpu)) => parse_mem_mb(per_cpu)?
            .checked_mul(u64::from(cpus.max(1)))
            .ok_or_else(|| {
                anyhow!(
                    "--mem-per-cpu={per_cpu} x {} CPUs is too much memory",
                    cpus.max(1)
                )
            })?,
        (None, None) => 0,
    };
    let mut gres = comma_list(args.gres.as_deref());
    if let Some(gpus) = args.gpus.as_deref() {
        gres.push(gpu_gres_over(gpus, nodes)?);
    }
    if let Some(gpus) = args.gpus_per_node.as_deref() {
        gres.push(gpu_gres(gpus)?);
    }
    let workdir = match &args.chdir {
        Some(dir) => caller.cwd.join(dir),
        None => caller.cwd.clone(),
    };
    let workdir = workdir
        .to_str()
        .ok_or_else(|| anyhow!("working directory {} is not UTF-8", workdir.display()))?
        .to_string();
    let warn = args
        .signal
        .as_deref()
        .map(berth_scheduler::signal::parse_warn_signal)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let spec = JobSpec {
        warn_signal: warn.map_or(0, |w| w.signal),
        warn_signal_before_s: warn.map_or(0, |w| w.before_s),
        warn_signal_batch_only: warn.is_some_and(|w| w.batch_only),
        alternatives: alternatives(&args.alternative, &gres, cpus, mem_mb)?,
        name: args.job_name.clone().unwrap_or(default_name),
        user: caller.user.clone(),
        command,
        workdir,
        env: match &args.export {
            Some(list) => parse_export(list, &caller.lookup_env)?,
            None => Default::default(),
        },
        cpus,
        mem_mb,
        nodes,
        time_limit_s: args
            .time
            .as_deref()
            .map(parse_time_limit)
            .transpose()?
            .unwrap_or(0),
        partitions: comma_list(args.partition.as_deref()),
        qos: args.qos.clone().unwrap_or_default(),
        account: args.account.clone().unwrap_or_default(),
        gres,
        stdout_path: args.output.clone().unwrap_or_default(),
        stderr_path: args.error.clone().unwrap_or_default(),
        requeue: args.requeue && !args.no_requeue,
        hold: args.hold,
        nice: args.nice.unwrap_or(0),
        comment: args.comment.clone().unwrap_or_default(),
        dependency: args
            .dependency
            .as_deref()
            .map(parse_dependency)
            .transpose()?
            .unwrap_or_default(),
        begin_ms: args
            .begin
            .as_deref()
            .map(|text| parse_begin(text, caller.now_ms))
            .transpose()?
            .unwrap_or(0),
        exclusive: args.exclusive,
        features: args
            .constraint
            .as_deref()
            .map(parse_constraint)
            .transpose()?
            .unwrap_or_default(),
        reservation: args.reservation.clone().unwrap_or_default(),
        preemptible: args.preemptible,
        array: match args.array.as_deref() {
            Some(text) => {
                berth_scheduler::array::parse(text)?;
                text.trim().to_string()
            }
            None => String::new(),
        },
        ..Default::default()
    };
    Ok(SubmitJobRequest {
        request_id: uuid::Uuid::new_v4().to_string(),
        spec: Some(spec),
    })
}

/// Options sbatch has that Berth's API cannot carry yet: refused by name,
/// never dropped. (`--open-mode=append` is what the agent does anyway, so
/// it is accepted.)
fn refuse_unsupported(args: &SubmitArgs) -> Result<()> {
    let not_yet = |option: &str, why: &str| -> Result<()> {
        bail!("{option} is not supported by Berth yet: {why}")
    };
    if let Some(mode) = &args.open_mode {
        match mode.as_str() {
            "append" | "a" => {}
            "truncate" | "t" => not_yet(
                "--open-mode=truncate",
                "output files are always appended to",
            )?,
            other => bail!("invalid --open-mode \"{other}\": expected append or truncate"),
        }
    }
    if args.wckey.is_some() {
        not_yet("--wckey", "the job record has no workload key")?;
    }
    Ok(())
}

/// `--dependency`, checked here with the scheduler's own parser so a typo
/// is caught before the submit; the cluster checks that the jobs exist.
/// Sent in the parser's canonical form.
pub fn parse_dependency(text: &str) -> Result<String> {
    let parsed = berth_scheduler::deps::parse(text).map_err(|e| anyhow!("--dependency: {e}"))?;
    Ok(parsed.to_string())
}

/// `--constraint`: features joined by `&` (Slurm's AND; `,` is read the
/// same). Slurm's OR (`|`), counts (`*`), brackets and parentheses are
/// refused by name: a Berth host either has all the features or not.
pub fn parse_constraint(text: &str) -> Result<Vec<String>> {
    if let Some(op) = text.chars().find(|c| "|*[]()".contains(*c)) {
        bail!(
            "--constraint {text:?}: '{op}' is not supported by Berth: list features joined by '&', all of which a host must have"
        );
    }
    let features: Vec<String> = text
        .split(['&', ','])
        .map(|f| f.trim().to_string())
        .collect();
    if features.iter().any(String::is_empty) {
        bail!("--constraint {text:?} has an empty feature name");
    }
    Ok(features)
}

/// `-G`/`--gpus-per-node` as a gres entry: `4` -> `gpu:4`,
/// `a100:2` -> `gpu:a100:2`.
pub fn gpu_gres(text: &str) -> Result<String> {
    gpu_gres_over(text, 1)
}

/// `--gpus=[TYPE:]N` for a job of `nodes` hosts as the per-host gres entry
/// the job carries: N must split evenly, since every host of a job takes
/// the same.
fn gpu_gres_over(text: &str, nodes: u32) -> Result<String> {
    let (kind, count) = match text.rsplit_once(':') {
        Some((kind, count)) => (Some(kind), count),
        None => (None, text),
    };
    let valid_kind = kind.is_none_or(|k| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    let total = match count.parse::<u32>() {
        Ok(n) if n > 0 && valid_kind => n,
        _ => bail!("invalid GPU count \"{text}\": expected [TYPE:]N with N at least 1"),
    };
    let nodes = nodes.max(1);
    if total % nodes != 0 {
        bail!(
            "--gpus={text} does not split evenly over {nodes} nodes: every host of a job takes \
             the same, use a multiple of {nodes} or --gpus-per-node"
        );
    }
    let each = total / nodes;
    Ok(match kind {
        Some(k) => format!("gpu:{k}:{each}"),
        None => format!("gpu:{each}"),
    })
}

/// Tasks on each host: `--ntasks-per-node`, or `--ntasks` spread evenly
/// over `nodes` (the busiest host's share, as Slurm's block distribution
/// gives it); `None` when neither is given.
fn tasks_per_node(ntasks: Option<u32>, per_node: Option<u32>, nodes: u32) -> Result<Option<u32>> {
    if ntasks == Some(0) {
        bail!("invalid --ntasks 0: must be at least 1");
    }
    if per_node == Some(0) {
        bail!("invalid --ntasks-per-node 0: must be at least 1");
    }
    match (ntasks, per_node) {
        (Some(n), Some(k)) if u64::from(n) > u64::from(k) * u64::from(nodes) => bail!(
            "--ntasks={n} does not fit --ntasks-per-node={k} on {nodes} node(s): at most {} tasks",
            u64::from(k) * u64::from(nodes)
        ),
        (_, Some(k)) => Ok(Some(k)),
        (Some(n), None) => Ok(Some(n.div_ceil(nodes))),
        (None, None) => Ok(None),
    }
}

/// CPUs for each host: its tasks times CPUs per task; 0 (the server's
/// default of 1) when neither is given.
fn cpus(per_task: Option<u32>, tasks: Option<u32>) -> Result<u32> {
    if per_task.is_none() && tasks.is_none() {
        return Ok(0);
    }
    let per_task = per_task.unwrap_or(1);
    let tasks = tasks.unwrap_or(1);
    if per_task == 0 {
        bail!("invalid --cpus-per-task 0: must be at least 1");
    }
    if tasks == 0 {
        bail!("invalid --ntasks 0: must be at least 1");
    }
    per_task
        .checked_mul(tasks)
        .ok_or_else(|| anyhow!("--ntasks {tasks} x --cpus-per-task {per_task} is too many CPUs"))
}

/// `-N`: "N" or "MIN-MAX" as sbatch takes it. A range allocates MIN hosts:
/// the scheduler starts a job on a fixed number of hosts.
fn parse_nodes(text: &str) -> Result<u32> {
    let number = |s: &str| -> Result<u32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            bail!("invalid node count \"{text}\": expected N or MIN-MAX");
        }
        s.parse()
            .map_err(|_| anyhow!("invalid node count \"{text}\": too large"))
    };
    let (min, max) = match text.trim().split_once('-') {
        Some((min, max)) => (number(min)?, number(max)?),
        None => {
            let n = number(text.trim())?;
            (n, n)
        }
    };
    if min == 0 || max < min {
        bail!("invalid node count \"{text}\": need at least 1 and MIN <= MAX");
    }
    Ok(min)
}

/// `--alt` sets over the job's own gres, CPUs and memory.
fn alternatives(
    texts: &[String],
    gres: &[String],
    cpus: u32,
    mem_mb: u64,
) -> Result<Vec<ResourceSet>> {
    let defaults = AltDefaults {
        gres: gres.to_vec(),
        cpus,
        mem_mb,
        nodes: 0,
    };
    texts
        .iter()
        .map(|text| parse_alt(text, &defaults).map_err(Into::into))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(args: &[&str]) -> SubmitArgs {
        let argv = std::iter::once("sbatch").chain(args.iter().copied());
        match SbatchCli::try_parse_from(argv) {
            Ok(cli) => cli.submit,
            Err(err) => panic!("{args:?}: {err}"),
        }
    }

    fn caller() -> Caller {
        Caller {
            cwd: PathBuf::from("/home/alice/work"),
            user: "alice".into(),
            lookup_env: Box::new(|name| (name == "EDITOR").then(|| "vi".to_string())),
            now_ms: CALLER_NOW_MS,
        }
    }

    fn spec(args: &SubmitArgs, source: &Source) -> Result<JobSpec> {
        let request = build_request(args, source, &caller())?;
        assert_eq!(
            uuid::Uuid::parse_str(&request.request_id)
                .map(|u| u.get_version_num())
                .ok(),
            Some(4)
        );
        request.spec.ok_or_else(|| anyhow!("no spec"))
    }

    fn wrap(cmd: &str) -> Source {
        Source::Wrap(cmd.into())
    }

    fn message(result: Result<JobSpec>) -> String {
        match result {
            Ok(spec) => panic!("accepted: {spec:?}"),
            Err(err) => format!("{err:#}"),
        }
    }

    #[test]
    fn every_option_reaches_the_spec() {
        let args = parse(&[
            "--wrap",
            "echo hi",
            "-J",
            "job",
            "-c",
            "2",
            "-n",
            "3",
            "--mem",
            "4G",
            "-t",
            "1-00:00:00",
            "-N",
            "1",
            "-p",
            "gpu, cpu",
            "-q",
            "high",
            "-A",
            "proj",
            "-D",
            "sub",
            "-o",
            "out-%j",
            "-e",
            "err-%j",
            "-H",
            "--requeue",
            "--nice=5",
            "--comment",
            "note",
            "--export",
            "ALL,A=1,EDITOR",
            "--gres",
            "gpu:a100:2",
        ]);
        let spec = spec(&args, &read_source(&args).expect("wrap")).expect("valid");
        assert_eq!(spec.name, "job");
        assert_eq!(spec.user, "alice");
        assert_eq!(spec.command, "echo hi");
        assert_eq!(spec.workdir, "/home/alice/work/sub");
        assert_eq!(spec.cpus, 6);
        assert_eq!(spec.mem_mb, 4096);
        assert_eq!(spec.nodes, 1);
        assert_eq!(spec.time_limit_s, 86400);
        assert_eq!(spec.partitions, ["gpu", "cpu"]);
        assert_eq!((spec.qos.as_str(), spec.account.as_str()), ("high", "proj"));
        assert_eq!(
            (spec.stdout_path.as_str(), spec.stderr_path.as_str()),
            ("out-%j", "err-%j")
        );
        assert!(spec.hold && spec.requeue);
        assert_eq!(spec.nice, 5);
        assert_eq!(spec.comment, "note");
        let env: HashMap<String, String> = [("A", "1"), ("EDITOR", "vi")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(spec.env, env);
        assert_eq!(spec.gres, ["gpu:a100:2"]);
    }

    /// 2026-12-03T16:45:30Z.
    const CALLER_NOW_MS: u64 = 1_796_316_330_000;

    #[test]
    fn scheduling_options_reach_the_spec() {
        let args = parse(&[
            "--wrap",
            "true",
            "-d",
            "afterok:3:4 , singleton",
            "-b",
            "now+1hour",
            "--exclusive",
            "-C",
            "ib&nvlink",
            "--reservation",
            "maint",
            "--preemptible",
        ]);
        let spec = spec(&args, &wrap("true")).expect("valid");
        assert_eq!(spec.dependency, "afterok:3:4,singleton");
        assert_eq!(spec.begin_ms, CALLER_NOW_MS + 3_600_000);
        assert!(spec.exclusive && spec.preemptible);
        assert_eq!(spec.features, ["ib", "nvlink"]);
        assert_eq!(spec.reservation, "maint");
        let any = spec_of(&["--wrap", "true", "--dependency=afterok:1?afternotok:2"]);
        assert_eq!(any.dependency, "afterok:1?afternotok:2");
        let begin = spec_of(&["--wrap", "true", "--begin=2026-12-24T08:00"]);
        assert_eq!(begin.begin_ms, 1_798_099_200_000);
        let none = spec_of(&["--wrap", "true"]);
        assert_eq!(
            (none.dependency.as_str(), none.begin_ms, none.exclusive),
            ("", 0, false)
        );
        assert!(none.features.is_empty() && none.reservation.is_empty() && !none.preemptible);
    }

    fn spec_of(args: &[&str]) -> JobSpec {
        let args = parse(args);
        spec(&args, &read_source(&args).expect("source")).expect("valid")
    }

    #[test]
    fn bad_scheduling_options_are_refused_by_name() {
        let refused = |args: &[&str]| message(spec(&parse(args), &wrap("true")));
        assert_eq!(
            refused(&["--wrap", "true", "-d", "afterok"]),
            "--dependency: dependency \"afterok\": afterok needs at least one job id (afterok:<job id>[:<job id>...])"
        );
        assert_eq!(
            refused(&["--wrap", "true", "-d", "after:3"]),
            "--dependency: dependency \"after:3\": unknown kind \"after\" (afterok, afterany, afternotok or singleton)"
        );
        assert!(refused(&["--wrap", "true", "--begin", "someday"])
            .starts_with("invalid --begin \"someday\": expected"));
        assert_eq!(
            refused(&["--wrap", "true", "-C", "ib|nvlink"]),
            "--constraint \"ib|nvlink\": '|' is not supported by Berth: list features joined by '&', all of which a host must have"
        );
        assert_eq!(
            refused(&["--wrap", "true", "-C", "ib&&x"]),
            "--constraint \"ib&&x\" has an empty feature name"
        );
    }

    #[test]
    fn defaults_leave_choices_to_the_server() {
        let spec = spec(&parse(&["--wrap", "true"]), &wrap("true")).expect("valid");
        assert_eq!(spec.name, "true");
        assert_eq!(
            (spec.cpus, spec.mem_mb, spec.nodes, spec.time_limit_s),
            (0, 0, 0, 0)
        );
        assert_eq!(spec.workdir, "/home/alice/work");
        assert!(spec.partitions.is_empty() && spec.env.is_empty());
        assert!(!spec.requeue && !spec.hold);
    }

    #[test]
    fn each_request_gets_its_own_id() {
        let args = parse(&["--wrap", "true"]);
        let a = build_request(&args, &wrap("true"), &caller()).expect("valid");
        let b = build_request(&args, &wrap("true"), &caller()).expect("valid");
        assert_ne!(a.request_id, b.request_id);
    }

    #[test]
    fn absolute_chdir_is_kept() {
        let spec =
            spec(&parse(&["-D", "/scratch", "--wrap", "true"]), &wrap("true")).expect("valid");
        assert_eq!(spec.workdir, "/scratch");
    }

    #[test]
    fn nice_without_a_value_is_100_and_later_flags_win() {
        assert_eq!(parse(&["--nice", "--wrap", "x"]).nice, Some(100));
        assert_eq!(parse(&["--nice=-5", "--wrap", "x"]).nice, Some(-5));
        let args = parse(&[
            "--requeue",
            "--no-requeue",
            "-J",
            "a",
            "-J",
            "b",
            "--wrap",
            "x",
        ]);
        assert!(!args.requeue && args.no_requeue);
        assert_eq!(args.job_name.as_deref(), Some("b"));
        assert!(parse(&["--no-requeue", "--requeue"]).requeue);
    }

    #[test]
    fn long_options_may_be_abbreviated_as_getopt_allows() {
        assert_eq!(parse(&["--job-n", "x"]).job_name.as_deref(), Some("x"));
    }

    #[test]
    fn bad_values_are_refused_with_their_text() {
        let args = |extra: &[&str]| parse(&[&["--wrap", "true"], extra].concat());
        assert!(message(spec(&args(&["-t", "1:xx"]), &wrap("true"))).contains("\"1:xx\""));
        assert!(message(spec(&args(&["--mem", "4X"]), &wrap("true"))).contains("\"4X\""));
        assert!(message(spec(&args(&["-N", "4-2"]), &wrap("true"))).contains("MIN <= MAX"));
        assert_eq!(
            message(spec(&args(&["-N", "2", "--gpus", "a100:3"]), &wrap("true"))),
            "--gpus=a100:3 does not split evenly over 2 nodes: every host of a job takes the same, \
             use a multiple of 2 or --gpus-per-node"
        );
        assert_eq!(
            message(spec(
                &args(&["-N", "2", "-n", "9", "--ntasks-per-node", "4"]),
                &wrap("true")
            )),
            "--ntasks=9 does not fit --ntasks-per-node=4 on 2 node(s): at most 8 tasks"
        );
        assert!(message(spec(&args(&["-N", "x"]), &wrap("true"))).contains("invalid node count"));
        assert!(message(spec(&args(&["-N", "0"]), &wrap("true"))).contains("at least 1"));
        assert!(message(spec(&args(&["-c", "0"]), &wrap("true"))).contains("--cpus-per-task 0"));
        assert!(message(spec(&args(&["--export", "1X=2"]), &wrap("true"))).contains("\"1X=2\""));
        assert_eq!(
            spec(&args(&["-N", "1-4"]), &wrap("true"))
                .map(|s| s.nodes)
                .ok(),
            Some(1)
        );
    }

    #[test]
    fn a_multi_node_job_asks_each_host_for_its_share() {
        let spec_of = |extra: &[&str]| {
            spec(
                &parse(&[&["--wrap", "true"], extra].concat()),
                &wrap("true"),
            )
            .expect("valid")
        };
        // 10 tasks over 4 hosts: the busiest host runs 3, 2 CPUs each.
        let s = spec_of(&["-N", "4", "-n", "10", "-c", "2"]);
        assert_eq!((s.nodes, s.cpus), (4, 6));
        let s = spec_of(&["-N", "2-8", "--ntasks-per-node", "4"]);
        assert_eq!((s.nodes, s.cpus), (2, 4));
        // --gpus is the job's total, --gpus-per-node each host's.
        assert_eq!(
            spec_of(&["-N", "2", "--gpus", "h100:8"]).gres,
            ["gpu:h100:4"]
        );
        assert_eq!(
            spec_of(&["-N", "2", "--gpus-per-node", "8"]).gres,
            ["gpu:8"]
        );
        // --mem is per host, as in Slurm.
        assert_eq!(spec_of(&["-N", "3", "--mem", "2G"]).mem_mb, 2048);
    }

    #[test]
    fn wrap_and_a_script_together_are_refused() {
        let err = read_source(&parse(&["--wrap", "true", "job.sh"])).expect_err("both");
        assert_eq!(
            err.to_string(),
            "script arguments are not permitted with --wrap"
        );
        let err = read_source(&parse(&["--wrap", "  "])).expect_err("blank");
        assert_eq!(err.to_string(), NO_COMMAND);
    }

    #[test]
    fn options_after_the_script_belong_to_the_script() {
        let args = parse(&["-J", "x", "job.sh", "--flag", "-J", "y", "z"]);
        assert_eq!(args.job_name.as_deref(), Some("x"));
        assert_eq!(args.script.as_deref(), Some(Path::new("job.sh")));
        assert_eq!(args.script_args, ["--flag", "-J", "y", "z"]);
    }

    #[test]
    fn script_directives_apply_under_the_command_line() {
        let text =
            "#!/bin/bash\n#SBATCH -J from-script --mem=2G\n#SBATCH -t 10 --requeue -p a\necho hi\n";
        let cli = parse(&["-J", "from-cli", "--no-requeue", "job.sh", "arg"]);
        let args = cli.overlaid_on(directive_args(Tool::Sbatch, text).expect("directives"));
        let source = Source::Script {
            text: text.into(),
            name: "job.sh".into(),
            args: vec!["arg".into()],
        };
        let spec = spec(&args, &source).expect("valid");
        assert_eq!(spec.name, "from-cli");
        assert_eq!(spec.mem_mb, 2048);
        assert_eq!(spec.time_limit_s, 600);
        assert_eq!(spec.partitions, ["a"]);
        assert!(!spec.requeue);
        assert!(
            spec.command.starts_with("exec /bin/bash /dev/fd/3 arg 3<<"),
            "{}",
            spec.command
        );
    }

    #[test]
    fn signal_from_the_command_line_or_a_directive() {
        let source = Source::Wrap("true".into());
        let spec_of = |argv: &[&str]| spec(&parse(argv), &source).expect("valid");
        let given = spec_of(&["--signal=B:USR1@90"]);
        assert_eq!(
            (
                given.warn_signal,
                given.warn_signal_before_s,
                given.warn_signal_batch_only
            ),
            (10, 90, true)
        );
        // Slurm's default: 60 s, every process.
        let default = spec_of(&["--signal", "SIGTERM"]);
        assert_eq!(
            (
                default.warn_signal,
                default.warn_signal_before_s,
                default.warn_signal_batch_only
            ),
            (15, 60, false)
        );
        let none = spec_of(&[]);
        assert_eq!((none.warn_signal, none.warn_signal_before_s), (0, 0));
        let text = "#!/bin/sh\n#SBATCH --signal=USR2@5\ntrue\n";
        let script = Source::Script {
            text: text.into(),
            name: "job.sh".into(),
            args: vec![],
        };
        let args =
            parse(&["job.sh"]).overlaid_on(directive_args(Tool::Sbatch, text).expect("directives"));
        let from_script = spec(&args, &script).expect("valid");
        assert_eq!(
            (from_script.warn_signal, from_script.warn_signal_before_s),
            (12, 5)
        );
        assert!(message(spec(&parse(&["--signal=USR1@x"]), &source))
            .contains("invalid --signal \"USR1@x\": seconds \"x\""));
    }

    #[test]
    fn alternative_sets_reach_the_spec_in_order_over_the_jobs_own_options() {
        let text = "#!/bin/sh\n#SBATCH --alt=gres=emu:palladium:4,cpus=8,mem=32G\n\
                    #SBATCH --alternative=cpus=16\necho hi\n";
        let source = Source::Script {
            text: text.into(),
            name: "job.sh".into(),
            args: vec![],
        };
        let args = parse(&["-c", "2", "--mem=1G", "--gres=gpu:1", "job.sh"])
            .overlaid_on(directive_args(Tool::Sbatch, text).expect("directives"));
        let two = spec(&args, &source).expect("valid");
        assert_eq!(two.alternatives.len(), 2);
        let first = &two.alternatives[0];
        assert_eq!(first.gres, ["emu:palladium:4"]);
        assert_eq!((first.cpus, first.mem_mb), (8, 32 * 1024));
        let second = &two.alternatives[1];
        assert_eq!(second.gres, ["gpu:1"]);
        assert_eq!((second.cpus, second.mem_mb), (16, 1024));
        // The command line's sets replace the script's.
        let args = parse(&["--alt", "cpus=3", "job.sh"])
            .overlaid_on(directive_args(Tool::Sbatch, text).expect("directives"));
        let one = spec(&args, &source).expect("valid");
        assert_eq!(one.alternatives.len(), 1);
        assert_eq!(one.alternatives[0].cpus, 3);
        // None given: none sent.
        assert!(spec_of(&["--wrap", "true"]).alternatives.is_empty());
    }

    #[test]
    fn a_bad_alternative_is_refused_by_name() {
        assert_eq!(
            message(spec(&parse(&["--alt", "gpus=2"]), &wrap("true"))),
            "invalid --alt \"gpus=2\": unknown key \"gpus\": expected gres, cpus, mem, nodes or partition"
        );
        let err = match directive_args(Tool::Sbatch, "#SBATCH --alt\n") {
            Ok(args) => panic!("accepted {args:?}"),
            Err(err) => err.to_string(),
        };
        assert!(
            err.starts_with("invalid directive found in batch script"),
            "{err}"
        );
    }

    #[test]
    fn a_script_names_the_job_after_its_file() {
        let source = Source::Script {
            text: "#!/bin/sh\necho hi\n".into(),
            name: "job.sh".into(),
            args: vec![],
        };
        let spec = spec(&SubmitArgs::default(), &source).expect("valid");
        assert_eq!(spec.name, "job.sh");
        assert_eq!(spec.command, "#!/bin/sh\necho hi\n");
    }

    #[test]
    fn bad_directives_are_named() {
        let err = |text: &str| match directive_args(Tool::Sbatch, text) {
            Ok(args) => panic!("accepted {args:?}"),
            Err(err) => err.to_string(),
        };
        assert_eq!(
            err("#SBATCH --mail-typo=x\n"),
            "invalid directive found in batch script: unrecognized option '--mail-typo'"
        );
        assert_eq!(
            err("#SBATCH -J a stray\n"),
            "invalid directive found in batch script: unexpected argument 'stray'"
        );
        assert!(err("#SBATCH --wrap true\n").contains("--wrap cannot be set"));
        assert!(err("#SBATCH --server h:1\n").contains("--server cannot be set"));
        assert!(err("#SBATCH -J 'open\n").contains("unterminated single quote"));
    }
}
