//! What a node's storage spends per submit under a storm of them, on the
//! real `LogStore` and `StateMachineStore`: each round appends one log
//! entry carrying a batch of submits (a synced write, as a leader's batcher
//! or a follower's AppendEntries makes), then applies it (the job records,
//! request ids and metadata, written without a sync of their own). The
//! request ids interleave 64 clients', as `berth-drill bench raft-writes`
//! sends them; the job is `store_bench`'s. Prints the process's CPU time
//! (user + system) and the wall time per submit over each block of rounds:
//!
//!   cargo run --release -p berth-raft-store --example write_path_cost -- [SUBMITS] [BATCH]
//!
//! (defaults 200,000 and 16). CPU time is read with `getrusage`: this
//! process's own work, though other load on the machine still moves it by
//! several percent; under `valgrind --tool=callgrind` the instruction
//! count does not move with the machine's load.

use std::time::{Duration, Instant};

mod common;

use berth_raft_store::{open, TypeConfig};
use berth_state::Command;
use openraft::storage::RaftStateMachine;
use openraft::Entry;

/// Clients whose request ids interleave, as in the raft-writes benchmark.
const CLIENTS: u64 = 64;
/// Lines printed before the total, one per block of rounds.
const BLOCKS: u64 = 5;

fn batch_entry(index: u64, first_submit: u64, batch: u64) -> Entry<TypeConfig> {
    let commands = (first_submit..first_submit + batch)
        .map(|n| common::submit(n, format!("bench-1-2-{}-{}", n % CLIENTS, n / CLIENTS)))
        .collect();
    common::entry(index, Command::Batch { commands })
}

/// This process's user + system CPU time so far.
fn cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of that plain C struct,
    // and getrusage only writes the struct it is given.
    let (rc, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage), usage)
    };
    assert_eq!(rc, 0, "getrusage");
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let submits: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let batch: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(16);
    if batch == 0 || submits < batch {
        return Err("BATCH must be at least 1 and at most SUBMITS".into());
    }
    let dir = tempfile::tempdir()?;
    let mut store = open(&dir.path().join("store"))?;
    let rounds = submits / batch;
    let block = rounds.div_ceil(BLOCKS);
    println!("{rounds} rounds of one entry with {batch} submits");
    let (mut cpu0, mut wall0) = (cpu_time(), Instant::now());
    let (total_cpu0, total_wall0) = (cpu0, wall0);
    for round in 0..rounds {
        let entry = batch_entry(round + 1, round * batch, batch);
        store.log.append_durable([entry.clone()])?;
        store.state_machine.apply([entry]).await?;
        if (round + 1) % block == 0 || round + 1 == rounds {
            let done = (round % block + 1) * batch;
            let (cpu, wall) = (cpu_time(), Instant::now());
            println!(
                "submits {:>8}: {:>6.1} us CPU, {:>6.1} us wall per submit",
                (round + 1) * batch,
                (cpu - cpu0).as_secs_f64() * 1e6 / done as f64,
                (wall - wall0).as_secs_f64() * 1e6 / done as f64
            );
            (cpu0, wall0) = (cpu, wall);
        }
    }
    let total = rounds * batch;
    println!(
        "all {total}: {:.1} us CPU, {:.1} us wall per submit",
        (cpu_time() - total_cpu0).as_secs_f64() * 1e6 / total as f64,
        total_wall0.elapsed().as_secs_f64() * 1e6 / total as f64
    );
    Ok(())
}
