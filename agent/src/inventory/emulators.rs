//! Emulator inventory from the config, each set's health command run with
//! a time limit. A set whose check fails stays in the inventory, and the
//! failure becomes part of the host's drain reason, so its units take no
//! work until the check passes again.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_proto::api::EmulatorSet;

use super::settings::EmulatorSpec;

/// How often a running health command is looked at, in ms.
const HEALTH_POLL_MS: u64 = 20;

/// The configured sets, and a sentence for each failing health check.
pub fn check(specs: &[EmulatorSpec]) -> (Vec<EmulatorSet>, Vec<String>) {
    let mut sets = Vec::with_capacity(specs.len());
    let mut problems = Vec::new();
    for spec in specs {
        if let Some(command) = &spec.health_command {
            if let Err(why) = run_health(command, Duration::from_secs(spec.health_timeout_s)) {
                problems.push(format!(
                    "emulator {} {} health check failed: {why}",
                    spec.kind,
                    describe(spec)
                ));
            }
        }
        sets.push(EmulatorSet {
            kind: spec.kind.clone(),
            name: spec.name.clone(),
            group: spec.group.clone(),
            unit_ids: spec.unit_ids.clone(),
        });
    }
    (sets, problems)
}

fn describe(spec: &EmulatorSpec) -> String {
    let name = if spec.name.is_empty() {
        "(unnamed)"
    } else {
        &spec.name
    };
    if spec.group.is_empty() {
        name.to_string()
    } else {
        format!("{name} in {}", spec.group)
    }
}

/// Runs `sh -c command` in its own process group; Ok when it exits 0
/// within `limit`. On timeout the whole group is killed, so a hung check
/// leaves nothing behind.
pub fn run_health(command: &str, limit: Duration) -> Result<(), String> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => return Err(format!("`{command}` ended with {status}")),
            Ok(None) if Instant::now() >= deadline => {
                let pgid = i32::try_from(child.id()).unwrap_or(0);
                if pgid > 0 {
                    // SAFETY: kill(2) on the group we created; no memory is touched.
                    unsafe { libc::kill(-pgid, libc::SIGKILL) };
                }
                let _ = child.wait();
                return Err(format!(
                    "`{command}` did not finish within {} s",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(HEALTH_POLL_MS)),
            Err(e) => return Err(format!("waiting for `{command}`: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(health: Option<&str>, timeout_s: u64) -> EmulatorSpec {
        EmulatorSpec {
            kind: "zebu".into(),
            name: "z1".into(),
            group: "rack1".into(),
            unit_ids: vec![0, 1],
            health_command: health.map(str::to_string),
            health_timeout_s: timeout_s,
        }
    }

    #[test]
    fn healthy_and_unchecked_sets_have_no_problems() {
        let (sets, problems) = check(&[spec(None, 1), spec(Some("true"), 1)]);
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[0].unit_ids, vec![0, 1]);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn a_failing_check_is_a_problem_naming_the_set() {
        let (sets, problems) = check(&[spec(Some("exit 3"), 1)]);
        assert_eq!(sets.len(), 1);
        assert_eq!(
            problems,
            vec![
                "emulator zebu z1 in rack1 health check failed: `exit 3` ended with exit status: 3"
            ]
        );
    }

    #[test]
    fn a_hung_check_times_out_and_its_group_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("late");
        let command = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let started = Instant::now();
        let err = run_health(&command, Duration::from_secs(1)).unwrap_err();
        assert!(err.contains("did not finish within 1 s"), "{err}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // The background child was in the group and died with it.
        std::thread::sleep(Duration::from_millis(1_500));
        assert!(!marker.exists());
    }
}
