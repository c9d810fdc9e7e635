//! `berth sprio` / `sprio`: each pending job's priority and its weighted
//! parts at the leader's last scheduling pass.
//!
//! Columns follow Slurm's sprio(1): `%[.][width]letter` fields, `.` for
//! right-justified, values cut to the width. Only weighted factors exist in
//! Berth's API, so the normalized letters (and `-n`) are refused by name.

use super::{ids::parse_job_ids, output, GlobalArgs};
use anyhow::{bail, Result};
use berth_client::{servers_from, Cluster};
use berth_proto::api::{GetPrioritiesRequest, PriorityFactors};
use clap::{ArgAction, Args};
use serde_json::{json, Value};
use std::process::ExitCode;

/// Slurm's default sprio format (weighted factors).
pub const DEFAULT_FORMAT: &str = "%.15i %9r %.10Y %.10S %.10A %.10F %.10J %.10P %.10Q";
/// Slurm's `sprio -l` format.
pub const LONG_FORMAT: &str =
    "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N";

/// Items one format may hold at most: a bound on what a user can make us
/// build per row.
const FORMAT_ITEMS_MAX: usize = 64;

/// `sprio`'s options. `-h` is --noheader, as in Slurm, so help is `--help`.
#[derive(Args, Debug, Clone, Default)]
#[command(disable_help_flag = true)]
pub struct SprioArgs {
    /// Only these jobs, comma-separated
    #[arg(short = 'j', long = "jobs", value_name = "ID[,...]")]
    pub jobs: Option<String>,
    /// Only these users' jobs, comma-separated
    #[arg(short = 'u', long = "user", value_name = "USER[,...]")]
    pub user: Option<String>,
    /// Only jobs that may run in these partitions, comma-separated
    #[arg(short = 'p', long = "partition", value_name = "PARTITION[,...]")]
    pub partition: Option<String>,
    /// Long format: adds USER, ASSOC and NICE
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// Normalized factors: not supported (Berth reports weighted factors)
    #[arg(short = 'n', long = "norm")]
    pub norm: bool,
    /// Output format: %[.][size]letter fields (%i %r %u %Y %S %A %B %F %J
    /// %P %Q %N) and text
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Leave out the header line
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Print the priorities as JSON
    #[arg(long)]
    pub json: bool,
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    JobId,
    Partition,
    User,
    Priority,
    Site,
    Age,
    Assoc,
    Fairshare,
    JobSize,
    PartitionFactor,
    Qos,
    Nice,
}

impl Field {
    fn from_letter(letter: char) -> Result<Field> {
        Ok(match letter {
            'i' => Field::JobId,
            'r' => Field::Partition,
            'u' => Field::User,
            'Y' => Field::Priority,
            'S' => Field::Site,
            'A' => Field::Age,
            'B' => Field::Assoc,
            'F' => Field::Fairshare,
            'J' => Field::JobSize,
            'P' => Field::PartitionFactor,
            'Q' => Field::Qos,
            'N' => Field::Nice,
            'a' | 'b' | 'f' | 'j' | 'p' | 'q' | 'y' | 't' => {
                bail!("format %{letter} is a normalized factor: not supported, Berth reports weighted factors")
            }
            'T' => bail!("format %T (TRES factors) is not supported: Berth has no TRES weights"),
            other => bail!("invalid sprio format field %{other}"),
        })
    }

    fn header(self) -> &'static str {
        match self {
            Field::JobId => "JOBID",
            Field::Partition | Field::PartitionFactor => "PARTITION",
            Field::User => "USER",
            Field::Priority => "PRIORITY",
            Field::Site => "SITE",
            Field::Age => "AGE",
            Field::Assoc => "ASSOC",
            Field::Fairshare => "FAIRSHARE",
            Field::JobSize => "JOBSIZE",
            Field::Qos => "QOS",
            Field::Nice => "NICE",
        }
    }

    fn value(self, p: &PriorityFactors) -> String {
        match self {
            Field::JobId => p.job_id.to_string(),
            Field::Partition => partition_of(p).to_string(),
            Field::User => p.user.clone(),
            // Slurm's priority is unsigned: a nice that pushes the sum
            // below zero shows as 0, as Job.priority does.
            Field::Priority => p.total.max(0).to_string(),
            Field::Site => p.site.to_string(),
            Field::Age => p.age.to_string(),
            Field::Assoc => p.assoc.to_string(),
            Field::Fairshare => p.fairshare.to_string(),
            Field::JobSize => p.jobsize.to_string(),
            Field::PartitionFactor => p.partition_factor.to_string(),
            Field::Qos => p.qos.to_string(),
            Field::Nice => p.nice.to_string(),
        }
    }
}

fn partition_of(p: &PriorityFactors) -> &str {
    if p.partition.is_empty() {
        berth_client::queue::DEFAULT_PARTITION
    } else {
        &p.partition
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Text(String),
    Field {
        field: Field,
        width: Option<usize>,
        right: bool,
    },
}

/// Parses a sprio `-o` format.
fn parse_format(format: &str) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut text = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        if !text.is_empty() {
            items.push(Item::Text(std::mem::take(&mut text)));
        }
        let right = chars.next_if_eq(&'.').is_some();
        let mut digits = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            digits.push(d);
        }
        let width = if digits.is_empty() {
            None
        } else {
            Some(
                digits
                    .parse::<usize>()
                    .ok()
                    .filter(|w| *w <= 1024)
                    .ok_or_else(|| anyhow::anyhow!("invalid sprio format width {digits}"))?,
            )
        };
        let Some(letter) = chars.next() else {
            bail!("invalid sprio format \"{format}\": ends after %");
        };
        items.push(Item::Field {
            field: Field::from_letter(letter)?,
            width,
            right,
        });
        if items.len() > FORMAT_ITEMS_MAX {
            bail!("invalid sprio format: more than {FORMAT_ITEMS_MAX} items");
        }
    }
    if !text.is_empty() {
        items.push(Item::Text(text));
    }
    Ok(items)
}

fn cell(value: &str, width: Option<usize>, right: bool) -> String {
    let Some(width) = width else {
        return value.to_string();
    };
    let cut: String = value.chars().take(width).collect();
    if right {
        format!("{cut:>width$}")
    } else {
        format!("{cut:<width$}")
    }
}

fn line(items: &[Item], text_of: impl Fn(Field) -> String) -> String {
    let mut out = String::new();
    for item in items {
        match item {
            Item::Text(t) => out.push_str(t),
            Item::Field {
                field,
                width,
                right,
            } => out.push_str(&cell(&text_of(*field), *width, *right)),
        }
    }
    // Slurm pads the last column too; trailing blanks carry nothing.
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// The table: a header unless `noheader`, then one line per job.
fn table(items: &[Item], rows: &[PriorityFactors], noheader: bool) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str(&line(items, |f| f.header().to_string()));
    }
    for p in rows {
        out.push_str(&line(items, |f| f.value(p)));
    }
    out
}

fn to_json(rows: &[PriorityFactors]) -> Value {
    json!({
        "jobs": rows
            .iter()
            .map(|p| json!({
                "job_id": p.job_id,
                "user": p.user,
                "account": p.account,
                "partition": partition_of(p),
                "priority": p.total,
                "fixed": p.fixed,
                "site": p.site,
                "age": p.age,
                "assoc": p.assoc,
                "fairshare": p.fairshare,
                "job_size": p.jobsize,
                "partition_factor": p.partition_factor,
                "qos": p.qos,
                "nice": p.nice,
            }))
            .collect::<Vec<_>>(),
    })
}

pub async fn run(global: &GlobalArgs, args: SprioArgs) -> Result<ExitCode> {
    if args.norm {
        bail!("-n/--norm is not supported: Berth reports weighted priority factors only");
    }
    let items = match (&args.format, args.long) {
        (Some(f), _) => parse_format(f)?,
        (None, true) => parse_format(LONG_FORMAT)?,
        (None, false) => parse_format(DEFAULT_FORMAT)?,
    };
    let job_ids = args
        .jobs
        .as_deref()
        .map(parse_job_ids)
        .transpose()?
        .unwrap_or_default();
    let users = berth_client::comma_list(args.user.as_deref());
    let partitions = berth_client::comma_list(args.partition.as_deref());

    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let request = GetPrioritiesRequest {
        job_ids,
        // One user is filtered by the server; several, here.
        user: if users.len() == 1 {
            users[0].clone()
        } else {
            String::new()
        },
    };
    let mut rows = cluster.get_priorities(request).await?.jobs;
    if !users.is_empty() {
        rows.retain(|p| users.contains(&p.user));
    }
    if !partitions.is_empty() {
        rows.retain(|p| {
            partition_of(p)
                .split(',')
                .any(|x| partitions.iter().any(|q| q == x))
        });
    }
    rows.sort_by_key(|p| p.job_id);
    if args.json {
        output::emit_json(&to_json(&rows))?;
    } else {
        output::emit(&table(&items, &rows, args.noheader))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> PriorityFactors {
        PriorityFactors {
            job_id: 65539,
            user: "alice".into(),
            account: "proj".into(),
            partition: "debug".into(),
            total: 62664,
            age: 1000,
            fairshare: 51664,
            jobsize: 1000,
            partition_factor: 9000,
            qos: 0,
            assoc: 0,
            nice: 0,
            site: 0,
            fixed: false,
        }
    }

    #[test]
    fn default_columns_are_slurms() {
        let items = parse_format(DEFAULT_FORMAT).expect("format");
        assert_eq!(
            table(&items, &[row()], false),
            "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS\n\
             \x20         65539 debug          62664          0       1000      51664       1000       9000          0\n"
        );
    }

    #[test]
    fn widths_cut_and_justify() {
        let items = parse_format("%5r|%.3i|%i%%").expect("format");
        let mut r = row();
        r.partition = "verylongname".into();
        assert_eq!(table(&items, &[r], true), "veryl|655|65539%\n");
    }

    #[test]
    fn a_total_below_zero_shows_as_zero() {
        let items = parse_format("%Y %N").expect("format");
        let mut r = row();
        r.total = -5;
        r.nice = -5;
        assert_eq!(table(&items, &[r], true), "0 -5\n");
    }

    #[test]
    fn bad_formats_are_named() {
        let err = |f: &str| parse_format(f).err().map(|e| e.to_string());
        assert_eq!(
            err("%y").as_deref(),
            Some("format %y is a normalized factor: not supported, Berth reports weighted factors")
        );
        assert_eq!(err("%Z").as_deref(), Some("invalid sprio format field %Z"));
        assert_eq!(
            err("%.10").as_deref(),
            Some("invalid sprio format \"%.10\": ends after %")
        );
        assert!(parse_format(&"%i".repeat(FORMAT_ITEMS_MAX + 1)).is_err());
    }
}
