//! Wires the agent together: session, supervisor and outbox as tasks that
//! talk over bounded channels, until shutdown.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::inventory::{self, InventoryError};
use crate::outbox::{Outbox, OUTBOX_CAPACITY_REPORTS};
use crate::procgroup;
use crate::runner::LaunchContext;
use crate::session::{self, SessionConfig, SessionLinks};
use crate::supervisor::{Supervisor, SupervisorInputs};

/// How long to keep delivering reports after the jobs stopped at shutdown,
/// in ms; what is not delivered by then is lost with the agent.
pub const SHUTDOWN_FLUSH_MS: u64 = 2_000;
/// Capacity of the exit-delivered queue from the outbox, in messages.
pub const DELIVERED_QUEUE_LEN: usize = 1_024;

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("host inventory: {0}")]
    Inventory(InventoryError),
}

/// Runs the agent until `shutdown` resolves; then stops all jobs (grace at
/// most [`crate::supervisor::SHUTDOWN_STOP_GRACE_MAX_S`]), tries to deliver
/// their exit reports, and returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    crate::credentials::set(config.cluster_secret.as_deref());
    berth_auth::tls::set_client_ca(config.tls_ca.as_deref());
    let inventory =
        inventory::discover(config.cpus, config.memory_mb).map_err(AgentError::Inventory)?;
    tracing::info!(
        host = %config.host,
        cpus = inventory.cpus,
        memory_mb = inventory.memory_mb,
        servers = ?config.servers,
        work_dir = %config.work_dir.display(),
        "berth-agent starting"
    );
    // Orphans of a job's group then come to us to be killed and reaped.
    if let Err(e) = procgroup::become_subreaper() {
        tracing::warn!(error = %e, "cannot become child subreaper; orphaned job processes go to init");
    }

    let (running_tx, running_rx) = watch::channel(Vec::new());
    let (desired_tx, desired_rx) = watch::channel(None);
    let (channel_tx, channel_rx) = watch::channel(None);
    let (delivered_tx, delivered_rx) = mpsc::channel(DELIVERED_QUEUE_LEN);
    let outbox = Outbox::new(OUTBOX_CAPACITY_REPORTS);

    let session_task = tokio::spawn(session::run(
        SessionConfig {
            host: config.host.clone(),
            servers: config.servers.clone(),
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            inventory,
        },
        SessionLinks {
            running_rx,
            desired_tx,
            channel_tx,
        },
    ));
    let sender_task = tokio::spawn(outbox.clone().run_sender(channel_rx, delivered_tx));

    let supervisor = Supervisor::new(
        LaunchContext {
            host: config.host.clone(),
            work_dir: config.work_dir.clone(),
        },
        Duration::from_secs(config.stop_grace_s),
        outbox.clone(),
        running_tx,
    );
    supervisor
        .run(
            SupervisorInputs {
                desired_rx,
                delivered_rx,
            },
            shutdown,
        )
        .await;

    if !outbox.flush(Duration::from_millis(SHUTDOWN_FLUSH_MS)).await {
        tracing::warn!(
            undelivered = outbox.len(),
            "reports not delivered before shutdown"
        );
    }
    session_task.abort();
    sender_task.abort();
    tracing::info!("berth-agent stopped");
    Ok(())
}
