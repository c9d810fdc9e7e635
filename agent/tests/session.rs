//! The whole agent against an in-process fake cluster: a follower that
//! redirects to a leader, which serves assignments and records reports.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_agent::config::Config;
use berth_proto::agent::agent_service_server::{AgentService, AgentServiceServer};
use berth_proto::agent::*;
use berth_proto::api::JobSpec;
use futures::{Stream, StreamExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tonic::{Request, Response, Status};

/// Longest any expected call may take to arrive.
const DEADLINE: Duration = Duration::from_secs(20);

/// A call the fake leader received.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Register(RegisterRequest),
    Heartbeat,
    Started(StartedReport),
    Exited(ExitedReport),
    StopAck(StopAck),
}

struct FakeNode {
    /// Some(addr): a follower pointing at the leader at addr.
    leader: Option<String>,
    calls: mpsc::Sender<Call>,
    assignments: watch::Receiver<AssignmentSet>,
    /// Answer the next heartbeat with known = false.
    forget_host: Arc<AtomicBool>,
    /// The Raft term a leader answers heartbeats with.
    term: u64,
}

impl FakeNode {
    /// The follower's answer to every call, None on the leader.
    fn not_leader(&self) -> Option<Status> {
        self.leader
            .as_ref()
            .map(|addr| Status::failed_precondition(format!("not leader; leader is {addr}")))
    }

    async fn record(&self, call: Call) -> Result<Response<ReportAck>, Status> {
        if let Some(status) = self.not_leader() {
            return Err(status);
        }
        let _ = self.calls.send(call).await;
        Ok(Response::new(ReportAck { accepted: true }))
    }
}

type SetStream = Pin<Box<dyn Stream<Item = Result<AssignmentSet, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for FakeNode {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        if let Some(status) = self.not_leader() {
            return Err(status);
        }
        let _ = self.calls.send(Call::Register(request.into_inner())).await;
        Ok(Response::new(RegisterResponse {
            heartbeat_interval_ms: 50,
            log_index: 1,
        }))
    }

    async fn heartbeat(
        &self,
        _request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        if let Some(status) = self.not_leader() {
            return Err(status);
        }
        let _ = self.calls.send(Call::Heartbeat).await;
        let known = !self.forget_host.swap(false, Ordering::SeqCst);
        Ok(Response::new(HeartbeatResponse {
            known,
            term: self.term,
        }))
    }

    type WatchAssignmentsStream = SetStream;

    async fn watch_assignments(
        &self,
        _request: Request<WatchAssignmentsRequest>,
    ) -> Result<Response<SetStream>, Status> {
        if let Some(status) = self.not_leader() {
            return Err(status);
        }
        let stream = tokio_stream::wrappers::WatchStream::new(self.assignments.clone()).map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_started(
        &self,
        request: Request<StartedReport>,
    ) -> Result<Response<ReportAck>, Status> {
        self.record(Call::Started(request.into_inner())).await
    }

    async fn report_exited(
        &self,
        request: Request<ExitedReport>,
    ) -> Result<Response<ReportAck>, Status> {
        self.record(Call::Exited(request.into_inner())).await
    }

    async fn ack_stop(&self, request: Request<StopAck>) -> Result<Response<ReportAck>, Status> {
        self.record(Call::StopAck(request.into_inner())).await
    }

    // No job of these tests runs srun.
    async fn report_step(
        &self,
        _: Request<berth_proto::agent::StepReport>,
    ) -> Result<Response<ReportAck>, Status> {
        Err(Status::unimplemented("no steps in these tests"))
    }
}

/// Serves `node` on a fresh loopback port; returns "127.0.0.1:PORT".
async fn serve(node: FakeNode) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(AgentServiceServer::new(node))
            .serve_with_incoming(incoming),
    );
    addr
}

/// Next call other than a heartbeat.
async fn next_report(calls: &mut mpsc::Receiver<Call>) -> Call {
    loop {
        match tokio::time::timeout(DEADLINE, calls.recv()).await {
            Ok(Some(Call::Heartbeat)) => continue,
            Ok(Some(call)) => return call,
            Ok(None) => panic!("fake leader gone"),
            Err(_) => panic!("no call within {DEADLINE:?}"),
        }
    }
}

fn assignment(job_id: u64, alloc_id: u64, command: &str) -> Assignment {
    Assignment {
        job_id,
        alloc_id,
        spec: Some(JobSpec {
            command: command.into(),
            ..Default::default()
        }),
        cpus: 1,
        hosts: vec!["t1".into()],
        stop_grace_s: 10,
        ..Default::default()
    }
}

fn agent_config(dir: &std::path::Path, servers: Vec<String>) -> Config {
    Config {
        host: "t1".into(),
        servers,
        work_dir: dir.to_path_buf(),
        heartbeat_interval_ms: 1000,
        stop_grace_s: 30,
        cpus: Some(2),
        memory_mb: Some(512),
        cluster_secret: None,
        tls_ca: None,
        step_listen: None,
        step_advertise: None,
        step_tls: None,
        tls_ca_file: None,
        inventory: berth_agent::inventory::settings::InventorySettings {
            cpus: Some(2),
            memory_mb: Some(512),
            ..Default::default()
        },
        jobs: berth_agent::config::JobSettings {
            state_dir: dir.join("state"),
            cgroup_parent: Some(std::path::PathBuf::new()),
            job_user: berth_agent::user::JobUser::Agent,
            allow_root_jobs: true,
            job_shim: Some(env!("CARGO_BIN_EXE_berth-job-shim").into()),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_leader_runs_assignments_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (calls_tx, mut calls) = mpsc::channel(1_000);
    let (set_tx, set_rx) = watch::channel(AssignmentSet {
        applied_index: 1,
        assignments: vec![],
        ..Default::default()
    });
    let forget_host = Arc::new(AtomicBool::new(false));
    let leader = serve(FakeNode {
        leader: None,
        calls: calls_tx.clone(),
        assignments: set_rx.clone(),
        forget_host: forget_host.clone(),
        term: 1,
    })
    .await;
    let follower = serve(FakeNode {
        leader: Some(leader.clone()),
        calls: calls_tx,
        assignments: set_rx,
        forget_host: forget_host.clone(),
        term: 0,
    })
    .await;

    // Only the follower is listed: the agent must follow the hint.
    let config = agent_config(dir.path(), vec![follower]);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let agent = tokio::spawn(berth_agent::agent::run(config, async {
        let _ = stop_rx.await;
    }));

    match next_report(&mut calls).await {
        Call::Register(r) => {
            assert_eq!(r.host, "t1");
            let inv = r.inventory.unwrap();
            assert_eq!((inv.cpus, inv.memory_mb), (2, 512));
            assert_eq!(r.agent_version, env!("CARGO_PKG_VERSION"));
            assert!(r.running.is_empty());
        }
        other => panic!("expected Register, got {other:?}"),
    }

    // A job that runs to completion.
    set_tx.send_replace(AssignmentSet {
        applied_index: 5,
        assignments: vec![assignment(1, 10, "echo hi > f; exit 3")],
        ..Default::default()
    });
    assert!(
        matches!(next_report(&mut calls).await, Call::Started(s) if s.alloc_id == 10 && s.host == "t1")
    );
    match next_report(&mut calls).await {
        Call::Exited(e) => {
            assert_eq!((e.alloc_id, e.exit_code, e.signal), (10, 3, 0));
            assert!(e.launch_error.is_empty());
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f")).unwrap(),
        "hi\n"
    );

    // A job the leader takes away again is stopped and the stop acknowledged.
    set_tx.send_replace(AssignmentSet {
        applied_index: 6,
        assignments: vec![assignment(1, 10, "exit 3"), assignment(2, 20, "sleep 100")],
        ..Default::default()
    });
    assert!(matches!(next_report(&mut calls).await, Call::Started(s) if s.alloc_id == 20));
    set_tx.send_replace(AssignmentSet {
        applied_index: 7,
        assignments: vec![],
        ..Default::default()
    });
    assert!(matches!(next_report(&mut calls).await,
        Call::Exited(e) if e.alloc_id == 20 && e.signal == libc::SIGTERM));
    assert!(matches!(next_report(&mut calls).await, Call::StopAck(s) if s.alloc_id == 20));

    // The cluster forgets the host: the agent registers again.
    forget_host.store(true, Ordering::SeqCst);
    assert!(matches!(next_report(&mut calls).await, Call::Register(_)));

    let _ = stop_tx.send(());
    tokio::time::timeout(DEADLINE, agent)
        .await
        .expect("agent stops")
        .unwrap()
        .unwrap();
}

/// After a leader change the agent meets a dead server, a follower still
/// naming the dead one, and a node that believes it leads in an older
/// term: it registers with the leader of the highest term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_with_the_leader_of_the_highest_term() {
    let dir = tempfile::tempdir().unwrap();
    let (_set_tx, set_rx) = watch::channel(AssignmentSet {
        applied_index: 1,
        ..Default::default()
    });
    // A port nobody listens on: the dead old leader.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let node = |leader: Option<String>, term: u64, calls: mpsc::Sender<Call>| FakeNode {
        leader,
        calls,
        assignments: set_rx.clone(),
        forget_host: Arc::new(AtomicBool::new(false)),
        term,
    };
    let (stale_tx, mut stale_calls) = mpsc::channel(1_000);
    let (real_tx, mut real_calls) = mpsc::channel(1_000);
    let (follower_tx, _follower_calls) = mpsc::channel(1_000);
    let stale = serve(node(None, 3, stale_tx)).await;
    let real = serve(node(None, 5, real_tx)).await;
    let follower = serve(node(Some(dead.clone()), 0, follower_tx)).await;

    let config = agent_config(dir.path(), vec![dead, follower, stale, real]);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let agent = tokio::spawn(berth_agent::agent::run(config, async {
        let _ = stop_rx.await;
    }));
    match next_report(&mut real_calls).await {
        Call::Register(r) => assert_eq!(r.host, "t1"),
        other => panic!("expected Register, got {other:?}"),
    }
    // The older term's node was asked (a probe) but never registered with.
    while let Ok(call) = stale_calls.try_recv() {
        assert_eq!(call, Call::Heartbeat, "the stale leader got {call:?}");
    }
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(DEADLINE, agent).await;
}
