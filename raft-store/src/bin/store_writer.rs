//! berth-store-writer: the process that `tests/kill_recovery.rs` kills with
//! SIGKILL. It runs a one-node Raft (openraft with Berth's real log and
//! state-machine storage) on the store at DIR and submits jobs without
//! pause, printing `ACK <request id> <job id>` for each submit that
//! `client_write` acknowledged, flushed before the next line. Whatever it
//! printed must survive a kill -9.
//!
//! Usage: berth-store-writer DIR TAG   (TAG makes request ids unique per run)

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_raft_store::{open, NodeId, Raft, TypeConfig};
use berth_scheduler::JobSpec;
use berth_state::{Command, Request, Response};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, SnapshotPolicy};

/// Submits in flight at once, so log appends and applies come in batches
/// of more than one entry.
const SUBMITS_IN_FLIGHT: u64 = 4;
/// A run stops by itself after this many submits (the test kills it long
/// before).
const SUBMITS_PER_RUN_MAX: u64 = 1_000_000;
/// A snapshot every this many entries, so kills also land in snapshot
/// builds and log purges.
const SNAPSHOT_EVERY_ENTRIES: u64 = 40;
/// How long the node may take to become leader of its one-node cluster.
const LEADER_WAIT_MS: u64 = 10_000;

/// Errors of this helper, as text: it is a test tool, and all it does with
/// an error is print it and exit non-zero.
#[derive(Debug)]
struct Error(String);

impl<E: std::fmt::Display> From<E> for Error {
    fn from(e: E) -> Self {
        Error(e.to_string())
    }
}

/// A one-node cluster sends nothing; any call is refused as unreachable.
struct NoNetwork;

impl RaftNetworkFactory<TypeConfig> for NoNetwork {
    type Network = NoNetwork;
    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoNetwork {
        NoNetwork
    }
}

fn unreachable<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other("one-node cluster")))
}

impl RaftNetwork<TypeConfig> for NoNetwork {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable())
    }
}

/// The job command that ties a job to the request that made it, so the
/// test can see that a job holds what its submit carried.
fn job_command(request_id: &str) -> String {
    format!("echo {request_id}")
}

async fn run(dir: std::path::PathBuf, tag: String) -> Result<(), Error> {
    let store = open(&dir)?;
    let config = Config {
        cluster_name: "berth-store-writer".into(),
        heartbeat_interval: 20,
        election_timeout_min: 60,
        election_timeout_max: 120,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES),
        max_in_snapshot_log_to_keep: 5,
        ..Default::default()
    }
    .validate()?;
    let raft = Raft::new(
        1,
        Arc::new(config),
        NoNetwork,
        store.log,
        store.state_machine,
    )
    .await?;
    if !raft.is_initialized().await? {
        raft.initialize(BTreeMap::from([(1, BasicNode::default())]))
            .await?;
    }
    raft.wait(Some(Duration::from_millis(LEADER_WAIT_MS)))
        .current_leader(1, "leader of the one-node cluster")
        .await?;
    println!("READY");

    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..SUBMITS_IN_FLIGHT {
        let raft = raft.clone();
        let next = next.clone();
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= SUBMITS_PER_RUN_MAX {
                    return Ok::<(), Error>(());
                }
                let request_id = format!("{tag}-{n}");
                let command = Command::SubmitJob {
                    request_id: request_id.clone(),
                    spec: JobSpec {
                        user: "writer".into(),
                        command: job_command(&request_id),
                        cpus: 1,
                        ..JobSpec::default()
                    },
                    now_ms: n,
                };
                let written = raft.client_write(Request::new(command)).await?;
                match written.data {
                    Response::Submitted { job_id, .. } => {
                        // One write per line, flushed: the test reads only
                        // whole lines, and each is an acknowledgement.
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "ACK {request_id} {job_id}")?;
                        out.flush()?;
                    }
                    other => return Err(Error(format!("submit {request_id} answered {other:?}"))),
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(tag)) = (args.next(), args.next()) else {
        eprintln!("usage: berth-store-writer DIR TAG");
        return ExitCode::from(2);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berth-store-writer: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(dir.into(), tag)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error(e)) => {
            eprintln!("berth-store-writer: error: {e}");
            ExitCode::FAILURE
        }
    }
}
