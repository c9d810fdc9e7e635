//! berthd: run one Berth controller node (`--config FILE`), or a whole
//! local cluster for trying Berth out (`berthd dev`), or look after a
//! node's store (`berthd store check DIR`, `berthd store restore`).

mod store_check;
mod store_restore;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth_node::config::NodeConfig;
use berth_node::config_overlay;
use berth_node::dev::{self, DevArgs};
use clap::{Parser, Subcommand};
use tokio::sync::watch;

/// mimalloc rather than glibc's malloc: the scheduler pass, the JSON of
/// every request and log entry and openraft's bookkeeping make many small,
/// short-lived allocations (see `mimalloc` in the workspace Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process, before anything
/// large is allocated.
///
/// mimalloc asks for huge pages on its arenas (`MADV_HUGEPAGE`), so on a
/// kernel whose THP setting is `madvise` or `always` each fresh 2 MiB of
/// heap is faulted in, and zeroed, at once. A node's heap grows all the
/// time under submits (jobs, log entries, memtables), and at 64 clients
/// the kernel's page zeroing took 9% of all three nodes' CPU (`perf`,
/// `clear_page_erms` under `do_huge_pmd_anonymous_page`); with THP off it
/// does not show. A kernel that refuses the call keeps THP, which is only
/// slower, so the result is not checked.
fn disable_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integers only and reads or writes
    // none of this process's memory.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[derive(Parser)]
#[command(name = "berthd", version, about = "Berth controller node")]
struct Cli {
    /// Run one node from this config file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override one config key, e.g. `--set scheduler.pass_interval_ms=500`
    /// (over `BERTH_` environment variables, which are over the file).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
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
    /// Make a new node's store from a backup file (`berth admin backup`):
    /// verifies the file, refuses a non-empty data directory, and writes a
    /// store holding the backed-up state under the new cluster's
    /// membership. Start this node with it and the other members with
    /// empty data directories; they receive the state as a Raft snapshot.
    Restore {
        /// The backup file.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// Take data_dir, node_id and members from this node's config file.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["data_dir", "node_id", "members"])]
        config: Option<PathBuf>,
        /// The new node's data_dir (absent or empty).
        #[arg(long, value_name = "DIR", required_unless_present = "config")]
        data_dir: Option<PathBuf>,
        /// The new node's id; one of the members.
        #[arg(long, value_name = "N", required_unless_present = "config")]
        node_id: Option<u64>,
        /// Every voter of the new cluster: ID=HOST:PORT, comma-separated
        /// or repeated.
        #[arg(
            long,
            value_name = "ID=HOST:PORT,...",
            value_delimiter = ',',
            required_unless_present = "config"
        )]
        members: Vec<String>,
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
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    // Store commands need no runtime and must not start one that could
    // touch the store.
    if let Some(Cmd::Store(command)) = &cli.command {
        return match run_store_command(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("berthd: error: {}", one_line(&e));
                ExitCode::FAILURE
            }
        };
    }
    // A node's config is read before its runtime starts: it says how many
    // threads the runtime has.
    let run = match (cli.command, cli.config) {
        (Some(Cmd::Dev(args)), _) => Run::Dev(args),
        (Some(Cmd::Store(_)), _) => unreachable!("store commands returned above"),
        (None, Some(path)) => {
            init_tracing();
            match load_node_config(&path, &cli.sets) {
                Ok(config) => Run::Node(Box::new(config)),
                Err(e) => {
                    eprintln!("berthd: error: {}", one_line(&e));
                    return ExitCode::FAILURE;
                }
            }
        }
        (None, None) => {
            eprintln!("berthd: error: give --config FILE to run a node, or `berthd dev`");
            return ExitCode::FAILURE;
        }
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Run::Node(config) = &run {
        if config.worker_threads > 0 {
            builder.worker_threads(config.worker_threads);
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berthd: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match run {
            Run::Dev(args) => dev::run(args).await,
            Run::Node(config) => run_node(*config).await,
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

fn run_store_command(command: &StoreCmd) -> anyhow::Result<()> {
    match command {
        StoreCmd::Check { dir } => store_check::run(dir),
        StoreCmd::Restore {
            from,
            config,
            data_dir,
            node_id,
            members,
        } => {
            let target = match (config, data_dir, node_id) {
                (Some(config), _, _) => store_restore::Target::from_config(config)?,
                (None, Some(data_dir), Some(node_id)) => {
                    store_restore::Target::from_flags(data_dir.clone(), *node_id, members)?
                }
                // clap requires these unless --config is given.
                _ => anyhow::bail!("give --config FILE, or --data-dir, --node-id and --members"),
            };
            store_restore::run(from, &target)
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

/// What `berthd` was asked to run, once its arguments are read.
enum Run {
    Dev(DevArgs),
    Node(Box<NodeConfig>),
}

/// The node's config file with `BERTH_` variables and `--set` flags over it.
fn load_node_config(path: &Path, sets: &[String]) -> anyhow::Result<NodeConfig> {
    let mut settings = config_overlay::from_env(std::env::vars());
    for flag in sets {
        settings.push(config_overlay::from_flag(flag).map_err(anyhow::Error::msg)?);
    }
    Ok(NodeConfig::load_with(path, &settings)?)
}

async fn run_node(config: NodeConfig) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_stop_signal().await;
        tracing::info!("stop signal received; shutting down");
        if let Err(e) = berth_node::sd_notify::stopping() {
            tracing::warn!(error = %e, "could not tell systemd the node is stopping");
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn restore_takes_a_config_or_all_three_flags() {
        Cli::command().debug_assert();
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["berthd", "store", "restore", "--from", "b.backup"]
                    .iter()
                    .chain(args),
            )
        };
        assert!(parse(&["--config", "node-1.toml"]).is_ok());
        let flags = parse(&[
            "--data-dir",
            "/d",
            "--node-id",
            "1",
            "--members",
            "1=h1:7101,2=h2:7101",
        ])
        .expect("flags");
        match flags.command {
            Some(Cmd::Store(StoreCmd::Restore { members, .. })) => {
                assert_eq!(members, vec!["1=h1:7101", "2=h2:7101"])
            }
            _ => panic!("not a restore"),
        }
        assert!(parse(&[]).is_err(), "nothing says where to restore");
        assert!(parse(&["--data-dir", "/d", "--node-id", "1"]).is_err());
        assert!(parse(&["--config", "c.toml", "--node-id", "1"]).is_err());
    }
}
