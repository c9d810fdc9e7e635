//! `berth-agent`: the Berth compute-host agent.
//!
//! ```text
//! berth-agent --config FILE
//! berth-agent --server ADDR[,ADDR...] --host NAME [--work-dir DIR]
//! berth-agent --simulate N --server ADDR[,ADDR...] [--sim-heartbeat-ms MS]
//! berth-agent --print-inventory [--config FILE]
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
    /// Directory of allocation records, for re-adopting jobs after a
    /// restart (this host's records go in DIR/HOST) [default:
    /// /var/lib/berth-agent].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Run N simulated hosts (sim-00001...) in this process instead of
    /// this host's agent, for scale tests. Jobs "run" for their
    /// BERTH_SIM_RUNTIME_S environment value (default 30 s).
    #[arg(long, value_name = "N")]
    simulate: Option<u32>,
    /// Heartbeat period of simulated hosts [default: the server's].
    #[arg(long, value_name = "MS", requires = "simulate")]
    sim_heartbeat_ms: Option<u64>,
    /// Simulated heartbeats come up to this percentage early or late.
    #[arg(long, value_name = "PCT", default_value_t = 10)]
    sim_jitter_pct: u32,
    /// Simulated hosts sharing one connection.
    #[arg(long, value_name = "K", default_value_t = berth_agent::simulate::DEFAULT_HOSTS_PER_CONNECTION)]
    sim_hosts_per_connection: u32,
    /// Prefix of simulated host names.
    #[arg(long, value_name = "TEXT", default_value = "sim-")]
    sim_prefix: String,
    /// Discover this host once (CPUs, memory, GPUs through NVML and the
    /// AMD KFD topology, emulators with their health checks, as the config
    /// sets them), print what it would register and whether it would be
    /// drained, and exit. Needs no server.
    #[arg(long, conflicts_with = "simulate")]
    print_inventory: bool,
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
    if cli.print_inventory {
        let settings = file.inventory_settings(&origin)?;
        let report = tokio::task::spawn_blocking(move || {
            berth_agent::inventory::Discoverer::new(settings).discover()
        })
        .await
        .context("discovery thread")??;
        print!("{}", berth_agent::inventory::report_text(&report));
        return Ok(());
    }
    let env_servers = std::env::var(SERVER_ENV).ok();
    let config = Config::resolve(
        file,
        &origin,
        Overrides {
            servers: cli.servers,
            host: cli.host,
            work_dir: cli.work_dir,
            state_dir: cli.state_dir,
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

    if let Some(hosts) = cli.simulate {
        berth_agent::credentials::set(config.cluster_secret.as_deref());
        berth_auth::tls::set_client_ca(config.tls_ca.as_deref());
        let options = berth_agent::simulate::SimOptions {
            hosts,
            servers: config.servers,
            heartbeat_interval_ms: cli.sim_heartbeat_ms,
            jitter_pct: cli.sim_jitter_pct,
            hosts_per_connection: cli.sim_hosts_per_connection,
            prefix: cli.sim_prefix,
        };
        berth_agent::simulate::run(options, shutdown).await?;
        return Ok(());
    }
    berth_agent::agent::run(config, shutdown).await?;
    Ok(())
}
