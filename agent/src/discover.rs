//! Finding the leader: ask every server at once and believe only a node
//! that answers as leader itself, the highest term winning.
//!
//! Following one hint at a time is too slow after a leader dies: a
//! follower keeps naming the dead node until it notices, the dead node
//! refuses, and each miss used to cost a growing backoff, so an agent
//! could find the new leader only after the cluster had given up on its
//! host (NODE_FAIL for jobs that were fine). A probe is a Heartbeat: the
//! leader answers it with its term, a follower refuses it naming the
//! leader it knows. A node that only believes it leads (a restarted old
//! leader, or one cut off from the majority) refuses too, since a leader
//! answers agents only while a quorum has acknowledged it recently.

use std::time::Duration;

use berth_proto::agent::agent_service_client::AgentServiceClient;
use berth_proto::agent::{HeartbeatRequest, RunningAllocation};
use futures::stream::{FuturesUnordered, StreamExt};
use tonic::transport::Channel;
use tonic::Code;

use crate::session::{connect, leader_hint, SESSION_RPC_TIMEOUT_MS};

/// Servers asked at once, at most (a cluster has 3 or 5 members; hints
/// add a few).
pub const PROBES_MAX: usize = 16;
/// Once one leader has answered, how long the others still have to
/// answer (a higher term wins), in ms.
pub const PROBE_SETTLE_MS: u64 = 300;

/// A node that answered as leader.
pub struct Leader {
    pub addr: String,
    pub channel: Channel,
    pub term: u64,
}

/// What one round of probes found.
#[derive(Default)]
pub struct Discovery {
    /// The leader with the highest term that answered.
    pub leader: Option<Leader>,
    /// Leader addresses that followers named.
    pub hints: Vec<String>,
    /// One line per server that neither led nor named a leader.
    pub failures: Vec<String>,
}

enum Outcome {
    Leader(Leader),
    Hint(String),
    Failed(String),
}

/// `addr` without its scheme: how addresses are compared.
pub fn bare(addr: &str) -> &str {
    addr.strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr)
}

/// `first` then `rest`, each address once (scheme ignored), at most
/// `PROBES_MAX`.
pub fn candidates(first: &[String], rest: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in first.iter().chain(rest) {
        if out.len() >= PROBES_MAX {
            break;
        }
        if !out.iter().any(|o| bare(o) == bare(a)) {
            out.push(a.clone());
        }
    }
    out
}

/// Asks every one of `servers` at once whether it leads.
pub async fn find_leader(
    host: &str,
    servers: &[String],
    running: Vec<RunningAllocation>,
) -> Discovery {
    let mut probes: FuturesUnordered<_> = servers
        .iter()
        .take(PROBES_MAX)
        .map(|addr| {
            let req = HeartbeatRequest {
                host: host.to_string(),
                running: running.clone(),
            };
            probe(addr.clone(), req)
        })
        .collect();
    let mut found = Discovery::default();
    let mut settle_at: Option<tokio::time::Instant> = None;
    loop {
        let next = match settle_at {
            Some(at) => match tokio::time::timeout_at(at, probes.next()).await {
                Ok(n) => n,
                Err(_) => break,
            },
            None => probes.next().await,
        };
        let Some(outcome) = next else { break };
        match outcome {
            Outcome::Leader(l) => {
                settle_at.get_or_insert_with(|| {
                    tokio::time::Instant::now() + Duration::from_millis(PROBE_SETTLE_MS)
                });
                if found.leader.as_ref().is_none_or(|best| l.term > best.term) {
                    found.leader = Some(l);
                }
            }
            Outcome::Hint(h) => {
                if !found.hints.iter().any(|o| bare(o) == bare(&h)) {
                    found.hints.push(h);
                }
            }
            Outcome::Failed(why) => found.failures.push(why),
        }
    }
    found
}

async fn probe(addr: String, req: HeartbeatRequest) -> Outcome {
    let channel = match connect(&addr).await {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("{addr}: {e}")),
    };
    let mut client =
        AgentServiceClient::with_interceptor(channel.clone(), crate::credentials::get());
    let call = tokio::time::timeout(
        Duration::from_millis(SESSION_RPC_TIMEOUT_MS),
        client.heartbeat(req),
    )
    .await;
    match call {
        Ok(Ok(resp)) => Outcome::Leader(Leader {
            term: resp.get_ref().term,
            addr,
            channel,
        }),
        Ok(Err(status)) => {
            let hint = (status.code() == Code::FailedPrecondition)
                .then(|| leader_hint(status.message()))
                .flatten()
                .filter(|h| bare(h) != bare(&addr));
            match hint {
                Some(h) => Outcome::Hint(h),
                None => {
                    Outcome::Failed(format!("{addr}: {:?}: {}", status.code(), status.message()))
                }
            }
        }
        Err(_) => Outcome::Failed(format!(
            "{addr}: no answer within {SESSION_RPC_TIMEOUT_MS} ms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_keep_order_and_drop_repeats_by_bare_address() {
        let hints = vec!["http://b:2".to_string()];
        let servers = vec!["a:1".to_string(), "b:2".to_string(), "c:3".to_string()];
        assert_eq!(
            candidates(&hints, &servers),
            vec!["http://b:2", "a:1", "c:3"]
        );
    }

    #[test]
    fn candidates_are_bounded() {
        let many: Vec<String> = (0..40).map(|i| format!("h{i}:1")).collect();
        assert_eq!(candidates(&[], &many).len(), PROBES_MAX);
    }
}
