//! Interactive allocations on a real cluster (3 `berthd`, 2 agents):
//! `srun` outside a job allocates hosts, runs one step on them through
//! their agents and releases them; `salloc` runs its command with the
//! allocation's variables, the `srun` inside starts steps on it, and the
//! command's exit code ends the job. Every wait has a deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_chaos::harness::{tool, ClusterOptions, LocalCluster};
use berth_proto::api::JobState;

const LEADER_DEADLINE: Duration = Duration::from_secs(30);
const DEADLINE: Duration = Duration::from_secs(60);

/// `srun` and `salloc`: the berth binary called by those names.
fn slurm_tools(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let berth = tool("berth").expect("berth binary");
    for name in ["srun", "salloc"] {
        std::os::unix::fs::symlink(&berth, bin.join(name)).expect("link");
    }
    (bin.join("srun"), bin.join("salloc"))
}

async fn run(
    cluster: &LocalCluster,
    program: &Path,
    args: &[&str],
    path: &Path,
) -> std::process::Output {
    let search = format!(
        "{}:{}",
        path.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(program)
            .args(args)
            .env("BERTH_SERVER", cluster.servers().join(","))
            .env("PATH", search)
            .env_remove("SLURM_JOB_ID")
            .env_remove("BERTH_NODELIST")
            .output(),
    )
    .await
    .expect("the command ends before the deadline")
    .expect("run the command")
}

/// The job id from "PROG: Granted job allocation N".
fn granted(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.split_once("Granted job allocation ").map(|(_, id)| id))
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("no grant in {stderr:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srun_and_salloc_outside_a_job_allocate_run_and_release() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let options = ClusterOptions {
        agents: 2,
        agent_cpus: 4,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::start_with_leader(tmp.path(), &options, LEADER_DEADLINE).await;
    let (srun, salloc) = slurm_tools(tmp.path());
    let bin = srun.parent().expect("bin dir").to_path_buf();

    // srun alone: a 2-host allocation for one step, released after it.
    let out = run(
        &cluster,
        &srun,
        &[
            "-N",
            "2",
            "-t",
            "5",
            "sh",
            "-c",
            "echo task $SLURM_PROCID on $SLURMD_NODENAME",
        ],
        &bin,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let id = granted(&stderr);
    let job = cluster
        .wait_for_job(id, "completed", DEADLINE, |j| {
            j.state == JobState::Completed as i32
        })
        .await;
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        vec![
            format!("task 0 on {}", job.hosts[0]),
            format!("task 1 on {}", job.hosts[1]),
        ],
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("srun: Relinquishing job allocation {id}")),
        "{stderr}"
    );

    // salloc: its command runs here with the allocation, srun inside runs
    // steps on it (numbered by the batch host's agent), and the command's
    // exit code ends the job.
    let out = run(
        &cluster,
        &salloc,
        &[
            "-N",
            "2",
            "sh",
            "-c",
            "echo nodes $SLURM_JOB_NUM_NODES; srun -n 2 sh -c 'echo step $SLURM_STEP_ID task $SLURM_PROCID'; \
             srun -N 1 true; srun sh -c 'echo step $SLURM_STEP_ID'; exit 3",
        ],
        &bin,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{stderr}\n{stdout}");
    let id = granted(&stderr);
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "nodes 2",
            "step 0 task 0",
            "step 0 task 1",
            "step 2",
            "step 2"
        ],
        "{stderr}"
    );
    let job = cluster
        .wait_for_job(id, "failed", DEADLINE, |j| {
            j.state == JobState::Failed as i32
        })
        .await;
    assert_eq!(job.exit_code, 3, "{job:?}");
    // sacct lists salloc's steps (its agent reports them, so they may
    // trail the release a little), and no batch step: none ran.
    let want = [
        format!("{id}.0|sh|COMPLETED|0:0|2"),
        format!("{id}.1|true|COMPLETED|0:0|1"),
        format!("{id}.2|sh|COMPLETED|0:0|2"),
    ];
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let steps = cluster
            .sacct_steps(id, "JobID,JobName,State,ExitCode,NNodes")
            .await;
        if steps == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sacct never showed the steps: {steps:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
