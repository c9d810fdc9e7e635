//! `berth-drill failover`: kill -9 the leader of a local 3-node cluster,
//! again and again, and time two things per round: until the survivors
//! agree on a new leader, and until that leader has run its first
//! scheduling pass (issue 6's measure: kill → first pass, ≤ 1.5 s p50).
//! The pass time comes from the new leader's
//! `berth_scheduler_leader_first_pass_timestamp_seconds` (set once per
//! term it leads); every process shares this host's clock, so it compares
//! with the kill's wall-clock time.
//!
//! The cluster runs as a site runs it, with TLS, the cluster secret and
//! user authentication on, so the Raft transport measured is the TLS one;
//! `--insecure` runs it in plain text without authentication, for
//! comparison.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::bench::percentile;
use crate::harness::{ClusterOptions, LocalCluster};

/// Longest a round waits for a leader, or for its first pass.
const DEADLINE: Duration = Duration::from_secs(30);
/// Pause between scrapes of the new leader's metrics.
const POLL: Duration = Duration::from_millis(5);
/// The gauge a node sets at the start of its first pass as a new leader.
pub const FIRST_PASS: &str = "berth_scheduler_leader_first_pass_timestamp_seconds";

/// One round's figures, ms after the kill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Round {
    pub agreed_leader_ms: f64,
    pub first_pass_ms: f64,
}

/// The value of the unlabelled metric `name` in Prometheus text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

/// p50 (nearest rank) and the extremes of `samples`, sorted in place.
pub fn summary(samples: &mut [f64]) -> Option<(f64, f64, f64)> {
    samples.sort_by(f64::total_cmp);
    let (min, max) = (*samples.first()?, *samples.last()?);
    Some((min, samples[(samples.len() - 1) / 2], max))
}

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Runs `rounds` kills and prints each round and the distributions; the
/// cluster in the shipped configuration (TLS, cluster secret, user auth)
/// unless `insecure`.
pub async fn run(
    rounds: u32,
    dir: Option<std::path::PathBuf>,
    insecure: bool,
) -> anyhow::Result<Vec<Round>> {
    let tmp = tempfile::tempdir()?;
    let dir = dir.unwrap_or_else(|| tmp.path().to_path_buf());
    let options = ClusterOptions {
        agents: 0,
        auth: !insecure,
        tls: !insecure,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::start(&dir, &options).context("starting the cluster")?;
    println!(
        "failover [{}]: 3-node cluster ({}), {rounds} leader kills; cluster and logs under {}",
        if insecure { "insecure" } else { "tls+auth" },
        if insecure {
            "plain text, no authentication"
        } else {
            "TLS on every gRPC connection, cluster secret, user auth"
        },
        dir.display()
    );
    let mut out = Vec::new();
    for round in 1..=rounds {
        // Start each round from a steady state: every node caught up, as a
        // cluster in service would be.
        cluster.wait_for_leader(DEADLINE).await?;
        let leader = cluster.wait_caught_up(DEADLINE).await?;
        let killed_wall_ms = wall_ms();
        let killed_at = Instant::now();
        cluster.kill_node(leader)?;
        let new_leader = cluster.wait_for_leader(DEADLINE).await?;
        let agreed_leader_ms = killed_at.elapsed().as_secs_f64() * 1000.0;
        let first_pass_ms = first_pass_after(&cluster, new_leader, killed_wall_ms).await?;
        println!(
            "round {round}: killed node {leader}; node {new_leader} leads after \
             {agreed_leader_ms:.0} ms and first schedules after {first_pass_ms:.0} ms"
        );
        out.push(Round {
            agreed_leader_ms,
            first_pass_ms,
        });
        cluster.start_stopped_nodes()?;
    }
    let mut agreed: Vec<f64> = out.iter().map(|r| r.agreed_leader_ms).collect();
    let mut passes: Vec<f64> = out.iter().map(|r| r.first_pass_ms).collect();
    for (what, samples) in [
        ("agreed leader", &mut agreed),
        ("first pass on the new leader", &mut passes),
    ] {
        if let Some((min, p50, max)) = summary(samples) {
            // Nearest rank: with fewer than 100 rounds, p99 is the max.
            let p99 = percentile(samples, 0.99);
            println!(
                "kill -> {what} over {} rounds: min {min:.0} ms, p50 {p50:.0} ms, \
                 p99 {p99:.0} ms, max {max:.0} ms",
                samples.len()
            );
        }
    }
    Ok(out)
}

/// ms from the kill until `leader`'s first pass that started after it.
async fn first_pass_after(
    cluster: &LocalCluster,
    leader: u64,
    killed_wall_ms: f64,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        let pass_ms = cluster
            .scrape_metrics(leader)
            .ok()
            .and_then(|text| metric_value(&text, FIRST_PASS))
            .map(|s| s * 1000.0);
        if let Some(pass_ms) = pass_ms.filter(|&p| p >= killed_wall_ms) {
            return Ok(pass_ms - killed_wall_ms);
        }
        tokio::time::sleep(POLL).await;
    }
    anyhow::bail!("node {leader} ran no pass within {DEADLINE:?} of the kill")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_read_by_its_exact_name() {
        let text = "# HELP x\n\
                    berth_scheduler_leader_first_pass_timestamp_seconds 1764871234.567\n\
                    berth_scheduler_leader_first_pass_timestamp_seconds_extra 1\n\
                    berth_jobs_live{state=\"pending\"} 3\n";
        assert_eq!(metric_value(text, FIRST_PASS), Some(1_764_871_234.567));
        assert_eq!(metric_value(text, "berth_missing"), None);
        assert_eq!(metric_value("berth_x oops\n", "berth_x"), None);
    }

    #[test]
    fn the_summary_is_min_nearest_rank_p50_and_max() {
        let mut samples = vec![900.0, 1_100.0, 1_000.0, 2_000.0];
        assert_eq!(summary(&mut samples), Some((900.0, 1_000.0, 2_000.0)));
        assert_eq!(summary(&mut []), None);
    }
}
