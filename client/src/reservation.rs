//! Admin reservations in Slurm's words: `scontrol create reservation`'s
//! `Key=Value` arguments read into the API's `Reservation`, and
//! `scontrol show reservation`'s layout. Times are UTC, like `--begin`.

use berth_proto::api::Reservation;
use thiserror::Error;

use crate::begin::parse_begin;
use crate::show::timestamp;
use crate::time::{format_time_limit, parse_time_limit};

/// Hosts one `Nodes=` list may expand to.
pub const RESERVATION_HOSTS_MAX: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReservationArgError {
    #[error("{0:?} is not Key=Value")]
    NotKeyValue(String),
    #[error("unknown key {0:?}: expected ReservationName, StartTime, EndTime, Duration, Nodes, Users, Accounts or Flags")]
    UnknownKey(String),
    #[error("{0} is given twice")]
    Twice(&'static str),
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("invalid {key} {value:?}: {why}")]
    Invalid {
        key: &'static str,
        value: String,
        why: String,
    },
    #[error("give EndTime or Duration, not both")]
    EndAndDuration,
    #[error("Flags=MAINT reserves the hosts for no one: drop Users and Accounts")]
    MaintWithUsers,
    #[error("Users or Accounts must be given (or Flags=MAINT for a maintenance window)")]
    NoOne,
}

/// Reads `scontrol create reservation` arguments at `now_ms`.
pub fn parse_create(words: &[String], now_ms: u64) -> Result<Reservation, ReservationArgError> {
    let mut name = None;
    let mut start = None;
    let mut end = None;
    let mut duration = None;
    let mut nodes = None;
    let mut users = None;
    let mut accounts = None;
    let mut flags = None;
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| ReservationArgError::NotKeyValue(word.clone()))?;
        let (slot, label) = match key.to_ascii_lowercase().as_str() {
            "reservationname" | "reservation" => (&mut name, "ReservationName"),
            "starttime" => (&mut start, "StartTime"),
            "endtime" => (&mut end, "EndTime"),
            "duration" => (&mut duration, "Duration"),
            "nodes" | "nodelist" => (&mut nodes, "Nodes"),
            "users" | "user" => (&mut users, "Users"),
            "accounts" | "account" => (&mut accounts, "Accounts"),
            "flags" | "flag" => (&mut flags, "Flags"),
            _ => return Err(ReservationArgError::UnknownKey(key.to_string())),
        };
        if slot.replace(value.to_string()).is_some() {
            return Err(ReservationArgError::Twice(label));
        }
    }
    let invalid = |key: &'static str, value: &str, why: String| ReservationArgError::Invalid {
        key,
        value: value.to_string(),
        why,
    };
    let name = name.ok_or(ReservationArgError::Missing("ReservationName"))?;
    if name.is_empty() {
        return Err(invalid("ReservationName", &name, "empty".into()));
    }
    let start_text = start.ok_or(ReservationArgError::Missing("StartTime"))?;
    let start_ms = parse_begin(&start_text, now_ms).map_err(|_| {
        invalid(
            "StartTime",
            &start_text,
            "expected now[+COUNT[UNIT]] or YYYY-MM-DD[THH:MM[:SS]]".into(),
        )
    })?;
    let end_ms = match (end, duration) {
        (Some(_), Some(_)) => return Err(ReservationArgError::EndAndDuration),
        (None, None) => return Err(ReservationArgError::Missing("EndTime or Duration")),
        (Some(e), None) => parse_begin(&e, now_ms).map_err(|_| {
            invalid(
                "EndTime",
                &e,
                "expected now[+COUNT[UNIT]] or YYYY-MM-DD[THH:MM[:SS]]".into(),
            )
        })?,
        (None, Some(d)) => {
            let s = parse_time_limit(&d).map_err(|e| invalid("Duration", &d, e.to_string()))?;
            if s == 0 {
                return Err(invalid(
                    "Duration",
                    &d,
                    "a window needs a length (minutes, or [days-]hours:minutes:seconds)".into(),
                ));
            }
            start_ms.saturating_add(s.saturating_mul(1000))
        }
    };
    if end_ms <= start_ms {
        return Err(invalid(
            "EndTime",
            &timestamp(end_ms),
            "it is not after StartTime".into(),
        ));
    }
    let nodes_text = nodes.ok_or(ReservationArgError::Missing("Nodes"))?;
    let hosts = expand_hostlist(&nodes_text).map_err(|why| invalid("Nodes", &nodes_text, why))?;
    let list = |v: Option<String>| -> Vec<String> {
        v.map(|t| {
            t.split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
    };
    let users = list(users);
    let accounts = list(accounts);
    let maint = match flags {
        None => false,
        Some(f) => {
            let mut maint = false;
            for flag in f.split(',').filter(|s| !s.is_empty()) {
                if flag.eq_ignore_ascii_case("maint") {
                    maint = true;
                } else {
                    return Err(invalid(
                        "Flags",
                        &f,
                        format!("{flag} is not supported (only MAINT)"),
                    ));
                }
            }
            maint
        }
    };
    match (maint, users.is_empty() && accounts.is_empty()) {
        (true, false) => return Err(ReservationArgError::MaintWithUsers),
        (false, true) => return Err(ReservationArgError::NoOne),
        _ => {}
    }
    Ok(Reservation {
        name,
        hosts,
        start_ms,
        end_ms,
        users,
        accounts,
    })
}

/// A Slurm host list (`node[01-03,07],gpu1`) expanded, in order.
pub fn expand_hostlist(text: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // The next item ends at a comma outside brackets.
        let mut depth = 0;
        let mut cut = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    cut = i;
                    break;
                }
                _ => {}
            }
        }
        let item = &rest[..cut];
        rest = rest.get(cut + 1..).unwrap_or("");
        if item.is_empty() {
            continue;
        }
        match item.split_once('[') {
            None => hosts.push(item.to_string()),
            Some((prefix, ranges)) => {
                let ranges = ranges
                    .strip_suffix(']')
                    .ok_or_else(|| format!("{item:?}: a bracket is not closed at the end"))?;
                for range in ranges.split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let width = lo.len();
                    let (Ok(a), Ok(b)) = (lo.parse::<u64>(), hi.parse::<u64>()) else {
                        return Err(format!("{item:?}: {range:?} is not a number or a range"));
                    };
                    if a > b {
                        return Err(format!("{item:?}: {range:?} goes down"));
                    }
                    for n in a..=b {
                        if hosts.len() >= RESERVATION_HOSTS_MAX {
                            return Err(format!("more than {RESERVATION_HOSTS_MAX} hosts"));
                        }
                        hosts.push(format!("{prefix}{n:0width$}"));
                    }
                }
            }
        }
        if hosts.len() > RESERVATION_HOSTS_MAX {
            return Err(format!("more than {RESERVATION_HOSTS_MAX} hosts"));
        }
    }
    if hosts.is_empty() {
        return Err("no hosts".into());
    }
    Ok(hosts)
}

/// `scontrol show reservation` in Slurm's layout, one record per
/// reservation (`State` read at `now_ms`).
pub fn format_show(reservations: &[Reservation], now_ms: u64) -> String {
    if reservations.is_empty() {
        return "No reservations in the system\n".to_string();
    }
    let null = |v: &[String]| {
        if v.is_empty() {
            "(null)".to_string()
        } else {
            v.join(",")
        }
    };
    reservations
        .iter()
        .map(|r| {
            let maint = r.users.is_empty() && r.accounts.is_empty();
            let active = r.start_ms <= now_ms && now_ms < r.end_ms;
            format!(
                "ReservationName={} StartTime={} EndTime={} Duration={}\n   Nodes={} NodeCnt={} Flags={}\n   Users={} Accounts={} State={}\n\n",
                r.name,
                timestamp(r.start_ms),
                timestamp(r.end_ms),
                format_time_limit(r.end_ms.saturating_sub(r.start_ms) / 1000),
                crate::hostlist::compress(&r.hosts),
                r.hosts.len(),
                if maint { "MAINT" } else { "(null)" },
                null(&r.users),
                null(&r.accounts),
                if active { "ACTIVE" } else { "INACTIVE" },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn reads_a_maintenance_window_and_a_user_reservation() {
        let r = parse_create(
            &words("ReservationName=maint StartTime=now Duration=60 Nodes=h[1-2] Flags=MAINT"),
            NOW,
        )
        .expect("parse");
        assert_eq!(r.name, "maint");
        assert_eq!((r.start_ms, r.end_ms), (NOW, NOW + 3_600_000));
        assert_eq!(r.hosts, ["h1", "h2"]);
        assert!(r.users.is_empty() && r.accounts.is_empty());
        let r = parse_create(
            &words("reservation=gpu starttime=now+1hour endtime=now+2hours nodes=gpu[01,03],cpu1 users=alice,bob"),
            NOW,
        )
        .expect("parse");
        assert_eq!((r.start_ms, r.end_ms), (NOW + 3_600_000, NOW + 7_200_000));
        assert_eq!(r.hosts, ["gpu01", "gpu03", "cpu1"]);
        assert_eq!(r.users, ["alice", "bob"]);
    }

    #[test]
    fn refuses_what_is_wrong_by_name() {
        for (text, says) in [
            (
                "ReservationName=r StartTime=now Duration=10 Nodes=h1",
                "Users or Accounts",
            ),
            (
                "ReservationName=r StartTime=now Duration=10 Nodes=h1 Users=a Flags=MAINT",
                "MAINT",
            ),
            (
                "ReservationName=r StartTime=now Duration=10 EndTime=now+1hour Nodes=h1 Users=a",
                "not both",
            ),
            (
                "ReservationName=r StartTime=now Nodes=h1 Users=a",
                "EndTime or Duration",
            ),
            (
                "StartTime=now Duration=10 Nodes=h1 Users=a",
                "ReservationName",
            ),
            (
                "ReservationName=r StartTime=yesterdayish Duration=10 Nodes=h1 Users=a",
                "StartTime",
            ),
            (
                "ReservationName=r StartTime=now Duration=10 Nodes=h[3-1] Users=a",
                "goes down",
            ),
            (
                "ReservationName=r StartTime=now Duration=10 Nodes=h1 Users=a Flags=IGNORE_JOBS",
                "only MAINT",
            ),
            (
                "ReservationName=r StartTime=now Duration=10 Nodes=h1 Users=a Colour=red",
                "Colour",
            ),
            (
                "ReservationName=r StartTime=now+1hour EndTime=now Nodes=h1 Users=a",
                "not after",
            ),
            ("ReservationName=r Users=a Users=b", "twice"),
        ] {
            let err = parse_create(&words(text), NOW).expect_err(text).to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn shows_in_slurms_layout() {
        let r = Reservation {
            name: "maint".into(),
            hosts: vec!["h1".into(), "h2".into()],
            start_ms: NOW,
            end_ms: NOW + 5_400_000,
            users: vec![],
            accounts: vec![],
        };
        let text = format_show(&[r], NOW + 1);
        assert_eq!(
            text,
            "ReservationName=maint StartTime=2023-11-14T22:13:20Z EndTime=2023-11-14T23:43:20Z Duration=01:30:00\n   Nodes=h[1-2] NodeCnt=2 Flags=MAINT\n   Users=(null) Accounts=(null) State=ACTIVE\n\n"
        );
        assert_eq!(format_show(&[], NOW), "No reservations in the system\n");
    }
}
