//! `berth-agent --simulate` against a real cluster, small: every simulated
//! host registers and stays up, the synthetic inventory reaches the
//! cluster, and a GPU job runs on a simulated GPU host for the time its
//! environment names and then completes. Waits are conditions with
//! deadlines (the drill's measurement window aside).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use berth_chaos::simulated_hosts::{run, DrillOptions};
use berth_proto::api::{GetJobRequest, JobSpec, JobState, ListHostsRequest, SubmitJobRequest};

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_hosts_register_heartbeat_and_run_jobs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (report, cluster, _simulator) = run(&DrillOptions {
        hosts: 200,
        heartbeat_s: 1,
        seconds: 2,
        dir: tmp.path().to_path_buf(),
        jobs: 0,
        job_runtime_s: 0,
    })
    .await
    .expect("drill");
    assert_eq!(report.hosts_up_at_end, 200, "{report}");
    assert!(
        report.leader_cores >= 0.0 && report.leader_rss_mib > 0.0,
        "{report}"
    );

    let mut client = cluster.client().await.expect("client");
    let hosts = client
        .list_hosts(ListHostsRequest {})
        .await
        .expect("list hosts")
        .into_inner()
        .hosts;
    assert_eq!(hosts.len(), 200);
    let gpu_hosts: Vec<&str> = hosts
        .iter()
        .filter(|h| h.inventory.as_ref().is_some_and(|i| !i.gpus.is_empty()))
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(gpu_hosts.len(), 60);
    assert!(gpu_hosts.contains(&"sim-00006"), "{gpu_hosts:?}");
    let emulator_hosts = hosts
        .iter()
        .filter(|h| {
            h.inventory
                .as_ref()
                .is_some_and(|i| !i.emulators.is_empty())
        })
        .count();
    assert_eq!(emulator_hosts, 20);

    let job_id = client
        .submit_job(SubmitJobRequest {
            request_id: "sim-gpu".into(),
            spec: Some(JobSpec {
                name: "sim".into(),
                user: "tester".into(),
                command: "train".into(),
                cpus: 4,
                gres: vec!["gpu:h100:4".into()],
                env: HashMap::from([("BERTH_SIM_RUNTIME_S".to_string(), "2".to_string())]),
                ..Default::default()
            }),
        })
        .await
        .expect("submit")
        .into_inner()
        .job_id;
    let start = Instant::now();
    let mut saw_running = false;
    let job = loop {
        let job = client
            .get_job(GetJobRequest {
                job_id,
                stale: false,
            })
            .await
            .expect("get job")
            .into_inner();
        saw_running |= job.state == JobState::Running as i32;
        if job.state == JobState::Completed as i32 {
            break job;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "job not completed within {DEADLINE:?}: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(saw_running, "the job was never seen running");
    let host = &job.hosts[0];
    let placed = hosts.iter().find(|h| &h.name == host).expect("placed host");
    let gpus = &placed.inventory.as_ref().expect("inventory").gpus;
    assert!(gpus.len() >= 4 && gpus[0].model == "h100", "{placed:?}");
    // It ran for its simulated runtime, not less.
    assert!(
        job.end_ms - job.start_ms >= 2_000,
        "ran {} ms",
        job.end_ms - job.start_ms
    );
}
