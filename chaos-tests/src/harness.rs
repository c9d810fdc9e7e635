//! A real Berth cluster on loopback, as child processes: `berthd` nodes,
//! each with its own RocksDB directory, and `berth-agent`s. Used by the
//! integration tests and by `berth-drill`. Every wait has a deadline.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::compose::ComposeLab;
use crate::netlab::NetLab;
use berth_auth::grpc::{AttachCredentials, CredentialedChannel};
use berth_proto::api::berth_api_client::BerthApiClient;
use berth_proto::api::{
    ClusterStatusRequest, ClusterStatusResponse, JobSpec, SubmitJobRequest, SubmitJobResponse,
};

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(
        "{binary} not found in {dir}; build the binaries first: cargo build --workspace --bins"
    )]
    MissingBinary { binary: String, dir: PathBuf },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },
    #[error("no node {0} in this cluster")]
    NoSuchNode(u64),
    #[error("rpc: {0}")]
    Rpc(String),
    #[error(transparent)]
    Netlab(#[from] crate::netlab::NetlabError),
    #[error(transparent)]
    Compose(#[from] crate::compose::ComposeError),
}

/// Where the workspace's binaries are: `BERTH_BIN_DIR`, else the cargo
/// target directory the running test binary lives in.
pub fn bin_dir() -> Result<PathBuf, HarnessError> {
    if let Ok(dir) = std::env::var("BERTH_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.pop();
    }
    Ok(dir)
}

/// A binary of the workspace (`berth`, `berthd`, ...), as [`bin_dir`]
/// finds them.
pub fn tool(name: &str) -> Result<PathBuf, HarnessError> {
    binary(&bin_dir()?, name)
}

fn binary(dir: &Path, name: &str) -> Result<PathBuf, HarnessError> {
    let path = dir.join(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary {
            binary: name.into(),
            dir: dir.to_path_buf(),
        })
    }
}

/// A command whose process gets SIGKILL if the one that started it dies, so
/// a crashed or killed test never leaves a cluster behind.
pub(crate) fn command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// Ports handed to test clusters come from below the kernel's ephemeral
/// range (32768 and up on Linux), so an outgoing connection can never take
/// a port between the moment it is chosen and the moment a node binds it.
const PORT_RANGE_START: u16 = 20_000;
const PORT_RANGE_LEN: u16 = 10_000;
/// Candidates tried before giving up on finding a free port.
const PORT_ATTEMPTS_MAX: u32 = 1_000;

static NEXT_PORT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A loopback port that is free now. Candidates are spread by process id
/// so parallel test processes rarely try the same ones, and each is checked
/// by binding it.
pub fn free_port() -> Result<u16, HarnessError> {
    let base = std::process::id().wrapping_mul(7_919);
    for _ in 0..PORT_ATTEMPTS_MAX {
        let n = NEXT_PORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = PORT_RANGE_START + (base.wrapping_add(n) % u32::from(PORT_RANGE_LEN)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(HarnessError::Io(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port among {PORT_ATTEMPTS_MAX} tried"),
    )))
}

/// A node or agent that runs: a child process (on loopback or in a
/// namespace), or the member's container.
enum Running {
    Process(Child),
    Container,
}

struct NodeProc {
    id: u64,
    addr: String,
    metrics_addr: String,
    config_path: PathBuf,
    child: Option<Running>,
}

/// A running local cluster. Dropping it kills every process it started.
pub struct LocalCluster {
    pub dir: PathBuf,
    berthd: PathBuf,
    agent_bin: PathBuf,
    nodes: Vec<NodeProc>,
    /// Agent `i` (1-based) is `agents[i - 1]`: its CPUs and its process.
    agents: Vec<(u32, Option<Running>)>,
    /// More TOML for agent `i`'s config file (see `set_agent_toml`).
    agent_toml: std::collections::BTreeMap<u32, String>,
    /// With `Isolation::Namespaces`: node `id` is member `n{id}`, agent
    /// `i` member `a{i}`. Removed after every process is stopped.
    netlab: Option<NetLab>,
    /// With `Isolation::Containers`: the same labels, as containers.
    compose: Option<ComposeLab>,
}

/// Knobs for [`LocalCluster::start`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The initial voters, ids 1..=nodes (node 1 bootstraps).
    pub nodes: u64,
    /// Further nodes configured but not voters (ids after the voters):
    /// started later and added as learners by a test.
    pub spare_nodes: u64,
    pub agents: u32,
    /// CPUs each agent declares (0: what the machine has).
    pub agent_cpus: u32,
    /// Snapshot after this many entries, keeping 2 behind (None: berthd's
    /// defaults), so a test can make a lagging node need a snapshot.
    pub snapshot_every_entries: Option<u64>,
    /// Run with authentication: secrets in `dir/token.secret` and
    /// `dir/cluster.secret` (see [`LocalCluster::token`]).
    pub auth: bool,
    /// Run with TLS: a test CA and a certificate for 127.0.0.1 made with
    /// the `openssl` command under `dir/tls/`. This process's own
    /// connections then use TLS too (a process-wide setting: keep TLS
    /// tests in their own test binary).
    pub tls: bool,
    /// Where the processes run, and so whether one can be cut off the
    /// network ([`LocalCluster::cut_node`]).
    pub isolation: Isolation,
}

/// Where a local cluster's nodes and agents run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Processes on 127.0.0.1; no link can be cut.
    #[default]
    Loopback,
    /// Processes each in a network namespace of its own on a private
    /// bridge ([`crate::netlab`], needs root).
    Namespaces,
    /// docker compose containers of the project's images on a private
    /// network ([`crate::compose`]; images from
    /// `deploy/docker/build-images.sh`, tag `BERTH_IMAGE_TAG`).
    Containers,
}

/// A node's gRPC and HTTP ports inside its own namespace.
const NETNS_GRPC_PORT: u16 = 7_100;
const NETNS_HTTP_PORT: u16 = 9_100;

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 3,
            spare_nodes: 0,
            snapshot_every_entries: None,
            auth: false,
            tls: false,
            isolation: Isolation::Loopback,
            agents: 1,
            agent_cpus: 0,
        }
    }
}

impl LocalCluster {
    /// Writes configs under `dir` and starts every node and agent.
    pub fn start(dir: &Path, options: &ClusterOptions) -> Result<LocalCluster, HarnessError> {
        let mut cluster = Self::configure(dir, options)?;
        cluster.start_all()?;
        Ok(cluster)
    }

    /// Writes configs under `dir` (node `id`'s data in `dir/node-{id}`, its
    /// config in `dir/node-{id}.toml`, node 1 bootstraps) and starts
    /// nothing, so a test can prepare the nodes' data first.
    pub fn configure(dir: &Path, options: &ClusterOptions) -> Result<LocalCluster, HarnessError> {
        let bins = bin_dir()?;
        let berthd = binary(&bins, "berthd")?;
        let agent_bin = binary(&bins, "berth-agent")?;
        std::fs::create_dir_all(dir)?;
        if options.isolation != Isolation::Loopback && options.tls {
            // The test certificate names 127.0.0.1 only.
            return Err(HarnessError::Rpc(
                "a cluster in namespaces or containers runs without TLS".into(),
            ));
        }
        let mut netlab = match options.isolation {
            Isolation::Namespaces => Some(NetLab::create()?),
            _ => None,
        };
        let mut compose = match options.isolation {
            Isolation::Containers => Some(ComposeLab::new(dir)?),
            _ => None,
        };
        // (gRPC address, HTTP address) of each node.
        let mut members = Vec::new();
        let mut http_addrs = Vec::new();
        for id in 1..=options.nodes + options.spare_nodes {
            let label = format!("n{id}");
            let ip = match (netlab.as_mut(), compose.as_mut()) {
                (Some(lab), _) => Some(lab.add(&label)?),
                (_, Some(lab)) => Some(lab.add_node(&label)?),
                _ => None,
            };
            let (addr, http) = match ip {
                Some(ip) => (
                    format!("{ip}:{NETNS_GRPC_PORT}"),
                    format!("{ip}:{NETNS_HTTP_PORT}"),
                ),
                None => (
                    format!("127.0.0.1:{}", free_port()?),
                    format!("127.0.0.1:{}", free_port()?),
                ),
            };
            members.push((id, addr));
            http_addrs.push(http);
        }
        for i in 1..=options.agents {
            let label = format!("a{i}");
            if let Some(lab) = netlab.as_mut() {
                lab.add(&label)?;
            }
            if let Some(lab) = compose.as_mut() {
                lab.add_agent(&label)?;
            }
        }
        let member_line =
            |(id, addr): &(u64, String)| format!("[[members]]\nid = {id}\naddr = \"{addr}\"\n");
        let voters = &members[..options.nodes as usize];
        let tls_toml = if options.tls {
            let tls = make_test_certificates(&dir.join("tls"))?;
            berth_auth::tls::set_client_ca(Some(&std::fs::read(tls.join("ca.pem"))?));
            format!(
                "[tls]\ncert_file = \"{0}/node.pem\"\nkey_file = \"{0}/node.key\"\nca_file = \"{0}/ca.pem\"\n",
                tls.display()
            )
        } else {
            String::new()
        };
        // Fixed test secrets (32+ printable bytes), one per purpose.
        let auth_toml = if options.auth {
            std::fs::write(
                dir.join("token.secret"),
                "test-token-secret-0123456789abcdef\n",
            )?;
            std::fs::write(
                dir.join("cluster.secret"),
                format!("{TEST_CLUSTER_SECRET}\n"),
            )?;
            format!(
                "[auth]\nenabled = true\ntoken_secret_file = \"{}\"\ncluster_secret_file = \"{}\"\n",
                dir.join("token.secret").display(),
                dir.join("cluster.secret").display()
            )
        } else {
            String::new()
        };
        let voter_toml: String = voters.iter().map(member_line).collect();
        // The nodes share this machine's cores.
        let worker_threads =
            berth_node::config::colocated_worker_threads(options.nodes + options.spare_nodes);
        let mut nodes = Vec::new();
        for ((id, addr), metrics_addr) in members.iter().zip(http_addrs) {
            // A spare node lists itself too (its config must name it); it
            // never bootstraps, so the list only serves that check.
            let member_toml = if *id > options.nodes {
                format!("{voter_toml}{}", member_line(&(*id, addr.clone())))
            } else {
                voter_toml.clone()
            };
            // Heartbeat timeout 10 s, berthd's default. Agents find a new
            // leader by asking every member at once (agent/src/discover.rs);
            // with it, berth-drill chaos --seed 11 passed with 3 s on this
            // 2-core machine, where trusting one stale hint once ended live
            // jobs NODE_FAIL with 5 s. The margin is for loaded CI machines.
            let config = format!(
                "node_id = {id}\nlisten = \"{addr}\"\nmetrics_listen = \"{metrics_addr}\"\n\
                 data_dir = \"{}\"\nbootstrap = {}\nworker_threads = {worker_threads}\n{member_toml}\n\
                 [agents]\nheartbeat_interval_ms = 500\nheartbeat_timeout_ms = 10000\nstop_grace_s = 5\n{}",
                dir.join(format!("node-{id}")).display(),
                *id == 1,
                options.snapshot_every_entries.map_or(String::new(), |n| format!(
                    "[raft]\nsnapshot_every_entries = {n}\nlog_entries_kept_behind_snapshot = 2\n"
                )),
            ) + &auth_toml
                + &tls_toml;
            let config_path = dir.join(format!("node-{id}.toml"));
            std::fs::write(&config_path, config)?;
            if let Some(lab) = compose.as_mut() {
                lab.set_node_args(
                    &format!("n{id}"),
                    vec!["--config".into(), config_path.display().to_string()],
                )?;
            }
            nodes.push(NodeProc {
                id: *id,
                addr: addr.clone(),
                metrics_addr,
                config_path,
                child: None,
            });
        }
        let agents = (0..options.agents)
            .map(|_| (options.agent_cpus, None))
            .collect();
        if let Some(lab) = compose.as_mut() {
            lab.create()?;
        }
        Ok(LocalCluster {
            dir: dir.to_path_buf(),
            berthd,
            agent_bin,
            nodes,
            agents,
            agent_toml: std::collections::BTreeMap::new(),
            netlab,
            compose,
        })
    }

    /// Appends `toml` (e.g. a `[scheduler]` table) to every node's config
    /// file; call between [`Self::configure`] and [`Self::start_all`].
    pub fn append_node_toml(&self, toml: &str) -> Result<(), HarnessError> {
        use std::io::Write;
        for node in &self.nodes {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(&node.config_path)?;
            writeln!(file, "\n{toml}")?;
        }
        Ok(())
    }

    /// Adds `toml` to agent `i`'s config file from its next start on
    /// (e.g. `fake_inventory_file`, `[declared]`).
    pub fn set_agent_toml(&mut self, i: u32, toml: &str) {
        self.agent_toml.insert(i, toml.to_string());
    }

    /// Gives agent `i` a fake-inventory file (GPUs and emulators written
    /// down, see the agent's `inventory::fake`) with `text`, in place of
    /// discovery, from its next start on.
    pub fn set_agent_fake_inventory(&mut self, i: u32, text: &str) -> Result<(), HarnessError> {
        let path = self.dir.join(format!("fake-inventory-{i}.toml"));
        std::fs::write(&path, text)?;
        self.set_agent_toml(
            i,
            &format!("fake_inventory_file = \"{}\"\n", path.display()),
        );
        Ok(())
    }

    /// Starts every node and agent that is not running.
    pub fn start_all(&mut self) -> Result<(), HarnessError> {
        self.start_stopped_nodes()?;
        for i in 1..=self.agents.len() as u32 {
            self.start_agent(i)?;
        }
        Ok(())
    }

    /// Node `id`'s config file.
    pub fn node_config(&self, id: u64) -> Result<&Path, HarnessError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.config_path.as_path())
            .ok_or(HarnessError::NoSuchNode(id))
    }

    fn log_file(&self, name: &str) -> Result<(Stdio, Stdio), HarnessError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(name))?;
        Ok((Stdio::from(file.try_clone()?), Stdio::from(file)))
    }

    /// A command for `program` as member `label` runs it: in that
    /// member's namespace when the cluster has them.
    fn member_command(&self, label: &str, program: &Path) -> Result<Command, HarnessError> {
        Ok(match &self.netlab {
            Some(lab) => {
                // `ip netns exec` enters the namespace and execs the
                // program: the pid (and the parent-death signal) carry over.
                let mut cmd = command(Path::new("ip"));
                cmd.args(["netns", "exec"])
                    .arg(lab.namespace(label)?)
                    .arg(program);
                cmd
            }
            None => command(program),
        })
    }

    pub fn start_node(&mut self, id: u64) -> Result<(), HarnessError> {
        if let Some(lab) = &self.compose {
            // Its command (the config file) was set when it was created.
            lab.start(&format!("n{id}"))?;
            self.node_mut(id)?.child = Some(Running::Container);
            return Ok(());
        }
        let (out, err) = self.log_file(&format!("node-{id}.log"))?;
        let mut cmd = self.member_command(&format!("n{id}"), &self.berthd)?;
        let node = self.node_mut(id)?;
        // berthd reads BERTH_* variables as config keys and refuses unknown
        // ones; the harness's caller sets its own (BERTH_BIN_DIR,
        // BERTH_ETCD, ...), and a node's config is its file alone.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("BERTH_") {
                cmd.env_remove(name);
            }
        }
        let child = cmd
            .arg("--config")
            .arg(&node.config_path)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        node.child = Some(Running::Process(child));
        Ok(())
    }

    /// Host name of agent `i`.
    pub fn agent_host(i: u32) -> String {
        format!("test-host-{i}")
    }

    /// kill -9 agent `i` (1-based). Its jobs' processes are left running,
    /// as they would be after a real agent crash.
    pub fn kill_agent(&mut self, i: u32) -> Result<(), HarnessError> {
        let slot = self
            .agents
            .get_mut((i as usize).wrapping_sub(1))
            .ok_or(HarnessError::NoSuchNode(i as u64))?;
        match slot.1.take() {
            Some(Running::Process(mut child)) => {
                child.kill()?;
                child.wait()?;
            }
            Some(Running::Container) => {
                let work = self.dir.join("work").display().to_string();
                let host = Self::agent_host(i);
                let lab = self
                    .compose
                    .as_ref()
                    .ok_or_else(|| HarnessError::Rpc("a container agent without its lab".into()))?;
                lab.kill_process(&format!("a{i}"), "berth-agent", &[&host, &work])?;
            }
            None => {}
        }
        Ok(())
    }

    /// Starts agent `i` (1-based) if it is not running.
    pub fn start_agent(&mut self, i: u32) -> Result<(), HarnessError> {
        let cpus = match self.agents.get((i as usize).wrapping_sub(1)) {
            Some((_, Some(_))) => return Ok(()),
            Some((cpus, None)) => *cpus,
            None => return Err(HarnessError::NoSuchNode(i as u64)),
        };
        let work = self.dir.join("work");
        std::fs::create_dir_all(&work)?;
        let mut args: Vec<String> = vec![
            "--server".into(),
            self.servers().join(","),
            "--host".into(),
            Self::agent_host(i),
            "--work-dir".into(),
            work.display().to_string(),
        ];
        // Records for re-adoption under the test's directory (each host in
        // its own subdirectory); test jobs run as the agent's user, root
        // included, since the submitters are not users of this machine.
        let step_ip = match (&self.netlab, &self.compose) {
            (Some(lab), _) => lab.ip(&format!("a{i}"))?,
            (_, Some(lab)) => lab.ip(&format!("a{i}"))?,
            (None, None) => "127.0.0.1".to_string(),
        };
        let mut agent_toml = format!(
            "state_dir = \"{}\"\njob_user = \"agent\"\nallow_root_jobs = true\n\
             step_listen = \"{step_ip}:0\"\n",
            self.dir.join("agent-state").display()
        );
        if cpus > 0 {
            agent_toml.push_str(&format!("cpus = {cpus}\n"));
        }
        let ca = self.dir.join("tls").join("ca.pem");
        if ca.exists() {
            agent_toml.push_str(&format!("tls_ca_file = \"{}\"\n", ca.display()));
            // The step service speaks TLS too, with the nodes' certificate
            // (made for 127.0.0.1, where the agents listen).
            let tls = self.dir.join("tls");
            agent_toml.push_str(&format!(
                "step_tls_cert_file = \"{}\"\nstep_tls_key_file = \"{}\"\n",
                tls.join("node.pem").display(),
                tls.join("node.key").display()
            ));
        }
        let secret = self.dir.join("cluster.secret");
        if secret.exists() {
            agent_toml.push_str(&format!("cluster_secret_file = \"{}\"\n", secret.display()));
        }
        if let Some(extra) = self.agent_toml.get(&i) {
            agent_toml.push_str(extra);
        }
        if !agent_toml.is_empty() {
            let config = self.dir.join(format!("agent-{i}.toml"));
            std::fs::write(&config, agent_toml)?;
            args.extend(["--config".into(), config.display().to_string()]);
        }
        let log = self.dir.join(format!("agent-{i}.log"));
        let running = match &self.compose {
            Some(lab) => {
                let label = format!("a{i}");
                if lab.pid(&label)?.is_none() {
                    lab.start(&label)?;
                }
                let mut argv = vec![crate::compose::AGENT_PROGRAM.to_string()];
                argv.extend(args);
                lab.exec_detached(&label, &argv, &log)?;
                Running::Container
            }
            None => {
                let (out, err) = self.log_file(&format!("agent-{i}.log"))?;
                let mut cmd = self.member_command(&format!("a{i}"), &self.agent_bin)?;
                let child = cmd
                    .args(&args)
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()?;
                Running::Process(child)
            }
        };
        if let Some(slot) = self.agents.get_mut((i as usize).wrapping_sub(1)) {
            slot.1 = Some(running);
        }
        Ok(())
    }

    fn node_mut(&mut self, id: u64) -> Result<&mut NodeProc, HarnessError> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or(HarnessError::NoSuchNode(id))
    }

    /// A token for `user` signed with the test cluster's token secret
    /// (`auth` clusters only), valid for `ttl_s` from now (0: already
    /// expired).
    pub fn token(&self, user: &str, admin: bool, ttl_s: u64) -> Result<String, HarnessError> {
        let text = std::fs::read(self.dir.join("token.secret"))?;
        let secret = berth_auth::secret_from_file_text(&text)
            .map_err(|e| HarnessError::Rpc(e.to_string()))?;
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        berth_auth::issue(
            &berth_auth::Claims {
                user: user.into(),
                roles: if admin { vec!["admin".into()] } else { vec![] },
                exp_s: if ttl_s == 0 {
                    now_s.saturating_sub(1)
                } else {
                    now_s + ttl_s
                },
            },
            &secret,
        )
        .map_err(|e| HarnessError::Rpc(e.to_string()))
    }

    /// Node `id`'s gRPC address.
    pub fn addr(&self, id: u64) -> Result<String, HarnessError> {
        self.node(id).map(|n| n.addr.clone())
    }

    /// Node `id`'s HTTP address (metrics, health, REST).
    pub fn http_addr(&self, id: u64) -> Result<String, HarnessError> {
        self.node(id).map(|n| n.metrics_addr.clone())
    }

    fn node(&self, id: u64) -> Result<&NodeProc, HarnessError> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or(HarnessError::NoSuchNode(id))
    }

    /// Node `id`'s data directory (its store).
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// gRPC addresses of every node, running or not.
    pub fn servers(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// The sum over every node that answers of the samples
    /// [`metric_sum`] adds up in its `/metrics`.
    pub fn metric_sum_all(&self, name: &str, labels: &[&str]) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| self.scrape_metrics(n.id).ok())
            .map(|text| metric_sum(&text, name, labels))
            .sum()
    }

    /// The text node `id` serves at `/metrics`.
    pub fn scrape_metrics(&self, id: u64) -> Result<String, HarnessError> {
        match self.http_get(id, "/metrics")? {
            (200, body) => Ok(body),
            (status, body) => Err(HarnessError::Rpc(format!(
                "bad metrics response {status}: {body:.200}"
            ))),
        }
    }

    /// `GET path` on node `id`'s HTTP listener (metrics, health): the
    /// status code and the body.
    pub fn http_get(&self, id: u64, path: &str) -> Result<(u16, String), HarnessError> {
        self.http_request(id, "GET", path, "")
    }

    /// `method path` with a JSON `body` (none when empty) on node `id`'s
    /// HTTP listener (metrics, health, the REST API): the status code and
    /// the body. A plain HTTP/1.0 exchange, so no HTTP client is needed.
    pub fn http_request(
        &self,
        id: u64,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<(u16, String), HarnessError> {
        self.http_request_with_headers(id, method, path, &[], body)
    }

    /// [`Self::http_request`] with extra headers (e.g. `Authorization`).
    pub fn http_request_with_headers(
        &self,
        id: u64,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<(u16, String), HarnessError> {
        use std::io::{Read, Write};
        let node = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or(HarnessError::NoSuchNode(id))?;
        let mut stream = std::net::TcpStream::connect(&node.metrics_addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut content: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        if !body.is_empty() {
            content.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        stream.write_all(
            format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n{content}\r\n{body}")
                .as_bytes(),
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| HarnessError::Rpc(format!("bad HTTP response: {response:.200}")))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| HarnessError::Rpc(format!("bad HTTP status line: {head:.200}")))?;
        Ok((status, body.to_string()))
    }

    /// Process id of node `id` while it runs (in a container: as this
    /// machine sees it).
    pub fn node_pid(&self, id: u64) -> Option<u32> {
        match self.nodes.iter().find(|n| n.id == id)?.child.as_ref()? {
            Running::Process(child) => Some(child.id()),
            Running::Container => self
                .compose
                .as_ref()?
                .node_pid(&format!("n{id}"))
                .ok()
                .flatten(),
        }
    }

    /// Addresses of the nodes currently running.
    pub fn live_servers(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.addr.clone())
            .collect()
    }

    /// Whether a node or agent can be cut off the network: every one runs
    /// in a namespace or container of its own.
    pub fn can_cut(&self) -> bool {
        self.netlab.is_some() || self.compose.is_some()
    }

    /// Cuts member `label` off, or (`heal`) puts it back.
    fn set_link(&self, label: &str, heal: bool) -> Result<(), HarnessError> {
        match (&self.netlab, &self.compose, heal) {
            (Some(lab), _, false) => Ok(lab.cut(label)?),
            (Some(lab), _, true) => Ok(lab.heal(label)?),
            (_, Some(lab), false) => Ok(lab.cut(label)?),
            (_, Some(lab), true) => Ok(lab.heal(label)?),
            _ => Err(HarnessError::Rpc(
                "this cluster runs on loopback: no link to cut".into(),
            )),
        }
    }

    /// Cuts node `id` off from every other process (nodes, agents, this
    /// one): its packets are lost until [`Self::heal_node`].
    pub fn cut_node(&self, id: u64) -> Result<(), HarnessError> {
        self.set_link(&format!("n{id}"), false)
    }

    pub fn heal_node(&self, id: u64) -> Result<(), HarnessError> {
        self.set_link(&format!("n{id}"), true)
    }

    /// Cuts agent `i` (1-based) off from every node; its jobs run on.
    pub fn cut_agent(&self, i: u32) -> Result<(), HarnessError> {
        self.set_link(&format!("a{i}"), false)
    }

    pub fn heal_agent(&self, i: u32) -> Result<(), HarnessError> {
        self.set_link(&format!("a{i}"), true)
    }

    /// kill -9 a node.
    pub fn kill_node(&mut self, id: u64) -> Result<(), HarnessError> {
        let node = self.node_mut(id)?;
        match node.child.take() {
            Some(Running::Process(mut child)) => {
                child.kill()?;
                child.wait()?;
            }
            Some(Running::Container) => {
                if let Some(lab) = &self.compose {
                    lab.kill(&format!("n{id}"))?;
                }
            }
            None => {}
        }
        Ok(())
    }

    /// kill -9 every node (agents keep running).
    pub fn kill_all_nodes(&mut self) -> Result<(), HarnessError> {
        let ids: Vec<u64> = self.nodes.iter().map(|n| n.id).collect();
        for id in ids {
            self.kill_node(id)?;
        }
        Ok(())
    }

    /// Starts every node that is not running.
    pub fn start_stopped_nodes(&mut self) -> Result<(), HarnessError> {
        let ids: Vec<u64> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_none())
            .map(|n| n.id)
            .collect();
        for id in ids {
            self.start_node(id)?;
        }
        Ok(())
    }

    /// Waits until a running node is leader and every running node agrees.
    /// Returns the leader's id.
    pub async fn wait_for_leader(&self, deadline: Duration) -> Result<u64, HarnessError> {
        let start = Instant::now();
        loop {
            if let Some(leader) = self.agreed_leader().await {
                return Ok(leader);
            }
            if start.elapsed() > deadline {
                return Err(HarnessError::Timeout {
                    what: "an agreed leader".into(),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every running node agrees on the leader and has applied
    /// the same log index: a steady state to start a drill from.
    pub async fn wait_caught_up(&self, deadline: Duration) -> Result<u64, HarnessError> {
        let start = Instant::now();
        loop {
            let mut applied = Vec::new();
            for node in self.nodes.iter().filter(|n| n.child.is_some()) {
                if let Ok(s) = status_of(&node.addr).await {
                    applied.push((s.leader_id, s.applied_index));
                }
            }
            let running = self.nodes.iter().filter(|n| n.child.is_some()).count();
            if applied.len() == running && applied.windows(2).all(|w| w[0] == w[1]) {
                if let Some(&(leader, _)) = applied.first() {
                    if leader != 0 {
                        return Ok(leader);
                    }
                }
            }
            if start.elapsed() > deadline {
                return Err(HarnessError::Timeout {
                    what: "every node caught up with the leader".into(),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn agreed_leader(&self) -> Option<u64> {
        let mut leader = None;
        for node in self.nodes.iter().filter(|n| n.child.is_some()) {
            let status = status_of(&node.addr).await.ok()?;
            if status.leader_id == 0 {
                return None;
            }
            let running = self
                .nodes
                .iter()
                .any(|n| n.id == status.leader_id && n.child.is_some());
            if !running || leader.is_some_and(|l| l != status.leader_id) {
                return None;
            }
            leader = Some(status.leader_id);
        }
        leader
    }

    /// Submits through any live node, retrying on another with the same
    /// request id (idempotent) every 100 ms while the cluster elects a
    /// leader, for at most `deadline`; then the last error.
    pub async fn submit_retrying(
        &self,
        request_id: &str,
        spec: JobSpec,
        deadline: Duration,
    ) -> Result<SubmitJobResponse, HarnessError> {
        let start = Instant::now();
        loop {
            let attempt = async {
                let mut client = self.client().await.map_err(|e| e.to_string())?;
                client
                    .submit_job(SubmitJobRequest {
                        request_id: request_id.into(),
                        spec: Some(spec.clone()),
                    })
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|e| e.to_string())
            };
            match attempt.await {
                Ok(answer) => return Ok(answer),
                Err(e) if start.elapsed() < deadline => {
                    eprintln!("submit retry: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    return Err(HarnessError::Rpc(format!(
                        "submit failed for {deadline:?}: {e}"
                    )))
                }
            }
        }
    }

    /// One job by id, read linearizably through any live node.
    pub async fn get_job(&self, job_id: u64) -> Result<berth_proto::api::Job, String> {
        let mut client = self.client().await.map_err(|e| e.to_string())?;
        client
            .get_job(berth_proto::api::GetJobRequest {
                job_id,
                stale: false,
            })
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }

    /// The registered hosts as the API lists them; none while no node
    /// answers (a test polls this until what it waits for shows).
    pub async fn hosts(&self) -> Vec<berth_proto::api::Host> {
        let Ok(mut client) = self.client().await else {
            return Vec::new();
        };
        client
            .list_hosts(berth_proto::api::ListHostsRequest {})
            .await
            .map(|r| r.into_inner().hosts)
            .unwrap_or_default()
    }

    /// The job's history so far, as (kind, message), oldest first (a test
    /// helper; panics when no node answers).
    pub async fn job_events(&self, job_id: u64) -> Vec<(String, String)> {
        let mut client = self.client().await.expect("a client of a live node");
        let mut stream = client
            .watch_job_events(berth_proto::api::WatchJobEventsRequest {
                job_id,
                after_seq: 0,
                no_follow: true,
            })
            .await
            .expect("the job's events")
            .into_inner();
        let mut out = Vec::new();
        while let Ok(Some(e)) = stream.message().await {
            out.push((e.kind, e.message));
        }
        out
    }

    /// Waits up to `deadline` until `done` holds for the job and returns
    /// it; panics naming `what` and the job's last state otherwise (a test
    /// helper).
    pub async fn wait_for_job(
        &self,
        job_id: u64,
        what: &str,
        deadline: Duration,
        done: impl Fn(&berth_proto::api::Job) -> bool,
    ) -> berth_proto::api::Job {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < deadline {
            match self.get_job(job_id).await {
                Ok(job) if done(&job) => return job,
                Ok(job) => {
                    last = format!(
                        "state {:?} reason {} exit {}",
                        berth_proto::api::JobState::try_from(job.state),
                        job.reason,
                        job.exit_code
                    )
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("job {job_id} did not reach {what} within {deadline:?}; last seen: {last}");
    }

    /// Starts the cluster as [`LocalCluster::start`] does and waits up to
    /// `deadline` for its first leader; panics when either fails (a test
    /// helper).
    pub async fn start_with_leader(
        dir: &Path,
        options: &ClusterOptions,
        deadline: Duration,
    ) -> LocalCluster {
        let cluster = LocalCluster::start(dir, options).expect("start the cluster");
        cluster
            .wait_for_leader(deadline)
            .await
            .expect("a first leader");
        cluster
    }

    /// The lines of `sacct -j JOB -P -n --format FORMAT` after the job's
    /// own: its steps (`N.batch`, `N.0`, ...).
    pub async fn sacct_steps(&self, job_id: u64, format: &str) -> Vec<String> {
        let text = self
            .berth_cli(&[
                "sacct",
                "-j",
                &job_id.to_string(),
                "-P",
                "-n",
                "--format",
                format,
            ])
            .await;
        text.lines().skip(1).map(str::to_string).collect()
    }

    /// Runs the `berth` CLI with `args` against the cluster and returns
    /// its stdout; panics with its output when it fails (a test helper).
    pub async fn berth_cli(&self, args: &[&str]) -> String {
        let servers = self.servers().join(",");
        let out = tokio::process::Command::new(tool("berth").expect("the berth binary"))
            .args(["--server", &servers])
            .args(args)
            .output()
            .await
            .expect("run berth");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "berth {args:?}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// A client for any running node that answers.
    pub async fn client(&self) -> Result<HarnessClient, HarnessError> {
        let mut last = String::from("no node is running");
        for addr in self.live_servers() {
            match connect(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e.to_string(),
            }
        }
        Err(HarnessError::Rpc(last))
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Containers go with their lab (`ComposeLab`'s drop), after this.
        let process = |r: &Option<Running>| matches!(r, Some(Running::Process(_)));
        for (_, agent) in self.agents.iter().filter(|(_, r)| process(r)) {
            if let Some(Running::Process(agent)) = agent {
                // SIGTERM first so the agent stops its jobs; then make sure.
                // SAFETY: kill(2) on a child we spawned.
                unsafe {
                    libc::kill(agent.id() as i32, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, agent) in self.agents.iter_mut() {
            if let Some(Running::Process(agent)) = agent {
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = agent.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = agent.kill();
                let _ = agent.wait();
            }
        }
        for node in self.nodes.iter_mut() {
            if let Some(Running::Process(mut child)) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The test clusters' cluster secret: every harness connection carries it,
/// as an operator's tools would (with auth off it is simply ignored).
const TEST_CLUSTER_SECRET: &str = "test-cluster-secret-0123456789abcdef";

/// A harness client: its calls carry the test cluster secret.
pub type HarnessClient = BerthApiClient<CredentialedChannel>;

pub async fn connect(addr: &str) -> Result<HarnessClient, HarnessError> {
    let channel = berth_auth::tls::endpoint(addr)
        .map_err(|e| HarnessError::Rpc(e.to_string()))?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| HarnessError::Rpc(format!("{addr}: {e}")))?;
    Ok(BerthApiClient::with_interceptor(
        channel,
        AttachCredentials::cluster_secret(Some(TEST_CLUSTER_SECRET.as_bytes())),
    ))
}

pub async fn status_of(addr: &str) -> Result<ClusterStatusResponse, HarnessError> {
    let mut client = connect(addr).await?;
    client
        .cluster_status(ClusterStatusRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|e| HarnessError::Rpc(e.to_string()))
}

/// A throwaway CA and a certificate for 127.0.0.1 signed by it, made with
/// the `openssl` command in `dir`; returns `dir`.
fn make_test_certificates(dir: &Path) -> Result<PathBuf, HarnessError> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    let steps: [&[&str]; 3] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=berth-test-ca",
        ],
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "node.key",
            "-out",
            "node.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "node.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "node.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()?;
        if !out.status.success() {
            return Err(HarnessError::Rpc(format!(
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
    }
    Ok(dir.to_path_buf())
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` once
/// `deadline` has passed (a test helper for conditions outside the
/// cluster: files a job writes, log lines).
pub async fn wait_until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < deadline,
            "{what} did not happen within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A file's text, or "" while it does not exist (a test helper).
pub fn read_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The sum of every sample of `name` in a `/metrics` text whose labels
/// hold each of `labels` (`name` ends with a space or `{` to match one
/// metric only).
pub fn metric_sum(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}
