//! This machine's commands and processes, as the harness's labs use them:
//! running a tool (`ip`, `iptables`, `docker`) for its output, and finding
//! processes by their command line in /proc.

use std::process::Command;

/// A tool that could not run or exited non-zero.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` failed: {stderr}")]
pub struct CommandFailed {
    pub command: String,
    pub stderr: String,
}

/// Runs `program args...`; its standard output when it exits 0.
pub fn run_command(program: &str, args: &[&str]) -> Result<String, CommandFailed> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| CommandFailed {
            command: command.clone(),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(CommandFailed {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The pids of the processes whose command line (argv, as /proc holds it)
/// `matches`.
pub fn pids_where(matches: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if matches(&argv) {
            out.push(pid);
        }
    }
    out
}
