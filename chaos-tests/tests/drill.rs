//! A short seeded chaos drill on a real 3-node cluster of processes: 20
//! faults, the first one of each kind (leader kill, follower kill, paused
//! leader, restart of every node, agent kill, a follower replaced by the
//! spare node through a membership change, the leader itself replaced
//! so, and where this process may make network namespaces (root), the
//! leader and an agent cut off the network), under a workload of retried
//! submits, cancels, gets and QOS edits, then every invariant checker (a
//! little over a minute). Fault timing varies from run to run; the
//! invariants must hold for any timing.

use berth_chaos::drill::faults::FaultKind;
use berth_chaos::drill::{run, DrillOptions};
use berth_chaos::harness::Isolation;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeded_chaos_drill_keeps_every_invariant() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut opts = DrillOptions::new(20_261_203, 15, 3, tmp.path().to_path_buf());
    opts.min_faults = 20;
    opts.submitters = 2;
    opts.fault_gap_ms = 1_500;
    // CI runs as root; elsewhere the drill runs on loopback and says so.
    opts.isolation = match berth_chaos::netlab::available() {
        Ok(()) => Isolation::Namespaces,
        Err(e) => {
            eprintln!("drill without link cuts: {e}");
            Isolation::Loopback
        }
    };
    let cuts = opts.isolation == Isolation::Namespaces;
    let report = run(&opts).await.expect("the drill runs to its checks");
    println!("{report}");
    if !report.passed() {
        // Keep the stores and logs (node-N.log, agent-N.log, runs.log).
        let kept = tmp.keep();
        panic!("{report}\nlogs and stores kept in {}", kept.display());
    }
    // Every kind was injected, and the workload did something under them.
    let mut kinds: Vec<String> = report
        .faults
        .iter()
        .map(|f| format!("{:?}", f.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds.len(), FaultKind::all(3, cuts).len(), "{report}");
    assert_eq!(report.submits_acked, report.submits_sent, "{report}");
    assert!(report.submits_acked >= 10, "{report}");
    assert!(report.runs_observed >= 5, "{report}");
    assert_eq!(report.checks.len(), 11);
    // The linearizability check searched every key to a verdict.
    assert!(report.lincheck.ops >= report.submits_sent, "{report}");
    assert_eq!(report.lincheck.undecided_keys, Vec::<String>::new());
    // The leader-taking faults measured their failover, and the new
    // leaders' first passes were seen.
    assert!(report.failover_ms.len() >= 3, "{report}");
    assert!(report.first_pass_ms.len() >= 3, "{report}");
    // Removing the leader by a membership change handed off to a leader
    // among the new voters, timed like a kill.
    let replaced = report
        .faults
        .iter()
        .find(|f| f.kind == FaultKind::ReplaceLeader)
        .expect("a ReplaceLeader fault");
    let ms = replaced
        .failover_ms
        .unwrap_or_else(|| panic!("ReplaceLeader timed no failover: {report}"));
    assert!(report.failover_ms.contains(&ms), "{report}");
    if cuts {
        // A leader cut off the network was replaced like a killed one.
        let cut = report
            .faults
            .iter()
            .find(|f| f.kind == FaultKind::CutLeader)
            .expect("a CutLeader fault");
        assert!(cut.failover_ms.is_some(), "{report}");
    }
}
