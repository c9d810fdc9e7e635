//! A new node catches up by snapshot (issue 5): the snapshot-transfer
//! drill at a size the test suite can afford. Node 1 is restored with
//! 20,000 jobs and its log purged; node 2 starts empty and is added as a
//! learner, so only a chunked snapshot over the real Raft transport can
//! bring it up to date; both stores must then hold identical state (job
//! count, counters, sampled records, a digest over every record).
//! `berth-drill snapshot-transfer --jobs 1000000` is the same code at full
//! size.

use std::time::Duration;

/// Jobs in the state: enough for a snapshot of several chunks.
const JOBS: u64 = 20_000;
/// The learner must have caught up within this long of AddLearner.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_learner_catches_up_by_chunked_snapshot_and_ends_identical() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let report = berth_chaos::snapshot_transfer::run(tmp.path(), JOBS, CATCH_UP_DEADLINE)
        .await
        .expect("snapshot transfer");
    println!("{report}");
    assert_eq!(report.jobs, JOBS);
    // Several 1 MiB chunks, so the transfer really was chunked.
    assert!(
        report.snapshot_bytes > 2 * 1024 * 1024,
        "snapshot of {} bytes is a single chunk",
        report.snapshot_bytes
    );
    assert!(
        report.install_ms.is_some(),
        "the learner installed no snapshot"
    );
}
