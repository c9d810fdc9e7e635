//! What a chaos drill prints: the faults injected with their failover
//! times, the operations acknowledged, the jobs' final states and each
//! invariant's result. Also written as JSON (`--json FILE`).

use std::collections::BTreeMap;
use std::fmt;

use berth_proto::api::JobState;

use super::checks::{CancelOutcome, FinalJob, Violation};
use super::faults::FaultRecord;
use super::workload::SubmitterLog;
use super::{Digests, DrillOptions};

/// Violations printed per check at most (the JSON has them all).
const VIOLATIONS_PRINTED_MAX: usize = 10;

#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckResult {
    pub name: &'static str,
    pub violations: Vec<Violation>,
}

impl CheckResult {
    pub fn new(name: &'static str, violations: Vec<Violation>) -> CheckResult {
        CheckResult { name, violations }
    }
}

/// What the linearizability check covered and what it cost.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LincheckFigures {
    /// Ops searched, the final listing's reads included.
    pub ops: usize,
    /// Keys (request ids) searched, each on its own.
    pub keys: usize,
    /// Search nodes explored, all keys together.
    pub steps: u64,
    /// Keys whose search hit its step bound: neither proved nor refuted.
    pub undecided_keys: Vec<String>,
    /// Wall time of the check (the history copied and searched).
    pub check_ms: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub seed: u64,
    pub nodes: u64,
    pub agents: u32,
    pub submitters: u32,
    /// Where the nodes and agents ran (in namespaces or containers, the
    /// link cuts were among the faults).
    pub isolation: String,
    pub workload_s: f64,
    pub faults: Vec<FaultRecord>,
    /// Failover times (fault → agreed new leader), ms, sorted.
    pub failover_ms: Vec<u64>,
    /// Fault → the new leader's first scheduling pass, ms, sorted.
    pub first_pass_ms: Vec<u64>,
    pub submits_sent: usize,
    pub submits_acked: usize,
    pub submit_attempts: u64,
    pub cancels_acked: usize,
    pub cancels_sent: usize,
    pub qos_edits_acked: usize,
    pub qos_edits_sent: usize,
    pub reads: u64,
    pub host_samples: u64,
    pub jobs_by_state: BTreeMap<String, usize>,
    pub runs_observed: usize,
    pub torn_marker_lines: usize,
    /// (node, applied index, digest) of each store at the end.
    pub digests: Digests,
    pub checks: Vec<CheckResult>,
    pub lincheck: LincheckFigures,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        opts: &DrillOptions,
        workload_s: f64,
        faults: Vec<FaultRecord>,
        logs: &[SubmitterLog],
        jobs: &[FinalJob],
        host_samples: u64,
        runs_observed: usize,
        torn_marker_lines: usize,
        digests: Digests,
        checks: Vec<CheckResult>,
        lincheck: LincheckFigures,
    ) -> Report {
        let mut failover_ms: Vec<u64> = faults.iter().filter_map(|f| f.failover_ms).collect();
        failover_ms.sort_unstable();
        let mut first_pass_ms: Vec<u64> = faults.iter().filter_map(|f| f.first_pass_ms).collect();
        first_pass_ms.sort_unstable();
        let mut jobs_by_state = BTreeMap::new();
        for j in jobs {
            let name = JobState::try_from(j.state)
                .map_or_else(|_| format!("state {}", j.state), |s| format!("{s:?}"));
            *jobs_by_state.entry(name).or_insert(0) += 1;
        }
        let all = |f: fn(&SubmitterLog) -> usize| logs.iter().map(f).sum::<usize>();
        Report {
            seed: opts.seed,
            nodes: opts.nodes,
            agents: opts.agents,
            submitters: opts.submitters,
            isolation: match opts.isolation {
                crate::harness::Isolation::Loopback => "loopback",
                crate::harness::Isolation::Namespaces => "namespaces",
                crate::harness::Isolation::Containers => "containers",
            }
            .to_string(),
            workload_s,
            faults,
            failover_ms,
            first_pass_ms,
            submits_sent: all(|l| l.submits.len()),
            submits_acked: all(|l| l.submits.iter().filter(|s| s.job_id.is_some()).count()),
            submit_attempts: logs
                .iter()
                .flat_map(|l| &l.submits)
                .map(|s| u64::from(s.attempts))
                .sum(),
            cancels_acked: all(|l| {
                l.cancels
                    .iter()
                    .filter(|c| matches!(c.outcome, CancelOutcome::Acked { .. }))
                    .count()
            }),
            cancels_sent: all(|l| l.cancels.len()),
            qos_edits_acked: all(|l| l.qos_edits.iter().filter(|e| e.acked).count()),
            qos_edits_sent: all(|l| l.qos_edits.len()),
            reads: logs.iter().map(|l| l.reads).sum(),
            host_samples,
            jobs_by_state,
            runs_observed,
            torn_marker_lines,
            digests,
            checks,
            lincheck,
        }
    }

    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.violations.is_empty())
    }

    /// The `q`-quantile (0..=1) of the failover times, nearest rank.
    pub fn failover_quantile_ms(&self, q: f64) -> Option<u64> {
        super::plot::nearest_rank(&self.failover_ms, q)
    }
}

/// Per kind of fault that took the leader: (kind's name, failovers to an
/// agreed leader sorted, failovers to the first pass sorted).
pub fn failover_by_kind(faults: &[FaultRecord]) -> Vec<(String, Vec<u64>, Vec<u64>)> {
    let mut by_kind: BTreeMap<String, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for f in faults {
        if let Some(ms) = f.failover_ms {
            let entry = by_kind.entry(format!("{:?}", f.kind)).or_default();
            entry.0.push(ms);
            entry.1.extend(f.first_pass_ms);
        }
    }
    by_kind
        .into_iter()
        .map(|(kind, (mut agreed, mut pass))| {
            agreed.sort_unstable();
            pass.sort_unstable();
            (kind, agreed, pass)
        })
        .collect()
}

/// "p50 A ms, max B ms over N" for sorted samples, or "none".
fn p50_max(sorted_ms: &[u64]) -> String {
    match (super::plot::nearest_rank(sorted_ms, 0.5), sorted_ms.last()) {
        (Some(p50), Some(max)) => format!("p50 {p50} ms, max {max} ms over {}", sorted_ms.len()),
        _ => "none".to_string(),
    }
}

/// How many faults of each kind, by the kind's name.
pub fn faults_by_kind(faults: &[FaultRecord]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for f in faults {
        *out.entry(format!("{:?}", f.kind)).or_insert(0) += 1;
    }
    out
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "chaos drill: seed {}, {} nodes, {} agents, {} submitters, workload {:.1} s, {}",
            self.seed,
            self.nodes,
            self.agents,
            self.submitters,
            self.workload_s,
            match self.isolation.as_str() {
                "namespaces" => "each process in its own network namespace",
                "containers" => "each process in its own docker compose container",
                _ => "on loopback (no link cuts)",
            }
        )?;
        let by_kind: Vec<String> = faults_by_kind(&self.faults)
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        writeln!(
            f,
            "faults injected: {} ({})",
            self.faults.len(),
            by_kind.join(", ")
        )?;
        for (n, fault) in self.faults.iter().enumerate() {
            let failover = fault
                .failover_ms
                .map_or(String::new(), |ms| format!(", new leader after {ms} ms"));
            let first_pass = fault.first_pass_ms.map_or(String::new(), |ms| {
                format!(", its first pass after {ms} ms")
            });
            let membership = fault.membership_ms.map_or(String::new(), |ms| {
                format!(", new voters agreed after {ms} ms")
            });
            writeln!(
                f,
                "  {:>3}. +{:>6} ms {:?} ({}){failover}{first_pass}{membership}, recovered after {} ms",
                n + 1,
                fault.at_ms,
                fault.kind,
                fault.target,
                fault.recovered_ms
            )?;
        }
        if let (Some(p50), Some(p99), Some(max)) = (
            self.failover_quantile_ms(0.5),
            self.failover_quantile_ms(0.99),
            self.failover_ms.last(),
        ) {
            writeln!(
                f,
                "failover to an agreed leader over {} faults: p50 {p50} ms, p99 {p99} ms, max {max} ms",
                self.failover_ms.len()
            )?;
        }
        if let (Some(p50), Some(p99), Some(max)) = (
            super::plot::nearest_rank(&self.first_pass_ms, 0.5),
            super::plot::nearest_rank(&self.first_pass_ms, 0.99),
            self.first_pass_ms.last(),
        ) {
            writeln!(
                f,
                "failover to the new leader's first pass over {} faults: p50 {p50} ms, p99 {p99} ms, max {max} ms",
                self.first_pass_ms.len()
            )?;
        }
        for (kind, agreed, pass) in failover_by_kind(&self.faults) {
            writeln!(
                f,
                "  {kind}: agreed leader {}; first pass {}",
                p50_max(&agreed),
                p50_max(&pass)
            )?;
        }
        let mut membership: Vec<u64> = self.faults.iter().filter_map(|f| f.membership_ms).collect();
        membership.sort_unstable();
        if let (Some(p50), Some(max)) = (
            super::plot::nearest_rank(&membership, 0.5),
            membership.last(),
        ) {
            writeln!(
                f,
                "membership changes to agreed new voters over {} faults: p50 {p50} ms, max {max} ms",
                membership.len()
            )?;
        }
        writeln!(
            f,
            "operations: submits {} acknowledged of {} ({} attempts), cancels {} of {}, QOS edits {} of {}, reads {}, host samples {}",
            self.submits_acked,
            self.submits_sent,
            self.submit_attempts,
            self.cancels_acked,
            self.cancels_sent,
            self.qos_edits_acked,
            self.qos_edits_sent,
            self.reads,
            self.host_samples
        )?;
        let states: Vec<String> = self
            .jobs_by_state
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        writeln!(
            f,
            "jobs: {} ; runs observed {} ({} torn marker lines)",
            states.join(", "),
            self.runs_observed,
            self.torn_marker_lines
        )?;
        let stores: Vec<String> = self
            .digests
            .0
            .iter()
            .map(|(node, applied, digest)| format!("node {node} @{applied} {digest}"))
            .collect();
        writeln!(f, "stores: {}", stores.join(", "))?;
        writeln!(
            f,
            "linearizability: {} ops over {} keys checked in {:.1} ms ({} search steps), {} keys undecided",
            self.lincheck.ops,
            self.lincheck.keys,
            self.lincheck.check_ms,
            self.lincheck.steps,
            self.lincheck.undecided_keys.len()
        )?;
        writeln!(f, "invariants:")?;
        for c in &self.checks {
            let verdict = if c.violations.is_empty() {
                "ok".to_string()
            } else {
                format!("VIOLATED ({})", c.violations.len())
            };
            writeln!(f, "  {:<45} {verdict}", c.name)?;
            for v in c.violations.iter().take(VIOLATIONS_PRINTED_MAX) {
                writeln!(f, "      {}", v.detail)?;
            }
        }
        write!(f, "result: {}", if self.passed() { "PASS" } else { "FAIL" })
    }
}

#[cfg(test)]
mod tests {
    use super::super::faults::FaultKind;
    use super::*;

    fn fault(kind: FaultKind) -> FaultRecord {
        FaultRecord {
            kind,
            at_ms: 0,
            target: String::new(),
            failover_ms: None,
            first_pass_ms: None,
            membership_ms: None,
            recovered_ms: 0,
        }
    }

    #[test]
    fn faults_are_counted_by_kind() {
        let faults = [
            fault(FaultKind::KillLeader),
            fault(FaultKind::ReplaceFollower),
            fault(FaultKind::KillLeader),
        ];
        let counted = faults_by_kind(&faults);
        assert_eq!(
            counted.into_iter().collect::<Vec<_>>(),
            vec![
                ("KillLeader".to_string(), 2),
                ("ReplaceFollower".to_string(), 1)
            ]
        );
    }

    #[test]
    fn failovers_are_grouped_by_kind_with_their_first_passes() {
        let timed = |kind, agreed, pass| FaultRecord {
            failover_ms: Some(agreed),
            first_pass_ms: pass,
            ..fault(kind)
        };
        let faults = [
            timed(FaultKind::ReplaceLeader, 1_400, Some(1_420)),
            fault(FaultKind::KillFollower),
            timed(FaultKind::KillLeader, 1_100, Some(1_090)),
            timed(FaultKind::ReplaceLeader, 1_200, None),
        ];
        let by_kind = failover_by_kind(&faults);
        assert_eq!(
            by_kind,
            vec![
                ("KillLeader".to_string(), vec![1_100], vec![1_090]),
                ("ReplaceLeader".to_string(), vec![1_200, 1_400], vec![1_420]),
            ]
        );
        assert_eq!(p50_max(&by_kind[1].1), "p50 1200 ms, max 1400 ms over 2");
        assert_eq!(p50_max(&[]), "none");
    }
}
