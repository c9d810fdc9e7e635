//! Linearizability of the drill's submit/cancel/get history, checked the
//! Wing–Gong way (as porcupine does): find one total order of the
//! operations that respects real time (an operation that returned before
//! another was invoked comes first) and that a sequential model of the
//! job table accepts with every answer the clients saw.
//!
//! Jobs are independent keys (a submit's request id, and the job it made),
//! so the history is split per key and each key searched on its own: the
//! search is exponential in the operations that overlap, and one key's
//! operations rarely do. An operation without an answer (a timeout, a lost
//! connection) may have taken effect at any instant after its invocation,
//! or never: the search may place it anywhere from its invocation on, or
//! leave it out. Jobs also move on their own (started, finished, requeued)
//! between operations; the model allows any such move the state machine
//! can make.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use berth_proto::api::JobState;

use super::checks::{CancelOutcome, FinalJob, SubmitRecord, Violation};

/// The invariant's name in the report.
pub const CHECK: &str = "submit/cancel/get history is linearizable";

/// Search nodes explored per key at most before the key is reported
/// undecided: a pathological key must not stall the drill's verdict.
/// The drill's keys need tens of steps; this leaves a wide margin.
pub const STEPS_PER_KEY_MAX: u64 = 100_000;

/// The client id of the checker's own final listing (after the drain).
pub const FINAL_READER: u32 = u32::MAX;

/// What a get of a job answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Read {
    Found { state: i32 },
    NotFound,
}

/// One call a client made, with its answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Call {
    /// One attempt of a submit: the job id it was answered with, or
    /// `None` when no answer came (the attempt may have applied).
    Submit {
        job_id: Option<u64>,
    },
    Cancel {
        job_id: u64,
        outcome: CancelOutcome,
    },
    /// A linearizable read of the job: `None` when no answer came.
    Get {
        job_id: u64,
        read: Option<Read>,
    },
}

/// One operation of the history: who called, on which key, and the
/// instants (µs since the drill started, one monotonic clock for every
/// client) it was invoked and came back, with or without an answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Op {
    pub client: u32,
    /// The submit's request id: every op on one job shares it.
    pub key: String,
    pub call: Call,
    pub invoked_us: u64,
    pub returned_us: u64,
}

impl Op {
    fn answered(&self) -> bool {
        match &self.call {
            Call::Submit { job_id } => job_id.is_some(),
            Call::Cancel { outcome, .. } => *outcome != CancelOutcome::Unknown,
            Call::Get { read, .. } => read.is_some(),
        }
    }

    /// The instant by which the op had taken effect: its return when an
    /// answer came; never, otherwise (it may still apply later).
    fn deadline_us(&self) -> u64 {
        if self.answered() {
            self.returned_us
        } else {
            u64::MAX
        }
    }
}

fn state_name(state: i32) -> String {
    JobState::try_from(state).map_or_else(|_| format!("state {state}"), |s| format!("{s:?}"))
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.client == FINAL_READER {
            "final listing".to_string()
        } else {
            format!("client {}", self.client)
        };
        let what = match &self.call {
            Call::Submit { job_id: Some(id) } => format!("submit -> job {id}"),
            Call::Submit { job_id: None } => "submit -> no answer".to_string(),
            Call::Cancel { job_id, outcome } => match outcome {
                CancelOutcome::Acked { previous } => {
                    format!("cancel {job_id} -> acked from {}", state_name(*previous))
                }
                CancelOutcome::Refused(_) => format!("cancel {job_id} -> already ended"),
                CancelOutcome::Unknown => format!("cancel {job_id} -> no answer"),
            },
            Call::Get { job_id, read } => match read {
                Some(Read::Found { state }) => format!("get {job_id} -> {}", state_name(*state)),
                Some(Read::NotFound) => format!("get {job_id} -> not found"),
                None => format!("get {job_id} -> no answer"),
            },
        };
        write!(
            f,
            "{who} {what} [{}..{} us]",
            self.invoked_us, self.returned_us
        )
    }
}

/// A job's state as the ops can tell it apart. `Stopping` is a running job
/// whose cancel was applied: it reads as RUNNING but may only end
/// CANCELLED (or NODE_FAIL if its host dies first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Absent,
    Pending,
    Running,
    Stopping,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    Preempted,
}

const SLOTS: [Slot; 10] = [
    Slot::Absent,
    Slot::Pending,
    Slot::Running,
    Slot::Stopping,
    Slot::Completed,
    Slot::Failed,
    Slot::Cancelled,
    Slot::Timeout,
    Slot::NodeFail,
    Slot::Preempted,
];

fn bit(s: Slot) -> u16 {
    1 << (s as u8)
}

fn bits(slots: &[Slot]) -> u16 {
    slots.iter().fold(0, |m, s| m | bit(*s))
}

fn ended() -> u16 {
    bits(&SLOTS[4..])
}

/// The moves a job makes by itself, without a client's call: the
/// scheduler starts it; it ends, or goes back to the queue (requeue,
/// preemption) unless a cancel was applied; once cancelled while running
/// it ends CANCELLED, or NODE_FAIL when its host is lost. An ended job
/// stays ended (the drill requeues nothing).
fn moves(s: Slot) -> u16 {
    match s {
        Slot::Pending => bit(Slot::Running),
        Slot::Running => bits(&[
            Slot::Pending,
            Slot::Completed,
            Slot::Failed,
            Slot::Timeout,
            Slot::NodeFail,
            Slot::Preempted,
        ]),
        Slot::Stopping => bits(&[Slot::Cancelled, Slot::NodeFail]),
        _ => 0,
    }
}

/// The states reachable from `mask` by the job's own moves.
fn closure(mask: u16) -> u16 {
    let mut all = mask;
    loop {
        let more = SLOTS
            .iter()
            .filter(|s| all & bit(**s) != 0)
            .fold(all, |m, s| m | moves(*s));
        if more == all {
            return all;
        }
        all = more;
    }
}

/// The model of one key: the set of states its job may be in (a
/// power-set model, closed under the job's own moves, so a step needs no
/// guess of when the job moved), and its id once an answer named it.
/// An empty set means the ops so far cannot be explained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Model {
    states: u16,
    job_id: Option<u64>,
}

impl Model {
    fn start() -> Model {
        Model {
            states: bit(Slot::Absent),
            job_id: None,
        }
    }

    fn is_possible(&self) -> bool {
        self.states != 0
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = SLOTS
            .iter()
            .filter(|s| self.states & bit(**s) != 0)
            .map(|s| format!("{s:?}"))
            .collect();
        write!(f, "{}", names.join("|"))
    }
}

/// What a call does to a job in state `s`, as the set of states after it
/// (empty: the answer is impossible from `s`). A call without an answer
/// is taken as applied: leaving it out is the search's other choice.
fn apply(s: Slot, call: &Call) -> u16 {
    let same = bit(s);
    match call {
        // Idempotent by request id: the first applied attempt makes the
        // job, a later one answers with the same job and changes nothing.
        Call::Submit { .. } if s == Slot::Absent => bit(Slot::Pending),
        Call::Submit { .. } => same,
        Call::Cancel { outcome, .. } => cancel(s, outcome),
        Call::Get { read, .. } => match read {
            None => same,
            Some(Read::NotFound) if s == Slot::Absent => same,
            Some(Read::NotFound) => 0,
            Some(Read::Found { state }) if reads_as(s) == Some(*state) => same,
            Some(Read::Found { .. }) => 0,
        },
    }
}

/// A cancel as the state machine applies it: a pending job ends
/// CANCELLED at once; a running one is asked to stop (it still reads as
/// RUNNING); an ended one is refused with "has already ended"; a missing
/// one is refused as not found, which the workload counts as no answer.
fn cancel(s: Slot, outcome: &CancelOutcome) -> u16 {
    let running = matches!(s, Slot::Running | Slot::Stopping);
    match outcome {
        CancelOutcome::Acked { previous } if *previous == JobState::Pending as i32 => {
            if s == Slot::Pending {
                bit(Slot::Cancelled)
            } else {
                0
            }
        }
        CancelOutcome::Acked { previous } if *previous == JobState::Running as i32 && running => {
            bit(Slot::Stopping)
        }
        CancelOutcome::Acked { .. } => 0,
        CancelOutcome::Refused(_) if ended() & bit(s) != 0 => bit(s),
        CancelOutcome::Refused(_) => 0,
        CancelOutcome::Unknown if s == Slot::Pending => bit(Slot::Cancelled),
        CancelOutcome::Unknown if running => bit(Slot::Stopping),
        CancelOutcome::Unknown => bit(s),
    }
}

/// The state a get reports for `s`.
fn reads_as(s: Slot) -> Option<i32> {
    let state = match s {
        Slot::Absent => return None,
        Slot::Pending => JobState::Pending,
        Slot::Running | Slot::Stopping => JobState::Running,
        Slot::Completed => JobState::Completed,
        Slot::Failed => JobState::Failed,
        Slot::Cancelled => JobState::Cancelled,
        Slot::Timeout => JobState::Timeout,
        Slot::NodeFail => JobState::NodeFail,
        Slot::Preempted => JobState::Preempted,
    };
    Some(state as i32)
}

/// The model after `call`, from any state the job may be in.
fn step(model: Model, call: &Call) -> Model {
    let job_id = match (call, model.job_id) {
        (Call::Submit { job_id: Some(new) }, Some(old)) if *new != old => {
            // One request id answered with two job ids: no order helps.
            return Model {
                states: 0,
                job_id: model.job_id,
            };
        }
        (Call::Submit { job_id: Some(new) }, _) => Some(*new),
        _ => model.job_id,
    };
    let after = SLOTS
        .iter()
        .filter(|s| model.states & bit(**s) != 0)
        .fold(0, |m, s| m | apply(*s, call));
    Model {
        states: closure(after),
        job_id,
    }
}

/// A set of op indexes (the ops linearized so far), small enough to
/// hash for the memo.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn has(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// The step bound was reached before the search finished.
struct OutOfSteps;

/// Where the search got furthest before no op fitted: for the report.
struct Stuck {
    placed: usize,
    order: Vec<usize>,
    model: Model,
    misfits: Vec<usize>,
}

/// The search over one key's ops (sorted by invocation).
struct KeySearch<'a> {
    ops: Vec<&'a Op>,
    answered_total: usize,
    /// (linearized ops, model) pairs already explored without success:
    /// reaching one again by another order cannot succeed either.
    seen: HashSet<(Bits, Model)>,
    steps: u64,
    max_steps: u64,
    order: Vec<usize>,
    stuck: Option<Stuck>,
}

/// How one key came out.
enum Verdict {
    Linearizable,
    Violation(String),
    Undecided,
}

impl<'a> KeySearch<'a> {
    fn new(mut ops: Vec<&'a Op>, max_steps: u64) -> KeySearch<'a> {
        ops.sort_by_key(|o| o.invoked_us);
        let answered_total = ops.iter().filter(|o| o.answered()).count();
        KeySearch {
            ops,
            answered_total,
            seen: HashSet::new(),
            steps: 0,
            max_steps,
            order: Vec::new(),
            stuck: None,
        }
    }

    fn run(&mut self, key: &str) -> Verdict {
        let mut done = Bits::new(self.ops.len());
        match self.explore(&mut done, Model::start(), 0) {
            Ok(true) => Verdict::Linearizable,
            Ok(false) => Verdict::Violation(self.explain(key)),
            Err(OutOfSteps) => Verdict::Undecided,
        }
    }

    /// The earliest return among the answered ops not yet placed: only an
    /// op invoked by then may come next (every other one was invoked
    /// after that op had returned, so real time puts it later).
    fn horizon(&self, done: &Bits) -> u64 {
        (0..self.ops.len())
            .filter(|i| !done.has(*i))
            .map(|i| self.ops[i].deadline_us())
            .min()
            .unwrap_or(u64::MAX)
    }

    fn explore(
        &mut self,
        done: &mut Bits,
        model: Model,
        placed: usize,
    ) -> Result<bool, OutOfSteps> {
        if placed == self.answered_total {
            // The unanswered ops not placed never took effect.
            return Ok(true);
        }
        if !self.seen.insert((done.clone(), model)) {
            return Ok(false);
        }
        self.steps += 1;
        if self.steps > self.max_steps {
            return Err(OutOfSteps);
        }
        let horizon = self.horizon(done);
        let mut misfits = Vec::new();
        // The unanswered calls already tried at this node. An unanswered
        // op equal to an earlier one not yet placed adds nothing: both
        // can be placed anywhere from here on with the same effect, so
        // trying the earlier one covers it (a submit retried a hundred
        // times through an outage costs one branch, not a hundred).
        let mut tried: Vec<&Call> = Vec::new();
        for i in 0..self.ops.len() {
            let op = self.ops[i];
            if op.invoked_us > horizon {
                break;
            }
            if done.has(i) {
                continue;
            }
            if !op.answered() {
                if tried.contains(&&op.call) {
                    continue;
                }
                tried.push(&op.call);
            }
            let next = step(model, &op.call);
            if !next.is_possible() {
                if op.answered() {
                    misfits.push(i);
                }
                continue;
            }
            if !op.answered() && next == model {
                // Applying it changes nothing: same as leaving it out.
                continue;
            }
            done.set(i);
            self.order.push(i);
            let placed_next = placed + usize::from(op.answered());
            if self.explore(done, next, placed_next)? {
                return Ok(true);
            }
            self.order.pop();
            done.clear(i);
        }
        self.note_stuck(placed, model, misfits);
        Ok(false)
    }

    /// Keeps the deepest point where answered ops did not fit.
    fn note_stuck(&mut self, placed: usize, model: Model, misfits: Vec<usize>) {
        let deeper = self.stuck.as_ref().is_none_or(|s| placed > s.placed);
        if !misfits.is_empty() && deeper {
            self.stuck = Some(Stuck {
                placed,
                order: self.order.clone(),
                model,
                misfits,
            });
        }
    }

    /// The violation's text: the key, the longest order found (its last
    /// ops), the job's possible states then, and the ops that did not fit.
    fn explain(&self, key: &str) -> String {
        let Some(stuck) = &self.stuck else {
            return format!("key {key}: no order of its ops explains the answers");
        };
        let tail = stuck.order.len().saturating_sub(EXPLAIN_OPS_MAX);
        let after: Vec<String> = stuck.order[tail..]
            .iter()
            .map(|i| self.ops[*i].to_string())
            .collect();
        let misfits: Vec<String> = stuck
            .misfits
            .iter()
            .take(EXPLAIN_OPS_MAX)
            .map(|i| self.ops[*i].to_string())
            .collect();
        let after = if after.is_empty() {
            "the start".to_string()
        } else {
            after.join(", ")
        };
        let job = match stuck.model.job_id {
            Some(id) => format!("job {id}"),
            None => "the job".to_string(),
        };
        format!(
            "key {key}: not linearizable: after {after} ({} of {} answered ops placed; {job} {}), none of these fits: {}",
            stuck.placed,
            self.answered_total,
            stuck.model,
            misfits.join(", ")
        )
    }
}

/// Ops named per part of a violation at most (the last ones placed, the
/// ones that did not fit).
const EXPLAIN_OPS_MAX: usize = 3;

/// What the check found over the whole history.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Ops searched (gets without an answer are dropped: they observed
    /// nothing and changed nothing).
    pub ops: usize,
    pub keys: usize,
    /// Search nodes explored, all keys together.
    pub steps: u64,
    /// Keys whose search hit the step bound: neither proved nor refuted.
    pub undecided: Vec<String>,
    pub violations: Vec<Violation>,
}

/// Checks every key of `history` with at most `max_steps` search nodes
/// per key.
pub fn check(history: &[Op], max_steps: u64) -> Summary {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history {
        let blind_read = matches!(op.call, Call::Get { read: None, .. });
        if !blind_read {
            by_key.entry(op.key.as_str()).or_default().push(op);
        }
    }
    let mut summary = Summary {
        keys: by_key.len(),
        ..Summary::default()
    };
    for (key, ops) in by_key {
        summary.ops += ops.len();
        let mut search = KeySearch::new(ops, max_steps);
        let verdict = search.run(key);
        summary.steps += search.steps;
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Violation(detail) => summary.violations.push(Violation {
                check: CHECK,
                detail,
            }),
            Verdict::Undecided => summary.undecided.push(key.to_string()),
        }
    }
    summary
}

/// The final listing (a linearizable read on the leader after the
/// drain, between `invoked_us` and `returned_us`) as one get per request
/// id the submitters sent: found with its state, or not found.
pub fn final_reads(
    submits: &[SubmitRecord],
    jobs: &[FinalJob],
    invoked_us: u64,
    returned_us: u64,
) -> Vec<Op> {
    // Reversed so the first job of a request id wins (a second one is
    // the exactly-once check's business).
    let by_request: BTreeMap<&str, &FinalJob> = jobs
        .iter()
        .rev()
        .map(|j| (j.request_id.as_str(), j))
        .collect();
    submits
        .iter()
        .map(|s| {
            let (job_id, read) = match by_request.get(s.request_id.as_str()) {
                Some(j) => (j.job_id, Read::Found { state: j.state }),
                None => (s.job_id.unwrap_or(0), Read::NotFound),
            };
            Op {
                client: FINAL_READER,
                key: s.request_id.clone(),
                call: Call::Get {
                    job_id,
                    read: Some(read),
                },
                invoked_us,
                returned_us,
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "lincheck_tests.rs"]
mod tests;
