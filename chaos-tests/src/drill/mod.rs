//! `berth-drill chaos`: a workload on a local cluster of processes while
//! faults are injected on a seeded schedule, then invariant checks over
//! what the workload was told, what the jobs themselves recorded, and the
//! state every node ends with.
//!
//! The run: start the cluster and set up a user, an account and a QOS
//! with a CPU cap; start the submitters (`workload`) and a host monitor;
//! inject faults (`faults`) one after another until `seconds` have
//! passed; stop the workload (submits in flight are retried to their
//! end); wait for the queue to drain; read every node's jobs; stop the
//! nodes and compare their stores; run the checkers (`checks`, and
//! `lincheck` for the linearizability of the submit/cancel/get history).

pub mod checks;
pub mod faults;
pub mod lincheck;
pub mod membership;
pub mod plot;
mod report;
pub mod rng;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::api::{
    Account, JobState, ListHostsRequest, ListJobsRequest, ListQosRequest, WatchJobEventsRequest,
};

use crate::harness::{status_of, ClusterOptions, HarnessError, Isolation, LocalCluster};
use checks::{FinalJob, Violation};
pub use report::{CheckResult, LincheckFigures, Report};

#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Harness(#[from] HarnessError),
    #[error("{what}: {why}")]
    Step { what: &'static str, why: String },
}

fn step(what: &'static str) -> impl Fn(String) -> DrillError {
    move |why| DrillError::Step { what, why }
}

/// Knobs of one drill.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    pub seed: u64,
    /// How long faults are injected (the workload runs as long).
    pub seconds: u64,
    /// Faults injected at least, even past `seconds` (the first ones are
    /// one of each kind: see `faults::schedule`).
    pub min_faults: usize,
    /// Voters: 3 or 5.
    pub nodes: u64,
    /// The fault kinds drawn from (empty: every kind the cluster's size
    /// can take, `FaultKind::all`).
    pub kinds: Vec<faults::FaultKind>,
    pub agents: u32,
    pub agent_cpus: u32,
    pub submitters: u32,
    /// Jobs run between 0 and this long.
    pub max_runtime_ms: u64,
    /// Quiet time between faults, at most (seeded, from a third of it).
    pub fault_gap_ms: u64,
    /// How long the queue may go without a job leaving it while it drains
    /// after the faults (a backlog drains at the agents' pace; see
    /// `drain`).
    pub drain_deadline_s: u64,
    /// Where the nodes and agents run: in network namespaces (root
    /// only) or containers, the link-cut faults (`CutLeader`, `CutAgent`)
    /// join the others.
    pub isolation: Isolation,
    pub dir: PathBuf,
}

impl DrillOptions {
    pub fn new(seed: u64, seconds: u64, nodes: u64, dir: PathBuf) -> DrillOptions {
        DrillOptions {
            seed,
            seconds,
            min_faults: 0,
            nodes,
            kinds: Vec::new(),
            agents: 3,
            agent_cpus: 4,
            submitters: 3,
            max_runtime_ms: 2_000,
            fault_gap_ms: 3_000,
            drain_deadline_s: 120,
            isolation: Isolation::Loopback,
            dir,
        }
    }
}

/// Faults at most per drill, whatever `seconds` is.
const FAULTS_MAX: usize = 10_000;
/// Pause between polls while draining.
const POLL: Duration = Duration::from_millis(200);
/// The longest a drain may take in all, progress or not.
const DRAIN_TOTAL_MAX: Duration = Duration::from_secs(1_800);

pub async fn run(opts: &DrillOptions) -> Result<Report, DrillError> {
    if opts.nodes != 3 && opts.nodes != 5 {
        return Err(step("options")(format!(
            "--nodes must be 3 or 5, not {}",
            opts.nodes
        )));
    }
    let cuts = opts.isolation != Isolation::Loopback;
    let all_kinds = faults::FaultKind::all(opts.nodes, cuts);
    let kinds = if opts.kinds.is_empty() {
        all_kinds
    } else {
        if let Some(k) = opts.kinds.iter().find(|k| !all_kinds.contains(k)) {
            let why = if k.needs_netns() && !cuts {
                "the cluster in network namespaces (--netns) or containers (--target compose)"
                    .to_string()
            } else {
                format!("more than {} nodes", opts.nodes)
            };
            return Err(step("options")(format!("fault {k:?} needs {why}")));
        }
        opts.kinds.clone()
    };
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| step("creating the drill dir")(e.to_string()))?;
    let markers = opts.dir.join("runs.log");
    let mut cluster = LocalCluster::start(
        &opts.dir,
        &ClusterOptions {
            nodes: opts.nodes,
            // One spare for `ReplaceFollower` and `ReplaceLeader`; it
            // serves only during those faults.
            spare_nodes: 1,
            agents: opts.agents,
            agent_cpus: opts.agent_cpus,
            isolation: opts.isolation,
            ..ClusterOptions::default()
        },
    )?;
    faults::wait_leader(&cluster, opts.nodes, &[]).await?;
    set_up_policy(&cluster).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let clock = workload::Clock::start();
    // Clients know the original members only, as an operator's config
    // would: a node swapped in is reached through them.
    let servers: Vec<String> = cluster.servers()[..opts.nodes as usize].to_vec();
    let wl = Arc::new(workload::WorkloadOptions {
        seed: opts.seed,
        servers: servers.clone(),
        markers: markers.clone(),
        max_runtime_ms: opts.max_runtime_ms,
        clock,
    });
    let submitters: Vec<_> = (0..opts.submitters)
        .map(|n| tokio::spawn(workload::submitter(n, wl.clone(), stop.clone())))
        .collect();
    let monitor = tokio::spawn(workload::monitor_hosts(servers, stop.clone()));

    let t0 = Instant::now();
    let mut rng = rng::Rng::fork(opts.seed, 0);
    let kinds = faults::schedule(&mut rng, &kinds, FAULTS_MAX);
    let mut faults_done = Vec::new();
    let mut agent_kills = Vec::new();
    let mut fault_error = None;
    {
        let mut target = faults::Target {
            cluster: &mut cluster,
            nodes: opts.nodes,
            agents: opts.agents,
            t0,
        };
        for kind in kinds {
            if t0.elapsed() >= Duration::from_secs(opts.seconds)
                && faults_done.len() >= opts.min_faults
            {
                break;
            }
            let gap = rng.range(opts.fault_gap_ms / 3, opts.fault_gap_ms);
            tokio::time::sleep(Duration::from_millis(gap)).await;
            match faults::inject(&mut target, kind, &mut rng).await {
                Ok((record, kill)) => {
                    // Progress for whoever watches a long drill.
                    eprintln!(
                        "fault {}: +{} ms {:?} ({}), failover {:?} ms, first pass {:?} ms, new voters {:?} ms, recovered in {} ms",
                        faults_done.len() + 1,
                        record.at_ms,
                        record.kind,
                        record.target,
                        record.failover_ms,
                        record.first_pass_ms,
                        record.membership_ms,
                        record.recovered_ms
                    );
                    faults_done.push(record);
                    agent_kills.extend(kill);
                }
                Err(e) => {
                    // The cluster did not recover: stop injecting and
                    // report it with whatever the checks find.
                    fault_error = Some(format!("{kind:?}: {e}"));
                    break;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut logs = Vec::new();
    for s in submitters {
        logs.push(s.await.map_err(|e| step("a submitter")(e.to_string()))?);
    }
    let (host_samples, mut monitor_violations) = monitor
        .await
        .map_err(|e| step("the host monitor")(e.to_string()))?;
    let workload_s = t0.elapsed().as_secs_f64();

    let drained = drain(&cluster, opts).await;
    let leader = faults::wait_leader(&cluster, opts.nodes, &[]).await?;
    // The final listing is a linearizable read too: it ends every key's
    // history (an acknowledged cancel must show in it).
    let listed_from_us = clock.now_us();
    let jobs = list_jobs(&cluster.addr(leader)?, false).await?;
    let listed_at_us = clock.now_us();
    let capacity = host_capacity(&cluster.addr(leader)?).await?;
    let qos_priority = drill_qos_priority(&cluster.addr(leader)?).await?;
    let views = replica_views(&cluster, opts.nodes).await?;
    let now_ms = epoch_ms();
    let marker_text = std::fs::read_to_string(&markers).unwrap_or_default();

    let mut results = Vec::new();
    let submits: Vec<_> = logs.iter().flat_map(|l| l.submits.clone()).collect();
    let cancels: Vec<_> = logs.iter().flat_map(|l| l.cancels.clone()).collect();
    let qos_edits: Vec<_> = logs.iter().flat_map(|l| l.qos_edits.clone()).collect();
    let mut read_violations: Vec<Violation> =
        logs.iter().flat_map(|l| l.violations.clone()).collect();
    let mut served: Vec<Violation> = submits
        .iter()
        .filter(|s| s.job_id.is_none())
        .map(|s| Violation {
            check: "the cluster kept serving",
            detail: format!(
                "submit {} not acknowledged in {} attempts over {:?}",
                s.request_id,
                s.attempts,
                workload::SUBMIT_DEADLINE
            ),
        })
        .collect();
    if let Some(e) = &fault_error {
        served.push(Violation {
            check: "the cluster kept serving",
            detail: format!("did not recover from a fault: {e}"),
        });
    }
    if let Err(e) = &drained {
        served.push(Violation {
            check: "the cluster kept serving",
            detail: e.clone(),
        });
    }
    results.push(CheckResult::new("the cluster kept serving", served));

    let mut exist = checks::acknowledged_submits_exist_once(&submits, &jobs);
    exist.append(&mut read_violations);
    results.push(CheckResult::new(
        "acknowledged submits exist exactly once",
        exist,
    ));

    let (markers_parsed, torn) = checks::parse_markers(&marker_text);
    let (runs, mut run_violations) = checks::runs_from_markers(&markers_parsed, &jobs);
    run_violations.extend(checks::no_double_runs(&runs));
    results.push(CheckResult::new("no job ran twice at once", run_violations));

    let mut over = checks::within_capacity(
        "no host over-allocated",
        &checks::state_holdings_by_host(&jobs, now_ms),
        &capacity,
    );
    over.extend(checks::within_capacity(
        "no host over-allocated",
        &checks::process_holdings(&runs, &jobs, now_ms),
        &capacity,
    ));
    over.append(&mut monitor_violations);
    results.push(CheckResult::new("no host over-allocated", over));

    let qos_holdings: Vec<_> = checks::state_holdings_by_qos(&jobs, now_ms)
        .into_iter()
        .filter(|h| h.key == workload::DRILL_QOS)
        .collect();
    let qos_cap: BTreeMap<String, u32> = [(
        workload::DRILL_QOS.to_string(),
        workload::DRILL_QOS_CPUS as u32,
    )]
    .into();
    results.push(CheckResult::new(
        "no QOS limit exceeded",
        checks::within_capacity("no QOS limit exceeded", &qos_holdings, &qos_cap),
    ));
    let mut unsettled = checks::jobs_settled(&jobs);
    explain_jobs(&mut unsettled, &jobs, &cluster, opts.nodes).await;
    results.push(CheckResult::new(
        "every job is final or legitimately pending",
        unsettled,
    ));
    results.push(CheckResult::new(
        "acknowledged cancels are honoured",
        checks::cancels_honoured(&cancels, &jobs),
    ));
    results.push(CheckResult::new(
        "QOS edits are linearizable",
        checks::qos_edits_linearizable(
            workload::DRILL_QOS_INITIAL_PRIORITY,
            &qos_edits,
            qos_priority,
        ),
    ));
    let (lincheck_result, lincheck_figures) =
        check_history(&logs, &submits, &jobs, (listed_from_us, listed_at_us));
    results.push(lincheck_result);
    results.push(CheckResult::new(
        "no false host-down",
        checks::node_fail_explained(&jobs, &agent_kills),
    ));
    // Last: the stores can be read only once their nodes are stopped.
    cluster.kill_all_nodes()?;
    let digests = store_digests(&cluster, opts.nodes)?;
    let mut replicas = checks::replicas_agree(&views);
    replicas.extend(digests.violations());
    results.push(CheckResult::new(
        "followers' state equals the leader's",
        replicas,
    ));

    Ok(Report::new(
        opts,
        workload_s,
        faults_done,
        &logs,
        &jobs,
        host_samples,
        runs.len(),
        torn,
        digests,
        results,
        lincheck_figures,
    ))
}

/// Runs the linearizability check over every submitter's history and the
/// final listing (read between the two instants of `listed`), timed.
fn check_history(
    logs: &[workload::SubmitterLog],
    submits: &[checks::SubmitRecord],
    jobs: &[FinalJob],
    listed: (u64, u64),
) -> (CheckResult, LincheckFigures) {
    let started = Instant::now();
    let mut history: Vec<lincheck::Op> = logs.iter().flat_map(|l| l.history.clone()).collect();
    history.extend(lincheck::final_reads(submits, jobs, listed.0, listed.1));
    let summary = lincheck::check(&history, lincheck::STEPS_PER_KEY_MAX);
    let figures = LincheckFigures {
        ops: summary.ops,
        keys: summary.keys,
        steps: summary.steps,
        undecided_keys: summary.undecided,
        check_ms: started.elapsed().as_secs_f64() * 1_000.0,
    };
    (
        CheckResult::new(lincheck::CHECK, summary.violations),
        figures,
    )
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The drill's user in an account that may use the capped drill QOS.
async fn set_up_policy(cluster: &LocalCluster) -> Result<(), DrillError> {
    let start = Instant::now();
    loop {
        let attempt = async {
            let mut client = cluster.client().await.map_err(|e| e.to_string())?;
            client
                .upsert_qos(workload::drill_qos(workload::DRILL_QOS_INITIAL_PRIORITY))
                .await
                .map_err(|e| e.message().to_string())?;
            client
                .upsert_account(Account {
                    name: workload::DRILL_ACCOUNT.into(),
                    users: vec![workload::DRILL_USER.into()],
                    default_qos: "normal".into(),
                    qos: vec![workload::DRILL_QOS.into()],
                    ..Default::default()
                })
                .await
                .map_err(|e| e.message().to_string())?;
            Ok::<(), String>(())
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > faults::RECOVERY_DEADLINE => {
                return Err(step("setting up the drill's QOS and account")(e))
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// Waits until no job is running and every pending one has a reason.
/// Liveness is judged by progress, not by a fixed time: a long drill's
/// workload can outrun its agents and leave a backlog, which drains at the
/// agents' pace. It fails when no job has left the queue for the drain
/// deadline (a stall), or past [`DRAIN_TOTAL_MAX`] in all.
async fn drain(cluster: &LocalCluster, opts: &DrillOptions) -> Result<(), String> {
    let start = Instant::now();
    let stall_max = Duration::from_secs(opts.drain_deadline_s);
    let mut fewest_active = usize::MAX;
    let mut progress_at = Instant::now();
    let mut last = String::from("no answer");
    while progress_at.elapsed() < stall_max && start.elapsed() < DRAIN_TOTAL_MAX {
        if let Ok(leader) = faults::wait_leader(cluster, opts.nodes, &[]).await {
            if let Ok(addr) = cluster.addr(leader) {
                match list_jobs(&addr, false).await {
                    Ok(jobs) => {
                        let active: Vec<u64> = jobs
                            .iter()
                            .filter(|j| {
                                j.state == JobState::Running as i32
                                    || j.state == JobState::Pending as i32
                            })
                            .map(|j| j.job_id)
                            .collect();
                        if active.is_empty() {
                            return Ok(());
                        }
                        if active.len() < fewest_active {
                            fewest_active = active.len();
                            progress_at = Instant::now();
                        }
                        last = format!(
                            "{} jobs still active, first {:?}",
                            active.len(),
                            &active[..active.len().min(5)]
                        );
                    }
                    Err(e) => last = e.to_string(),
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
    if start.elapsed() >= DRAIN_TOTAL_MAX {
        return Err(format!(
            "the queue did not drain in {DRAIN_TOTAL_MAX:?}: {last}"
        ));
    }
    Err(format!(
        "the queue stopped draining: no job left it for {stall_max:?} ({:.0} s into the drain): {last}",
        start.elapsed().as_secs_f64()
    ))
}

/// Jobs whose history is added to their violation, at most.
const EXPLAINED_JOBS_MAX: usize = 5;

/// Adds each flagged job's event history (from the leader) to its
/// violation, so a report says how the job got stuck.
async fn explain_jobs(
    violations: &mut [Violation],
    jobs: &[FinalJob],
    cluster: &LocalCluster,
    nodes: u64,
) {
    let Ok(leader) = faults::wait_leader(cluster, nodes, &[]).await else {
        return;
    };
    let Ok(addr) = cluster.addr(leader) else {
        return;
    };
    for v in violations.iter_mut().take(EXPLAINED_JOBS_MAX) {
        // The detail starts "job N ".
        let Some(job_id) = v
            .detail
            .strip_prefix("job ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|id| id.parse::<u64>().ok())
            .filter(|id| jobs.iter().any(|j| j.job_id == *id))
        else {
            continue;
        };
        if let Ok(events) = job_events(&addr, job_id).await {
            v.detail
                .push_str(&format!("; events: {}", events.join(" | ")));
        }
    }
}

/// A job's events as "kind: message" lines, oldest first.
async fn job_events(addr: &str, job_id: u64) -> Result<Vec<String>, DrillError> {
    let mut client = crate::harness::connect(addr).await?;
    let mut stream = client
        .watch_job_events(WatchJobEventsRequest {
            job_id,
            after_seq: 0,
            no_follow: true,
        })
        .await
        .map_err(|e| step("reading job events")(e.message().to_string()))?
        .into_inner();
    let mut out = Vec::new();
    while let Some(event) = stream
        .message()
        .await
        .map_err(|e| step("reading job events")(e.message().to_string()))?
    {
        out.push(format!("{}: {}", event.kind, event.message));
    }
    Ok(out)
}

/// Every job, in id order, as node `addr` holds it (`stale`: from its own
/// applied state).
async fn list_jobs(addr: &str, stale: bool) -> Result<Vec<FinalJob>, DrillError> {
    let mut client = crate::harness::connect(addr).await?;
    let all = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::Preempted,
        JobState::Suspended,
    ];
    let answer = client
        .list_jobs(ListJobsRequest {
            states: all.iter().map(|s| *s as i32).collect(),
            stale,
            ..Default::default()
        })
        .await
        .map_err(|e| step("listing jobs")(format!("{addr}: {}", e.message())))?
        .into_inner();
    if answer.truncated {
        return Err(step("listing jobs")(format!(
            "{addr}: more jobs than one listing returns; run a shorter drill"
        )));
    }
    Ok(answer
        .jobs
        .into_iter()
        .map(|j| {
            let spec = j.spec.unwrap_or_default();
            FinalJob {
                job_id: j.job_id,
                request_id: spec.comment,
                state: j.state,
                reason: j.reason,
                alloc_id: j.alloc_id,
                host: j.hosts.first().cloned().unwrap_or_default(),
                cpus: spec.cpus.max(1),
                qos: spec.qos,
                start_ms: j.start_ms,
                end_ms: j.end_ms,
            }
        })
        .collect())
}

/// CPUs of every host, as the cluster knows them.
async fn host_capacity(addr: &str) -> Result<BTreeMap<String, u32>, DrillError> {
    let mut client = crate::harness::connect(addr).await?;
    let hosts = client
        .list_hosts(ListHostsRequest {})
        .await
        .map_err(|e| step("listing hosts")(e.message().to_string()))?
        .into_inner()
        .hosts;
    Ok(hosts
        .into_iter()
        .map(|h| (h.name, h.inventory.map_or(0, |i| i.cpus)))
        .collect())
}

async fn drill_qos_priority(addr: &str) -> Result<u32, DrillError> {
    let mut client = crate::harness::connect(addr).await?;
    let list = client
        .list_qos(ListQosRequest {})
        .await
        .map_err(|e| step("listing QOS")(e.message().to_string()))?
        .into_inner()
        .qos;
    let priority = list
        .iter()
        .find(|q| q.name == workload::DRILL_QOS)
        .map(|q| q.priority)
        .ok_or_else(|| step("listing QOS")("the drill QOS is gone".into()))?;
    // The drill writes only u32 priorities; anything else was not its own.
    u32::try_from(priority).map_err(|_| {
        step("listing QOS")(format!(
            "the drill QOS has priority {priority}, which the drill never wrote"
        ))
    })
}

/// Reading attempts before the views are compared anyway.
const VIEW_ATTEMPTS_MAX: u32 = 20;

/// Every node's jobs from its own applied state, read while every node
/// stood at the same applied index (before and after the reads), with the
/// leader's soft state (reasons) left out.
async fn replica_views(
    cluster: &LocalCluster,
    nodes: u64,
) -> Result<Vec<(u64, Vec<FinalJob>)>, DrillError> {
    let mut views = Vec::new();
    for _ in 0..VIEW_ATTEMPTS_MAX {
        let before = applied_indexes(cluster, nodes).await;
        views.clear();
        for id in 1..=nodes {
            let mut jobs = list_jobs(&cluster.addr(id)?, true).await?;
            for j in &mut jobs {
                j.reason.clear();
            }
            views.push((id, jobs));
        }
        let after = applied_indexes(cluster, nodes).await;
        let steady = before == after && before.windows(2).all(|w| w[0] == w[1]);
        if steady {
            return Ok(views);
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(views)
}

async fn applied_indexes(cluster: &LocalCluster, nodes: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for id in 1..=nodes {
        let applied = match cluster.addr(id) {
            Ok(addr) => status_of(&addr).await.map_or(0, |s| s.applied_index),
            Err(_) => 0,
        };
        out.push(applied);
    }
    out
}

/// Each store's last applied index and a digest of its whole replicated
/// state, read from disk once every node is stopped.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Digests(pub Vec<(u64, u64, String)>);

impl Digests {
    /// Stores at the same applied index must hold the same state. Stores
    /// at different indexes are not compared (a node stopped before it
    /// applied the last entries); the report shows the indexes.
    fn violations(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for (node, applied, digest) in &self.0 {
            for (other, other_applied, other_digest) in &self.0 {
                if other > node && applied == other_applied && digest != other_digest {
                    out.push(Violation {
                        check: "followers' state equals the leader's",
                        detail: format!(
                            "nodes {node} and {other} both applied index {applied} but hold different states ({digest} vs {other_digest})"
                        ),
                    });
                }
            }
        }
        out
    }
}

fn store_digests(cluster: &LocalCluster, nodes: u64) -> Result<Digests, DrillError> {
    let mut out = Vec::new();
    for id in 1..=nodes {
        let path = cluster.data_dir(id).join("raft");
        let store = berth_raft_store::open(&path)
            .map_err(|e| step("opening a store")(format!("{}: {e}", path.display())))?;
        let state = store
            .state
            .read()
            .map_err(|_| step("reading a store")("state lock poisoned".into()))?;
        let bytes = serde_json::to_vec(&state.data)
            .map_err(|e| step("encoding a store's state")(e.to_string()))?;
        let applied = state.applied_index();
        out.push((id, applied, format!("{:016x}", fnv64(&bytes))));
    }
    Ok(Digests(out))
}

/// FNV-1a over the state's JSON: equal states give equal digests.
fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
