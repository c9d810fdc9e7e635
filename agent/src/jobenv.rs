//! The environment a job sees: Berth's own variables and the Slurm ones
//! batch scripts read (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST` in hostlist
//! form, `SLURM_RESTART_COUNT`, ...), plus the GPU and emulator units the
//! allocation holds. Pure: the runner passes the result to the process.

use berth_proto::agent::Assignment;

/// Most hosts written into a node list; the placement never has more.
pub const NODELIST_HOSTS_MAX: usize = 65_536;

/// What the environment is built from, besides the assignment.
#[derive(Debug, Clone, Copy)]
pub struct EnvFacts<'a> {
    /// This host's name (the node list when the assignment has none).
    pub host: &'a str,
    /// The job's name (its own, or the first word of the command).
    pub job_name: &'a str,
    /// The job's working directory, also `SLURM_SUBMIT_DIR`: the agent
    /// does not learn where sbatch ran.
    pub work_dir: &'a str,
    /// The allocation's step credential (see `berth_auth::step`), for a
    /// multi-host job's srun; `None` on a cluster without a secret.
    pub step_credential: Option<&'a str>,
}

/// The variables, in the order they are set; later ones win over the
/// job's own `--export` environment, which is applied first.
pub fn job_env(a: &Assignment, facts: &EnvFacts<'_>) -> Vec<(String, String)> {
    let hosts: Vec<&str> = if a.hosts.is_empty() {
        vec![facts.host]
    } else {
        a.hosts
            .iter()
            .take(NODELIST_HOSTS_MAX)
            .map(String::as_str)
            .collect()
    };
    let node_id = hosts.iter().position(|h| *h == facts.host).unwrap_or(0);
    let spec = a.spec.clone().unwrap_or_default();
    let cpus_on_node = if a.cpus > 0 { a.cpus } else { spec.cpus.max(1) };
    let cpus_per_task = spec.cpus.max(1);
    let job_id = a.job_id.to_string();
    let nodelist = hostlist(&hosts);
    let mut env: Vec<(String, String)> = Vec::with_capacity(32);
    let mut set = |k: &str, v: String| env.push((k.to_string(), v));
    set("BERTH_JOB_ID", job_id.clone());
    set("BERTH_ALLOC_ID", a.alloc_id.to_string());
    set("BERTH_JOB_NAME", facts.job_name.to_string());
    set("BERTH_NODELIST", hosts.join(","));
    set("BERTH_CPUS", cpus_on_node.to_string());
    set("SLURM_JOB_ID", job_id.clone());
    set("SLURM_JOBID", job_id);
    set("SLURM_JOB_NAME", facts.job_name.to_string());
    set("SLURM_JOB_USER", spec.user.clone());
    set("SLURM_JOB_NODELIST", nodelist.clone());
    set("SLURM_NODELIST", nodelist);
    set("SLURM_JOB_NUM_NODES", hosts.len().to_string());
    set("SLURM_NNODES", hosts.len().to_string());
    set("SLURM_NODEID", node_id.to_string());
    // One task per node: the job spec carries no task count.
    set("SLURM_NTASKS", hosts.len().to_string());
    set("SLURM_NPROCS", hosts.len().to_string());
    set("SLURM_CPUS_PER_TASK", cpus_per_task.to_string());
    set("SLURM_CPUS_ON_NODE", cpus_on_node.to_string());
    if a.mem_mb > 0 {
        set("SLURM_MEM_PER_NODE", a.mem_mb.to_string());
    }
    set("SLURM_SUBMIT_DIR", facts.work_dir.to_string());
    set("SLURM_SUBMIT_HOST", hosts[0].to_string());
    set("SLURMD_NODENAME", facts.host.to_string());
    set("SLURM_RESTART_COUNT", a.restart_count.to_string());
    if spec.array_job_id != 0 {
        set("SLURM_ARRAY_JOB_ID", spec.array_job_id.to_string());
        set("SLURM_ARRAY_TASK_ID", spec.array_task_id.to_string());
        set("SLURM_ARRAY_TASK_COUNT", spec.array_task_count.to_string());
        set("SLURM_ARRAY_TASK_MIN", spec.array_task_min.to_string());
        set("SLURM_ARRAY_TASK_MAX", spec.array_task_max.to_string());
    }
    for (k, v) in device_env(&a.gpu_indices) {
        set(k, v);
    }
    if a.emulator_units > 0 {
        set("BERTH_EMULATOR_UNITS", a.emulator_units.to_string());
        set("BERTH_EMULATOR_KIND", a.emulator_kind.clone());
    }
    let agents = step_agents(&hosts, &a.step_addrs);
    if !agents.is_empty() {
        // Where srun numbers its steps and starts their tasks.
        set("BERTH_STEP_AGENTS", agents);
        if let Some(credential) = facts.step_credential {
            set("BERTH_STEP_CREDENTIAL", credential.to_string());
        }
    }
    env
}

/// The variables that name the GPU devices an allocation holds on this
/// host (none when it holds none).
pub const DEVICE_VARS: [&str; 5] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "SLURM_JOB_GPUS",
];

/// [`DEVICE_VARS`] set to `gpu_indices` ("1,3").
pub fn device_env(gpu_indices: &[u32]) -> Vec<(&'static str, String)> {
    if gpu_indices.is_empty() {
        return Vec::new();
    }
    let list = gpu_indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    DEVICE_VARS.iter().map(|k| (*k, list.clone())).collect()
}

/// `HOST=ADDR,...` for every host with a step address, in node order.
fn step_agents(hosts: &[&str], addrs: &[String]) -> String {
    hosts
        .iter()
        .zip(addrs)
        .filter(|(_, addr)| !addr.is_empty())
        .map(|(host, addr)| format!("{host}={addr}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Slurm's hostlist form: `gpu[01-03,07],login1`. Names are grouped by
/// their prefix before a trailing number; numbers keep their zero padding
/// and runs of consecutive numbers of the same width become ranges. Order
/// of first appearance is kept between groups; a group is sorted.
pub fn hostlist(hosts: &[&str]) -> String {
    // (prefix, width of padded digits or 0, numbers); names without a
    // trailing number stand alone.
    let mut groups: Vec<(String, usize, Vec<u64>)> = Vec::new();
    let mut plain: Vec<(usize, String)> = Vec::new();
    let mut order: Vec<(bool, usize)> = Vec::new();
    for &h in hosts.iter().take(NODELIST_HOSTS_MAX) {
        let digits = h.len() - h.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, num) = h.split_at(h.len() - digits);
        let parsed = if digits == 0 || digits > 18 {
            None
        } else {
            num.parse::<u64>().ok()
        };
        match parsed {
            None => {
                if !plain.iter().any(|(_, p)| p == h) {
                    order.push((false, plain.len()));
                    plain.push((plain.len(), h.to_string()));
                }
            }
            Some(n) => {
                // Padded numbers ("01") only join groups of the same width.
                let width = if num.starts_with('0') && digits > 1 {
                    digits
                } else {
                    0
                };
                // An unpadded number as wide as a padded group prints
                // the same within it ("gpu10" joins "gpu01").
                match groups.iter_mut().position(|(p, w, _)| {
                    p == prefix && (*w == width || (width == 0 && *w == digits))
                }) {
                    Some(i) => groups[i].2.push(n),
                    None => {
                        order.push((true, groups.len()));
                        groups.push((prefix.to_string(), width, vec![n]));
                    }
                }
            }
        }
    }
    let mut parts = Vec::with_capacity(order.len());
    for (is_group, i) in order {
        if !is_group {
            parts.push(plain[i].1.clone());
            continue;
        }
        let (prefix, width, nums) = &mut groups[i];
        nums.sort_unstable();
        nums.dedup();
        let fmt = |n: u64| format!("{n:0width$}", width = *width);
        if nums.len() == 1 {
            parts.push(format!("{prefix}{}", fmt(nums[0])));
            continue;
        }
        let mut ranges = Vec::new();
        let mut start = nums[0];
        let mut prev = nums[0];
        for &n in nums.iter().skip(1).chain(std::iter::once(&u64::MAX)) {
            if n != u64::MAX && n == prev + 1 {
                prev = n;
                continue;
            }
            if start == prev {
                ranges.push(fmt(start));
            } else {
                ranges.push(format!("{}-{}", fmt(start), fmt(prev)));
            }
            start = n;
            prev = n;
        }
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
        env.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn hostlist_forms() {
        assert_eq!(hostlist(&["h1"]), "h1");
        assert_eq!(hostlist(&["h1", "h2"]), "h[1-2]");
        assert_eq!(hostlist(&["h3", "h1", "h2", "h7"]), "h[1-3,7]");
        assert_eq!(
            hostlist(&["gpu01", "gpu02", "gpu03", "gpu10"]),
            "gpu[01-03,10]"
        );
        assert_eq!(hostlist(&["login", "n1", "n1"]), "login,n1");
        assert_eq!(hostlist(&["a1", "b2", "a2"]), "a[1-2],b2");
        assert_eq!(hostlist(&["n9", "n10"]), "n[9-10]");
        assert_eq!(hostlist(&[]), "");
        assert_eq!(hostlist(&["test-host-1", "test-host-2"]), "test-host-[1-2]");
    }

    #[test]
    fn slurm_variables_gpus_and_emulators() {
        let a = Assignment {
            job_id: 42,
            alloc_id: 7,
            spec: Some(JobSpec {
                user: "ada".into(),
                cpus: 4,
                ..Default::default()
            }),
            cpus: 4,
            mem_mb: 2048,
            hosts: vec!["n1".into(), "n2".into()],
            step_addrs: vec!["10.0.0.1:6818".into(), "10.0.0.2:6818".into()],
            gpu_indices: vec![1, 3],
            emulator_units: 2,
            emulator_kind: "zebu".into(),
            restart_count: 2,
            ..Default::default()
        };
        let env = job_env(
            &a,
            &EnvFacts {
                host: "n2",
                job_name: "train",
                work_dir: "/scratch/ada",
                step_credential: Some("c0ffee"),
            },
        );
        let want = [
            ("SLURM_JOB_ID", "42"),
            ("BERTH_JOB_ID", "42"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
            ("SLURM_JOB_NUM_NODES", "2"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_CPUS_PER_TASK", "4"),
            ("SLURM_SUBMIT_DIR", "/scratch/ada"),
            ("SLURM_RESTART_COUNT", "2"),
            ("SLURM_MEM_PER_NODE", "2048"),
            ("CUDA_VISIBLE_DEVICES", "1,3"),
            ("ROCR_VISIBLE_DEVICES", "1,3"),
            ("HIP_VISIBLE_DEVICES", "1,3"),
            ("BERTH_EMULATOR_UNITS", "2"),
            ("BERTH_EMULATOR_KIND", "zebu"),
            ("BERTH_ALLOC_ID", "7"),
            ("BERTH_STEP_AGENTS", "n1=10.0.0.1:6818,n2=10.0.0.2:6818"),
            ("BERTH_STEP_CREDENTIAL", "c0ffee"),
        ];
        for (k, v) in want {
            assert_eq!(get(&env, k), Some(v), "{k}");
        }
        // No array job: no array variables.
        assert_eq!(get(&env, "SLURM_ARRAY_JOB_ID"), None);
    }

    #[test]
    fn array_tasks_get_slurms_array_variables() {
        let a = Assignment {
            job_id: 14,
            spec: Some(JobSpec {
                array_job_id: 12,
                array_task_id: 5,
                array_task_count: 3,
                array_task_min: 1,
                array_task_max: 5,
                ..Default::default()
            }),
            ..Default::default()
        };
        let env = job_env(
            &a,
            &EnvFacts {
                host: "h",
                job_name: "arr",
                work_dir: "/tmp",
                step_credential: None,
            },
        );
        for (k, v) in [
            ("SLURM_JOB_ID", "14"),
            ("SLURM_ARRAY_JOB_ID", "12"),
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "5"),
        ] {
            assert_eq!(get(&env, k), Some(v), "{k}");
        }
    }

    #[test]
    fn no_gpus_no_device_variables() {
        let a = Assignment {
            job_id: 1,
            spec: Some(JobSpec::default()),
            ..Default::default()
        };
        let env = job_env(
            &a,
            &EnvFacts {
                host: "h",
                job_name: "x",
                work_dir: "/",
                step_credential: None,
            },
        );
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), None);
        assert_eq!(get(&env, "BERTH_EMULATOR_UNITS"), None);
        assert_eq!(get(&env, "SLURM_JOB_NODELIST"), Some("h"));
        assert_eq!(get(&env, "SLURM_RESTART_COUNT"), Some("0"));
    }
}
