//! Every Slurm name of the binary end to end against a fake node with
//! fixed jobs, hosts and policy: golden output compared exactly.

mod support;

use berth_proto::api::*;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use support::FakeNode;
use tokio::process::Command;

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// A directory with the binary linked under every Slurm name.
fn links() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-slurm-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for name in [
        "sbatch", "srun", "salloc", "squeue", "scancel", "sacct", "sacctmgr", "scontrol", "sinfo",
        "sprio",
    ] {
        let link = dir.join(name);
        if !link.exists() {
            // Several tests may race to make the same link.
            let _ = std::os::unix::fs::symlink(BERTH, &link);
        }
    }
    dir
}

async fn run_as(name: &str, servers: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let program: PathBuf = if name == "berth" {
        PathBuf::from(BERTH)
    } else {
        links().join(name)
    };
    let mut command = Command::new(program);
    command
        .arg("--server")
        .arg(servers)
        .args(args)
        .env("USER", "alice")
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_STEP_ID")
        .env_remove("SLURM_JOB_NUM_NODES")
        .stdin(Stdio::null());
    for (k, v) in envs {
        command.env(k, v);
    }
    command.output().await.expect("run")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", stderr(out));
    stdout(out)
}

fn job(id: u64, name: &str, user: &str, state: JobState) -> Job {
    Job {
        job_id: id,
        spec: Some(JobSpec {
            name: name.into(),
            user: user.into(),
            account: "proj".into(),
            partitions: vec!["cpu".into()],
            cpus: 2,
            time_limit_s: 3600,
            ..Default::default()
        }),
        state: state as i32,
        submit_ms: 1_700_000_000_000,
        ..Default::default()
    }
}

/// A node with three jobs (one pending, two finished), five hosts in two
/// partitions, and one QOS.
async fn seeded() -> (FakeNode, String) {
    let node = FakeNode::new(true);
    {
        let mut jobs = node.jobs.lock().expect("lock");
        let mut pending = job(1, "wait", "alice", JobState::Pending);
        pending.reason = "Resources".into();
        let mut done = job(2, "train", "alice", JobState::Completed);
        done.start_ms = 1_700_000_010_000;
        done.end_ms = 1_700_003_610_000;
        done.hosts = vec!["n01".into()];
        let mut failed = job(3, "eval-long-name", "bob", JobState::Failed);
        failed.start_ms = 1_700_000_020_000;
        failed.end_ms = 1_700_000_080_000;
        failed.exit_code = 2;
        failed.hosts = vec!["g1".into()];
        if let Some(s) = failed.spec.as_mut() {
            s.partitions = vec!["gpu".into()];
        }
        for j in [pending, done, failed] {
            jobs.jobs.insert(j.job_id, j);
        }
    }
    {
        let mut cluster = node.cluster.lock().expect("lock");
        let host = |name: &str, state: &str, reason: &str| Host {
            name: name.into(),
            inventory: Some(Inventory {
                cpus: 16,
                memory_mb: 65_536,
                ..Default::default()
            }),
            state: state.into(),
            reason: reason.into(),
            ..Default::default()
        };
        cluster.hosts = vec![
            host("n01", "idle", ""),
            host("n02", "idle", ""),
            host("n03", "allocated", ""),
            host("n04", "drain", "bad dimm"),
            host("g1", "mixed", ""),
        ];
        cluster.partitions = vec![
            Partition {
                name: "cpu".into(),
                hosts: ["n01", "n02", "n03", "n04"].map(String::from).to_vec(),
                is_default: true,
                max_time_s: 172_800,
                ..Default::default()
            },
            Partition {
                name: "gpu".into(),
                hosts: vec!["g1".into()],
                max_time_s: 14_400,
                ..Default::default()
            },
        ];
        cluster.qos.insert(
            "normal".into(),
            Qos {
                name: "normal".into(),
                ..Default::default()
            },
        );
    }
    let servers = node.start().await;
    (node, servers)
}

#[tokio::test(flavor = "multi_thread")]
async fn squeue_formats() {
    let (node, s) = seeded().await;
    assert_eq!(
        ok(&run_as("squeue", &s, &[], &[]).await),
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n\
         \x20                1       cpu     wait    alice PD       0:00      1 (Resources)\n"
    );
    assert_eq!(
        ok(&run_as("squeue", &s, &["-t", "all", "-o", "%.4i|%6j|%T|%W|%l", "-h"], &[]).await),
        "   1|wait  |PENDING|no|1:00:00\n   2|train |COMPLETED|no|1:00:00\n   3|eval-l|FAILED|no|1:00:00\n"
    );
    assert_eq!(
        ok(&run_as(
            "squeue",
            &s,
            &[
                "-t",
                "all",
                "-p",
                "gpu",
                "-O",
                "JobID:5,UserName:6,Borrowed:.9,ExitCode"
            ],
            &[]
        )
        .await),
        "JOBIDUSER   BORROWEDEXIT_CODE           \n3    bob          no2:0                 \n"
    );
    assert_eq!(
        ok(&run_as(
            "berth",
            &s,
            &["squeue", "-u", "bob", "-t", "F", "-h", "-o", "%i %R"],
            &[]
        )
        .await),
        "3 g1\n"
    );
    // %X is no field.
    let out = run_as("squeue", &s, &["-o", "%X"], &[]).await;
    assert_eq!(
        stderr(&out),
        "squeue: error: Invalid job format specification: %X is not a field letter\n"
    );
    assert_eq!(out.status.code(), Some(1));
    let listed: serde_json::Value =
        serde_json::from_slice(&run_as("squeue", &s, &["--json"], &[]).await.stdout).expect("json");
    assert_eq!(listed["jobs"][0]["job_id"], 1);

    // --start: pending jobs, soonest predicted start first, none last.
    {
        let mut jobs = node.jobs.lock().expect("lock");
        for (id, predicted_ms) in [(5, 1_700_000_900_000), (6, 0), (7, 1_700_000_600_000)] {
            let mut j = job(id, "later", "carol", JobState::Pending);
            j.reason = "Priority".into();
            j.predicted_start_ms = predicted_ms;
            jobs.jobs.insert(id, j);
        }
    }
    assert_eq!(
        ok(&run_as("squeue", &s, &["--start", "-u", "carol"], &[]).await),
        "             JOBID PARTITION     NAME     USER ST           START_TIME  NODES NODELIST(REASON)\n\
         \x20                7       cpu    later    carol PD 2023-11-14T22:23:20Z      1 (Priority)\n\
         \x20                5       cpu    later    carol PD 2023-11-14T22:28:20Z      1 (Priority)\n\
         \x20                6       cpu    later    carol PD                  N/A      1 (Priority)\n"
    );
}

/// Two pending jobs' priority parts, as the leader's last pass left them.
async fn with_priorities() -> (FakeNode, String) {
    let node = FakeNode::new(true);
    {
        let mut cluster = node.cluster.lock().expect("lock");
        let factors = |job_id: u64, user: &str, partition: &str| PriorityFactors {
            job_id,
            user: user.into(),
            account: "proj".into(),
            partition: partition.into(),
            ..Default::default()
        };
        let mut first = factors(7, "alice", "cpu");
        first.age = 1000;
        first.fairshare = 51664;
        first.jobsize = 1000;
        first.partition_factor = 9000;
        first.site = 5;
        first.total = 62669;
        let mut second = factors(12, "bob", "gpu,cpu");
        second.qos = 2000;
        second.assoc = 300;
        second.nice = -100;
        second.total = 2200;
        cluster.priorities.insert(7, first);
        cluster.priorities.insert(12, second);
    }
    let s = node.start().await;
    (node, s)
}

#[tokio::test(flavor = "multi_thread")]
async fn sprio_views() {
    let (_node, s) = with_priorities().await;
    assert_eq!(
        ok(&run_as("sprio", &s, &[], &[]).await),
        "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS\n\
         \x20             7 cpu            62669          5       1000      51664       1000       9000          0\n\
         \x20            12 gpu,cpu         2200          0          0          0          0          0       2000\n"
    );
    assert_eq!(
        ok(&run_as("sprio", &s, &["-l", "-j", "12"], &[]).await),
        "          JOBID PARTITION     USER   PRIORITY       SITE        AGE      ASSOC  FAIRSHARE    JOBSIZE  PARTITION        QOS        NICE\n\
         \x20            12 gpu,cpu        bob       2200          0          0        300          0          0          0       2000        -100\n"
    );
    assert_eq!(
        ok(&run_as("sprio", &s, &["-h", "-u", "alice", "-o", "%i %Y"], &[]).await),
        "7 62669\n"
    );
    assert_eq!(
        ok(&run_as("sprio", &s, &["-h", "-p", "gpu", "-o", "%i"], &[]).await),
        "12\n"
    );
    let json: serde_json::Value = serde_json::from_slice(
        &run_as("berth", &s, &["sprio", "--json", "-j", "7"], &[])
            .await
            .stdout,
    )
    .expect("json");
    assert_eq!(json["jobs"][0]["job_id"], 7);
    assert_eq!(json["jobs"][0]["priority"], 62669);
    assert_eq!(json["jobs"][0]["fairshare"], 51664);
    assert_eq!(json["jobs"][0]["site"], 5);
    assert_eq!(json["jobs"].as_array().map(Vec::len), Some(1));
    let out = run_as("sprio", &s, &["-o", "%y"], &[]).await;
    assert_eq!(
        stderr(&out),
        "sprio: error: format %y is a normalized factor: not supported, Berth reports weighted factors\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sinfo_views() {
    let (_node, s) = seeded().await;
    assert_eq!(
        ok(&run_as("sinfo", &s, &[], &[]).await),
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
         cpu*         up 2-00:00:00      2   idle n[01-02]\n\
         cpu*         up 2-00:00:00      1  alloc n03\n\
         cpu*         up 2-00:00:00      1  drain n04\n\
         gpu          up    4:00:00      1    mix g1\n"
    );
    let long = ok(&run_as("sinfo", &s, &["-N", "-l", "-p", "gpu"], &[]).await);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 3, "{long}");
    assert_eq!(
        lines[1..].join("\n"),
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n\
         g1             1 gpu             mixed   16      N/A  65536        0      1   (null) none"
    );
    assert_eq!(
        ok(&run_as("sinfo", &s, &["-R"], &[]).await),
        "REASON               USER      TIMESTAMP           NODELIST\n\
         bad dimm             Unknown   Unknown             n04\n"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&run_as("berth", &s, &["sinfo", "--json"], &[]).await.stdout)
            .expect("json");
    assert_eq!(json["nodes"][3]["reason"], "bad dimm");
}

#[tokio::test(flavor = "multi_thread")]
async fn scontrol_show_and_control() {
    let (node, s) = seeded().await;
    assert_eq!(
        ok(&run_as("scontrol", &s, &["show", "node", "n04"], &[]).await),
        "NodeName=n04\n   CPUAlloc=0 CPUTot=16\n   AvailableFeatures=(null)\n   Gres=(null)\n   RealMemory=65536 AllocMem=0\n   State=DRAINED\n   Partitions=cpu\n   Reason=bad dimm\n\n"
    );
    assert_eq!(
        ok(&run_as("scontrol", &s, &["-o", "show", "partition", "gpu"], &[]).await),
        "PartitionName=gpu Default=NO QoS=N/A MaxNodes=UNLIMITED MinNodes=0 DefaultTime=NONE MaxTime=04:00:00 Nodes=g1 PriorityJobFactor=1 State=UP TotalNodes=1\n"
    );
    let shown = ok(&run_as("scontrol", &s, &["show", "job", "2"], &[]).await);
    assert!(
        shown.starts_with("JobId=2 JobName=train\n   UserId=alice Account=proj"),
        "{shown}"
    );
    assert_eq!(ok(&run_as("scontrol", &s, &["hold", "1"], &[]).await), "");
    assert_eq!(
        node.jobs.lock().expect("lock").jobs[&1].reason,
        "JobHeldUser"
    );
    assert_eq!(
        ok(&run_as("scontrol", &s, &["release", "1"], &[]).await),
        ""
    );
    assert_eq!(node.jobs.lock().expect("lock").jobs[&1].reason, "Priority");
    // update: Slurm's keys in any case; silent when it worked.
    assert_eq!(
        ok(&run_as(
            "scontrol",
            &s,
            &[
                "update",
                "JobId=1",
                "TimeLimit=10",
                "partition=cpu",
                "Name=again"
            ],
            &[]
        )
        .await),
        ""
    );
    {
        let jobs = node.jobs.lock().expect("lock");
        let update = jobs.updates.last().expect("an update was sent");
        assert_eq!(update.job_id, 1);
        assert_eq!(update.time_limit_s, Some(600));
        assert_eq!(
            (update.set_partitions, update.partitions.clone()),
            (true, vec!["cpu".to_string()])
        );
        assert_eq!(update.name.as_deref(), Some("again"));
        assert_eq!(update.nice, None);
    }
    assert_eq!(
        ok(&run_as(
            "scontrol",
            &s,
            &["--json", "update", "jobid=1", "timelimit=5"],
            &[]
        )
        .await),
        "{\n  \"changes\": [\n    \"TimeLimit 600 -> 300\"\n  ],\n  \"job_id\": 1\n}\n"
    );
    // The cluster's refusal, in Slurm's words; a bad key is refused before
    // anything is sent.
    let sent = node.jobs.lock().expect("lock").updates.len();
    let out = run_as("scontrol", &s, &["update", "JobId=2", "Nice=5"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "scontrol: error: slurm_update error: job 2 is no longer pending execution: only TimeLimit can change while it runs\n"
    );
    let out = run_as("scontrol", &s, &["update", "JobId=1", "Size=5"], &[]).await;
    assert_eq!(
        stderr(&out),
        "scontrol: error: Update of this parameter is not supported: Size=5\n"
    );
    assert_eq!(node.jobs.lock().expect("lock").updates.len(), sent);
    let out = run_as("scontrol", &s, &["show", "node", "nope"], &[]).await;
    assert_eq!(stderr(&out), "scontrol: error: Node nope not found\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn sacct_columns_and_filters() {
    let (node, s) = seeded().await;
    assert_eq!(
        ok(&run_as("sacct", &s, &["-S", "2023-11-01"], &[]).await),
        "       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode \n\
         ------------ ---------- ---------- ---------- ---------- ---------- -------- \n\
         1                  wait        cpu       proj          0    PENDING      0:0 \n\
         2                 train        cpu       proj          2  COMPLETED      0:0 \n\
         2.batch           batch                  proj          2  COMPLETED      0:0 \n"
    );
    assert_eq!(
        ok(&run_as(
            "sacct",
            &s,
            &[
                "-j",
                "3",
                "-j",
                "2,1",
                "-X",
                "-P",
                "-o",
                "JobID,User,State,Elapsed,Start,Borrowed"
            ],
            &[]
        )
        .await),
        "JobID|User|State|Elapsed|Start|Borrowed\n\
         1|alice|PENDING|00:00:00|Unknown|no\n\
         2|alice|COMPLETED|01:00:00|2023-11-14T22:13:30|no\n\
         3|bob|FAILED|00:01:00|2023-11-14T22:13:40|no\n"
    );
    assert_eq!(
        ok(&run_as(
            "sacct",
            &s,
            &[
                "-a",
                "-S",
                "2023-11-14",
                "-s",
                "F",
                "-n",
                "-p",
                "-o",
                "JobID,JobName%6"
            ],
            &[]
        )
        .await),
        "3|eval-long-name|\n3.batch|batch|\n"
    );
    assert_eq!(
        ok(&run_as(
            "sacct",
            &s,
            &[
                "-a",
                "-S",
                "2023-11-14",
                "-s",
                "F",
                "-n",
                "-o",
                "JobID,JobName%6"
            ],
            &[]
        )
        .await),
        "3            eval-+ \n3.batch       batch \n"
    );
    // Array ids: 20 is an array of tasks 0-2 (jobs 20, 21, 22).
    {
        let mut jobs = node.jobs.lock().expect("lock");
        for (task, id) in [20u64, 21, 22].into_iter().enumerate() {
            let mut t = job(id, "arr", "alice", JobState::Completed);
            t.start_ms = 1_700_000_010_000;
            t.end_ms = 1_700_000_070_000;
            if let Some(spec) = t.spec.as_mut() {
                spec.array = "0-2".into();
                spec.array_job_id = 20;
                spec.array_task_id = task as u32;
                spec.array_task_count = 3;
                spec.array_task_max = 2;
            }
            jobs.jobs.insert(id, t);
        }
    }
    assert_eq!(
        ok(&run_as(
            "sacct",
            &s,
            &["-j", "20_1,2", "-X", "-n", "-o", "JobID,JobIDRaw,State"],
            &[]
        )
        .await),
        "2            2             COMPLETED \n20_1         21            COMPLETED \n"
    );
    // The array's id alone is every task; a step names its task's line.
    assert_eq!(
        ok(&run_as("sacct", &s, &["-j", "20", "-n", "-P", "-o", "JobID"], &[]).await),
        "20_0\n20_0.batch\n20_1\n20_1.batch\n20_2\n20_2.batch\n"
    );
    let out = run_as("sacct", &s, &["-j", "20_x"], &[]).await;
    assert_eq!(
        stderr(&out),
        "sacct: error: invalid job id \"20_x\": expected N, N.batch, N.STEP, N_M or N_M.batch\n"
    );
    let out = run_as("sacct", &s, &["-S", "yesterday"], &[]).await;
    assert!(
        stderr(&out).starts_with("sacct: error: Invalid time specification \"yesterday\""),
        "{}",
        stderr(&out)
    );
    // Since midnight today by default: of these 2023 jobs only the one
    // still pending is active today.
    assert_eq!(
        ok(&run_as("sacct", &s, &["-n"], &[]).await),
        "1                  wait        cpu       proj          0    PENDING      0:0 \n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sacctmgr_round_trip() {
    let (node, s) = seeded().await;
    let out = run_as(
        "sacctmgr",
        &s,
        &["add", "qos", "name=high", "priority=10", "GrpTRES=cpu=24"],
        &[],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "no -i and no terminal: discarded"
    );
    assert!(stdout(&out).ends_with(" Changes Discarded (standard input is not a terminal; use -i to commit without asking)\n"), "{}", stdout(&out));
    assert!(!node.cluster.lock().expect("lock").qos.contains_key("high"));

    let out = ok(&run_as(
        "sacctmgr",
        &s,
        &[
            "-i",
            "add",
            "qos",
            "name=high",
            "priority=10",
            "GrpTRES=cpu=24",
        ],
        &[],
    )
    .await);
    assert_eq!(
        out,
        " Adding QOS(s)\n  high\n Settings\n  priority       = 10\n  grptres        = cpu=24\n"
    );
    ok(&run_as(
        "sacctmgr",
        &s,
        &[
            "-i",
            "modify",
            "qos",
            "high",
            "set",
            "priority=20",
            "preempt+=normal",
            "MaxWall=1-00:00:00",
        ],
        &[],
    )
    .await);
    assert_eq!(
        ok(&run_as(
            "sacctmgr",
            &s,
            &[
                "show",
                "qos",
                "format=Name,Priority,GrpTRES,Preempt,MaxWall"
            ],
            &[]
        )
        .await),
        "      Name   Priority       GrpTRES    Preempt     MaxWall \n\
         ---------- ---------- ------------- ---------- ----------- \n\
         \x20     high         20        cpu=24     normal  1-00:00:00 \n\
         \x20   normal          0                                      \n"
    );
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "add", "account", "proj", "fairshare=10", "qos=normal"],
        &[],
    )
    .await);
    ok(&run_as(
        "sacctmgr",
        &s,
        &[
            "-i",
            "modify",
            "account",
            "where",
            "name=proj",
            "set",
            "qos+=high",
        ],
        &[],
    )
    .await);
    // Account preempt lists: set, shown, appended to, taken from.
    ok(&run_as("sacctmgr", &s, &["-i", "add", "account", "scav"], &[]).await);
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "modify", "account", "proj", "set", "preempt=scav"],
        &[],
    )
    .await);
    assert_eq!(
        node.cluster.lock().expect("lock").accounts["proj"].preempt,
        ["scav"]
    );
    let show_preempt = ["-P", "show", "account", "format=Account,Preempt"];
    assert_eq!(
        ok(&run_as("sacctmgr", &s, &show_preempt, &[]).await),
        "Account|Preempt\nproj|scav\nscav|\n"
    );
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "modify", "account", "scav", "set", "Preempt+=proj"],
        &[],
    )
    .await);
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "modify", "account", "proj", "set", "preempt-=scav"],
        &[],
    )
    .await);
    assert_eq!(
        ok(&run_as("sacctmgr", &s, &show_preempt, &[]).await),
        "Account|Preempt\nproj|\nscav|proj\n"
    );
    ok(&run_as("sacctmgr", &s, &["-i", "delete", "account", "scav"], &[]).await);
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "add", "user", "bob", "account=proj"],
        &[],
    )
    .await);
    assert_eq!(
        ok(&run_as(
            "sacctmgr",
            &s,
            &["-P", "show", "assoc", "format=Account,User,Share,QOS"],
            &[]
        )
        .await),
        "Account|User|Share|QOS\nproj||10|normal,high\nproj|bob|1|normal,high\n"
    );
    assert_eq!(
        ok(&run_as("sacctmgr", &s, &["-n", "-P", "show", "user"], &[]).await),
        "bob|proj|0\n"
    );
    ok(&run_as(
        "sacctmgr",
        &s,
        &["-i", "delete", "user", "bob", "where", "account=proj"],
        &[],
    )
    .await);
    assert!(node.cluster.lock().expect("lock").accounts["proj"]
        .users
        .is_empty());
    ok(&run_as("sacctmgr", &s, &["-i", "delete", "qos", "high"], &[]).await);
    assert!(!node.cluster.lock().expect("lock").qos.contains_key("high"));

    let out = run_as(
        "sacctmgr",
        &s,
        &["-i", "add", "qos", "x", "Organization=physics"],
        &[],
    )
    .await;
    assert_eq!(
        stderr(&out),
        "sacctmgr: error: organization is not supported by Berth: organizations are not stored\n"
    );
    let out = run_as(
        "sacctmgr",
        &s,
        &["-i", "modify", "qos", "nope", "set", "priority=1"],
        &[],
    )
    .await;
    assert_eq!(stderr(&out), "sacctmgr: error: QOS nope does not exist\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn scancel_by_filter_and_signal() {
    let (node, s) = seeded().await;
    // A pending job cannot be signalled, and is not cancelled either.
    let out = run_as("scancel", &s, &["--signal=USR1", "1"], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with(
            "scancel: error: Kill job error on job id 1: job 1 is not running: only a running job can be signalled"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        node.jobs.lock().expect("lock").jobs[&1].state,
        JobState::Pending as i32
    );
    let out = run_as("scancel", &s, &["-s", "NOPE", "1"], &[]).await;
    assert_eq!(
        stderr(&out),
        "scancel: error: invalid signal name \"NOPE\": expected a name such as USR1, SIGTERM or a number\n"
    );
    node.jobs
        .lock()
        .expect("lock")
        .jobs
        .insert(9, job(9, "run", "alice", JobState::Running));
    ok(&run_as("scancel", &s, &["--signal=SIGUSR1", "9"], &[]).await);
    ok(&run_as("scancel", &s, &["-s", "12", "-b", "9"], &[]).await);
    {
        let jobs = node.jobs.lock().expect("lock");
        assert_eq!(jobs.signals, vec![(9, 10, false), (9, 12, true)]);
        // Signalled, not cancelled.
        assert_eq!(jobs.jobs[&9].state, JobState::Running as i32);
    }
    let out = run_as("scancel", &s, &["-b", "9"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "--batch needs --signal");
    ok(&run_as("scancel", &s, &["-u", "bob"], &[]).await);
    assert_eq!(
        node.jobs.lock().expect("lock").jobs[&1].state,
        JobState::Pending as i32
    );
    ok(&run_as("scancel", &s, &["-u", "alice", "-p", "cpu"], &[]).await);
    assert_eq!(
        node.jobs.lock().expect("lock").jobs[&1].state,
        JobState::Cancelled as i32
    );
    let out = run_as("scancel", &s, &[], &[]).await;
    assert_eq!(
        stderr(&out),
        "scancel: error: No job identification provided\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sbatch_options_in_slurm_words() {
    let (node, s) = seeded().await;
    let out = run_as("sbatch", &s, &["--wrap", "true", "--foo"], &[]).await;
    assert_eq!(
        stderr(&out),
        "sbatch: unrecognized option '--foo'\nTry \"sbatch --help\" for more information\n"
    );
    for (option, start) in [
        (
            "--signal=B:USR1@65536",
            "sbatch: error: invalid --signal \"B:USR1@65536\": seconds \"65536\" must be a number from 0 to 65535",
        ),
        (
            "--signal=R:USR1",
            "sbatch: error: invalid --signal \"R:USR1\": R: (signal at the reservation's end) is not supported by Berth",
        ),
        (
            "--begin=someday",
            "sbatch: error: invalid --begin \"someday\": expected HH:MM[:SS]",
        ),
        (
            "--dependency=afterok",
            "sbatch: error: --dependency: dependency \"afterok\": afterok needs at least one job id",
        ),
        (
            "--constraint=ib|nvlink",
            "sbatch: error: --constraint \"ib|nvlink\": '|' is not supported by Berth",
        ),
        (
            "--array=5-1",
            "sbatch: error: --array \"5-1\": range 5-1 goes down",
        ),
        (
            "--open-mode=truncate",
            "sbatch: error: --open-mode=truncate is not supported by Berth yet",
        ),
        (
            "--wckey=x",
            "sbatch: error: --wckey is not supported by Berth yet",
        ),
        ("-G0", "sbatch: error: invalid GPU count \"0\""),
    ] {
        let out = run_as("sbatch", &s, &["--wrap", "true", option], &[]).await;
        assert_eq!(out.status.code(), Some(1), "{option}");
        assert!(
            stderr(&out).starts_with(start),
            "{option}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        ok(&run_as(
            "sbatch",
            &s,
            &[
                "--parsable",
                "--wrap",
                "true",
                "-G",
                "a100:2",
                "--mem-per-cpu=1G",
                "-c",
                "4",
                "--open-mode=append"
            ],
            &[]
        )
        .await),
        "4\n"
    );
    let spec = node.jobs.lock().expect("lock").jobs[&4]
        .spec
        .clone()
        .expect("spec");
    assert_eq!(spec.gres, ["gpu:a100:2"]);
    assert_eq!((spec.cpus, spec.mem_mb), (4, 4096));
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert_eq!(
        ok(&run_as(
            "sbatch",
            &s,
            &[
                "--parsable",
                "--wrap",
                "true",
                "--dependency=afterok:1?afterany:2",
                "--begin=now+1hour",
                "--exclusive",
                "-C",
                "ib&nvlink",
                "--reservation=maint",
                "--preemptible",
                "--array=0-9%3",
            ],
            &[]
        )
        .await),
        "5\n"
    );
    let spec = node.jobs.lock().expect("lock").jobs[&5]
        .spec
        .clone()
        .expect("spec");
    assert_eq!(spec.dependency, "afterok:1?afterany:2");
    // An hour from when sbatch ran (between the two clock reads).
    let after_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(
        (before_ms + 3_600_000..=after_ms + 3_600_000).contains(&spec.begin_ms),
        "{}",
        spec.begin_ms
    );
    assert!(spec.exclusive && spec.preemptible);
    assert_eq!(spec.features, ["ib", "nvlink"]);
    assert_eq!(spec.reservation, "maint");
    assert_eq!(spec.array, "0-9%3");
}

#[tokio::test(flavor = "multi_thread")]
async fn sbatch_wait_exits_as_the_job_did() {
    let (node, s) = seeded().await;
    let finisher = node.clone();
    // The fake ends job 4 once it exists; sbatch --wait polls until then.
    let ended = tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            {
                let mut jobs = finisher.jobs.lock().expect("lock");
                if let Some(j) = jobs.jobs.get_mut(&4) {
                    j.state = JobState::Completed as i32;
                    j.exit_code = 3;
                    return true;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    });
    let out = run_as("sbatch", &s, &["--wait", "--wrap", "exit 3"], &[]).await;
    assert!(ended.await.expect("join"));
    assert_eq!(stdout(&out), "Submitted batch job 4\n");
    assert_eq!(out.status.code(), Some(3));
}

#[tokio::test(flavor = "multi_thread")]
async fn srun_inside_a_job_runs_tasks_with_step_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pattern = dir.path().join("task-%t.out");
    let out = run_as(
        "srun",
        "127.0.0.1:1",
        &[
            "-n",
            "3",
            "-o",
            pattern.to_str().expect("utf8"),
            "sh",
            "-c",
            "echo $SLURM_JOB_ID $SLURM_STEP_ID $SLURM_PROCID $SLURM_LOCALID $SLURM_NTASKS",
        ],
        &[("SLURM_JOB_ID", "42")],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    for task in 0..3 {
        let text =
            std::fs::read_to_string(dir.path().join(format!("task-{task}.out"))).expect("read");
        assert_eq!(text, format!("42 0 {task} {task} 3\n"));
    }
    let out = run_as(
        "srun",
        "127.0.0.1:1",
        &["sh", "-c", "exit 5"],
        &[("SLURM_JOB_ID", "42")],
    )
    .await;
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        stderr(&out),
        "srun: error: localhost: task 0: Exited with exit code 5\n"
    );
    // -l: every line starts with its task's number.
    let out = run_as(
        "srun",
        "127.0.0.1:1",
        &["-l", "-n", "2", "sh", "-c", "echo one; echo two >&2"],
        &[("SLURM_JOB_ID", "42")],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["0: one", "1: one"]);
    let mut lines: Vec<String> = stderr(&out).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["0: two", "1: two"]);
    // Outside a job srun and salloc ask the cluster for an allocation:
    // with none answering, one clear line and a failure.
    for (tool, args) in [
        ("srun", &["hostname"][..]),
        ("salloc", &["-N1", "true"][..]),
    ] {
        let out = run_as(tool, "127.0.0.1:1", args, &[]).await;
        assert_eq!(
            stderr(&out),
            format!("{tool}: error: no Berth server answered (tried 127.0.0.1:1)\n")
        );
        assert_eq!(out.status.code(), Some(1));
    }
    // Inside a job, an allocation's options are refused in words.
    let out = run_as(
        "srun",
        "127.0.0.1:1",
        &["-p", "gpu", "true"],
        &[("SLURM_JOB_ID", "42")],
    )
    .await;
    assert!(
        stderr(&out).starts_with(
            "srun: error: --partition asks for a new allocation; inside job 42 a step runs on the job's own"
        ),
        "{}",
        stderr(&out)
    );
    let out = run_as("sprio", "127.0.0.1:1", &["-n"], &[]).await;
    assert!(
        stderr(&out).starts_with("sprio: error: -n/--norm is not supported"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_from_the_config_file() {
    let (_node, s) = seeded().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("client.toml");
    std::fs::write(&config, format!("servers = [\"127.0.0.1:1\", \"{s}\"]\n")).expect("write");
    let run = |envs: Vec<(&'static str, String)>| {
        let mut command = Command::new(BERTH);
        command
            .args(["queue", "-h", "-o", "%i"])
            .env_remove("BERTH_SERVER")
            .env("HOME", dir.path())
            .stdin(Stdio::null());
        for (k, v) in envs {
            command.env(k, v);
        }
        command.output()
    };
    let config_env = ("BERTH_CONFIG", config.display().to_string());
    let out = run(vec![config_env.clone()]).await.expect("run");
    assert_eq!(ok(&out), "1\n");
    // The environment wins over the file.
    let out = run(vec![
        config_env.clone(),
        ("BERTH_SERVER", "127.0.0.1:1".into()),
    ])
    .await
    .expect("run");
    assert!(
        stderr(&out).contains("no Berth server answered (tried 127.0.0.1:1)"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&config, "server = \"x:1\"\n").expect("write");
    let out = run(vec![config_env]).await.expect("run");
    assert!(
        stderr(&out).starts_with("berth: error: client config"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("unknown field `server`"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn completions_and_man_pages() {
    let out = run_as(
        "berth",
        "127.0.0.1:1",
        &["completions", "bash", "--tool", "sacct"],
        &[],
    )
    .await;
    let text = ok(&out);
    assert!(text.contains("complete -F _sacct"), "{text}");
    assert!(text.contains("--parsable2"), "{text}");
    let dir = tempfile::tempdir().expect("tempdir");
    ok(&run_as(
        "berth",
        "127.0.0.1:1",
        &["man", dir.path().to_str().expect("utf8")],
        &[],
    )
    .await);
    let page = std::fs::read_to_string(dir.path().join("sinfo.1")).expect("sinfo.1");
    assert!(page.starts_with(".ie"), "{page}");
    assert!(page.contains("list\\-reasons"), "{page}");
    assert!(Path::new(&dir.path().join("berth-scontrol.1")).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn squeue_j_takes_array_ids() {
    let (node, s) = seeded().await;
    {
        let mut jobs = node.jobs.lock().expect("lock");
        for (task, id) in [20u64, 21, 22].into_iter().enumerate() {
            let state = if task == 0 {
                JobState::Running
            } else {
                JobState::Pending
            };
            let mut t = job(id, "arr", "alice", state);
            if let Some(spec) = t.spec.as_mut() {
                spec.array = "0-2".into();
                spec.array_job_id = 20;
                spec.array_task_id = task as u32;
                spec.array_task_count = 3;
                spec.array_task_max = 2;
            }
            jobs.jobs.insert(id, t);
        }
    }
    let squeue = |args: &'static [&'static str]| {
        let s = s.clone();
        async move { run_as("squeue", &s, args, &[]).await }
    };
    assert_eq!(
        ok(&squeue(&["-h", "-o", "%i %t", "-j", "20_1"]).await),
        "20_1 PD\n"
    );
    // The array's id is the whole array: pending tasks on one line, or one
    // line each with -r.
    assert_eq!(
        ok(&squeue(&["-h", "-o", "%i %t", "-j", "20"]).await),
        "20_0 R\n20_[1-2] PD\n"
    );
    assert_eq!(
        ok(&squeue(&["-h", "-r", "-o", "%i %A %t", "-j", "20_2,1"]).await),
        "20_2 22 PD\n1 1 PD\n"
    );
    let out = squeue(&["-h", "-j", "20_7"]).await;
    assert_eq!(
        stderr(&out),
        "squeue: error: invalid job id specified: 20_7\n"
    );
    let out = squeue(&["-h", "-j", "20_x"]).await;
    assert_eq!(out.status.code(), Some(1));
}
