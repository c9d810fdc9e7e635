//! sbatch's `--begin` times, in every form Slurm accepts, as ms since the
//! epoch. Berth's clocks and output are UTC, so dates and times of day are
//! read as UTC (as sacct's `-S`/`-E` are).
//!
//! - a time of day `HH:MM[:SS]`, optionally with `AM`/`PM`, or one of
//!   `midnight`, `noon`, `elevenses` (11:00), `fika` (15:00), `teatime`
//!   (16:00): today at that time, or tomorrow if it has passed;
//! - a date `YYYY-MM-DD`, `MM/DD[/YY]`, `MM.DD[.YY]`, `MMDDYY`, or `today`
//!   / `tomorrow`: that day at 00:00, or with `THH:MM[:SS]` at that time
//!   (`YYYY-MM-DDTHH:MM`, `MM/DD/YYTHH:MM`);
//! - `now[+COUNT[UNIT]]`: UNIT is seconds (the default), minutes, hours,
//!   days or weeks, or an abbreviation of one (`s`, `min`, `h`, `d`, `w`).

use thiserror::Error;

use crate::sacct::{days_from_civil, days_in};

const DAY_MS: u64 = 86_400_000;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BeginError {
    #[error(
        "invalid --begin {0:?}: expected HH:MM[:SS][AM|PM], YYYY-MM-DD[THH:MM[:SS]], \
         MM/DD[/YY], MMDDYY, now+COUNT[seconds|minutes|hours|days|weeks], today, tomorrow, \
         midnight, noon, elevenses, fika or teatime"
    )]
    Invalid(String),
}

/// Parses `text` as sbatch's `--begin` at `now_ms`.
pub fn parse_begin(text: &str, now_ms: u64) -> Result<u64, BeginError> {
    let bad = || BeginError::Invalid(text.to_string());
    // Slurm allows spaces inside `now + 1 hour`; none of the forms needs one.
    let t: String = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    if t.is_empty() {
        return Err(bad());
    }
    let midnight = now_ms - now_ms % DAY_MS;
    if let Some(rest) = t.strip_prefix("now") {
        return if rest.is_empty() {
            Ok(now_ms)
        } else {
            let rest = rest.strip_prefix('+').ok_or_else(bad)?;
            now_ms
                .checked_add(offset_ms(rest).ok_or_else(bad)?)
                .ok_or_else(bad)
        };
    }
    // A named or clock time of day alone: the next time it comes.
    if let Some(clock_ms) = time_of_day(&t) {
        let today = midnight + clock_ms;
        return Ok(if today <= now_ms {
            today + DAY_MS
        } else {
            today
        });
    }
    // The last 't' separates a date from its time; `today` and `tomorrow`
    // have a 't' of their own, which leaves nothing before it.
    let (date, clock) = match t.rsplit_once('t') {
        Some((d, c))
            if d.ends_with(|ch: char| ch.is_ascii_digit()) || d == "today" || d == "tomorrow" =>
        {
            (d, Some(c))
        }
        _ => (t.as_str(), None),
    };
    let day_ms = match date {
        "today" => midnight,
        "tomorrow" => midnight + DAY_MS,
        _ => date_ms(date, now_ms).ok_or_else(bad)?,
    };
    let clock_ms = match clock {
        Some(c) => time_of_day(c).ok_or_else(bad)?,
        None => 0,
    };
    Ok(day_ms + clock_ms)
}

/// `COUNT[UNIT]` after `now+`, in ms.
fn offset_ms(text: &str) -> Option<u64> {
    let digits = text.len() - text.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let count: u64 = text[..digits].parse().ok()?;
    let unit_ms = match &text[digits..] {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => DAY_MS,
        "w" | "week" | "weeks" => 7 * DAY_MS,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

/// A time of day in ms after midnight: `HH:MM[:SS]` with an optional
/// `am`/`pm`, or a named one.
fn time_of_day(text: &str) -> Option<u64> {
    let named_h = match text {
        "midnight" => Some(0),
        "noon" => Some(12),
        "elevenses" => Some(11),
        "fika" => Some(15),
        "teatime" => Some(16),
        _ => None,
    };
    if let Some(h) = named_h {
        return Some(h * 3_600_000);
    }
    let (clock, half) = if let Some(c) = text.strip_suffix("am") {
        (c, Some(false))
    } else if let Some(c) = text.strip_suffix("pm") {
        (c, Some(true))
    } else {
        (text, None)
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.len() <= 2 && s.chars().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let mut h = number(parts[0])?;
    let m = number(parts[1])?;
    let s = match parts.get(2) {
        Some(p) => number(p)?,
        None => 0,
    };
    match half {
        Some(pm) => {
            if !(1..=12).contains(&h) {
                return None;
            }
            h = match (pm, h) {
                (false, 12) => 0,
                (true, 12) => 12,
                (true, h) => h + 12,
                (false, h) => h,
            };
        }
        None if h > 23 => return None,
        None => {}
    }
    (m <= 59 && s <= 59).then_some((h * 3600 + m * 60 + s) * 1000)
}

/// A date's midnight: `YYYY-MM-DD`, `MM/DD[/YY[YY]]`, `MM.DD[.YY[YY]]` or
/// `MMDDYY`. Without a year, this year.
fn date_ms(text: &str, now_ms: u64) -> Option<u64> {
    let number = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let year_of = |s: &str| -> Option<u64> {
        match s.len() {
            2 => Some(2000 + number(s)?),
            4 => number(s),
            _ => None,
        }
    };
    let this_year = || -> Option<u64> { crate::show::timestamp(now_ms).get(..4)?.parse().ok() };
    let (year, month, day) = if text.contains('-') {
        let p: Vec<&str> = text.split('-').collect();
        if p.len() != 3 || p[0].len() != 4 {
            return None;
        }
        (number(p[0])?, number(p[1])?, number(p[2])?)
    } else if let Some(sep) = ['/', '.'].into_iter().find(|&c| text.contains(c)) {
        let p: Vec<&str> = text.split(sep).collect();
        let year = match p.len() {
            2 => this_year()?,
            3 => year_of(p[2])?,
            _ => return None,
        };
        (year, number(p[0])?, number(p[1])?)
    } else if text.len() == 6 {
        (
            year_of(&text[4..6])?,
            number(&text[0..2])?,
            number(&text[2..4])?,
        )
    } else {
        return None;
    };
    let valid = (1970..=9999).contains(&year)
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in(year, month);
    valid.then(|| days_from_civil(year, month, day) * DAY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T16:45:30Z.
    const NOW: u64 = 1_796_316_330_000;
    const MIDNIGHT: u64 = NOW - NOW % DAY_MS;

    fn at(text: &str) -> u64 {
        parse_begin(text, NOW).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn now_is_a_test_constant_that_reads_back() {
        assert_eq!(crate::show::timestamp(NOW), "2026-12-03T16:45:30Z");
    }

    #[test]
    fn now_plus_count_and_unit() {
        assert_eq!(at("now"), NOW);
        assert_eq!(at("now+60"), NOW + 60_000);
        assert_eq!(at("now+30s"), NOW + 30_000);
        assert_eq!(at("now+2secs"), NOW + 2_000);
        assert_eq!(at("now+1min"), NOW + 60_000);
        assert_eq!(at("now+5mins"), NOW + 300_000);
        assert_eq!(at("now+1hour"), NOW + 3_600_000);
        assert_eq!(at("NOW + 2 hours"), NOW + 7_200_000);
        assert_eq!(at("now+1day"), NOW + DAY_MS);
        assert_eq!(at("now+3d"), NOW + 3 * DAY_MS);
        assert_eq!(at("now+1weeks"), NOW + 7 * DAY_MS);
        assert_eq!(at("now+2w"), NOW + 14 * DAY_MS);
    }

    #[test]
    fn time_of_day_is_the_next_one() {
        // Later today.
        assert_eq!(at("17:00"), MIDNIGHT + 17 * 3_600_000);
        assert_eq!(at("16:45:31"), MIDNIGHT + (16 * 3600 + 45 * 60 + 31) * 1000);
        assert_eq!(at("teatime"), MIDNIGHT + 16 * 3_600_000 + DAY_MS);
        assert_eq!(at("5:30pm"), MIDNIGHT + (17 * 3600 + 30 * 60) * 1000);
        // Passed already: tomorrow.
        assert_eq!(at("16:00"), MIDNIGHT + DAY_MS + 16 * 3_600_000);
        assert_eq!(
            at("16:45:30"),
            MIDNIGHT + DAY_MS + (16 * 3600 + 45 * 60 + 30) * 1000
        );
        assert_eq!(at("midnight"), MIDNIGHT + DAY_MS);
        assert_eq!(at("noon"), MIDNIGHT + DAY_MS + 12 * 3_600_000);
        assert_eq!(at("elevenses"), MIDNIGHT + DAY_MS + 11 * 3_600_000);
        assert_eq!(at("fika"), MIDNIGHT + DAY_MS + 15 * 3_600_000);
        assert_eq!(at("12:15am"), MIDNIGHT + DAY_MS + 15 * 60_000);
        assert_eq!(at("12:00PM"), MIDNIGHT + DAY_MS + 12 * 3_600_000);
    }

    #[test]
    fn dates_with_and_without_time() {
        let dec24 = days_from_civil(2026, 12, 24) * DAY_MS;
        assert_eq!(at("2026-12-24"), dec24);
        assert_eq!(at("2026-12-24T12:34"), dec24 + (12 * 3600 + 34 * 60) * 1000);
        assert_eq!(
            at("2026-12-24T12:34:56"),
            dec24 + (12 * 3600 + 34 * 60 + 56) * 1000
        );
        assert_eq!(at("12/24"), dec24);
        assert_eq!(at("12/24/26"), dec24);
        assert_eq!(at("12/24/2026T08:00"), dec24 + 8 * 3_600_000);
        assert_eq!(at("12.24.26"), dec24);
        assert_eq!(at("122426"), dec24);
        assert_eq!(at("today"), MIDNIGHT);
        assert_eq!(at("tomorrow"), MIDNIGHT + DAY_MS);
        assert_eq!(at("tomorrowT09:00"), MIDNIGHT + DAY_MS + 9 * 3_600_000);
    }

    #[test]
    fn bad_forms_are_refused_by_name() {
        for text in [
            "",
            "soon",
            "now-5",
            "now+",
            "now+5fortnights",
            "24:00",
            "12:60",
            "13:00pm",
            "2026-02-30",
            "2026-13-01",
            "13/01/26",
            "1224",
            "2026-12-24T25:00",
            "now+99999999999999999weeks",
        ] {
            let err = parse_begin(text, NOW).unwrap_err();
            assert_eq!(err, BeginError::Invalid(text.to_string()), "{text}");
        }
        assert!(parse_begin("soon", NOW)
            .unwrap_err()
            .to_string()
            .starts_with("invalid --begin \"soon\": expected HH:MM[:SS]"));
    }
}
