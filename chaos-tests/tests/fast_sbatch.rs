//! The small `sbatch` binary against a real 3-node cluster with tokens:
//! it submits what it knows itself, moving past a dead server, and carries
//! the user's token; it hands other command lines to `berth`, whose job is
//! the same one; and it says, in one line, why a submit failed. Every wait
//! is a condition with a deadline.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use berth_chaos::harness::{self, ClusterOptions, LocalCluster};
use berth_proto::api::{Job, JobState};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// A port nothing listens on: connecting there is refused at once.
const DEAD_SERVER: &str = "127.0.0.1:1";

/// Runs `program` (as `sbatch`) with only the environment given here.
async fn run(
    program: &Path,
    servers: &str,
    token: Option<&str>,
    config: &Path,
    args: &[&str],
) -> Output {
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("USER", "alice")
        .env("BERTH_SERVER", servers)
        .env("BERTH_CONFIG", config)
        .current_dir(config.parent().expect("config dir"));
    if let Some(token) = token {
        command.env("BERTH_TOKEN", token);
    }
    match tokio::time::timeout(RUN_DEADLINE, command.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(err)) => panic!("cannot run {}: {err}", program.display()),
        Err(_) => panic!("{} {args:?} ran past {RUN_DEADLINE:?}", program.display()),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The job id in `Submitted batch job N`, failing with the output if the
/// process did not succeed.
fn submitted(out: &Output) -> u64 {
    assert!(
        out.status.success(),
        "failed: {} {}",
        stdout(out),
        stderr(out)
    );
    stdout(out)
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {:?}", stdout(out)))
}

async fn job(cluster: &LocalCluster, job_id: u64) -> Job {
    cluster
        .get_job(job_id)
        .await
        .unwrap_or_else(|e| panic!("job {job_id}: {e}"))
}

/// A 3-node cluster under `dir` with no agents, tokens required when
/// `auth`, once it has a leader.
async fn cluster_without_agents(dir: &Path, auth: bool) -> LocalCluster {
    let options = ClusterOptions {
        agents: 0,
        auth,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start(&dir.join("cluster"), &options).expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_small_sbatch_submits_itself_or_hands_over_to_berth() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = cluster_without_agents(tmp.path(), true).await;
    let token = cluster.token("alice", false, 3_600).expect("token");
    let config = tmp.path().join("client.toml");
    std::fs::write(&config, "").expect("empty client config");
    let sbatch = harness::tool("sbatch").expect("the sbatch binary");
    let live = cluster.servers().join(",");
    // A dead server first: the submit moves on to the next one.
    let servers = format!("{DEAD_SERVER},{live}");
    let token = Some(token.as_str());

    // Submitted by the small binary itself.
    let args = [
        "-H",
        "-J",
        "fast",
        "--comment",
        "by sbatch",
        "-t",
        "10",
        "--wrap",
        "echo hi",
    ];
    let fast = submitted(&run(&sbatch, &servers, token, &config, &args).await);
    let made = job(&cluster, fast).await;
    let spec = made.spec.clone().expect("a spec");
    assert_eq!(made.state, JobState::Pending as i32);
    assert_eq!(made.reason, "JobHeldUser");
    assert_eq!(
        (
            spec.name.as_str(),
            spec.user.as_str(),
            spec.command.as_str()
        ),
        ("fast", "alice", "echo hi")
    );
    assert_eq!(
        (spec.comment.as_str(), spec.time_limit_s),
        ("by sbatch", 600)
    );

    // The same command line through `berth` makes the same job.
    let berth = harness::tool("berth").expect("the berth binary");
    let mut berth_args = vec!["submit"];
    berth_args.extend(args);
    let by_berth = submitted(&run(&berth, &servers, token, &config, &berth_args).await);
    let other = job(&cluster, by_berth).await.spec.expect("a spec");
    assert_eq!(
        other, spec,
        "berth made another job of the same command line"
    );

    // `--parsable` prints the id alone.
    let out = run(
        &sbatch,
        &servers,
        token,
        &config,
        &["--parsable", "-H", "--wrap", "true"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().expect("just the id");
    assert_eq!(job(&cluster, id).await.reason, "JobHeldUser");

    // An option the small binary does not know: `berth` submits it.
    let out = run(
        &sbatch,
        &servers,
        token,
        &config,
        &["-N", "1", "-c", "2", "-H", "--wrap", "true"],
    )
    .await;
    let handed = submitted(&out);
    assert_eq!(job(&cluster, handed).await.spec.expect("a spec").cpus, 2);
    // ...and words what it refuses, as sbatch.
    let out = run(
        &sbatch,
        &servers,
        token,
        &config,
        &["-N", "0", "--wrap", "true"],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("sbatch: error: invalid node count"),
        "{}",
        stderr(&out)
    );

    // Without a token the cluster refuses, and the refusal is one line.
    let out = run(&sbatch, &servers, None, &config, &["-H", "--wrap", "true"]).await;
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.starts_with("sbatch: error: ") && said.contains("Unauthenticated"),
        "{said}"
    );
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");

    // The small binary's submits went over the one-shot protocol: the
    // held job, the `--parsable` one and the refused one.
    let one_shot =
        cluster.metric_sum_all("berth_one_shot_submits_total{", &["outcome=\"answered\""]);
    assert_eq!(one_shot, 3, "one-shot submits answered by the nodes");

    // No server answers: it says which it tried.
    let out = run(
        &sbatch,
        DEAD_SERVER,
        token,
        &config,
        &["-H", "--wrap", "true"],
    )
    .await;
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out).trim_end(),
        format!("sbatch: error: no Berth server answered (tried {DEAD_SERVER})")
    );
}

/// Writes `request` to a new connection to `addr` and reads until the
/// node closes it.
fn exchange(addr: &str, request: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(RUN_DEADLINE)).expect("timeout");
    tcp.write_all(request).expect("write");
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).expect("read to the close");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_one_shot_request_is_answered_with_why_and_submits_nothing() {
    use berth_proto::submit_wire;
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = cluster_without_agents(tmp.path(), false).await;
    let addr = cluster.servers()[0].clone();

    // A body that is not a SubmitJobRequest.
    let request = submit_wire::encode_request(None, b"\xff\xff\xff").expect("encode");
    let answer = exchange(&addr, &request);
    let (code, message) = submit_wire::decode_answer(&answer).expect("an answer");
    let message = String::from_utf8_lossy(message);
    assert_eq!(code, tonic::Code::InvalidArgument as u8, "{message}");
    assert!(message.contains("not a SubmitJobRequest"), "{message}");

    // A head announcing more than the bound: refused before it is read.
    let mut head = submit_wire::encode_request(None, b"").expect("encode");
    head[10..14].copy_from_slice(&u32::MAX.to_be_bytes());
    let answer = exchange(&addr, &head);
    let (code, message) = submit_wire::decode_answer(&answer).expect("an answer");
    assert_eq!(code, tonic::Code::InvalidArgument as u8);
    assert!(String::from_utf8_lossy(message).contains("more than"));

    // Another version of the protocol is named, not guessed at.
    let mut other = submit_wire::encode_request(None, b"").expect("encode");
    other[7] = b'9';
    let answer = exchange(&addr, &other);
    let (code, message) = submit_wire::decode_answer(&answer).expect("an answer");
    assert_eq!(code, tonic::Code::InvalidArgument as u8);
    assert!(String::from_utf8_lossy(message).contains("not the one-shot submit protocol"));

    // None of them made a job, and the port still speaks gRPC.
    let jobs = cluster
        .client()
        .await
        .expect("a gRPC client")
        .list_jobs(berth_proto::api::ListJobsRequest::default())
        .await
        .expect("list over gRPC")
        .into_inner()
        .jobs;
    assert!(jobs.is_empty(), "{jobs:?}");
    assert_eq!(
        cluster.metric_sum_all("berth_one_shot_submits_total{", &["outcome=\"malformed\""]),
        3
    );
}
