//! The snapshot-transfer drill (issue 5): a large state is snapshotted on
//! one berthd, sent to a new node over the real Raft transport in
//! `SNAPSHOT_CHUNK_BYTES` chunks, installed there, and both stores are then
//! compared record by record.
//!
//! How the large state is made fast: the jobs are applied in bulk to a
//! store in-process (the real `StateMachineStore::apply`, in batches, as
//! `raft-store/examples/store_bench.rs` does), the state is written as a
//! backup file and restored (`berth_raft_store::backup::restore`, what
//! `berthd store restore` runs) as node 1 of a one-voter cluster. Node 1's
//! log is purged up to the restored index, so when node 2 starts empty and
//! is added with `AddLearner`, the leader can only bring it up to date by
//! sending its snapshot. Both nodes are real `berthd` processes on
//! loopback ([`LocalCluster`]).
//!
//! What is checked: the learner reaches the leader's applied index; then
//! both processes are stopped and both stores opened: the job count, the
//! id counters, every hundredth record (compared as JSON) and a digest over
//! every job, host and request id must be equal.
//!
//! What is measured: the snapshot's serialization in-process (the code a
//! leader runs when it sends one: the state machine's tables read as of a
//! pinned RocksDB snapshot and written out as JSON), the snapshot's size,
//! the time from `AddLearner` until the learner has applied the leader's
//! index, the learner's install time (from its `snapshot installed` log
//! line), each process's peak RSS (`VmHWM`), and each store's bytes on
//! disk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_proto::api::AddLearnerRequest;
use berth_raft_store::{open, TypeConfig};
use berth_scheduler::JobSpec;
use berth_state::{Command, Request};
use openraft::storage::RaftStateMachine;
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder};

use crate::harness::{status_of, ClusterOptions, HarnessError, LocalCluster};

/// Jobs are applied to the generated store in batches of this many: one
/// synced RocksDB write per batch, like a busy leader's apply.
const GENERATE_BATCH_JOBS: u64 = 1_000;
/// Every this-many-th job record is compared in full (besides the digest).
const SAMPLE_EVERY_JOBS: u64 = 100;
/// How long the cluster may take to elect node 1 after it starts.
const LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// How long node 2 may take to listen after it starts.
const LISTEN_DEADLINE: Duration = Duration::from_secs(30);
/// Pause between polls of a condition.
const POLL_MS: u64 = 50;

#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Harness(#[from] HarnessError),
    #[error("store: {0}")]
    Store(#[from] berth_raft_store::StoreError),
    #[error("backup: {0}")]
    Backup(#[from] berth_raft_store::BackupError),
    #[error("{what}: {detail}")]
    Step { what: &'static str, detail: String },
    #[error("the learner's state differs from the leader's: {0}")]
    Mismatch(String),
}

fn step(what: &'static str) -> impl Fn(String) -> DrillError {
    move |detail| DrillError::Step { what, detail }
}

/// What the drill saw and measured.
#[derive(Debug, Clone)]
pub struct TransferReport {
    pub jobs: u64,
    pub generate: Duration,
    /// The snapshot serialized in-process from the generated store: the
    /// code a leader runs before it sends one (building a snapshot only
    /// pins the state and records its metadata), at release speed when the
    /// drill is built --release.
    pub serialize: Duration,
    pub snapshot_bytes: u64,
    /// From the `AddLearner` call until the learner has applied the
    /// leader's last index: chunked transfer plus install plus the
    /// following log entries.
    pub catch_up: Duration,
    /// The learner's own install time (decode, one synced batch, state
    /// swap), from its `snapshot installed` log line.
    pub install_ms: Option<u64>,
    pub leader_peak_rss_kib: Option<u64>,
    pub learner_peak_rss_kib: Option<u64>,
    pub leader_disk_bytes: u64,
    pub learner_disk_bytes: u64,
    pub applied_index: u64,
    pub next_job_id: u64,
    /// FNV-1a 64 over every job, host and request id and the counters,
    /// equal on both nodes.
    pub digest: u64,
    pub sampled_records: u64,
}

impl std::fmt::Display for TransferReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let rss = |k: Option<u64>| k.map_or("unknown".to_string(), |k| format!("{} MiB", k / 1024));
        writeln!(f, "jobs                {}", self.jobs)?;
        writeln!(
            f,
            "generate            {:.1} s (apply batches of {GENERATE_BATCH_JOBS})",
            self.generate.as_secs_f64()
        )?;
        writeln!(
            f,
            "snapshot serialize  {:.2} s, {} bytes ({:.1} MiB, {:.0} bytes/job)",
            self.serialize.as_secs_f64(),
            self.snapshot_bytes,
            mib(self.snapshot_bytes),
            self.snapshot_bytes as f64 / self.jobs.max(1) as f64
        )?;
        writeln!(
            f,
            "learner caught up   {:.2} s after AddLearner (transfer + install + log tail)",
            self.catch_up.as_secs_f64()
        )?;
        match self.install_ms {
            Some(ms) => writeln!(
                f,
                "learner install     {:.2} s; transfer about {:.2} s",
                ms as f64 / 1000.0,
                (self.catch_up.as_secs_f64() - ms as f64 / 1000.0).max(0.0)
            )?,
            None => writeln!(f, "learner install     not logged")?,
        }
        writeln!(
            f,
            "peak RSS            leader {}, learner {}",
            rss(self.leader_peak_rss_kib),
            rss(self.learner_peak_rss_kib)
        )?;
        writeln!(
            f,
            "disk                leader {:.1} MiB ({:.0} bytes/job), learner {:.1} MiB ({:.0} bytes/job)",
            mib(self.leader_disk_bytes),
            self.leader_disk_bytes as f64 / self.jobs.max(1) as f64,
            mib(self.learner_disk_bytes),
            self.learner_disk_bytes as f64 / self.jobs.max(1) as f64
        )?;
        write!(
            f,
            "identical           applied index {}, next job id {}, digest {:016x}, {} records compared in full",
            self.applied_index, self.next_job_id, self.digest, self.sampled_records
        )
    }
}

fn submit_entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request::new(Command::SubmitJob {
            spec: JobSpec {
                name: format!("job-{index}"),
                user: "alice".into(),
                command: "/home/alice/bin/simulate --steps 1000 --out /scratch/alice/run".into(),
                cpus: 4,
                mem_mb: 8192,
                ..JobSpec::default()
            },
            request_id: format!("drill-{index:012}"),
            now_ms: 1_700_000_000_000 + index,
        })),
    }
}

/// Builds a store of `jobs` submitted jobs under `path`, builds its
/// snapshot and serializes it (timed), and writes the state as a backup
/// file `backup_file`.
async fn generate(
    path: &Path,
    jobs: u64,
    backup_file: &Path,
) -> Result<(Duration, Duration, u64), DrillError> {
    let mut store = open(path)?;
    let started = Instant::now();
    let mut index = 1;
    while index <= jobs {
        let end = (index + GENERATE_BATCH_JOBS).min(jobs + 1);
        store
            .state_machine
            .apply((index..end).map(submit_entry))
            .await
            .map_err(|e| step("applying the generated jobs")(e.to_string()))?;
        index = end;
    }
    let generate = started.elapsed();

    let started = Instant::now();
    let snapshot = store
        .state_machine
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .map_err(|e| step("building the snapshot")(e.to_string()))?;
    let snapshot_bytes = snapshot
        .snapshot
        .into_bytes()
        .await
        .map_err(|e| step("serializing the snapshot")(e.to_string()))?
        .len() as u64;
    let serialize = started.elapsed();

    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let backup = store.state_machine.backup(now_ms)?;
    let bytes = backup.to_bytes()?;
    std::fs::write(backup_file, bytes)
        .map_err(|e| step("writing the backup file")(e.to_string()))?;
    Ok((generate, serialize, snapshot_bytes))
}

/// The pid of the berthd started with `config` (its command line names the
/// config file), found in /proc.
fn pid_of(config: &Path) -> Option<u32> {
    let wanted = config.as_os_str().as_encoded_bytes();
    crate::procs::pids_where(|argv| argv.contains(&wanted))
        .first()
        .copied()
}

/// Peak resident set (`VmHWM`) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn dir_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `text` without terminal colour codes (`ESC [ ... letter`), which berthd's
/// log has between a field's name and its value.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `elapsed_ms=N` from the last log line containing `message`.
fn logged_ms(log: &Path, message: &str) -> Option<u64> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().rev().find(|l| l.contains(message))?;
    let rest = &line[line.find("elapsed_ms=")? + "elapsed_ms=".len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// What one store holds, reduced to what the drill compares.
struct StoreSummary {
    jobs: u64,
    next_job_id: u64,
    counters_json: String,
    digest: u64,
    samples: BTreeMap<u64, String>,
    last_applied: u64,
}

fn summarize(path: &Path) -> Result<StoreSummary, DrillError> {
    let store = open(path)?;
    let state = store
        .state
        .read()
        .map_err(|_| step("reading a store")("state lock poisoned".into()))?;
    let data = &state.data;
    let counters_json = json(&data.counters)?;
    let mut digest = fnv(FNV_OFFSET, counters_json.as_bytes());
    let mut samples = BTreeMap::new();
    for (n, (id, record)) in data.jobs.iter().enumerate() {
        let text = json(record)?;
        digest = fnv(fnv(digest, &id.to_be_bytes()), text.as_bytes());
        if (n as u64).is_multiple_of(SAMPLE_EVERY_JOBS) {
            samples.insert(*id, text);
        }
    }
    for (name, record) in &data.hosts {
        digest = fnv(fnv(digest, name.as_bytes()), json(record)?.as_bytes());
    }
    for (request_id, job_id) in &data.request_ids {
        digest = fnv(fnv(digest, request_id.as_bytes()), &job_id.to_be_bytes());
    }
    Ok(StoreSummary {
        jobs: data.jobs.len() as u64,
        next_job_id: data.counters.next_job_id,
        counters_json,
        digest,
        samples,
        last_applied: state.applied_index(),
    })
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, DrillError> {
    serde_json::to_string(value).map_err(|e| step("encoding a record")(e.to_string()))
}

/// Waits until the learner has applied the leader's last index.
async fn wait_until_caught_up(
    leader_addr: &str,
    learner_addr: &str,
    deadline: Duration,
) -> Result<(u64, u64), DrillError> {
    let started = Instant::now();
    loop {
        // A status call can fail while the learner is busy installing;
        // that only means "not yet".
        let last = match (status_of(leader_addr).await, status_of(learner_addr).await) {
            (Ok(leader), Ok(learner)) => {
                if learner.applied_index >= leader.applied_index && leader.applied_index > 0 {
                    return Ok((learner.applied_index, learner.next_job_id));
                }
                format!(
                    "leader applied {}, learner applied {}",
                    leader.applied_index, learner.applied_index
                )
            }
            (Err(e), _) | (_, Err(e)) => e.to_string(),
        };
        if started.elapsed() > deadline {
            return Err(HarnessError::Timeout {
                what: format!("the learner to catch up ({last})"),
                waited_ms: started.elapsed().as_millis() as u64,
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Runs the drill under `dir` with `jobs` jobs; the learner must have
/// caught up within `catch_up_deadline` of `AddLearner`.
pub async fn run(
    dir: &Path,
    jobs: u64,
    catch_up_deadline: Duration,
) -> Result<TransferReport, DrillError> {
    std::fs::create_dir_all(dir).map_err(HarnessError::Io)?;
    let generated = dir.join("generated");
    let backup_file = dir.join("state.backup");
    let (generate_time, serialize, snapshot_bytes) =
        generate(&generated.join("raft"), jobs, &backup_file).await?;
    // Only the backup file is needed from here on; free the disk.
    let _ = std::fs::remove_dir_all(&generated);

    let options = ClusterOptions {
        nodes: 1,
        spare_nodes: 1,
        agents: 0,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(&dir.join("cluster"), &options)?;
    let leader_addr = cluster.addr(1)?;
    let learner_addr = cluster.addr(2)?;
    let members = BTreeMap::from([(
        1,
        BasicNode {
            addr: leader_addr.clone(),
        },
    )]);
    // restore runs a runtime of its own (the store's async API), so it
    // must not run on this one's threads.
    let (file, data_dir) = (backup_file.clone(), cluster.data_dir(1));
    tokio::task::spawn_blocking(move || {
        berth_raft_store::backup::restore(&file, &data_dir, 1, &members)
    })
    .await
    .map_err(|e| step("restoring node 1")(e.to_string()))??;
    let _ = std::fs::remove_file(&backup_file);

    cluster.start_node(1)?;
    cluster.wait_for_leader(LEADER_DEADLINE).await?;
    cluster.start_node(2)?;
    let started = Instant::now();
    while status_of(&learner_addr).await.is_err() {
        if started.elapsed() > LISTEN_DEADLINE {
            return Err(HarnessError::Timeout {
                what: "node 2 to listen".into(),
                waited_ms: started.elapsed().as_millis() as u64,
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }

    let started = Instant::now();
    let mut client = cluster.client().await?;
    // The call waits for the learner; with a large state it can outlast
    // the harness client's deadline, which only ends the wait here (the
    // learner is added and its replication goes on). Catch-up is judged by
    // the applied indexes below.
    if let Err(status) = client
        .add_learner(AddLearnerRequest {
            node_id: 2,
            addr: learner_addr.clone(),
        })
        .await
    {
        if !matches!(
            status.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ) {
            return Err(step("AddLearner")(status.to_string()));
        }
    }
    let (applied_index, next_job_id) =
        wait_until_caught_up(&leader_addr, &learner_addr, catch_up_deadline).await?;
    let catch_up = started.elapsed();

    let leader_peak_rss_kib = pid_of(cluster.node_config(1)?).and_then(peak_rss_kib);
    let learner_peak_rss_kib = pid_of(cluster.node_config(2)?).and_then(peak_rss_kib);
    let install_ms = logged_ms(&cluster.dir.join("node-2.log"), "snapshot installed");
    cluster.kill_node(1)?;
    cluster.kill_node(2)?;

    let leader_store = berth_raft_store::store::store_path(&cluster.data_dir(1));
    let learner_store = berth_raft_store::store::store_path(&cluster.data_dir(2));
    let leader = summarize(&leader_store)?;
    let learner = summarize(&learner_store)?;
    // Measured after the reopen above, which flushes what the WAL held:
    // the settled size.
    let leader_disk_bytes = dir_bytes(&leader_store);
    let learner_disk_bytes = dir_bytes(&learner_store);

    let mismatch = |what: String| Err(DrillError::Mismatch(what));
    if leader.jobs != jobs {
        return mismatch(format!("the leader holds {} jobs, not {jobs}", leader.jobs));
    }
    if learner.jobs != leader.jobs {
        return mismatch(format!(
            "jobs: learner {}, leader {}",
            learner.jobs, leader.jobs
        ));
    }
    if learner.counters_json != leader.counters_json {
        return mismatch(format!(
            "counters: learner {}, leader {}",
            learner.counters_json, leader.counters_json
        ));
    }
    if learner.last_applied != leader.last_applied {
        return mismatch(format!(
            "last applied: learner {}, leader {}",
            learner.last_applied, leader.last_applied
        ));
    }
    if let Some((id, _)) = leader
        .samples
        .iter()
        .find(|(id, text)| learner.samples.get(id) != Some(text))
    {
        return mismatch(format!("job {id} differs"));
    }
    if learner.digest != leader.digest {
        return mismatch(format!(
            "digest: learner {:016x}, leader {:016x}",
            learner.digest, leader.digest
        ));
    }
    if next_job_id != leader.next_job_id {
        return mismatch(format!(
            "next job id: learner reported {next_job_id}, stores hold {}",
            leader.next_job_id
        ));
    }
    Ok(TransferReport {
        jobs,
        generate: generate_time,
        serialize,
        snapshot_bytes,
        catch_up,
        install_ms,
        leader_peak_rss_kib,
        learner_peak_rss_kib,
        leader_disk_bytes,
        learner_disk_bytes,
        applied_index,
        next_job_id,
        digest: leader.digest,
        sampled_records: leader.samples.len() as u64,
    })
}

/// Where `dir` is given, the drill runs there; else in a temporary
/// directory removed afterwards.
pub fn work_dir(dir: Option<PathBuf>) -> std::io::Result<(Option<tempfile::TempDir>, PathBuf)> {
    match dir {
        Some(d) => Ok((None, d)),
        None => {
            let tmp = tempfile::tempdir()?;
            let path = tmp.path().to_path_buf();
            Ok((Some(tmp), path))
        }
    }
}
