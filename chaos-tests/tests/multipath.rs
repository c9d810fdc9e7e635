//! A multi-path reservation on a real cluster (3 `berthd` processes, two
//! real `berth-agent`s each declaring 2 ZeBu units of its own group, real
//! job processes): a job whose alternatives are "both units of group g1"
//! OR "both units of group g2", blocked on both, holds room on both hosts
//! at once (the leader's `berth_multipath_paths_reserved` is 2); when g2's
//! job ends first, although its time limit is the later one, the job
//! starts there, and its event names the alternative it took and the one
//! it let go. Every wait is a condition with a deadline.

use std::path::Path;
use std::time::Duration;

use berth_chaos::harness::{wait_until, ClusterOptions, LocalCluster};
use berth_proto::api::{Account, JobSpec, JobState, Partition, ResourceSet};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

/// A command that waits (at most two minutes) for `release` to exist.
fn wait_for(release: &Path) -> String {
    format!(
        "for i in $(seq 1200); do [ -e {} ] && exit 0; sleep 0.1; done; exit 3",
        release.display()
    )
}

fn spec(name: &str, command: String, time_limit_s: u64) -> JobSpec {
    JobSpec {
        name: name.into(),
        user: "tester".into(),
        command,
        cpus: 1,
        time_limit_s,
        ..JobSpec::default()
    }
}

fn units_of(group: &str) -> Vec<String> {
    vec![format!("emu:zebu:{group}:2")]
}

/// Whether any node's metrics have `line` (a name and its value).
fn some_node_reports(cluster: &LocalCluster, line: &str) -> bool {
    (1..=3).any(|id| {
        cluster
            .scrape_metrics(id)
            .is_ok_and(|text| text.lines().any(|l| l == line))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_holds_every_alternative_and_starts_on_the_first_that_frees() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let options = ClusterOptions {
        agents: 2,
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(dir, &options).expect("configure");
    for (agent, group) in [(1, "g1"), (2, "g2")] {
        let text = format!(
            "[[emulators]]\nkind = \"zebu\"\nname = \"zebu-{group}\"\ngroup = \"{group}\"\nunit_ids = [0, 1]\n"
        );
        cluster
            .set_agent_fake_inventory(agent, &text)
            .expect("fake inventory");
    }
    cluster.start_all().expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let mut client = cluster.client().await.expect("client");
    client
        .upsert_account(Account {
            name: "lab".into(),
            users: vec!["tester".into()],
            ..Default::default()
        })
        .await
        .expect("upsert account");
    client
        .upsert_partition(Partition {
            name: "emu".into(),
            is_default: true,
            reserve_all_alternatives: true,
            ..Default::default()
        })
        .await
        .expect("upsert partition");

    // Both groups busy; g1's job has the earlier time limit.
    let mut ids = Vec::new();
    for (name, group, limit_s) in [("x", "g1", 180), ("y", "g2", 300)] {
        let mut job = spec(name, wait_for(&dir.join(name)), limit_s);
        job.gres = units_of(group);
        let answer = cluster
            .submit_retrying(&format!("mp-{name}"), job, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        cluster
            .wait_for_job(answer.job_id, "running", DEADLINE, |j| {
                j.state == JobState::Running as i32
            })
            .await;
        ids.push(answer.job_id);
    }

    let mut big = spec("big", "true".into(), 120);
    big.alternatives = ["g1", "g2"]
        .into_iter()
        .map(|group| ResourceSet {
            gres: units_of(group),
            cpus: 1,
            ..ResourceSet::default()
        })
        .collect();
    let big_id = cluster
        .submit_retrying("mp-big", big, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .job_id;
    cluster
        .wait_for_job(big_id, "pending for Resources", DEADLINE, |j| {
            j.state == JobState::Pending as i32 && j.reason == "Resources"
        })
        .await;
    // It holds room on both alternatives at once.
    wait_until("the leader reports 2 alternatives held", DEADLINE, || {
        some_node_reports(&cluster, "berth_multipath_paths_reserved 2")
    })
    .await;

    // g2 frees first: the job starts there and lets g1 go.
    std::fs::write(dir.join("y"), b"").expect("release y");
    let job = cluster
        .wait_for_job(big_id, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    assert_eq!(job.alternative, 2, "{job:?}");
    assert_eq!(job.hosts, [LocalCluster::agent_host(2)], "{job:?}");
    let events = cluster.job_events(big_id).await;
    assert!(
        events.iter().any(|(kind, message)| kind == "alternative"
            && message
                == "Started on alternative 2 of 2 (cpus=1,mem=0M,gres=emu:zebu:g2:2); \
                    multi-path reservation released on alternative 1"),
        "{events:?}"
    );
    wait_until("the leader counts the dispatch", DEADLINE, || {
        some_node_reports(&cluster, "berth_multipath_dispatched_total 1")
    })
    .await;
    std::fs::write(dir.join("x"), b"").expect("release x");
    cluster
        .wait_for_job(ids[0], "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
}
