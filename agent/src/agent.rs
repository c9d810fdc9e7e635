//! Wires the agent together: session, supervisor and outbox as tasks that
//! talk over bounded channels, until shutdown.

use std::future::Future;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::inventory::{Discoverer, HostReport, InventoryError};
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
    #[error("{0}")]
    StateDir(crate::statedir::StateDirError),
    #[error("step_listen {0}: {1} (set step_listen to a free address, or \"\" to serve no steps)")]
    StepListen(std::net::SocketAddr, std::io::Error),
}

/// What launching jobs needs: the state directory (opened, so a bad one
/// stops the agent here), the cgroup setup (decided once, with one log
/// line) and the job shim.
fn launch_context(config: &Config) -> Result<LaunchContext, AgentError> {
    let state =
        crate::statedir::StateDir::open(&config.jobs.state_dir).map_err(AgentError::StateDir)?;
    let instance = state.instance();
    let cgroups = crate::cgroup::Cgroups::detect(config.jobs.cgroup_parent.as_deref(), &instance);
    let shim = config.jobs.job_shim.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join(crate::config::JOB_SHIM_NAME)))
    });
    let shim = match shim {
        Some(path) if path.is_file() => Some(path),
        other => {
            tracing::warn!(shim = ?other, "job shim not found: jobs run directly under /bin/sh, a job re-adopted after an agent restart reports SIGKILL instead of its exit status, and an agent killed while launching a job can leave it running unrecorded");
            None
        }
    };
    tracing::info!(state_dir = %state.path().display(), shim = ?shim, job_user = ?config.jobs.job_user, allow_root_jobs = config.jobs.allow_root_jobs, "job settings");
    Ok(LaunchContext {
        host: config.host.clone(),
        work_dir: config.work_dir.clone(),
        shim,
        state,
        cgroups,
        job_user: config.jobs.job_user,
        allow_root_jobs: config.jobs.allow_root_jobs,
        instance,
        step_secret: config.cluster_secret.clone(),
        ca_file: config.tls_ca_file.clone(),
    })
}

/// Runs the agent until `shutdown` resolves; then stops all jobs (grace at
/// most [`crate::supervisor::SHUTDOWN_STOP_GRACE_MAX_S`]), tries to deliver
/// their exit reports, and returns.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    crate::credentials::set(config.cluster_secret.as_deref());
    berth_auth::tls::set_client_ca(config.tls_ca.as_deref());
    let mut discoverer = Discoverer::new(config.inventory.clone());
    let report = discoverer.discover().map_err(AgentError::Inventory)?;
    tracing::info!(
        host = %config.host,
        cpus = report.inventory.cpus,
        memory_mb = report.inventory.memory_mb,
        gpus = report.inventory.gpus.len(),
        gpu_type = report.inventory.gpus.first().map(|g| g.model.as_str()).unwrap_or(""),
        emulator_sets = report.inventory.emulators.len(),
        servers = ?config.servers,
        work_dir = %config.work_dir.display(),
        "berth-agent starting"
    );
    if !report.drain_reason.is_empty() {
        tracing::warn!(reason = %report.drain_reason, "this host drains itself");
    }
    let (report_tx, report_rx) = watch::channel(report);
    let rediscover_task = tokio::spawn(rediscover(
        discoverer,
        Duration::from_secs(config.inventory.rediscover_interval_s),
        report_tx,
    ));
    // Orphans of a job's group then come to us to be killed and reaped.
    if let Err(e) = procgroup::become_subreaper() {
        tracing::warn!(error = %e, "cannot become child subreaper; orphaned job processes go to init");
    }

    let (running_tx, running_rx) = watch::channel(Vec::new());
    let (desired_tx, desired_rx) = watch::channel(None);
    let (channel_tx, channel_rx) = watch::channel(None);
    let (delivered_tx, delivered_rx) = mpsc::channel(DELIVERED_QUEUE_LEN);
    let outbox = Outbox::new(OUTBOX_CAPACITY_REPORTS);

    // Jobs an earlier agent process left are re-adopted before the first
    // Register, which lists them as running.
    let launch = launch_context(&config)?;
    let instance = launch.instance.clone();
    let state_dir = launch.state.clone();
    let mut supervisor = Supervisor::new(
        launch,
        Duration::from_secs(config.stop_grace_s),
        outbox.clone(),
        running_tx,
    );
    supervisor.recover();

    // The step service is bound before the first Register, which names
    // its address.
    let (step_addr, step_task) = match config.step_listen {
        None => (String::new(), None),
        Some(listen) => {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| AgentError::StepListen(listen, e))?;
            let bound = listener
                .local_addr()
                .map_err(|e| AgentError::StepListen(listen, e))?;
            let addr = crate::steps::advertised_addr(
                config.step_advertise.as_deref(),
                bound,
                &config.host,
            );
            // srun dials `https://` for a service that speaks TLS.
            let addr = if config.step_tls.is_some() && !addr.starts_with("https://") {
                format!("https://{addr}")
            } else {
                addr
            };
            tracing::info!(listen = %bound, advertised = %addr, "step service listening");
            let ctx = crate::steps::StepContext {
                host: config.host.clone(),
                secret: config.cluster_secret.clone(),
                job_user: config.jobs.job_user,
                allow_root_jobs: config.jobs.allow_root_jobs,
                desired: desired_tx.subscribe(),
                instance: instance.clone(),
                outbox: outbox.clone(),
                state: Some(state_dir.clone()),
            };
            let tls = config
                .step_tls
                .as_ref()
                .map(|(cert, key)| berth_auth::tls::server_config(cert, key));
            (
                addr,
                Some(tokio::spawn(crate::steps::serve(listener, ctx, tls))),
            )
        }
    };

    // Step tasks an earlier agent process left behind end with their
    // allocation, served or not.
    let sweep_task = tokio::spawn(crate::steps::sweep_on_changes(
        desired_tx.subscribe(),
        instance,
        Some(state_dir),
    ));
    let session_task = tokio::spawn(session::run(
        SessionConfig {
            step_addr,
            host: config.host.clone(),
            servers: config.servers.clone(),
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            report: report_rx,
        },
        SessionLinks {
            running_rx,
            desired_tx,
            channel_tx,
        },
    ));
    let sender_task = tokio::spawn(outbox.clone().run_sender(channel_rx, delivered_tx));

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
    sweep_task.abort();
    if let Some(task) = step_task {
        task.abort();
    }
    rediscover_task.abort();
    tracing::info!("berth-agent stopped");
    Ok(())
}

/// Discovers the inventory again every `period` and publishes what changed;
/// the session then registers again with it. A discovery that fails keeps
/// the last inventory and drains the host with the error, since what the
/// host has is no longer known.
async fn rediscover(
    mut discoverer: Discoverer,
    period: Duration,
    report_tx: watch::Sender<HostReport>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let outcome = tokio::task::spawn_blocking(move || {
            let report = discoverer.discover();
            (discoverer, report)
        })
        .await;
        let Ok((back, report)) = outcome else {
            tracing::error!("inventory re-discovery panicked; no more re-discovery");
            return;
        };
        discoverer = back;
        let next = match report {
            Ok(r) => r,
            Err(e) => HostReport {
                inventory: report_tx.borrow().inventory.clone(),
                drain_reason: crate::inventory::check::truncate(format!(
                    "inventory re-discovery failed: {e}"
                )),
            },
        };
        let changed = report_tx.send_if_modified(|current| {
            if *current == next {
                return false;
            }
            if next.drain_reason != current.drain_reason {
                if next.drain_reason.is_empty() {
                    tracing::info!("host fit again; lifting its drain");
                } else {
                    tracing::warn!(reason = %next.drain_reason, "host drains itself");
                }
            }
            if next.inventory != current.inventory {
                tracing::warn!(
                    gpus_before = current.inventory.gpus.len(),
                    gpus_now = next.inventory.gpus.len(),
                    "inventory changed"
                );
            }
            *current = next;
            true
        });
        tracing::debug!(changed, "inventory re-discovered");
    }
}
