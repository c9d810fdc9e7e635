//! squeue's `-o/--format` (`%.18i %.9P ...`) and `-O/--Format`
//! (`JobID:10,Name,Borrowed`) output formats: parsed once, then each job is
//! printed field by field, so scripts that cut squeue output keep working.
//!
//! `-o`: `%[.][size]letter`; a size pads the field to that width, left
//! justified unless `.` asks for right justification, and cuts a longer
//! value to its first `size` characters; no size prints the value as it
//! is. Other text is copied, `%%` is a percent sign.
//! `-O`: comma-separated `name[:[.][size][suffix]]`; no size means 20
//! columns; the suffix is printed after the field.

use crate::hostlist::compress;
use crate::mem::format_mem_mb;
use crate::queue::{elapsed_s, nodelist_or_reason, DEFAULT_PARTITION};
use crate::show::timestamp;
use crate::state::{job_state, state_code, state_name};
use crate::time::format_elapsed;
use berth_proto::api::{Job, JobState};
use thiserror::Error;

/// Width of an `-O` field given without a size, as squeue allocates.
pub const LONG_FIELD_WIDTH_DEFAULT: usize = 20;
/// The widest field a format may ask for; more is surely a typo.
pub const FIELD_WIDTH_MAX: usize = 1024;
/// Items one format may have.
pub const FORMAT_ITEMS_MAX: usize = 256;

/// A job attribute squeue can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    JobId,
    Partition,
    Name,
    User,
    StateCompact,
    State,
    TimeUsed,
    NumNodes,
    ReasonList,
    NodeList,
    Reason,
    TimeLimit,
    TimeLeft,
    NumCpus,
    MinMemory,
    PriorityNormalized,
    Priority,
    SubmitTime,
    StartTime,
    EndTime,
    Account,
    Qos,
    Comment,
    WorkDir,
    Command,
    TresPerNode,
    Nice,
    ExitCode,
    Borrowed,
    /// `%A`: the job's own id, also for an array task.
    JobIdRaw,
}

/// (`-o` letter, `-O` names, header, field). The first `-O` name is the
/// canonical one; the rest are Slurm's other spellings.
const FIELDS: &[(char, &[&str], &str, Field)] = &[
    ('i', &["jobid", "jobarrayid"], "JOBID", Field::JobId),
    ('A', &[], "JOBID", Field::JobIdRaw),
    ('P', &["partition"], "PARTITION", Field::Partition),
    ('j', &["name"], "NAME", Field::Name),
    ('u', &["username", "userid"], "USER", Field::User),
    ('t', &["statecompact"], "ST", Field::StateCompact),
    ('T', &["state"], "STATE", Field::State),
    ('M', &["timeused"], "TIME", Field::TimeUsed),
    ('D', &["numnodes"], "NODES", Field::NumNodes),
    ('R', &["reasonlist"], "NODELIST(REASON)", Field::ReasonList),
    ('N', &["nodelist"], "NODELIST", Field::NodeList),
    ('r', &["reason"], "REASON", Field::Reason),
    ('l', &["timelimit"], "TIME_LIMIT", Field::TimeLimit),
    ('L', &["timeleft"], "TIME_LEFT", Field::TimeLeft),
    ('C', &["numcpus"], "CPUS", Field::NumCpus),
    ('m', &["minmemory"], "MIN_MEMORY", Field::MinMemory),
    ('p', &["priority"], "PRIORITY", Field::PriorityNormalized),
    ('Q', &["prioritylong"], "PRIORITY", Field::Priority),
    ('V', &["submittime"], "SUBMIT_TIME", Field::SubmitTime),
    ('S', &["starttime"], "START_TIME", Field::StartTime),
    ('e', &["endtime"], "END_TIME", Field::EndTime),
    ('a', &["account"], "ACCOUNT", Field::Account),
    ('q', &["qos"], "QOS", Field::Qos),
    ('k', &["comment"], "COMMENT", Field::Comment),
    ('Z', &["workdir"], "WORK_DIR", Field::WorkDir),
    ('o', &["command"], "COMMAND", Field::Command),
    (
        'b',
        &["tres-per-node", "gres"],
        "TRES_PER_NODE",
        Field::TresPerNode,
    ),
    ('y', &["nice"], "NICE", Field::Nice),
    ('W', &["borrowed"], "BORROWED", Field::Borrowed),
    ('\0', &["exitcode"], "EXIT_CODE", Field::ExitCode),
];

/// One piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Text(String),
    Field {
        field: Field,
        header: &'static str,
        width: Option<usize>,
        right: bool,
    },
}

/// A parsed output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error("Invalid job format specification: %{0} is not a field letter")]
    UnknownLetter(char),
    #[error("Invalid job format specification: \"{0}\" ends inside a % field")]
    Unterminated(String),
    #[error("Invalid job format specification: width {0} is larger than {FIELD_WIDTH_MAX}")]
    TooWide(usize),
    #[error("Invalid job format specification: more than {FORMAT_ITEMS_MAX} fields")]
    TooManyItems,
    #[error("Invalid job format specification: unknown field \"{0}\" (names as squeue -O takes them, e.g. JobID, Name, StateCompact, Borrowed)")]
    UnknownName(String),
    #[error("Invalid job format specification: bad size in \"{0}\"")]
    BadSize(String),
}

/// squeue's default: `%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`.
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// `squeue -l`.
pub const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";
/// `squeue --start`: the predicted start of pending jobs.
/// (20 columns for the start time: Berth prints UTC with a trailing Z.)
pub const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.20S %.6D %R";

fn by_letter(letter: char) -> Option<(&'static str, Field)> {
    FIELDS
        .iter()
        .find(|(l, ..)| *l == letter && letter != '\0')
        .map(|(_, _, header, field)| (*header, *field))
}

fn by_name(name: &str) -> Option<(&'static str, Field)> {
    let lower = name.to_ascii_lowercase();
    FIELDS
        .iter()
        .find(|(_, names, ..)| names.contains(&lower.as_str()))
        .map(|(_, _, header, field)| (*header, *field))
}

/// Parses an `-o` format.
pub fn parse_format(text: &str) -> Result<Format, FormatError> {
    let mut items = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if items.len() >= FORMAT_ITEMS_MAX {
            return Err(FormatError::TooManyItems);
        }
        if c != '%' {
            literal.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            literal.push('%');
            continue;
        }
        let right = chars.peek() == Some(&'.');
        if right {
            chars.next();
        }
        let mut digits = String::new();
        while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
            digits.push(d);
            chars.next();
        }
        let letter = chars
            .next()
            .ok_or_else(|| FormatError::Unterminated(text.to_string()))?;
        let (header, field) = by_letter(letter).ok_or(FormatError::UnknownLetter(letter))?;
        let width = width(&digits, text)?;
        if !literal.is_empty() {
            items.push(Item::Text(std::mem::take(&mut literal)));
        }
        items.push(Item::Field {
            field,
            header,
            width,
            right,
        });
    }
    if !literal.is_empty() {
        items.push(Item::Text(literal));
    }
    Ok(Format { items })
}

/// Parses an `-O` format.
pub fn parse_long_format(text: &str) -> Result<Format, FormatError> {
    let mut items = Vec::new();
    for spec in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if items.len() >= FORMAT_ITEMS_MAX {
            return Err(FormatError::TooManyItems);
        }
        let (name, size) = spec.split_once(':').unwrap_or((spec, ""));
        let (header, field) =
            by_name(name).ok_or_else(|| FormatError::UnknownName(name.to_string()))?;
        let right = size.starts_with('.');
        let size = size.strip_prefix('.').unwrap_or(size);
        let digits: String = size.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &size[digits.len()..];
        if right && digits.is_empty() {
            return Err(FormatError::BadSize(spec.to_string()));
        }
        let width = width(&digits, spec)?.unwrap_or(LONG_FIELD_WIDTH_DEFAULT);
        items.push(Item::Field {
            field,
            header,
            width: Some(width),
            right,
        });
        if !suffix.is_empty() {
            items.push(Item::Text(suffix.to_string()));
        }
    }
    if items.is_empty() {
        return Err(FormatError::UnknownName(text.to_string()));
    }
    Ok(Format { items })
}

fn width(digits: &str, spec: &str) -> Result<Option<usize>, FormatError> {
    if digits.is_empty() {
        return Ok(None);
    }
    let width: usize = digits
        .parse()
        .map_err(|_| FormatError::BadSize(spec.to_string()))?;
    if width > FIELD_WIDTH_MAX {
        return Err(FormatError::TooWide(width));
    }
    Ok(Some(width))
}

/// What squeue's wall clock and the job's predicted start are for a row.
#[derive(Debug, Clone, Copy)]
pub struct RowContext {
    pub now_ms: u64,
}

impl Format {
    pub fn header(&self) -> String {
        self.render(|field, header| {
            let _ = field;
            header.to_string()
        })
    }

    pub fn row(&self, job: &Job, ctx: RowContext) -> String {
        self.render(|field, _| value(field, job, ctx))
    }

    /// The table: the header (unless `noheader`), then a line per job.
    pub fn table(&self, jobs: &[Job], ctx: RowContext, noheader: bool) -> String {
        let mut out = String::new();
        if !noheader {
            out.push_str(&self.header());
            out.push('\n');
        }
        for job in jobs {
            out.push_str(&self.row(job, ctx));
            out.push('\n');
        }
        out
    }

    fn render(&self, text_of: impl Fn(Field, &'static str) -> String) -> String {
        let mut out = String::new();
        for item in &self.items {
            match item {
                Item::Text(text) => out.push_str(text),
                Item::Field {
                    field,
                    header,
                    width,
                    right,
                } => {
                    let text = text_of(*field, header);
                    out.push_str(&fit(&text, *width, *right));
                }
            }
        }
        out
    }
}

/// Pads to `width`, cutting longer text to its first `width` characters.
pub fn fit(text: &str, width: Option<usize>, right: bool) -> String {
    let Some(width) = width else {
        return text.to_string();
    };
    let cut: String = text.chars().take(width).collect();
    if right {
        format!("{cut:>width$}")
    } else {
        format!("{cut:<width$}")
    }
}

/// One field of one job, as squeue prints it.
pub fn value(field: Field, job: &Job, ctx: RowContext) -> String {
    let spec = job.spec.clone().unwrap_or_default();
    let state = job_state(job);
    let or_na = |s: &str| {
        if s.is_empty() {
            "(null)".to_string()
        } else {
            s.to_string()
        }
    };
    match field {
        Field::JobId => crate::array_ids::display_id(job),
        Field::JobIdRaw => job.job_id.to_string(),
        Field::Partition => spec
            .partitions
            .first()
            .cloned()
            .unwrap_or_else(|| DEFAULT_PARTITION.to_string()),
        Field::Name => spec.name.clone(),
        Field::User => spec.user.clone(),
        Field::StateCompact => state_code(state).to_string(),
        Field::State => state_name(state).to_string(),
        Field::TimeUsed => format_elapsed(elapsed_s(job, ctx.now_ms)),
        Field::NumNodes => {
            if job.hosts.is_empty() {
                spec.nodes.max(1).to_string()
            } else {
                job.hosts.len().to_string()
            }
        }
        Field::ReasonList => {
            if state != JobState::Pending && !job.hosts.is_empty() {
                compress(&job.hosts)
            } else {
                nodelist_or_reason(job, state)
            }
        }
        Field::NodeList => compress(&job.hosts),
        Field::Reason => {
            if job.reason.is_empty() {
                "None".to_string()
            } else {
                job.reason.clone()
            }
        }
        Field::TimeLimit => limit_text(spec.time_limit_s),
        Field::TimeLeft => {
            if spec.time_limit_s == 0 {
                "UNLIMITED".to_string()
            } else {
                let used = elapsed_s(job, ctx.now_ms);
                format_elapsed(spec.time_limit_s.saturating_sub(used))
            }
        }
        Field::NumCpus => spec.cpus.max(1).to_string(),
        Field::MinMemory => {
            if spec.mem_mb == 0 {
                "0".to_string()
            } else {
                format_mem_mb(spec.mem_mb)
            }
        }
        // Slurm's %p: the priority scaled into [0, 1] by 2^32 - 1.
        Field::PriorityNormalized => {
            format!("{:.8}", job.priority as f64 / f64::from(u32::MAX))
        }
        Field::Priority => job.priority.to_string(),
        Field::SubmitTime => time_or_na(job.submit_ms),
        // A pending job's start is the last pass's prediction, if any.
        Field::StartTime if job.start_ms == 0 => time_or_na(job.predicted_start_ms),
        Field::StartTime => time_or_na(job.start_ms),
        Field::EndTime => time_or_na(job.end_ms),
        Field::Account => or_na(&spec.account),
        Field::Qos => or_na(&spec.qos),
        Field::Comment => or_na(&spec.comment),
        Field::WorkDir => spec.workdir.clone(),
        Field::Command => {
            let first = spec.command.lines().next().unwrap_or_default();
            if spec.command.lines().count() > 1 {
                "(batch script)".to_string()
            } else {
                first.to_string()
            }
        }
        Field::TresPerNode => {
            if spec.gres.is_empty() {
                "N/A".to_string()
            } else {
                spec.gres
                    .iter()
                    .map(|g| format!("gres/{g}"))
                    .collect::<Vec<_>>()
                    .join(",")
            }
        }
        Field::Nice => spec.nice.to_string(),
        Field::ExitCode => format!("{}:{}", job.exit_code, job.exit_signal),
        Field::Borrowed => if job.borrowed { "yes" } else { "no" }.to_string(),
    }
}

/// squeue's TIME_LIMIT: "UNLIMITED" for no limit of the job's own
/// (the partition's applies), else the limit.
fn limit_text(secs: u64) -> String {
    if secs == 0 {
        "UNLIMITED".to_string()
    } else {
        format_elapsed(secs)
    }
}

/// squeue prints "N/A" for a time that is not known (yet).
fn time_or_na(ms: u64) -> String {
    if ms == 0 {
        "N/A".to_string()
    } else {
        timestamp(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    fn jobs() -> Vec<Job> {
        vec![
            Job {
                job_id: 7,
                spec: Some(JobSpec {
                    name: "train".into(),
                    user: "alice".into(),
                    partitions: vec!["gpu".into()],
                    cpus: 4,
                    mem_mb: 4096,
                    time_limit_s: 3600,
                    account: "proj".into(),
                    ..Default::default()
                }),
                state: JobState::Running as i32,
                start_ms: 1_000_000,
                hosts: vec!["n01".into()],
                ..Default::default()
            },
            Job {
                job_id: 8,
                spec: Some(JobSpec {
                    name: "a-very-long-name".into(),
                    user: "bob".into(),
                    ..Default::default()
                }),
                state: JobState::Pending as i32,
                reason: "Priority".into(),
                submit_ms: 1_700_000_000_000,
                ..Default::default()
            },
        ]
    }

    const CTX: RowContext = RowContext {
        now_ms: 1_000_000 + 65_000,
    };

    #[test]
    fn default_format_is_squeue_default() {
        let format = parse_format(DEFAULT_FORMAT).expect("valid");
        assert_eq!(
            format.table(&jobs(), CTX, false),
            "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n\
             \x20                7       gpu    train    alice  R       1:05      1 n01\n\
             \x20                8     batch a-very-l      bob PD       0:00      1 (Priority)\n"
        );
    }

    #[test]
    fn custom_format_with_borrowed_and_left_justified_fields() {
        let format = parse_format("%i|%-x%10j|%.4C|%W|%m|%l|%L|%%").unwrap_err();
        assert_eq!(
            format.to_string(),
            "Invalid job format specification: %- is not a field letter"
        );
        let format = parse_format("%i|%10j|%.4C|%W|%m|%l|%L|%a|%%").expect("valid");
        assert_eq!(
            format.table(&jobs(), CTX, false),
            "JOBID|NAME      |CPUS|BORROWED|MIN_MEMORY|TIME_LIMIT|TIME_LEFT|ACCOUNT|%\n\
             7|train     |   4|no|4G|1:00:00|58:55|proj|%\n\
             8|a-very-lon|   1|no|0|UNLIMITED|UNLIMITED|(null)|%\n"
        );
    }

    #[test]
    fn long_format_names() {
        let format = parse_long_format("JobID:.6,name:12|,StateCompact:3,Borrowed").expect("ok");
        assert_eq!(
            format.table(&jobs(), CTX, false),
            " JOBIDNAME        |ST BORROWED            \n\
             \x20    7train       |R  no                  \n\
             \x20    8a-very-long-|PD no                  \n"
        );
        assert_eq!(
            parse_long_format("jobid,bogus").unwrap_err().to_string(),
            "Invalid job format specification: unknown field \"bogus\" (names as squeue -O takes them, e.g. JobID, Name, StateCompact, Borrowed)"
        );
        assert!(parse_long_format("name:.").is_err());
    }

    #[test]
    fn bad_formats_are_named() {
        assert_eq!(
            parse_format("%.18").unwrap_err(),
            FormatError::Unterminated("%.18".into())
        );
        assert_eq!(
            parse_format("%X").unwrap_err(),
            FormatError::UnknownLetter('X')
        );
        assert_eq!(
            parse_format("%99999i").unwrap_err(),
            FormatError::TooWide(99999)
        );
    }

    #[test]
    fn start_and_long_formats() {
        let format = parse_format(START_FORMAT).expect("valid");
        assert_eq!(
            format.header(),
            "             JOBID PARTITION     NAME     USER ST           START_TIME  NODES NODELIST(REASON)"
        );
        let mut pending = jobs()[1].clone();
        assert_eq!(
            format.row(&pending, CTX),
            "                 8     batch a-very-l      bob PD                  N/A      1 (Priority)"
        );
        pending.predicted_start_ms = 1_700_000_600_000;
        assert_eq!(
            format.row(&pending, CTX),
            "                 8     batch a-very-l      bob PD 2023-11-14T22:23:20Z      1 (Priority)"
        );
        let format = parse_format(LONG_FORMAT).expect("valid");
        assert_eq!(
            format.row(&jobs()[0], CTX),
            "                 7       gpu    train    alice  RUNNING       1:05   1:00:00      1 n01"
        );
    }
}
