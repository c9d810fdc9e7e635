//! `berth-job-shim EXIT_FD GATE_FD PROGRAM [ARG...]`: the leader of every
//! job's process group. It waits until the agent opens the launch gate
//! (one byte on GATE_FD, sent once the job's record is durable), runs
//! PROGRAM as its child, waits for it, and writes how it ended to file
//! descriptor EXIT_FD (`exit CODE` or `signal SIG`, then fsync), so the
//! exit status survives an agent that restarted meanwhile and is no longer
//! the job's parent.
//!
//! End-of-file on GATE_FD means the agent died before it recorded the job:
//! nobody could find the job again, so the shim exits without running it.
//! A stop signal that arrives before the job started ends it as killed by
//! that signal, without running it.
//!
//! The shim catches (does not ignore) the stop signals: the agent signals
//! the whole process group, the child takes the signal with its default
//! disposition, and the shim stays to record the child's end. Only SIGKILL
//! ends the shim early; the agent then knows it sent it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

/// Signals the shim outlives (the job itself gets them as usual).
const CAUGHT_SIGNALS: [i32; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// The last stop signal the shim caught (0: none since last looked).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_signal(sig: libc::c_int) {
    CAUGHT.store(sig, Ordering::SeqCst);
}

fn signal_set(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &sig in signals {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let fd_arg = |i: usize| -> Option<i32> {
        args.get(i)
            .and_then(|a| a.to_str())
            .and_then(|a| a.parse().ok())
            .filter(|fd| *fd > 2)
    };
    let (Some(fd), Some(gate_fd), Some(program)) = (fd_arg(1), fd_arg(2), args.get(3)) else {
        eprintln!("usage: berth-job-shim EXIT_FD GATE_FD PROGRAM [ARG...]");
        return ExitCode::from(2);
    };
    // SAFETY: the agent handed us these descriptors (exit file open for
    // writing, gate open for reading); we own them from here on. CLOEXEC
    // keeps them from the job.
    let (mut exit_file, gate) = unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(gate_fd, libc::F_SETFD, libc::FD_CLOEXEC);
        (File::from_raw_fd(fd), File::from_raw_fd(gate_fd))
    };
    for sig in CAUGHT_SIGNALS {
        // SAFETY: the handler only stores into an atomic, which is
        // async-signal-safe; exec resets caught signals to their default
        // in the child.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = note_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    if !gate_opened(gate) {
        let _ = writeln!(
            exit_file,
            "launch-error the agent ended before it recorded the job; the job was not started"
        );
        let _ = exit_file.sync_all();
        return ExitCode::from(126);
    }
    // From the last look at CAUGHT to the fork, a stop signal must not slip
    // between the two: it stays pending until the child exists and is then
    // handed on. The child must not keep the mask (exec keeps a blocked
    // mask, and std leaves it as it is): it unblocks them before exec.
    let caught_mask = signal_set(&CAUGHT_SIGNALS);
    // SAFETY: blocking signals in this single-threaded process.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &caught_mask, std::ptr::null_mut()) };
    let stopped_early = CAUGHT.swap(0, Ordering::SeqCst);
    if stopped_early != 0 {
        // Stopped before it ran: it ends as killed by that signal.
        let _ = writeln!(exit_file, "signal {stopped_early}");
        let _ = exit_file.sync_all();
        return ExitCode::from(u8::try_from((128 + stopped_early) & 0xff).unwrap_or(1));
    }
    let mut command = Command::new(program);
    command.args(&args[4..]);
    // The child gets the default dispositions back before it unblocks: a
    // stop signal already pending must end it, not run the shim's handler
    // in it and vanish (exec would reset the handler only afterwards, and
    // the job's own children would then never see the signal).
    // SAFETY: signal and sigprocmask are async-signal-safe, and
    // `caught_mask` is a plain value copied into the closure; nothing else
    // runs between fork and exec.
    unsafe {
        command.pre_exec(move || {
            for sig in CAUGHT_SIGNALS {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::sigprocmask(libc::SIG_UNBLOCK, &caught_mask, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    // SAFETY: as above.
    unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &caught_mask, std::ptr::null_mut()) };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                exit_file,
                "launch-error cannot start {}: {e}",
                program.to_string_lossy()
            );
            let _ = exit_file.sync_all();
            return ExitCode::from(127);
        }
    };
    // A signal held back while the child was being made may have been
    // sent before the fork, so the child never saw it: hand it on (a job
    // can see such a signal twice, never zero times).
    let held = CAUGHT.swap(0, Ordering::SeqCst);
    if held != 0 {
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signalling our own child, which we have not reaped.
            unsafe { libc::kill(pid, held) };
        }
    }
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = writeln!(exit_file, "launch-error cannot wait for the job: {e}");
                let _ = exit_file.sync_all();
                return ExitCode::from(1);
            }
        }
    };
    let (line, code) = match status.signal() {
        Some(sig) => (format!("signal {sig}\n"), 128 + sig),
        None => {
            let c = status.code().unwrap_or(1);
            (format!("exit {c}\n"), c)
        }
    };
    let _ = exit_file.write_all(line.as_bytes());
    let _ = exit_file.sync_all();
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}

/// Waits for the agent's byte on the gate; false on end-of-file or error.
fn gate_opened(mut gate: File) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match gate.read(&mut byte) {
            Ok(1) => return true,
            Ok(_) => return false,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}
