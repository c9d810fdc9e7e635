//! How the pages write times, durations and sizes. Pure: the caller passes
//! "now" where a page says how long ago something was.

/// A wall-clock time (ms since the Unix epoch) as `YYYY-MM-DD HH:MM:SS UTC`;
/// 0 (never) as an em dash.
pub fn time_ms(ms: u64) -> String {
    if ms == 0 {
        return "\u{2014}".into();
    }
    let secs = ms / 1000;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// The (year, month, day) of a day count since 1970-01-01, in the
/// proleptic Gregorian calendar (Howard Hinnant's days-to-civil method).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A duration in seconds as `1d 2h`, `3h 4m`, `5m 6s` or `7s`.
pub fn duration_s(total_s: u64) -> String {
    let (d, h, m, s) = (
        total_s / 86_400,
        (total_s % 86_400) / 3600,
        (total_s % 3600) / 60,
        total_s % 60,
    );
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// A time relative to `now_ms`: `in 5m 6s`, `3h 4m ago`, `now`.
pub fn relative_ms(at_ms: u64, now_ms: u64) -> String {
    if at_ms == 0 {
        "\u{2014}".into()
    } else if at_ms > now_ms + 999 {
        format!("in {}", duration_s((at_ms - now_ms) / 1000))
    } else if now_ms > at_ms + 999 {
        format!("{} ago", duration_s((now_ms - at_ms) / 1000))
    } else {
        "now".into()
    }
}

/// MiB as `512 MiB`, `2.0 GiB` or `1.5 TiB`.
pub fn mem_mb(mb: u64) -> String {
    if mb >= 1024 * 1024 {
        format!("{:.1} TiB", mb as f64 / (1024.0 * 1024.0))
    } else if mb >= 1024 {
        format!("{:.1} GiB", mb as f64 / 1024.0)
    } else {
        format!("{mb} MiB")
    }
}

/// `n` and the word, plural when `n` is not 1 (`1 CPU`, `2 CPUs`).
pub fn count(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// GPUs a job asks for per host: the count of its `gpu[:type]:N` entry.
/// Entries that are not GPUs or do not parse count nothing (submit
/// refuses malformed ones, so only old records could have them).
pub fn gpus_asked(gres: &[String]) -> u64 {
    gres.iter()
        .filter(|g| g.starts_with("gpu:"))
        .filter_map(|g| g.rsplit(':').next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(time_ms(0), "\u{2014}");
        assert_eq!(time_ms(1), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.
        assert_eq!(time_ms(951_827_696_000), "2000-02-29 12:34:56 UTC");
        assert_eq!(time_ms(1_796_312_737_000), "2026-12-03 15:45:37 UTC");
    }

    #[test]
    fn durations_keep_two_units() {
        assert_eq!(duration_s(7), "7s");
        assert_eq!(duration_s(366), "6m 6s");
        assert_eq!(duration_s(3 * 3600 + 240), "3h 4m");
        assert_eq!(duration_s(86_400 + 7200 + 5), "1d 2h");
        assert_eq!(relative_ms(10_000, 4_000), "in 6s");
        assert_eq!(relative_ms(4_000, 10_000), "6s ago");
        assert_eq!(relative_ms(4_000, 4_500), "now");
        assert_eq!(relative_ms(0, 4_500), "\u{2014}");
    }

    #[test]
    fn sizes_and_gpu_counts() {
        assert_eq!(mem_mb(512), "512 MiB");
        assert_eq!(mem_mb(2048), "2.0 GiB");
        assert_eq!(mem_mb(3 * 1024 * 1024 / 2), "1.5 TiB");
        let gres = vec!["gpu:a100:2".to_string(), "emu:zebu:1".to_string()];
        assert_eq!(gpus_asked(&gres), 2);
        assert_eq!(gpus_asked(&["gpu:4".to_string()]), 4);
        assert_eq!(gpus_asked(&[]), 0);
        assert_eq!(count(1, "CPU"), "1 CPU");
        assert_eq!(count(0, "job"), "0 jobs");
    }
}
