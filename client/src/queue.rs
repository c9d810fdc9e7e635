//! squeue's default table, column for column:
//! `%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`.
//!
//! A `%.N` field is right-justified in N columns and cut to its first N
//! characters when longer, exactly as squeue does, so scripts that slice
//! squeue output by column keep working.

use crate::state::{job_state, state_code};
use crate::time::format_elapsed;
use berth_proto::api::{Job, JobState};

/// The header line, as squeue prints it (without the newline).
pub const SQUEUE_HEADER: &str =
    "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)";

/// Shown when a job names no partition: the partition every host is in
/// when none is configured.
pub const DEFAULT_PARTITION: &str = berth_scheduler::partition::IMPLICIT_PARTITION;

/// The whole table: header, then one line per job, each ending in '\n'.
/// `now_ms` is the wall clock (ms since the epoch) for running jobs' TIME.
pub fn format_squeue(jobs: &[Job], now_ms: u64) -> String {
    let mut out = String::with_capacity(SQUEUE_HEADER.len() + 1 + jobs.len() * 90);
    out.push_str(SQUEUE_HEADER);
    out.push('\n');
    out.push_str(&format_squeue_rows(jobs, now_ms));
    out
}

/// The table without its header (`squeue --noheader`).
pub fn format_squeue_rows(jobs: &[Job], now_ms: u64) -> String {
    let mut out = String::new();
    for job in jobs {
        out.push_str(&format_squeue_row(job, now_ms));
        out.push('\n');
    }
    out
}

/// One job's line, without the newline.
pub fn format_squeue_row(job: &Job, now_ms: u64) -> String {
    let spec = job.spec.clone().unwrap_or_default();
    let state = job_state(job);
    let partition = spec
        .partitions
        .first()
        .map(String::as_str)
        .unwrap_or(DEFAULT_PARTITION);
    let nodes = if job.hosts.is_empty() {
        spec.nodes.max(1) as usize
    } else {
        job.hosts.len()
    };
    [
        fit(&crate::array_ids::display_id(job), 18),
        fit(partition, 9),
        fit(&spec.name, 8),
        fit(&spec.user, 8),
        fit(state_code(state), 2),
        fit(&format_elapsed(elapsed_s(job, now_ms)), 10),
        fit(&nodes.to_string(), 6),
        nodelist_or_reason(job, state),
    ]
    .join(" ")
}

/// Seconds the job has run: none before it starts, up to its end once it
/// has one, up to now while it runs. A clock behind the leader's reads as 0.
pub fn elapsed_s(job: &Job, now_ms: u64) -> u64 {
    if job.start_ms == 0 {
        return 0;
    }
    let until = if job.end_ms > 0 { job.end_ms } else { now_ms };
    until.saturating_sub(job.start_ms) / 1000
}

/// `%R`: the hosts of a job that has them, else "(Reason)" as squeue shows
/// for a waiting job ("(None)" when the server gave no reason).
pub fn nodelist_or_reason(job: &Job, state: JobState) -> String {
    if state != JobState::Pending && !job.hosts.is_empty() {
        return crate::hostlist::compress(&job.hosts);
    }
    let reason = if job.reason.is_empty() {
        "None"
    } else {
        &job.reason
    };
    format!("({reason})")
}

/// Right-justifies `text` in `width` columns, keeping only its first
/// `width` characters when it is longer (printf's `%{width}.{width}s`).
fn fit(text: &str, width: usize) -> String {
    let cut: String = text.chars().take(width).collect();
    format!("{cut:>width$}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    fn job(id: u64, state: JobState) -> Job {
        Job {
            job_id: id,
            spec: Some(JobSpec {
                name: "train".into(),
                user: "alice".into(),
                partitions: vec!["gpu".into(), "cpu".into()],
                ..Default::default()
            }),
            state: state as i32,
            ..Default::default()
        }
    }

    #[test]
    fn header_matches_slurm_widths() {
        let widths = [18, 9, 8, 8, 2, 10, 6];
        let names = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES"];
        let built: Vec<String> = names.iter().zip(widths).map(|(n, w)| fit(n, w)).collect();
        assert_eq!(
            format!("{} NODELIST(REASON)", built.join(" ")),
            SQUEUE_HEADER
        );
    }

    #[test]
    fn running_job_shows_elapsed_and_hosts() {
        let mut j = job(42, JobState::Running);
        j.start_ms = 1_000_000;
        j.hosts = vec!["h1".into()];
        let row = format_squeue_row(&j, 1_000_000 + 3_723_500);
        assert_eq!(
            row,
            "                42       gpu    train    alice  R    1:02:03      1 h1"
        );
        assert_eq!(
            row.find(" R ").map(|i| i + 1),
            SQUEUE_HEADER.find("ST").map(|i| i + 1)
        );
    }

    #[test]
    fn pending_job_shows_reason_and_zero_time() {
        let mut j = job(7, JobState::Pending);
        j.reason = "Resources".into();
        if let Some(s) = j.spec.as_mut() {
            s.nodes = 0;
        }
        assert_eq!(
            format_squeue_row(&j, 99_999_999),
            "                 7       gpu    train    alice PD       0:00      1 (Resources)"
        );
        j.reason.clear();
        assert!(format_squeue_row(&j, 0).ends_with(" (None)"));
    }

    #[test]
    fn long_fields_are_cut_like_squeue() {
        let mut j = job(1, JobState::Pending);
        let spec = j.spec.as_mut().expect("spec");
        spec.name = "a-very-long-job-name".into();
        spec.user = "someone_long".into();
        spec.partitions = vec!["partition-long".into()];
        let row = format_squeue_row(&j, 0);
        assert!(row.contains(" partition a-very-l someone_ PD "), "{row}");
    }

    #[test]
    fn empty_partitions_show_the_default_and_finished_jobs_stop_their_clock() {
        let mut j = job(3, JobState::Completed);
        if let Some(s) = j.spec.as_mut() {
            s.partitions.clear();
        }
        j.start_ms = 10_000;
        j.end_ms = 15_000;
        j.hosts = vec!["h1".into(), "h2".into()];
        let row = format_squeue_row(&j, 1_000_000_000);
        assert_eq!(
            row,
            "                 3     batch    train    alice CD       0:05      2 h[1-2]"
        );
    }

    #[test]
    fn table_has_header_and_one_line_per_job() {
        let table = format_squeue(&[job(1, JobState::Pending), job(2, JobState::Pending)], 0);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], SQUEUE_HEADER);
        assert!(table.ends_with('\n'));
        assert_eq!(format_squeue(&[], 0), format!("{SQUEUE_HEADER}\n"));
        assert_eq!(
            format_squeue_rows(&[job(1, JobState::Pending)], 0)
                .lines()
                .count(),
            1
        );
    }

    #[test]
    fn a_clock_behind_the_leader_does_not_underflow() {
        let mut j = job(1, JobState::Running);
        j.start_ms = 5_000;
        assert_eq!(elapsed_s(&j, 1_000), 0);
    }
}
