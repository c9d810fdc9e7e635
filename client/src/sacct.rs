//! sacct's output: its default columns (`JobID JobName Partition Account
//! AllocCPUS State ExitCode`), `--format` with `Name%width`, the `N.batch`
//! step line under each job that ran, and the parsable forms (`-p`, `-P`).
//!
//! As sacct prints them: headers right-justified, a line of dashes, values
//! right-justified except JobID, every field followed by one space, and a
//! value too long for its column cut and marked with a trailing `+`.

use crate::hostlist::compress;
use crate::mem::format_mem_mb;
use crate::queue::{elapsed_s, DEFAULT_PARTITION};
use crate::show::timestamp;
use crate::state::{job_state, state_name};
use crate::time::format_elapsed;
use berth_proto::api::{Job, JobState, JobStep};
use thiserror::Error;

/// sacct's columns without `--format`.
pub const DEFAULT_FIELDS: &str = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode";
/// Fields one `--format` may list.
pub const FIELDS_MAX: usize = 128;
/// The widest column a `--format` may ask for.
pub const FIELD_WIDTH_MAX: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    JobId,
    JobIdRaw,
    JobName,
    Partition,
    Account,
    AllocCpus,
    ReqCpus,
    State,
    ExitCode,
    User,
    Submit,
    Start,
    End,
    Elapsed,
    ElapsedRaw,
    Timelimit,
    NNodes,
    NodeList,
    ReqMem,
    Qos,
    Priority,
    WorkDir,
    Comment,
    Reason,
    Borrowed,
}

/// (name, default width, field); names match case-insensitively.
const FIELDS: &[(&str, usize, Field)] = &[
    ("JobID", 12, Field::JobId),
    ("JobIDRaw", 12, Field::JobIdRaw),
    ("JobName", 10, Field::JobName),
    ("Partition", 10, Field::Partition),
    ("Account", 10, Field::Account),
    ("AllocCPUS", 10, Field::AllocCpus),
    ("ReqCPUS", 8, Field::ReqCpus),
    ("State", 10, Field::State),
    ("ExitCode", 8, Field::ExitCode),
    ("User", 9, Field::User),
    ("Submit", 19, Field::Submit),
    ("Start", 19, Field::Start),
    ("End", 19, Field::End),
    ("Elapsed", 10, Field::Elapsed),
    ("ElapsedRaw", 10, Field::ElapsedRaw),
    ("Timelimit", 10, Field::Timelimit),
    ("NNodes", 8, Field::NNodes),
    ("NodeList", 15, Field::NodeList),
    ("ReqMem", 10, Field::ReqMem),
    ("QOS", 10, Field::Qos),
    ("Priority", 10, Field::Priority),
    ("WorkDir", 30, Field::WorkDir),
    ("Comment", 15, Field::Comment),
    ("Reason", 20, Field::Reason),
    ("Borrowed", 8, Field::Borrowed),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub width: usize,
    pub field: Field,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SacctError {
    #[error("Invalid field requested: \"{0}\"")]
    UnknownField(String),
    #[error("Invalid field width in \"{0}\": expected Name%WIDTH with WIDTH from 1 to {FIELD_WIDTH_MAX}")]
    BadWidth(String),
    #[error("too many fields in --format (at most {FIELDS_MAX})")]
    TooManyFields,
    #[error("Invalid time specification \"{0}\": expected YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS], now[-N[units]], today or midnight")]
    BadTime(String),
    #[error("invalid job id \"{0}\": expected N, N.batch, N.STEP, N_M or N_M.batch")]
    BadJobId(String),
}

/// Parses `--format`: comma-separated names, each with an optional
/// `%WIDTH`.
pub fn parse_fields(text: &str) -> Result<Vec<Column>, SacctError> {
    let mut columns = Vec::new();
    for spec in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if columns.len() >= FIELDS_MAX {
            return Err(SacctError::TooManyFields);
        }
        let (name, width) = match spec.split_once('%') {
            Some((name, width)) => {
                let width: usize = width
                    .parse()
                    .map_err(|_| SacctError::BadWidth(spec.to_string()))?;
                if width == 0 || width > FIELD_WIDTH_MAX {
                    return Err(SacctError::BadWidth(spec.to_string()));
                }
                (name, Some(width))
            }
            None => (spec, None),
        };
        let (canonical, default_width, field) = FIELDS
            .iter()
            .find(|(n, ..)| n.eq_ignore_ascii_case(name))
            .ok_or_else(|| SacctError::UnknownField(name.to_string()))?;
        columns.push(Column {
            name: canonical,
            width: width.unwrap_or(*default_width),
            field: *field,
        });
    }
    if columns.is_empty() {
        return Err(SacctError::UnknownField(text.to_string()));
    }
    Ok(columns)
}

/// How the table is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Fixed columns with a dash line under the header.
    Columns,
    /// `-p`: every field followed by `|`.
    Parsable,
    /// `-P` / `--parsable2`: fields separated by `|`.
    Parsable2,
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub layout: Layout,
    pub noheader: bool,
    /// `-X`: jobs only, no step lines.
    pub allocations: bool,
    pub now_ms: u64,
}

/// One line of the table: a job, its batch step, or one of its srun
/// steps.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    job: &'a Job,
    step: bool,
    srun: Option<&'a JobStep>,
}

/// The whole output.
pub fn format_sacct(jobs: &[Job], columns: &[Column], options: Options) -> String {
    let names: Vec<String> = columns.iter().map(|c| c.name.to_string()).collect();
    let widths: Vec<usize> = columns.iter().map(|c| c.width).collect();
    // sacct left-justifies job ids under a right-justified header.
    let left: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c.field, Field::JobId | Field::JobIdRaw))
        .map(|(i, _)| i)
        .collect();
    let mut rows = Vec::new();
    for job in jobs {
        let mut lines = vec![Line {
            job,
            step: false,
            srun: None,
        }];
        if !options.allocations && job.start_ms > 0 {
            // An interactive allocation runs no batch script.
            let interactive = job.spec.as_ref().is_some_and(|s| s.interactive);
            if !interactive {
                lines.push(Line {
                    job,
                    step: true,
                    srun: None,
                });
            }
            lines.extend(job.steps.iter().map(|s| Line {
                job,
                step: true,
                srun: Some(s),
            }));
        }
        for line in lines {
            rows.push(
                columns
                    .iter()
                    .map(|c| value(c.field, line, options.now_ms))
                    .collect(),
            );
        }
    }
    render_columns(
        &names,
        &widths,
        &left,
        &rows,
        options.layout,
        options.noheader,
    )
}

/// A table as sacct and sacctmgr print one: `names` over a dash line,
/// each value right-justified in its column (left for the columns in
/// `left`) and followed by a space; or the parsable forms.
pub fn render_columns(
    names: &[String],
    widths: &[usize],
    left: &[usize],
    rows: &[Vec<String>],
    layout: Layout,
    noheader: bool,
) -> String {
    assert_eq!(names.len(), widths.len(), "a width per column");
    let mut out = String::new();
    let line = |values: &[String], header: bool| -> String {
        let mut text = match layout {
            Layout::Columns => values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let right = header || !left.contains(&i);
                    format!("{} ", cell(v, widths[i], right))
                })
                .collect::<String>(),
            Layout::Parsable => values.iter().map(|v| format!("{v}|")).collect::<String>(),
            Layout::Parsable2 => values.join("|"),
        };
        text.push('\n');
        text
    };
    if !noheader {
        out.push_str(&line(names, true));
        if layout == Layout::Columns {
            let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&line(&dashes, true));
        }
    }
    for row in rows {
        assert_eq!(row.len(), widths.len(), "a value per column");
        out.push_str(&line(row, false));
    }
    out
}

/// A value in its column: cut with a `+` when too long, then padded.
fn cell(value: &str, width: usize, right: bool) -> String {
    let text = if value.chars().count() > width {
        let mut cut: String = value.chars().take(width.saturating_sub(1)).collect();
        cut.push('+');
        cut
    } else {
        value.to_string()
    };
    if right {
        format!("{text:>width$}")
    } else {
        format!("{text:<width$}")
    }
}

/// What an srun step's line says where it differs from its job's.
fn srun_value(field: Field, job: &Job, s: &JobStep, now_ms: u64) -> Option<String> {
    let spec = job.spec.clone().unwrap_or_default();
    let id = if spec.array_job_id != 0 && field == Field::JobId {
        format!("{}_{}", spec.array_job_id, spec.array_task_id)
    } else {
        job.job_id.to_string()
    };
    let hosts = s.hosts.len().max(1);
    let end_ms = if s.end_ms > 0 { s.end_ms } else { now_ms };
    Some(match field {
        Field::JobId | Field::JobIdRaw => format!("{id}.{}", s.step_id),
        Field::JobName => s.name.clone(),
        Field::AllocCpus | Field::ReqCpus => spec
            .cpus
            .max(1)
            .saturating_mul(u32::try_from(hosts).unwrap_or(u32::MAX))
            .to_string(),
        Field::State => {
            state_name(JobState::try_from(s.state).unwrap_or(JobState::Unspecified)).to_string()
        }
        Field::ExitCode => format!("{}:0", s.exit_code),
        Field::Start => when(s.start_ms),
        Field::End => when(s.end_ms),
        Field::Elapsed => format_elapsed_sacct(end_ms.saturating_sub(s.start_ms) / 1000),
        Field::ElapsedRaw => (end_ms.saturating_sub(s.start_ms) / 1000).to_string(),
        Field::NNodes => hosts.to_string(),
        Field::NodeList => compress(&s.hosts),
        _ => return None,
    })
}

fn value(field: Field, line: Line<'_>, now_ms: u64) -> String {
    let job = line.job;
    if let Some(s) = line.srun {
        if let Some(v) = srun_value(field, job, s, now_ms) {
            return v;
        }
    }
    let spec = job.spec.clone().unwrap_or_default();
    let state = job_state(job);
    let step = line.step;
    let ran = job.start_ms > 0;
    // The job's total over its hosts, as Slurm counts it; its batch step
    // runs on the first host alone.
    let cpus = if step {
        spec.cpus.max(1)
    } else {
        spec.cpus.max(1).saturating_mul(spec.nodes.max(1))
    };
    match field {
        // JobID names an array task as Slurm does (`12_3`); JobIDRaw
        // is always the task's own job id.
        Field::JobId | Field::JobIdRaw => {
            let id = if field == Field::JobId && spec.array_job_id != 0 {
                format!("{}_{}", spec.array_job_id, spec.array_task_id)
            } else {
                job.job_id.to_string()
            };
            if step {
                format!("{id}.batch")
            } else {
                id
            }
        }
        Field::JobName => {
            if step {
                "batch".to_string()
            } else {
                spec.name
            }
        }
        Field::Partition if step => String::new(),
        Field::Partition => spec
            .partitions
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
        Field::Account => spec.account,
        Field::AllocCpus => if ran { cpus } else { 0 }.to_string(),
        Field::ReqCpus => cpus.to_string(),
        Field::State => state_name(state).to_string(),
        Field::ExitCode => format!("{}:{}", job.exit_code, job.exit_signal),
        Field::User if step => String::new(),
        Field::User => spec.user,
        Field::Submit => when(job.submit_ms),
        Field::Start => when(job.start_ms),
        Field::End => when(job.end_ms),
        Field::Elapsed => format_elapsed_sacct(elapsed_s(job, now_ms)),
        Field::ElapsedRaw => elapsed_s(job, now_ms).to_string(),
        Field::Timelimit if step => String::new(),
        Field::Timelimit => {
            if spec.time_limit_s == 0 {
                "Partition_Limit".to_string()
            } else {
                format_elapsed_sacct(spec.time_limit_s)
            }
        }
        // The batch script runs on the first host alone.
        Field::NNodes if step && ran => "1".to_string(),
        Field::NodeList if step && !job.hosts.is_empty() => job.hosts[0].clone(),
        Field::NNodes => if ran {
            job.hosts.len().max(1)
        } else {
            spec.nodes.max(1) as usize
        }
        .to_string(),
        Field::NodeList => {
            if job.hosts.is_empty() {
                "None assigned".to_string()
            } else {
                compress(&job.hosts)
            }
        }
        Field::ReqMem => {
            if spec.mem_mb == 0 {
                "0".to_string()
            } else {
                format_mem_mb(spec.mem_mb)
            }
        }
        Field::Qos if step => String::new(),
        Field::Qos => spec.qos,
        Field::Priority if step => String::new(),
        Field::Priority => job.priority.to_string(),
        Field::WorkDir => spec.workdir,
        Field::Comment if step => String::new(),
        Field::Comment => spec.comment,
        Field::Reason if step => String::new(),
        Field::Reason => {
            if state == JobState::Pending && !job.reason.is_empty() {
                job.reason.clone()
            } else {
                "None".to_string()
            }
        }
        Field::Borrowed => if job.borrowed { "yes" } else { "no" }.to_string(),
    }
}

/// sacct's Elapsed and Timelimit: "HH:MM:SS", "D-HH:MM:SS" past a day.
fn format_elapsed_sacct(secs: u64) -> String {
    let text = format_elapsed(secs);
    // format_elapsed writes "M:SS" and "H:MM:SS"; sacct always has hours.
    if secs >= 86_400 {
        return text;
    }
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// "Unknown" for a time that has not happened, as sacct prints it.
fn when(ms: u64) -> String {
    timestamp(ms).trim_end_matches('Z').to_string()
}

/// A `-j` entry: a job id, or `N.batch` (the same job). `N_M` names an
/// array task, which Berth's API cannot express yet.
pub fn parse_sacct_job_id(text: &str) -> Result<(u64, Option<u32>), SacctError> {
    let text = text.trim();
    let bad = || SacctError::BadJobId(text.to_string());
    // A step (`N.batch`, `N.0`) selects its job.
    let id = match text.rsplit_once('.') {
        Some((job, step))
            if step == "batch"
                || (!step.is_empty() && step.bytes().all(|b| b.is_ascii_digit())) =>
        {
            job
        }
        _ => text,
    };
    let number = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u64>().ok()
    };
    match id.split_once('_') {
        None => number(id)
            .filter(|&n| n > 0)
            .map(|n| (n, None))
            .ok_or_else(bad),
        Some((array, task)) => {
            let array = number(array).filter(|&n| n > 0).ok_or_else(bad)?;
            let task = number(task)
                .and_then(|t| u32::try_from(t).ok())
                .ok_or_else(bad)?;
            Ok((array, Some(task)))
        }
    }
}

const DAY_MS: u64 = 86_400_000;

/// sacct's `-S`/`-E` times, read as UTC (Berth's clocks and output are UTC).
pub fn parse_sacct_time(text: &str, now_ms: u64) -> Result<u64, SacctError> {
    let bad = || SacctError::BadTime(text.to_string());
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let midnight = now_ms - now_ms % DAY_MS;
    match lower.as_str() {
        "now" => return Ok(now_ms),
        "today" | "midnight" => return Ok(midnight),
        _ => {}
    }
    if let Some(rest) = lower.strip_prefix("now-") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let count: u64 = digits.parse().map_err(|_| bad())?;
        let unit_ms = match &rest[digits.len()..] {
            "" | "s" | "sec" | "second" | "seconds" => 1_000,
            "m" | "min" | "minute" | "minutes" => 60_000,
            "h" | "hour" | "hours" => 3_600_000,
            "d" | "day" | "days" => DAY_MS,
            "w" | "week" | "weeks" => 7 * DAY_MS,
            _ => return Err(bad()),
        };
        return Ok(now_ms.saturating_sub(count.saturating_mul(unit_ms)));
    }
    let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let clock = |s: &str| -> Result<u64, SacctError> {
        let parts: Vec<&str> = s.split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let h = number(parts[0])?;
        let m = number(parts[1])?;
        let sec = parts.get(2).map(|p| number(p)).transpose()?.unwrap_or(0);
        if h > 23 || m > 59 || sec > 59 {
            return Err(bad());
        }
        Ok((h * 3600 + m * 60 + sec) * 1000)
    };
    let (date, time) = match t.split_once('T') {
        Some((d, c)) => (d, Some(c)),
        None if t.contains(':') && !t.contains('-') && !t.contains('/') => {
            return Ok(midnight + clock(t)?)
        }
        None => (t, None),
    };
    let (year, month, day) = if date.contains('-') {
        let p: Vec<&str> = date.split('-').collect();
        if p.len() != 3 || p[0].len() != 4 {
            return Err(bad());
        }
        (number(p[0])?, number(p[1])?, number(p[2])?)
    } else if date.contains('/') {
        let p: Vec<&str> = date.split('/').collect();
        let this_year = crate::show::timestamp(now_ms)[..4]
            .parse::<u64>()
            .map_err(|_| bad())?;
        let year = match p.get(2) {
            Some(y) if y.len() == 2 => 2000 + number(y)?,
            Some(y) if y.len() == 4 => number(y)?,
            Some(_) => return Err(bad()),
            None => this_year,
        };
        if !(2..=3).contains(&p.len()) {
            return Err(bad());
        }
        (year, number(p[0])?, number(p[1])?)
    } else {
        return Err(bad());
    };
    if !(1970..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || day == 0
        || day > days_in(year, month)
    {
        return Err(bad());
    }
    let clock_ms = time.map(clock).transpose()?.unwrap_or(0);
    Ok(days_from_civil(year, month, day) * DAY_MS + clock_ms)
}

pub(crate) fn days_in(year: u64, month: u64) -> u64 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a Gregorian date on or after it (the inverse
/// of `show`'s civil_from_days).
pub(crate) fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Whether a job belongs in the window `[start_ms, end_ms]`: submitted by
/// its end and not finished before its start.
pub fn in_window(job: &Job, start_ms: u64, end_ms: u64) -> bool {
    job.submit_ms <= end_ms && (job.end_ms == 0 || job.end_ms >= start_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    fn jobs() -> Vec<Job> {
        vec![
            Job {
                job_id: 4,
                spec: Some(JobSpec {
                    name: "hostname".into(),
                    user: "alice".into(),
                    account: "test".into(),
                    partitions: vec!["debug".into()],
                    cpus: 2,
                    time_limit_s: 600,
                    ..Default::default()
                }),
                state: JobState::Completed as i32,
                submit_ms: 1_700_000_000_000,
                start_ms: 1_700_000_001_000,
                end_ms: 1_700_000_066_000,
                hosts: vec!["n1".into()],
                ..Default::default()
            },
            Job {
                job_id: 5,
                spec: Some(JobSpec {
                    name: "much-too-long-name".into(),
                    user: "bob".into(),
                    ..Default::default()
                }),
                state: JobState::Pending as i32,
                submit_ms: 1_700_000_002_000,
                reason: "Priority".into(),
                ..Default::default()
            },
        ]
    }

    fn options(layout: Layout) -> Options {
        Options {
            layout,
            noheader: false,
            allocations: false,
            now_ms: 1_700_000_100_000,
        }
    }

    #[test]
    fn default_columns_with_steps() {
        let columns = parse_fields(DEFAULT_FIELDS).expect("valid");
        assert_eq!(
            format_sacct(&jobs(), &columns, options(Layout::Columns)),
            "       JobID    JobName  Partition    Account  AllocCPUS      State ExitCode \n\
             ------------ ---------- ---------- ---------- ---------- ---------- -------- \n\
             4              hostname      debug       test          2  COMPLETED      0:0 \n\
             4.batch           batch                  test          2  COMPLETED      0:0 \n\
             5            much-too-+      batch                     0    PENDING      0:0 \n"
        );
    }

    #[test]
    fn srun_steps_follow_the_batch_step() {
        let mut job = jobs()[0].clone();
        job.hosts = vec!["n1".into(), "n2".into()];
        if let Some(spec) = job.spec.as_mut() {
            spec.nodes = 2;
        }
        job.steps = vec![
            JobStep {
                step_id: 0,
                name: "hostname".into(),
                state: JobState::Completed as i32,
                exit_code: 0,
                start_ms: 1_700_000_002_000,
                end_ms: 1_700_000_003_000,
                hosts: vec!["n1".into(), "n2".into()],
                ntasks: 2,
            },
            JobStep {
                step_id: 1,
                name: "sh".into(),
                state: JobState::Failed as i32,
                exit_code: 4,
                start_ms: 1_700_000_004_000,
                end_ms: 1_700_000_010_000,
                hosts: vec!["n1".into()],
                ntasks: 1,
            },
        ];
        let columns =
            parse_fields("JobID,JobName,AllocCPUS,State,ExitCode,Elapsed,NNodes,NodeList")
                .expect("valid");
        assert_eq!(
            format_sacct(&[job.clone()], &columns, options(Layout::Parsable2)),
            "JobID|JobName|AllocCPUS|State|ExitCode|Elapsed|NNodes|NodeList\n\
             4|hostname|4|COMPLETED|0:0|00:01:05|2|n[1-2]\n\
             4.batch|batch|2|COMPLETED|0:0|00:01:05|1|n1\n\
             4.0|hostname|4|COMPLETED|0:0|00:00:01|2|n[1-2]\n\
             4.1|sh|2|FAILED|4:0|00:00:06|1|n1\n"
        );
        // -X: allocations only; an interactive allocation has no batch step.
        let mut opts = options(Layout::Parsable2);
        opts.allocations = true;
        assert_eq!(
            format_sacct(&[job.clone()], &columns, opts).lines().count(),
            2
        );
        if let Some(spec) = job.spec.as_mut() {
            spec.interactive = true;
        }
        let text = format_sacct(&[job], &columns, options(Layout::Parsable2));
        assert!(!text.contains("4.batch"), "{text}");
        assert!(text.contains("4.1|sh"), "{text}");
    }

    #[test]
    fn parsable_forms_and_format_widths() {
        let columns = parse_fields("jobid,State,Elapsed,Borrowed,jobname%4").expect("valid");
        let mut opts = options(Layout::Parsable2);
        opts.allocations = true;
        assert_eq!(
            format_sacct(&jobs(), &columns, opts),
            "JobID|State|Elapsed|Borrowed|JobName\n\
             4|COMPLETED|00:01:05|no|hostname\n\
             5|PENDING|00:00:00|no|much-too-long-name\n"
        );
        opts.layout = Layout::Parsable;
        opts.noheader = true;
        assert_eq!(
            format_sacct(&jobs()[..1], &columns, opts),
            "4|COMPLETED|00:01:05|no|hostname|\n"
        );
        opts.layout = Layout::Columns;
        assert_eq!(
            format_sacct(&jobs()[..1], &columns, opts),
            "4             COMPLETED   00:01:05       no hos+ \n"
        );
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            parse_fields("JobID,Bogus").unwrap_err().to_string(),
            "Invalid field requested: \"Bogus\""
        );
        assert!(parse_fields("JobID%0").is_err());
        assert!(parse_fields("JobID%x").is_err());
    }

    #[test]
    fn job_ids() {
        assert_eq!(parse_sacct_job_id("12"), Ok((12, None)));
        assert_eq!(parse_sacct_job_id("12.batch"), Ok((12, None)));
        assert_eq!(parse_sacct_job_id("12_3"), Ok((12, Some(3))));
        assert_eq!(parse_sacct_job_id(" 12_0.batch "), Ok((12, Some(0))));
        assert_eq!(
            parse_sacct_job_id("12.3"),
            Ok((12, None)),
            "a step selects its job"
        );
        for bad in [
            "x", "0", "0_1", "12_", "_3", "12_x", "12_3_4", "12_[1-3]", "12.x", "12.",
        ] {
            assert_eq!(
                parse_sacct_job_id(bad),
                Err(SacctError::BadJobId(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn times() {
        let now = 1_700_000_000_000; // 2023-11-14T22:13:20Z
        let midnight = 1_699_920_000_000;
        assert_eq!(parse_sacct_time("now", now), Ok(now));
        assert_eq!(parse_sacct_time("today", now), Ok(midnight));
        assert_eq!(parse_sacct_time("now-2hours", now), Ok(now - 7_200_000));
        assert_eq!(parse_sacct_time("now-1d", now), Ok(now - DAY_MS));
        assert_eq!(parse_sacct_time("2023-11-14", now), Ok(midnight));
        assert_eq!(
            parse_sacct_time("2023-11-14T22:13:20", now),
            Ok(1_700_000_000_000)
        );
        assert_eq!(parse_sacct_time("2023-11-14T22:13", now), Ok(now - 20_000));
        assert_eq!(parse_sacct_time("11/14", now), Ok(midnight));
        assert_eq!(parse_sacct_time("11/14/23", now), Ok(midnight));
        assert_eq!(parse_sacct_time("01:00", now), Ok(midnight + 3_600_000));
        assert_eq!(parse_sacct_time("2000-02-29", now), Ok(951_782_400_000));
        for bad in [
            "2023-02-29",
            "2023-13-01",
            "25:00",
            "now-3x",
            "yesterday",
            "23-11-14",
            "1/2/3/4",
        ] {
            assert_eq!(
                parse_sacct_time(bad, now),
                Err(SacctError::BadTime(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn window() {
        let j = &jobs()[0];
        assert!(in_window(j, 1_700_000_066_000, u64::MAX));
        assert!(!in_window(j, 1_700_000_066_001, u64::MAX));
        assert!(!in_window(j, 0, 1_699_999_999_999));
        assert!(in_window(&jobs()[1], u64::MAX - 1, u64::MAX));
    }
}
