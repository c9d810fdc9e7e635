//! The job shim's launch gate: it runs the job only after the agent says
//! the job is recorded, and runs nothing when the agent is gone first.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

const SHIM: &str = env!("CARGO_BIN_EXE_berth-job-shim");

/// A pipe: (read end, write end), both close-on-exec.
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills both descriptors on success.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: fresh descriptors we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Starts the shim on `script` with an exit file and the gate's read end;
/// returns the child and the gate's write end.
fn start_shim(dir: &Path, script: &str) -> (std::process::Child, OwnedFd) {
    let exit_file = File::create(dir.join("exit")).expect("exit file");
    let (gate_rx, gate_tx) = pipe();
    let (exit_fd, gate_fd) = (exit_file.as_raw_fd(), gate_rx.as_raw_fd());
    let mut cmd = Command::new(SHIM);
    cmd.arg(exit_fd.to_string())
        .arg(gate_fd.to_string())
        .arg("/bin/sh")
        .arg("-c")
        .arg(script);
    // SAFETY: fcntl on descriptors that stay open until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            for fd in [exit_fd, gate_fd] {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn shim");
    drop(gate_rx);
    drop(exit_file);
    (child, gate_tx)
}

fn wait(mut child: std::process::Child) -> ExitStatus {
    child.wait().expect("wait shim")
}

#[test]
fn an_opened_gate_runs_the_job_and_records_its_exit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let (child, gate_tx) = start_shim(dir.path(), &format!("touch {}; exit 7", marker.display()));
    // Not before the gate opens.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!marker.exists(), "the job ran before the gate opened");
    File::from(gate_tx).write_all(b"g").expect("open the gate");
    let status = wait(child);
    assert_eq!(status.code(), Some(7));
    assert!(marker.exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("exit")).expect("exit file"),
        "exit 7\n"
    );
}

#[test]
fn a_gate_closed_unopened_runs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let (child, gate_tx) = start_shim(dir.path(), &format!("touch {}", marker.display()));
    // The agent dies before it recorded the job: its end of the pipe closes.
    drop(gate_tx);
    let status = wait(child);
    assert_eq!(status.code(), Some(126));
    assert!(
        !marker.exists(),
        "the job ran although the agent never opened the gate"
    );
    let exit = std::fs::read_to_string(dir.path().join("exit")).expect("exit file");
    assert!(
        exit.starts_with("launch-error the agent ended before it recorded the job"),
        "{exit}"
    );
}

/// Whether `pid` has a handler for SIGTERM (SigCgt in /proc/PID/status).
fn catches_sigterm(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGTERM - 1)) != 0)
}

#[test]
fn a_job_stopped_before_its_gate_opened_never_runs_and_ends_by_that_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let (child, gate_tx) = start_shim(dir.path(), &format!("touch {}", marker.display()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !catches_sigterm(child.id()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the shim never set its handlers"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(i32::try_from(child.id()).expect("pid"), libc::SIGTERM) };
    File::from(gate_tx).write_all(b"g").expect("open the gate");
    let status = wait(child);
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(
        !marker.exists(),
        "a job stopped before it started ran anyway"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("exit")).expect("exit file"),
        format!("signal {}\n", libc::SIGTERM)
    );
}
