//! A cluster run with TLS on every listener and connection: the nodes
//! form a cluster over TLS, the agent registers and runs a job over TLS,
//! the CLI reaches it with the CA, and a plaintext client gets nowhere.
//! (Its own test binary: turning TLS on is a process-wide setting.)

use std::time::{Duration, Instant};

use berth_chaos::harness::{tool, ClusterOptions, LocalCluster};
use berth_proto::api::{GetJobRequest, JobSpec, JobState, SubmitJobRequest};

const DEADLINE: Duration = Duration::from_secs(60);

/// A one-CPU job of `true` submitted under `request_id`.
fn true_job(request_id: &str) -> SubmitJobRequest {
    SubmitJobRequest {
        request_id: request_id.into(),
        spec: Some(JobSpec {
            user: "tester".into(),
            command: "true".into(),
            cpus: 1,
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_connection_uses_tls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        tls: true,
        agents: 2,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start");
    cluster
        .wait_for_leader(DEADLINE)
        .await
        .expect("leader over TLS");
    let mut client = cluster.client().await.expect("TLS client");
    let job = client
        .submit_job(true_job("tls-1"))
        .await
        .expect("submit over TLS")
        .into_inner()
        .job_id;
    let start = Instant::now();
    loop {
        let state = client
            .get_job(GetJobRequest {
                job_id: job,
                stale: false,
            })
            .await
            .expect("get job")
            .into_inner()
            .state;
        if state == JobState::Completed as i32 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the agent never ran the job");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The CLI with the CA.
    let ca = tmp.path().join("tls").join("ca.pem");
    let servers = cluster.servers().join(",");
    let out = tokio::process::Command::new(tool("berth").expect("berth"))
        .args(["--server", &servers, "--ca"])
        .arg(&ca)
        .args(["job", &job.to_string()])
        .output()
        .await
        .expect("run berth");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Plaintext gets nowhere.
    let addr = cluster.servers()[0].clone();
    let plain = async {
        let mut c =
            berth_proto::api::berth_api_client::BerthApiClient::connect(format!("http://{addr}"))
                .await
                .map_err(|e| e.to_string())?;
        c.get_job(GetJobRequest {
            job_id: job,
            stale: true,
        })
        .await
        .map_err(|e| e.to_string())
    };
    let result = tokio::time::timeout(Duration::from_secs(10), plain).await;
    assert!(
        !matches!(result, Ok(Ok(_))),
        "a plaintext client was served: {result:?}"
    );

    // Nor is a connection whose first bytes are neither TLS nor HTTP/2
    // (here a plaintext HTTP/1.1 request): the node reads them as a TLS
    // handshake, which fails, and closes the connection unserved.
    let (closed, answer) = tokio::task::spawn_blocking(move || {
        use std::io::{ErrorKind, Read, Write};
        let mut tcp = std::net::TcpStream::connect(&addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: berth\r\n\r\n")
            .expect("write");
        let mut answer = Vec::new();
        // Closed by the node, or reset: either ends the read before the
        // timeout. At most a TLS alert comes before.
        let closed = match tcp.read_to_end(&mut answer) {
            Ok(_) => true,
            Err(err) => !matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        };
        (closed, answer)
    })
    .await
    .expect("the raw exchange");
    assert!(closed, "a TLS node kept a plaintext connection open");
    assert!(
        !answer.windows(5).any(|w| w == b"HTTP/"),
        "a TLS node answered plaintext: {answer:?}"
    );

    // srun across two hosts: the job's srun reaches the other host's step
    // service over TLS (`https://` in BERTH_STEP_AGENTS, verified with
    // the CA the agent hands the job as BERTH_CA).
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::os::unix::fs::symlink(tool("berth").expect("berth"), bin.join("srun")).expect("link");
    let script = format!(
        "case $BERTH_STEP_AGENTS in *https://*) ;; *) echo no TLS; exit 9;; esac; \
         {} sh -c 'echo task $SLURM_PROCID on $SLURMD_NODENAME'",
        bin.join("srun").display()
    );
    let out = tokio::process::Command::new(tool("berth").expect("berth"))
        .args(["--server", &servers, "--ca"])
        .arg(&ca)
        .args(["submit", "--parsable", "-N", "2", "-o", "steps.out", "-D"])
        .arg(tmp.path())
        .args(["--wrap", &script])
        .output()
        .await
        .expect("run berth");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("job id");
    let start = Instant::now();
    let job = loop {
        let job = client
            .get_job(GetJobRequest {
                job_id: id,
                stale: false,
            })
            .await
            .expect("get job")
            .into_inner();
        if job.state != JobState::Pending as i32 && job.state != JobState::Running as i32 {
            break job;
        }
        assert!(start.elapsed() < DEADLINE, "the 2-host job never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let output = std::fs::read_to_string(tmp.path().join("steps.out")).unwrap_or_default();
    assert_eq!(job.state, JobState::Completed as i32, "{job:?}\n{output}");
    let mut lines: Vec<&str> = output.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            format!("task 0 on {}", job.hosts[0]),
            format!("task 1 on {}", job.hosts[1])
        ],
        "{output}"
    );
}
