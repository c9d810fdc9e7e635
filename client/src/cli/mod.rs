//! Command-line surface: which tool was invoked, its arguments, and the
//! dispatch to one module per command.

pub mod admin;
pub mod cancel;
pub mod clap_errors;
pub mod cluster;
pub mod control;
pub mod events;
pub mod explain;
pub mod ids;
pub mod job;
pub mod output;
pub mod queue;
pub mod sim;
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
    Squeue,
    Scancel,
}

impl Tool {
    /// From argv[0]'s file name: a symlink named `sbatch` is sbatch.
    pub fn from_argv0(argv0: Option<&OsString>) -> Tool {
        let name = argv0
            .and_then(|a| Path::new(a).file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("berth");
        match name {
            "sbatch" => Tool::Sbatch,
            "squeue" => Tool::Squeue,
            "scancel" => Tool::Scancel,
            _ => Tool::Berth,
        }
    }

    /// The program name used in messages, as Slurm prefixes its own.
    pub fn prog(self) -> &'static str {
        match self {
            Tool::Berth => "berth",
            Tool::Sbatch => "sbatch",
            Tool::Squeue => "squeue",
            Tool::Scancel => "scancel",
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
    Submit(Box<submit::SubmitArgs>),
    /// List jobs (as squeue)
    Queue(queue::QueueArgs),
    /// Cancel jobs (as scancel)
    Cancel(cancel::CancelArgs),
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
}

/// `sbatch`: berth submit under Slurm's name.
#[derive(Parser, Debug)]
#[command(
    name = "sbatch",
    about = "Submit a batch job to Berth",
    args_override_self = true,
    infer_long_args = true
)]
pub struct SbatchCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub submit: submit::SubmitArgs,
}

/// `squeue`: berth queue under Slurm's name.
#[derive(Parser, Debug)]
#[command(
    name = "squeue",
    about = "List Berth jobs",
    args_override_self = true,
    infer_long_args = true,
    disable_help_flag = true
)]
pub struct SqueueCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub queue: queue::QueueArgs,
}

/// `scancel`: berth cancel under Slurm's name.
#[derive(Parser, Debug)]
#[command(
    name = "scancel",
    about = "Cancel Berth jobs",
    args_override_self = true,
    infer_long_args = true
)]
pub struct ScancelCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(flatten)]
    pub cancel: cancel::CancelArgs,
}

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
        Tool::Squeue => {
            let cli = SqueueCli::try_parse_from(argv)?;
            (cli.global, Command::Queue(cli.queue))
        }
        Tool::Scancel => {
            let cli = ScancelCli::try_parse_from(argv)?;
            (cli.global, Command::Cancel(cli.cancel))
        }
    };
    Ok(Invocation { global, command })
}

/// Runs a parsed command. Everything the user typed is checked before the
/// first connection, so bad input never reaches the cluster.
pub async fn run(tool: Tool, invocation: Invocation) -> anyhow::Result<ExitCode> {
    let global = invocation.global;
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definitions_are_consistent() {
        BerthCli::command().debug_assert();
        SbatchCli::command().debug_assert();
        SqueueCli::command().debug_assert();
        ScancelCli::command().debug_assert();
    }

    #[test]
    fn argv0_picks_the_tool() {
        let tool = |s: &str| Tool::from_argv0(Some(&OsString::from(s)));
        assert_eq!(tool("/usr/local/bin/sbatch"), Tool::Sbatch);
        assert_eq!(tool("squeue"), Tool::Squeue);
        assert_eq!(tool("./scancel"), Tool::Scancel);
        assert_eq!(tool("/opt/berth/bin/berth"), Tool::Berth);
        assert_eq!(tool("sbatch.old"), Tool::Berth);
        assert_eq!(Tool::from_argv0(None), Tool::Berth);
    }
}
