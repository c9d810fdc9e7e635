//! Recovery after kill -9 (issue 5): a writer process (`berth-store-writer`,
//! a one-node openraft on the real store) submits jobs without pause and
//! prints each acknowledged submit; it is killed with SIGKILL at seeded
//! random moments, again and again on the same directory. After every kill
//! the store must open, hold every acknowledged job, keep job ids
//! contiguous and never reuse one, and hold no half-applied batch.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use berth_raft_store::check::check;
use berth_raft_store::open;

/// Kills, each of a fresh writer process on the same store.
const KILLS: u32 = 50;
const SEED: u64 = 0x5EED_0005;
/// Even runs kill a writer this long after it was started, chosen at
/// random in the range, so kills land in open, Raft start-up and election
/// whatever the machine's speed.
const KILL_AFTER_START_MS_MIN: u64 = 5;
const KILL_AFTER_START_MS_MAX: u64 = 600;
/// Odd runs kill a writer this long after its first acknowledgement, so
/// they land among writes, snapshot builds and log purges however slowly a
/// loaded machine starts the writer (timing from the start alone once left
/// most kills in start-up under load).
const KILL_AFTER_FIRST_ACK_MS_MIN: u64 = 0;
const KILL_AFTER_FIRST_ACK_MS_MAX: u64 = 300;
/// How long an odd run waits for the writer's first acknowledgement.
const FIRST_ACK_DEADLINE_S: u64 = 60;
/// The whole test must finish within this long.
const TEST_DEADLINE_S: u64 = 600;

/// xorshift64*: seeded, so a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn between(&mut self, min: u64, max: u64) -> u64 {
        min + self.next() % (max - min + 1)
    }
}

/// Acknowledgements (request id, job id) printed by a writer. Only whole
/// lines count: a line cut by the kill was never an acknowledgement.
/// `first_ack` hears of the first one.
fn acks(stdout: impl std::io::Read, first_ack: mpsc::Sender<()>) -> Vec<(String, u64)> {
    let mut reader = BufReader::new(stdout);
    let mut acks = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return acks,
            Ok(_) if line.last() != Some(&b'\n') => return acks,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let mut words = text.split_whitespace();
        if words.next() != Some("ACK") {
            continue;
        }
        let (Some(request_id), Some(job_id)) = (words.next(), words.next()) else {
            panic!("malformed acknowledgement {text:?}");
        };
        let job_id: u64 = job_id
            .parse()
            .unwrap_or_else(|_| panic!("bad job id in {text:?}"));
        if acks.is_empty() {
            // The test may have stopped listening; that is fine.
            let _ = first_ack.send(());
        }
        acks.push((request_id.to_string(), job_id));
    }
}

/// Checks the store after a kill; returns how many jobs it holds.
fn verify(path: &Path, acked: &BTreeMap<u64, String>, run: u32) -> u64 {
    // Read-only check first: log contiguity, last applied within the log,
    // counters above every id, records decode, request ids name jobs.
    let report = check(path).unwrap_or_else(|e| panic!("run {run}: check failed: {e}"));
    assert!(
        report.is_ok(),
        "run {run}: store check found problems: {:#?}",
        report.problems
    );

    let handles = open(path)
        .unwrap_or_else(|e| panic!("run {run}: the store does not open after kill -9: {e}"));
    let state = handles.state.read().expect("state lock");
    let jobs = state.data.jobs.len() as u64;
    // Contiguous ids from 1, and the counter right after the last: an
    // apply batch is all there or not at all.
    let ids: Vec<u64> = state.data.jobs.keys().copied().collect();
    assert_eq!(
        ids,
        (1..=jobs).collect::<Vec<_>>(),
        "run {run}: job ids are not contiguous"
    );
    assert_eq!(
        state.data.counters.next_job_id,
        jobs + 1,
        "run {run}: counter disagrees with the jobs"
    );
    for (job_id, request_id) in acked {
        let Some(record) = state.job(*job_id) else {
            panic!("run {run}: acknowledged job {job_id} ({request_id}) is missing");
        };
        assert_eq!(
            record.job.spec.command,
            format!("echo {request_id}"),
            "run {run}: job {job_id} does not hold what its submit carried"
        );
    }
    // Every job, acknowledged or not, holds its own submit, and the
    // request-id table points back at it.
    for (request_id, job_id) in &state.data.request_ids {
        let record = state
            .job(*job_id)
            .unwrap_or_else(|| panic!("run {run}: {request_id} names no job"));
        assert_eq!(
            record.job.spec.command,
            format!("echo {request_id}"),
            "run {run}: request table disagrees"
        );
    }
    if let Some(applied) = handles
        .state_machine
        .applied_meta()
        .last_applied
        .map(|l| l.index)
    {
        let last_log = report.last_log_id.or(report.last_purged).map(|l| l.index);
        assert!(
            last_log.is_some_and(|l| applied <= l),
            "run {run}: applied past the log"
        );
    }
    jobs
}

#[test]
fn acknowledged_jobs_survive_kill_minus_9() {
    let started = Instant::now();
    let dir = tempfile::TempDir::new().expect("tempdir");
    let path = dir.path().join("raft");
    let mut rng = Rng(SEED);
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut request_ids: BTreeSet<String> = BTreeSet::new();
    let mut runs_with_acks = 0;
    for run in 0..KILLS {
        assert!(
            started.elapsed() < Duration::from_secs(TEST_DEADLINE_S),
            "run {run}: the test ran past {TEST_DEADLINE_S} s"
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth-store-writer"))
            .arg(&path)
            .arg(format!("r{run}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the writer");
        let stdout = child.stdout.take().expect("stdout");
        let (first_ack_tx, first_ack_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || acks(stdout, first_ack_tx));
        let kill_among_writes = run % 2 == 1;
        if kill_among_writes {
            if first_ack_rx
                .recv_timeout(Duration::from_secs(FIRST_ACK_DEADLINE_S))
                .is_err()
            {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "run {run}: the writer acknowledged nothing within {FIRST_ACK_DEADLINE_S} s"
                );
            }
            std::thread::sleep(Duration::from_millis(
                rng.between(KILL_AFTER_FIRST_ACK_MS_MIN, KILL_AFTER_FIRST_ACK_MS_MAX),
            ));
        } else {
            std::thread::sleep(Duration::from_millis(
                rng.between(KILL_AFTER_START_MS_MIN, KILL_AFTER_START_MS_MAX),
            ));
        }
        // std's kill is SIGKILL on Unix.
        let _ = child.kill();
        let status = child.wait().expect("wait for the writer");
        let new_acks = reader.join().expect("reader thread");
        assert!(
            status.code().is_none(),
            "run {run}: the writer exited by itself ({status}) instead of being killed; \
             run it by hand on a copy of the store to see why"
        );
        if !new_acks.is_empty() {
            runs_with_acks += 1;
        }
        for (request_id, job_id) in new_acks {
            assert!(
                request_ids.insert(request_id.clone()),
                "run {run}: {request_id} acknowledged twice"
            );
            if let Some(earlier) = acked.insert(job_id, request_id.clone()) {
                panic!("run {run}: job id {job_id} reused: first {earlier}, now {request_id}");
            }
        }
        // Killed before it had made the store (a loaded machine starts it
        // slowly): nothing was durable yet, and nothing acknowledged. A
        // new store is built aside and renamed into place, so there is
        // either a whole one or none.
        if acked.is_empty() && !path.join("CURRENT").exists() {
            continue;
        }
        verify(&path, &acked, run);
    }
    // The kills must have landed among writes, not only during start-up.
    assert!(
        runs_with_acks >= KILLS / 2,
        "only {runs_with_acks} of {KILLS} runs acknowledged anything"
    );
    eprintln!(
        "{KILLS} kills, {} acknowledged jobs, {runs_with_acks} runs with acknowledgements, {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
}
