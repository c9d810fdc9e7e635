//! Backup and restore end to end: a real 3-node cluster runs jobs, `berth
//! admin backup` (sent to a follower, which passes it to the leader) writes
//! the backup file, `berthd store restore` makes node 1 of a fresh 3-node
//! cluster from it, and the fresh cluster (nodes 2 and 3 start empty) holds
//! the same jobs on every node, keeps the id counter, request ids, QOS and
//! accounts, and runs new work. Every wait is a condition with a deadline.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use berth_chaos::harness::{connect, status_of, tool, ClusterOptions, LocalCluster};
use berth_proto::api::{
    Account, CancelJobRequest, GetJobRequest, JobSpec, JobState, ListAccountsRequest,
    ListJobsRequest, ListQosRequest, Qos,
};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const JOB_DEADLINE: Duration = Duration::from_secs(60);
/// A CLI call (backup, restore, check) must finish within this.
const TOOL_DEADLINE: Duration = Duration::from_secs(60);

async fn run_tool(name: &str, args: &[&str]) -> Output {
    let path = tool(name).expect("binary");
    let child = tokio::process::Command::new(&path)
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(TOOL_DEADLINE, child)
        .await
        .unwrap_or_else(|_| panic!("{name} {args:?} ran past {TOOL_DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn submit(cluster: &LocalCluster, request_id: &str, command: &str) -> (u64, bool) {
    let spec = JobSpec {
        name: "backup".into(),
        user: "tester".into(),
        command: command.into(),
        cpus: 1,
        ..Default::default()
    };
    match cluster
        .submit_retrying(request_id, spec, JOB_DEADLINE)
        .await
    {
        Ok(answer) => (answer.job_id, answer.duplicate),
        Err(e) => panic!("{e}"),
    }
}

async fn wait_for_state(cluster: &LocalCluster, job_id: u64, want: JobState) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < JOB_DEADLINE {
        if let Ok(mut client) = cluster.client().await {
            match client
                .get_job(GetJobRequest {
                    job_id,
                    stale: false,
                })
                .await
            {
                Ok(job) if job.get_ref().state == want as i32 => return,
                Ok(job) => last = format!("{:?}", JobState::try_from(job.get_ref().state)),
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {job_id} did not reach {want:?} within {JOB_DEADLINE:?}; last seen: {last}");
}

/// Every job node `addr` has applied, read from its own state (stale), as
/// (id, state, command).
async fn jobs_on(addr: &str) -> Result<Vec<(u64, i32, String)>, String> {
    let mut client = connect(addr).await.map_err(|e| e.to_string())?;
    let states = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
    ];
    let jobs = client
        .list_jobs(ListJobsRequest {
            states: states.iter().map(|s| *s as i32).collect(),
            stale: true,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner()
        .jobs;
    Ok(jobs
        .into_iter()
        .map(|j| {
            (
                j.job_id,
                j.state,
                j.spec.map(|s| s.command).unwrap_or_default(),
            )
        })
        .collect())
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restores_into_a_fresh_three_node_cluster() {
    let tmp = tempfile::tempdir().expect("tempdir");

    // ---- the old cluster: jobs in three final states ----------------------
    let old = LocalCluster::start(&tmp.path().join("old"), &ClusterOptions::default())
        .expect("start old cluster");
    let leader = old
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("old leader");
    let (ok, _) = submit(&old, "backup-ok", "exit 0").await;
    let (bad, _) = submit(&old, "backup-bad", "exit 3").await;
    let (long, _) = submit(&old, "backup-long", "sleep 60").await;
    wait_for_state(&old, ok, JobState::Completed).await;
    wait_for_state(&old, bad, JobState::Failed).await;
    wait_for_state(&old, long, JobState::Running).await;
    let mut client = old.client().await.expect("client");
    client
        .cancel_job(CancelJobRequest {
            job_id: long,
            only_task: false,
        })
        .await
        .expect("cancel");
    wait_for_state(&old, long, JobState::Cancelled).await;
    // Policy objects are replicated state too.
    client
        .upsert_qos(Qos {
            name: "backup-qos".into(),
            priority: 7,
            ..Default::default()
        })
        .await
        .expect("upsert qos");
    // With policy defined, submits need an account: tester gets one.
    client
        .upsert_account(Account {
            name: "backup-acct".into(),
            users: vec!["tester".into()],
            default_qos: "backup-qos".into(),
            shares: 1,
            ..Default::default()
        })
        .await
        .expect("upsert account");
    old.wait_caught_up(LEADER_DEADLINE)
        .await
        .expect("old cluster caught up");
    let servers = old.servers();
    let leader_addr = servers[(leader - 1) as usize].clone();
    let before = jobs_on(&leader_addr).await.expect("jobs before");
    assert_eq!(before.len(), 3, "{before:?}");
    let next_before = status_of(&leader_addr).await.expect("status").next_job_id;

    // ---- backup through a follower -----------------------------------------
    let follower_first: Vec<String> = servers
        .iter()
        .filter(|a| **a != leader_addr)
        .chain(std::iter::once(&leader_addr))
        .cloned()
        .collect();
    let file = tmp.path().join("berth.backup");
    let started = Instant::now();
    let out = run_tool(
        "berth",
        &[
            "--server",
            &follower_first.join(","),
            "admin",
            "backup",
            path_str(&file),
        ],
    )
    .await;
    let took = started.elapsed();
    assert!(out.status.success(), "backup: {}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("Backup written to"), "{said}");
    assert!(said.contains("3 jobs, 1 hosts"), "{said}");
    assert!(
        said.contains(&format!("via {}", follower_first[0])),
        "{said}"
    );
    let size = std::fs::metadata(&file).expect("backup file").len();
    assert!(said.contains(&format!("{size} bytes")), "{said}");
    assert!(!tmp.path().join("berth.backup.tmp").exists());
    eprintln!("backup of 3 jobs: {size} bytes in {took:?}\n{said}");
    drop(old);

    // ---- restore into node 1 of a fresh cluster; 2 and 3 start empty -------
    let mut fresh = LocalCluster::configure(&tmp.path().join("new"), &ClusterOptions::default())
        .expect("configure fresh cluster");
    let config1 = fresh.node_config(1).expect("config").to_path_buf();
    let data1 = tmp.path().join("new").join("node-1");

    // Damaged files are refused by name, and nothing is created.
    let truncated = tmp.path().join("truncated.backup");
    let bytes = std::fs::read(&file).expect("read backup");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).expect("write");
    let out = run_tool(
        "berthd",
        &[
            "store",
            "restore",
            "--from",
            path_str(&truncated),
            "--config",
            path_str(&config1),
        ],
    )
    .await;
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("truncated.backup") && err.contains("is truncated"),
        "{err}"
    );
    assert!(
        !data1.exists(),
        "a failed restore created {}",
        data1.display()
    );

    let out = run_tool(
        "berthd",
        &[
            "store",
            "restore",
            "--from",
            path_str(&file),
            "--config",
            path_str(&config1),
        ],
    )
    .await;
    assert!(out.status.success(), "restore: {}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("jobs           3"), "{said}");
    assert!(said.contains("voters         1, 2, 3"), "{said}");

    // A second restore into the same directory is refused.
    let out = run_tool(
        "berthd",
        &[
            "store",
            "restore",
            "--from",
            path_str(&file),
            "--config",
            path_str(&config1),
        ],
    )
    .await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("it is not empty"),
        "{}",
        text(&out)
    );
    let out = run_tool("berthd", &["store", "check", path_str(&data1)]).await;
    assert!(out.status.success(), "check: {}", text(&out));

    fresh.start_all().expect("start fresh cluster");
    fresh
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("fresh leader");
    fresh
        .wait_caught_up(LEADER_DEADLINE)
        .await
        .expect("fresh cluster caught up");

    // Every node, the empty ones included, holds the backed-up jobs and
    // the id counter.
    for addr in fresh.servers() {
        let start = Instant::now();
        let mut last = Err(String::from("not asked yet"));
        while start.elapsed() < LEADER_DEADLINE {
            last = jobs_on(&addr).await;
            if last.as_ref().is_ok_and(|jobs| *jobs == before) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last, Ok(before.clone()), "jobs on {addr}");
        let status = status_of(&addr).await.expect("status");
        assert_eq!(status.next_job_id, next_before, "id counter on {addr}");
    }

    let qos = fresh
        .client()
        .await
        .expect("client")
        .list_qos(ListQosRequest {})
        .await
        .expect("list qos")
        .into_inner()
        .qos;
    assert!(
        qos.iter()
            .any(|q| q.name == "backup-qos" && q.priority == 7),
        "{qos:?}"
    );
    let accounts = fresh
        .client()
        .await
        .expect("client")
        .list_accounts(ListAccountsRequest {})
        .await
        .expect("list accounts")
        .into_inner()
        .accounts;
    assert!(
        accounts
            .iter()
            .any(|a| a.name == "backup-acct" && a.users == ["tester"]),
        "{accounts:?}"
    );

    // Request ids survived: a retried submit is recognised; a new one takes
    // the next id and runs on the fresh cluster's agent.
    assert_eq!(submit(&fresh, "backup-ok", "exit 0").await, (ok, true));
    // The restored state already knows test-host-1. The fresh agent's first
    // registration ends whatever the state placed on it before as lost (an
    // agent restart, invariant 6), so new work is submitted once it is in.
    let agent_log = fresh.dir.join("agent-1.log");
    let start = Instant::now();
    while !std::fs::read_to_string(&agent_log).is_ok_and(|log| log.contains("registered")) {
        assert!(
            start.elapsed() < LEADER_DEADLINE,
            "the fresh agent did not register within {LEADER_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (after, duplicate) = submit(&fresh, "after-restore", "exit 0").await;
    assert!(!duplicate);
    assert_eq!(after, next_before);
    wait_for_state(&fresh, after, JobState::Completed).await;
}
