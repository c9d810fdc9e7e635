//! berthd: run one Berth controller node (`--config FILE`), or a whole
//! local cluster for trying Berth out (`berthd dev`), or look after a
//! node's store (`berthd store check DIR`).

mod store_check;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use berth_node::config::NodeConfig;
use berth_node::dev::{self, DevArgs};
use clap::{Parser, Subcommand};
use tokio::sync::watch;

#[derive(Parser)]
#[command(name = "berthd", version, about = "Berth controller node")]
struct Cli {
    /// Run one node from this config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a local cluster on loopback: 3 nodes and 2 agents as child
    /// processes. Ctrl-C stops everything it started.
    Dev(DevArgs),
    /// Look after a node's store on disk.
    #[command(subcommand)]
    Store(StoreCmd),
}

#[derive(Subcommand)]
enum StoreCmd {
    /// Verify a store read-only (format, log, vote, state tables, indexes,
    /// counters, snapshot) and print what it holds. Safe beside a running
    /// node. Exits non-zero when something is wrong.
    Check {
        /// The node's data_dir, or the `raft` store folder inside it.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Store commands need no runtime and must not start one that could
    // touch the store.
    if let Some(Cmd::Store(StoreCmd::Check { dir })) = &cli.command {
        return match store_check::run(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("berthd: error: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berthd: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match (cli.command, cli.config) {
            (Some(Cmd::Dev(args)), _) => dev::run(args).await,
            (Some(Cmd::Store(StoreCmd::Check { dir })), _) => store_check::run(&dir),
            (None, Some(path)) => run_node(path).await,
            (None, None) => Err(anyhow::anyhow!(
                "give --config FILE to run a node, or `berthd dev`"
            )),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berthd: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, leaving out a cause whose text the
/// message before it already includes (our error types name their cause).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

async fn run_node(path: PathBuf) -> anyhow::Result<()> {
    init_tracing();
    let config = NodeConfig::load(&path)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        tracing::info!("stop signal received; shutting down");
        let _ = stop_tx.send(true);
    });
    berth_node::server::run(config, stop_rx)
        .await
        .context("node stopped with an error")
}

async fn wait_for_stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
