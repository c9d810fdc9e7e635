//! Trace replay on the first 2000 jobs of the KTH SP2 log (tests/data).

use berth_scheduler::sim::swf::{run_swf, summary_line, SwfOptions};

const KTH: &str = include_str!("data/kth-sp2-first-2000.swf");

fn replay(backfill: bool) -> String {
    let options = SwfOptions {
        cpus_per_node: 1,
        hosts: None,
        backfill,
        max_jobs: None,
    };
    let run = run_swf(KTH, "kth-sp2-first-2000.swf", &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.hosts, 100, "MaxProcs 100 / 1 CPU per node");
    assert!(run.stats.jobs > 1_900, "{:?}", run.stats);
    // sim_wall_ms is measured by the CLI; 0 here keeps the line comparable.
    summary_line(&run, 0).unwrap_or_else(|e| panic!("{e}"))
}

fn field(line: &str, key: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

#[test]
fn replay_is_deterministic_and_easy_waits_less_than_fcfs() {
    let easy = replay(true);
    assert_eq!(easy, replay(true), "two runs differ");
    let fcfs = replay(false);
    assert_eq!(fcfs, replay(false), "two runs differ");
    let (easy_wait_s, fcfs_wait_s) = (field(&easy, "mean_wait_s"), field(&fcfs, "mean_wait_s"));
    assert!(
        easy_wait_s < fcfs_wait_s,
        "EASY mean wait {easy_wait_s} s should be below FCFS {fcfs_wait_s} s\n{easy}\n{fcfs}"
    );
    assert!(field(&easy, "mean_bsld") < field(&fcfs, "mean_bsld"));
}
