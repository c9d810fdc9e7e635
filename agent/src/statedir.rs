//! The agent's state directory: one record per allocation it launched,
//! written before the start is reported (temporary file, fsync, rename,
//! fsync of the directory), removed once the cluster has the exit report.
//! A restarted agent reads them back to re-adopt jobs still running and to
//! report the exits of jobs that ended while it was down.
//!
//! Next to each record, the job shim writes the job's exit status
//! (`alloc-N.exit`: `exit CODE` or `signal SIG`), so the real status is
//! known even when the agent is not the job's parent any more.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Most records read back at start (the allocation table's capacity).
pub const RECORDS_MAX: usize = crate::supervisor::TABLE_CAPACITY_ALLOCS;
/// Largest record file read, in bytes.
pub const RECORD_BYTES_MAX: u64 = 64 * 1024;
/// Largest exit file read, in bytes.
pub const EXIT_FILE_BYTES_MAX: u64 = 4 * 1024;
/// A step counter file holds one number.
const STEPS_FILE_BYTES_MAX: u64 = 32;
/// Directory entries one sweep of step counters looks at, at most.
pub const STEPS_SWEEP_MAX: usize = 100_000;

/// One launched allocation, as needed to find and watch it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub host: String,
    pub job_id: u64,
    pub alloc_id: u64,
    /// The job's leader (the shim), also its process group id.
    pub pid: i32,
    pub pgid: i32,
    /// Field 22 of /proc/PID/stat at launch (clock ticks since boot): with
    /// the pid, it tells our process from a later one with the same pid.
    pub start_ticks: u64,
    /// Wall clock at launch, ms since the epoch (for people reading it).
    pub started_ms: u64,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The job's cgroup; empty when it runs without one.
    pub cgroup: PathBuf,
    pub stop_grace_s: u64,
}

/// How a job ended, as its shim recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitRecord {
    Code(i32),
    Signal(i32),
}

impl ExitRecord {
    /// Parses `exit N` / `signal N`; anything else (a torn or empty file)
    /// is no status.
    pub fn parse(text: &str) -> Option<ExitRecord> {
        let mut words = text.split_whitespace();
        let kind = words.next()?;
        let n: i32 = words.next()?.parse().ok()?;
        match kind {
            "exit" => Some(ExitRecord::Code(n)),
            "signal" if n > 0 => Some(ExitRecord::Signal(n)),
            _ => None,
        }
    }

    pub fn to_line(self) -> String {
        match self {
            ExitRecord::Code(n) => format!("exit {n}\n"),
            ExitRecord::Signal(n) => format!("signal {n}\n"),
        }
    }
}

/// Errors of the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("state directory {0} is writable by other users; make it 0700 and owned by the agent's user")]
    Insecure(PathBuf),
    #[error("cannot encode record: {0}")]
    Encode(String),
}

/// The directory of one host's records.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StateDirError + '_ {
    move |source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl StateDir {
    /// Opens (creating, mode 0700) the directory. One writable by other
    /// users is refused: a record names processes the agent will signal.
    pub fn open(dir: &Path) -> Result<StateDir, StateDirError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_at(dir))?;
        let meta = std::fs::metadata(dir).map_err(io_at(dir))?;
        if meta.mode() & 0o022 != 0 {
            return Err(StateDirError::Insecure(dir.to_path_buf()));
        }
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A token naming this agent among those sharing the machine (its
    /// state directory's inode), the same across its restarts.
    pub fn instance(&self) -> String {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.dir).map_or_else(|_| "0".to_string(), |m| format!("{:x}", m.ino()))
    }

    fn record_path(&self, alloc_id: u64) -> PathBuf {
        self.dir.join(format!("alloc-{alloc_id}.toml"))
    }

    /// Where the shim of `alloc_id` writes the exit status.
    pub fn exit_path(&self, alloc_id: u64) -> PathBuf {
        self.dir.join(format!("alloc-{alloc_id}.exit"))
    }

    /// Writes `record` durably: a crash leaves the old record or the new
    /// one, never a torn one.
    pub fn write(&self, record: &Record) -> Result<(), StateDirError> {
        let text = toml::to_string(record).map_err(|e| StateDirError::Encode(e.to_string()))?;
        let path = self.record_path(record.alloc_id);
        let tmp = self.dir.join(format!("alloc-{}.toml.tmp", record.alloc_id));
        let mut f = File::create(&tmp).map_err(io_at(&tmp))?;
        f.write_all(text.as_bytes()).map_err(io_at(&tmp))?;
        f.sync_all().map_err(io_at(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(io_at(&path))?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<(), StateDirError> {
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_at(&self.dir))
    }

    /// Creates (empty) the exit file of `alloc_id` and returns it open for
    /// writing, for the shim to inherit.
    pub fn create_exit_file(&self, alloc_id: u64) -> Result<File, StateDirError> {
        let path = self.exit_path(alloc_id);
        File::create(&path).map_err(io_at(&path))
    }

    /// The status the shim of `alloc_id` recorded, if any.
    pub fn read_exit(&self, alloc_id: u64) -> Option<ExitRecord> {
        read_bounded(&self.exit_path(alloc_id), EXIT_FILE_BYTES_MAX)
            .ok()
            .and_then(|t| ExitRecord::parse(&t))
    }

    /// The launch error the job's pre-exec step recorded, if any.
    pub fn read_launch_error(&self, alloc_id: u64) -> Option<String> {
        let text = read_bounded(&self.exit_path(alloc_id), EXIT_FILE_BYTES_MAX).ok()?;
        text.strip_prefix("launch-error ")
            .map(|s| s.trim_end().to_string())
    }

    fn steps_path(&self, alloc_id: u64) -> PathBuf {
        self.dir.join(format!("alloc-{alloc_id}.steps"))
    }

    /// The next srun step id of `alloc_id` this host handed out before, if
    /// it numbered any (a restarted agent goes on from it).
    pub fn read_next_step(&self, alloc_id: u64) -> Option<u32> {
        read_bounded(&self.steps_path(alloc_id), STEPS_FILE_BYTES_MAX)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    }

    /// Records that `alloc_id`'s next step id is `next`: replaced whole
    /// (write and rename), not synced: it survives the agent's crash, which
    /// is what it is for; a machine crash ends the allocation anyway.
    pub fn write_next_step(&self, alloc_id: u64, next: u32) -> Result<(), StateDirError> {
        let path = self.steps_path(alloc_id);
        let tmp = self.dir.join(format!("alloc-{alloc_id}.steps.tmp"));
        std::fs::write(&tmp, format!("{next}\n")).map_err(io_at(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_at(&path))
    }

    /// Removes the step counters of every allocation not in `live`; at
    /// most [`STEPS_SWEEP_MAX`] directory entries are looked at.
    pub fn forget_steps_except(&self, live: &std::collections::BTreeSet<u64>) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten().take(STEPS_SWEEP_MAX) {
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("alloc-"))
                .and_then(|n| n.strip_suffix(".steps"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if !live.contains(&id) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Forgets `alloc_id`: its record, exit file and step counter.
    pub fn remove(&self, alloc_id: u64) -> Result<(), StateDirError> {
        for path in [
            self.record_path(alloc_id),
            self.exit_path(alloc_id),
            self.steps_path(alloc_id),
        ] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(&path)(e)),
            }
        }
        self.sync_dir()
    }

    /// Every readable record for `host`, by alloc id; unreadable ones are
    /// logged and left for a person to look at.
    pub fn load(&self, host: &str) -> Result<Vec<Record>, StateDirError> {
        let mut records = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(io_at(&self.dir))?;
        for entry in entries {
            let entry = entry.map_err(io_at(&self.dir))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with("alloc-") && name.ends_with(".toml")) {
                continue;
            }
            if records.len() >= RECORDS_MAX {
                tracing::warn!(
                    max = RECORDS_MAX,
                    "more allocation records than the table holds; the rest are ignored"
                );
                break;
            }
            let path = entry.path();
            let parsed = read_bounded(&path, RECORD_BYTES_MAX)
                .map_err(|e| e.to_string())
                .and_then(|t| toml::from_str::<Record>(&t).map_err(|e| e.to_string()));
            match parsed {
                Ok(r) if r.host == host => records.push(r),
                Ok(r) => {
                    tracing::warn!(path = %path.display(), record_host = %r.host, host, "allocation record of another host ignored")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable allocation record ignored")
                }
            }
        }
        records.sort_by_key(|r| r.alloc_id);
        Ok(records)
    }
}

fn read_bounded(path: &Path, max: u64) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    File::open(path)?.take(max).read_to_string(&mut text)?;
    Ok(text)
}

/// Field 22 of /proc/PID/stat (start time in clock ticks since boot) and
/// whether the process is a zombie; None when there is no such process.
pub fn proc_start(pid: i32) -> Option<(u64, bool)> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; fields resume
    // after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    // After the state (field 3), start time is field 22: 18 more.
    let start: u64 = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z" || state == "X"))
}

/// The process group of `pid` (field 5 of /proc/PID/stat).
pub fn proc_pgid(pid: i32) -> Option<i32> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    // state, ppid, pgrp
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// True while `pid` is the process that started at `start_ticks` and has
/// not exited.
pub fn alive(pid: i32, start_ticks: u64) -> bool {
    matches!(proc_start(pid), Some((s, false)) if s == start_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(alloc_id: u64) -> Record {
        Record {
            host: "h1".into(),
            job_id: 3,
            alloc_id,
            pid: 1234,
            pgid: 1234,
            start_ticks: 99,
            started_ms: 1,
            stdout_path: "/o".into(),
            stderr_path: "/e".into(),
            cgroup: PathBuf::new(),
            stop_grace_s: 30,
        }
    }

    #[test]
    fn records_round_trip_and_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let sd = StateDir::open(&tmp.path().join("s")).unwrap();
        sd.write(&record(7)).unwrap();
        sd.write(&record(5)).unwrap();
        let mut other = record(9);
        other.host = "h2".into();
        sd.write(&other).unwrap();
        std::fs::write(sd.path().join("alloc-11.toml"), "garbage =").unwrap();
        let got = sd.load("h1").unwrap();
        assert_eq!(got, vec![record(5), record(7)]);
        std::fs::write(sd.exit_path(7), "signal 15\n").unwrap();
        assert_eq!(sd.read_exit(7), Some(ExitRecord::Signal(15)));
        sd.remove(7).unwrap();
        assert!(!sd.exit_path(7).exists());
        assert_eq!(sd.load("h1").unwrap(), vec![record(5)]);
    }

    #[test]
    fn exit_lines_parse() {
        assert_eq!(ExitRecord::parse("exit 3\n"), Some(ExitRecord::Code(3)));
        assert_eq!(ExitRecord::parse("signal 9"), Some(ExitRecord::Signal(9)));
        assert_eq!(ExitRecord::parse(""), None);
        assert_eq!(ExitRecord::parse("exi"), None);
        assert_eq!(ExitRecord::parse("signal 0"), None);
        assert_eq!(ExitRecord::parse("launch-error x"), None);
        for r in [ExitRecord::Code(0), ExitRecord::Signal(15)] {
            assert_eq!(ExitRecord::parse(&r.to_line()), Some(r));
        }
    }

    #[test]
    fn insecure_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("s");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            StateDir::open(&d),
            Err(StateDirError::Insecure(_))
        ));
    }

    #[test]
    fn own_process_is_alive_and_others_are_not() {
        let me = std::process::id() as i32;
        let (start, zombie) = proc_start(me).unwrap();
        assert!(!zombie);
        assert!(alive(me, start));
        assert!(!alive(me, start + 1));
        assert!(!alive(0, start));
        // SAFETY: getpgrp has no preconditions.
        assert_eq!(proc_pgid(me), Some(unsafe { libc::getpgrp() }));
    }
}
