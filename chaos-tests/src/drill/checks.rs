//! The drill's invariant checkers: pure functions over what the workload
//! recorded (acknowledged operations), what the jobs themselves wrote when
//! they started and ended (run markers), the faults injected, and the
//! cluster's final state. Each returns the violations it found; an empty
//! list means the invariant held for this run.

use std::collections::{BTreeMap, BTreeSet};

use berth_proto::api::JobState;

/// One broken invariant, named by its check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
}

fn violation(check: &'static str, detail: String) -> Violation {
    Violation { check, detail }
}

/// One submit as a submitter saw it: the request id it retried with and
/// the job id of the acknowledgement, if one came.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SubmitRecord {
    pub request_id: String,
    pub job_id: Option<u64>,
    pub attempts: u32,
}

/// How a cancel ended for its caller.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum CancelOutcome {
    /// Committed; the job was in this state then.
    Acked { previous: i32 },
    /// Refused with this message (e.g. the job had already ended).
    Refused(String),
    /// No answer (timeout, lost leader): it may or may not have applied.
    Unknown,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct CancelRecord {
    pub job_id: u64,
    pub outcome: CancelOutcome,
}

/// One QOS priority edit, in the order one submitter sent them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QosEdit {
    pub priority: u32,
    /// False when no answer came: it may or may not have applied.
    pub acked: bool,
}

/// A job as the cluster holds it at the end, reduced to what the checks
/// read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FinalJob {
    pub job_id: u64,
    /// The request id its submit carried (the drill puts it in the
    /// job's comment).
    pub request_id: String,
    pub state: i32,
    pub reason: String,
    pub alloc_id: u64,
    pub host: String,
    pub cpus: u32,
    pub qos: String,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// A line a job's own command wrote when it started or ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMarker {
    pub start: bool,
    pub job_id: u64,
    pub alloc_id: u64,
    pub host: String,
    pub time_ms: u64,
}

/// Parses the run-marker file: `start|end JOB ALLOC HOST NANOS` per line.
/// A line cut short by a kill mid-write is skipped and counted.
pub fn parse_markers(text: &str) -> (Vec<RunMarker>, usize) {
    let mut markers = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let parsed = match parts.as_slice() {
            [kind @ ("start" | "end"), job, alloc, host, nanos] => {
                match (job.parse(), alloc.parse(), nanos.parse::<u64>()) {
                    (Ok(job_id), Ok(alloc_id), Ok(ns)) => Some(RunMarker {
                        start: *kind == "start",
                        job_id,
                        alloc_id,
                        host: (*host).to_string(),
                        time_ms: ns / 1_000_000,
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        match parsed {
            Some(m) => markers.push(m),
            None => bad += 1,
        }
    }
    (markers, bad)
}

/// Every acknowledged submit exists exactly once: its job holds its
/// request id, no job id was handed to two request ids, no request id made
/// two jobs, and every job came from a submit the workload sent.
pub fn acknowledged_submits_exist_once(
    submits: &[SubmitRecord],
    jobs: &[FinalJob],
) -> Vec<Violation> {
    const CHECK: &str = "acknowledged submits exist exactly once";
    let mut out = Vec::new();
    let by_id: BTreeMap<u64, &FinalJob> = jobs.iter().map(|j| (j.job_id, j)).collect();
    let mut owner_of_job: BTreeMap<u64, &str> = BTreeMap::new();
    for s in submits {
        let Some(job_id) = s.job_id else { continue };
        if let Some(other) = owner_of_job.insert(job_id, &s.request_id) {
            out.push(violation(
                CHECK,
                format!(
                    "job id {job_id} acknowledged to two submits: {other} and {}",
                    s.request_id
                ),
            ));
        }
        match by_id.get(&job_id) {
            None => out.push(violation(
                CHECK,
                format!(
                    "acknowledged submit {} (job {job_id}) is missing",
                    s.request_id
                ),
            )),
            Some(job) if job.request_id != s.request_id => out.push(violation(
                CHECK,
                format!(
                    "acknowledged submit {} got job {job_id}, which holds submit {}",
                    s.request_id, job.request_id
                ),
            )),
            Some(_) => {}
        }
    }
    let sent: BTreeSet<&str> = submits.iter().map(|s| s.request_id.as_str()).collect();
    let mut jobs_of_request: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for job in jobs {
        jobs_of_request
            .entry(job.request_id.as_str())
            .or_default()
            .push(job.job_id);
        if !sent.contains(job.request_id.as_str()) {
            out.push(violation(
                CHECK,
                format!(
                    "job {} holds request id {:?}, which no submitter sent",
                    job.job_id, job.request_id
                ),
            ));
        }
    }
    for (request_id, ids) in jobs_of_request {
        if ids.len() > 1 {
            out.push(violation(
                CHECK,
                format!("submit {request_id} made {} jobs: {ids:?}", ids.len()),
            ));
        }
    }
    out
}

/// One run of a job as its markers show it: from its start marker to its
/// end marker, else to the job's end in the state, else still open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub job_id: u64,
    pub alloc_id: u64,
    pub host: String,
    pub start_ms: u64,
    /// `u64::MAX` when nothing says it ended.
    pub end_ms: u64,
}

/// Runs from the markers, and violations where a marker contradicts the
/// allocation model: one allocation launched twice or on two hosts.
pub fn runs_from_markers(markers: &[RunMarker], jobs: &[FinalJob]) -> (Vec<Run>, Vec<Violation>) {
    const CHECK: &str = "no job ran twice at once";
    let by_id: BTreeMap<u64, &FinalJob> = jobs.iter().map(|j| (j.job_id, j)).collect();
    let mut out = Vec::new();
    let mut starts: BTreeMap<(u64, u64), &RunMarker> = BTreeMap::new();
    let mut ends: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for m in markers {
        let key = (m.job_id, m.alloc_id);
        if m.start {
            if let Some(first) = starts.insert(key, m) {
                out.push(violation(
                    CHECK,
                    format!(
                        "job {} allocation {} was launched twice (on {} and {})",
                        m.job_id, m.alloc_id, first.host, m.host
                    ),
                ));
            }
        } else {
            ends.entry(key).or_insert(m.time_ms);
        }
    }
    let mut runs = Vec::new();
    for (&(job_id, alloc_id), m) in &starts {
        let from_state = by_id
            .get(&job_id)
            .filter(|j| j.alloc_id == alloc_id && j.end_ms > 0)
            .map(|j| j.end_ms);
        let end_ms = ends
            .get(&(job_id, alloc_id))
            .copied()
            .or(from_state)
            .unwrap_or(u64::MAX);
        if let Some(job) = by_id.get(&job_id) {
            if job.alloc_id == alloc_id && job.host != m.host {
                out.push(violation(
                    CHECK,
                    format!(
                        "job {job_id} allocation {alloc_id} ran on {} but was placed on {}",
                        m.host, job.host
                    ),
                ));
            }
        }
        runs.push(Run {
            job_id,
            alloc_id,
            host: m.host.clone(),
            start_ms: m.time_ms,
            end_ms,
        });
    }
    (runs, out)
}

/// No two runs of one job overlap in time.
pub fn no_double_runs(runs: &[Run]) -> Vec<Violation> {
    let mut by_job: BTreeMap<u64, Vec<&Run>> = BTreeMap::new();
    for r in runs {
        by_job.entry(r.job_id).or_default().push(r);
    }
    let mut out = Vec::new();
    for (job_id, mut rs) in by_job {
        rs.sort_by_key(|r| r.start_ms);
        for w in rs.windows(2) {
            if w[1].start_ms < w[0].end_ms {
                out.push(violation(
                    "no job ran twice at once",
                    format!(
                        "job {job_id} ran as allocation {} on {} and, before that ended, as allocation {} on {}",
                        w[0].alloc_id, w[0].host, w[1].alloc_id, w[1].host
                    ),
                ));
            }
        }
    }
    out
}

/// A stretch of time during which `cpus` were held on `key` (a host, or a
/// QOS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub key: String,
    pub cpus: u32,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// The most CPUs held at once per key, and when: a sweep over the
/// holdings in which, at one instant, releases come before takes (a job
/// placed the moment another ended is not counted twice).
pub fn peak_use(holdings: &[Holding]) -> BTreeMap<String, (u32, u64)> {
    let mut events: BTreeMap<&str, Vec<(u64, i64)>> = BTreeMap::new();
    for h in holdings.iter().filter(|h| h.end_ms > h.start_ms) {
        let e = events.entry(h.key.as_str()).or_default();
        e.push((h.start_ms, i64::from(h.cpus)));
        e.push((h.end_ms, -i64::from(h.cpus)));
    }
    let mut peaks = BTreeMap::new();
    for (key, mut e) in events {
        e.sort();
        let mut now = 0i64;
        let mut peak = (0u32, 0u64);
        for (t, d) in e {
            now += d;
            if now > i64::from(peak.0) {
                peak = (u32::try_from(now).unwrap_or(u32::MAX), t);
            }
        }
        peaks.insert(key.to_string(), peak);
    }
    peaks
}

/// No key held more than its capacity at any instant.
pub fn within_capacity(
    check: &'static str,
    holdings: &[Holding],
    capacity: &BTreeMap<String, u32>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (key, (peak, at_ms)) in peak_use(holdings) {
        match capacity.get(&key) {
            Some(&cap) if peak <= cap => {}
            Some(&cap) => out.push(violation(
                check,
                format!("{key} held {peak} cpus at {at_ms} ms, more than its {cap}"),
            )),
            None => out.push(violation(
                check,
                format!("{key} held {peak} cpus but has no known capacity"),
            )),
        }
    }
    out
}

/// What the state says each job held on its host, from placement to end.
pub fn state_holdings_by_host(jobs: &[FinalJob], now_ms: u64) -> Vec<Holding> {
    jobs.iter()
        .filter(|j| j.start_ms > 0 && !j.host.is_empty())
        .map(|j| Holding {
            key: j.host.clone(),
            cpus: j.cpus,
            start_ms: j.start_ms,
            end_ms: if j.end_ms > 0 { j.end_ms } else { now_ms },
        })
        .collect()
}

/// What the state says each job held against its QOS.
pub fn state_holdings_by_qos(jobs: &[FinalJob], now_ms: u64) -> Vec<Holding> {
    jobs.iter()
        .filter(|j| j.start_ms > 0)
        .map(|j| Holding {
            key: j.qos.clone(),
            cpus: j.cpus,
            start_ms: j.start_ms,
            end_ms: if j.end_ms > 0 { j.end_ms } else { now_ms },
        })
        .collect()
}

/// What the processes themselves held on their hosts (runs still open
/// count until `now_ms`).
pub fn process_holdings(runs: &[Run], jobs: &[FinalJob], now_ms: u64) -> Vec<Holding> {
    let cpus: BTreeMap<u64, u32> = jobs.iter().map(|j| (j.job_id, j.cpus)).collect();
    runs.iter()
        .map(|r| Holding {
            key: r.host.clone(),
            cpus: cpus.get(&r.job_id).copied().unwrap_or(1),
            start_ms: r.start_ms,
            end_ms: r.end_ms.min(now_ms),
        })
        .collect()
}

fn is_final(state: i32) -> bool {
    [
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::Preempted,
    ]
    .iter()
    .any(|s| *s as i32 == state)
}

fn state_name(state: i32) -> String {
    JobState::try_from(state).map_or_else(|_| format!("state {state}"), |s| format!("{s:?}"))
}

/// Every job ended, or is pending with a reason it can give.
pub fn jobs_settled(jobs: &[FinalJob]) -> Vec<Violation> {
    const CHECK: &str = "every job is final or legitimately pending";
    jobs.iter()
        .filter_map(|j| {
            let pending_with_reason = j.state == JobState::Pending as i32 && !j.reason.is_empty();
            if is_final(j.state) || pending_with_reason {
                None
            } else {
                Some(violation(
                    CHECK,
                    format!(
                        "job {} is {} (reason {:?}) after the drain",
                        j.job_id,
                        state_name(j.state),
                        j.reason
                    ),
                ))
            }
        })
        .collect()
}

/// An acknowledged cancel of a pending job ends it CANCELLED; of a
/// running one, CANCELLED (or NODE_FAIL if its host died while stopping).
pub fn cancels_honoured(cancels: &[CancelRecord], jobs: &[FinalJob]) -> Vec<Violation> {
    const CHECK: &str = "acknowledged cancels are honoured";
    let by_id: BTreeMap<u64, &FinalJob> = jobs.iter().map(|j| (j.job_id, j)).collect();
    let mut out = Vec::new();
    for c in cancels {
        let CancelOutcome::Acked { previous } = c.outcome else {
            continue;
        };
        let Some(job) = by_id.get(&c.job_id) else {
            out.push(violation(
                CHECK,
                format!("cancelled job {} is missing", c.job_id),
            ));
            continue;
        };
        let allowed: &[JobState] = if previous == JobState::Pending as i32 {
            &[JobState::Cancelled]
        } else if previous == JobState::Running as i32 {
            &[JobState::Cancelled, JobState::NodeFail]
        } else {
            out.push(violation(
                CHECK,
                format!(
                    "cancel of job {} was acknowledged from {}",
                    c.job_id,
                    state_name(previous)
                ),
            ));
            continue;
        };
        if !allowed.iter().any(|s| *s as i32 == job.state) {
            out.push(violation(
                CHECK,
                format!(
                    "job {} was cancelled while {} but ended {}",
                    c.job_id,
                    state_name(previous),
                    state_name(job.state)
                ),
            ));
        }
    }
    out
}

/// Edits sent one after another by one client: the final value is the
/// last acknowledged one or one sent after it (an unanswered write may
/// have applied). With no edit acknowledged, the initial value is allowed
/// too.
pub fn qos_edits_linearizable(initial: u32, edits: &[QosEdit], final_value: u32) -> Vec<Violation> {
    let last_acked = edits.iter().rposition(|e| e.acked);
    let mut allowed: BTreeSet<u32> = BTreeSet::new();
    match last_acked {
        Some(i) => {
            allowed.extend(edits[i..].iter().map(|e| e.priority));
        }
        None => {
            allowed.insert(initial);
            allowed.extend(edits.iter().map(|e| e.priority));
        }
    }
    if allowed.contains(&final_value) {
        Vec::new()
    } else {
        vec![violation(
            "QOS edits are linearizable",
            format!("final QOS priority {final_value}, but only {allowed:?} are possible"),
        )]
    }
}

/// An agent the drill killed: its host, when it was killed and when it
/// was started again (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentOutage {
    pub host: String,
    pub killed_ms: u64,
    pub restarted_ms: u64,
}

/// After its restart an agent registers within this long; an allocation
/// it never heard of until then may end NODE_FAIL at that registration.
pub const AGENT_REGISTER_SLACK_MS: u64 = 5_000;

/// A job ended NODE_FAIL only on a host whose agent the drill had down
/// while the job held it: never merely because the leader changed.
pub fn node_fail_explained(jobs: &[FinalJob], outages: &[AgentOutage]) -> Vec<Violation> {
    jobs.iter()
        .filter(|j| j.state == JobState::NodeFail as i32)
        .filter(|j| {
            !outages.iter().any(|o| {
                o.host == j.host
                    && o.killed_ms <= j.end_ms
                    && o.restarted_ms + AGENT_REGISTER_SLACK_MS >= j.start_ms
            })
        })
        .map(|j| {
            violation(
                "no false host-down",
                format!(
                    "job {} ended NODE_FAIL on {} though its agent was not down while it ran",
                    j.job_id, j.host
                ),
            )
        })
        .collect()
}

/// Every node holds the same jobs (compared field by field) as the first.
pub fn replicas_agree(views: &[(u64, Vec<FinalJob>)]) -> Vec<Violation> {
    const CHECK: &str = "followers' state equals the leader's";
    let mut out = Vec::new();
    let Some((first_node, first)) = views.first() else {
        return out;
    };
    for (node, jobs) in &views[1..] {
        if jobs.len() != first.len() {
            out.push(violation(
                CHECK,
                format!(
                    "node {node} holds {} jobs, node {first_node} {}",
                    jobs.len(),
                    first.len()
                ),
            ));
            continue;
        }
        if let Some((a, b)) = first.iter().zip(jobs).find(|(a, b)| a != b) {
            out.push(violation(
                CHECK,
                format!("node {node} differs from node {first_node}: {b:?} vs {a:?}"),
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
