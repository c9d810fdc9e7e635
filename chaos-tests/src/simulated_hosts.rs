//! `berth-drill simulated-hosts --hosts N --heartbeat-s H --seconds S`:
//! what N hosts heartbeating every H seconds cost the leader.
//!
//! A 3-node cluster on loopback (agents heartbeat every H s, silent after
//! 3 H) and one `berth-agent --simulate N` process. Once every host is
//! registered and one more heartbeat period has passed, the drill reads
//! the leader's `/proc/PID/stat` (user + system CPU time) and
//! `/proc/PID/status` (VmRSS, VmHWM) at the start and end of S seconds and
//! reports CPU as cores (CPU seconds per second), and RSS. The simulator's
//! own CPU is reported too, since on one machine it competes with the
//! leader. The leader must not change in the window, and every host must
//! still be up at its end.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use berth_proto::api::{JobSpec, JobState, ListHostsRequest, ListJobsRequest, SubmitJobRequest};

use crate::harness::{bin_dir, ClusterOptions, HarnessError, LocalCluster};

/// Longest the drill waits for a leader, in s.
const LEADER_DEADLINE_S: u64 = 30;
/// Time allowed for registration: this much plus 1 s per 100 hosts.
const REGISTER_BASE_S: u64 = 60;
/// Most hosts the drill simulates.
pub const DRILL_HOSTS_MAX: u32 = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Harness(#[from] HarnessError),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    pub hosts: u32,
    pub heartbeat_s: u64,
    pub seconds: u64,
    pub dir: PathBuf,
    /// Jobs submitted once the hosts are registered (1 CPU each), each
    /// "running" `job_runtime_s` on its simulated host.
    pub jobs: u32,
    pub job_runtime_s: u64,
}

/// CPU time and memory of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSample {
    /// User plus system time, in clock ticks.
    pub cpu_ticks: u64,
    pub rss_kib: u64,
    /// Peak RSS so far.
    pub hwm_kib: u64,
}

/// What the drill measured.
#[derive(Debug, Clone)]
pub struct DrillReport {
    pub hosts: u32,
    pub heartbeat_s: u64,
    pub seconds: f64,
    pub leader_id: u64,
    pub leader_cores: f64,
    pub leader_rss_mib: f64,
    pub leader_hwm_mib: f64,
    pub simulator_cores: f64,
    pub simulator_rss_mib: f64,
    pub registration_s: f64,
    pub hosts_up_at_end: usize,
    pub jobs: u32,
    /// Jobs that reached COMPLETED by the end of the window.
    pub jobs_completed: usize,
}

impl std::fmt::Display for DrillReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulated-hosts: {} hosts heartbeating every {} s, measured {:.0} s",
            self.hosts, self.heartbeat_s, self.seconds
        )?;
        writeln!(
            f,
            "  registration of all hosts took {:.1} s; {} of {} up at the end",
            self.registration_s, self.hosts_up_at_end, self.hosts
        )?;
        if self.jobs > 0 {
            writeln!(
                f,
                "  {} jobs submitted, {} completed by the end",
                self.jobs, self.jobs_completed
            )?;
        }
        writeln!(
            f,
            "  leader (node {}): {:.3} cores, RSS {:.0} MiB (peak {:.0} MiB)",
            self.leader_id, self.leader_cores, self.leader_rss_mib, self.leader_hwm_mib
        )?;
        writeln!(
            f,
            "  simulator: {:.3} cores, RSS {:.0} MiB",
            self.simulator_cores, self.simulator_rss_mib
        )?;
        write!(
            f,
            "{{\"hosts\":{},\"heartbeat_s\":{},\"seconds\":{:.1},\"leader_cores\":{:.4},\
             \"leader_rss_mib\":{:.1},\"leader_hwm_mib\":{:.1},\"simulator_cores\":{:.4},\
             \"simulator_rss_mib\":{:.1},\"registration_s\":{:.1},\"hosts_up_at_end\":{},\
             \"jobs\":{},\"jobs_completed\":{}}}",
            self.hosts,
            self.heartbeat_s,
            self.seconds,
            self.leader_cores,
            self.leader_rss_mib,
            self.leader_hwm_mib,
            self.simulator_cores,
            self.simulator_rss_mib,
            self.registration_s,
            self.hosts_up_at_end,
            self.jobs,
            self.jobs_completed
        )
    }
}

/// Parses utime + stime (fields 14 and 15) from `/proc/PID/stat` text. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Result<u64, String> {
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or_else(|| "no ')' after the command name".to_string())?;
    // After ')' come field 3 (state) onwards: utime is field 14, the 12th.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .ok_or_else(|| format!("no field {n}"))?
            .parse()
            .map_err(|e| format!("field {n}: {e}"))
    };
    Ok(field(14)? + field(15)?)
}

/// Reads a `Key:   123 kB` line of `/proc/PID/status` text, in KiB.
pub fn parse_status_kib(status: &str, key: &str) -> Result<u64, String> {
    let line = status
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))
        .ok_or_else(|| format!("no {key} line"))?;
    line[key.len() + 1..]
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("{key} has no value"))?
        .parse()
        .map_err(|e| format!("{key}: {e}"))
}

/// Samples process `pid`.
pub fn sample(pid: u32) -> Result<ProcSample, DrillError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let bad = |e: String| DrillError::Failed(format!("/proc/{pid}: {e}"));
    Ok(ProcSample {
        cpu_ticks: parse_stat_cpu_ticks(&stat).map_err(bad)?,
        rss_kib: parse_status_kib(&status, "VmRSS").map_err(bad)?,
        hwm_kib: parse_status_kib(&status, "VmHWM").map_err(bad)?,
    })
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// The simulator process; killed when dropped.
pub struct Simulator(Child);

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Counts (registered hosts, hosts up) as the leader sees them.
async fn host_counts(cluster: &LocalCluster) -> Result<(usize, usize), DrillError> {
    let mut client = cluster.client().await?;
    let hosts = client
        .list_hosts(ListHostsRequest {})
        .await
        .map_err(|e| DrillError::Failed(format!("ListHosts: {e}")))?
        .into_inner()
        .hosts;
    let up = hosts.iter().filter(|h| h.state != "down").count();
    Ok((hosts.len(), up))
}

/// Starts the cluster and the simulator, waits for every host, measures.
/// The cluster and simulator are handed back so a caller (a test) can go
/// on using them.
pub async fn run(
    opts: &DrillOptions,
) -> Result<(DrillReport, LocalCluster, Simulator), DrillError> {
    if opts.hosts == 0 || opts.hosts > DRILL_HOSTS_MAX {
        return Err(DrillError::Failed(format!(
            "--hosts {} must be 1 to {DRILL_HOSTS_MAX}",
            opts.hosts
        )));
    }
    if opts.heartbeat_s == 0 || opts.seconds == 0 {
        return Err(DrillError::Failed(
            "--heartbeat-s and --seconds must be at least 1".into(),
        ));
    }
    let mut cluster = LocalCluster::configure(
        &opts.dir,
        &ClusterOptions {
            agents: 0,
            ..ClusterOptions::default()
        },
    )?;
    let interval_ms = opts.heartbeat_s * 1000;
    let timeout_ms = (3 * interval_ms).max(15_000);
    for id in 1..=3 {
        let path = cluster.node_config(id)?.to_path_buf();
        retime_agents(&path, interval_ms, timeout_ms)?;
    }
    cluster.start_stopped_nodes()?;
    let leader = cluster
        .wait_for_leader(Duration::from_secs(LEADER_DEADLINE_S))
        .await?;
    let leader_pid = cluster
        .node_pid(leader)
        .ok_or_else(|| DrillError::Failed(format!("leader {leader} has no process")))?;

    let log = std::fs::File::create(opts.dir.join("simulator.log"))?;
    let simulator = std::process::Command::new(bin_dir()?.join("berth-agent"))
        .arg("--simulate")
        .arg(opts.hosts.to_string())
        .arg("--server")
        .arg(cluster.servers().join(","))
        .arg("--sim-heartbeat-ms")
        .arg(interval_ms.to_string())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let simulator = Simulator(simulator);
    let simulator_pid = simulator.0.id();

    let started = Instant::now();
    let register_deadline = Duration::from_secs(REGISTER_BASE_S + u64::from(opts.hosts) / 100);
    let mut seen = 0;
    loop {
        if let Ok((registered, _)) = host_counts(&cluster).await {
            seen = registered;
            if registered >= opts.hosts as usize {
                break;
            }
        }
        if started.elapsed() > register_deadline {
            return Err(DrillError::Failed(format!(
                "{seen} of {} hosts registered within {register_deadline:?}; see {}",
                opts.hosts,
                opts.dir.join("simulator.log").display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let registration_s = started.elapsed().as_secs_f64();
    submit_jobs(&cluster, opts.jobs, opts.job_runtime_s).await?;
    // Steady state: every host has started its heartbeat rhythm.
    tokio::time::sleep(Duration::from_millis(interval_ms)).await;

    let ticks = clock_ticks_per_s();
    let (l0, s0, t0) = (sample(leader_pid)?, sample(simulator_pid)?, Instant::now());
    // The measurement window itself: a fixed span, not a wait for a state.
    tokio::time::sleep(Duration::from_secs(opts.seconds)).await;
    let (l1, s1, elapsed) = (
        sample(leader_pid)?,
        sample(simulator_pid)?,
        t0.elapsed().as_secs_f64(),
    );
    let now_leader = cluster
        .wait_for_leader(Duration::from_secs(LEADER_DEADLINE_S))
        .await?;
    if now_leader != leader {
        return Err(DrillError::Failed(format!(
            "the leader changed from {leader} to {now_leader} during the measurement"
        )));
    }
    let (_, up) = host_counts(&cluster).await?;
    let jobs_completed = if opts.jobs > 0 {
        completed_jobs(&cluster).await?
    } else {
        0
    };
    let mib = |kib: u64| kib as f64 / 1024.0;
    let report = DrillReport {
        hosts: opts.hosts,
        heartbeat_s: opts.heartbeat_s,
        seconds: elapsed,
        leader_id: leader,
        leader_cores: (l1.cpu_ticks - l0.cpu_ticks) as f64 / ticks / elapsed,
        leader_rss_mib: mib(l1.rss_kib),
        leader_hwm_mib: mib(l1.hwm_kib),
        simulator_cores: (s1.cpu_ticks - s0.cpu_ticks) as f64 / ticks / elapsed,
        simulator_rss_mib: mib(s1.rss_kib),
        registration_s,
        hosts_up_at_end: up,
        jobs: opts.jobs,
        jobs_completed,
    };
    Ok((report, cluster, simulator))
}

/// Submits `jobs` one-CPU jobs that run `runtime_s` on simulated hosts.
async fn submit_jobs(cluster: &LocalCluster, jobs: u32, runtime_s: u64) -> Result<(), DrillError> {
    let mut client = cluster.client().await?;
    for n in 0..jobs {
        client
            .submit_job(SubmitJobRequest {
                request_id: format!("sim-drill-{n}"),
                spec: Some(JobSpec {
                    name: "sim".into(),
                    user: "drill".into(),
                    command: "simulated".into(),
                    cpus: 1,
                    env: std::collections::HashMap::from([(
                        "BERTH_SIM_RUNTIME_S".to_string(),
                        runtime_s.to_string(),
                    )]),
                    ..Default::default()
                }),
            })
            .await
            .map_err(|e| DrillError::Failed(format!("submit {n}: {e}")))?;
    }
    Ok(())
}

/// How many jobs are COMPLETED.
async fn completed_jobs(cluster: &LocalCluster) -> Result<usize, DrillError> {
    let mut client = cluster.client().await?;
    let jobs = client
        .list_jobs(ListJobsRequest {
            states: vec![JobState::Completed as i32],
            ..Default::default()
        })
        .await
        .map_err(|e| DrillError::Failed(format!("ListJobs: {e}")))?
        .into_inner()
        .jobs;
    Ok(jobs.len())
}

/// Sets the `[agents]` heartbeat keys in a node config the harness wrote.
fn retime_agents(path: &Path, interval_ms: u64, timeout_ms: u64) -> Result<(), DrillError> {
    let text = std::fs::read_to_string(path)?;
    let mut out = String::with_capacity(text.len());
    let mut replaced = 0;
    for line in text.lines() {
        if line.starts_with("heartbeat_interval_ms =") {
            out.push_str(&format!("heartbeat_interval_ms = {interval_ms}\n"));
            replaced += 1;
        } else if line.starts_with("heartbeat_timeout_ms =") {
            out.push_str(&format!("heartbeat_timeout_ms = {timeout_ms}\n"));
            replaced += 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if replaced != 2 {
        return Err(DrillError::Failed(format!(
            "{}: expected the harness's [agents] heartbeat keys",
            path.display()
        )));
    }
    std::fs::write(path, out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks_after_an_awkward_command_name() {
        let stat = "4242 (berthd (x) y) S 1 4242 4242 0 -1 4194560 2000 0 0 0 \
                    1234 567 0 0 20 0 9 0 100 12345678 2000 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(stat), Ok(1234 + 567));
        assert!(parse_stat_cpu_ticks("4242 berthd S").is_err());
    }

    #[test]
    fn reads_status_sizes() {
        let status = "Name:\tberthd\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Ok(102_400));
        assert_eq!(parse_status_kib(status, "VmHWM"), Ok(204_800));
        assert!(parse_status_kib(status, "VmSwap").is_err());
    }

    #[test]
    fn the_own_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
    }
}
