//! Signals as Slurm names them: `sbatch --signal=[B:]SIG[@SECONDS]` (a
//! signal sent that long before the time limit) and `scancel --signal`.
//! One parser and one check for the CLI and for the state machine, so a
//! spec the CLI accepts is one `apply` accepts and the other way round.
//!
//! Numbers are Linux's (the only platform the agent runs on); the crate
//! stays pure, so they are a table here rather than `libc`'s constants.

/// Slurm's default `@SECONDS` when `--signal` names none.
pub const WARN_SIGNAL_DEFAULT_BEFORE_S: u32 = 60;
/// Largest `@SECONDS` Slurm accepts.
pub const WARN_SIGNAL_BEFORE_S_MAX: u32 = 0xffff;

/// Linux signal names (without `SIG`) and numbers that a job may be sent.
const SIGNALS: [(&str, u32); 31] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// A signal sent before the time limit (`--signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarnSignal {
    /// Linux signal number, 1..=31.
    pub signal: u32,
    /// Seconds before the time limit it is sent.
    pub before_s: u32,
    /// Only the batch shell gets it (`B:`), not the whole job.
    pub batch_only: bool,
}

impl std::fmt::Display for WarnSignal {
    /// Slurm's own spelling: `B:USR1@90`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.batch_only {
            f.write_str("B:")?;
        }
        write!(f, "{}@{}", signal_name(self.signal), self.before_s)
    }
}

/// A signal's number from its name (`USR1`, `SIGUSR1`, any case) or its
/// number (`10`), as Slurm reads `--signal` and `scancel -s`.
pub fn parse_signal(text: &str) -> Result<u32, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u32>() {
            Ok(n) if signal_known(n) => Ok(n),
            _ => Err(format!(
                "invalid signal number {t}: expected 1 to {}",
                SIGNALS.len()
            )),
        };
    }
    let upper = t.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, num)| num)
        .ok_or_else(|| {
            format!(
                "invalid signal name \"{t}\": expected a name such as USR1, SIGTERM or a number"
            )
        })
}

/// Whether `n` is a signal a job may be sent.
pub fn signal_known(n: u32) -> bool {
    (1..=SIGNALS.len() as u32).contains(&n)
}

/// The name without `SIG` (`USR1`); the number itself when unknown.
pub fn signal_name(n: u32) -> String {
    SIGNALS
        .iter()
        .find(|&&(_, num)| num == n)
        .map_or_else(|| n.to_string(), |(name, _)| (*name).to_string())
}

/// `--signal=[B:]SIG[@SECONDS]`. Slurm's `R:` (reservation end) is
/// refused by name: Berth reservations do not end jobs.
pub fn parse_warn_signal(text: &str) -> Result<WarnSignal, String> {
    let bad = |why: String| format!("invalid --signal \"{text}\": {why}");
    let t = text.trim();
    let (flags, rest) = match t.split_once(':') {
        Some(("", _)) => return Err(bad("empty flags before ':' (expected B:)".into())),
        Some((flags, rest)) => (flags, rest),
        None => ("", t),
    };
    let mut batch_only = false;
    for flag in flags.chars() {
        match flag.to_ascii_uppercase() {
            'B' => batch_only = true,
            'R' => {
                return Err(bad(
                    "R: (signal at the reservation's end) is not supported by Berth".into(),
                ))
            }
            other => return Err(bad(format!("unknown flag '{other}' (expected B:)"))),
        }
    }
    let (sig, before_s) = match rest.split_once('@') {
        Some((sig, secs)) => {
            let before_s = if !secs.is_empty() && secs.bytes().all(|b| b.is_ascii_digit()) {
                secs.parse::<u32>().ok()
            } else {
                None
            }
            .filter(|s| *s <= WARN_SIGNAL_BEFORE_S_MAX)
            .ok_or_else(|| {
                bad(format!(
                    "seconds \"{secs}\" must be a number from 0 to {WARN_SIGNAL_BEFORE_S_MAX}"
                ))
            })?;
            (sig, before_s)
        }
        None => (rest, WARN_SIGNAL_DEFAULT_BEFORE_S),
    };
    let signal = parse_signal(sig).map_err(bad)?;
    Ok(WarnSignal {
        signal,
        before_s,
        batch_only,
    })
}

/// The check `apply` makes of a spec's stored `--signal` fields: no signal
/// means all three are unset.
pub fn validate_warn_signal(signal: u32, before_s: u32, batch_only: bool) -> Result<(), String> {
    if signal == 0 {
        if before_s != 0 || batch_only {
            return Err(
                "warn_signal_before_s and warn_signal_batch_only need a warn_signal".into(),
            );
        }
        return Ok(());
    }
    if !signal_known(signal) {
        return Err(format!(
            "warn_signal {signal} is not a signal: expected 1 to {}",
            SIGNALS.len()
        ));
    }
    if before_s > WARN_SIGNAL_BEFORE_S_MAX {
        return Err(format!(
            "warn_signal_before_s {before_s} is more than {WARN_SIGNAL_BEFORE_S_MAX}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warn(signal: u32, before_s: u32, batch_only: bool) -> WarnSignal {
        WarnSignal {
            signal,
            before_s,
            batch_only,
        }
    }

    #[test]
    fn names_numbers_and_prefixes() {
        assert_eq!(parse_signal("USR1"), Ok(10));
        assert_eq!(parse_signal("sigusr2"), Ok(12));
        assert_eq!(parse_signal("SIGTERM"), Ok(15));
        assert_eq!(parse_signal("9"), Ok(9));
        assert_eq!(signal_name(10), "USR1");
        assert_eq!(signal_name(99), "99");
        for bad in ["", "0", "32", "USR3", "SIG", "-1", "1x"] {
            assert!(parse_signal(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn warn_signal_forms() {
        assert_eq!(parse_warn_signal("USR1"), Ok(warn(10, 60, false)));
        assert_eq!(parse_warn_signal("USR1@30"), Ok(warn(10, 30, false)));
        assert_eq!(parse_warn_signal("B:USR2@0"), Ok(warn(12, 0, true)));
        assert_eq!(parse_warn_signal("b:10@65535"), Ok(warn(10, 65535, true)));
        assert_eq!(parse_warn_signal("SIGINT@5"), Ok(warn(2, 5, false)));
        assert_eq!(warn(10, 90, true).to_string(), "B:USR1@90");
        assert_eq!(warn(15, 60, false).to_string(), "TERM@60");
    }

    #[test]
    fn warn_signal_errors_name_the_part() {
        let err = |t: &str| parse_warn_signal(t).unwrap_err();
        assert!(err("USR1@65536").contains("from 0 to 65535"));
        assert!(err("USR1@").contains("seconds \"\""));
        assert!(err("USR1@-5").contains("seconds \"-5\""));
        assert!(err("R:USR1").contains("R: (signal at the reservation's end)"));
        assert!(err("X:USR1").contains("unknown flag 'X'"));
        assert!(err(":USR1").contains("empty flags"));
        assert!(err("B:NOPE@5").contains("invalid signal name \"NOPE\""));
        assert!(err("@5").contains("invalid signal name"));
    }

    #[test]
    fn stored_fields_are_checked() {
        assert!(validate_warn_signal(0, 0, false).is_ok());
        assert!(validate_warn_signal(10, 65535, true).is_ok());
        assert!(validate_warn_signal(0, 60, false).is_err());
        assert!(validate_warn_signal(0, 0, true).is_err());
        assert!(validate_warn_signal(32, 60, false).is_err());
        assert!(validate_warn_signal(10, 65536, false).is_err());
    }
}
