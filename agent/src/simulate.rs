//! `berth-agent --simulate N`: N simulated hosts in one process, for scale
//! tests of the controller.
//!
//! Each host is one task on one tokio runtime: it registers with a
//! synthetic inventory, heartbeats at the server's interval (or
//! `--sim-heartbeat-ms`) with jitter, watches its assignments, and "runs"
//! what it is assigned: a job reports started at once and exits 0 after
//! `BERTH_SIM_RUNTIME_S` seconds from its environment
//! (`sbatch --export=BERTH_SIM_RUNTIME_S=120`), [`SIM_DEFAULT_RUNTIME_S`]
//! when it has none; a job leaving the set ends with SIGTERM at once.
//! Hosts share HTTP/2 connections, [`DEFAULT_HOSTS_PER_CONNECTION`] per
//! connection (a server lets one connection carry a bounded number of
//! streams), and follow the leader together: the first host told where the
//! leader is moves everyone.
//!
//! The inventory mix, by host number `i` (1-based): `i % 10` in 0..=5 a
//! CPU-only host (32 CPUs, 128 GiB); 6..=8 a GPU host with 4 to 8 GPUs of
//! one type (`a100`, `h100`, `l40s`); 9 an emulator host with 4 units of
//! `zebu` or `palladium` in one of 8 racks.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::agent::agent_service_client::AgentServiceClient;
use berth_proto::agent::{
    AssignmentSet, ExitedReport, HeartbeatRequest, RegisterRequest, RunningAllocation,
    StartedReport, WatchAssignmentsRequest,
};
use berth_proto::api::{EmulatorSet, Gpu, Inventory};
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use crate::discover;
use crate::reconcile::IndexFence;
use crate::session::leader_hint;

/// Most hosts one process simulates.
pub const SIM_HOSTS_MAX: u32 = 100_000;
/// Environment variable of a job that says how long it "runs", in s.
pub const SIM_RUNTIME_ENV: &str = "BERTH_SIM_RUNTIME_S";
/// How long a job without [`SIM_RUNTIME_ENV`] runs, in s.
pub const SIM_DEFAULT_RUNTIME_S: u64 = 30;
/// Longest simulated runtime accepted, in s (one week).
pub const SIM_RUNTIME_MAX_S: u64 = 7 * 86_400;
/// Hosts sharing one HTTP/2 connection by default.
pub const DEFAULT_HOSTS_PER_CONNECTION: u32 = 100;
/// Reports one host keeps for delivery at most; older ones are dropped.
pub const SIM_PENDING_REPORTS_MAX: usize = 1_024;
/// Jobs one simulated host runs at once at most; more are refused (exit 1).
pub const SIM_JOBS_PER_HOST_MAX: usize = 1_024;
/// Limit on one call to the cluster, in ms.
const SIM_RPC_TIMEOUT_MS: u64 = 10_000;
/// Bounds of the delay before a host tries again after a failure, in ms.
const SIM_RETRY_MIN_MS: u64 = 200;
const SIM_RETRY_MAX_MS: u64 = 5_000;
/// How often the process logs its counters, in s.
const SIM_STATS_EVERY_S: u64 = 10;

/// Errors that stop the simulation from starting.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("--simulate {0}: must be 1 to {SIM_HOSTS_MAX}")]
    Hosts(u32),
    #[error("no servers given")]
    NoServers,
    #[error("{0}")]
    Invalid(String),
}

/// How to simulate.
#[derive(Debug, Clone)]
pub struct SimOptions {
    pub hosts: u32,
    pub servers: Vec<String>,
    /// Heartbeat period; None: the server's.
    pub heartbeat_interval_ms: Option<u64>,
    /// Each heartbeat comes up to this percentage of the period early or
    /// late, so hosts do not beat in step.
    pub jitter_pct: u32,
    pub hosts_per_connection: u32,
    /// Host names are the prefix and a 5-digit number.
    pub prefix: String,
}

impl SimOptions {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.hosts == 0 || self.hosts > SIM_HOSTS_MAX {
            return Err(SimError::Hosts(self.hosts));
        }
        if self.servers.is_empty() {
            return Err(SimError::NoServers);
        }
        if self.jitter_pct > 50 {
            return Err(SimError::Invalid(format!(
                "--sim-jitter-pct {} is above 50",
                self.jitter_pct
            )));
        }
        if self.hosts_per_connection == 0 {
            return Err(SimError::Invalid(
                "--sim-hosts-per-connection must be at least 1".into(),
            ));
        }
        if let Some(ms) = self.heartbeat_interval_ms {
            if !(crate::config::HEARTBEAT_INTERVAL_MIN_MS
                ..=crate::config::HEARTBEAT_INTERVAL_MAX_MS)
                .contains(&ms)
            {
                return Err(SimError::Invalid(format!(
                    "--sim-heartbeat-ms {ms} is outside {}..={}",
                    crate::config::HEARTBEAT_INTERVAL_MIN_MS,
                    crate::config::HEARTBEAT_INTERVAL_MAX_MS
                )));
            }
        }
        if self.prefix.is_empty()
            || self
                .prefix
                .contains(|c: char| c.is_whitespace() || c == ',')
        {
            return Err(SimError::Invalid(format!(
                "--sim-prefix {:?} must be a non-empty word without commas",
                self.prefix
            )));
        }
        Ok(())
    }
}

/// Name of simulated host `i` (1-based).
pub fn host_name(prefix: &str, i: u32) -> String {
    format!("{prefix}{i:05}")
}

/// The synthetic inventory of host `i` (see the module docs).
pub fn synthetic_inventory(i: u32) -> Inventory {
    let mut inventory = Inventory {
        cpus: 32,
        memory_mb: 128 * 1024,
        ..Default::default()
    };
    match i % 10 {
        6..=8 => {
            const TYPES: [(&str, u64); 3] = [("a100", 81_920), ("h100", 81_920), ("l40s", 46_068)];
            let (model, memory_mb) = TYPES[(i / 10 % 3) as usize];
            let count = 4 + (i / 30) % 5;
            inventory.cpus = 64;
            inventory.memory_mb = 512 * 1024;
            inventory.gpus = (0..count)
                .map(|index| Gpu {
                    index,
                    model: model.to_string(),
                    memory_mb,
                    uuid: format!("GPU-sim-{i:05}-{index}"),
                })
                .collect();
        }
        9 => {
            let kind = if (i / 10).is_multiple_of(2) {
                "zebu"
            } else {
                "palladium"
            };
            inventory.emulators = vec![EmulatorSet {
                kind: kind.to_string(),
                name: format!("{kind}-{i:05}"),
                group: format!("rack{}", (i / 10) % 8),
                unit_ids: (0..4).collect(),
            }];
        }
        _ => {}
    }
    inventory
}

/// How long a job of `env` runs, in s.
pub fn sim_runtime_s(env: &std::collections::HashMap<String, String>) -> u64 {
    env.get(SIM_RUNTIME_ENV)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(SIM_DEFAULT_RUNTIME_S)
        .min(SIM_RUNTIME_MAX_S)
}

/// splitmix64: cheap, seeded, good enough to spread timers.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        if n == 0 {
            0
        } else {
            z % n
        }
    }

    /// `period_ms` moved by up to `pct` percent either way.
    fn jittered(&mut self, period_ms: u64, pct: u32) -> Duration {
        let span = period_ms * u64::from(pct) / 100;
        Duration::from_millis(period_ms - span + self.below(2 * span + 1))
    }
}

/// Counters over all hosts, logged every [`SIM_STATS_EVERY_S`].
#[derive(Debug, Default)]
pub struct SimStats {
    pub registered: AtomicU64,
    pub heartbeats: AtomicU64,
    pub failures: AtomicU64,
    pub jobs_started: AtomicU64,
    pub jobs_ended: AtomicU64,
}

/// What the hosts share: where the leader is, and the connections.
struct Shared {
    opts: SimOptions,
    /// (generation, address): the generation grows with every move, so a
    /// host whose session failed asks for a new leader only if nobody has
    /// moved everyone since its session began.
    leader: Mutex<(u64, String)>,
    /// Held while one host finds the leader for all of them.
    discovery: tokio::sync::Mutex<()>,
    channels: Mutex<HashMap<(String, u32), Channel>>,
    stats: SimStats,
}

impl Shared {
    fn new(opts: SimOptions) -> Shared {
        let first = opts.servers.first().cloned().unwrap_or_default();
        Shared {
            opts,
            leader: Mutex::new((0, first)),
            discovery: tokio::sync::Mutex::new(()),
            channels: Mutex::new(HashMap::new()),
            stats: SimStats::default(),
        }
    }

    /// The leader's address and its generation.
    fn leader(&self) -> (u64, String) {
        self.lock_leader().clone()
    }

    fn lock_leader(&self) -> std::sync::MutexGuard<'_, (u64, String)> {
        self.leader.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves everyone to `addr`.
    fn move_to(&self, addr: String) {
        let mut l = self.lock_leader();
        if l.1 != addr {
            tracing::info!(leader = %addr, "simulated hosts follow the leader");
            l.1 = addr;
        }
        l.0 += 1;
    }

    /// Moves everyone to `hint` (the leader a follower named).
    fn follow(&self, hint: String) {
        self.move_to(hint);
    }

    /// A session that began at generation `seen` failed: unless another
    /// host has moved everyone since, ask every server at once who leads
    /// (`discover`) and move everyone there. One host asks for all.
    async fn rediscover(&self, seen: u64, host: &str) {
        let _one_at_a_time = self.discovery.lock().await;
        if self.lock_leader().0 != seen {
            return;
        }
        let asked = discover::candidates(&[], &self.opts.servers);
        let found = discover::find_leader(host, &asked, Vec::new()).await;
        match (found.leader, found.hints.into_iter().next()) {
            (Some(leader), _) => self.move_to(leader.addr),
            (None, Some(hint)) => self.move_to(hint),
            // Nobody leads yet: the next round asks again.
            (None, None) => self.lock_leader().0 += 1,
        }
    }

    fn channel(&self, addr: &str, slot: u32) -> Result<Channel, String> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(&(addr.to_string(), slot)) {
            return Ok(c.clone());
        }
        let bare = addr
            .strip_prefix("http://")
            .or_else(|| addr.strip_prefix("https://"))
            .unwrap_or(addr);
        let channel = berth_auth::tls::endpoint(bare)
            .map_err(|e| format!("{addr}: {e}"))?
            .connect_timeout(Duration::from_millis(crate::session::CONNECT_TIMEOUT_MS))
            .http2_keep_alive_interval(Duration::from_millis(
                crate::session::HTTP2_KEEPALIVE_INTERVAL_MS,
            ))
            .keep_alive_timeout(Duration::from_millis(
                crate::session::HTTP2_KEEPALIVE_TIMEOUT_MS,
            ))
            .connect_lazy();
        channels.insert((addr.to_string(), slot), channel.clone());
        Ok(channel)
    }
}

/// Runs the simulated hosts until `shutdown` resolves.
pub async fn run(opts: SimOptions, shutdown: impl Future<Output = ()>) -> Result<(), SimError> {
    opts.validate()?;
    let hosts = opts.hosts;
    let shared = Arc::new(Shared::new(opts));
    tracing::info!(
        hosts,
        servers = ?shared.opts.servers,
        hosts_per_connection = shared.opts.hosts_per_connection,
        "simulating hosts"
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=hosts {
        tasks.spawn(host_loop(shared.clone(), i));
    }
    let stats = shared.clone();
    let reporter = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(SIM_STATS_EVERY_S));
        let mut last_beats = 0;
        loop {
            tick.tick().await;
            let s = &stats.stats;
            let beats = s.heartbeats.load(Ordering::Relaxed);
            tracing::info!(
                registered = s.registered.load(Ordering::Relaxed),
                heartbeats_per_s = (beats - last_beats) / SIM_STATS_EVERY_S,
                failures = s.failures.load(Ordering::Relaxed),
                jobs_started = s.jobs_started.load(Ordering::Relaxed),
                jobs_ended = s.jobs_ended.load(Ordering::Relaxed),
                "simulated hosts"
            );
            last_beats = beats;
        }
    });
    shutdown.await;
    reporter.abort();
    tasks.shutdown().await;
    tracing::info!("simulation stopped");
    Ok(())
}

/// A job a simulated host "runs".
struct SimJob {
    job_id: u64,
    ends_at: Instant,
}

/// A report waiting for delivery.
enum Report {
    Started(StartedReport),
    Exited(ExitedReport),
}

/// Why one session of a simulated host ended.
enum End {
    Redirect(String),
    Failed(String),
}

/// One simulated host, forever: register, then heartbeat and watch until
/// something breaks, then again.
async fn host_loop(shared: Arc<Shared>, i: u32) {
    let name = host_name(&shared.opts.prefix, i);
    let inventory = synthetic_inventory(i);
    let mut rng = Rng(u64::from(i).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let slot = (i - 1) / shared.opts.hosts_per_connection;
    let mut jobs: BTreeMap<u64, SimJob> = BTreeMap::new();
    let mut finished: BTreeSet<u64> = BTreeSet::new();
    let mut reports: VecDeque<Report> = VecDeque::new();
    let mut restarted = true;
    let mut retry_ms = SIM_RETRY_MIN_MS;
    // Spread the first registrations (and so the heartbeats) over a period.
    let spread_ms = shared.opts.heartbeat_interval_ms.unwrap_or(1_000);
    tokio::time::sleep(Duration::from_millis(rng.below(spread_ms))).await;
    loop {
        let (seen, addr) = shared.leader();
        let end = match shared.channel(&addr, slot) {
            Err(e) => End::Failed(e),
            Ok(channel) => {
                let mut client =
                    AgentServiceClient::with_interceptor(channel, crate::credentials::get())
                        .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
                let mut ctx = HostCtx {
                    shared: &shared,
                    name: &name,
                    rng: &mut rng,
                    jobs: &mut jobs,
                    finished: &mut finished,
                    reports: &mut reports,
                };
                let end = session(&mut client, &inventory, &mut restarted, &mut ctx).await;
                if restarted {
                    retry_ms = (retry_ms * 2).min(SIM_RETRY_MAX_MS);
                } else {
                    retry_ms = SIM_RETRY_MIN_MS;
                }
                end
            }
        };
        shared.stats.failures.fetch_add(1, Ordering::Relaxed);
        match end {
            End::Redirect(hint) => shared.follow(hint),
            End::Failed(why) => {
                tracing::debug!(host = %name, server = %addr, why, "simulated session ended");
                shared.rediscover(seen, &name).await;
            }
        }
        let pause = retry_ms / 2 + rng.below(retry_ms / 2 + 1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// What a host's session works on.
struct HostCtx<'a> {
    shared: &'a Shared,
    name: &'a str,
    rng: &'a mut Rng,
    jobs: &'a mut BTreeMap<u64, SimJob>,
    /// Allocations that ended here and may still be in the set until the
    /// exit report is applied: never started again.
    finished: &'a mut BTreeSet<u64>,
    reports: &'a mut VecDeque<Report>,
}

type Client = AgentServiceClient<berth_auth::grpc::CredentialedChannel>;

fn ended(status: Status) -> End {
    if status.code() == Code::FailedPrecondition {
        if let Some(hint) = leader_hint(status.message()) {
            return End::Redirect(hint);
        }
    }
    End::Failed(format!("{:?}: {}", status.code(), status.message()))
}

async fn timed<T>(call: impl Future<Output = Result<T, Status>>) -> Result<T, Status> {
    match tokio::time::timeout(Duration::from_millis(SIM_RPC_TIMEOUT_MS), call).await {
        Ok(r) => r,
        Err(_) => Err(Status::deadline_exceeded("no answer in time")),
    }
}

async fn session(
    client: &mut Client,
    inventory: &Inventory,
    restarted: &mut bool,
    ctx: &mut HostCtx<'_>,
) -> End {
    let running = running(ctx.jobs);
    let register = RegisterRequest {
        host: ctx.name.to_string(),
        inventory: Some(inventory.clone()),
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        running,
        agent_restarted: *restarted,
        drain_reason: String::new(),
        // Simulated hosts run nothing, steps included.
        step_addr: String::new(),
    };
    let resp = match timed(client.register(register)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return ended(s),
    };
    *restarted = false;
    ctx.shared.stats.registered.fetch_add(1, Ordering::Relaxed);
    let period_ms = ctx.shared.opts.heartbeat_interval_ms.unwrap_or(
        resp.heartbeat_interval_ms
            .max(crate::config::HEARTBEAT_INTERVAL_MIN_MS),
    );
    let stream = match timed(client.watch_assignments(WatchAssignmentsRequest {
        host: ctx.name.to_string(),
    }))
    .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => return ended(s),
    };
    converge(client, stream, period_ms, ctx).await
}

fn running(jobs: &BTreeMap<u64, SimJob>) -> Vec<RunningAllocation> {
    jobs.iter()
        .map(|(&alloc_id, j)| RunningAllocation {
            job_id: j.job_id,
            alloc_id,
            pid: 0,
        })
        .collect()
}

/// Heartbeats, follows the assignment set and ends jobs when their time
/// comes, until the session breaks.
async fn converge(
    client: &mut Client,
    mut stream: Streaming<AssignmentSet>,
    period_ms: u64,
    ctx: &mut HostCtx<'_>,
) -> End {
    let jitter = ctx.shared.opts.jitter_pct;
    let mut next_beat = Instant::now() + ctx.rng.jittered(period_ms, jitter);
    let mut fence = IndexFence::default();
    loop {
        let next_end = ctx.jobs.values().map(|j| j.ends_at).min();
        tokio::select! {
            _ = tokio::time::sleep_until(next_beat) => {
                next_beat += ctx.rng.jittered(period_ms, jitter);
                let req = HeartbeatRequest {
                    host: ctx.name.to_string(),
                    running: running(ctx.jobs),
                };
                match timed(client.heartbeat(req)).await {
                    Ok(r) if r.get_ref().known => {
                        ctx.shared.stats.heartbeats.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => return End::Failed("host unknown to the cluster".into()),
                    Err(s) => return ended(s),
                }
            }
            message = stream.message() => match message {
                Ok(Some(set)) => {
                    if fence.accept(set.applied_index) {
                        apply_set(&set, ctx);
                    }
                }
                Ok(None) => return End::Failed("assignment stream ended".into()),
                Err(s) => return ended(s),
            },
            _ = tokio::time::sleep_until(next_end.unwrap_or(next_beat)), if next_end.is_some() => {
                finish_due(ctx);
            }
        }
        if let Err(s) = deliver(client, ctx).await {
            return ended(s);
        }
    }
}

/// Starts what is new in `set` and ends what left it.
fn apply_set(set: &AssignmentSet, ctx: &mut HostCtx<'_>) {
    let now = Instant::now();
    let wanted: BTreeMap<u64, &berth_proto::agent::Assignment> =
        set.assignments.iter().map(|a| (a.alloc_id, a)).collect();
    let gone: Vec<u64> = ctx
        .jobs
        .keys()
        .filter(|id| !wanted.contains_key(id))
        .copied()
        .collect();
    for alloc_id in gone {
        if let Some(job) = ctx.jobs.remove(&alloc_id) {
            ctx.shared.stats.jobs_ended.fetch_add(1, Ordering::Relaxed);
            push(
                ctx,
                Report::Exited(exited(ctx.name, job.job_id, alloc_id, 0, libc::SIGTERM)),
            );
        }
    }
    // Stopped before this host ever saw them: report them ended, as the
    // real agent does, or their jobs would wait for an exit forever.
    for a in &set.stopping {
        if !ctx.jobs.contains_key(&a.alloc_id) && !ctx.finished.contains(&a.alloc_id) {
            let mut report = exited(ctx.name, a.job_id, a.alloc_id, 0, 0);
            report.launch_error = crate::supervisor::STOPPED_BEFORE_START.to_string();
            push(ctx, Report::Exited(report));
        }
    }
    ctx.finished.retain(|id| wanted.contains_key(id));
    for (alloc_id, a) in wanted {
        if ctx.jobs.contains_key(&alloc_id) || ctx.finished.contains(&alloc_id) {
            continue;
        }
        if ctx.jobs.len() >= SIM_JOBS_PER_HOST_MAX {
            push(
                ctx,
                Report::Exited(exited(ctx.name, a.job_id, alloc_id, 1, 0)),
            );
            continue;
        }
        let runtime_s = a
            .spec
            .as_ref()
            .map(|s| sim_runtime_s(&s.env))
            .unwrap_or(SIM_DEFAULT_RUNTIME_S);
        ctx.jobs.insert(
            alloc_id,
            SimJob {
                job_id: a.job_id,
                ends_at: now + Duration::from_secs(runtime_s),
            },
        );
        ctx.shared
            .stats
            .jobs_started
            .fetch_add(1, Ordering::Relaxed);
        push(
            ctx,
            Report::Started(StartedReport {
                host: ctx.name.to_string(),
                job_id: a.job_id,
                alloc_id,
                pid: 0,
            }),
        );
    }
}

fn finish_due(ctx: &mut HostCtx<'_>) {
    let now = Instant::now();
    let due: Vec<u64> = ctx
        .jobs
        .iter()
        .filter(|(_, j)| j.ends_at <= now)
        .map(|(&id, _)| id)
        .collect();
    for alloc_id in due {
        if let Some(job) = ctx.jobs.remove(&alloc_id) {
            ctx.shared.stats.jobs_ended.fetch_add(1, Ordering::Relaxed);
            // Bounded: the set holds at most what the host was assigned.
            if ctx.finished.len() < SIM_JOBS_PER_HOST_MAX {
                ctx.finished.insert(alloc_id);
            }
            push(
                ctx,
                Report::Exited(exited(ctx.name, job.job_id, alloc_id, 0, 0)),
            );
        }
    }
}

fn exited(host: &str, job_id: u64, alloc_id: u64, exit_code: i32, signal: i32) -> ExitedReport {
    ExitedReport {
        host: host.to_string(),
        job_id,
        alloc_id,
        exit_code,
        signal,
        launch_error: String::new(),
    }
}

fn push(ctx: &mut HostCtx<'_>, report: Report) {
    if ctx.reports.len() >= SIM_PENDING_REPORTS_MAX {
        tracing::warn!(host = %ctx.name, "simulated host drops its oldest undelivered report");
        ctx.reports.pop_front();
    }
    ctx.reports.push_back(report);
}

/// Sends the waiting reports in order; a failure leaves the rest for later.
async fn deliver(client: &mut Client, ctx: &mut HostCtx<'_>) -> Result<(), Status> {
    while let Some(report) = ctx.reports.front() {
        let sent = match report {
            Report::Started(r) => timed(client.report_started(r.clone())).await,
            Report::Exited(r) => timed(client.report_exited(r.clone())).await,
        };
        // Accepted or stale, the report is done with.
        sent?;
        ctx.reports.pop_front();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_cpu_gpu_and_emulator_hosts() {
        let inventories: Vec<Inventory> = (1..=100).map(synthetic_inventory).collect();
        let gpu = inventories.iter().filter(|i| !i.gpus.is_empty()).count();
        let emu = inventories
            .iter()
            .filter(|i| !i.emulators.is_empty())
            .count();
        assert_eq!(gpu, 30);
        assert_eq!(emu, 10);
        for inv in &inventories {
            assert!(inv.gpus.is_empty() || (4..=8).contains(&inv.gpus.len()));
            assert!(inv.gpus.iter().all(|g| g.model == inv.gpus[0].model));
        }
        let types: std::collections::BTreeSet<&str> = inventories
            .iter()
            .flat_map(|i| i.gpus.iter().map(|g| g.model.as_str()))
            .collect();
        assert_eq!(
            types.into_iter().collect::<Vec<_>>(),
            ["a100", "h100", "l40s"]
        );
        let counts: std::collections::BTreeSet<usize> = inventories
            .iter()
            .map(|i| i.gpus.len())
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(counts.into_iter().collect::<Vec<_>>(), [4, 5, 6, 7]);
        assert_eq!(host_name("sim-", 7), "sim-00007");
        assert_eq!(synthetic_inventory(7), synthetic_inventory(7));
    }

    #[test]
    fn an_ended_job_still_in_the_set_is_not_started_again() {
        let shared = Shared::new(SimOptions {
            hosts: 1,
            servers: vec!["a:1".into()],
            heartbeat_interval_ms: None,
            jitter_pct: 0,
            hosts_per_connection: 1,
            prefix: "sim-".into(),
        });
        let (mut rng, mut jobs, mut finished, mut reports) =
            (Rng(1), BTreeMap::new(), BTreeSet::new(), VecDeque::new());
        let mut ctx = HostCtx {
            shared: &shared,
            name: "sim-00001",
            rng: &mut rng,
            jobs: &mut jobs,
            finished: &mut finished,
            reports: &mut reports,
        };
        let assignment = berth_proto::agent::Assignment {
            job_id: 7,
            alloc_id: 70,
            spec: Some(berth_proto::api::JobSpec {
                env: HashMap::from([(SIM_RUNTIME_ENV.to_string(), "0".to_string())]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let set = AssignmentSet {
            applied_index: 1,
            assignments: vec![assignment],
            ..Default::default()
        };
        apply_set(&set, &mut ctx);
        assert_eq!(ctx.jobs.len(), 1);
        finish_due(&mut ctx);
        assert!(ctx.jobs.is_empty());
        // The set comes again before the exit report is applied.
        apply_set(&set, &mut ctx);
        assert!(ctx.jobs.is_empty());
        let kinds: Vec<&str> = ctx
            .reports
            .iter()
            .map(|r| match r {
                Report::Started(_) => "started",
                Report::Exited(_) => "exited",
            })
            .collect();
        assert_eq!(kinds, ["started", "exited"]);
        // Once the set no longer holds it, it is forgotten.
        apply_set(
            &AssignmentSet {
                applied_index: 2,
                assignments: Vec::new(),
                ..Default::default()
            },
            &mut ctx,
        );
        assert!(ctx.finished.is_empty());
        assert_eq!(shared.stats.jobs_started.load(Ordering::Relaxed), 1);
        assert_eq!(shared.stats.jobs_ended.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn runtime_comes_from_the_job_env() {
        let mut env = HashMap::new();
        assert_eq!(sim_runtime_s(&env), SIM_DEFAULT_RUNTIME_S);
        env.insert(SIM_RUNTIME_ENV.to_string(), "12".to_string());
        assert_eq!(sim_runtime_s(&env), 12);
        env.insert(SIM_RUNTIME_ENV.to_string(), "soon".to_string());
        assert_eq!(sim_runtime_s(&env), SIM_DEFAULT_RUNTIME_S);
    }

    #[test]
    fn jitter_stays_within_its_span() {
        let mut rng = Rng(1);
        for _ in 0..1_000 {
            let d = rng.jittered(5_000, 10).as_millis();
            assert!((4_500..=5_500).contains(&d), "{d}");
        }
        assert_eq!(rng.jittered(5_000, 0).as_millis(), 5_000);
    }

    #[test]
    fn bad_options_are_refused() {
        let ok = SimOptions {
            hosts: 10,
            servers: vec!["a:1".into()],
            heartbeat_interval_ms: Some(5_000),
            jitter_pct: 10,
            hosts_per_connection: 100,
            prefix: "sim-".into(),
        };
        assert!(ok.validate().is_ok());
        for bad in [
            SimOptions {
                hosts: 0,
                ..ok.clone()
            },
            SimOptions {
                servers: Vec::new(),
                ..ok.clone()
            },
            SimOptions {
                jitter_pct: 60,
                ..ok.clone()
            },
            SimOptions {
                hosts_per_connection: 0,
                ..ok.clone()
            },
            SimOptions {
                heartbeat_interval_ms: Some(1),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
