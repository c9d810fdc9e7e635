//! Multi-host jobs on a real cluster (3 `berthd` processes, 3 real
//! `berth-agent`s of 4 CPUs each, real job processes): `sbatch -N 2`
//! starts on two hosts at once with Slurm's node list in the batch
//! script's environment on the first, holds both hosts' room while it
//! runs (a second 2-host job waits for Resources), and frees both when it
//! ends. Every wait is a condition with a deadline.

use std::path::Path;
use std::time::Duration;

use berth_chaos::harness::{read_or_empty, tool, wait_until, ClusterOptions, LocalCluster};
use berth_proto::api::JobState;

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

/// Submits a 2-host job of 3 CPUs per host through the CLI: it writes its
/// environment's node facts to `marker`, then waits for `release` (at
/// most a minute).
async fn submit_gang(cluster: &LocalCluster, dir: &Path, name: &str) -> u64 {
    let marker = dir.join(format!("{name}.env"));
    let release = dir.join(format!("{name}.release"));
    let script = format!(
        "echo \"$SLURM_JOB_NODELIST $SLURM_NNODES $SLURM_NODEID\" > {}; \
         for i in $(seq 600); do [ -e {} ] && exit 0; sleep 0.1; done; exit 3",
        marker.display(),
        release.display()
    );
    let workdir = dir.to_str().expect("utf-8 path");
    let out = cluster
        .berth_cli(&[
            "submit",
            "--parsable",
            "-D",
            workdir,
            "-J",
            name,
            "-N",
            "2",
            "-c",
            "3",
            "-t",
            "5",
            "--wrap",
            &script,
        ])
        .await;
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("job id from {out:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_host_job_runs_on_both_holds_both_and_frees_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 3,
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    let dir = tmp.path();

    let first = submit_gang(&cluster, dir, "g1").await;
    let job = cluster
        .wait_for_job(first, "running", DEADLINE, |j| {
            j.state == JobState::Running as i32
        })
        .await;
    assert_eq!(job.hosts.len(), 2, "{job:?}");
    assert_ne!(job.hosts[0], job.hosts[1]);
    let marker = dir.join("g1.env");
    wait_until("the batch script's marker", DEADLINE, || {
        !read_or_empty(&marker).is_empty()
    })
    .await;
    // The script runs once, on the first host, and sees both hosts.
    let nodelist = nodelist(&job.hosts);
    let first_hosts = job.hosts.clone();
    assert_eq!(
        read_or_empty(&marker).trim(),
        format!("{nodelist} 2 0"),
        "{job:?}"
    );

    // One host has 4 CPUs free and the other two 1 each: a second
    // 2-host job of 3 CPUs per host waits for Resources.
    let second = submit_gang(&cluster, dir, "g2").await;
    cluster
        .wait_for_job(second, "pending for Resources", DEADLINE, |j| {
            j.state == JobState::Pending as i32 && j.reason == "Resources"
        })
        .await;
    let queue = cluster
        .berth_cli(&["queue", "-j", &first.to_string()])
        .await;
    assert!(queue.contains(&format!(" 2 {nodelist}")), "{queue}");

    // The first ends: both its hosts are free again and the second starts.
    std::fs::write(dir.join("g1.release"), b"").expect("release g1");
    cluster
        .wait_for_job(first, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    let job = cluster
        .wait_for_job(second, "running", DEADLINE, |j| {
            j.state == JobState::Running as i32
        })
        .await;
    assert_eq!(job.hosts.len(), 2, "{job:?}");
    std::fs::write(dir.join("g2.release"), b"").expect("release g2");
    cluster
        .wait_for_job(second, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    let events = cluster.job_events(first).await;
    let allocated = format!("Allocated on {} (allocation ", first_hosts.join(","));
    assert!(
        events
            .iter()
            .any(|(kind, message)| kind == "allocated" && message.starts_with(&allocated)),
        "{events:?}"
    );
}

/// Slurm's compressed list of two of the harness's hosts
/// (`test-host-N`): `test-host-[1-2]` or `test-host-[1,3]`.
fn nodelist(hosts: &[String]) -> String {
    let mut numbers: Vec<u32> = hosts
        .iter()
        .filter_map(|h| h.strip_prefix("test-host-")?.parse().ok())
        .collect();
    numbers.sort_unstable();
    match numbers.as_slice() {
        [a, b] if b == &(a + 1) => format!("test-host-[{a}-{b}]"),
        [a, b] => format!("test-host-[{a},{b}]"),
        _ => panic!("two test hosts expected: {hosts:?}"),
    }
}

/// srun inside a 2-host job runs a step on both hosts: the batch host's
/// task is srun's own child, the other host's is started by that host's
/// agent, and every task's output comes back through srun into the job's
/// output file, with Slurm's step variables; each srun is a new step
/// (0, 1, ...). A failing remote task makes
/// srun fail with its exit code, named in srun's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srun_in_a_two_host_job_runs_a_task_on_each_host() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 2,
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    let dir = tmp.path();
    // srun is the berth binary called by that name, as an installed
    // Slurm-compatible PATH would have it.
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    std::os::unix::fs::symlink(tool("berth").expect("berth binary"), bin.join("srun"))
        .expect("srun link");
    let srun = bin.join("srun");
    let task = "echo task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME node $SLURM_NODEID step $SLURM_STEP_ID";
    let script = format!(
        "{srun} sh -c '{task}' && {srun} -n 3 sh -c '{task}'; \
         {srun} sh -c 'exit $((SLURM_PROCID * 4))'; echo srun exit $?",
        srun = srun.display()
    );
    let out = cluster
        .berth_cli(&[
            "submit",
            "--parsable",
            "-D",
            dir.to_str().expect("utf-8 path"),
            "-o",
            "steps-%j.out",
            "-N",
            "2",
            "-t",
            "5",
            "--wrap",
            &script,
        ])
        .await;
    let id: u64 = out
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("job id from {out:?}"));
    let job = cluster
        .wait_for_job(id, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32 || j.state == JobState::Failed as i32
        })
        .await;
    let output = read_or_empty(&dir.join(format!("steps-{id}.out")));
    assert_eq!(job.state, JobState::Completed as i32, "{job:?}\n{output}");
    let (h0, h1) = (&job.hosts[0], &job.hosts[1]);
    let mut lines: Vec<&str> = output.lines().filter(|l| l.starts_with("task ")).collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        vec![
            format!("task 0 of 2 on {h0} node 0 step 0"),
            format!("task 0 of 3 on {h0} node 0 step 1"),
            format!("task 1 of 2 on {h1} node 1 step 0"),
            format!("task 1 of 3 on {h0} node 0 step 1"),
            format!("task 2 of 3 on {h1} node 1 step 1"),
        ],
        "{output}"
    );
    assert!(
        output.contains(&format!(
            "srun: error: {h1}: task 1: Exited with exit code 4"
        )),
        "{output}"
    );
    assert!(output.contains("srun exit 4"), "{output}");
    // sacct shows each srun as a step of the job, as Slurm's does.
    let steps = cluster
        .sacct_steps(id, "JobID,JobName,State,ExitCode,NNodes")
        .await;
    assert_eq!(
        steps,
        [
            format!("{id}.batch|batch|COMPLETED|0:0|1"),
            format!("{id}.0|sh|COMPLETED|0:0|2"),
            format!("{id}.1|sh|COMPLETED|0:0|2"),
            format!("{id}.2|sh|FAILED|4:0|2"),
        ],
        "{output}"
    );
}
