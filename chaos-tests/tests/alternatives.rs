//! Alternative resource sets on a real cluster (3 `berthd` processes, a
//! real `berth-agent` declaring 4 CPUs, a real job process): a job whose
//! first set asks more CPUs than any host has runs on its second, the job
//! records which (`Job.alternative`) and its events name it. Every wait is
//! a condition with a deadline.

use std::time::Duration;

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::{JobSpec, JobState, ResourceSet};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

async fn events(cluster: &LocalCluster, job_id: u64) -> Vec<(String, String)> {
    cluster.job_events(job_id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_on_its_second_set_when_the_first_can_never_fit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    let marker = tmp.path().join("ran");
    let spec = JobSpec {
        name: "alt".into(),
        user: "tester".into(),
        command: format!("echo $SLURM_JOB_ID > {}", marker.display()),
        cpus: 1,
        alternatives: vec![
            // More CPUs than the one host has: never fits.
            ResourceSet {
                cpus: 64,
                ..ResourceSet::default()
            },
            ResourceSet {
                cpus: 2,
                mem_mb: 16,
                ..ResourceSet::default()
            },
        ],
        ..JobSpec::default()
    };
    let job_id = match cluster.submit_retrying("alt-1", spec, DEADLINE).await {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    };
    let job = cluster
        .wait_for_job(job_id, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    assert_eq!(job.alternative, 2, "{job:?}");
    let spec = job.spec.clone().unwrap_or_default();
    assert_eq!(spec.alternatives.len(), 2);
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        job_id.to_string()
    );
    let seen = events(&cluster, job_id).await;
    assert!(
        seen.iter().any(|(kind, message)| kind == "alternative"
            && message == "Started on alternative 2 of 2 (cpus=2,mem=16M)"),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|(kind, message)| kind == "submitted"
            && message.contains("(2 alternative resource sets)")),
        "{seen:?}"
    );

    // A set the cluster refuses (a partition that is not one name) changes
    // nothing.
    let mut client = cluster.client().await.expect("client");
    let refused = client
        .submit_job(berth_proto::api::SubmitJobRequest {
            request_id: "alt-2".into(),
            spec: Some(JobSpec {
                user: "tester".into(),
                command: "true".into(),
                alternatives: vec![ResourceSet {
                    partition: "emu gpu".into(),
                    ..ResourceSet::default()
                }],
                ..JobSpec::default()
            }),
        })
        .await
        .expect_err("refused");
    assert!(
        refused
            .message()
            .contains("alternative 1: partition \"emu gpu\" must be one name"),
        "{refused:?}"
    );
}

async fn berth(cluster: &LocalCluster, args: &[&str]) -> String {
    cluster.berth_cli(args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sbatch_alt_sets_run_and_scontrol_shows_the_chosen_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    // The job's output goes to the test's directory, not the CLI's cwd.
    let workdir = tmp.path().to_str().expect("utf-8 path");
    let out = berth(
        &cluster,
        &[
            "submit",
            "--parsable",
            "-D",
            workdir,
            "-c",
            "2",
            "--alt=cpus=64",
            "--alt=mem=8",
            "--wrap",
            "true",
        ],
    )
    .await;
    let job_id: u64 = out.trim().parse().expect("a job id");
    cluster
        .wait_for_job(job_id, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    let shown = berth(&cluster, &["scontrol", "show", "job", &job_id.to_string()]).await;
    // The second set took the job's own 2 CPUs and its own memory.
    assert!(
        shown.contains("   Alternatives=2 AltChosen=2 Alt1=cpus=64,mem=0 Alt2=cpus=2,mem=8M\n"),
        "{shown}"
    );
}
