//! The web UI in a real browser: a 3-node cluster of `berthd` processes
//! with an agent, one job running and one pending (it asks for more CPUs
//! than any host has), then headless Chromium (Debian's `chromium`) loads
//! every page and the test checks the DOM the browser built for the
//! expected rows and reason text. The job pages are loaded from a
//! follower, which serves the leader's answers.
//!
//! Test artifact: a screenshot of each page (1280x900) is kept under
//! `target/ui-screenshots/` (next to the build's binaries), overwritten by
//! each run, for a person to look at.
//!
//! Chromium missing is a failure, never a skip: `scripts/setup.sh`
//! installs it. Every wait is a condition with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_chaos::harness::{bin_dir, ClusterOptions, LocalCluster};
use berth_proto::api::{Account, GetJobRequest, JobSpec, JobState, Limits, ListHostsRequest, Qos};

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);
/// One browser run (start, load, render, exit).
const BROWSER_DEADLINE: Duration = Duration::from_secs(90);
const AGENT_CPUS: u32 = 2;
/// More CPUs than the one host has: the job stays pending on Resources.
const TOO_MANY_CPUS: u32 = 64;

/// Node `id`'s HTTP address, as the harness wrote it in its config.
fn http_addr(cluster: &LocalCluster, id: u64) -> String {
    let path = cluster.node_config(id).expect("node config");
    let text = std::fs::read_to_string(path).expect("read node config");
    text.lines()
        .find_map(|line| line.strip_prefix("metrics_listen = "))
        .map(|value| value.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("no metrics_listen in {}", path.display()))
}

/// The chromium binary, or a failure that says how to get it.
fn chromium() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let candidate = Path::new(dir).join("chromium");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "chromium is not installed: this test drives Debian's headless chromium \
         (apt-get install -y chromium, or run scripts/setup.sh)"
    );
}

/// Runs chromium headless with `args` then `url`, killed past the
/// deadline; returns its stdout.
fn browser(profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(_) => break,
            None if start.elapsed() > BROWSER_DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish {url} within {BROWSER_DEADLINE:?}");
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let output = child.wait_with_output().expect("chromium output");
    assert!(
        output.status.success(),
        "chromium {args:?} {url}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The DOM chromium built for `url`.
fn dom(profile: &Path, url: &str) -> String {
    browser(profile, &["--dump-dom"], url)
}

/// A screenshot of `url` at 1280x900 into `file`; checks it is a PNG.
fn screenshot(profile: &Path, url: &str, file: &Path) {
    let _ = std::fs::remove_file(file);
    browser(
        profile,
        &[
            &format!("--screenshot={}", file.display()),
            "--window-size=1280,900",
        ],
        url,
    );
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("screenshot {url}: {e}"));
    assert!(
        bytes.len() > 1_000 && bytes.starts_with(b"\x89PNG"),
        "screenshot of {url} is not a PNG ({} bytes)",
        bytes.len()
    );
}

/// Asserts every `needle` is in `dom`, naming the page and the first
/// missing one.
fn expect_all(page: &str, dom: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            dom.contains(needle),
            "{page}: expected {needle:?} in the DOM:\n{dom:.6000}"
        );
    }
}

async fn job_state(cluster: &LocalCluster, job_id: u64) -> Option<(i32, String)> {
    let mut client = cluster.client().await.ok()?;
    let job = client
        .get_job(GetJobRequest {
            job_id,
            stale: false,
        })
        .await
        .ok()?
        .into_inner();
    Some((job.state, job.reason))
}

/// Waits until `done` holds for the job's (state, reason).
async fn wait_job(
    cluster: &LocalCluster,
    job_id: u64,
    what: &str,
    done: impl Fn(i32, &str) -> bool,
) {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < DEADLINE {
        last = job_state(cluster, job_id).await;
        if let Some((state, reason)) = &last {
            if done(*state, reason) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("job {job_id} never {what} within {DEADLINE:?}; last seen {last:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_page_renders_in_a_real_browser() {
    // Fail before starting anything when the browser is missing.
    chromium();
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agent_cpus: AGENT_CPUS,
        ..Default::default()
    };
    let cluster = LocalCluster::start(tmp.path(), &options).expect("start cluster");
    let leader = cluster
        .wait_for_leader(LEADER_DEADLINE)
        .await
        .expect("first leader");
    let follower = if leader == 1 { 2 } else { 1 };
    let host = LocalCluster::agent_host(1);

    // The agent's host is registered before anything is submitted.
    let start = Instant::now();
    loop {
        let hosts = match cluster.client().await {
            Ok(mut c) => c
                .list_hosts(ListHostsRequest {})
                .await
                .map(|r| r.into_inner().hosts)
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        if hosts.iter().any(|h| h.name == host) {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "host {host} never registered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // An account with a quota and its QOS (auth is off: every caller is an
    // admin), so the fair-share page has rows to show; the quotas are
    // larger than any job here, so no job waits on them.
    let quota = || Limits {
        grp_tres: [("cpu".to_string(), 100)].into_iter().collect(),
        ..Default::default()
    };
    let mut admin = cluster.client().await.expect("client");
    admin
        .upsert_qos(Qos {
            name: "team".into(),
            priority: 10,
            limits: Some(quota()),
            ..Default::default()
        })
        .await
        .expect("QOS team");
    admin
        .upsert_account(Account {
            name: "lab".into(),
            shares: 10,
            users: vec!["tester".into()],
            default_qos: "team".into(),
            limits: Some(quota()),
            ..Default::default()
        })
        .await
        .expect("account lab");

    let spec = |name: &str, cpus: u32| JobSpec {
        name: name.into(),
        user: "tester".into(),
        command: "sleep 300".into(),
        cpus,
        ..Default::default()
    };
    let running = cluster
        .submit_retrying("ui-running", spec("ui-runs", 1), DEADLINE)
        .await
        .expect("submit the running job")
        .job_id;
    let pending = cluster
        .submit_retrying("ui-pending", spec("ui-waits", TOO_MANY_CPUS), DEADLINE)
        .await
        .expect("submit the pending job")
        .job_id;
    wait_job(&cluster, running, "ran", |s, _| {
        s == JobState::Running as i32
    })
    .await;
    // A pass has judged it: its reason is no longer the initial Priority.
    wait_job(&cluster, pending, "got a reason", |s, r| {
        s == JobState::Pending as i32 && !r.is_empty() && r != "Priority"
    })
    .await;

    let shots = bin_dir()
        .expect("bin dir")
        .parent()
        .map(|target| target.join("ui-screenshots"))
        .expect("target dir");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let profile = tmp.path().join("chromium-profile");
    let on_leader = format!("http://{}", http_addr(&cluster, leader));
    let on_follower = format!("http://{}", http_addr(&cluster, follower));

    // Queue: both jobs, the running one on its host, the pending one with
    // its reason in words.
    let url = format!("{on_leader}/ui/queue");
    let page = dom(&profile, &url);
    expect_all(
        "queue",
        &page,
        &[
            "<h1>Queue</h1>",
            &format!("<tr id=\"job-{running}\">"),
            &format!("<tr id=\"job-{pending}\">"),
            &format!("<a href=\"/ui/jobs/{pending}\">{pending}</a>"),
            "ui-runs",
            "ui-waits",
            "state-RUNNING",
            "state-PENDING",
            &format!("<br>on {host}</td>"),
            "Jobs shown: 2 (1 pending, 1 running).",
        ],
    );
    screenshot(&profile, &url, &shots.join("queue.png"));

    // The state filter works from the query string alone.
    let page = dom(
        &profile,
        &format!("{on_leader}/ui/queue?state=pending&sort=id"),
    );
    expect_all(
        "queue?state=pending",
        &page,
        &[
            &format!("<tr id=\"job-{pending}\">"),
            "Jobs shown: 1 (1 pending, 0 running).",
        ],
    );
    assert!(!page.contains(&format!("<tr id=\"job-{running}\">")));
    let page = dom(&profile, &format!("{on_leader}/ui/queue?state=sleeping"));
    expect_all(
        "queue?state=sleeping",
        &page,
        &["<h1>Bad request</h1>", "state \"sleeping\" is not one of"],
    );

    // Job (pending), from a follower: the reason and what the host lacks.
    let url = format!("{on_follower}/ui/jobs/{pending}");
    let page = dom(&profile, &url);
    expect_all(
        "job (pending)",
        &page,
        &[
            &format!("<h1>Job {pending}: ui-waits</h1>"),
            "Why it is not running yet",
            "<p id=\"why-reason\"><strong>",
            &format!("<th scope=\"row\">{host}</th>"),
            "Priority breakdown",
            "<pre>sleep 300</pre>",
            "<td>submitted</td><td>Submitted by tester",
        ],
    );
    // The host's row says how many CPUs it lacks: the running job holds
    // one of its two.
    let host_row = page
        .split(&format!("<th scope=\"row\">{host}</th>"))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_default()
        .to_string();
    let lacks = format!("cpus: needs {TOO_MANY_CPUS}, 1 free of {AGENT_CPUS}");
    assert!(
        host_row.contains(&lacks),
        "the host's row should say {lacks:?}: {host_row}"
    );
    screenshot(&profile, &url, &shots.join("job-pending.png"));

    // Job (running): no "why" section, its host.
    let url = format!("{on_follower}/ui/jobs/{running}");
    let page = dom(&profile, &url);
    expect_all(
        "job (running)",
        &page,
        &[
            &format!("<h1>Job {running}: ui-runs</h1>"),
            &format!(" on {host}</dd>"),
        ],
    );
    assert!(!page.contains("Why it is not running yet"));
    screenshot(&profile, &url, &shots.join("job-running.png"));

    // Hosts: the host, its CPUs in use and the running job.
    let url = format!("{on_leader}/ui/hosts");
    let page = dom(&profile, &url);
    expect_all(
        "hosts",
        &page,
        &[
            &format!("<tr id=\"host-{host}\">"),
            &format!("<td class=\"num\">1 / {AGENT_CPUS}</td>"),
            &format!("<a href=\"/ui/jobs/{running}\">{running}</a> (1 CPU)"),
        ],
    );
    screenshot(&profile, &url, &shots.join("hosts.png"));

    // Cluster: three voters, the leader, and the leader's last pass.
    let url = format!("{on_leader}/ui/cluster");
    let page = dom(&profile, &url);
    expect_all(
        "cluster",
        &page,
        &[
            "<tr id=\"member-1\">",
            "<tr id=\"member-2\">",
            "<tr id=\"member-3\">",
            &format!("<dt>This node</dt><dd>node {leader} (Leader)</dd>"),
            "voter, leader (this node)",
            "<p id=\"last-pass\">Last pass on this node",
            "<p id=\"last-failover\">",
        ],
    );
    screenshot(&profile, &url, &shots.join("cluster.png"));

    // Fair share: the account and its QOS, each holding the running job's
    // one CPU against its quota of 100; nothing borrowed.
    let url = format!("{on_leader}/ui/fairshare");
    let page = dom(&profile, &url);
    expect_all(
        "fairshare",
        &page,
        &[
            "<h1>Fair share and quotas</h1>",
            "<tr id=\"account-lab\"><th scope=\"row\">lab</th><td>root</td><td class=\"num\">10</td>",
            "<tr id=\"qos-team\"><th scope=\"row\">team</th><td class=\"num\">10</td>",
            "<td class=\"num\">1 / 100</td>",
            "<p id=\"borrowed-none\">No running job is on borrowed (idle-fill) capacity.</p>",
        ],
    );
    assert!(!page.contains("id=\"no-accounts\""), "{page:.800}");
    screenshot(&profile, &url, &shots.join("fairshare.png"));

    // A job that does not exist is a 404 page, not a crash.
    let (status, body) = cluster
        .http_get(leader, "/ui/jobs/999999")
        .expect("GET a missing job");
    assert_eq!(status, 404, "{body:.500}");
    assert!(body.contains("job 999999 does not exist"), "{body:.500}");
}
