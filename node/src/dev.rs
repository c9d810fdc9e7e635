//! `berthd dev`: a whole local cluster in one command — 3 nodes and a few
//! agents on loopback, each a child process of this one, with data and logs
//! under one directory. Ctrl-C stops every process it started, by PID.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use berth_proto::api::berth_api_client::BerthApiClient;
use berth_proto::api::{ClusterStatusRequest, ListHostsRequest};
use tokio::process::{Child, Command};

use crate::config::{
    colocated_worker_threads, AgentPolicy, MemberConfig, NodeConfig, RaftTimings, SchedulerConfig,
};

/// How long `berthd dev` waits for a leader and for the agents.
const STARTUP_DEADLINE_MS: u64 = 60_000;
/// How long a child gets between SIGTERM and SIGKILL at shutdown.
const CHILD_STOP_GRACE_MS: u64 = 5_000;

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Directory for the nodes' data, logs and the jobs' working directory.
    /// Reused if it exists, so a restart finds the same jobs.
    #[arg(long, default_value = "dev-data")]
    pub dir: PathBuf,
    /// Number of Raft nodes (3 or 5).
    #[arg(long, default_value_t = 3)]
    pub nodes: u64,
    /// Number of agents (each a simulated host of this machine).
    #[arg(long, default_value_t = 2)]
    pub agents: u32,
    /// gRPC port of node 1; node N listens on base_port + N - 1.
    #[arg(long, default_value_t = 7101)]
    pub base_port: u16,
}

/// A child process with a name for messages.
struct Proc {
    name: String,
    child: Child,
}

/// Configs for an `n`-node loopback cluster under `dir`. Node 1 bootstraps.
pub fn cluster_configs(dir: &Path, n: u64, base_port: u16) -> Vec<NodeConfig> {
    let members: Vec<MemberConfig> = (1..=n)
        .map(|id| MemberConfig {
            id,
            addr: format!("127.0.0.1:{}", base_port as u64 + id - 1),
        })
        .collect();
    (1..=n)
        .map(|id| NodeConfig {
            node_id: id,
            listen: ([127, 0, 0, 1], (base_port as u64 + id - 1) as u16).into(),
            // Metrics 100 ports above the gRPC port: 7201, 7202, ...
            metrics_listen: Some(([127, 0, 0, 1], (base_port as u64 + 100 + id - 1) as u16).into()),
            data_dir: dir.join(format!("node-{id}")),
            bootstrap: id == 1,
            members: members.clone(),
            raft: RaftTimings::default(),
            scheduler: SchedulerConfig::default(),
            agents: AgentPolicy::default(),
            // A dev cluster on loopback runs without authentication.
            auth: Default::default(),
            tls: Default::default(),
            ui: Default::default(),
            listener: Default::default(),
            // The nodes share this machine's cores.
            worker_threads: colocated_worker_threads(n),
        })
        .collect()
}

fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("cannot locate the berthd binary")?;
    let path = me.with_file_name(name);
    if !path.exists() {
        bail!(
            "{name} not found next to berthd (looked for {}); build the workspace with \
             `cargo build --workspace --bins` or run scripts/dev.sh",
            path.display()
        );
    }
    Ok(path)
}

fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Proc> {
    let out =
        std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let err = out.try_clone()?;
    let mut command = Command::new(program);
    // SAFETY: prctl is async-signal-safe; between fork and exec it only
    // asks the kernel to SIGTERM the child if this process dies, so no
    // node or agent outlives a `berthd dev` that was killed.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    // The binaries' directory first on PATH, so jobs of a dev cluster
    // (which inherit the agent's PATH) find `srun` and the other tools
    // linked there.
    if let Some(bin_dir) = program.parent() {
        let path = std::env::var("PATH").unwrap_or_default();
        command.env("PATH", format!("{}:{path}", bin_dir.display()));
    }
    let child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {name} ({})", program.display()))?;
    Ok(Proc {
        name: name.to_string(),
        child,
    })
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if args.nodes != 3 && args.nodes != 5 {
        bail!("--nodes must be 3 or 5, got {}", args.nodes);
    }
    let agent_bin = sibling_binary("berth-agent")?;
    let berthd = std::env::current_exe()?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let work_dir = dir.join("work");
    std::fs::create_dir_all(&work_dir)?;

    let configs = cluster_configs(&dir, args.nodes, args.base_port);
    let servers: Vec<String> = configs.iter().map(|c| c.listen.to_string()).collect();
    let mut procs = Vec::new();
    for config in &configs {
        let path = dir.join(format!("node-{}.toml", config.node_id));
        std::fs::write(&path, toml::to_string(config)?)?;
        let name = format!("node {}", config.node_id);
        let log = dir.join(format!("node-{}.log", config.node_id));
        procs.push(spawn(
            &name,
            &berthd,
            &["--config".into(), path.display().to_string()],
            &log,
        )?);
    }
    for i in 1..=args.agents {
        let name = format!("agent dev-host-{i}");
        let log = dir.join(format!("agent-{i}.log"));
        // Jobs run as whoever runs `berthd dev` (root included): the
        // submitting users of a dev cluster are not users of this machine.
        let agent_config = dir.join(format!("agent-{i}.toml"));
        std::fs::write(
            &agent_config,
            format!(
                "state_dir = {:?}\njob_user = \"agent\"\nallow_root_jobs = true\n\
                 step_listen = \"127.0.0.1:0\"\n",
                dir.join("agent-state").display().to_string()
            ),
        )?;
        let agent_args = vec![
            "--config".into(),
            agent_config.display().to_string(),
            "--server".into(),
            servers.join(","),
            "--host".into(),
            format!("dev-host-{i}"),
            "--work-dir".into(),
            work_dir.display().to_string(),
        ];
        procs.push(spawn(&name, &agent_bin, &agent_args, &log)?);
    }

    let ready = wait_until_ready(&servers, args.agents as usize).await;
    let (leader_line, hosts) = match ready {
        Ok(r) => r,
        Err(e) => {
            stop_all(&mut procs).await;
            return Err(e.context(format!(
                "the dev cluster did not come up; see the logs in {}",
                dir.display()
            )));
        }
    };
    println!("Berth dev cluster is up. {leader_line}; {hosts} hosts registered.");
    println!("  data, logs and job output: {}", dir.display());
    for p in &procs {
        println!("  {:<20} pid {}", p.name, p.child.id().unwrap_or(0));
    }
    println!();
    println!("Point the CLI at it:");
    println!("  export BERTH_SERVER={}", servers.join(","));
    println!("  berth submit --wrap 'echo hello from $BERTH_JOB_ID'   # or: sbatch --wrap ...");
    println!("  berth queue                                          # or: squeue");
    println!("  berth cluster status");
    println!(
        "  curl -s http://{}/metrics | grep ^berth_    # Prometheus metrics",
        configs[0]
            .metrics_listen
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    println!();
    println!("Ctrl-C stops everything started here.");

    supervise(&mut procs).await;
    stop_all(&mut procs).await;
    println!("stopped.");
    Ok(())
}

/// Waits for a leader and for `agents` registered hosts.
async fn wait_until_ready(servers: &[String], agents: usize) -> anyhow::Result<(String, usize)> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(STARTUP_DEADLINE_MS);
    let mut leader_line = None;
    loop {
        for server in servers {
            let Ok(mut client) = BerthApiClient::connect(format!("http://{server}")).await else {
                continue;
            };
            if leader_line.is_none() {
                if let Ok(status) = client.cluster_status(ClusterStatusRequest {}).await {
                    let s = status.into_inner();
                    if s.leader_id != 0 {
                        leader_line = Some(format!(
                            "Leader is node {} ({})",
                            s.leader_id, s.leader_addr
                        ));
                    }
                }
            }
            if let Some(line) = &leader_line {
                if let Ok(hosts) = client.list_hosts(ListHostsRequest {}).await {
                    let n = hosts.into_inner().hosts.len();
                    if n >= agents {
                        return Ok((line.clone(), n));
                    }
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no leader with {agents} registered hosts within {} s",
                STARTUP_DEADLINE_MS / 1000
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs until Ctrl-C, reporting children that exit (as in the tour, where
/// the leader is killed on purpose).
async fn supervise(procs: &mut [Proc]) {
    let mut reported = vec![false; procs.len()];
    let mut poll = tokio::time::interval(Duration::from_millis(500));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return,
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => return,
            _ = poll.tick() => {}
        }
        for (i, p) in procs.iter_mut().enumerate() {
            if reported[i] {
                continue;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                println!("{} exited: {status}", p.name);
                reported[i] = true;
            }
        }
    }
}

/// SIGTERM to every child, then SIGKILL to those still there after the grace.
async fn stop_all(procs: &mut [Proc]) {
    for p in procs.iter() {
        if let Some(pid) = p.child.id() {
            // SAFETY: kill(2) with a pid we spawned and still own.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
    }
    for p in procs.iter_mut() {
        let waited =
            tokio::time::timeout(Duration::from_millis(CHILD_STOP_GRACE_MS), p.child.wait()).await;
        if waited.is_err() {
            let _ = p.child.kill().await;
        }
    }
}
