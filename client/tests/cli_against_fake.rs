//! The binary end to end against fake nodes: the first answers UNAVAILABLE,
//! so every command also exercises failover.

mod support;

use std::process::Output;
use support::FakeNode;
use tokio::process::Command;

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

async fn berth(servers: &str, args: &[&str]) -> Output {
    Command::new(BERTH)
        .arg("--server")
        .arg(servers)
        .args(args)
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run berth")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_list_show_explain_cancel() {
    let follower = FakeNode::new(false);
    let leader = FakeNode::new(true);
    let servers = format!("{},{}", follower.start().await, leader.start().await);

    let out = berth(
        &servers,
        &[
            "submit", "--wrap", "echo hi", "-J", "demo", "-t", "90", "--mem", "2G",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Submitted batch job 1\n");
    let out = berth(
        &servers,
        &["submit", "--parsable", "--wrap", "sleep 1", "-p", "gpu"],
    )
    .await;
    assert_eq!(stdout(&out), "2\n");

    let submits: Vec<_> = leader
        .seen()
        .into_iter()
        .filter(|s| s.method == "submit_job")
        .collect();
    assert_eq!(submits.len(), 2);
    assert_ne!(submits[0].request_id, submits[1].request_id);
    let spec = leader.jobs.lock().expect("lock").jobs[&1]
        .spec
        .clone()
        .expect("spec");
    assert_eq!((spec.name.as_str(), spec.user.as_str()), ("demo", "tester"));
    assert_eq!((spec.time_limit_s, spec.mem_mb), (5400, 2048));
    assert!(spec.workdir.starts_with('/'), "{}", spec.workdir);

    let out = berth(&servers, &["queue"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n\
         \x20                1     batch     demo   tester PD       0:00      1 (Priority)\n\
         \x20                2       gpu    sleep   tester PD       0:00      1 (Priority)\n"
    );
    let out = berth(&servers, &["queue", "-h", "-j", "2"]).await;
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let out = berth(&servers, &["queue", "-u", "someone-else"]).await;
    assert_eq!(stdout(&out).lines().count(), 1);

    let out = berth(&servers, &["job", "1"]).await;
    assert!(
        stdout(&out).starts_with("JobId=1 JobName=demo\n"),
        "{}",
        stdout(&out)
    );
    let out = berth(&servers, &["explain", "1"]).await;
    assert!(
        stdout(&out).contains("h1  cpus: needs 8, 2 free"),
        "{}",
        stdout(&out)
    );

    let out = berth(&servers, &["cancel", "1", "99", "2"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).starts_with("berth: error: Kill job error on job id 99: job 99 not found"));

    let out = berth(&servers, &["queue", "-t", "all", "--json"]).await;
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(listed["jobs"][0]["state"], "CANCELLED");
    assert_eq!(listed["jobs"][1]["state_code"], "CA");

    let out = berth(&servers, &["cluster", "status", "--json"]).await;
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(status["role"], "Leader");
}

#[tokio::test(flavor = "multi_thread")]
async fn sbatch_script_with_directives() {
    let leader = FakeNode::new(true);
    let servers = leader.start().await;
    let dir = std::env::temp_dir().join(format!("berth-client-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let script = dir.join("train.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH -J from-script\n#SBATCH --cpus-per-task=4 --time=1:00:00\n#SBATCH -o out-%j.log\necho \"$1\"\n",
    )
    .expect("write");
    let sbatch = dir.join("sbatch");
    let _ = std::fs::remove_file(&sbatch);
    std::os::unix::fs::symlink(BERTH, &sbatch).expect("symlink");

    let out = Command::new(&sbatch)
        .args(["--server", &servers, "-c", "8", "-D", "/scratch"])
        .arg(&script)
        .arg("first arg")
        .output()
        .await
        .expect("run sbatch");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Submitted batch job 1\n");
    let spec = leader.jobs.lock().expect("lock").jobs[&1]
        .spec
        .clone()
        .expect("spec");
    assert_eq!(spec.name, "from-script");
    assert_eq!(spec.cpus, 8, "the command line wins over #SBATCH");
    assert_eq!(spec.time_limit_s, 3600);
    assert_eq!(spec.stdout_path, "out-%j.log");
    assert_eq!(spec.workdir, "/scratch");
    assert!(
        spec.command
            .starts_with("exec /bin/bash /dev/fd/3 'first arg' 3<<"),
        "{}",
        spec.command
    );
}
