//! Command-line surface: which tool was invoked, its arguments, and the
//! dispatch to one module per command.

pub mod admin;
pub mod cancel;
pub mod clap_errors;
pub mod cluster;
pub mod control;
pub mod events;
pub mod explain;
pub mod generate;
pub mod ids;
pub mod job;
pub mod output;
pub mod queue;
pub mod sacct;
pub mod sacctmgr;
pub mod salloc;
pub mod scontrol;
pub mod scontrol_update;
pub mod sim;
pub mod sinfo;
pub mod sprio;
pub mod srun;
pub mod srun_remote;
pub mod submit;

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// The name the binary was called by, which picks its personality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Berth,
    Sbatch,
    Srun,
    Salloc,
    Squeue,
    Scancel,
    Sacct,
    Sacctmgr,
    Scontrol,
    Sinfo,
    Sprio,
}

/// Every name the binary answers to.
pub const ALL_TOOLS: [Tool; 11] = [
    Tool::Berth,
    Tool::Sbatch,
    Tool::Srun,
    Tool::Salloc,
    Tool::Squeue,
    Tool::Scancel,
    Tool::Sacct,
    Tool::Sacctmgr,
    Tool::Scontrol,
    Tool::Sinfo,
    Tool::Sprio,
];

impl Tool {
    /// From argv[0]'s file name: a symlink named `sbatch` is sbatch.
    pub fn from_argv0(argv0: Option<&OsString>) -> Tool {
        let name = argv0
            .and_then(|a| Path::new(a).file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("berth");
        ALL_TOOLS
            .iter()
            .copied()
            .find(|t| t.prog() == name)
            .unwrap_or(Tool::Berth)
    }

    /// The program name used in messages, as Slurm prefixes its own.
    pub fn prog(self) -> &'static str {
        match self {
            Tool::Berth => "berth",
            Tool::Sbatch => "sbatch",
            Tool::Srun => "srun",
            Tool::Salloc => "salloc",
            Tool::Squeue => "squeue",
            Tool::Scancel => "scancel",
            Tool::Sacct => "sacct",
            Tool::Sacctmgr => "sacctmgr",
            Tool::Scontrol => "scontrol",
            Tool::Sinfo => "sinfo",
            Tool::Sprio => "sprio",
        }
    }
}

/// Options every command takes.
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Berth servers to try, in order: comma-separated host:port
    /// [env: BERTH_SERVER] [default: 127.0.0.1:7101]
    #[arg(long, global = true, value_name = "HOST:PORT[,...]")]
    pub server: Option<String>,
    /// The token to authenticate with (from `berth admin token issue`)
    /// [env: BERTH_TOKEN]
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The cluster's CA certificate (PEM): connect with TLS
    /// [env: BERTH_CA]
    #[arg(long, global = true, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
}

/// `berth`: the full CLI.
#[derive(Parser, Debug)]
#[command(
    name = "berth",
    version,
    about = "Berth: a Raft-replicated batch scheduler that speaks Slurm",
    args_override_self = true,
    infer_long_args = true
)]
pub struct BerthCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Submit a batch job (as sbatch)
    #[command(visible_alias = "sbatch")]
    Submit(Box<submit::SubmitArgs>),
    /// List jobs (as squeue)
    #[command(visible_alias = "squeue")]
    Queue(queue::QueueArgs),
    /// Cancel jobs (as scancel)
    #[command(visible_alias = "scancel")]
    Cancel(cancel::CancelArgs),
    /// Accounting: finished and live jobs (as sacct)
    Sacct(sacct::SacctArgs),
    /// QOS, accounts, users and associations (as sacctmgr)
    Sacctmgr(sacctmgr::SacctmgrArgs),
    /// Show jobs, nodes and partitions; hold, release, requeue (as scontrol)
    Scontrol(scontrol::ScontrolArgs),
    /// Partitions and hosts (as sinfo)
    Sinfo(sinfo::SinfoArgs),
    /// Priority factors of pending jobs at the last pass (as sprio)
    Sprio(sprio::SprioArgs),
    /// Run a step inside a batch job (as srun)
    Srun(srun::SrunArgs),
    /// Shell completions for berth or one of its Slurm names
    Completions(generate::CompletionsArgs),
    /// Write man pages for berth and its Slurm names into a directory
    Man(generate::ManArgs),
    /// Hold pending jobs (as scontrol hold)
    Hold(control::ControlArgs),
    /// Release held jobs (as scontrol release)
    Release(control::ReleaseArgs),
    /// Requeue running or finished jobs (as scontrol requeue)
    Requeue(control::RequeueArgs),
    /// Show one job (as scontrol show job)
    Job(job::JobArgs),
    /// Say why a job is where it is, host by host
    Explain(explain::ExplainArgs),
    /// A job's history: submitted, priority, started, requeued, ended
    Events(events::EventsArgs),
    /// Cluster membership and health
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Simulate the scheduler: scenarios, trace replay, pass benchmark
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Cluster administration: backups
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Allocate hosts and run a command in the allocation (as salloc)
    #[command(hide = true)]
    Salloc(salloc::SallocArgs),
}

/// Declares the parser of one Slurm name: the global options and that
/// tool's own, flattened.
macro_rules! slurm_cli {
    ($name:ident, $prog:literal, $about:literal, $field:ident: $args:ty $(, $attr:meta)*) => {
        #[derive(Parser, Debug)]
        #[command(
            name = $prog,
            about = $about,
            args_override_self = true,
            infer_long_args = true
            $(, $attr)*
        )]
        pub struct $name {
            #[command(flatten)]
            pub global: GlobalArgs,
            #[command(flatten)]
            pub $field: $args,
        }
    };
}

slurm_cli!(SbatchCli, "sbatch", "Submit a batch job to Berth", submit: submit::SubmitArgs);
slurm_cli!(SrunCli, "srun", "Run a job step inside a Berth batch job", srun: srun::SrunArgs);
slurm_cli!(SallocCli, "salloc", "Allocate Berth hosts and run a command in the allocation", salloc: salloc::SallocArgs);
slurm_cli!(SqueueCli, "squeue", "List Berth jobs", queue: queue::QueueArgs, disable_help_flag = true);
slurm_cli!(ScancelCli, "scancel", "Cancel Berth jobs", cancel: cancel::CancelArgs);
slurm_cli!(SacctCli, "sacct", "Berth job accounting", sacct: sacct::SacctArgs);
slurm_cli!(SacctmgrCli, "sacctmgr", "Berth QOS, accounts, users and associations", sacctmgr: sacctmgr::SacctmgrArgs);
slurm_cli!(ScontrolCli, "scontrol", "Show and control Berth jobs, nodes and partitions", scontrol: scontrol::ScontrolArgs);
slurm_cli!(SinfoCli, "sinfo", "Berth partitions and hosts", sinfo: sinfo::SinfoArgs, disable_help_flag = true);
slurm_cli!(SprioCli, "sprio", "Priority factors of pending Berth jobs", sprio: sprio::SprioArgs, disable_help_flag = true);

/// A parsed command line.
#[derive(Debug)]
pub struct Invocation {
    pub global: GlobalArgs,
    pub command: Command,
}

/// Parses argv for the tool it was invoked as.
pub fn parse(tool: Tool, argv: &[OsString]) -> Result<Invocation, clap::Error> {
    let (global, command) = match tool {
        Tool::Berth => {
            let cli = BerthCli::try_parse_from(argv)?;
            (cli.global, cli.command)
        }
        Tool::Sbatch => {
            let cli = SbatchCli::try_parse_from(argv)?;
            (cli.global, Command::Submit(Box::new(cli.submit)))
        }
        Tool::Srun => {
            let cli = SrunCli::try_parse_from(argv)?;
            (cli.global, Command::Srun(cli.srun))
        }
        Tool::Salloc => {
            let cli = SallocCli::try_parse_from(argv)?;
            (cli.global, Command::Salloc(cli.salloc))
        }
        Tool::Squeue => {
            let cli = SqueueCli::try_parse_from(argv)?;
            (cli.global, Command::Queue(cli.queue))
        }
        Tool::Scancel => {
            let cli = ScancelCli::try_parse_from(argv)?;
            (cli.global, Command::Cancel(cli.cancel))
        }
        Tool::Sacct => {
            let cli = SacctCli::try_parse_from(argv)?;
            (cli.global, Command::Sacct(cli.sacct))
        }
        Tool::Sacctmgr => {
            let cli = SacctmgrCli::try_parse_from(argv)?;
            (cli.global, Command::Sacctmgr(cli.sacctmgr))
        }
        Tool::Scontrol => {
            let cli = ScontrolCli::try_parse_from(argv)?;
            (cli.global, Command::Scontrol(cli.scontrol))
        }
        Tool::Sinfo => {
            let cli = SinfoCli::try_parse_from(argv)?;
            (cli.global, Command::Sinfo(cli.sinfo))
        }
        Tool::Sprio => {
            let cli = SprioCli::try_parse_from(argv)?;
            (cli.global, Command::Sprio(cli.sprio))
        }
    };
    Ok(Invocation { global, command })
}

/// Fills what neither a flag nor the environment gave from the client
/// config file, if there is one (flag, then environment, then file).
pub(crate) fn with_config_file(global: GlobalArgs) -> anyhow::Result<GlobalArgs> {
    let reach = berth_client::config_file::fill(berth_client::config_file::Reach {
        server: global.server,
        token: global.token,
        ca: global.ca,
    })?;
    Ok(GlobalArgs {
        server: reach.server,
        token: reach.token,
        ca: reach.ca,
    })
}

/// Runs a parsed command. Everything the user typed is checked before the
/// first connection, so bad input never reaches the cluster.
pub async fn run(tool: Tool, invocation: Invocation) -> anyhow::Result<ExitCode> {
    let local = matches!(
        invocation.command,
        Command::Sim(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Srun(_)
            | Command::Salloc(_)
    );
    let global = if local {
        invocation.global
    } else {
        with_config_file(invocation.global)?
    };
    if global.token.is_some() {
        berth_client::set_token(global.token.clone());
    }
    berth_client::set_ca_file(global.ca.as_deref())?;
    match invocation.command {
        Command::Submit(args) => submit::run(tool, &global, *args).await,
        Command::Queue(args) => queue::run(&global, args).await,
        Command::Cancel(args) => cancel::run(tool, &global, args).await,
        Command::Hold(args) => control::hold(&global, args).await,
        Command::Release(args) => control::release(&global, args).await,
        Command::Requeue(args) => control::requeue(&global, args).await,
        Command::Job(args) => job::run(&global, args).await,
        Command::Explain(args) => explain::run(&global, args).await,
        Command::Events(args) => events::run(&global, args).await,
        Command::Cluster(command) => cluster::run(&global, command).await,
        Command::Sim(command) => sim::run(command),
        Command::Admin(command) => admin::run(&global, command).await,
        Command::Sacct(args) => sacct::run(&global, args).await,
        Command::Sacctmgr(args) => sacctmgr::run(&global, args).await,
        Command::Scontrol(args) => scontrol::run(&global, args).await,
        Command::Sinfo(args) => sinfo::run(&global, args).await,
        Command::Sprio(args) => sprio::run(&global, args).await,
        Command::Srun(args) => srun::run(&global, args).await,
        Command::Salloc(args) => salloc::salloc(&global, args).await,
        Command::Completions(args) => generate::completions(args),
        Command::Man(args) => generate::man(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definitions_are_consistent() {
        for tool in ALL_TOOLS {
            generate::command_of(tool).debug_assert();
        }
    }

    #[test]
    fn argv0_picks_the_tool() {
        let tool = |s: &str| Tool::from_argv0(Some(&OsString::from(s)));
        assert_eq!(tool("/usr/local/bin/sbatch"), Tool::Sbatch);
        assert_eq!(tool("squeue"), Tool::Squeue);
        assert_eq!(tool("./scancel"), Tool::Scancel);
        assert_eq!(tool("/opt/berth/bin/berth"), Tool::Berth);
        assert_eq!(tool("sbatch.old"), Tool::Berth);
        for t in ALL_TOOLS {
            assert_eq!(tool(&format!("/usr/bin/{}", t.prog())), t);
        }
        assert_eq!(Tool::from_argv0(None), Tool::Berth);
    }
}
