//! One job as `scontrol show job` prints it: `Key=Value` words on indented
//! lines, "(null)" for what is unset, so admins read it without relearning.
//!
//! Times are printed in UTC with a trailing "Z" (scontrol uses local time;
//! this client has no time-zone database and will not guess).

use crate::mem::format_mem_mb;
use crate::queue::{elapsed_s, DEFAULT_PARTITION};
use crate::state::{job_state, state_name};
use crate::time::{format_elapsed, format_time_limit};
use berth_proto::api::{Job, ResourceSet};

/// The job's details, one "   Key=Value Key=Value" line per group,
/// ending in '\n'. `now_ms` is the wall clock for a running job's RunTime.
pub fn format_job_details(job: &Job, now_ms: u64) -> String {
    let spec = job.spec.clone().unwrap_or_default();
    let state = job_state(job);
    let partition = if spec.partitions.is_empty() {
        DEFAULT_PARTITION.to_string()
    } else {
        spec.partitions.join(",")
    };
    let lines: Vec<Vec<(&str, String)>> = vec![
        vec![
            ("JobId", job.job_id.to_string()),
            ("JobName", null(&spec.name)),
        ]
        .into_iter()
        .chain(
            (spec.array_job_id != 0)
                .then(|| {
                    [
                        ("ArrayJobId", spec.array_job_id.to_string()),
                        ("ArrayTaskId", spec.array_task_id.to_string()),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect(),
        vec![
            ("UserId", null(&spec.user)),
            ("Account", null(&spec.account)),
            ("QOS", null(&spec.qos)),
        ],
        vec![
            ("JobState", state_name(state).to_string()),
            ("Reason", none(&job.reason)),
            ("Priority", job.priority.to_string()),
            ("Nice", spec.nice.to_string()),
        ],
        vec![
            ("Requeue", u8::from(spec.requeue).to_string()),
            ("Hold", u8::from(spec.hold).to_string()),
            ("ExitCode", format!("{}:{}", job.exit_code, job.exit_signal)),
        ],
        vec![
            ("RunTime", format_elapsed(elapsed_s(job, now_ms))),
            ("TimeLimit", format_time_limit(spec.time_limit_s)),
        ],
        vec![
            ("SubmitTime", timestamp(job.submit_ms)),
            ("StartTime", timestamp(job.start_ms)),
            ("EndTime", timestamp(job.end_ms)),
        ],
        vec![
            ("Partition", partition),
            ("NodeList", null(&crate::hostlist::compress(&job.hosts))),
            ("AllocId", job.alloc_id.to_string()),
        ],
        vec![
            ("NumNodes", spec.nodes.max(1).to_string()),
            // The job's total, as Slurm counts it: every host gives `cpus`.
            (
                "NumCPUs",
                (u64::from(spec.cpus.max(1)) * u64::from(spec.nodes.max(1))).to_string(),
            ),
            ("MinMemoryNode", mem(spec.mem_mb)),
            ("Gres", null(&spec.gres.join(","))),
        ],
        vec![("Command", command(&spec.command))],
        vec![("WorkDir", null(&spec.workdir))],
        vec![
            ("StdOut", null(&spec.stdout_path)),
            ("StdErr", null(&spec.stderr_path)),
        ],
        vec![("Comment", null(&spec.comment))],
        vec![
            ("Dependency", null(&spec.dependency)),
            ("BeginTime", timestamp(spec.begin_ms)),
            ("Reservation", null(&spec.reservation)),
        ],
        vec![
            ("Features", null(&spec.features.join("&"))),
            // Slurm's word for an --exclusive job's whole hosts.
            (
                "OverSubscribe",
                if spec.exclusive { "NO" } else { "OK" }.to_string(),
            ),
            ("Preemptible", u8::from(spec.preemptible).to_string()),
        ],
        vec![("ReasonText", null(&job.reason_text))],
    ];
    // After the job's own resources (line 8): its sets and the one its
    // run got, only for a job that has any.
    let alternatives = (!spec.alternatives.is_empty())
        .then(|| alternatives_line(&spec.alternatives, job.alternative));
    let mut out = String::new();
    for (i, words) in lines.iter().enumerate() {
        if let Some(alt) = alternatives.as_ref().filter(|_| i == 8) {
            out.push_str("   ");
            out.push_str(alt);
            out.push('\n');
        }
        if i > 0 {
            out.push_str("   ");
        }
        let line: Vec<String> = words.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&line.join(" "));
        out.push('\n');
    }
    out
}

/// `Alternatives=2 AltChosen=2 Alt1=cpus=64,mem=0 Alt2=cpus=1,mem=512M,gres=emu:zebu:1`:
/// every set in order and the one the current (or last) run got
/// (`(null)` before it started).
fn alternatives_line(sets: &[ResourceSet], chosen: u32) -> String {
    let chosen = if chosen == 0 {
        "(null)".to_string()
    } else {
        chosen.to_string()
    };
    let mut line = format!("Alternatives={} AltChosen={chosen}", sets.len());
    for (i, set) in sets.iter().enumerate() {
        // 0 (the site default) as a number: a word may hold no spaces.
        let mem = if set.mem_mb == 0 {
            "0".to_string()
        } else {
            format_mem_mb(set.mem_mb)
        };
        line.push_str(&format!(" Alt{}=cpus={},mem={mem}", i + 1, set.cpus.max(1)));
        if !set.gres.is_empty() {
            line.push_str(&format!(",gres={}", set.gres.join(",")));
        }
    }
    line
}

fn null(value: &str) -> String {
    if value.is_empty() {
        "(null)".to_string()
    } else {
        one_line(value)
    }
}

fn none(value: &str) -> String {
    if value.is_empty() {
        "None".to_string()
    } else {
        one_line(value)
    }
}

fn one_line(value: &str) -> String {
    value.replace('\n', " ")
}

fn mem(mib: u64) -> String {
    if mib == 0 {
        "(site default)".to_string()
    } else {
        format_mem_mb(mib)
    }
}

/// A one-line command as it is; a script by its size, since its text
/// would break the one-value-per-word layout (`--json` has it in full).
fn command(command: &str) -> String {
    match command.lines().count() {
        0 => "(null)".to_string(),
        1 => command.trim_end().to_string(),
        n => format!("(batch script, {n} lines)"),
    }
}

/// ms since the epoch as "YYYY-MM-DDTHH:MM:SSZ"; 0 as Slurm's "Unknown".
pub fn timestamp(ms: u64) -> String {
    if ms == 0 {
        return "Unknown".to_string();
    }
    let secs = ms / 1000;
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `civil_from_days`, restricted to dates after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{JobSpec, JobState};

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(0), "Unknown");
        assert_eq!(timestamp(1), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20Z");
        assert_eq!(timestamp(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn details_read_like_scontrol() {
        let job = Job {
            job_id: 42,
            state: JobState::Running as i32,
            start_ms: 1_000,
            submit_ms: 500,
            hosts: vec!["h1".into()],
            spec: Some(JobSpec {
                name: "train".into(),
                user: "alice".into(),
                command: "python train.py".into(),
                cpus: 4,
                mem_mb: 4096,
                time_limit_s: 3600,
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = format_job_details(&job, 3_723_000 + 1_000);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "JobId=42 JobName=train");
        assert_eq!(lines[1], "   UserId=alice Account=(null) QOS=(null)");
        assert_eq!(
            lines[2],
            "   JobState=RUNNING Reason=None Priority=0 Nice=0"
        );
        assert_eq!(lines[4], "   RunTime=1:02:03 TimeLimit=01:00:00");
        assert_eq!(lines[6], "   Partition=batch NodeList=h1 AllocId=0");
        assert_eq!(
            lines[7],
            "   NumNodes=1 NumCPUs=4 MinMemoryNode=4G Gres=(null)"
        );
        assert_eq!(lines[8], "   Command=python train.py");
        assert!(text.ends_with("ReasonText=(null)\n"));
        assert_eq!(
            lines[12],
            "   Dependency=(null) BeginTime=Unknown Reservation=(null)"
        );
        assert_eq!(
            lines[13],
            "   Features=(null) OverSubscribe=OK Preemptible=0"
        );
        assert!(!text.contains("Alternatives="));
        let mut spec = job.spec.clone().unwrap_or_default();
        spec.alternatives = vec![
            ResourceSet {
                cpus: 64,
                ..Default::default()
            },
            ResourceSet {
                cpus: 2,
                mem_mb: 512,
                gres: vec!["emu:zebu:1".into()],
                ..Default::default()
            },
        ];
        let shown = format_job_details(
            &Job {
                spec: Some(spec),
                alternative: 2,
                ..job.clone()
            },
            0,
        );
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[8],
            "   Alternatives=2 AltChosen=2 Alt1=cpus=64,mem=0 Alt2=cpus=2,mem=512M,gres=emu:zebu:1"
        );
        assert_eq!(lines[9], "   Command=python train.py");
        let mut spec = job.spec.clone().unwrap_or_default();
        spec.dependency = "afterok:3".into();
        spec.begin_ms = 1_700_000_000_000;
        spec.features = vec!["ib".into(), "nvlink".into()];
        spec.exclusive = true;
        spec.preemptible = true;
        let text = format_job_details(
            &Job {
                spec: Some(spec),
                ..job
            },
            0,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[12],
            "   Dependency=afterok:3 BeginTime=2023-11-14T22:13:20Z Reservation=(null)"
        );
        assert_eq!(
            lines[13],
            "   Features=ib&nvlink OverSubscribe=NO Preemptible=1"
        );
    }

    #[test]
    fn scripts_are_summarised_and_values_stay_on_one_line() {
        assert_eq!(command("#!/bin/sh\necho hi\n"), "(batch script, 2 lines)");
        assert_eq!(command(""), "(null)");
        assert_eq!(null("a\nb"), "a b");
    }
}
