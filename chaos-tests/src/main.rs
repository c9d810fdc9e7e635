//! berth-drill: fault drills against a real Berth cluster.
//!
//! `berth-drill failover` starts a local 3-node cluster (processes on
//! loopback), then repeatedly kills the leader with SIGKILL, measures the
//! time until the survivors agree on a new leader, and restarts the killed
//! node. It prints each round and the distribution.
//!
//! `berth-drill snapshot-transfer --jobs N` restores an N-job state on node
//! 1, adds an empty node 2 as a learner and checks that the chunked Raft
//! snapshot brings it to an identical state (see `snapshot_transfer`).
//!
//! `berth-drill bench raft-writes` measures acknowledged submits per second
//! and their latency on a 3-node cluster next to a 3-member etcd (see
//! `bench`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_chaos::harness::{ClusterOptions, LocalCluster};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "berth-drill",
    version,
    about = "Fault drills against a Berth cluster"
)]
struct Cli {
    #[command(subcommand)]
    drill: Drill,
}

#[derive(Subcommand)]
enum Drill {
    /// Kill the leader N times; report time to a new agreed leader.
    Failover {
        /// Number of leader kills.
        #[arg(long, default_value_t = 10)]
        rounds: u32,
        /// Directory for the cluster's data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Restore a large state on node 1, add an empty node 2 as a learner,
    /// and check it is brought up to date by a chunked snapshot and ends
    /// identical; report sizes, times and peak memory.
    SnapshotTransfer {
        /// Jobs in the state.
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
        /// How long the learner may take to catch up, in seconds.
        #[arg(long, default_value_t = 900)]
        catch_up_deadline_s: u64,
        /// Directory for the stores and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Benchmarks against a reference system, measured in the same run.
    Bench {
        #[command(subcommand)]
        bench: Bench,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Acknowledged submits/s and p50/p99 latency on a 3-node Berth cluster
    /// next to etcd puts/s on a 3-member etcd, per client concurrency.
    RaftWrites {
        /// Concurrent clients per level, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
        clients: Vec<usize>,
        /// Measured seconds per level and system.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Seconds run before measuring, per level and system.
        #[arg(long, default_value_t = 3)]
        warmup_seconds: u64,
        /// Where requests go: round-robin over every member, or the leader.
        #[arg(long, value_enum, default_value_t = berth_chaos::bench::Target::Any)]
        to: berth_chaos::bench::Target,
        /// Run Berth alone (no etcd), e.g. while profiling it.
        #[arg(long)]
        berth_only: bool,
        /// Directory for both clusters' data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

/// Longest the drill waits for any leader before it gives up.
const LEADER_DEADLINE: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berth-drill: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth-drill: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.drill {
        Drill::Failover { rounds, dir } => failover(rounds, dir).await,
        Drill::SnapshotTransfer {
            jobs,
            catch_up_deadline_s,
            dir,
        } => {
            let (_tmp, dir) = berth_chaos::snapshot_transfer::work_dir(dir)?;
            println!("snapshot-transfer: {jobs} jobs under {}", dir.display());
            let report = berth_chaos::snapshot_transfer::run(
                &dir,
                jobs,
                Duration::from_secs(catch_up_deadline_s),
            )
            .await?;
            println!("{report}");
            Ok(())
        }
        Drill::Bench {
            bench:
                Bench::RaftWrites {
                    clients,
                    seconds,
                    warmup_seconds,
                    to,
                    berth_only,
                    dir,
                },
        } => {
            berth_chaos::bench::raft_writes(&berth_chaos::bench::BenchOptions {
                clients,
                seconds,
                warmup_seconds,
                target: to,
                dir,
                berth_only,
            })
            .await
        }
    }
}

async fn failover(rounds: u32, dir: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = dir.unwrap_or_else(|| tmp.path().to_path_buf());
    let options = ClusterOptions {
        agents: 0,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::start(&dir, &options).context("starting the cluster")?;
    let mut samples_ms = Vec::new();
    for round in 1..=rounds {
        // Start each round from a steady state: every node caught up, as a
        // cluster in service would be.
        cluster.wait_for_leader(LEADER_DEADLINE).await?;
        let leader = cluster.wait_caught_up(LEADER_DEADLINE).await?;
        let killed_at = Instant::now();
        cluster.kill_node(leader)?;
        let new_leader = cluster.wait_for_leader(LEADER_DEADLINE).await?;
        let ms = killed_at.elapsed().as_secs_f64() * 1000.0;
        println!("round {round}: killed node {leader}, node {new_leader} leads after {ms:.0} ms");
        samples_ms.push(ms);
        cluster.start_stopped_nodes()?;
    }
    samples_ms.sort_by(f64::total_cmp);
    if let (Some(min), Some(max)) = (samples_ms.first(), samples_ms.last()) {
        let p50 = samples_ms[samples_ms.len() / 2];
        println!(
            "failover to agreed leader over {} rounds: min {min:.0} ms, p50 {p50:.0} ms, max {max:.0} ms",
            samples_ms.len()
        );
    }
    Ok(())
}
