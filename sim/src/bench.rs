//! A seeded, busy cluster state to time full passes on (`berth sim
//! bench-pass`). The generator is splitmix64, written here: the crate takes
//! no randomness dependency and the same seed gives the same state on every
//! machine.

use serde::Serialize;

use std::sync::Arc;

use berth_scheduler::assoc::{Account, UserRecord};
use berth_scheduler::model::{Host, HostState, Inventory, Resources};
use berth_scheduler::partition::Partition;
use berth_scheduler::pass::{
    schedule, PendingJob, Policy, PriorityWeights, RunningJob, Shape, Snapshot,
};
use berth_scheduler::qos::{Qos, TresKind};
use berth_scheduler::usage::UsageRecord;

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

/// Users in the generated site, spread over the leaf accounts.
const BENCH_USERS: usize = 200;

/// A department: its name, its shares, and its groups with their shares.
type Department = (&'static str, u32, &'static [(&'static str, u32)]);

/// The account tree: departments under the root, groups under them.
const BENCH_ACCOUNTS: [Department; 4] = [
    ("physics", 40, &[("astro", 3), ("hep", 2), ("cond", 1)]),
    ("bio", 25, &[("genomics", 2), ("struct", 1)]),
    ("cs", 20, &[("ml", 3), ("systems", 1)]),
    ("eng", 15, &[("cfd", 1), ("materials", 1)]),
];

/// A host kind: inventory, partitions, features, and its share of hosts
/// (in tenths).
struct HostKind {
    cpus: u32,
    mem_mb: u64,
    gpus: u32,
    gpu_type: &'static str,
    partitions: &'static [&'static str],
    features: &'static [&'static str],
    tenths: u64,
}

const HOST_KINDS: [HostKind; 5] = [
    HostKind {
        cpus: 64,
        mem_mb: 256_000,
        gpus: 0,
        gpu_type: "",
        partitions: &["cpu", "debug"],
        features: &[],
        tenths: 4,
    },
    HostKind {
        cpus: 128,
        mem_mb: 512_000,
        gpus: 0,
        gpu_type: "",
        partitions: &["cpu"],
        features: &["avx512", "ib"],
        tenths: 3,
    },
    HostKind {
        cpus: 128,
        mem_mb: 2_048_000,
        gpus: 0,
        gpu_type: "",
        partitions: &["cpu"],
        features: &["avx512", "himem"],
        tenths: 1,
    },
    HostKind {
        cpus: 64,
        mem_mb: 1_024_000,
        gpus: 8,
        gpu_type: "a100",
        partitions: &["gpu"],
        features: &["ib", "nvlink"],
        tenths: 1,
    },
    HostKind {
        cpus: 96,
        mem_mb: 2_048_000,
        gpus: 8,
        gpu_type: "h100",
        partitions: &["gpu"],
        features: &["ib", "nvlink"],
        tenths: 1,
    },
];

/// Who a job belongs to and how it is classed.
struct Owner {
    user: String,
    account: String,
    qos: &'static str,
}

/// A random user with its account; `high_in_50` and `low_in_50` are the
/// chances in 50 of QOS `high` and `low` (else the default, `normal`).
fn owner(rng: &mut SplitMix64, leaves: &[String], high_in_50: u64, low_in_50: u64) -> Owner {
    let u = rng.below(BENCH_USERS as u64) as usize;
    let roll = rng.below(50);
    let qos = if roll < high_in_50 {
        "high"
    } else if roll < high_in_50 + low_in_50 {
        "low"
    } else {
        ""
    };
    Owner {
        user: format!("u{u:03}"),
        account: leaves[u % leaves.len()].clone(),
        qos,
    }
}

/// The site's policy objects: three partitions, a two-level account tree
/// with shares and a department CPU limit, QOS `normal` / `high` / `low`
/// with GrpTRES and per-user limits sized to the cluster, users with their
/// default accounts, and decayed usage that differs by account.
fn bench_policy_objects(
    snapshot: &mut Snapshot,
    hosts: usize,
    total: Resources,
    leaves: &[String],
    rng: &mut SplitMix64,
) {
    let partition = |name: &str, default: bool, max_time_s: u64, factor: u32| Partition {
        name: name.to_string(),
        default,
        max_time_s: Some(max_time_s),
        priority_job_factor: factor,
        ..Partition::default()
    };
    snapshot.partitions = vec![
        partition("cpu", true, 3 * 86_400, 1),
        partition("gpu", false, 2 * 86_400, 1),
        Partition {
            max_nodes: Some(2),
            ..partition("debug", false, 3_600, 10)
        },
    ];
    let mut high = Qos::named("high");
    high.priority = 100;
    high.limits.grp_tres.gpu = Some(u64::from(total.gpus) / 4);
    // Per-user limits scale with the cluster (200 users share it), so
    // that they bind a few heavy users at every size, not everyone.
    high.limits.max_jobs_per_user = Some(20 + u32::try_from(hosts / 20).unwrap_or(u32::MAX));
    let mut low = Qos::named("low");
    low.usage_factor = 0.5;
    low.limits.grp_tres.cpu = Some(u64::from(total.cpus) * 3 / 10);
    let mut normal = Qos::named("normal");
    normal.priority = 10;
    normal.limits.max_tres_per_user.cpu = Some(u64::from(total.cpus) / 40);
    normal.limits.max_tres_per_user.gpu = Some((u64::from(total.gpus) / 40).max(8));
    snapshot.qos = vec![normal, high, low];
    let qos_names: Vec<String> = ["normal", "high", "low"].map(String::from).to_vec();
    let mut accounts = Vec::new();
    for (dept, shares, groups) in BENCH_ACCOUNTS {
        let mut a = Account {
            name: dept.to_string(),
            shares,
            qos: qos_names.clone(),
            ..Account::default()
        };
        if dept == "physics" {
            a.limits.grp_tres.cpu = Some(u64::from(total.cpus) / 2);
        }
        accounts.push(a);
        for &(group, shares) in groups {
            accounts.push(Account {
                name: group.to_string(),
                parent: dept.to_string(),
                shares,
                qos: qos_names.clone(),
                ..Account::default()
            });
        }
    }
    for u in 0..BENCH_USERS {
        let leaf = &leaves[u % leaves.len()];
        let name = format!("u{u:03}");
        if let Some(a) = accounts.iter_mut().find(|a| a.name == *leaf) {
            a.users.push(name.clone());
        }
        snapshot.users.push(UserRecord {
            name,
            priority: 0,
            default_account: leaf.clone(),
        });
    }
    snapshot.accounts = accounts;
    for leaf in leaves {
        let cpu_s = rng.below(50_000_000) as f64;
        let mut record = UsageRecord::default();
        record.tres_s[TresKind::Cpu.index()] = cpu_s;
        snapshot.usage.accounts.insert(leaf.clone(), record);
    }
}

/// A site shaped like a real one: `hosts` hosts of five kinds (CPU hosts
/// of three sizes, some with `avx512`/`ib`/`himem` features; 8-GPU hosts
/// typed `a100` or `h100`), three partitions (`cpu`, `gpu`, and a short
/// `debug` one with a node limit and a higher priority factor), an
/// account tree of 4 departments and 9 groups with shares and usage, 200
/// users, QOS `normal`/`high`/`low` with GrpTRES and per-user limits,
/// about 70% of CPUs and GPUs held by running jobs that end over the next
/// two days, and `pending` jobs: single-host CPU jobs, CPU gangs of 2-16
/// hosts (some exclusive), GPU jobs of 1-8 GPUs (some typed, some gangs),
/// short debug jobs, jobs needing a feature, a few without a time limit,
/// a few held, a few niced. Seeded: the same arguments give the same
/// state.
pub fn bench_snapshot(pending: usize, hosts: usize, seed: u64) -> Snapshot {
    let mut rng = SplitMix64::new(seed);
    let leaves: Vec<String> = BENCH_ACCOUNTS
        .iter()
        .flat_map(|(_, _, groups)| groups.iter().map(|(g, _)| g.to_string()))
        .collect();
    let mut host_list = Vec::with_capacity(hosts);
    let mut running = Vec::new();
    let mut next_id = 1u64;
    let mut total = Resources::default();
    for i in 0..hosts {
        let mut pick = rng.below(10);
        let kind = HOST_KINDS
            .iter()
            .find(|k| {
                let here = pick < k.tenths;
                pick = pick.saturating_sub(k.tenths);
                here
            })
            .unwrap_or(&HOST_KINDS[0]);
        let name = format!("h{i:06}");
        let inventory = Inventory {
            cpus: kind.cpus,
            mem_mb: kind.mem_mb,
            gpus: kind.gpus,
            gpu_type: kind.gpu_type.to_string(),
            emulator: None,
            features: Vec::new(),
        };
        let size = inventory.resources();
        total = total.saturating_add(size);
        let mut allocated = Resources::default();
        // Fill to about 70% of CPUs with jobs of 1-16 CPUs (and to about
        // 70% of GPUs, one each, on GPU hosts).
        while allocated.cpus * 10 < size.cpus * 7 {
            let cpus = (1 + rng.below(16) as u32).min(size.cpus - allocated.cpus);
            let gpus = u32::from(allocated.gpus * 10 < size.gpus * 7);
            let per_host = Resources {
                cpus,
                mem_mb: (u64::from(cpus) * 4_000).min(size.mem_mb - allocated.mem_mb),
                gpus,
                emu: 0,
            };
            allocated = allocated.saturating_add(per_host);
            let end_ms =
                (rng.below(10) > 0).then(|| BENCH_NOW_MS + 1_000 * (60 + rng.below(2 * 86_400)));
            // Few running jobs are `high`: its per-user job limit would
            // otherwise hold every `high` job at the top of the queue.
            let who = owner(&mut rng, &leaves, 1, 4);
            running.push(RunningJob {
                id: next_id,
                hosts: vec![name.clone()],
                per_host,
                end_ms,
                start_ms: BENCH_NOW_MS.saturating_sub(rng.below(86_400_000)),
                user: who.user,
                account: who.account,
                qos: who.qos.to_string(),
                partition: kind.partitions[0].to_string(),
                array: None,
                ..RunningJob::default()
            });
            next_id += 1;
        }
        host_list.push(Host {
            name,
            inventory,
            state: if rng.below(100) == 0 {
                HostState::Down
            } else {
                HostState::Up
            },
            allocated,
            partitions: kind.partitions.iter().map(|p| p.to_string()).collect(),
            features: kind.features.iter().map(|f| f.to_string()).collect(),
        });
    }
    let pending = (0..pending)
        .map(|_| {
            let who = owner(&mut rng, &leaves, 5, 5);
            let mut job = PendingJob {
                id: next_id,
                held: rng.below(50) == 0,
                submit_ms: BENCH_NOW_MS.saturating_sub(rng.below(86_400_000)),
                nice: if rng.below(20) == 0 { 100 } else { 0 },
                user: who.user,
                account: if rng.below(4) == 0 {
                    String::new()
                } else {
                    who.account
                },
                qos: who.qos.to_string(),
                time_limit_s: if rng.below(20) == 0 {
                    0
                } else {
                    rng.pick(&[600u64, 3_600, 14_400, 86_400])
                },
                ..PendingJob::default()
            };
            let cpus = rng.pick(&[1u32, 2, 4, 8, 16, 32]);
            let mem_mb = u64::from(cpus) * rng.pick(&[500u64, 2_000, 4_000, 8_000]);
            match rng.below(20) {
                // CPU gangs, half of them exclusive.
                0..=1 => {
                    job.shape = Shape {
                        nodes: 2 + rng.below(15) as u32,
                        per_host: Resources::cpu_mem(cpus, mem_mb),
                        exclusive: rng.below(2) == 0,
                        ..Shape::default()
                    };
                }
                // GPU jobs: 1-8 GPUs, typed half the time, some gangs.
                2..=5 => {
                    let gpus = rng.pick(&[1u32, 2, 4, 8]);
                    job.partitions = vec!["gpu".to_string()];
                    job.shape = Shape {
                        nodes: if gpus == 8 && rng.below(3) == 0 {
                            2 + rng.below(3) as u32
                        } else {
                            1
                        },
                        per_host: Resources {
                            cpus: gpus * 8,
                            mem_mb: u64::from(gpus) * 64_000,
                            gpus,
                            emu: 0,
                        },
                        gpu_type: match rng.below(4) {
                            0 => "a100".to_string(),
                            1 => "h100".to_string(),
                            _ => String::new(),
                        },
                        ..Shape::default()
                    };
                }
                // Short debug jobs.
                6 => {
                    job.partitions = vec!["debug".to_string(), "cpu".to_string()];
                    job.time_limit_s = rng.pick(&[300u64, 900, 1_800]);
                    job.shape = Shape {
                        nodes: 1 + rng.below(2) as u32,
                        per_host: Resources::cpu_mem(cpus.min(8), mem_mb.min(32_000)),
                        ..Shape::default()
                    };
                }
                // Jobs needing a feature.
                7 => {
                    job.shape = Shape {
                        per_host: Resources::cpu_mem(cpus, mem_mb),
                        features: vec![rng.pick(&["avx512", "himem", "ib"]).to_string()],
                        ..Shape::one(Resources::default())
                    };
                }
                _ => job.shape = Shape::one(Resources::cpu_mem(cpus, mem_mb)),
            }
            next_id += 1;
            Arc::new(job)
        })
        .collect();
    let mut snapshot = Snapshot {
        hosts: host_list,
        pending,
        running,
        ..Snapshot::default()
    };
    bench_policy_objects(&mut snapshot, hosts, total, &leaves, &mut rng);
    snapshot
}

/// The pass policy `berth sim bench-pass` times: the defaults (EASY, one
/// reservation) with every priority factor weighted, so that fair share,
/// job size, partition and QOS all take part in the queue order.
pub fn bench_policy() -> Policy {
    Policy {
        priority: PriorityWeights {
            age: 1_000,
            fairshare: 10_000,
            job_size: 500,
            partition: 1_000,
            qos: 2_000,
            assoc: 0,
            ..PriorityWeights::default()
        },
        ..Policy::default()
    }
}

/// The clocks read around each timed pass. The library reads none (its
/// passes take time as an argument): the caller brings them.
pub trait PassClock {
    /// A monotonic time in ms.
    fn wall_ms(&mut self) -> f64;
    /// This thread's CPU time in ms, where the caller can read it: unlike
    /// wall time it does not count waiting for a CPU on a loaded machine.
    fn cpu_ms(&mut self) -> Option<f64> {
        None
    }
}

/// What [`time_passes`] measured, pass by pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassTimes {
    pub wall_ms: Vec<f64>,
    /// Empty where the clock has no CPU time.
    pub cpu_ms: Vec<f64>,
    /// Jobs the last pass started (one-host and gangs).
    pub started_per_pass: usize,
}

/// Runs `passes` passes of `schedule` on `snapshot` at [`BENCH_NOW_MS`],
/// reading `clock` before and after each: the one timed loop behind
/// `berth sim bench-pass`, `berth-drill bench pass-grid` and the
/// `sim_profile` example.
pub fn time_passes(
    snapshot: &Snapshot,
    policy: &Policy,
    passes: usize,
    clock: &mut impl PassClock,
) -> PassTimes {
    let mut times = PassTimes {
        wall_ms: Vec::with_capacity(passes),
        cpu_ms: Vec::with_capacity(passes),
        started_per_pass: 0,
    };
    for _ in 0..passes {
        let cpu_before = clock.cpu_ms();
        let wall_before = clock.wall_ms();
        let plan = schedule(snapshot, policy, BENCH_NOW_MS);
        times.wall_ms.push(clock.wall_ms() - wall_before);
        if let (Some(a), Some(b)) = (cpu_before, clock.cpu_ms()) {
            times.cpu_ms.push((b - a).max(0.0));
        }
        times.started_per_pass = plan.starts.len() + plan.gang_starts.len();
    }
    times
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
    use berth_scheduler::pass::schedule;

    #[test]
    fn same_seed_same_state_and_the_pass_starts_work() {
        let a = bench_snapshot(500, 50, 7);
        assert_eq!(a, bench_snapshot(500, 50, 7));
        assert_ne!(a, bench_snapshot(500, 50, 8));
        assert_eq!(a.hosts.len(), 50);
        assert_eq!(a.pending.len(), 500);
        let plan = schedule(&a, &bench_policy(), BENCH_NOW_MS);
        assert!(!plan.starts.is_empty());
        assert_eq!(plan.reservations.len(), 1);
    }

    #[test]
    fn the_state_has_the_parts_of_a_real_site_and_its_limits_bind() {
        let s = bench_snapshot(1_000, 100, 1);
        let gpu_types: std::collections::BTreeSet<&str> = s
            .hosts
            .iter()
            .map(|h| h.inventory.gpu_type.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        assert_eq!(gpu_types.into_iter().collect::<Vec<_>>(), ["a100", "h100"]);
        assert_eq!(s.partitions.len(), 3);
        assert_eq!(s.accounts.len(), 13);
        assert!(s.accounts.iter().any(|a| a.limits.grp_tres.cpu.is_some()));
        assert!(s.qos.iter().any(|q| q.limits.grp_tres.gpu.is_some()));
        assert!(s.pending.iter().any(|j| j.shape.nodes > 1));
        assert!(s.pending.iter().any(|j| !j.shape.gpu_type.is_empty()));
        assert!(s.pending.iter().any(|j| !j.shape.features.is_empty()));
        let plan = schedule(&s, &bench_policy(), BENCH_NOW_MS);
        // Some jobs wait on a QOS limit, not only on room or priority.
        assert!(
            plan.reasons.values().any(|r| r.code().starts_with("QOS")),
            "{:?}",
            plan.reasons.values().map(|r| r.code()).collect::<Vec<_>>()
        );
        assert!(plan.starts.iter().any(|p| p.partition == "gpu"));
    }

    /// A clock whose wall time moves 2 ms and CPU time 1 ms per reading.
    #[derive(Default)]
    struct Ticks {
        wall: f64,
        cpu: f64,
    }

    impl PassClock for Ticks {
        fn wall_ms(&mut self) -> f64 {
            self.wall += 2.0;
            self.wall
        }
        fn cpu_ms(&mut self) -> Option<f64> {
            self.cpu += 1.0;
            Some(self.cpu)
        }
    }

    #[test]
    fn passes_are_timed_between_two_readings_of_the_callers_clock() {
        let s = bench_snapshot(200, 20, 1);
        let times = time_passes(&s, &bench_policy(), 3, &mut Ticks::default());
        assert_eq!(times.wall_ms, [2.0, 2.0, 2.0]);
        assert_eq!(times.cpu_ms, [1.0, 1.0, 1.0]);
        let plan = schedule(&s, &bench_policy(), BENCH_NOW_MS);
        assert_eq!(
            times.started_per_pass,
            plan.starts.len() + plan.gang_starts.len()
        );
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 1234567 from the reference C code.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }
}
