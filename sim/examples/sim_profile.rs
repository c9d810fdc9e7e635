//! Times the simulator and the pass without the CLI, for profiling
//! (`valgrind --tool=callgrind`, `perf`): the library reads no files or
//! clock, so this example does both.
//!
//! ```text
//! cargo run --release -p berth-sim --example sim_profile -- swf TRACE.swf CPUS_PER_NODE [fcfs] [MAX_JOBS]
//! cargo run --release -p berth-sim --example sim_profile -- bench PENDING HOSTS [PASSES]
//! ```
//! The trace must be uncompressed (`zcat trace.swf.gz > trace.swf`).

use std::time::Instant;

use berth_scheduler::{host_names, schedule};
use berth_sim::bench::{bench_policy, bench_snapshot, time_passes, PassClock, BENCH_NOW_MS};
use berth_sim::swf::{run_swf, summary_line, SwfOptions};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i}: expected {what}"))
}

/// Wall time, and this thread's CPU time from Linux `schedstat`: unlike
/// wall time it does not count time spent waiting for a CPU, so it stays
/// meaningful on a loaded machine.
struct Clocks(Instant);

impl PassClock for Clocks {
    fn wall_ms(&mut self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1e3
    }

    fn cpu_ms(&mut self) -> Option<f64> {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
        Some(ns as f64 / 1e6)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("swf") => {
            let path = &args[2];
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let options = SwfOptions {
                cpus_per_node: arg(&args, 3, "CPUs per node"),
                hosts: None,
                backfill: args.get(4).is_none_or(|p| p != "fcfs"),
                max_jobs: args.get(5).map(|_| arg(&args, 5, "a job count")),
            };
            let started = Instant::now();
            let run = run_swf(&text, path, &options).unwrap_or_else(|e| panic!("{e}"));
            let wall_ms = started.elapsed().as_millis() as u64;
            println!(
                "{}",
                summary_line(&run, wall_ms).unwrap_or_else(|e| panic!("{e}"))
            );
        }
        Some("bench") => {
            let pending: usize = arg(&args, 2, "pending jobs");
            let hosts: usize = arg(&args, 3, "hosts");
            let passes: usize = args.get(4).map_or(10, |_| arg(&args, 4, "passes"));
            let snapshot = bench_snapshot(pending, hosts, 1);
            let policy = bench_policy();
            let times = time_passes(&snapshot, &policy, passes, &mut Clocks(Instant::now()));
            let (mut times_ms, cpu_ms) = (times.wall_ms, times.cpu_ms);
            let started_n = times.started_per_pass;
            times_ms.sort_by(f64::total_cmp);
            // The kernel brings schedstat up to date at ticks and switches,
            // so single passes read coarsely; the mean over many does not.
            if !cpu_ms.is_empty() {
                let mean = cpu_ms.iter().sum::<f64>() / cpu_ms.len() as f64;
                println!("cpu mean {mean:.3} ms over {} passes", cpu_ms.len());
            }
            if std::env::var_os("SIM_PROFILE_REASONS").is_some() {
                let plan = schedule(&snapshot, &policy, BENCH_NOW_MS);
                // FNV-1a over the plan's JSON: equal digests, equal plans.
                // Reservations are digested apart, by host name, so that
                // the digest does not hang on how a plan refers to hosts.
                let fnv = |json: &str| {
                    json.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                    })
                };
                let held: Vec<(u64, u64, Vec<&str>)> = plan
                    .reservations
                    .iter()
                    .map(|r| (r.job_id, r.start_ms, host_names(&snapshot, &r.hosts)))
                    .collect();
                let mut rest = plan.clone();
                rest.reservations.clear();
                for m in &mut rest.multipath {
                    for p in &mut m.paths {
                        p.hosts.clear();
                    }
                }
                let json = serde_json::to_string(&rest).unwrap_or_default();
                let held_json = serde_json::to_string(&held).unwrap_or_default();
                println!(
                    "plan digest {:016x} ({} bytes), reservations digest {:016x}",
                    fnv(&json),
                    json.len(),
                    fnv(&held_json)
                );
                let mut counts = std::collections::BTreeMap::new();
                for r in plan.reasons.values() {
                    *counts.entry(r.code()).or_insert(0u32) += 1;
                }
                println!(
                    "reasons {counts:?}, reservations {}, backfilled {}",
                    plan.reservations.len(),
                    plan.backfilled.len()
                );
            }
            println!(
                "pending {pending} hosts {hosts}: p50 {:.3} ms, min {:.3} ms, started {started_n}",
                times_ms[(times_ms.len() - 1) / 2],
                times_ms[0]
            );
        }
        _ => panic!(
            "usage: sim_profile swf TRACE CPUS [fcfs] [MAX_JOBS] | bench PENDING HOSTS [PASSES]"
        ),
    }
}
