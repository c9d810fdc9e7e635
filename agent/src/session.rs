//! The session with the cluster: connect, Register, then heartbeat and
//! watch assignments side by side until something breaks; then find the
//! leader again by asking every server at once (`discover`), with bounded
//! exponential backoff only when none leads.
//!
//! The session never touches jobs. It publishes three things through watch
//! channels: the latest desired set (to the supervisor), the live gRPC
//! channel (to the outbox), and it reads the running allocations (from the
//! supervisor) for Register and Heartbeat.

use std::time::Duration;

use crate::inventory::HostReport;
use berth_auth::grpc::CredentialedChannel;
use berth_proto::agent::agent_service_client::AgentServiceClient;
use berth_proto::agent::{
    AssignmentSet, HeartbeatRequest, RegisterRequest, RunningAllocation, WatchAssignmentsRequest,
};
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use crate::backoff::Backoff;
use crate::config::{HEARTBEAT_INTERVAL_MAX_MS, HEARTBEAT_INTERVAL_MIN_MS};
use crate::discover;
use crate::reconcile::IndexFence;

/// Limit on opening a connection to one server, in ms.
pub const CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Limit on one unary RPC of the session (Register, Heartbeat, opening the
/// assignment stream), in ms.
pub const SESSION_RPC_TIMEOUT_MS: u64 = 5_000;
/// First delay before reconnecting, in ms.
pub const RECONNECT_BACKOFF_MIN_MS: u64 = 100;
/// Longest delay between reconnects, in ms.
pub const RECONNECT_BACKOFF_MAX_MS: u64 = 1_000;
/// HTTP/2 ping period, so a silently dead server is noticed, in ms.
pub const HTTP2_KEEPALIVE_INTERVAL_MS: u64 = 5_000;
/// How long an HTTP/2 ping may go unanswered, in ms.
pub const HTTP2_KEEPALIVE_TIMEOUT_MS: u64 = 5_000;

/// Why a session ended (other than by a leader hint).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("invalid server address {addr:?}: {message}")]
    Address { addr: String, message: String },
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("{rpc} failed: {code:?}: {message}")]
    Rpc {
        rpc: &'static str,
        code: Code,
        message: String,
    },
    #[error("assignment stream ended")]
    StreamEnded,
}

/// How a session ended.
#[derive(Debug)]
enum SessionEnd {
    /// A follower named the leader; connect there next.
    Redirect(String),
    /// The cluster does not know this host (heartbeat said so): register
    /// again on the same server.
    Reregister,
    /// Re-discovery found a new inventory or drain reason: register again
    /// on the same server with it.
    InventoryChanged,
    Failed(SessionError),
}

/// What the session needs to know about this agent.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub host: String,
    /// Where this agent serves srun steps (empty: it serves none).
    pub step_addr: String,
    pub servers: Vec<String>,
    /// Used until the server's RegisterResponse names its own.
    pub heartbeat_interval_ms: u64,
    /// The host's inventory and drain reason, republished by re-discovery;
    /// a change ends the session so that the agent registers again with it.
    pub report: watch::Receiver<HostReport>,
}

/// The session's links to the rest of the agent.
pub struct SessionLinks {
    /// What runs now, published by the supervisor.
    pub running_rx: watch::Receiver<Vec<RunningAllocation>>,
    /// Where accepted desired sets go.
    pub desired_tx: watch::Sender<Option<AssignmentSet>>,
    /// The channel of the live session, None between sessions.
    pub channel_tx: watch::Sender<Option<Channel>>,
}

/// Runs sessions forever, reconnecting as needed. Stop it by aborting the
/// task it runs in.
pub async fn run(cfg: SessionConfig, links: SessionLinks) {
    if cfg.servers.is_empty() {
        tracing::error!("no servers to connect to");
        return;
    }
    let mut backoff = Backoff::new(RECONNECT_BACKOFF_MIN_MS, RECONNECT_BACKOFF_MAX_MS);
    // Leader addresses named since the last round: asked first, and at
    // once when no configured server led.
    let mut hints: Vec<String> = Vec::new();
    // False until the cluster accepted this process's first Register: that
    // one tells the leader the agent restarted, so allocations it placed
    // here before and that are not running now are ended as lost.
    let mut registered_before = false;
    loop {
        let asked = discover::candidates(&hints, &cfg.servers);
        hints.clear();
        let running = links.running_rx.borrow().clone();
        let found = discover::find_leader(&cfg.host, &asked, running).await;
        let Some(leader) = found.leader else {
            let unasked: Vec<String> = found
                .hints
                .into_iter()
                .filter(|h| !asked.iter().any(|a| discover::bare(a) == discover::bare(h)))
                .collect();
            if !unasked.is_empty() {
                // A follower named a leader we have not asked: ask now.
                tracing::info!(leaders = ?unasked, "following the leader a follower named");
                hints = unasked;
                continue;
            }
            tracing::warn!(failures = ?found.failures, "no server answered as leader");
            tokio::time::sleep(backoff.next_delay()).await;
            continue;
        };
        let addr = leader.addr.clone();
        let mut established = false;
        let end = session(
            leader,
            &cfg,
            &links,
            &mut established,
            &mut registered_before,
        )
        .await;
        links.channel_tx.send_replace(None);
        if established {
            backoff.reset();
        }
        match end {
            SessionEnd::Redirect(next) => {
                // Leadership moved: go there without waiting.
                tracing::info!(server = %addr, leader = %next, "following the leader");
                hints.push(next);
                continue;
            }
            SessionEnd::Reregister => {
                tracing::warn!(server = %addr, "cluster does not know this host, registering again");
                hints.push(addr);
            }
            SessionEnd::InventoryChanged => {
                tracing::info!(server = %addr, "inventory changed, registering again");
                hints.push(addr);
                // No backoff: the session worked, the news must go out.
                continue;
            }
            SessionEnd::Failed(e) => {
                tracing::warn!(server = %addr, error = %e, "session ended");
            }
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// One session with the leader `discover` found. Sets `established` once
/// the first assignment set has arrived, so the caller resets its backoff
/// only for a session that worked (a server that accepts and hangs up at
/// once keeps the backoff growing).
async fn session(
    leader: discover::Leader,
    cfg: &SessionConfig,
    links: &SessionLinks,
    established: &mut bool,
    registered_before: &mut bool,
) -> SessionEnd {
    let discover::Leader {
        addr,
        channel,
        term,
    } = leader;
    let addr = addr.as_str();
    let mut client =
        AgentServiceClient::with_interceptor(channel.clone(), crate::credentials::get())
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES);

    // Marked seen: a change from here on is one this Register did not carry.
    let mut report_rx = cfg.report.clone();
    let report = report_rx.borrow_and_update().clone();
    let register = RegisterRequest {
        host: cfg.host.clone(),
        inventory: Some(report.inventory),
        drain_reason: report.drain_reason,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        running: links.running_rx.borrow().clone(),
        agent_restarted: !*registered_before,
        step_addr: cfg.step_addr.clone(),
    };
    let resp = match with_timeout(client.register(register)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return classify(addr, "Register", s),
    };
    *registered_before = true;
    let interval_ms = heartbeat_interval_ms(resp.heartbeat_interval_ms, cfg.heartbeat_interval_ms);
    tracing::info!(
        server = %addr,
        term,
        log_index = resp.log_index,
        heartbeat_interval_ms = interval_ms,
        "registered"
    );
    links.channel_tx.send_replace(Some(channel));

    let stream = match with_timeout(client.watch_assignments(WatchAssignmentsRequest {
        host: cfg.host.clone(),
    }))
    .await
    {
        Ok(r) => r.into_inner(),
        Err(s) => return classify(addr, "WatchAssignments", s),
    };
    tokio::select! {
        end = heartbeats(addr, client, cfg, &links.running_rx, report_rx, interval_ms) => end,
        end = watch_assignments(addr, stream, &links.desired_tx, established) => end,
    }
}

pub(crate) async fn connect(addr: &str) -> Result<Channel, SessionError> {
    // http:// or https:// follows from whether the agent has the
    // cluster's CA; a scheme written in the address is not needed.
    let bare = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    let endpoint = berth_auth::tls::endpoint(bare)
        .map_err(|e| SessionError::Address {
            addr: addr.to_string(),
            message: e.to_string(),
        })?
        .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
        .http2_keep_alive_interval(Duration::from_millis(HTTP2_KEEPALIVE_INTERVAL_MS))
        .keep_alive_timeout(Duration::from_millis(HTTP2_KEEPALIVE_TIMEOUT_MS))
        .keep_alive_while_idle(true);
    // connect_timeout covers TCP; the outer bound also covers the HTTP/2
    // handshake with a server that accepts but never answers.
    match tokio::time::timeout(
        Duration::from_millis(2 * CONNECT_TIMEOUT_MS),
        endpoint.connect(),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(SessionError::Connect(error_chain(&e))),
        Err(_) => Err(SessionError::Connect(format!(
            "no connection within {} ms",
            2 * CONNECT_TIMEOUT_MS
        ))),
    }
}

/// Heartbeats every `interval_ms` until one fails, the host is unknown, or
/// its inventory changed (then it registers again).
async fn heartbeats(
    addr: &str,
    mut client: AgentServiceClient<CredentialedChannel>,
    cfg: &SessionConfig,
    running_rx: &watch::Receiver<Vec<RunningAllocation>>,
    mut report_rx: watch::Receiver<HostReport>,
    interval_ms: u64,
) -> SessionEnd {
    let period = Duration::from_millis(interval_ms);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // False once the discoverer is gone (shutdown): heartbeats go on.
    let mut report_open = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            changed = report_rx.changed(), if report_open => {
                if changed.is_ok() {
                    return SessionEnd::InventoryChanged;
                }
                report_open = false;
                continue;
            }
        }
        let req = HeartbeatRequest {
            host: cfg.host.clone(),
            running: running_rx.borrow().clone(),
        };
        match with_timeout(client.heartbeat(req)).await {
            Ok(resp) if resp.get_ref().known => {}
            Ok(_) => return SessionEnd::Reregister,
            Err(s) => return classify(addr, "Heartbeat", s),
        }
    }
}

/// Publishes every in-order desired set until the stream breaks.
async fn watch_assignments(
    addr: &str,
    mut stream: Streaming<AssignmentSet>,
    desired_tx: &watch::Sender<Option<AssignmentSet>>,
    established: &mut bool,
) -> SessionEnd {
    // applied_index only increases within one stream; a new stream (maybe
    // from a new leader) starts a new fence.
    let mut fence = IndexFence::default();
    loop {
        match stream.message().await {
            Ok(Some(set)) => {
                *established = true;
                if fence.accept(set.applied_index) {
                    desired_tx.send_replace(Some(set));
                } else {
                    tracing::debug!(
                        applied_index = set.applied_index,
                        "out-of-order assignment set ignored"
                    );
                }
            }
            Ok(None) => return SessionEnd::Failed(SessionError::StreamEnded),
            Err(s) => return classify(addr, "WatchAssignments", s),
        }
    }
}

/// A leader hint becomes a redirect (unless it names the server we are
/// talking to, which would loop); anything else ends the session.
fn classify(addr: &str, rpc: &'static str, status: Status) -> SessionEnd {
    if status.code() == Code::FailedPrecondition {
        if let Some(leader) = leader_hint(status.message()) {
            if leader != addr && leader != addr.trim_start_matches("http://") {
                return SessionEnd::Redirect(leader);
            }
        }
    }
    SessionEnd::Failed(SessionError::Rpc {
        rpc,
        code: status.code(),
        message: status.message().to_string(),
    })
}

/// Extracts ADDR from a "not leader; leader is ADDR" message.
pub fn leader_hint(message: &str) -> Option<String> {
    const MARK: &str = "leader is ";
    let at = message.find(MARK)?;
    let addr = message[at + MARK.len()..]
        .split_whitespace()
        .next()?
        .trim_end_matches([',', ';', ')', '.']);
    // Without a port it is not something we can dial.
    if addr.is_empty() || !addr.contains(':') {
        return None;
    }
    Some(addr.to_string())
}

/// The server's heartbeat period if it names one (clamped to sane
/// bounds), else ours.
fn heartbeat_interval_ms(from_server: u64, configured: u64) -> u64 {
    if from_server == 0 {
        configured
    } else {
        from_server.clamp(HEARTBEAT_INTERVAL_MIN_MS, HEARTBEAT_INTERVAL_MAX_MS)
    }
}

async fn with_timeout<T>(
    call: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(Duration::from_millis(SESSION_RPC_TIMEOUT_MS), call).await {
        Ok(r) => r,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {SESSION_RPC_TIMEOUT_MS} ms"
        ))),
    }
}

/// An error with its causes, for a log line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_leader_hint() {
        assert_eq!(
            leader_hint("not leader; leader is 127.0.0.1:7102").as_deref(),
            Some("127.0.0.1:7102")
        );
        assert_eq!(
            leader_hint("not leader; leader is node2:7100 (term 4)").as_deref(),
            Some("node2:7100")
        );
        assert_eq!(
            leader_hint("not leader; leader is http://n3:7100.").as_deref(),
            Some("http://n3:7100")
        );
        assert_eq!(leader_hint("not leader; no leader known"), None);
        assert_eq!(leader_hint("not leader; leader is "), None);
        assert_eq!(leader_hint("not leader; leader is node2"), None);
    }

    #[test]
    fn redirect_only_on_failed_precondition_to_another_server() {
        let st = Status::failed_precondition("not leader; leader is b:2");
        assert!(matches!(classify("a:1", "x", st), SessionEnd::Redirect(l) if l == "b:2"));
        let st = Status::failed_precondition("not leader; leader is a:1");
        assert!(matches!(classify("a:1", "x", st), SessionEnd::Failed(_)));
        let st = Status::unavailable("not leader; leader is b:2");
        assert!(matches!(classify("a:1", "x", st), SessionEnd::Failed(_)));
    }

    #[test]
    fn server_heartbeat_interval_wins_within_bounds() {
        assert_eq!(heartbeat_interval_ms(0, 1000), 1000);
        assert_eq!(heartbeat_interval_ms(250, 1000), 250);
        assert_eq!(heartbeat_interval_ms(1, 1000), HEARTBEAT_INTERVAL_MIN_MS);
        assert_eq!(
            heartbeat_interval_ms(u64::MAX, 1000),
            HEARTBEAT_INTERVAL_MAX_MS
        );
    }
}
