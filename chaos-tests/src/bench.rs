//! `berth-drill bench raft-writes`: acknowledged submits per second and
//! their latency on a 3-node Berth cluster, next to a 3-member etcd on the
//! same machine, at several client concurrencies, measured in one run so
//! the ratio is taken under the same load.
//!
//! Berth's unit of work is a real `SubmitJob` (a unique request id, a
//! realistic spec) acknowledged once committed and applied; etcd's is a
//! `Put` of a value as large as that submit's Raft log entry, under a
//! unique key. etcd is driven over its native gRPC API (`etcdserverpb.KV/
//! Put`, the call the `etcd-client` crate makes) with hand-declared prost
//! messages: the `etcd-client` crate needs a system `protoc` to build,
//! which this project does not require.
//!
//! Clients are spread round-robin over the three members of each system
//! (one HTTP/2 connection per member, shared by that member's clients), so
//! both pay their follower-to-leader forwarding; `--to leader` sends every
//! request to the leader instead. Levels alternate Berth then etcd, so a
//! change in the machine's load hits both.
//!
//! Both run as a site runs them unless `--insecure` is given: Berth with
//! its cluster secret, user authentication (each submit carries a user's
//! token, as `berth`/`sbatch` send it) and TLS on every port it serves
//! gRPC on; etcd with TLS on its client and peer ports (peers verify each
//! other's certificates), from the same throwaway CA, which the benchmark's
//! clients of both trust. `--insecure` runs both in plain text without
//! authentication, for comparison.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_auth::grpc::AttachCredentials;
use berth_proto::api::berth_api_client::BerthApiClient;
use berth_proto::api::SubmitJobRequest;
use tonic::transport::Channel;

use crate::harness::{self, ClusterOptions, HarnessClient, LocalCluster};

/// Members of each cluster.
const MEMBERS: usize = 3;
/// Longest wait for either cluster to elect a leader.
const LEADER_DEADLINE: Duration = Duration::from_secs(60);
/// A request slower than this counts as an error (and its worker moves on).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounds on what a run may ask for, so a typo cannot start thousands of
/// tasks or run for hours.
pub const CLIENTS_MAX: usize = 1_024;
pub const LEVEL_SECONDS_MAX: u64 = 600;
/// Latency samples kept per level; beyond this the run is far longer than
/// the bounds above allow at any rate this machine reaches.
const SAMPLES_PER_LEVEL_MAX: usize = 20_000_000;

/// Where the requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Round-robin over every member (followers forward to the leader).
    Any,
    /// Every request to the current leader.
    Leader,
}

#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub clients: Vec<usize>,
    pub seconds: u64,
    pub warmup_seconds: u64,
    pub target: Target,
    /// Work directory (None: a temp dir, removed at the end).
    pub dir: Option<PathBuf>,
    /// Run only Berth (no etcd), e.g. to profile it alone.
    pub berth_only: bool,
    /// Both systems in plain text and Berth without authentication, in
    /// place of the shipped configuration (TLS, cluster secret and user
    /// tokens on; etcd with TLS on its client and peer ports).
    pub insecure: bool,
}

/// The user whose token the benchmark's submits carry (no admin role).
const BENCH_USER: &str = "alice";
/// How long that token is valid: longer than any run the bounds allow.
const BENCH_TOKEN_TTL_S: u64 = 7 * 24 * 3_600;

/// One system at one concurrency.
#[derive(Debug, Clone, Default)]
pub struct LevelResult {
    /// Acknowledged operations that started after warm-up and ended inside
    /// the measured window.
    pub acked: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl LevelResult {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "ops_per_s": round1(self.ops_per_s),
            "p50_ms": round2(self.p50_ms),
            "p99_ms": round2(self.p99_ms),
            "max_ms": round2(self.max_ms),
            "acked": self.acked,
            "errors": self.errors,
        })
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The `p`-quantile (0..=1) of sorted samples, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The spec every benchmark submit carries: what a typical training job's
/// `sbatch` sends.
fn bench_spec() -> berth_scheduler::JobSpec {
    let env: BTreeMap<String, String> = [
        ("OMP_NUM_THREADS", "8"),
        ("PYTHONUNBUFFERED", "1"),
        ("WANDB_PROJECT", "resnet-sweep"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    berth_scheduler::JobSpec {
        name: "train-resnet50".into(),
        user: BENCH_USER.into(),
        command: "python train.py --arch resnet50 --epochs 90 --batch-size 256 \
                  --data /datasets/imagenet --out runs/$SLURM_JOB_ID"
            .into(),
        workdir: "/home/alice/projects/resnet".into(),
        env,
        cpus: 8,
        mem_mb: 32_768,
        nodes: 1,
        time_limit_s: 14_400,
        stdout_path: "logs/%x-%j.out".into(),
        comment: "lr sweep 3/12".into(),
        ..Default::default()
    }
}

/// Bytes of the Raft log payload one benchmark submit becomes (the
/// `Request` the leader proposes, as the log stores it and peers carry it:
/// MessagePack), with a request id as long as the ones the benchmark sends:
/// the size of etcd's value.
pub fn submit_entry_bytes() -> anyhow::Result<usize> {
    let command = berth_state::Command::SubmitJob {
        request_id: request_id(999, 999, 9_999_999),
        spec: bench_spec(),
        now_ms: 1_700_000_000_000,
    };
    Ok(berth_raft_store::codec::to_vec(&berth_state::Request::new(command))?.len())
}

fn request_id(level: usize, worker: usize, seq: u64) -> String {
    format!("bench-{}-{level}-{worker}-{seq}", std::process::id())
}

// etcd's v3 KV API, as much of it as the benchmark uses (field numbers from
// etcd's `etcdserverpb/rpc.proto`; prost skips fields not declared here).

#[derive(Clone, PartialEq, prost::Message)]
pub struct EtcdPutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EtcdResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EtcdPutResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<EtcdResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EtcdStatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EtcdStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<EtcdResponseHeader>,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(uint64, tag = "4")]
    pub leader: u64,
}

async fn etcd_unary<Req, Resp>(
    channel: Channel,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(request);
    request.set_timeout(REQUEST_TIMEOUT);
    grpc.unary(
        request,
        http::uri::PathAndQuery::from_static(path),
        tonic::codec::ProstCodec::<Req, Resp>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

async fn etcd_put(channel: Channel, key: Vec<u8>, value: Vec<u8>) -> Result<(), tonic::Status> {
    etcd_unary::<_, EtcdPutResponse>(
        channel,
        "/etcdserverpb.KV/Put",
        EtcdPutRequest { key, value },
    )
    .await
    .map(|_| ())
}

async fn etcd_status(channel: Channel) -> Result<EtcdStatusResponse, tonic::Status> {
    etcd_unary(
        channel,
        "/etcdserverpb.Maintenance/Status",
        EtcdStatusRequest {},
    )
    .await
}

/// The files etcd's members serve TLS with, on their client and their
/// peer ports: one certificate for 127.0.0.1 usable as server and as
/// client (a member presents it to the others it dials), and the CA that
/// signed it.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl EtcdTls {
    /// Makes etcd's certificate in `dir` with the `openssl` command,
    /// signed by the CA in `ca_dir` (`ca.pem`, `ca.key`: the harness's
    /// test CA under a TLS cluster's `tls/`), so one CA serves both
    /// systems and this process's clients trust both.
    pub fn make(dir: &Path, ca_dir: &Path) -> anyhow::Result<EtcdTls> {
        std::fs::create_dir_all(dir)?;
        let (ca, ca_key) = (ca_dir.join("ca.pem"), ca_dir.join("ca.key"));
        std::fs::write(
            dir.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )?;
        let ca_arg = ca.display().to_string();
        let ca_key_arg = ca_key.display().to_string();
        let steps: [&[&str]; 2] = [
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "etcd.key",
                "-out",
                "etcd.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
            &[
                "x509",
                "-req",
                "-in",
                "etcd.csr",
                "-CA",
                &ca_arg,
                "-CAkey",
                &ca_key_arg,
                "-CAcreateserial",
                "-CAserial",
                "etcd.srl",
                "-out",
                "etcd.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        ];
        for args in steps {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .context("running openssl")?;
            anyhow::ensure!(
                out.status.success(),
                "openssl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(EtcdTls {
            cert: dir.join("etcd.pem"),
            key: dir.join("etcd.key"),
            ca,
        })
    }

    /// etcd's flags for TLS on both ports: clients are not asked for a
    /// certificate (as Berth's are not), peers must present one. No
    /// `--trusted-ca-file`: etcd 3.4 requires client certificates whenever
    /// it is set, whatever `--client-cert-auth` says.
    fn flags(&self) -> Vec<std::ffi::OsString> {
        let mut flags: Vec<std::ffi::OsString> = Vec::new();
        for (flag, path) in [
            ("--cert-file", &self.cert),
            ("--key-file", &self.key),
            ("--peer-cert-file", &self.cert),
            ("--peer-key-file", &self.key),
            ("--peer-trusted-ca-file", &self.ca),
        ] {
            flags.push(flag.into());
            flags.push(path.into());
        }
        flags.push("--client-cert-auth=false".into());
        flags.push("--peer-client-cert-auth=true".into());
        flags
    }
}

/// A 3-member etcd on loopback, each member with its own data dir. Dropping
/// it kills (SIGKILL) every member it started, by PID.
pub struct EtcdCluster {
    members: Vec<(String, Child)>,
    pub version: String,
    /// Whether its client and peer ports speak TLS.
    pub tls: bool,
}

impl EtcdCluster {
    /// The etcd binary: `BERTH_ETCD`, else `/usr/bin/etcd` (Debian's
    /// etcd-server).
    fn binary() -> PathBuf {
        std::env::var_os("BERTH_ETCD")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"))
    }

    /// Starts the members under `dir`, with TLS on the client and peer
    /// ports when `tls` is given (this process's clients then need its CA:
    /// [`berth_auth::tls::set_client_ca`]).
    pub fn start(dir: &Path, tls: Option<&EtcdTls>) -> anyhow::Result<EtcdCluster> {
        let etcd = Self::binary();
        let version = std::process::Command::new(&etcd)
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", etcd.display()))?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("etcd (unknown version)")
            .to_string();
        std::fs::create_dir_all(dir)?;
        let mut ports = Vec::new();
        for _ in 0..MEMBERS {
            ports.push((harness::free_port()?, harness::free_port()?));
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let initial_cluster: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("e{i}={scheme}://127.0.0.1:{peer}"))
            .collect();
        let initial_cluster = initial_cluster.join(",");
        let mut cluster = EtcdCluster {
            members: Vec::new(),
            version,
            tls: tls.is_some(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let log = std::fs::File::create(dir.join(format!("etcd-{i}.log")))?;
            let child = harness::command(&etcd)
                .args(["--name", &format!("e{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("etcd-{i}")))
                .args([
                    "--listen-client-urls",
                    &format!("{scheme}://127.0.0.1:{client}"),
                    "--advertise-client-urls",
                    &format!("{scheme}://127.0.0.1:{client}"),
                    "--listen-peer-urls",
                    &format!("{scheme}://127.0.0.1:{peer}"),
                    "--initial-advertise-peer-urls",
                    &format!("{scheme}://127.0.0.1:{peer}"),
                    "--initial-cluster",
                    &initial_cluster,
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    "berth-bench",
                    "--logger",
                    "zap",
                    "--log-level",
                    "warn",
                ])
                .args(tls.map(EtcdTls::flags).unwrap_or_default())
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone()?))
                .stderr(Stdio::from(log))
                .spawn()
                .with_context(|| format!("starting {}", etcd.display()))?;
            cluster.members.push((format!("127.0.0.1:{client}"), child));
        }
        Ok(cluster)
    }

    /// One channel per member: TLS with this process's CA when the
    /// cluster runs TLS (the same client setting Berth's clients use).
    pub async fn channels(&self) -> anyhow::Result<Vec<Channel>> {
        anyhow::ensure!(
            self.tls == berth_auth::tls::client_tls_on(),
            "etcd's TLS ({}) and this process's client setting ({}) differ",
            self.tls,
            berth_auth::tls::client_tls_on()
        );
        let mut out = Vec::new();
        for (addr, _) in &self.members {
            let channel = berth_auth::tls::endpoint(addr)?
                .connect_timeout(Duration::from_millis(500))
                .connect()
                .await
                .with_context(|| format!("connecting to etcd at {addr}"))?;
            out.push(channel);
        }
        Ok(out)
    }

    /// Waits until every member names the same leader; returns the index of
    /// the leader's member.
    pub async fn wait_for_leader(&self, deadline: Duration) -> anyhow::Result<usize> {
        let start = Instant::now();
        loop {
            if let Ok(channels) = self.channels().await {
                let mut leaders = Vec::new();
                let mut leader_index = None;
                for (i, channel) in channels.into_iter().enumerate() {
                    if let Ok(status) = etcd_status(channel).await {
                        let member = status.header.map(|h| h.member_id).unwrap_or(0);
                        if status.leader != 0 && status.leader == member {
                            leader_index = Some(i);
                        }
                        leaders.push(status.leader);
                    }
                }
                let agreed = leaders.len() == MEMBERS
                    && leaders[0] != 0
                    && leaders.iter().all(|l| *l == leaders[0]);
                if let (true, Some(i)) = (agreed, leader_index) {
                    return Ok(i);
                }
            }
            if start.elapsed() > deadline {
                anyhow::bail!("etcd elected no agreed leader within {deadline:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.members {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What one worker saw in one level.
#[derive(Default)]
struct WorkerTally {
    samples_ms: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

/// Runs `clients` workers, each issuing `op(worker, seq)` back to back for
/// `warmup + measure`; counts the operations that started after the
/// warm-up and were acknowledged before the end.
async fn run_level<F, Fut>(
    clients: usize,
    warmup: Duration,
    measure: Duration,
    op: F,
) -> LevelResult
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let start = tokio::time::Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + measure;
    let per_worker_samples_max = SAMPLES_PER_LEVEL_MAX / clients.max(1);
    let mut tasks = Vec::new();
    for worker in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = WorkerTally::default();
            let mut seq = 0u64;
            loop {
                let sent = tokio::time::Instant::now();
                if sent >= end {
                    break;
                }
                seq += 1;
                let outcome = tokio::time::timeout(REQUEST_TIMEOUT, op(worker, seq)).await;
                let done = tokio::time::Instant::now();
                match outcome {
                    Ok(Ok(())) => {
                        if sent >= measure_from
                            && done <= end
                            && tally.samples_ms.len() < per_worker_samples_max
                        {
                            tally.samples_ms.push((done - sent).as_secs_f64() * 1_000.0);
                        }
                    }
                    Ok(Err(e)) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                    Err(_) => {
                        tally.errors += 1;
                        tally
                            .first_error
                            .get_or_insert(format!("no answer within {REQUEST_TIMEOUT:?}"));
                    }
                }
            }
            tally
        }));
    }
    let mut samples = Vec::new();
    let mut result = LevelResult::default();
    for task in tasks {
        match task.await {
            Ok(tally) => {
                samples.extend(tally.samples_ms);
                result.errors += tally.errors;
                if result.first_error.is_none() {
                    result.first_error = tally.first_error;
                }
            }
            Err(e) => {
                result.errors += 1;
                result.first_error.get_or_insert(e.to_string());
            }
        }
    }
    samples.sort_by(f64::total_cmp);
    result.acked = samples.len() as u64;
    result.ops_per_s = samples.len() as f64 / measure.as_secs_f64();
    result.p50_ms = percentile(&samples, 0.50);
    result.p99_ms = percentile(&samples, 0.99);
    result.max_ms = samples.last().copied().unwrap_or(0.0);
    result
}

/// The 1-minute load average, for the record next to the figures.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Berth's leader id, from any node's status.
async fn berth_leader(cluster: &LocalCluster) -> anyhow::Result<u64> {
    Ok(cluster.wait_for_leader(LEADER_DEADLINE).await?)
}

/// A Berth client as a user's is: TLS when this process has a CA (the
/// harness sets it for a TLS cluster), and the user's token on every call
/// when there is one; no cluster secret.
async fn user_client(addr: &str, token: Option<&str>) -> anyhow::Result<HarnessClient> {
    let channel = berth_auth::tls::endpoint(addr)?
        .connect_timeout(Duration::from_millis(500))
        .timeout(REQUEST_TIMEOUT)
        .connect()
        .await
        .with_context(|| format!("connecting to Berth at {addr}"))?;
    Ok(BerthApiClient::with_interceptor(
        channel,
        AttachCredentials::bearer(token),
    ))
}

/// How the benchmark runs each system, for the report.
fn configuration(insecure: bool) -> (&'static str, &'static str, &'static str) {
    if insecure {
        (
            "insecure",
            "plain text, no authentication",
            "plain text on client and peer ports",
        )
    } else {
        (
            "tls+auth",
            "TLS, cluster secret, user token on every submit",
            "TLS on client and peer ports (peer certificates verified), no etcd auth",
        )
    }
}

/// Runs the benchmark and prints each level; returns each level's JSON
/// object (the line printed after its row), for `--json` and `--plot`.
pub async fn raft_writes(options: &BenchOptions) -> anyhow::Result<Vec<serde_json::Value>> {
    anyhow::ensure!(!options.clients.is_empty(), "--clients names no level");
    anyhow::ensure!(
        options
            .clients
            .iter()
            .all(|c| (1..=CLIENTS_MAX).contains(c)),
        "each --clients level must be 1..={CLIENTS_MAX}"
    );
    anyhow::ensure!(
        (1..=LEVEL_SECONDS_MAX).contains(&options.seconds)
            && options.warmup_seconds <= LEVEL_SECONDS_MAX,
        "--seconds must be 1..={LEVEL_SECONDS_MAX} and --warmup-seconds at most that"
    );
    let tmp = tempfile::tempdir()?;
    let dir = options
        .dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let value_bytes = submit_entry_bytes()?;

    let secure = !options.insecure;
    let (config_name, berth_config, etcd_config) = configuration(options.insecure);
    let berth_options = ClusterOptions {
        agents: 0,
        auth: secure,
        tls: secure,
        ..ClusterOptions::default()
    };
    // With TLS, the harness makes the CA under `berth/tls/` and has this
    // process's clients trust it; etcd's certificate comes from it too.
    let berth_dir = dir.join("berth");
    let berth =
        LocalCluster::start(&berth_dir, &berth_options).context("starting the Berth cluster")?;
    anyhow::ensure!(
        berth_auth::tls::client_tls_on() == secure,
        "this process's client TLS setting was made before the benchmark's"
    );
    let etcd = if options.berth_only {
        None
    } else {
        let tls = if secure {
            Some(
                EtcdTls::make(&dir.join("etcd-tls"), &berth_dir.join("tls"))
                    .context("making etcd's certificate")?,
            )
        } else {
            None
        };
        Some(EtcdCluster::start(&dir.join("etcd"), tls.as_ref()).context("starting etcd")?)
    };
    let berth_leader_id = berth_leader(&berth).await?;
    berth.wait_caught_up(LEADER_DEADLINE).await?;
    // A user's token (no admin role) for the user the submits name.
    let token = if secure {
        Some(berth.token(BENCH_USER, false, BENCH_TOKEN_TTL_S)?)
    } else {
        None
    };
    let mut berth_clients: Vec<HarnessClient> = Vec::new();
    for id in 1..=MEMBERS as u64 {
        if options.target == Target::Leader && id != berth_leader_id {
            continue;
        }
        berth_clients.push(user_client(&berth.addr(id)?, token.as_deref()).await?);
    }
    let mut etcd_channels = Vec::new();
    if let Some(etcd) = &etcd {
        let leader = etcd.wait_for_leader(LEADER_DEADLINE).await?;
        etcd_channels = etcd.channels().await?;
        if options.target == Target::Leader {
            etcd_channels = vec![etcd_channels.swap_remove(leader)];
        }
    }
    println!(
        "raft-writes [{config_name}]: 3-node Berth (leader node {berth_leader_id}; \
         {berth_config}) vs 3-member {} ({etcd_config}); \
         {}s per level after {}s warm-up; requests to {:?}; etcd value {value_bytes} bytes \
         (a submit's log entry); work dir {}",
        etcd.as_ref()
            .map_or("etcd (skipped)", |e| e.version.as_str()),
        options.seconds,
        options.warmup_seconds,
        options.target,
        dir.display()
    );
    println!(
        "{:>7} | {:>10} {:>8} {:>8} {:>6} | {:>10} {:>8} {:>8} {:>6} | {:>6} | {:>5}",
        "clients",
        "berth/s",
        "p50 ms",
        "p99 ms",
        "errs",
        "etcd/s",
        "p50 ms",
        "p99 ms",
        "errs",
        "ratio",
        "load"
    );
    let warmup = Duration::from_secs(options.warmup_seconds);
    let measure = Duration::from_secs(options.seconds);
    let spec = berth_node::convert::spec_to_proto(&bench_spec());
    let value = vec![b'x'; value_bytes];
    let mut results = Vec::with_capacity(options.clients.len());
    for (level, &clients) in options.clients.iter().enumerate() {
        let load_before = load_average();
        let conns = berth_clients.clone();
        let spec = spec.clone();
        let berth_result = run_level(clients, warmup, measure, move |worker, seq| {
            let mut client = conns[worker % conns.len()].clone();
            let request = SubmitJobRequest {
                request_id: request_id(level, worker, seq),
                spec: Some(spec.clone()),
            };
            async move {
                client
                    .submit_job(request)
                    .await
                    .map(|_| ())
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
            }
        })
        .await;
        let etcd_result = if etcd_channels.is_empty() {
            LevelResult::default()
        } else {
            let channels = etcd_channels.clone();
            let value = value.clone();
            run_level(clients, warmup, measure, move |worker, seq| {
                let channel = channels[worker % channels.len()].clone();
                let key = format!("bench/{level}/{worker}/{seq}").into_bytes();
                let value = value.clone();
                async move {
                    etcd_put(channel, key, value)
                        .await
                        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
                }
            })
            .await
        };
        let ratio = if etcd_result.ops_per_s > 0.0 {
            berth_result.ops_per_s / etcd_result.ops_per_s
        } else {
            0.0
        };
        println!(
            "{clients:>7} | {:>10.1} {:>8.2} {:>8.2} {:>6} | {:>10.1} {:>8.2} {:>8.2} {:>6} | {:>5.2}x | {:>5}",
            berth_result.ops_per_s,
            berth_result.p50_ms,
            berth_result.p99_ms,
            berth_result.errors,
            etcd_result.ops_per_s,
            etcd_result.p50_ms,
            etcd_result.p99_ms,
            etcd_result.errors,
            ratio,
            load_before
        );
        for (system, r) in [("berth", &berth_result), ("etcd", &etcd_result)] {
            if let Some(e) = &r.first_error {
                println!("  {system}: {} errors, first: {e}", r.errors);
            }
        }
        let result = serde_json::json!({
                "bench": "raft-writes",
                "clients": clients,
                "seconds": options.seconds,
                "warmup_seconds": options.warmup_seconds,
                "target": format!("{:?}", options.target).to_lowercase(),
                "config": config_name,
                "value_bytes": value_bytes,
                "berth": berth_result.json(),
                "etcd": etcd_result.json(),
                "ratio_ops": round2(ratio),
                "load_avg_1m_before": load_before,
        });
        println!("{result}");
        results.push(result);
    }
    // Stop etcd first (SIGKILL by PID), then Berth (the harness's Drop).
    drop(etcd);
    drop(berth);
    Ok(results)
}

/// What `bench raft-writes --json` writes: every level's object under
/// `levels`.
pub fn raft_writes_json(levels: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({ "bench": "raft-writes", "levels": levels })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.50), 50.0);
        assert_eq!(percentile(&samples, 0.99), 99.0);
        assert_eq!(percentile(&samples, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.99), 0.0);
    }

    #[test]
    fn etcd_tls_verifies_peers_and_asks_clients_for_no_certificate() {
        let tls = EtcdTls {
            cert: "c.pem".into(),
            key: "c.key".into(),
            ca: "ca.pem".into(),
        };
        let flags: Vec<String> = tls
            .flags()
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        for pair in [
            ["--cert-file", "c.pem"],
            ["--peer-key-file", "c.key"],
            ["--peer-trusted-ca-file", "ca.pem"],
        ] {
            assert!(flags.windows(2).any(|w| w == pair), "{pair:?} in {flags:?}");
        }
        assert!(flags.contains(&"--peer-client-cert-auth=true".to_string()));
        assert!(flags.contains(&"--client-cert-auth=false".to_string()));
        // etcd 3.4 would require client certificates with it.
        assert!(!flags.contains(&"--trusted-ca-file".to_string()));
    }

    #[test]
    fn etcd_value_is_a_submit_entry() {
        let bytes = submit_entry_bytes().unwrap();
        assert!((200..2_000).contains(&bytes), "{bytes} bytes");
    }
}
