//! Prometheus metrics at `/metrics` (every name prefixed `berth_`).
//!
//! Gauges that mirror state (Raft term and indexes, jobs by state, hosts)
//! are refreshed when scraped, so they cost nothing between scrapes;
//! events (scheduling passes, placements) are recorded where they happen.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use openraft::ServerState;
use tokio::sync::watch;

use crate::node::Node;

/// Names of the metrics recorded outside this module.
pub const PASS_SECONDS: &str = "berth_scheduler_pass_seconds";
/// When this node's last pass started (Unix seconds, millisecond
/// precision): how long after a leader change the new leader first
/// scheduled (`berth-drill failover` reads it).
pub const LAST_PASS_TIMESTAMP_SECONDS: &str = "berth_scheduler_last_pass_timestamp_seconds";
/// When this node's first pass since it last became leader started (Unix
/// seconds): a leader change's cost ends there.
pub const LEADER_FIRST_PASS_TIMESTAMP_SECONDS: &str =
    "berth_scheduler_leader_first_pass_timestamp_seconds";
pub const PLACEMENTS_TOTAL: &str = "berth_scheduler_placements_total";
pub const PLACEMENTS_DROPPED_TOTAL: &str = "berth_scheduler_placements_dropped_total";
pub const LEADER_CHANGES_TOTAL: &str = "berth_raft_leader_changes_total";
pub const API_REQUEST_SECONDS: &str = "berth_api_request_duration_seconds";
pub const EVICTIONS_DROPPED_TOTAL: &str = "berth_evictions_dropped_total";

/// The (state, partition, QOS) label sets of `berth_jobs_live` set at the
/// last scrape.
static LIVE_LABELS: std::sync::Mutex<std::collections::BTreeSet<(&'static str, String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Records what one pass decided: backfill starts, reservations held and
/// the predicted wait of the head job (its reservation's start).
pub fn record_plan(plan: &berth_scheduler::Plan, now_ms: u64) {
    metrics::counter!("berth_scheduler_backfill_starts_total")
        .increment(plan.backfilled.len() as u64);
    metrics::gauge!("berth_scheduler_reservations_held").set(plan.reservations.len() as f64);
    let head_wait_s = plan
        .reservations
        .first()
        .map_or(0.0, |r| r.start_ms.saturating_sub(now_ms) as f64 / 1000.0);
    metrics::gauge!("berth_scheduler_head_predicted_wait_seconds").set(head_wait_s);
    metrics::gauge!("berth_scheduler_pending_waiting_on_limits")
        .set(plan.reasons.values().filter(|r| r.is_limit()).count() as f64);
    record_preemption(plan);
}

/// The preemption and idle-fill figures the references name: attempts,
/// misses, near misses (turned down only by the priority gap), evictions
/// by cause and outcome, time blocked before an eviction, borrowed starts.
/// Evictions the state machine then drops as stale are counted apart
/// (`berth_evictions_dropped_total`, recorded by the leader).
fn record_preemption(plan: &berth_scheduler::Plan) {
    let c = &plan.preemption;
    metrics::counter!("berth_preemption_attempts_total").increment(c.attempts);
    metrics::counter!("berth_preemption_misses_total").increment(c.misses);
    metrics::counter!("berth_preemption_near_misses_total").increment(c.near_misses);
    for e in &plan.evictions {
        let outcome = if e.requeue { "requeued" } else { "cancelled" };
        metrics::counter!("berth_preemptions_total", "cause" => e.cause.word(), "outcome" => outcome)
            .increment(1);
    }
    if c.preemptors > 0 {
        metrics::histogram!("berth_preemption_blocked_seconds")
            .record(c.blocked_ms as f64 / 1000.0 / c.preemptors as f64);
    }
    metrics::counter!("berth_idle_fill_borrowed_starts_total")
        .increment(plan.borrowed.len() as u64);
    let m = &plan.multipath_counters;
    metrics::gauge!("berth_multipath_jobs_reserved").set(m.jobs_reserved as f64);
    metrics::gauge!("berth_multipath_paths_reserved").set(m.paths_reserved as f64);
    metrics::counter!("berth_multipath_expired_total").increment(m.expired);
    // Starts of jobs that held several alternatives, and the alternatives
    // they let go (the plan may still be dropped by apply's re-check).
    let released: Vec<usize> = plan
        .starts
        .iter()
        .map(|s| s.released.len())
        .chain(plan.gang_starts.iter().map(|g| g.released.len()))
        .filter(|&n| n > 0)
        .collect();
    metrics::counter!("berth_multipath_dispatched_total").increment(released.len() as u64);
    metrics::counter!("berth_multipath_released_total")
        .increment(released.iter().sum::<usize>() as u64);
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot install the metrics recorder: {0}")]
    Install(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the metrics listener has no local address: {source}")]
    Serve { source: std::io::Error },
}

/// Installs the process-wide recorder. Call once per process.
pub fn install() -> Result<PrometheusHandle, MetricsError> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| MetricsError::Install(e.to_string()))
}

struct Scrape {
    node: Arc<Node>,
    handle: PrometheusHandle,
}

/// How often histogram samples are folded into their summaries when no
/// scrape did it. The exporter keeps every sample recorded since the last
/// scrape or upkeep: a node nobody scrapes would otherwise hold one per API
/// call, growing without bound (about 8 bytes a submit).
const UPKEEP_INTERVAL_MS: u64 = 5_000;

/// Runs the exporter's upkeep every `interval` until `shutdown` turns true.
async fn upkeep(handle: PrometheusHandle, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => handle.run_upkeep(),
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Serves `/metrics`, the health checks and `api` (the REST routes) on
/// `addr` until `shutdown` turns true, and keeps the recorder's memory
/// bounded meanwhile ([`UPKEEP_INTERVAL_MS`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    limits: crate::listener::ListenerLimits,
    node: Arc<Node>,
    handle: PrometheusHandle,
    api: Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), MetricsError> {
    tokio::spawn(upkeep(
        handle.clone(),
        Duration::from_millis(UPKEEP_INTERVAL_MS),
        shutdown.clone(),
    ));
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(Scrape { node, handle }))
        .merge(api)
        .layer(crate::listener::HeadSeenLayer);
    let addr = listener
        .local_addr()
        .map_err(|source| MetricsError::Serve { source })?;
    let incoming = crate::listener::spawn(listener, &limits, "http", shutdown.clone());
    let listener = crate::listener::AxumIncoming::new(incoming, addr);
    let app = app.into_make_service_with_connect_info::<crate::listener::ConnInfo>();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Binds the HTTP listener before the node serves anything else, so a
/// port that is taken stops the start with a clear error instead of a
/// node that answers gRPC but has no metrics, health checks or REST API.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, MetricsError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
}

/// Most committed entries a node may still have to apply and be ready.
pub const READY_APPLY_LAG_MAX_ENTRIES: u64 = 1_000;

/// The process answers: it is alive.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready to serve: a leader is known and this node has applied what is
/// committed, up to a small lag. 503 with the reason otherwise.
async fn readyz(State(scrape): State<Arc<Scrape>>) -> (axum::http::StatusCode, String) {
    let m = scrape.node.raft.metrics().borrow().clone();
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    let commit = crate::api_service::commit_index(&m, &voters);
    let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
    match crate::node::named_leader(&m) {
        None => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no leader known\n".into(),
        ),
        Some(_) if commit.saturating_sub(applied) > READY_APPLY_LAG_MAX_ENTRIES => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: applied {applied} of {commit} committed entries\n"),
        ),
        Some(leader) => (
            axum::http::StatusCode::OK,
            format!("ready: leader {leader}, applied {applied}\n"),
        ),
    }
}

async fn render(State(scrape): State<Arc<Scrape>>) -> String {
    refresh(&scrape.node);
    scrape.handle.render()
}

fn refresh(node: &Node) {
    let m = node.raft.metrics().borrow().clone();
    metrics::gauge!("berth_raft_term").set(m.current_term as f64);
    metrics::gauge!("berth_raft_is_leader").set(if m.state == ServerState::Leader {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("berth_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    metrics::gauge!("berth_raft_applied_index")
        .set(m.last_applied.map(|l| l.index).unwrap_or(0) as f64);
    metrics::gauge!("berth_raft_leader_id").set(crate::node::named_leader(&m).unwrap_or(0) as f64);
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    let commit = crate::api_service::commit_index(&m, &voters);
    let applied = m.last_applied.map(|l| l.index).unwrap_or(0);
    metrics::gauge!("berth_raft_commit_index").set(commit as f64);
    metrics::gauge!("berth_raft_apply_lag_entries").set(commit.saturating_sub(applied) as f64);

    let (by_state, by_queue, host_names, next_job_id) = node.read(|s| {
        let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
        for r in s.jobs() {
            *by_state.entry(r.job.state.slurm_name()).or_default() += 1;
        }
        // Live jobs by (state, partition, QOS): only pending and running.
        let mut by_queue: BTreeMap<(&'static str, String, String), u64> = BTreeMap::new();
        for id in s.pending_ids().chain(s.running_ids()) {
            if let Some(r) = s.job(id) {
                let partition = r
                    .job
                    .alloc
                    .as_ref()
                    .map(|a| a.partition.clone())
                    .filter(|p| !p.is_empty())
                    .or_else(|| r.job.spec.partitions.first().cloned())
                    .unwrap_or_default();
                let key = (r.job.state.slurm_name(), partition, r.job.spec.qos.clone());
                *by_queue.entry(key).or_default() += 1;
            }
        }
        let host_names: Vec<String> = s.hosts().map(|h| h.name.clone()).collect();
        (by_state, by_queue, host_names, s.data.counters.next_job_id)
    });
    // A label set that emptied since the last scrape reads 0, not its
    // last count.
    let mut seen = LIVE_LABELS.lock().unwrap_or_else(|p| p.into_inner());
    for key in seen.iter() {
        if !by_queue.contains_key(key) {
            let (state, partition, qos) = key.clone();
            metrics::gauge!("berth_jobs_live", "state" => state, "partition" => partition, "qos" => qos)
                .set(0.0);
        }
    }
    seen.clear();
    for ((state, partition, qos), n) in by_queue {
        seen.insert((state, partition.clone(), qos.clone()));
        metrics::gauge!("berth_jobs_live", "state" => state, "partition" => partition, "qos" => qos)
            .set(n as f64);
    }
    drop(seen);
    let hosts = host_names.len();
    if m.state == ServerState::Leader {
        let (up, down, oldest) = node
            .liveness
            .summary(&host_names, std::time::Instant::now());
        metrics::gauge!("berth_hosts_by_state", "state" => "up").set(up as f64);
        metrics::gauge!("berth_hosts_by_state", "state" => "down").set(down as f64);
        metrics::gauge!("berth_host_heartbeat_age_seconds_max").set(oldest.as_secs_f64());
    }
    for state in [
        "PENDING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
    ] {
        let n = by_state.get(state).copied().unwrap_or(0);
        metrics::gauge!("berth_jobs", "state" => state).set(n as f64);
    }
    metrics::gauge!("berth_hosts").set(hosts as f64);
    metrics::gauge!("berth_next_job_id").set(next_job_id as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn upkeep_runs_until_shutdown_and_loses_no_samples() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            for n in 0..1_000u32 {
                metrics::histogram!("berth_test_seconds").record(f64::from(n) / 1000.0);
            }
        });
        let (stop, stopped) = watch::channel(false);
        let interval = Duration::from_millis(5);
        let task = tokio::spawn(upkeep(handle.clone(), interval, stopped));
        // Several upkeeps run; the task goes on until told to stop.
        tokio::time::sleep(interval * 4).await;
        assert!(!task.is_finished());
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("upkeep ends at shutdown")
            .expect("upkeep did not panic");
        let rendered = handle.render();
        assert!(
            rendered.contains("berth_test_seconds_count 1000"),
            "{rendered}"
        );
    }
}
