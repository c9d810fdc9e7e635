//! Per-job cgroups (v2): each job runs in `PARENT/job_<job>_<alloc>.<agent>`
//! (`<agent>` tells apart agents sharing a machine and its cgroups), which
//! finds every process of the job (also those that left its process group
//! with setsid) and, where the memory and cpu controllers are delegated to
//! `PARENT`, limits it (`memory.max`, `cpu.max`).
//!
//! Where there is no writable cgroup2 hierarchy the agent says so once at
//! start and jobs run without one: they are then found by process group
//! and by the `BERTH_ALLOC_ID` variable every job process inherits (see
//! [`crate::procgroup::tagged_processes`]).

use std::io;
use std::path::{Path, PathBuf};

/// cgroup2's filesystem magic (statfs f_type).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Most pids read from one cgroup.procs.
pub const CGROUP_PROCS_MAX: usize = 65_536;
/// CPU period written into cpu.max, in µs (the kernel's default).
pub const CPU_PERIOD_US: u64 = 100_000;
/// Name of the parent under the cgroup2 mount when none is configured.
pub const DEFAULT_PARENT_NAME: &str = "berth";

/// How jobs are contained on this host, decided once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    pub parent: PathBuf,
    /// memory.max and cpu.max can be set in job cgroups.
    pub limits: bool,
    /// This agent's token in job cgroup names.
    pub instance: String,
}

/// Errors of cgroup operations.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0} is not in a cgroup2 filesystem")]
    NotCgroup2(PathBuf),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The first cgroup2 mount point in /proc/self/mounts.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mounts").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

fn is_cgroup2(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: zeroed statfs is a valid out-parameter; `c` is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC
}

impl Cgroups {
    /// Creates `parent` (in a cgroup2 filesystem) and delegates the memory
    /// and cpu controllers to its children where the hierarchy allows.
    pub fn setup(parent: &Path, instance: &str) -> Result<Cgroups, CgroupError> {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        if !is_cgroup2(parent) {
            return Err(CgroupError::NotCgroup2(parent.to_path_buf()));
        }
        let control = parent.join("cgroup.subtree_control");
        for c in ["+memory", "+cpu"] {
            // Refused when our parent has not delegated the controller;
            // what was enabled is read back below.
            let _ = std::fs::write(&control, c);
        }
        let enabled = std::fs::read_to_string(&control).map_err(io_err(&control))?;
        let has = |name: &str| enabled.split_whitespace().any(|w| w == name);
        Ok(Cgroups {
            parent: parent.to_path_buf(),
            limits: has("memory") && has("cpu"),
            instance: instance.to_string(),
        })
    }

    /// Decides once how jobs are contained, logging one line that says so.
    /// `configured`: `Some("")` turns cgroups off, `Some(path)` names the
    /// parent, `None` takes `berth` under the first cgroup2 mount.
    pub fn detect(configured: Option<&Path>, instance: &str) -> Option<Cgroups> {
        let parent = match configured {
            Some(p) if p.as_os_str().is_empty() => {
                tracing::info!("job cgroups turned off (cgroup_parent = \"\"); jobs are tracked by process group and environment tag, without memory/CPU limits");
                return None;
            }
            Some(p) => p.to_path_buf(),
            None => match cgroup2_mount() {
                Some(m) => m.join(DEFAULT_PARENT_NAME),
                None => {
                    tracing::warn!("no cgroup2 filesystem mounted; jobs run without a cgroup (tracked by process group and environment tag), without memory/CPU limits");
                    return None;
                }
            },
        };
        match Cgroups::setup(&parent, instance) {
            Ok(cg) if cg.limits => {
                tracing::info!(parent = %parent.display(), "jobs run in their own cgroup with memory.max and cpu.max limits");
                Some(cg)
            }
            Ok(cg) => {
                tracing::warn!(parent = %parent.display(), "jobs run in their own cgroup, but the memory and cpu controllers are not delegated there: no memory/CPU limits");
                Some(cg)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot use a cgroup for jobs; they are tracked by process group and environment tag, without memory/CPU limits");
                None
            }
        }
    }

    /// The cgroup of one allocation.
    pub fn job_path(&self, job_id: u64, alloc_id: u64) -> PathBuf {
        self.parent
            .join(format!("job_{job_id}_{alloc_id}.{}", self.instance))
    }

    /// Creates the allocation's cgroup with its limits (where available).
    pub fn create_job(
        &self,
        job_id: u64,
        alloc_id: u64,
        cpus: u32,
        mem_mb: u64,
    ) -> Result<PathBuf, CgroupError> {
        let path = self.job_path(job_id, alloc_id);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        if self.limits {
            if mem_mb > 0 {
                let f = path.join("memory.max");
                std::fs::write(&f, format!("{}\n", mem_mb.saturating_mul(1 << 20)))
                    .map_err(io_err(&f))?;
            }
            if cpus > 0 {
                let f = path.join("cpu.max");
                let quota = u64::from(cpus).saturating_mul(CPU_PERIOD_US);
                std::fs::write(&f, format!("{quota} {CPU_PERIOD_US}\n")).map_err(io_err(&f))?;
            }
        }
        Ok(path)
    }
}

/// Pids in the cgroup at `path` (empty when it is gone).
pub fn procs(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path.join("cgroup.procs"))
        .map(|t| {
            t.lines()
                .take(CGROUP_PROCS_MAX)
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Sends `sig` to every process in the cgroup. Returns the pids signalled.
pub fn signal_all(path: &Path, sig: i32) -> Vec<i32> {
    let pids = procs(path);
    for &pid in &pids {
        if pid > 1 {
            // SAFETY: kill(2) only sends a signal.
            unsafe { libc::kill(pid, sig) };
        }
    }
    pids
}

/// SIGKILLs everything in the cgroup (cgroup.kill where the kernel has it,
/// which also catches processes forking meanwhile). Returns the pids seen.
pub fn kill_all(path: &Path) -> Vec<i32> {
    let pids = procs(path);
    if std::fs::write(path.join("cgroup.kill"), "1").is_err() {
        signal_all(path, libc::SIGKILL);
    }
    pids
}

/// Removes an empty job cgroup; a cgroup that still has processes stays.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_not_a_cgroup() {
        let dir = tempfile::tempdir().unwrap();
        let err = Cgroups::setup(&dir.path().join("p"), "a1").unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup2(_)), "{err}");
        assert_eq!(Cgroups::detect(Some(Path::new("")), "a1"), None);
        assert_eq!(Cgroups::detect(Some(&dir.path().join("q")), "a1"), None);
    }

    #[test]
    fn job_paths_name_job_and_allocation() {
        let cg = Cgroups {
            parent: PathBuf::from("/sys/fs/cgroup/berth"),
            limits: false,
            instance: "a1".into(),
        };
        assert_eq!(
            cg.job_path(4, 9),
            PathBuf::from("/sys/fs/cgroup/berth/job_4_9.a1")
        );
        assert!(procs(Path::new("/nonexistent")).is_empty());
    }
}
