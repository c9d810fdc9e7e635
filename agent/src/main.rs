//! `berth-agent`: the Berth compute-host agent.
//!
//! ```text
//! berth-agent --config FILE
//! berth-agent --server ADDR[,ADDR...] --host NAME [--work-dir DIR]
//! ```
//!
//! Flags override the config file; the server list falls back to
//! `BERTH_SERVER`. SIGINT or SIGTERM stops all jobs (grace at most 5 s) and
//! exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use berth_agent::config::{Config, FileConfig, Overrides, SERVER_ENV};
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "berth-agent", version, about = "Berth compute-host agent")]
struct Cli {
    /// TOML config file (keys: host, servers, work_dir,
    /// heartbeat_interval_ms, stop_grace_s, cpus, memory_mb).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// berthd servers to connect to, tried in order [default: from the
    /// config file, else $BERTH_SERVER].
    #[arg(long = "server", value_name = "ADDR[,ADDR...]", value_delimiter = ',')]
    servers: Vec<String>,
    /// This host's name in the cluster [default: the machine's hostname].
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Working directory for jobs that do not name one [default: the
    /// current directory].
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line with the whole cause chain, no backtrace noise.
            eprintln!("berth-agent: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (file, origin) = match &cli.config {
        Some(path) => (FileConfig::load(path)?, path.display().to_string()),
        None => (FileConfig::default(), "command line".to_string()),
    };
    let env_servers = std::env::var(SERVER_ENV).ok();
    let config = Config::resolve(
        file,
        &origin,
        Overrides {
            servers: cli.servers,
            host: cli.host,
            work_dir: cli.work_dir,
        },
        env_servers.as_deref(),
    )?;

    // Install the handlers before anything runs, so an early signal still
    // takes the orderly path.
    let mut sigint = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = sigint.recv() => tracing::info!("SIGINT received"),
            _ = sigterm.recv() => tracing::info!("SIGTERM received"),
        }
    };

    berth_agent::agent::run(config, shutdown).await?;
    Ok(())
}
