//! Host features on a real cluster (3 `berthd` processes, two real
//! `berth-agent`s, one declaring `features = ["a100", "ib"]`): the
//! features reach the host record through the agent's registration, and a
//! job that asks for `a100` (`sbatch -C a100`) runs on that host and no
//! other; a job that asks for a feature no host has waits
//! `ReqNodeNotAvail`. Every wait is a condition with a deadline.

use std::time::{Duration, Instant};

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::{JobSpec, JobState};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

fn spec(name: &str, features: &[&str]) -> JobSpec {
    JobSpec {
        name: name.into(),
        user: "tester".into(),
        command: "true".into(),
        cpus: 1,
        features: features.iter().map(|f| f.to_string()).collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_constrained_job_runs_on_the_host_with_the_feature() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 2,
        agent_cpus: 2,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(tmp.path(), &options).expect("configure");
    cluster.set_agent_toml(2, "features = [\"a100\", \"ib\"]\n");
    cluster.start_all().expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let featured = LocalCluster::agent_host(2);

    // Both hosts registered, the second with its features.
    let start = Instant::now();
    loop {
        let hosts = cluster.hosts().await;
        let features = |name: &str| {
            hosts
                .iter()
                .find(|h| h.name == name)
                .and_then(|h| h.inventory.as_ref())
                .map(|i| i.features.clone())
        };
        if features(&LocalCluster::agent_host(1)) == Some(Vec::new())
            && features(&featured) == Some(vec!["a100".to_string(), "ib".to_string()])
        {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "hosts did not register with their features: {hosts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Several constrained jobs, so landing on the right host by chance is
    // not enough; and one asking for what no host has.
    let mut constrained = Vec::new();
    for n in 0..4 {
        let answer = cluster
            .submit_retrying(&format!("c{n}"), spec("c", &["a100"]), DEADLINE)
            .await
            .expect("submit");
        constrained.push(answer.job_id);
    }
    let both = cluster
        .submit_retrying("both", spec("both", &["ib", "a100"]), DEADLINE)
        .await
        .expect("submit")
        .job_id;
    let nowhere = cluster
        .submit_retrying("nowhere", spec("nowhere", &["h100"]), DEADLINE)
        .await
        .expect("submit")
        .job_id;
    for job_id in constrained.into_iter().chain([both]) {
        let done = cluster
            .wait_for_job(job_id, "COMPLETED", DEADLINE, |j| {
                j.state == JobState::Completed as i32
            })
            .await;
        assert_eq!(done.hosts, vec![featured.clone()], "job {job_id}");
    }
    let waiting = cluster
        .wait_for_job(nowhere, "ReqNodeNotAvail", DEADLINE, |j| {
            j.state == JobState::Pending as i32 && j.reason == "ReqNodeNotAvail"
        })
        .await;
    assert_eq!(waiting.hosts, Vec::<String>::new());
}
