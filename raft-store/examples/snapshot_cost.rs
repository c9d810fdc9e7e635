//! What a leader's pass spends on its snapshot of the applied state next
//! to `schedule()` itself, as the queue grows: JOBS pending jobs (a
//! training job's spec, one GPU each) on 100 full hosts, on the real state
//! machine in memory. Prints, per queue size, the first snapshot (which
//! makes every pending view), the median of the next ones and of the part
//! of them a leader takes under the state's lock (`pass_input`), the median
//! pass over that snapshot, and the heap the kept views hold:
//!
//!   cargo run --release -p berth-raft-store --example snapshot_cost -- [JOBS...]
//!
//! (default 10000 30000 100000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use berth_scheduler::{schedule, HostState, Inventory, JobSpec, Policy};
use berth_state::Command;
use berth_state::{Dirty, SmState};

const HOSTS: usize = 100;
const ROUNDS: usize = 9;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Counts live heap bytes, so the kept views' size can be read exactly.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_mib() -> f64 {
    LIVE_BYTES.load(Relaxed) as f64 / (1024.0 * 1024.0)
}

fn apply(s: &mut SmState, command: Command) {
    s.apply(&command, &mut Dirty::default());
}

fn state(jobs: usize) -> SmState {
    let mut s = SmState::default();
    for h in 0..HOSTS {
        apply(
            &mut s,
            Command::RegisterHost {
                name: format!("h{h:04}"),
                // No GPUs: nothing fits, as under a storm into a full
                // cluster, so every pass walks the whole queue.
                inventory: Inventory::cpu_mem(64, 512 * 1024),
                agent_restarted: false,
                running_allocs: Vec::new(),
                now_ms: 1,
                drain_reason: String::new(),
                step_addr: String::new(),
            },
        );
    }
    for n in 0..jobs {
        apply(
            &mut s,
            Command::SubmitJob {
                request_id: format!("req-{n}"),
                spec: JobSpec {
                    name: "train-resnet50".into(),
                    user: format!("user{}", n % 50),
                    command: "python train.py --epochs 90".into(),
                    cpus: 8,
                    mem_mb: 32_768,
                    gres: vec!["gpu:1".into()],
                    time_limit_s: 14_400,
                    ..JobSpec::default()
                },
                now_ms: 10 + n as u64,
            },
        );
    }
    s
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("a job count, not {a:?}"))
        })
        .collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 30_000, 100_000]
    } else {
        sizes
    };
    let policy = Policy::default();
    println!(
        "pending | first snapshot ms | snapshot ms (median) | of it under the lock | schedule() ms (median) | state MiB | views MiB"
    );
    for jobs in sizes {
        let s = state(jobs);
        let before_mib = live_mib();
        let started = Instant::now();
        let first = s.scheduler_snapshot(|_| HostState::Up);
        let first_ms = started.elapsed();
        assert_eq!(first.pending.len(), jobs);
        drop(first);
        // What the first snapshot left behind: the kept views.
        let views_mib = live_mib() - before_mib;
        let mut locked = Vec::new();
        let mut snaps = Vec::new();
        let mut passes = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            // The part a leader takes under the state's read lock...
            let input = s.pass_input(|_| HostState::Up);
            locked.push(started.elapsed());
            // ...and the copy it makes after.
            let snapshot = input.into_snapshot();
            snaps.push(started.elapsed());
            let started = Instant::now();
            let plan = schedule(&snapshot, &policy, 1_000_000);
            passes.push(started.elapsed());
            assert!(plan.starts.is_empty());
        }
        println!(
            "{jobs:>7} | {:>17.1} | {:>20.1} | {:>20.1} | {:>22.1} | {before_mib:>9.1} | {views_mib:>9.1}",
            first_ms.as_secs_f64() * 1e3,
            median(snaps).as_secs_f64() * 1e3,
            median(locked).as_secs_f64() * 1e3,
            median(passes).as_secs_f64() * 1e3
        );
    }
}
