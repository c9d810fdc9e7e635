//! Prometheus metrics at `/metrics` (every name prefixed `berth_`).
//!
//! Gauges that mirror state (Raft term and indexes, jobs by state, hosts)
//! are refreshed when scraped, so they cost nothing between scrapes;
//! events (scheduling passes, placements) are recorded where they happen.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use openraft::ServerState;
use tokio::sync::watch;

use crate::node::Node;

/// Names of the metrics recorded outside this module.
pub const PASS_SECONDS: &str = "berth_scheduler_pass_seconds";
pub const PLACEMENTS_TOTAL: &str = "berth_scheduler_placements_total";
pub const PLACEMENTS_DROPPED_TOTAL: &str = "berth_scheduler_placements_dropped_total";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot install the metrics recorder: {0}")]
    Install(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
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

/// Serves `/metrics` on `addr` until `shutdown` turns true.
pub async fn serve(
    addr: SocketAddr,
    node: Arc<Node>,
    handle: PrometheusHandle,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), MetricsError> {
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(Arc::new(Scrape { node, handle }));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
        .map_err(|source| MetricsError::Bind { addr, source })
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
    metrics::gauge!("berth_raft_leader_id").set(m.current_leader.unwrap_or(0) as f64);

    let (by_state, hosts, next_job_id) = node.read(|s| {
        let mut by_state: BTreeMap<&'static str, u64> = BTreeMap::new();
        for r in s.jobs() {
            *by_state.entry(r.job.state.slurm_name()).or_default() += 1;
        }
        (by_state, s.hosts().count(), s.data.counters.next_job_id)
    });
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
