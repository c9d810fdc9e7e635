//! Store benchmarks (issue 5). Build with --release for figures:
//!
//!   cargo run --release -p berth-raft-store --example store_bench -- [--jobs N] [--dir DIR]
//!   cargo run --release -p berth-raft-store --example store_bench -- --open STORE
//!
//! Measures, on the real `LogStore` / `StateMachineStore` code:
//! - log append with a synced WAL at batch sizes 1, 16 and 256 (entries/s);
//! - apply throughput of SubmitJob commands at apply batch sizes 1, 64 and
//!   1,000 (one synced write per batch);
//! - with N jobs in state (default 1,000,000): bytes on disk per job,
//!   reopen time (until the state is loaded and reads can be served),
//!   snapshot build time and size, install time into a fresh store.
//!
//! `--open STORE` instead opens an existing store in place and says how
//! long it took until reads could be served, which includes converting a
//! store an earlier version wrote (its format before and after are
//! printed). It changes the store as a node's start would.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;

use berth_raft_store::{open, SnapshotData, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{Entry, RaftSnapshotBuilder};

/// Each throughput measurement runs for about this long.
const MEASURE_MS: u64 = 3_000;
/// And for at most this many batches.
const MEASURE_BATCHES_MAX: u64 = 1_000_000;
/// Jobs are loaded into the state in apply batches of this many.
const LOAD_BATCH_ENTRIES: u64 = 1_000;

fn submit_entry(index: u64) -> Entry<TypeConfig> {
    common::entry(index, common::submit(index, format!("bench-{index:012}")))
}

fn dir_bytes(path: &Path) -> u64 {
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

fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

fn bench_append(base: &Path) -> Result<(), Box<dyn std::error::Error>> {
    for batch_size in [1u64, 16, 256] {
        let path = base.join(format!("append-{batch_size}"));
        let store = open(&path)?;
        let started = Instant::now();
        let mut index = 1;
        let mut batches = 0;
        while started.elapsed() < Duration::from_millis(MEASURE_MS) && batches < MEASURE_BATCHES_MAX
        {
            let entries: Vec<_> = (index..index + batch_size).map(submit_entry).collect();
            store.log.append_durable(entries)?;
            index += batch_size;
            batches += 1;
        }
        let elapsed = started.elapsed();
        println!(
            "append  batch {batch_size:>4}: {:>9.0} entries/s  {:>7.0} synced batches/s",
            rate(batches * batch_size, elapsed),
            rate(batches, elapsed)
        );
    }
    Ok(())
}

async fn bench_apply(base: &Path) -> Result<(), Box<dyn std::error::Error>> {
    for batch_size in [1u64, 64, 1_000] {
        let path = base.join(format!("apply-{batch_size}"));
        let mut store = open(&path)?;
        let started = Instant::now();
        let mut index = 1;
        let mut batches = 0;
        while started.elapsed() < Duration::from_millis(MEASURE_MS) && batches < MEASURE_BATCHES_MAX
        {
            let entries: Vec<_> = (index..index + batch_size).map(submit_entry).collect();
            store.state_machine.apply(entries).await?;
            index += batch_size;
            batches += 1;
        }
        let elapsed = started.elapsed();
        println!(
            "apply   batch {batch_size:>4}: {:>9.0} submits/s",
            rate(batches * batch_size, elapsed)
        );
    }
    Ok(())
}

async fn bench_large_state(base: &Path, jobs: u64) -> Result<(), Box<dyn std::error::Error>> {
    let path = base.join("large");
    {
        let mut store = open(&path)?;
        let started = Instant::now();
        let mut index = 1;
        while index <= jobs {
            let end = (index + LOAD_BATCH_ENTRIES).min(jobs + 1);
            store
                .state_machine
                .apply((index..end).map(submit_entry))
                .await?;
            index = end;
        }
        println!(
            "load    {jobs} jobs: {:.1} s ({:.0} submits/s in apply batches of {LOAD_BATCH_ENTRIES})",
            started.elapsed().as_secs_f64(),
            rate(jobs, started.elapsed())
        );
    }

    let started = Instant::now();
    let mut store = open(&path)?;
    let reopen = started.elapsed();
    let loaded = store.state.read().map(|s| s.data.jobs.len()).unwrap_or(0);
    println!(
        "reopen  {loaded} jobs: {:.2} s until the state is loaded",
        reopen.as_secs_f64()
    );
    // Measured after the reopen, which flushes what the WAL held into
    // table files: the settled size, WAL included.
    let bytes = dir_bytes(&path);
    println!(
        "disk    {bytes} bytes for {jobs} jobs: {:.0} bytes/job (request ids, at most 100,000, included)",
        bytes as f64 / jobs.max(1) as f64
    );

    let started = Instant::now();
    let mut builder = store.state_machine.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await?;
    let built = started.elapsed();
    let meta = snapshot.meta.clone();
    let started = Instant::now();
    let bytes = snapshot.snapshot.into_bytes().await?;
    let serialized = started.elapsed();
    let snapshot_bytes = bytes.len();
    println!(
        "snapshot build {jobs} jobs: {:.3} s (pin and record); serialize for a follower: {:.2} s, {snapshot_bytes} bytes ({:.0} bytes/job)",
        built.as_secs_f64(),
        serialized.as_secs_f64(),
        snapshot_bytes as f64 / jobs.max(1) as f64
    );

    let fresh_path = base.join("installed");
    let mut fresh = open(&fresh_path)?;
    let started = Instant::now();
    fresh
        .state_machine
        .install_snapshot(&meta, Box::new(SnapshotData::from_bytes(bytes)))
        .await?;
    println!(
        "snapshot install {jobs} jobs: {:.2} s (decode, one synced batch, state swap)",
        started.elapsed().as_secs_f64()
    );
    drop(fresh);
    let started = Instant::now();
    let fresh = open(&fresh_path)?;
    let loaded = fresh.state.read().map(|s| s.data.jobs.len()).unwrap_or(0);
    println!(
        "reopen  installed store, {loaded} jobs: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--open STORE`: the time to open an existing store.
fn open_existing(path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let store = open(path)?;
    let opened = started.elapsed();
    let loaded = store.state.read().map(|s| s.data.jobs.len()).unwrap_or(0);
    drop(store);
    println!(
        "open    {} ({loaded} jobs): {:.2} s until the state is loaded",
        path.display(),
        opened.as_secs_f64()
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut jobs: u64 = 1_000_000;
    let mut dir: Option<PathBuf> = None;
    let mut existing: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--jobs" => jobs = args.next().ok_or("--jobs needs a number")?.parse()?,
            "--dir" => dir = Some(args.next().ok_or("--dir needs a path")?.into()),
            "--open" => existing = Some(args.next().ok_or("--open needs a path")?.into()),
            other => {
                return Err(format!(
                    "unknown argument {other}; use --jobs N, --dir DIR, or --open STORE"
                )
                .into())
            }
        }
    }
    if let Some(path) = existing {
        return open_existing(&path);
    }
    // Under DIR when given (pick a disk like the one nodes use), else the
    // system temporary directory; removed at the end either way.
    let base = match dir {
        Some(d) => tempfile::TempDir::new_in(d)?,
        None => tempfile::TempDir::new()?,
    };
    println!("store_bench: {jobs} jobs under {}", base.path().display());
    bench_append(base.path())?;
    bench_apply(base.path()).await?;
    bench_large_state(base.path(), jobs).await?;
    Ok(())
}
