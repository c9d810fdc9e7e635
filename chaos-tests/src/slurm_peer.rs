//! `berth-drill bench sbatch` and `berth-drill bench sbatch-durability`:
//! Berth's `sbatch` next to Slurm's, on the same machine, in the same run.
//!
//! The peer is a single-host Slurm (Debian's `slurmctld`, `munged` and
//! client commands) configured under the work directory: its own
//! `slurm.conf` (loopback ports, `StateSaveLocation` in the work
//! directory), its own munge key and socket, `auth/munge`. No `slurmd` is
//! started: every benchmark job is submitted held (`sbatch -H`), so it
//! never needs a node. Berth is a 3-node `LocalCluster` with no agents,
//! in the shipped configuration (TLS, cluster secret, user tokens),
//! driven through `berth` linked as `sbatch` (the CLI answers as `sbatch`
//! when called by that name, and submits over gRPC like every command).
//!
//! Both are driven the same way: N submitters, each running one
//! `sbatch -H --wrap true` process after the other; a job counts once its
//! process has printed `Submitted batch job ID` and exited 0.
//!
//! Each round of `bench sbatch` also runs a floor phase: the same
//! submitters running a program that does nothing (`/bin/true`), so what
//! a process start costs on this machine is measured beside both systems.
//! Its rate is the most a client that starts no faster than that program
//! could reach here, with a server that cost nothing. `/bin/true` is a
//! dynamic glibc program, as `berth` is; `--floor` names another program
//! to measure the floor of a client built differently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bench::percentile;
use crate::child_run;
use crate::harness::{self, ClusterOptions, LocalCluster};

/// Debian's paths (packages `slurm-wlm` and `munge`).
const SLURMCTLD: &str = "/usr/sbin/slurmctld";
const MUNGED: &str = "/usr/sbin/munged";
const MUNGEKEY: &str = "/usr/sbin/mungekey";
const SBATCH: &str = "/usr/bin/sbatch";
const SQUEUE: &str = "/usr/bin/squeue";

/// Longest one `sbatch` or `squeue` process may take before it is killed
/// and counted as an error.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for a controller to answer `squeue` after a (re)start.
const READY_DEADLINE: Duration = Duration::from_secs(600);
/// Longest wait for munged's socket to appear.
const MUNGE_DEADLINE: Duration = Duration::from_secs(10);
/// Longest wait for Berth to elect a leader.
const LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// Bounds on what a run may ask for.
pub const SUBMITTERS_MAX: usize = 256;
pub const SECONDS_MAX: u64 = 600;
pub const ROUNDS_MAX: u32 = 20;
pub const JOBS_MAX: u64 = 1_000_000;
/// How often a readiness poll is retried.
const POLL: Duration = Duration::from_millis(50);

/// A single-host slurmctld (and its munged) under a work directory.
/// Dropping it kills both by PID.
pub struct SlurmCtld {
    dir: PathBuf,
    conf: PathBuf,
    munged: Option<Child>,
    ctld: Option<Child>,
    pub version: String,
}

impl SlurmCtld {
    /// Writes a munge key and `slurm.conf` under `dir`, starts munged and
    /// slurmctld, and waits until `squeue` answers.
    pub async fn start(dir: &Path) -> anyhow::Result<SlurmCtld> {
        for binary in [SLURMCTLD, MUNGED, MUNGEKEY, SBATCH, SQUEUE] {
            anyhow::ensure!(
                Path::new(binary).exists(),
                "{binary} not found: apt-get install -y slurm-wlm munge"
            );
        }
        let munge_dir = dir.join("munge");
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&munge_dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let key = munge_dir.join("munge.key");
        if !key.exists() {
            let status = std::process::Command::new(MUNGEKEY)
                .arg("--create")
                .arg(format!("--keyfile={}", key.display()))
                .status()
                .context("running mungekey")?;
            anyhow::ensure!(status.success(), "mungekey --create failed: {status}");
        }
        let socket = munge_dir.join("munge.sock");
        let log = std::fs::File::create(dir.join("log/munged.out"))?;
        let munged = harness::command(Path::new(MUNGED))
            .args(["-F", "-f", "-S"])
            .arg(&socket)
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--log-file={}",
                dir.join("log/munged.log").display()
            ))
            .arg(format!(
                "--pid-file={}",
                munge_dir.join("munged.pid").display()
            ))
            .arg(format!(
                "--seed-file={}",
                munge_dir.join("munged.seed").display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting munged")?;
        let mut slurm = SlurmCtld {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            munged: Some(munged),
            ctld: None,
            version: String::new(),
        };
        let since = Instant::now();
        while !socket.exists() {
            anyhow::ensure!(
                since.elapsed() < MUNGE_DEADLINE,
                "munged made no socket within {MUNGE_DEADLINE:?} (see {}/log/munged.out)",
                dir.display()
            );
            tokio::time::sleep(POLL).await;
        }
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        std::fs::write(
            &slurm.conf,
            slurm_conf(
                dir,
                &socket,
                harness::free_port()?,
                harness::free_port()?,
                cpus,
            ),
        )?;
        let version = std::process::Command::new(SLURMCTLD)
            .arg("-V")
            .output()
            .context("slurmctld -V")?;
        slurm.version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        slurm.start_ctld()?;
        slurm.wait_ready(READY_DEADLINE).await?;
        Ok(slurm)
    }

    /// Starts slurmctld in the foreground (`-D`) as a child, on the same
    /// `StateSaveLocation` as before.
    pub fn start_ctld(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.ctld.is_none(), "slurmctld is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log/slurmctld.out"))?;
        let child = harness::command(Path::new(SLURMCTLD))
            .arg("-D")
            .arg("-f")
            .arg(&self.conf)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting slurmctld")?;
        self.ctld = Some(child);
        Ok(())
    }

    /// kill -9 slurmctld.
    pub fn kill_ctld(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.ctld.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.ctld.as_ref().map(Child::id)
    }

    /// How Slurm's client commands reach this controller.
    pub fn submitter(&self) -> Submitter {
        Submitter {
            system: "slurm",
            sbatch: PathBuf::from(SBATCH),
            squeue: PathBuf::from(SQUEUE),
            env: vec![("SLURM_CONF".into(), self.conf.display().to_string())],
            work: Work::Submit,
        }
    }

    /// Waits until `squeue` answers; returns how long that took.
    pub async fn wait_ready(&self, deadline: Duration) -> anyhow::Result<Duration> {
        self.submitter().wait_ready(deadline).await
    }
}

impl Drop for SlurmCtld {
    fn drop(&mut self) {
        for child in [self.ctld.as_mut(), self.munged.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The peer's configuration: one controller on loopback, one node that
/// never runs anything (no slurmd), one partition, no accounting.
fn slurm_conf(dir: &Path, socket: &Path, ctld_port: u16, slurmd_port: u16, cpus: usize) -> String {
    let d = dir.display();
    format!(
        "ClusterName=berthpeer\n\
         SlurmctldHost=localhost\n\
         SlurmctldPort={ctld_port}\n\
         SlurmdPort={slurmd_port}\n\
         SlurmUser=root\n\
         AuthType=auth/munge\n\
         AuthInfo=socket={socket}\n\
         CredType=cred/munge\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\n\
         SlurmctldDebug=info\n\
         MailProg=/bin/true\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_CPU\n\
         SchedulerType=sched/backfill\n\
         AccountingStorageType=accounting_storage/none\n\
         JobCompType=jobcomp/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         MpiDefault=none\n\
         MaxJobCount=1000000\n\
         NodeName=peer1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
         PartitionName=batch Nodes=peer1 Default=YES MaxTime=INFINITE State=UP\n",
        socket = socket.display(),
    )
}

/// A 3-node Berth cluster (no agents), and symlinks to `berth` as `sbatch`
/// and as `squeue`.
pub struct BerthPeer {
    pub cluster: LocalCluster,
    bin: PathBuf,
    client_config: PathBuf,
    /// The submitters' user token (`BERTH_TOKEN`).
    token: String,
    /// The cluster's CA (`BERTH_CA`).
    ca: PathBuf,
}

/// How long the submitters' token lasts.
const TOKEN_TTL_S: u64 = 24 * 3600;

/// This process's user name (`id -un`), which its `sbatch` children share.
fn local_user() -> anyhow::Result<String> {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .context("running id -un")?;
    let user = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || user.is_empty() {
        anyhow::bail!("id -un did not name this process's user");
    }
    Ok(user)
}

impl BerthPeer {
    pub async fn start(dir: &Path) -> anyhow::Result<BerthPeer> {
        // The shipped configuration: TLS on every connection, the cluster
        // secret between nodes, and each `sbatch` proving its user with a
        // token, as Slurm's proves it with munge.
        let options = ClusterOptions {
            agents: 0,
            auth: true,
            tls: true,
            ..ClusterOptions::default()
        };
        let cluster = LocalCluster::start(&dir.join("cluster"), &options)
            .context("starting the Berth cluster")?;
        // The token names the user the submitters run as: `sbatch` submits
        // as its local user, and the node checks the two agree.
        let user = local_user()?;
        let token = cluster
            .token(&user, false, TOKEN_TTL_S)
            .context("issuing the submitters' token")?;
        let ca = dir.join("cluster").join("tls").join("ca.pem");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin)?;
        // Absolute: the links live elsewhere than a relative BERTH_BIN_DIR.
        let berth = std::fs::canonicalize(harness::tool("berth")?)?;
        for name in ["sbatch", "squeue"] {
            let link = bin.join(name);
            if link.symlink_metadata().is_ok() {
                std::fs::remove_file(&link)?;
            }
            std::os::unix::fs::symlink(&berth, &link)?;
        }
        // An empty client config of our own, so none in $HOME applies.
        let client_config = dir.join("client.toml");
        std::fs::write(&client_config, "")?;
        let peer = BerthPeer {
            cluster,
            bin,
            client_config,
            token,
            ca,
        };
        peer.wait_ready(READY_DEADLINE).await?;
        Ok(peer)
    }

    pub fn submitter(&self) -> Submitter {
        Submitter {
            system: "berth",
            sbatch: self.bin.join("sbatch"),
            squeue: self.bin.join("squeue"),
            env: vec![
                ("BERTH_SERVER".into(), self.cluster.servers().join(",")),
                (
                    "BERTH_CONFIG".into(),
                    self.client_config.display().to_string(),
                ),
                ("BERTH_TOKEN".into(), self.token.clone()),
                ("BERTH_CA".into(), self.ca.display().to_string()),
            ],
            work: Work::Submit,
        }
    }

    pub fn pids(&self) -> Vec<u32> {
        (1..=3).filter_map(|id| self.cluster.node_pid(id)).collect()
    }

    /// SIGKILL to every berthd at once, then reap them.
    pub fn kill_all(&mut self) -> anyhow::Result<()> {
        for pid in self.pids() {
            if let Ok(pid) = libc::pid_t::try_from(pid) {
                // SAFETY: kill(2) on a child of ours that has not been reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        self.cluster.kill_all_nodes()?;
        Ok(())
    }

    pub fn restart_all(&mut self) -> anyhow::Result<()> {
        self.cluster.start_stopped_nodes()?;
        Ok(())
    }

    /// Waits until a leader is agreed and `squeue` answers.
    pub async fn wait_ready(&self, deadline: Duration) -> anyhow::Result<Duration> {
        let since = Instant::now();
        self.cluster.wait_for_leader(LEADER_DEADLINE).await?;
        let left = deadline.saturating_sub(since.elapsed());
        self.submitter().wait_ready(left).await?;
        Ok(since.elapsed())
    }
}

/// How one system's `sbatch` and `squeue` are run.
#[derive(Clone, Debug)]
pub struct Submitter {
    pub system: &'static str,
    sbatch: PathBuf,
    squeue: PathBuf,
    env: Vec<(String, String)>,
    work: Work,
}

/// What one process of a phase does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// `sbatch -H --wrap true`: counts once it printed its job id.
    Submit,
    /// The program with no arguments: counts once it exited 0 (the floor).
    StartOnly,
}

impl Submitter {
    /// The floor: `program` (a do-nothing program such as `/bin/true`)
    /// run the way the systems' `sbatch` is, with no arguments.
    pub fn floor(program: &Path) -> Submitter {
        Submitter {
            system: "floor",
            sbatch: program.to_path_buf(),
            squeue: program.to_path_buf(),
            env: Vec::new(),
            work: Work::StartOnly,
        }
    }

    /// One process of a phase: the job id a submit printed, or 0 for the
    /// floor's program. Blocking: the phase runs each submitter on a
    /// thread of its own (see `child_run` for why).
    fn one_job_blocking(&self) -> Result<u64, String> {
        match self.work {
            Work::Submit => self
                .run_blocking(&self.sbatch, &SUBMIT_ARGS)
                .and_then(|out| parse_submission(&out)),
            Work::StartOnly => self.run_blocking(&self.sbatch, &[]).map(|_| 0),
        }
    }

    /// Runs `program args`, killed after [`COMMAND_TIMEOUT`]; its stdout
    /// when it exits 0.
    fn run_blocking(&self, program: &Path, args: &[&str]) -> Result<String, String> {
        let mut cmd = std::process::Command::new(program);
        cmd.args(args)
            .env_remove("BERTH_BIN_DIR")
            .env_remove("BERTH_TOKEN")
            .env_remove("BERTH_CA")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let done = child_run::run(cmd, COMMAND_TIMEOUT).map_err(|e| e.to_string())?;
        if done.status.success() {
            Ok(String::from_utf8_lossy(&done.stdout).into_owned())
        } else {
            Err(format!(
                "{} exited {}: {}",
                program.display(),
                done.status,
                String::from_utf8_lossy(&done.stderr).trim()
            ))
        }
    }

    /// [`Self::run_blocking`] on the runtime's blocking pool.
    async fn run(&self, program: &Path, args: &[&str]) -> Result<String, String> {
        let this = self.clone();
        let program = program.to_path_buf();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            this.run_blocking(&program, &args)
        })
        .await
        .map_err(|e| format!("{}: {e}", self.system))?
    }

    /// `sbatch -H --wrap true`; the job id it printed.
    pub async fn submit_held(&self) -> Result<u64, String> {
        let out = self.run(&self.sbatch, &SUBMIT_ARGS).await?;
        parse_submission(&out)
    }

    /// `sbatch --help`: the cost of starting the program alone (no
    /// connection; Berth's `sbatch` has no `--version`).
    pub async fn help(&self) -> Result<String, String> {
        self.run(&self.sbatch, &["--help"]).await
    }

    /// Every job id `squeue -h -o %i` lists.
    pub async fn queue_ids(&self) -> Result<BTreeSet<u64>, String> {
        let out = self.run(&self.squeue, &["-h", "-o", "%i"]).await?;
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.parse::<u64>()
                    .map_err(|e| format!("squeue line {l:?}: {e}"))
            })
            .collect()
    }

    /// Polls `squeue` until it answers; how long that took.
    pub async fn wait_ready(&self, deadline: Duration) -> anyhow::Result<Duration> {
        let since = Instant::now();
        loop {
            match self.run(&self.squeue, &["-h", "-o", "%i", "-j", "1"]).await {
                Ok(_) => return Ok(since.elapsed()),
                // Both answer "invalid job id" (Slurm capitalised) for a
                // job they do not know: the controller is up.
                Err(e) if e.to_lowercase().contains("invalid job id") => return Ok(since.elapsed()),
                Err(e) => {
                    if since.elapsed() > deadline {
                        anyhow::bail!(
                            "{}: squeue did not answer within {deadline:?}: {e}",
                            self.system
                        );
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The command line of every benchmark submit.
const SUBMIT_ARGS: [&str; 3] = ["-H", "--wrap", "true"];

fn parse_submission(out: &str) -> Result<u64, String> {
    parse_submitted(out).ok_or_else(|| format!("unexpected sbatch output: {out:?}"))
}

/// The job id in sbatch's `Submitted batch job ID`.
pub fn parse_submitted(out: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Submitted batch job "))
        .and_then(|id| id.trim().parse().ok())
}

/// CPU time (user + system) in seconds: of process `pid`, or of this
/// process's reaped children (`None`).
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_string(),
        |p| format!("/proc/{p}/stat"),
    );
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces), 1-based from
    // field 3: utime is field 14, stime 15, cutime 16, cstime 17.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (a, b) = if pid.is_some() { (11, 12) } else { (13, 14) };
    let ticks: f64 = [a, b]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks / if hz > 0 { hz as f64 } else { 100.0 }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// What one system did in one timed phase.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub ids: Vec<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// CPU seconds the controller process(es) used per job.
    pub server_cpu_ms_per_job: f64,
    /// CPU seconds the sbatch processes used per job.
    pub client_cpu_ms_per_job: f64,
    /// CPU seconds this process (the drill: starting, feeding and reaping
    /// the submitters' processes) used per job, on the same cores.
    pub harness_cpu_ms_per_job: f64,
    pub load_before: String,
}

impl Phase {
    pub fn jobs_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ids.len() as f64 / secs
        } else {
            0.0
        }
    }
}

/// `submitters` workers, each running one `sbatch -H --wrap true` (for
/// the floor, its program) after the other until `duration` has passed or
/// `max_jobs` were started.
pub async fn submit_phase(
    submitter: &Submitter,
    submitters: usize,
    duration: Duration,
    max_jobs: u64,
    server_pids: &[u32],
) -> Phase {
    let load_before = load_average();
    let server_before: f64 = server_pids.iter().map(|p| cpu_seconds(Some(*p))).sum();
    let client_before = cpu_seconds(None);
    let harness_before = cpu_seconds(Some(std::process::id()));
    let started = Arc::new(AtomicU64::new(0));
    let since = Instant::now();
    let end = since + duration;
    // One OS thread per submitter, each blocking on its process: the
    // cheapest way to keep N processes going (`child_run`).
    let mut threads = Vec::new();
    for _ in 0..submitters {
        let submitter = submitter.clone();
        let started = started.clone();
        threads.push(std::thread::spawn(move || {
            let mut ids = Vec::new();
            let mut samples = Vec::new();
            let mut errors = 0u64;
            let mut first_error = None;
            while Instant::now() < end && started.fetch_add(1, Ordering::Relaxed) < max_jobs {
                let sent = Instant::now();
                match submitter.one_job_blocking() {
                    Ok(id) => {
                        ids.push(id);
                        samples.push(sent.elapsed().as_secs_f64() * 1000.0);
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            (ids, samples, errors, first_error)
        }));
    }
    let joined = tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| "a submitter thread panicked".to_string())
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_else(|e| vec![Err(format!("joining the submitters: {e}"))]);
    let mut phase = Phase {
        load_before,
        ..Phase::default()
    };
    let mut samples = Vec::new();
    for joined in joined {
        match joined {
            Ok((ids, s, errors, first_error)) => {
                phase.ids.extend(ids);
                samples.extend(s);
                phase.errors += errors;
                if phase.first_error.is_none() {
                    phase.first_error = first_error;
                }
            }
            Err(e) => {
                phase.errors += 1;
                phase.first_error.get_or_insert(e);
            }
        }
    }
    phase.elapsed = since.elapsed();
    samples.sort_by(f64::total_cmp);
    phase.p50_ms = percentile(&samples, 0.5);
    phase.p99_ms = percentile(&samples, 0.99);
    let jobs = phase.ids.len().max(1) as f64;
    let server_after: f64 = server_pids.iter().map(|p| cpu_seconds(Some(*p))).sum();
    phase.server_cpu_ms_per_job = (server_after - server_before) * 1000.0 / jobs;
    phase.client_cpu_ms_per_job = (cpu_seconds(None) - client_before) * 1000.0 / jobs;
    phase.harness_cpu_ms_per_job =
        (cpu_seconds(Some(std::process::id())) - harness_before) * 1000.0 / jobs;
    phase
}

/// One process at a time: p50 wall time of `sbatch --help` (program
/// start alone) and of a held submit, and CPU per process.
#[derive(Debug, Clone, Default)]
pub struct Anatomy {
    pub help_p50_ms: f64,
    pub help_cpu_ms: f64,
    pub submit_p50_ms: f64,
    pub submit_cpu_ms: f64,
    pub server_cpu_ms_per_submit: f64,
}

pub async fn anatomy(submitter: &Submitter, runs: u32, server_pids: &[u32]) -> Anatomy {
    let mut out = Anatomy::default();
    let runs = runs.max(1);
    let mut walls = Vec::new();
    let cpu0 = cpu_seconds(None);
    for _ in 0..runs {
        let t = Instant::now();
        if submitter.help().await.is_ok() {
            walls.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let cpu1 = cpu_seconds(None);
    walls.sort_by(f64::total_cmp);
    out.help_p50_ms = percentile(&walls, 0.5);
    out.help_cpu_ms = (cpu1 - cpu0) * 1000.0 / f64::from(runs);
    walls.clear();
    let server0: f64 = server_pids.iter().map(|p| cpu_seconds(Some(*p))).sum();
    for _ in 0..runs {
        let t = Instant::now();
        if submitter.submit_held().await.is_ok() {
            walls.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let server1: f64 = server_pids.iter().map(|p| cpu_seconds(Some(*p))).sum();
    walls.sort_by(f64::total_cmp);
    out.submit_p50_ms = percentile(&walls, 0.5);
    out.submit_cpu_ms = (cpu_seconds(None) - cpu1) * 1000.0 / f64::from(runs);
    out.server_cpu_ms_per_submit = (server1 - server0) * 1000.0 / f64::from(runs);
    out
}

#[derive(Debug, Clone)]
pub struct RateOptions {
    pub submitters: usize,
    pub seconds: u64,
    pub max_jobs: u64,
    pub rounds: u32,
    pub anatomy_runs: u32,
    pub dir: Option<PathBuf>,
    /// The do-nothing program of the floor phase; `None` skips it.
    pub floor: Option<PathBuf>,
}

fn work_dir(dir: &Option<PathBuf>) -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let tmp = tempfile::tempdir()?;
    let dir = dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    Ok((tmp, dir))
}

fn print_phase(round: u32, system: &str, p: &Phase) {
    println!(
        "round {round} {system:>5}: {:>6} jobs in {:>6.2} s = {:>8.1} jobs/s, p50 {:>7.2} ms, p99 {:>7.2} ms, \
         server CPU {:>6.3} ms/job, sbatch CPU {:>6.3} ms/job, harness CPU {:>6.3} ms/job, \
         errors {}, load {}",
        p.ids.len(),
        p.elapsed.as_secs_f64(),
        p.jobs_per_s(),
        p.p50_ms,
        p.p99_ms,
        p.server_cpu_ms_per_job,
        p.client_cpu_ms_per_job,
        p.harness_cpu_ms_per_job,
        p.errors,
        p.load_before
    );
    if let Some(e) = &p.first_error {
        println!("  {system}: first error: {e}");
    }
}

fn phase_json(p: &Phase) -> serde_json::Value {
    serde_json::json!({
        "jobs": p.ids.len(),
        "seconds": (p.elapsed.as_secs_f64() * 100.0).round() / 100.0,
        "jobs_per_s": (p.jobs_per_s() * 10.0).round() / 10.0,
        "p50_ms": (p.p50_ms * 100.0).round() / 100.0,
        "p99_ms": (p.p99_ms * 100.0).round() / 100.0,
        "server_cpu_ms_per_job": (p.server_cpu_ms_per_job * 1000.0).round() / 1000.0,
        "sbatch_cpu_ms_per_job": (p.client_cpu_ms_per_job * 1000.0).round() / 1000.0,
        "harness_cpu_ms_per_job": (p.harness_cpu_ms_per_job * 1000.0).round() / 1000.0,
        "errors": p.errors,
        "load_avg_1m_before": p.load_before,
    })
}

/// `berth-drill bench sbatch`.
pub async fn sbatch_rate(options: &RateOptions) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=SUBMITTERS_MAX).contains(&options.submitters),
        "--submitters must be 1..={SUBMITTERS_MAX}"
    );
    anyhow::ensure!(
        (1..=SECONDS_MAX).contains(&options.seconds),
        "--seconds must be 1..={SECONDS_MAX}"
    );
    anyhow::ensure!(
        (1..=ROUNDS_MAX).contains(&options.rounds),
        "--rounds must be 1..={ROUNDS_MAX}"
    );
    anyhow::ensure!(
        (1..=JOBS_MAX).contains(&options.max_jobs),
        "--jobs must be 1..={JOBS_MAX}"
    );
    if let Some(floor) = &options.floor {
        anyhow::ensure!(
            floor.is_file(),
            "--floor {}: no such program",
            floor.display()
        );
    }
    let (_tmp, dir) = work_dir(&options.dir)?;
    let slurm = SlurmCtld::start(&dir.join("slurm")).await?;
    let berth = BerthPeer::start(&dir.join("berth")).await?;
    berth.cluster.wait_caught_up(LEADER_DEADLINE).await?;
    let slurm_sub = slurm.submitter();
    let berth_sub = berth.submitter();
    let slurm_pids: Vec<u32> = slurm.pid().into_iter().collect();
    let berth_pids = berth.pids();
    println!(
        "sbatch: {} submitters, each running `sbatch -H --wrap true` processes back to back, \
         {} s or {} jobs per phase, {} rounds alternating; {} (single host, auth/munge) vs \
         3-node Berth (agents 0) through its sbatch; work dir {}",
        options.submitters,
        options.seconds,
        options.max_jobs,
        options.rounds,
        slurm.version,
        dir.display()
    );
    let floor_sub = options.floor.as_deref().map(Submitter::floor);
    let duration = Duration::from_secs(options.seconds);
    let mut totals = [(0usize, 0f64), (0usize, 0f64), (0usize, 0f64)];
    for round in 1..=options.rounds {
        // Alternate which system goes first, so a change of load hits both.
        let order: [usize; 2] = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        let mut phases: [Phase; 2] = Default::default();
        for which in order {
            let (sub, pids) = if which == 0 {
                (&slurm_sub, &slurm_pids)
            } else {
                (&berth_sub, &berth_pids)
            };
            let p = submit_phase(sub, options.submitters, duration, options.max_jobs, pids).await;
            print_phase(round, sub.system, &p);
            totals[which].0 += p.ids.len();
            totals[which].1 += p.elapsed.as_secs_f64();
            phases[which] = p;
        }
        let round_ratio = ratio(phases[1].jobs_per_s(), phases[0].jobs_per_s());
        println!("round {round} berth/slurm: {round_ratio:.2}x");
        let mut json = serde_json::json!({
            "bench": "sbatch",
            "round": round,
            "submitters": options.submitters,
            "slurm": phase_json(&phases[0]),
            "berth": phase_json(&phases[1]),
            "ratio_jobs_per_s": (round_ratio * 100.0).round() / 100.0,
        });
        if let Some(floor_sub) = &floor_sub {
            // No server: the floor is what starting processes alone allows.
            let p = submit_phase(
                floor_sub,
                options.submitters,
                duration,
                options.max_jobs,
                &[],
            )
            .await;
            print_phase(round, floor_sub.system, &p);
            let ceiling = ratio(p.jobs_per_s(), phases[0].jobs_per_s());
            println!(
                "round {round} floor/slurm: {ceiling:.2}x (starting {} alone, with no server)",
                floor_sub.sbatch.display()
            );
            totals[2].0 += p.ids.len();
            totals[2].1 += p.elapsed.as_secs_f64();
            json["floor"] = phase_json(&p);
            json["floor_ratio_jobs_per_s"] = serde_json::json!((ceiling * 100.0).round() / 100.0);
        }
        println!("{json}");
    }
    let rate = |(jobs, secs): (usize, f64)| if secs > 0.0 { jobs as f64 / secs } else { 0.0 };
    let (s, b, f) = (rate(totals[0]), rate(totals[1]), rate(totals[2]));
    println!(
        "all rounds: slurm {s:.1} jobs/s, berth {b:.1} jobs/s, berth/slurm {:.2}x (goal >= 1.5x: {})",
        ratio(b, s),
        if ratio(b, s) >= 1.5 { "met" } else { "not met" }
    );
    if floor_sub.is_some() {
        println!(
            "all rounds: floor {f:.1} processes/s, floor/slurm {:.2}x, berth/floor {:.2}",
            ratio(f, s),
            ratio(b, f)
        );
    }
    if options.anatomy_runs > 0 {
        println!(
            "one process at a time, {} runs each (p50 wall; CPU per process):",
            options.anatomy_runs
        );
        for (sub, pids) in [(&slurm_sub, &slurm_pids), (&berth_sub, &berth_pids)] {
            let a = anatomy(sub, options.anatomy_runs, pids).await;
            println!(
                "  {:>5}: sbatch --help {:.2} ms ({:.2} ms CPU); sbatch -H --wrap true {:.2} ms \
                 ({:.2} ms CPU in sbatch, {:.2} ms CPU in the controller(s))",
                sub.system,
                a.help_p50_ms,
                a.help_cpu_ms,
                a.submit_p50_ms,
                a.submit_cpu_ms,
                a.server_cpu_ms_per_submit
            );
        }
    }
    drop(berth);
    drop(slurm);
    Ok(())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

#[derive(Debug, Clone)]
pub struct DurabilityOptions {
    pub submitters: usize,
    pub jobs: u64,
    pub after: u64,
    pub dir: Option<PathBuf>,
}

/// What a kill -9 of the controller(s) right after `jobs` acknowledged
/// submits did.
#[derive(Debug, Clone, Default)]
pub struct Durability {
    pub acked: usize,
    pub submit_errors: u64,
    pub recovery: Duration,
    pub listed: usize,
    pub lost: usize,
    pub first_lost: Vec<u64>,
    pub after: usize,
    pub reused: usize,
    pub first_reused: Vec<u64>,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acknowledged ({} errors); restart until squeue answered {:.2} s; {} listed; \
             {} acknowledged jobs lost {:?}; {} submitted after, {} ids handed out twice {:?}",
            self.acked,
            self.submit_errors,
            self.recovery.as_secs_f64(),
            self.listed,
            self.lost,
            self.first_lost,
            self.after,
            self.reused,
            self.first_reused
        )
    }
}

async fn durability_after_kill(
    submitter: &Submitter,
    options: &DurabilityOptions,
    acked: &Phase,
    recovery: Duration,
) -> anyhow::Result<Durability> {
    let acked_ids: BTreeSet<u64> = acked.ids.iter().copied().collect();
    anyhow::ensure!(
        acked_ids.len() == acked.ids.len(),
        "{}: a job id was acknowledged twice before the kill",
        submitter.system
    );
    let listed = submitter
        .queue_ids()
        .await
        .map_err(|e| anyhow::anyhow!("{}: squeue after restart: {e}", submitter.system))?;
    let lost: Vec<u64> = acked_ids.difference(&listed).copied().collect();
    let after = submit_phase(
        submitter,
        options.submitters,
        Duration::from_secs(SECONDS_MAX),
        options.after,
        &[],
    )
    .await;
    let reused: Vec<u64> = after
        .ids
        .iter()
        .copied()
        .filter(|id| acked_ids.contains(id) || listed.contains(id))
        .collect();
    Ok(Durability {
        acked: acked_ids.len(),
        submit_errors: acked.errors + after.errors,
        recovery,
        listed: listed.len(),
        lost: lost.len(),
        first_lost: lost.iter().take(5).copied().collect(),
        after: after.ids.len(),
        reused: reused.len(),
        first_reused: reused.iter().take(5).copied().collect(),
    })
}

/// `berth-drill bench sbatch-durability`.
pub async fn sbatch_durability(options: &DurabilityOptions) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=SUBMITTERS_MAX).contains(&options.submitters),
        "--submitters must be 1..={SUBMITTERS_MAX}"
    );
    anyhow::ensure!(
        (1..=JOBS_MAX).contains(&options.jobs) && options.after <= JOBS_MAX,
        "--jobs must be 1..={JOBS_MAX} and --after at most that"
    );
    let (_tmp, dir) = work_dir(&options.dir)?;
    let forever = Duration::from_secs(24 * 3600);
    println!(
        "sbatch-durability: {} acknowledged `sbatch -H --wrap true` ({} submitters), kill -9 of \
         the controller(s) at once, restart, then {} more; work dir {}",
        options.jobs,
        options.submitters,
        options.after,
        dir.display()
    );

    let mut slurm = SlurmCtld::start(&dir.join("slurm")).await?;
    let sub = slurm.submitter();
    let pids: Vec<u32> = slurm.pid().into_iter().collect();
    let acked = submit_phase(&sub, options.submitters, forever, options.jobs, &pids).await;
    slurm.kill_ctld()?;
    let restarted = Instant::now();
    slurm.start_ctld()?;
    slurm.wait_ready(READY_DEADLINE).await?;
    let recovery = restarted.elapsed();
    let slurm_result = durability_after_kill(&sub, options, &acked, recovery).await?;
    println!(
        "slurm ({}; submit {:.1} jobs/s): {slurm_result}",
        slurm.version,
        acked.jobs_per_s()
    );
    drop(slurm);

    let mut berth = BerthPeer::start(&dir.join("berth")).await?;
    berth.cluster.wait_caught_up(LEADER_DEADLINE).await?;
    let sub = berth.submitter();
    let pids = berth.pids();
    let acked = submit_phase(&sub, options.submitters, forever, options.jobs, &pids).await;
    berth.kill_all()?;
    let restarted = Instant::now();
    berth.restart_all()?;
    berth.wait_ready(READY_DEADLINE).await?;
    let recovery = restarted.elapsed();
    let berth_result = durability_after_kill(&sub, options, &acked, recovery).await?;
    println!(
        "berth (3 berthd, all killed; submit {:.1} jobs/s): {berth_result}",
        acked.jobs_per_s()
    );
    drop(berth);
    for (system, r) in [("slurm", &slurm_result), ("berth", &berth_result)] {
        println!(
            "{}",
            serde_json::json!({
                "bench": "sbatch-durability",
                "system": system,
                "acked": r.acked,
                "submit_errors": r.submit_errors,
                "recovery_s": (r.recovery.as_secs_f64() * 100.0).round() / 100.0,
                "listed_after_restart": r.listed,
                "lost": r.lost,
                "submitted_after": r.after,
                "ids_reused": r.reused,
            })
        );
    }
    println!(
        "berth goal (0 lost, 0 reused): {}",
        if berth_result.lost == 0 && berth_result.reused == 0 {
            "met"
        } else {
            "not met"
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sbatch_output() {
        assert_eq!(parse_submitted("Submitted batch job 42\n"), Some(42));
        assert_eq!(
            parse_submitted("warning: x\nSubmitted batch job 7"),
            Some(7)
        );
        assert_eq!(parse_submitted("Submitted batch job x"), None);
        assert_eq!(parse_submitted(""), None);
    }

    #[test]
    fn own_cpu_time_is_read() {
        // Burning CPU must show in this process's own utime + stime (a
        // misread field would stay constant); bounded at 5 s of wall time.
        let me = Some(std::process::id());
        let before = cpu_seconds(me);
        let start = std::time::Instant::now();
        let mut spin: u64 = 0;
        while cpu_seconds(me) <= before && start.elapsed() < Duration::from_secs(5) {
            for i in 0..100_000u64 {
                spin = spin.wrapping_add(i ^ spin.rotate_left(7));
            }
        }
        assert!(
            cpu_seconds(me) > before,
            "no CPU time counted (spin {spin})"
        );
        // Children's time: none of this test's own.
        assert!(cpu_seconds(None) >= 0.0);
    }

    #[test]
    fn conf_names_the_ports_and_state_dir() {
        let conf = slurm_conf(Path::new("/w"), Path::new("/w/munge/s"), 1, 2, 4);
        assert!(conf.contains("SlurmctldPort=1\n"));
        assert!(conf.contains("StateSaveLocation=/w/state\n"));
        assert!(conf.contains("AuthInfo=socket=/w/munge/s\n"));
        assert!(conf.contains("CPUs=4 "));
    }

    /// The floor counts every do-nothing process that exited 0, stops at
    /// the job bound, and counts a failing program as errors.
    #[tokio::test]
    async fn the_floor_counts_processes_that_exit_zero() {
        let generous = Duration::from_secs(60);
        let done = submit_phase(
            &Submitter::floor(Path::new("/bin/true")),
            2,
            generous,
            10,
            &[],
        )
        .await;
        assert_eq!(
            (done.ids.len(), done.errors),
            (10, 0),
            "{:?}",
            done.first_error
        );
        let failed = submit_phase(
            &Submitter::floor(Path::new("/bin/false")),
            2,
            generous,
            4,
            &[],
        )
        .await;
        assert_eq!((failed.ids.len(), failed.errors), (0, 4));
        assert!(failed.first_error.is_some_and(|e| e.contains("/bin/false")));
    }
}
