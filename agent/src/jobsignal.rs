//! Signals a running job gets without being stopped: its `--signal`
//! (`[B:]SIG@SECONDS` before the time limit) and `scancel --signal`
//! requests, which arrive in the allocation's assignment.
//!
//! [`SignalState`] is the pure bookkeeping (what is due at a given wall
//! clock time, what was sent); [`deliver`] sends one signal to the job's
//! processes. The supervisor owns one `SignalState` per allocation.

use std::io;

use berth_proto::agent::Assignment;

/// One signal to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Linux signal number.
    pub signal: i32,
    /// Only the batch shell, not every process of the job.
    pub batch_only: bool,
    /// Why: the `--signal` warning or a `scancel --signal`.
    pub cause: Cause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// `--signal`, before the time limit.
    Warning,
    /// `scancel --signal`, with its sequence number.
    Request(u64),
}

/// When `a`'s `--signal` is due (leader wall clock, ms since the epoch):
/// `warn_signal_before_s` before the end of its time limit counted from
/// the placement, or at once when the limit is shorter than that. None for
/// a job without `--signal` or without a time limit.
pub fn warn_due_ms(a: &Assignment) -> Option<u64> {
    let spec = a.spec.as_ref()?;
    if spec.warn_signal == 0 || spec.time_limit_s == 0 {
        return None;
    }
    let limit_end_ms = a
        .start_ms
        .saturating_add(spec.time_limit_s.saturating_mul(1000));
    Some(
        limit_end_ms
            .saturating_sub(u64::from(spec.warn_signal_before_s) * 1000)
            .max(a.start_ms),
    )
}

/// The leader's clock minus this host's, from a time the leader stamped
/// (`leader_now_ms`) and this host's clock when it arrived. The transit
/// time makes the leader's look a little earlier than it was: a warning
/// then goes out that much later, never early.
pub fn clock_offset_ms(leader_now_ms: u64, local_now_ms: u64) -> i64 {
    let signed = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
    signed(leader_now_ms).saturating_sub(signed(local_now_ms))
}

/// This host's clock moved onto the leader's by `offset_ms`.
pub fn leader_clock_ms(local_now_ms: u64, offset_ms: i64) -> u64 {
    local_now_ms.saturating_add_signed(offset_ms)
}

/// What one allocation has been sent, and its next warning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignalState {
    /// The `--signal` warning: due time, signal, batch only.
    warn: Option<(u64, i32, bool)>,
    /// The due time the warning was last sent for. A time limit changed
    /// later (a new due time) makes a new warning.
    warn_sent_for_ms: Option<u64>,
    /// Highest `scancel --signal` sequence number sent.
    sent_seq: u64,
    /// A job re-adopted after an agent restart: what the first assignment
    /// lists (and a warning already due) counts as sent, since the earlier
    /// agent process may have sent it.
    baseline_pending: bool,
}

impl SignalState {
    /// For an allocation this agent process starts.
    pub fn new() -> SignalState {
        SignalState::default()
    }

    /// For an allocation re-adopted from the state directory.
    pub fn recovered() -> SignalState {
        SignalState {
            baseline_pending: true,
            ..SignalState::default()
        }
    }

    /// Takes in the allocation's current assignment (its time limit may
    /// have changed, new signal requests may have come) and returns what to
    /// send at `now_ms`, in order: requests by sequence number, then the
    /// warning if due. Call only while the job runs and is not being
    /// stopped; what it returns counts as sent.
    pub fn poll(&mut self, assignment: Option<&Assignment>, now_ms: u64) -> Vec<Delivery> {
        let mut out = Vec::new();
        if let Some(a) = assignment {
            self.warn = warn_due_ms(a).and_then(|due| {
                let spec = a.spec.as_ref()?;
                let signal = i32::try_from(spec.warn_signal).ok()?;
                Some((due, signal, spec.warn_signal_batch_only))
            });
            let mut requests: Vec<_> = a.signals.iter().collect();
            requests.sort_by_key(|r| r.seq);
            if self.baseline_pending {
                self.baseline_pending = false;
                self.sent_seq = requests.last().map_or(0, |r| r.seq);
                if let Some((due, _, _)) = self.warn {
                    if due <= now_ms {
                        self.warn_sent_for_ms = Some(due);
                    }
                }
            }
            for r in requests {
                if r.seq <= self.sent_seq {
                    continue;
                }
                self.sent_seq = r.seq;
                if let Ok(signal) = i32::try_from(r.signal) {
                    out.push(Delivery {
                        signal,
                        batch_only: r.batch_only,
                        cause: Cause::Request(r.seq),
                    });
                }
            }
        }
        if let Some((due, signal, batch_only)) = self.warn {
            if due <= now_ms && self.warn_sent_for_ms != Some(due) {
                self.warn_sent_for_ms = Some(due);
                out.push(Delivery {
                    signal,
                    batch_only,
                    cause: Cause::Warning,
                });
            }
        }
        out
    }

    /// When the next warning is due (wall clock ms), if one is waiting.
    pub fn next_due_ms(&self) -> Option<u64> {
        match self.warn {
            Some((due, _, _)) if self.warn_sent_for_ms != Some(due) => Some(due),
            _ => None,
        }
    }
}

/// Signals the job shim outlives (it catches them and goes on waiting for
/// the job), or that do it no harm by default: these may go to the whole
/// process group, shim included. Any other would end or stop the shim and
/// lose the job's exit status, so it goes to every other member.
const SHIM_SAFE_SIGNALS: [i32; 11] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGURG,
    libc::SIGWINCH,
];

/// Sends `d` to the job whose process group is `pgid`. `via_shim`: the
/// group's leader is the job shim and the batch shell is its child; else
/// the batch shell leads the group. Returns how many processes (or 1 for
/// the group) were signalled; 0 when none was left.
pub fn deliver(pgid: i32, via_shim: bool, d: &Delivery) -> io::Result<usize> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    let members = || group_members(pgid);
    let targets: Vec<i32> = if d.batch_only {
        if via_shim {
            members()
                .into_iter()
                .filter(|&(_, ppid)| ppid == pgid)
                .map(|(pid, _)| pid)
                .collect()
        } else {
            vec![pgid]
        }
    } else if !via_shim || SHIM_SAFE_SIGNALS.contains(&d.signal) {
        return crate::procgroup::signal_group(pgid, d.signal).map(usize::from);
    } else {
        members()
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|&pid| pid != pgid)
            .collect()
    };
    let mut sent = 0;
    for pid in targets.into_iter().filter(|&p| p > 1) {
        // SAFETY: kill(2) with a positive pid only sends a signal.
        if unsafe { libc::kill(pid, d.signal) } == 0 {
            sent += 1;
        } else {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(err);
            }
        }
    }
    Ok(sent)
}

/// Most /proc entries looked at when listing a group's members.
const PROC_SCAN_ENTRIES_MAX: usize = 1_000_000;

/// (pid, parent pid) of every process in group `pgid`, from /proc.
fn group_members(pgid: i32) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.take(PROC_SCAN_ENTRIES_MAX)
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name in parentheses: state, ppid, pgrp.
            let mut rest = text[text.rfind(')')? + 1..].split_whitespace().skip(1);
            let ppid: i32 = rest.next()?.parse().ok()?;
            let group: i32 = rest.next()?.parse().ok()?;
            (group == pgid).then_some((pid, ppid))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::agent::SignalRequest;
    use berth_proto::api::JobSpec;

    const START_MS: u64 = 1_700_000_000_000;

    fn assignment(limit_s: u64, signal: u32, before_s: u32, batch_only: bool) -> Assignment {
        Assignment {
            job_id: 1,
            alloc_id: 7,
            start_ms: START_MS,
            spec: Some(JobSpec {
                command: "true".into(),
                time_limit_s: limit_s,
                warn_signal: signal,
                warn_signal_before_s: before_s,
                warn_signal_batch_only: batch_only,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn request(seq: u64, signal: u32, batch_only: bool) -> SignalRequest {
        SignalRequest {
            seq,
            signal,
            batch_only,
        }
    }

    #[test]
    fn warning_is_due_before_the_limit() {
        // 10 min limit, USR1@60: due 9 minutes after the start.
        let a = assignment(600, 10, 60, false);
        assert_eq!(warn_due_ms(&a), Some(START_MS + 540_000));
        // A warning longer than the limit is due at the start.
        assert_eq!(warn_due_ms(&assignment(30, 10, 60, false)), Some(START_MS));
        // @0: at the limit itself.
        assert_eq!(
            warn_due_ms(&assignment(30, 10, 0, false)),
            Some(START_MS + 30_000)
        );
        // No signal, or no limit: never.
        assert_eq!(warn_due_ms(&assignment(600, 0, 0, false)), None);
        assert_eq!(warn_due_ms(&assignment(0, 10, 60, false)), None);
    }

    #[test]
    fn a_host_clock_behind_the_leaders_still_sends_the_warning_on_time() {
        let a = assignment(600, 10, 60, false);
        // This host's clock runs 5 s behind the leader's.
        let offset = clock_offset_ms(START_MS + 1_000, START_MS - 4_000);
        assert_eq!(offset, 5_000);
        let mut s = SignalState::new();
        // At the leader's due time the host's own clock reads 5 s short:
        // by its own clock nothing would be sent yet.
        let local = START_MS + 540_000 - 5_000;
        assert!(s.clone().poll(Some(&a), local).is_empty());
        assert_eq!(s.poll(Some(&a), leader_clock_ms(local, offset)).len(), 1);
        // A clock ahead moves the other way.
        assert_eq!(
            leader_clock_ms(START_MS, clock_offset_ms(10, 20)),
            START_MS - 10
        );
        assert_eq!(leader_clock_ms(5, -10), 0);
    }

    #[test]
    fn warning_is_sent_once_when_due() {
        let a = assignment(600, 10, 60, true);
        let mut s = SignalState::new();
        assert!(s.poll(Some(&a), START_MS + 539_999).is_empty());
        assert_eq!(s.next_due_ms(), Some(START_MS + 540_000));
        let sent = s.poll(Some(&a), START_MS + 540_000);
        assert_eq!(
            sent,
            vec![Delivery {
                signal: 10,
                batch_only: true,
                cause: Cause::Warning
            }]
        );
        assert_eq!(s.next_due_ms(), None);
        assert!(s.poll(Some(&a), START_MS + 600_000).is_empty());
        // Without a fresh assignment the known warning still fires.
        let mut s = SignalState::new();
        s.poll(Some(&a), START_MS);
        assert_eq!(s.poll(None, START_MS + 540_001).len(), 1);
    }

    #[test]
    fn a_new_time_limit_moves_the_warning() {
        let mut s = SignalState::new();
        s.poll(Some(&assignment(600, 10, 60, false)), START_MS);
        // The limit is lowered to 5 minutes: due at 4 minutes now.
        let lowered = assignment(300, 10, 60, false);
        assert!(s.poll(Some(&lowered), START_MS + 239_000).is_empty());
        assert_eq!(s.poll(Some(&lowered), START_MS + 240_000).len(), 1);
        // Raised again after the warning went: a new warning at the new
        // time, not at once.
        let raised = assignment(900, 10, 60, false);
        assert!(s.poll(Some(&raised), START_MS + 241_000).is_empty());
        assert_eq!(s.next_due_ms(), Some(START_MS + 840_000));
    }

    #[test]
    fn requests_are_sent_once_in_order() {
        let mut a = assignment(0, 0, 0, false);
        a.signals = vec![request(2, 12, true), request(1, 10, false)];
        let mut s = SignalState::new();
        let sent = s.poll(Some(&a), START_MS);
        assert_eq!(
            sent.iter().map(|d| d.cause).collect::<Vec<_>>(),
            vec![Cause::Request(1), Cause::Request(2)]
        );
        assert_eq!((sent[0].signal, sent[0].batch_only), (10, false));
        assert_eq!((sent[1].signal, sent[1].batch_only), (12, true));
        assert!(s.poll(Some(&a), START_MS + 1).is_empty());
        a.signals.push(request(3, 15, false));
        assert_eq!(s.poll(Some(&a), START_MS + 2).len(), 1);
    }

    #[test]
    fn a_recovered_job_does_not_get_old_signals_again() {
        let mut a = assignment(60, 10, 30, false);
        a.signals = vec![request(1, 10, false)];
        let mut s = SignalState::recovered();
        // The warning (due at 30 s) and request 1 may have gone already.
        assert!(s.poll(Some(&a), START_MS + 40_000).is_empty());
        a.signals.push(request(2, 12, false));
        assert_eq!(
            s.poll(Some(&a), START_MS + 41_000)
                .iter()
                .map(|d| d.cause)
                .collect::<Vec<_>>(),
            vec![Cause::Request(2)]
        );
    }

    #[test]
    fn refuses_dangerous_groups() {
        let d = Delivery {
            signal: libc::SIGUSR1,
            batch_only: false,
            cause: Cause::Warning,
        };
        for pgid in [-5, 0, 1] {
            assert!(deliver(pgid, false, &d).is_err(), "pgid {pgid}");
        }
    }
}
