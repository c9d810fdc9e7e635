//! A seeded, busy cluster state to time full passes on (`berth sim
//! bench-pass`). The generator is splitmix64, written here: the crate takes
//! no randomness dependency and the same seed gives the same state on every
//! machine.

use serde::Serialize;

use crate::model::{Host, HostState, Inventory, Resources};
use crate::pass::{PendingJob, RunningJob, Shape, Snapshot};

/// splitmix64 (Steele, Lea, Flood 2014): small, fast, and good enough to
/// spread a benchmark's jobs.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// One of `items`, uniformly.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The virtual time the bench's passes run at.
pub const BENCH_NOW_MS: u64 = 1_000_000_000;

/// `hosts` hosts of three sizes, about 70% of their CPUs held by running
/// jobs that end over the next two days, and `pending` jobs: mostly one
/// host, some gangs of 2-16 hosts, some exclusive, some without a time
/// limit, a few held.
pub fn bench_snapshot(pending: usize, hosts: usize, seed: u64) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let sizes = [(32u32, 128_000u64), (64, 256_000), (128, 1_024_000)];
    let mut host_list = Vec::with_capacity(hosts);
    let mut running = Vec::new();
    let mut next_id = 1u64;
    for i in 0..hosts {
        let (cpus, mem_mb) = rng.pick(&sizes);
        let mut allocated = Resources::default();
        let name = format!("h{i:06}");
        // Fill to about 70% with jobs of 1-16 CPUs.
        while allocated.cpus * 10 < cpus * 7 {
            let job_cpus = (1 + rng.below(16) as u32).min(cpus - allocated.cpus);
            let per_host = Resources::cpu_mem(job_cpus, u64::from(job_cpus) * 2_000);
            allocated = allocated.saturating_add(per_host);
            let end_ms =
                (rng.below(10) > 0).then(|| BENCH_NOW_MS + 1_000 * (60 + rng.below(2 * 86_400)));
            running.push(RunningJob {
                id: next_id,
                hosts: vec![name.clone()],
                per_host,
                end_ms,
                ..RunningJob::default()
            });
            next_id += 1;
        }
        host_list.push(Host {
            name,
            inventory: Inventory::cpu_mem(cpus, mem_mb),
            state: if rng.below(100) == 0 {
                HostState::Down
            } else {
                HostState::Up
            },
            allocated,
            partitions: Vec::new(),
            features: Vec::new(),
        });
    }
    let pending = (0..pending)
        .map(|_| {
            let gang = rng.below(10) == 0;
            let nodes = if gang { 2 + rng.below(15) as u32 } else { 1 };
            let cpus = rng.pick(&[1u32, 2, 4, 8, 16, 32]);
            let job = PendingJob {
                id: next_id,
                shape: Shape {
                    nodes,
                    per_host: Resources::cpu_mem(
                        cpus,
                        u64::from(cpus) * rng.pick(&[500u64, 2_000, 4_000]),
                    ),
                    exclusive: gang && rng.below(2) == 0,
                    ..Shape::default()
                },
                held: rng.below(50) == 0,
                time_limit_s: if rng.below(10) == 0 {
                    0
                } else {
                    rng.pick(&[600u64, 3_600, 14_400, 86_400])
                },
                submit_ms: BENCH_NOW_MS.saturating_sub(rng.below(86_400_000)),
                ..PendingJob::default()
            };
            next_id += 1;
            job
        })
        .collect();
    Snapshot {
        hosts: host_list,
        pending,
        running,
        ..Snapshot::default()
    }
}

/// `berth sim bench-pass`'s line.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub pending: usize,
    pub hosts: usize,
    pub passes: usize,
    pub pass_ms_p50: f64,
    pub pass_ms_max: f64,
    pub started_per_pass: usize,
}

impl BenchReport {
    /// From each pass's duration in ms (measured by the caller).
    pub fn new(
        pending: usize,
        hosts: usize,
        pass_ms: &[f64],
        started_per_pass: usize,
    ) -> BenchReport {
        let mut sorted = pass_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        let p50 = sorted
            .get(sorted.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or(0.0);
        let max = sorted.last().copied().unwrap_or(0.0);
        let round3 = |x: f64| (x * 1e3).round() / 1e3;
        BenchReport {
            pending,
            hosts,
            passes: pass_ms.len(),
            pass_ms_p50: round3(p50),
            pass_ms_max: round3(max),
            started_per_pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::{schedule, Policy};

    #[test]
    fn same_seed_same_state_and_the_pass_starts_work() {
        let a = bench_snapshot(500, 50, 7);
        assert_eq!(a, bench_snapshot(500, 50, 7));
        assert_ne!(a, bench_snapshot(500, 50, 8));
        assert_eq!(a.hosts.len(), 50);
        assert_eq!(a.pending.len(), 500);
        let plan = schedule(&a, &Policy::default(), BENCH_NOW_MS);
        assert!(!plan.starts.is_empty());
        assert_eq!(plan.reservations.len(), 1);
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 1234567 from the reference C code.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }
}
