//! Runs a program to its end in blocking I/O on the calling thread,
//! capturing its stdout and stderr, killed at a deadline.
//!
//! The submission benchmarks start thousands of short processes a second
//! on the same cores as the systems they measure, so what the harness
//! spends per process is taken from both. Through the async runtime a
//! process cost two pipe registrations with the reactor, the child-exit
//! notification, wakeups across its worker threads and a timer; here it
//! is the spawn, one `poll` per read and `wait4`.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Most bytes kept of each stream; the rest is read and dropped, so a
/// chatty program cannot grow the harness without bound.
const CAPTURE_BYTES_MAX: usize = 1 << 20;

/// What a program did.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Why a program has no [`Finished`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program}: reading its output: {source}")]
    Read {
        program: String,
        source: std::io::Error,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Runs `command` with stdin from /dev/null until it exits, or kills it
/// (SIGKILL, then reaped) once `timeout` has passed.
pub fn run(mut command: Command, timeout: Duration) -> Result<Finished, RunError> {
    let program = Path::new(command.get_program()).display().to_string();
    let deadline = Instant::now() + timeout;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|source| RunError::Spawn {
        program: program.clone(),
        source,
    })?;
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        kill(&mut child);
        return Err(RunError::Read {
            program,
            source: std::io::Error::other("stdout or stderr was not piped"),
        });
    };
    match read_both(out, err, deadline) {
        Ok(Some((stdout, stderr))) => match child.wait() {
            Ok(status) => Ok(Finished {
                status,
                stdout,
                stderr,
            }),
            Err(source) => Err(RunError::Read { program, source }),
        },
        Ok(None) => {
            kill(&mut child);
            Err(RunError::Timeout(timeout))
        }
        Err(source) => {
            kill(&mut child);
            Err(RunError::Read { program, source })
        }
    }
}

fn kill(child: &mut Child) {
    // Already gone is fine: the wait reaps it either way.
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads both pipes to their ends; `None` when the deadline came first.
fn read_both(
    mut out: ChildStdout,
    mut err: ChildStderr,
    deadline: Instant,
) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let (mut out_open, mut err_open) = (true, true);
    // Each round reads at least one byte or ends a stream or the wait,
    // and a process writes a bounded amount before the deadline; the
    // deadline bounds the loop.
    while out_open || err_open {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let mut fds = [
            poll_fd(out_open.then(|| out.as_raw_fd())),
            poll_fd(err_open.then(|| err.as_raw_fd())),
        ];
        let timeout_ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a live array of two pollfd; a negative fd is
        // ignored by poll(2).
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 {
            out_open = read_some(&mut out, &mut stdout)?;
        }
        if fds[1].revents != 0 {
            err_open = read_some(&mut err, &mut stderr)?;
        }
    }
    Ok(Some((stdout, stderr)))
}

fn poll_fd(fd: Option<libc::c_int>) -> libc::pollfd {
    libc::pollfd {
        fd: fd.unwrap_or(-1),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// One read into `into` (up to its bound); false at the end of the stream.
fn read_some(stream: &mut impl Read, into: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                let room = CAPTURE_BYTES_MAX.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
                return Ok(true);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn both_streams_and_the_status_come_back() {
        let done = run(
            sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(done.stdout, b"out\n");
        assert_eq!(done.stderr, b"err\n");
        assert_eq!(done.status.code(), Some(3));
    }

    #[test]
    fn output_larger_than_a_pipe_is_read_whole() {
        // 200,000 bytes on each stream: more than a pipe holds, so a
        // reader that drained one stream before the other would hang.
        let done = run(
            sh("head -c 200000 /dev/zero; head -c 200000 /dev/zero >&2"),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(done.stdout.len(), 200_000);
        assert_eq!(done.stderr.len(), 200_000);
        assert!(done.status.success());
    }

    #[test]
    fn a_program_past_its_deadline_is_killed() {
        let since = Instant::now();
        let e = run(sh("exec sleep 30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, RunError::Timeout(_)), "{e}");
        assert!(since.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_missing_program_is_named() {
        let e = run(
            Command::new("/nonexistent/berth-no-such-program"),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.to_string().contains("berth-no-such-program"), "{e}");
    }
}
