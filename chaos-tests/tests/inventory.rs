//! Agent inventory on a real cluster: agents with fake-inventory files.
//! A host whose declared GPUs discovery contradicts is drained with the
//! reason, and a GPU job is not placed there; a GPU host that agrees
//! takes the job; a GPU that disappears later drains that host too.
//! Every wait is a condition with a deadline.

use std::time::{Duration, Instant};

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::{
    ExplainJobRequest, GetJobRequest, Host, JobSpec, JobState, ListHostsRequest, SubmitJobRequest,
};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

fn fake_gpus(count: u32, gpu_type: &str) -> String {
    (0..count)
        .map(|i| format!("[[gpus]]\nindex = {i}\ntype = \"{gpu_type}\"\nuuid = \"GPU-test-{i}\"\n"))
        .collect()
}

/// Agent config: a fake-inventory file with `found` GPUs, `declared` GPUs
/// declared, re-discovery every second.
fn agent_toml(
    dir: &std::path::Path,
    i: u32,
    found: u32,
    declared: u32,
) -> (String, std::path::PathBuf) {
    let fake = dir.join(format!("fake-{i}.toml"));
    std::fs::write(&fake, fake_gpus(found, "h100")).expect("write fake inventory");
    let toml = format!(
        "fake_inventory_file = \"{}\"\nrediscover_interval_s = 1\n\
         [declared]\ngpus = {declared}\ngpu_type = \"h100\"\n",
        fake.display()
    );
    (toml, fake)
}

/// Polls `probe` until it gives a value or the deadline passes.
async fn wait_for<T>(what: &str, mut probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < DEADLINE {
        match probe().await {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within {DEADLINE:?}; last seen: {last}");
}

async fn host(cluster: &LocalCluster, name: &str) -> Result<Host, String> {
    let mut client = cluster.client().await.map_err(|e| e.to_string())?;
    let hosts = client
        .list_hosts(ListHostsRequest {})
        .await
        .map_err(|e| e.to_string())?
        .into_inner()
        .hosts;
    hosts
        .into_iter()
        .find(|h| h.name == name)
        .ok_or_else(|| format!("{name} not registered"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_gpus_that_discovery_contradicts_drain_the_host() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cluster = LocalCluster::configure(
        tmp.path(),
        &ClusterOptions {
            agents: 2,
            agent_cpus: 4,
            ..ClusterOptions::default()
        },
    )
    .expect("configure cluster");
    // Agent 1 finds 4 of the 8 GPUs it declares; agent 2 finds its 2.
    let (short, _) = agent_toml(tmp.path(), 1, 4, 8);
    let (fit, fit_fake) = agent_toml(tmp.path(), 2, 2, 2);
    cluster.set_agent_toml(1, &short);
    cluster.set_agent_toml(2, &fit);
    cluster.start_stopped_nodes().expect("start nodes");
    cluster.start_agent(1).expect("start agent 1");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");

    let drained_host = LocalCluster::agent_host(1);
    let why = "declared 8 gpus, discovered 4 (h100 at 0,1,2,3)";
    let h = wait_for("host 1 drained", async || {
        let h = host(&cluster, &drained_host).await?;
        if h.state == "drain" {
            Ok(h)
        } else {
            Err(format!("state {} reason {:?}", h.state, h.reason))
        }
    })
    .await;
    assert_eq!(h.reason, why);
    let inventory = h.inventory.expect("inventory");
    assert_eq!(inventory.gpus.len(), 4);
    assert!(inventory.gpus.iter().all(|g| g.model == "h100"));

    // A GPU job has nowhere to go, and explain says why.
    let job_id = wait_for("submit", async || {
        let mut client = cluster.client().await.map_err(|e| e.to_string())?;
        client
            .submit_job(SubmitJobRequest {
                request_id: "gpu-job".into(),
                spec: Some(JobSpec {
                    name: "gpu".into(),
                    user: "tester".into(),
                    command: "true".into(),
                    cpus: 1,
                    gres: vec!["gpu:h100:1".into()],
                    ..Default::default()
                }),
            })
            .await
            .map(|r| r.into_inner().job_id)
            .map_err(|e| e.to_string())
    })
    .await;
    let lacks = wait_for("explain names the drain", async || {
        let mut client = cluster.client().await.map_err(|e| e.to_string())?;
        let explained = client
            .explain_job(ExplainJobRequest { job_id })
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        if explained.state != JobState::Pending as i32 {
            return Err(format!("job left pending: state {}", explained.state));
        }
        // Once a pass has looked at the job it carries a reason.
        if explained.reason.is_empty() {
            return Err("no pass has looked at the job yet".into());
        }
        explained
            .hosts
            .into_iter()
            .find(|h| h.host == drained_host)
            .map(|h| h.lacks)
            .ok_or_else(|| "drained host not listed".to_string())
    })
    .await;
    assert_eq!(lacks, format!("host is drained: {why}"));
    let job = get_job(&cluster, job_id).await;
    assert_eq!(job.state, JobState::Pending as i32, "{job:?}");
    assert!(job.hosts.is_empty(), "{job:?}");

    // A host whose GPUs agree with its declaration takes the job.
    cluster.start_agent(2).expect("start agent 2");
    let fit_host = LocalCluster::agent_host(2);
    let job = wait_for("the GPU job completes on host 2", async || {
        let job = get_job(&cluster, job_id).await;
        if job.state == JobState::Completed as i32 {
            Ok(job)
        } else {
            Err(format!("state {} reason {}", job.state, job.reason))
        }
    })
    .await;
    assert_eq!(job.hosts, vec![fit_host.clone()]);
    let h = host(&cluster, &fit_host).await.expect("host 2");
    assert_eq!((h.state.as_str(), h.reason.as_str()), ("idle", ""));

    // GPU 1 of host 2 falls off the bus: re-discovery drains the host.
    std::fs::write(&fit_fake, fake_gpus(1, "h100")).expect("rewrite fake inventory");
    let h = wait_for("host 2 drained after losing a GPU", async || {
        let h = host(&cluster, &fit_host).await?;
        if h.state == "drain" {
            Ok(h)
        } else {
            Err(format!("state {} reason {:?}", h.state, h.reason))
        }
    })
    .await;
    assert_eq!(
        h.reason,
        "declared 2 gpus, discovered 1 (h100 at 0); gpu 1 (GPU-test-1) gone since the agent started"
    );
    assert_eq!(h.inventory.expect("inventory").gpus.len(), 1);

    // It comes back: the drain is lifted.
    std::fs::write(&fit_fake, fake_gpus(2, "h100")).expect("rewrite fake inventory");
    wait_for("host 2 fit again", async || {
        let h = host(&cluster, &fit_host).await?;
        if h.state == "idle" && h.reason.is_empty() {
            Ok(())
        } else {
            Err(format!("state {} reason {:?}", h.state, h.reason))
        }
    })
    .await;
}

async fn get_job(cluster: &LocalCluster, job_id: u64) -> berth_proto::api::Job {
    let mut client = cluster.client().await.expect("client");
    client
        .get_job(GetJobRequest {
            job_id,
            stale: false,
        })
        .await
        .expect("get job")
        .into_inner()
}
