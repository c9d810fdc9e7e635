//! Preemption and admin reservations on a real cluster (`berthd`
//! processes, a real `berth-agent`, real job processes): a running job of a
//! preemptable QOS is stopped by its agent (its script traps SIGTERM and
//! writes a marker) when a job of a QOS that may preempt it needs the
//! host, goes back to PENDING with the event on both sides, and runs again
//! once the preemptor is done; a job over its QOS node cap runs on a
//! borrowed host (idle-fill), shows as borrowed, and is reclaimed (stopped
//! and requeued) when an in-quota job of another QOS needs the host; a
//! maintenance reservation keeps a job off its host until it is deleted;
//! an account's preempt list lets its jobs stop another account's
//! preemptible ones, and only once it names that account.
//! Every wait is a condition with a deadline.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use berth_chaos::harness::{ClusterOptions, LocalCluster};
use berth_proto::api::{
    Account, DeleteReservationRequest, Job, JobSpec, JobState, ListReservationsRequest, Qos,
    Reservation,
};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

/// One node, one 2-CPU agent, preemption on with no utilization threshold
/// and no exempt time, so the test waits on nothing but the cluster.
async fn started(tmp: &Path) -> LocalCluster {
    started_with(
        tmp,
        1,
        2,
        "[scheduler]\npass_interval_ms = 200\npreemption_enabled = true\n\
         preemption_threshold = 0\nmin_preemption_runtime_s = 0\n",
    )
    .await
}

async fn started_with(tmp: &Path, agents: u32, agent_cpus: u32, scheduler: &str) -> LocalCluster {
    let options = ClusterOptions {
        nodes: 1,
        agents,
        agent_cpus,
        ..ClusterOptions::default()
    };
    let mut cluster = LocalCluster::configure(tmp, &options).expect("configure");
    cluster
        .append_node_toml(scheduler)
        .expect("scheduler config");
    cluster.start_all().expect("start");
    cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    cluster
}

async fn submit(cluster: &LocalCluster, request_id: &str, spec: JobSpec) -> u64 {
    match cluster.submit_retrying(request_id, spec, DEADLINE).await {
        Ok(answer) => answer.job_id,
        Err(e) => panic!("{e}"),
    }
}

async fn wait_for_job(
    cluster: &LocalCluster,
    job_id: u64,
    what: &str,
    done: impl Fn(&Job) -> bool,
) -> Job {
    cluster.wait_for_job(job_id, what, DEADLINE, done).await
}

async fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    berth_chaos::harness::wait_until(what, DEADLINE, cond).await
}

fn read(path: &Path) -> String {
    berth_chaos::harness::read_or_empty(path)
}

async fn events(cluster: &LocalCluster, job_id: u64) -> Vec<(String, String)> {
    cluster.job_events(job_id).await
}

fn is(state: JobState) -> impl Fn(&Job) -> bool {
    move |j| j.state == state as i32
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempting_qos_stops_requeues_and_restarts_the_victim() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started(tmp.path()).await;
    let mut client = cluster.client().await.expect("client");
    for qos in [
        Qos {
            name: "scavenger".into(),
            preempt_mode: "requeue".into(),
            ..Default::default()
        },
        Qos {
            name: "urgent".into(),
            priority: 100,
            preempt: vec!["scavenger".into()],
            ..Default::default()
        },
    ] {
        client.upsert_qos(qos).await.expect("upsert qos");
    }
    client
        .upsert_account(Account {
            name: "lab".into(),
            users: vec!["tester".into()],
            qos: vec!["scavenger".into(), "urgent".into()],
            default_qos: "scavenger".into(),
            ..Default::default()
        })
        .await
        .expect("upsert account");

    let runs = tmp.path().join("runs.txt");
    let term = tmp.path().join("term.txt");
    let victim = submit(
        &cluster,
        "victim",
        JobSpec {
            name: "victim".into(),
            user: "tester".into(),
            qos: "scavenger".into(),
            cpus: 2,
            time_limit_s: 600,
            preemptible: true,
            command: format!(
                "trap 'echo term >> {0}; exit 0' TERM; echo run >> {1}; while :; do sleep 0.05; done",
                term.display(),
                runs.display()
            ),
            ..Default::default()
        },
    )
    .await;
    wait_until("the victim's first run", || read(&runs) == "run\n").await;
    let first = wait_for_job(&cluster, victim, "running", is(JobState::Running)).await;

    let done = tmp.path().join("urgent.txt");
    let urgent = submit(
        &cluster,
        "urgent",
        JobSpec {
            name: "urgent".into(),
            user: "tester".into(),
            qos: "urgent".into(),
            cpus: 2,
            time_limit_s: 600,
            command: format!("sleep 1; echo done > {}", done.display()),
            ..Default::default()
        },
    )
    .await;
    // The victim's agent sends SIGTERM: its trap writes the marker.
    wait_until("SIGTERM reaching the victim", || read(&term) == "term\n").await;
    wait_for_job(&cluster, urgent, "running on the freed host", |j| {
        j.state == JobState::Running as i32 || j.state == JobState::Completed as i32
    })
    .await;
    let requeued = wait_for_job(&cluster, victim, "pending again", is(JobState::Pending)).await;
    assert_eq!(requeued.job_id, victim, "it keeps its id");
    // While it waits, its reason says why it is back in the queue.
    assert!(
        requeued
            .reason_text
            .contains(&format!("Preempted by job {urgent}; queued again")),
        "{requeued:?}"
    );
    let victim_events = events(&cluster, victim).await;
    assert!(
        victim_events.iter().any(|(k, m)| k == "preempted"
            && m == &format!(
                "Preempted by job {urgent} (PreemptMode=Requeue); stopping on {}",
                first.hosts[0]
            )),
        "{victim_events:?}"
    );
    assert!(
        victim_events
            .iter()
            .any(|(k, m)| k == "requeued" && m.contains(&format!("Preempted by job {urgent}"))),
        "{victim_events:?}"
    );
    let urgent_events = events(&cluster, urgent).await;
    assert!(
        urgent_events
            .iter()
            .any(|(k, m)| k == "preempting" && m.starts_with(&format!("Preempting job {victim}"))),
        "{urgent_events:?}"
    );

    // The preemptor finishes; the victim runs again, a second time.
    wait_for_job(&cluster, urgent, "completed", is(JobState::Completed)).await;
    assert_eq!(read(&done), "done\n");
    let again = wait_for_job(&cluster, victim, "running again", is(JobState::Running)).await;
    assert_ne!(again.alloc_id, first.alloc_id, "a new allocation");
    wait_until("the victim's second run", || read(&runs) == "run\nrun\n").await;
    let metrics = cluster.scrape_metrics(1).expect("metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("berth_preemptions_total{") && l.contains("cause=\"preempt\"")),
        "{metrics}"
    );
}

/// Account preempt lists on the live cluster (the priority rule's groups):
/// `lab`'s job is far above `scav`'s preemptible one, yet waits while
/// `lab` lists nobody; once `lab` lists `scav` the victim is stopped and
/// requeued and `lab`'s job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_preempt_list_lets_its_jobs_preempt_the_listed_accounts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started(tmp.path()).await;
    let mut client = cluster.client().await.expect("client");
    let account = |name: &str, user: &str, preempt: &[&str]| Account {
        name: name.into(),
        users: vec![user.into()],
        preempt: preempt.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    for a in [account("scav", "sam", &[]), account("lab", "lea", &[])] {
        client.upsert_account(a).await.expect("upsert account");
    }
    let term = tmp.path().join("scav-term.txt");
    let victim = submit(
        &cluster,
        "scav-1",
        JobSpec {
            name: "scav".into(),
            user: "sam".into(),
            cpus: 2,
            nice: 20,
            time_limit_s: 600,
            preemptible: true,
            command: format!(
                "trap 'echo term >> {0}; exit 0' TERM; while :; do sleep 0.05; done",
                term.display()
            ),
            ..Default::default()
        },
    )
    .await;
    wait_for_job(&cluster, victim, "running", is(JobState::Running)).await;
    let lab_job = JobSpec {
        name: "lab".into(),
        user: "lea".into(),
        cpus: 2,
        time_limit_s: 600,
        command: "sleep 300".into(),
        ..Default::default()
    };
    let blocked = submit(&cluster, "lab-1", lab_job).await;
    wait_for_job(&cluster, blocked, "waiting for room", |j| {
        j.state == JobState::Pending as i32 && j.reason == "Resources"
    })
    .await;
    // Passes run every 200 ms: several of them evict nothing without a list.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = cluster.get_job(victim).await.expect("get victim");
    assert_eq!(still.state, JobState::Running as i32, "{still:?}");
    assert_eq!(read(&term), "", "no list, no stop signal");

    client
        .upsert_account(account("lab", "lea", &["scav"]))
        .await
        .expect("lab lists scav");
    wait_until("SIGTERM reaching the victim", || read(&term) == "term\n").await;
    wait_for_job(
        &cluster,
        blocked,
        "running on the freed host",
        is(JobState::Running),
    )
    .await;
    let requeued = wait_for_job(&cluster, victim, "pending again", is(JobState::Pending)).await;
    assert!(
        requeued
            .reason_text
            .contains(&format!("Preempted by job {blocked}; queued again")),
        "{requeued:?}"
    );
}

/// Idle-fill: `small` caps its jobs at one node; a second `small` job runs
/// on the other, idle host as a loan, and an in-quota `big` job takes that
/// host back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowed_run_shows_borrowed_and_is_reclaimed_for_an_in_quota_job() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started_with(
        tmp.path(),
        2,
        1,
        "[scheduler]\npass_interval_ms = 200\nidle_fill_enabled = true\nidle_fill_exempt_secs = 0\n",
    )
    .await;
    let mut client = cluster.client().await.expect("client");
    let mut node_cap = berth_proto::api::Limits::default();
    node_cap.grp_tres.insert("node".into(), 1);
    client
        .upsert_qos(Qos {
            name: "small".into(),
            limits: Some(node_cap),
            ..Default::default()
        })
        .await
        .expect("qos small");
    client
        .upsert_qos(Qos {
            name: "big".into(),
            ..Default::default()
        })
        .await
        .expect("qos big");
    for (account, user, qos) in [("lab", "ana", "small"), ("phys", "bo", "big")] {
        client
            .upsert_account(Account {
                name: account.into(),
                users: vec![user.into()],
                qos: vec![qos.into()],
                default_qos: qos.into(),
                ..Default::default()
            })
            .await
            .expect("account");
    }
    let job = |user: &str, name: &str, command: String| JobSpec {
        name: name.into(),
        user: user.into(),
        cpus: 1,
        exclusive: true,
        time_limit_s: 600,
        command,
        ..Default::default()
    };
    let a1 = submit(&cluster, "a1", job("ana", "a1", "sleep 300".into())).await;
    let a1 = wait_for_job(&cluster, a1, "running in quota", is(JobState::Running)).await;
    assert!(!a1.borrowed, "{a1:?}");

    let term = tmp.path().join("a2-term.txt");
    let runs = tmp.path().join("a2-runs.txt");
    let a2 = submit(
        &cluster,
        "a2",
        job(
            "ana",
            "a2",
            format!(
                "trap 'echo term >> {0}; exit 0' TERM; echo run >> {1}; while :; do sleep 0.05; done",
                term.display(),
                runs.display()
            ),
        ),
    )
    .await;
    let lent = wait_for_job(
        &cluster,
        a2,
        "running on lent capacity",
        is(JobState::Running),
    )
    .await;
    assert!(
        lent.borrowed,
        "past its QOS node cap it can only be a loan: {lent:?}"
    );
    assert_ne!(lent.hosts, a1.hosts);
    wait_until("a2's first run", || read(&runs) == "run\n").await;

    let b1 = submit(&cluster, "b1", job("bo", "b1", "true".into())).await;
    wait_until("SIGTERM reaching the borrowed run", || {
        read(&term) == "term\n"
    })
    .await;
    let b1_done = wait_for_job(
        &cluster,
        b1,
        "completed on the reclaimed host",
        is(JobState::Completed),
    )
    .await;
    assert_eq!(b1_done.hosts, lent.hosts);
    assert!(!b1_done.borrowed);
    let a2_events = events(&cluster, a2).await;
    assert!(
        a2_events.iter().any(|(k, m)| k == "preempted"
            && m.starts_with(&format!(
                "Reclaimed by job {b1} (idle-fill loan taken back, PreemptMode=Requeue)"
            ))),
        "{a2_events:?}"
    );
    assert!(
        a2_events.iter().any(|(k, m)| k == "preempted"
            && m.ends_with(&format!(
                "Reclaimed (idle-fill) by job {b1} (PreemptMode=Requeue); queued again"
            ))),
        "{a2_events:?}"
    );
    let b1_events = events(&cluster, b1).await;
    assert!(
        b1_events
            .iter()
            .any(|(k, m)| k == "preempting" && m.starts_with(&format!("Reclaiming job {a2}"))),
        "{b1_events:?}"
    );
    // The host is idle again: a2 borrows it once more.
    let again = wait_for_job(&cluster, a2, "borrowing again", |j| {
        j.state == JobState::Running as i32 && j.alloc_id != lent.alloc_id
    })
    .await;
    assert!(again.borrowed, "{again:?}");
    wait_until("a2's second run", || read(&runs) == "run\nrun\n").await;
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_reservation_keeps_jobs_off_its_host() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = started(tmp.path()).await;
    let mut client = cluster.client().await.expect("client");
    let host = LocalCluster::agent_host(1);
    // The host must be registered before a reservation can name it.
    let start = Instant::now();
    loop {
        let hosts = client
            .list_hosts(berth_proto::api::ListHostsRequest::default())
            .await
            .expect("hosts")
            .into_inner()
            .hosts;
        if hosts.iter().any(|h| h.name == host) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{host} never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let now = now_ms();
    client
        .create_reservation(Reservation {
            name: "maint".into(),
            hosts: vec![host.clone()],
            start_ms: now,
            end_ms: now + 3_600_000,
            users: vec![],
            accounts: vec![],
        })
        .await
        .expect("create reservation");
    let listed = client
        .list_reservations(ListReservationsRequest {})
        .await
        .expect("list")
        .into_inner()
        .reservations;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].hosts, vec![host.clone()]);

    let ran = tmp.path().join("ran.txt");
    let job = submit(
        &cluster,
        "kept-off",
        JobSpec {
            name: "kept-off".into(),
            user: "tester".into(),
            cpus: 1,
            time_limit_s: 60,
            command: format!("echo ran > {}", ran.display()),
            ..Default::default()
        },
    )
    .await;
    let waiting = wait_for_job(&cluster, job, "waiting for the maintenance window", |j| {
        j.state == JobState::Pending as i32 && j.reason.starts_with("ReqNodeNotAvail")
    })
    .await;
    assert_eq!(waiting.reason, "ReqNodeNotAvail, Reserved for maintenance");
    // A few more passes do not start it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = cluster.get_job(job).await.expect("job");
    assert_eq!(still.state, JobState::Pending as i32, "{still:?}");
    assert!(!ran.exists());

    client
        .delete_reservation(DeleteReservationRequest {
            name: "maint".into(),
        })
        .await
        .expect("delete reservation");
    wait_for_job(
        &cluster,
        job,
        "completed once the window is gone",
        is(JobState::Completed),
    )
    .await;
    assert_eq!(read(&ran), "ran\n");
}
