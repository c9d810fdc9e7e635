//! berth-drill: fault drills against a real Berth cluster.
//!
//! `berth-drill failover` starts a local 3-node cluster (processes on
//! loopback), then repeatedly kills the leader with SIGKILL, measures the
//! time until the survivors agree on a new leader and until that leader's
//! first scheduling pass, and restarts the killed node. It prints each
//! round and both distributions (`failover`). The cluster runs with TLS,
//! the cluster secret and user auth on; `--insecure` turns them off.
//!
//! `berth-drill snapshot-transfer --jobs N` restores an N-job state on node
//! 1, adds an empty node 2 as a learner and checks that the chunked Raft
//! snapshot brings it to an identical state (see `snapshot_transfer`).
//!
//! `berth-drill simulated-hosts --hosts N --heartbeat-s H --seconds S`
//! measures the leader's CPU and memory with N simulated hosts (see
//! `simulated_hosts`).
//!
//! `berth-drill chaos --seed S --seconds T --nodes 3|5` runs a workload
//! while injecting faults on a seeded schedule, then checks the invariants
//! (see `drill`); it exits 1 when any is violated.
//!
//! `berth-drill bench raft-writes` measures acknowledged submits per second
//! and their latency on a 3-node cluster next to a 3-member etcd (see
//! `bench`), both with TLS (and Berth with auth) unless `--insecure`.
//!
//! `berth-drill bench pass-grid` times the scheduling pass over a grid of
//! pending jobs × hosts, and can plot it (see `pass_grid`, `plots`).
//!
//! `berth-drill bench sbatch` runs parallel `sbatch -H --wrap true`
//! processes against a single-host slurmctld and against a 3-node Berth
//! through `berth` linked as `sbatch`, alternating; `bench sbatch-durability`
//! kills the controller(s) with SIGKILL right after N acknowledged submits
//! and counts lost jobs and reused ids (see `slurm_peer`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
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

/// Where `berth-drill chaos` runs its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DrillTarget {
    Processes,
    Compose,
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
        /// Run the cluster in plain text without authentication, in place
        /// of the shipped configuration (TLS, cluster secret, user auth).
        #[arg(long)]
        insecure: bool,
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
    /// Run N simulated hosts heartbeating every H s against a 3-node
    /// cluster; report the leader's CPU (cores) and RSS over S seconds.
    SimulatedHosts {
        /// Simulated hosts.
        #[arg(long, default_value_t = 10_000)]
        hosts: u32,
        /// Their heartbeat period, in seconds.
        #[arg(long, default_value_t = 5)]
        heartbeat_s: u64,
        /// Length of the measurement, in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Jobs (1 CPU each) submitted once the hosts are registered.
        #[arg(long, default_value_t = 0)]
        jobs: u32,
        /// How long each job "runs" on its simulated host, in seconds.
        #[arg(long, default_value_t = 30)]
        job_runtime_s: u64,
        /// Directory for the cluster's data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Run submitters, cancels and QOS edits while injecting faults
    /// (leader and follower kills, a paused leader, a restart of every
    /// node, agent kills, a follower replaced by a spare node through a
    /// membership change, on 5 nodes two members lost at once, and with
    /// --netns the leader or an agent cut off the network) on a seeded
    /// schedule; then check the invariants.
    /// Exits 1 on any violation.
    Chaos {
        /// Seed of the workload and the fault schedule.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// How long faults are injected, in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Inject at least this many faults, even past --seconds (the
        /// first ones are one of each kind).
        #[arg(long, default_value_t = 0)]
        min_faults: usize,
        /// Voters: 3 or 5.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// Draw faults only from these kinds, comma-separated (default:
        /// every kind the cluster's size can take).
        #[arg(long, value_enum, value_delimiter = ',')]
        faults: Vec<berth_chaos::drill::faults::FaultKind>,
        /// Agents (each declares --agent-cpus CPUs).
        #[arg(long, default_value_t = 3)]
        agents: u32,
        #[arg(long, default_value_t = 4)]
        agent_cpus: u32,
        /// Concurrent submitters.
        #[arg(long, default_value_t = 3)]
        submitters: u32,
        /// Longest quiet time between two faults, in ms.
        #[arg(long, default_value_t = 3_000)]
        fault_gap_ms: u64,
        /// Run every node and agent in a network namespace of its own on a
        /// private bridge (needs root and iproute2), which adds the faults
        /// cut-leader and cut-agent.
        #[arg(long, conflicts_with = "target")]
        netns: bool,
        /// processes: a cluster of processes (on loopback, or with --netns
        /// in namespaces); compose: docker compose containers of the
        /// images deploy/docker/build-images.sh makes (tag from
        /// BERTH_IMAGE_TAG, default latest), with the cuts as `docker
        /// network disconnect`.
        #[arg(long, value_enum, default_value_t = DrillTarget::Processes)]
        target: DrillTarget,
        /// Also write the report as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Also draw the failover times' distribution to this SVG file.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// Directory for the cluster's data and logs (default: a temp dir,
        /// kept when the drill fails).
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
        /// Run both systems in plain text, Berth without authentication,
        /// in place of the shipped configuration (Berth with TLS, cluster
        /// secret and user tokens; etcd with TLS on client and peer ports).
        #[arg(long)]
        insecure: bool,
        /// Directory for both clusters' data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Also write every level's results as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Also draw submits/s and puts/s against clients to this SVG file.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// Measure nothing: read an earlier run's --json file and draw
        /// --plot from it.
        #[arg(long, requires = "plot")]
        from_json: Option<std::path::PathBuf>,
    },
    /// Cost of one scheduling pass over a grid of pending jobs × hosts:
    /// each cell the p50 of N passes on `berth sim bench-pass`'s state
    /// (seed 1). Prints the table (rows pending, columns hosts, ms) with
    /// the growth along each row and column.
    PassGrid {
        /// Pending jobs, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,30000,100000")]
        pending: Vec<usize>,
        /// Hosts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,3000,10000")]
        hosts: Vec<usize>,
        /// Passes per cell.
        #[arg(long, default_value_t = 10)]
        passes: usize,
        /// Also write the grid as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Also draw p50 against pending jobs, a line per host count
        /// (log-log, the targets marked), to this SVG file.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// Measure nothing: read an earlier run's --json file, print its
        /// table and draw --plot from it.
        #[arg(long)]
        from_json: Option<std::path::PathBuf>,
    },
    /// Held submits/s through `sbatch` processes: a single-host slurmctld
    /// vs a 3-node Berth (`berth` linked as `sbatch`), alternating.
    Sbatch {
        /// Parallel submitters, each running one sbatch process at a time.
        #[arg(long, default_value_t = 8)]
        submitters: usize,
        /// Seconds per phase (one system, one round).
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// At most this many jobs per phase.
        #[arg(long, default_value_t = 1_000_000)]
        jobs: u64,
        /// Rounds; each runs both systems, the first one alternating.
        #[arg(long, default_value_t = 2)]
        rounds: u32,
        /// Then time this many single sbatch processes per system, one at
        /// a time (0: skip).
        #[arg(long, default_value_t = 50)]
        anatomy_runs: u32,
        /// Directory for both systems' data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// The do-nothing program each round also runs the same way, to
        /// measure what starting it alone allows on this machine (a static
        /// one for the floor of a static client).
        #[arg(long, default_value = "/bin/true", conflicts_with = "no_floor")]
        floor: std::path::PathBuf,
        /// Skip the floor phase.
        #[arg(long)]
        no_floor: bool,
    },
    /// kill -9 of slurmctld, and of all 3 berthd, right after N
    /// acknowledged `sbatch -H` submits; restart; count acknowledged jobs
    /// lost and job ids handed out twice.
    SbatchDurability {
        #[arg(long, default_value_t = 8)]
        submitters: usize,
        /// Acknowledged submits before the kill.
        #[arg(long, default_value_t = 1_000)]
        jobs: u64,
        /// Submits after the restart, checked for reused ids.
        #[arg(long, default_value_t = 200)]
        after: u64,
        /// Directory for both systems' data and logs (default: a temp dir).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
}

fn write_file(path: &std::path::Path, contents: impl AsRef<[u8]>) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

fn write_json(path: &std::path::Path, value: &serde_json::Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec_pretty(value)?;
    text.push(b'\n');
    write_file(path, text)
}

fn read_json(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))
}

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
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("berth-drill: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the drill; `Ok(false)` when it ran and found a violation.
async fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.drill {
        Drill::Chaos {
            seed,
            seconds,
            min_faults,
            nodes,
            faults,
            agents,
            agent_cpus,
            submitters,
            fault_gap_ms,
            netns,
            target,
            json,
            plot,
            dir,
        } => {
            let tmp = tempfile::tempdir()?;
            let given = dir.is_some();
            let work = dir.unwrap_or_else(|| tmp.path().to_path_buf());
            println!("chaos: cluster and logs under {}", work.display());
            // A temporary directory goes with the drill unless it failed.
            let keep = move |tmp: tempfile::TempDir, work: &std::path::Path| {
                if given {
                    work.to_path_buf()
                } else {
                    tmp.keep()
                }
            };
            let mut opts =
                berth_chaos::drill::DrillOptions::new(seed, seconds, nodes, work.clone());
            opts.min_faults = min_faults;
            opts.kinds = faults;
            opts.agents = agents;
            opts.agent_cpus = agent_cpus;
            opts.submitters = submitters;
            opts.fault_gap_ms = fault_gap_ms;
            opts.isolation = match (target, netns) {
                (DrillTarget::Compose, _) => berth_chaos::harness::Isolation::Containers,
                (DrillTarget::Processes, true) => berth_chaos::harness::Isolation::Namespaces,
                (DrillTarget::Processes, false) => berth_chaos::harness::Isolation::Loopback,
            };
            let report = match berth_chaos::drill::run(&opts).await {
                Ok(report) => report,
                Err(e) => {
                    let kept = keep(tmp, &work);
                    return Err(anyhow::Error::new(e).context(format!(
                        "the drill did not run to its checks (logs kept in {})",
                        kept.display()
                    )));
                }
            };
            println!("{report}");
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if let Some(path) = plot {
                let title = format!(
                    "berth-drill chaos --seed {seed}: failover over {} faults, {nodes} nodes",
                    report.failover_ms.len()
                );
                let svg = berth_chaos::drill::plot::failover_svg(&report.failover_ms, &title);
                std::fs::write(&path, svg)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            if !report.passed() {
                // Keep the logs and stores of a failed drill for a look.
                let kept = keep(tmp, &work);
                println!("kept {}", kept.display());
            }
            Ok(report.passed())
        }
        Drill::Failover {
            rounds,
            dir,
            insecure,
        } => berth_chaos::failover::run(rounds, dir, insecure)
            .await
            .map(|_| true),
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
            Ok(true)
        }
        Drill::SimulatedHosts {
            hosts,
            heartbeat_s,
            seconds,
            jobs,
            job_runtime_s,
            dir,
        } => {
            let tmp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| tmp.path().to_path_buf());
            std::fs::create_dir_all(&dir)?;
            println!("simulated-hosts: cluster and logs under {}", dir.display());
            let (report, _cluster, _simulator) =
                berth_chaos::simulated_hosts::run(&berth_chaos::simulated_hosts::DrillOptions {
                    hosts,
                    heartbeat_s,
                    seconds,
                    dir,
                    jobs,
                    job_runtime_s,
                })
                .await?;
            println!("{report}");
            Ok(true)
        }
        Drill::Bench {
            bench:
                Bench::RaftWrites {
                    clients,
                    seconds,
                    warmup_seconds,
                    to,
                    berth_only,
                    insecure,
                    dir,
                    json,
                    plot,
                    from_json,
                },
        } => {
            let results = match from_json {
                Some(path) => read_json(&path)?,
                None => {
                    let levels =
                        berth_chaos::bench::raft_writes(&berth_chaos::bench::BenchOptions {
                            clients,
                            seconds,
                            warmup_seconds,
                            target: to,
                            dir,
                            berth_only,
                            insecure,
                        })
                        .await?;
                    berth_chaos::bench::raft_writes_json(levels)
                }
            };
            if let Some(path) = json {
                write_json(&path, &results)?;
            }
            if let Some(path) = plot {
                let levels = berth_chaos::plots::raft_writes_levels(&results)?;
                let title = "berth-drill bench raft-writes: 3-node Berth vs 3-member etcd";
                write_file(&path, berth_chaos::plots::raft_writes_svg(&levels, title)?)?;
            }
            Ok(true)
        }
        Drill::Bench {
            bench:
                Bench::PassGrid {
                    pending,
                    hosts,
                    passes,
                    json,
                    plot,
                    from_json,
                },
        } => {
            let grid: berth_chaos::pass_grid::PassGrid = match from_json {
                Some(path) => serde_json::from_value(read_json(&path)?)
                    .with_context(|| format!("reading a pass grid from {}", path.display()))?,
                None => {
                    let options = berth_chaos::pass_grid::GridOptions {
                        pending,
                        hosts,
                        passes,
                    };
                    // Minutes of CPU at the large cells: off the async
                    // workers, though nothing else runs meanwhile.
                    tokio::task::spawn_blocking(move || {
                        berth_chaos::pass_grid::run(&options, |cell| {
                            println!(
                                "pass-grid: {} pending × {} hosts: p50 {:.3} ms, max {:.3} ms, cpu mean {} ms, {} started",
                                cell.pending,
                                cell.hosts,
                                cell.pass_ms_p50,
                                cell.pass_ms_max,
                                cell.cpu_ms_mean.map_or("?".into(), |ms| format!("{ms:.3}")),
                                cell.started_per_pass
                            );
                        })
                    })
                    .await??
                }
            };
            print!("{}", grid.table());
            if let Some(path) = json {
                write_json(&path, &grid.to_json())?;
            }
            if let Some(path) = plot {
                let title = format!(
                    "Scheduling pass cost: p50 of {} passes (berth-drill bench pass-grid)",
                    grid.passes
                );
                write_file(&path, berth_chaos::plots::pass_grid_svg(&grid, &title)?)?;
            }
            Ok(true)
        }
        Drill::Bench {
            bench:
                Bench::Sbatch {
                    submitters,
                    seconds,
                    jobs,
                    rounds,
                    anatomy_runs,
                    dir,
                    floor,
                    no_floor,
                },
        } => berth_chaos::slurm_peer::sbatch_rate(&berth_chaos::slurm_peer::RateOptions {
            submitters,
            seconds,
            max_jobs: jobs,
            rounds,
            anatomy_runs,
            dir,
            floor: (!no_floor).then_some(floor),
        })
        .await
        .map(|()| true),
        Drill::Bench {
            bench:
                Bench::SbatchDurability {
                    submitters,
                    jobs,
                    after,
                    dir,
                },
        } => berth_chaos::slurm_peer::sbatch_durability(
            &berth_chaos::slurm_peer::DurabilityOptions {
                submitters,
                jobs,
                after,
                dir,
            },
        )
        .await
        .map(|()| true),
    }
}
