//! Slurm time strings: `sbatch -t` limits in, squeue's TIME column out.
//!
//! Berth keeps every duration in whole seconds (`time_limit_s` on the wire),
//! so unlike Slurm, which rounds limits up to minutes, `-t 0:30` really
//! means thirty seconds.

use thiserror::Error;

/// The accepted shapes, in the words of Slurm's man page; quoted in errors so
/// a user sees every valid form at once.
const FORMATS: &str = "minutes, minutes:seconds, hours:minutes:seconds, days-hours, \
                       days-hours:minutes or days-hours:minutes:seconds";

const SECS_PER_MIN: u64 = 60;
const SECS_PER_HOUR: u64 = 60 * SECS_PER_MIN;
const SECS_PER_DAY: u64 = 24 * SECS_PER_HOUR;

/// A time limit that is not one of Slurm's formats.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid time limit \"{value}\": {why}")]
pub struct TimeError {
    /// The text as the user gave it.
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

impl TimeError {
    fn new(value: &str, why: impl Into<String>) -> Self {
        TimeError {
            value: value.to_string(),
            why: why.into(),
        }
    }

    fn malformed(value: &str) -> Self {
        Self::new(value, format!("expected {FORMATS}"))
    }
}

/// Parses a Slurm time limit (`sbatch -t`) into seconds.
///
/// Accepts "minutes", "minutes:seconds", "hours:minutes:seconds",
/// "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds".
/// The leading field may be as large as needed ("90" or "90:00" is ninety
/// minutes); every later field must stay below its unit (minutes and
/// seconds below 60, hours below 24 after a day count), because "1:75" is
/// far more likely a typo than a request.
///
/// "UNLIMITED" and "INFINITE" (any case), like "0", give 0. On the wire 0
/// means "the job sets no limit of its own", so the partition's limit
/// applies, which is what Slurm does with an unlimited job in a partition
/// that has a MaxTime.
pub fn parse_time_limit(input: &str) -> Result<u64, TimeError> {
    let text = input.trim();
    if text.eq_ignore_ascii_case("unlimited") || text.eq_ignore_ascii_case("infinite") {
        return Ok(0);
    }
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (Some(field(input, days)?), clock),
        None => (None, text),
    };
    let fields = clock
        .split(':')
        .map(|f| field(input, f))
        .collect::<Result<Vec<u64>, TimeError>>()?;
    let (d, h, m, s) = match (days, fields.as_slice()) {
        (None, &[m]) => (0, 0, m, 0),
        (None, &[m, s]) => (0, 0, m, below(input, s, 60, "seconds")?),
        (None, &[h, m, s]) => (
            0,
            h,
            below(input, m, 60, "minutes")?,
            below(input, s, 60, "seconds")?,
        ),
        (Some(d), &[h]) => (d, below(input, h, 24, "hours")?, 0, 0),
        (Some(d), &[h, m]) => (
            d,
            below(input, h, 24, "hours")?,
            below(input, m, 60, "minutes")?,
            0,
        ),
        (Some(d), &[h, m, s]) => (
            d,
            below(input, h, 24, "hours")?,
            below(input, m, 60, "minutes")?,
            below(input, s, 60, "seconds")?,
        ),
        _ => return Err(TimeError::malformed(input)),
    };
    [
        (d, SECS_PER_DAY),
        (h, SECS_PER_HOUR),
        (m, SECS_PER_MIN),
        (s, 1),
    ]
    .iter()
    .try_fold(0u64, |total, &(n, unit)| {
        n.checked_mul(unit)?.checked_add(total)
    })
    .ok_or_else(|| TimeError::new(input, "too large"))
}

/// One numeric field: ASCII digits only (no sign, no blanks inside).
fn field(input: &str, text: &str) -> Result<u64, TimeError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TimeError::malformed(input));
    }
    text.parse().map_err(|_| TimeError::new(input, "too large"))
}

fn below(input: &str, value: u64, limit: u64, what: &str) -> Result<u64, TimeError> {
    if value < limit {
        Ok(value)
    } else {
        Err(TimeError::new(
            input,
            format!("{what} must be below {limit}, got {value}"),
        ))
    }
}

/// Formats a duration the way squeue's TIME column does: "M:SS" under an
/// hour, "H:MM:SS" under a day, "D-HH:MM:SS" beyond.
pub fn format_elapsed(secs: u64) -> String {
    let (days, hours, mins, secs) = split(secs);
    if days > 0 {
        format!("{days}-{hours:02}:{mins:02}:{secs:02}")
    } else if hours > 0 {
        format!("{hours}:{mins:02}:{secs:02}")
    } else {
        format!("{mins}:{secs:02}")
    }
}

/// Formats a time limit the way `scontrol show job` does: "HH:MM:SS" or
/// "D-HH:MM:SS"; 0 (no limit of the job's own) as Slurm's "Partition_Limit".
pub fn format_time_limit(secs: u64) -> String {
    if secs == 0 {
        return "Partition_Limit".to_string();
    }
    let (days, hours, mins, secs) = split(secs);
    if days > 0 {
        format!("{days}-{hours:02}:{mins:02}:{secs:02}")
    } else {
        format!("{hours:02}:{mins:02}:{secs:02}")
    }
}

fn split(secs: u64) -> (u64, u64, u64, u64) {
    (
        secs / SECS_PER_DAY,
        secs % SECS_PER_DAY / SECS_PER_HOUR,
        secs % SECS_PER_HOUR / SECS_PER_MIN,
        secs % SECS_PER_MIN,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slurm_format_parses() {
        let cases = [
            ("0", 0),
            ("1", 60),
            ("90", 90 * 60),
            ("5:30", 5 * 60 + 30),
            ("90:00", 90 * 60),
            ("0:30", 30),
            ("1:02:03", 3600 + 2 * 60 + 3),
            ("100:00:00", 100 * 3600),
            ("2-0", 2 * 86400),
            ("1-12", 86400 + 12 * 3600),
            ("1-12:30", 86400 + 12 * 3600 + 30 * 60),
            ("1-12:30:15", 86400 + 12 * 3600 + 30 * 60 + 15),
            ("0-00:00:01", 1),
            ("  15  ", 15 * 60),
            ("007", 7 * 60),
        ];
        for (text, want) in cases {
            assert_eq!(parse_time_limit(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn unlimited_is_zero() {
        for text in ["UNLIMITED", "unlimited", "Infinite", "INFINITE"] {
            assert_eq!(parse_time_limit(text), Ok(0), "{text}");
        }
    }

    #[test]
    fn malformed_values_name_the_value_and_the_formats() {
        let err = parse_time_limit("1:xx").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid time limit \"1:xx\": expected minutes, minutes:seconds, \
             hours:minutes:seconds, days-hours, days-hours:minutes or \
             days-hours:minutes:seconds"
        );
        for text in [
            "",
            " ",
            "x",
            "1:",
            ":1",
            "1::2",
            "1:2:3:4",
            "-1",
            "1-",
            "1--2",
            "1-2-3",
            "1-2:3:4:5",
            "+5",
            "1.5",
            "1h",
            "1 2",
            "1:-2",
            "1 -2",
        ] {
            let err = parse_time_limit(text).unwrap_err();
            assert!(
                err.to_string().contains(&format!("\"{text}\"")),
                "{text}: {err}"
            );
            assert!(err.why.starts_with("expected minutes"), "{text}: {err}");
        }
    }

    #[test]
    fn later_fields_must_stay_below_their_unit() {
        for (text, why) in [
            ("1:60", "seconds must be below 60, got 60"),
            ("1:75:00", "minutes must be below 60, got 75"),
            ("1:00:99", "seconds must be below 60, got 99"),
            ("1-24", "hours must be below 24, got 24"),
            ("1-2:60", "minutes must be below 60, got 60"),
            ("1-2:3:60", "seconds must be below 60, got 60"),
        ] {
            assert_eq!(parse_time_limit(text).unwrap_err().why, why, "{text}");
        }
        assert_eq!(parse_time_limit("1:59"), Ok(119));
        assert_eq!(parse_time_limit("1-23:59:59"), Ok(2 * 86400 - 1));
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        for text in [
            "99999999999999999999",
            "999999999999999999",
            "999999999999999-0",
        ] {
            assert_eq!(
                parse_time_limit(text).unwrap_err().why,
                "too large",
                "{text}"
            );
        }
    }

    #[test]
    fn elapsed_matches_squeue() {
        let cases = [
            (0, "0:00"),
            (5, "0:05"),
            (59, "0:59"),
            (60, "1:00"),
            (3599, "59:59"),
            (3600, "1:00:00"),
            (3723, "1:02:03"),
            (86399, "23:59:59"),
            (86400, "1-00:00:00"),
            (90061, "1-01:01:01"),
            (12 * 86400 + 5, "12-00:00:05"),
        ];
        for (secs, want) in cases {
            assert_eq!(format_elapsed(secs), want, "{secs}");
        }
    }

    #[test]
    fn time_limits_match_scontrol() {
        assert_eq!(format_time_limit(0), "Partition_Limit");
        assert_eq!(format_time_limit(30), "00:00:30");
        assert_eq!(format_time_limit(3600), "01:00:00");
        assert_eq!(format_time_limit(86400 + 7200), "1-02:00:00");
    }

    #[test]
    fn formatting_round_trips_through_parsing() {
        for secs in [1, 59, 61, 3600, 3661, 86400, 90061, 1_000_000] {
            assert_eq!(parse_time_limit(&format_time_limit(secs)), Ok(secs));
        }
    }
}
