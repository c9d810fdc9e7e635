//! The drill's workload: submitters that retry each submit with the same
//! request id until it is acknowledged, cancel some of their jobs, edit a
//! QOS and read their jobs back, recording every outcome for the checkers
//! (and every submit attempt, cancel and get as a timed operation for the
//! linearizability check); and a monitor that samples every host's
//! allocation.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::api::{
    CancelJobRequest, GetJobRequest, JobSpec, ListHostsRequest, Qos, SubmitJobRequest,
};
use tonic::Code;

use super::checks::{CancelOutcome, CancelRecord, QosEdit, SubmitRecord, Violation};
use super::lincheck::{Call, Op, Read};
use super::rng::Rng;
use crate::harness::{connect, HarnessClient};

/// Longest one call may take before the caller gives up on it (a paused
/// leader accepts connections but never answers).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest a submit is retried before it counts as never acknowledged.
pub const SUBMIT_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between a failed attempt and the next.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Submits per submitter at most, whatever `--seconds` is: bounds the
/// history the checkers hold (and keeps below the API's list bound).
pub const SUBMITS_PER_SUBMITTER_MAX: usize = 2_000;
/// Attempts of one submit at most. The deadline ends a submit first (an
/// attempt takes at least the retry pause: 600 fit in the deadline); this
/// bound is what the history reserves room for.
pub const SUBMIT_ATTEMPTS_MAX: u32 = 1_000;
/// Operations per submitter's history at most: the workload stops before
/// a step could overflow it (a submit records up to
/// [`SUBMIT_ATTEMPTS_MAX`] ops, a cancel or a get one), so the history is
/// never cut short (a cut history could show a job moved by an op it no
/// longer holds).
pub const HISTORY_OPS_PER_SUBMITTER_MAX: usize = 20_000;

/// One monotonic clock for every submitter (and the final listing), so
/// their operations' instants can be ordered against each other.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    /// Microseconds since the clock started.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// The user, account and QOS names the drill sets up and submits as.
pub const DRILL_USER: &str = "drill";
pub const DRILL_ACCOUNT: &str = "drill";
pub const DRILL_QOS: &str = "drill";
/// CPUs all running jobs of the drill QOS may hold at once (GrpTRES); the
/// checkers hold the final state to it.
pub const DRILL_QOS_CPUS: u64 = 3;
/// The drill QOS's priority before any edit.
pub const DRILL_QOS_INITIAL_PRIORITY: u32 = 10;

/// What one submitter did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SubmitterLog {
    pub submits: Vec<SubmitRecord>,
    pub cancels: Vec<CancelRecord>,
    pub qos_edits: Vec<QosEdit>,
    pub reads: u64,
    /// Acknowledged jobs a linearizable read did not find.
    pub violations: Vec<Violation>,
    /// Every submit attempt, cancel and get, in the order sent.
    pub history: Vec<Op>,
}

/// A client over the cluster's members: the current connection, and on
/// any failure the next member.
struct Caller {
    servers: Vec<String>,
    next: usize,
    client: Option<HarnessClient>,
}

impl Caller {
    fn new(servers: Vec<String>, first: usize) -> Caller {
        Caller {
            servers,
            next: first,
            client: None,
        }
    }

    async fn client(&mut self) -> Result<HarnessClient, String> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let addr = self.servers[self.next % self.servers.len()].clone();
        self.next = self.next.wrapping_add(1);
        let c = tokio::time::timeout(CALL_TIMEOUT, connect(&addr))
            .await
            .map_err(|_| format!("{addr}: connect timed out"))?
            .map_err(|e| e.to_string())?;
        self.client = Some(c.clone());
        Ok(c)
    }

    /// Forgets the connection so the next call goes to another member.
    fn failed(&mut self) {
        self.client = None;
    }
}

/// The job's command: it writes a start marker, runs for `runtime_ms`,
/// and writes an end marker when it finishes or is stopped with SIGTERM
/// (a SIGKILL leaves no end marker; the checkers then use the state's).
pub fn job_command(markers: &Path, runtime_ms: u64) -> String {
    format!(
        "m() {{ echo \"$1 $BERTH_JOB_ID $BERTH_ALLOC_ID $BERTH_NODELIST $(date +%s%N)\" >> '{}'; }}; \
         m start; trap 'm end; exit 143' TERM; sleep {}.{:03} & wait $!; m end",
        markers.display(),
        runtime_ms / 1000,
        runtime_ms % 1000
    )
}

pub struct WorkloadOptions {
    pub seed: u64,
    pub servers: Vec<String>,
    pub markers: std::path::PathBuf,
    pub max_runtime_ms: u64,
    pub clock: Clock,
}

/// Runs submitter `n` until `stop` is set; an unacknowledged submit in
/// flight is still retried to the end of its deadline.
pub async fn submitter(n: u32, opts: Arc<WorkloadOptions>, stop: Arc<AtomicBool>) -> SubmitterLog {
    let mut rng = Rng::fork(opts.seed, u64::from(n) + 1);
    let mut caller = Caller::new(opts.servers.clone(), n as usize);
    let mut log = SubmitterLog::default();
    // Each acknowledged job with its request id (its key in the history).
    let mut acked: Vec<(u64, String)> = Vec::new();
    let room = |log: &SubmitterLog| {
        log.history.len() + SUBMIT_ATTEMPTS_MAX as usize <= HISTORY_OPS_PER_SUBMITTER_MAX
    };
    while !stop.load(Ordering::Relaxed)
        && log.submits.len() < SUBMITS_PER_SUBMITTER_MAX
        && room(&log)
    {
        let roll = rng.range(0, 99);
        if roll < 70 || acked.is_empty() {
            let seq = log.submits.len();
            let record = submit_one(n, seq, &opts, &mut rng, &mut caller, &mut log.history).await;
            if let Some(id) = record.job_id {
                acked.push((id, record.request_id.clone()));
            }
            log.submits.push(record);
        } else if roll < 82 {
            let (job_id, key) = &acked[rng.range(0, acked.len() as u64 - 1) as usize];
            let (record, op) = cancel_one(*job_id, &mut caller, n, key, opts.clock).await;
            log.cancels.push(record);
            log.history.push(op);
        } else if roll < 90 && n == 0 {
            // One submitter edits the QOS, one edit after another, so the
            // final value can be checked against the order of its acks.
            let priority = rng.range(1, 1_000) as u32;
            log.qos_edits.push(edit_qos(priority, &mut caller).await);
        } else {
            let (job_id, key) = &acked[rng.range(0, acked.len() as u64 - 1) as usize];
            let (violation, op) = read_back(*job_id, &mut caller, n, key, opts.clock).await;
            log.violations.extend(violation);
            log.history.push(op);
            log.reads += 1;
        }
        tokio::time::sleep(Duration::from_millis(rng.range(50, 250))).await;
    }
    log
}

/// The drill QOS: a priority and a cap on the CPUs its running jobs hold.
pub fn drill_qos(priority: u32) -> Qos {
    Qos {
        name: DRILL_QOS.into(),
        priority: i64::from(priority),
        limits: Some(berth_proto::api::Limits {
            grp_tres: [("cpu".to_string(), DRILL_QOS_CPUS)].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn submit_one(
    n: u32,
    seq: usize,
    opts: &WorkloadOptions,
    rng: &mut Rng,
    caller: &mut Caller,
    history: &mut Vec<Op>,
) -> SubmitRecord {
    let request_id = format!("drill-{}-{n}-{seq}", opts.seed);
    let runtime_ms = rng.range(0, opts.max_runtime_ms);
    // One job in twenty outlives its time limit and ends TIMEOUT.
    let time_limit_s = if rng.chance(5) {
        1
    } else {
        60 + opts.max_runtime_ms / 1000
    };
    let runtime_ms = if time_limit_s == 1 {
        runtime_ms.max(2_500)
    } else {
        runtime_ms
    };
    let spec = JobSpec {
        name: "drill".into(),
        user: DRILL_USER.into(),
        account: DRILL_ACCOUNT.into(),
        qos: if rng.chance(25) {
            DRILL_QOS.into()
        } else {
            String::new()
        },
        command: job_command(&opts.markers, runtime_ms),
        cpus: rng.range(1, 2) as u32,
        time_limit_s,
        comment: request_id.clone(),
        ..Default::default()
    };
    let start = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let invoked_us = opts.clock.now_us();
        let attempt = async {
            let mut client = caller.client().await?;
            let call = client.submit_job(SubmitJobRequest {
                request_id: request_id.clone(),
                spec: Some(spec.clone()),
            });
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(r)) => Ok(r.into_inner().job_id),
                Ok(Err(status)) => Err(status.message().to_string()),
                Err(_) => Err("timed out".to_string()),
            }
        };
        let answer = attempt.await;
        // Any failure may have applied (a timeout after the commit, a
        // leader lost mid-call): it is an op without an answer.
        history.push(Op {
            client: n,
            key: request_id.clone(),
            call: Call::Submit {
                job_id: answer.as_ref().ok().copied(),
            },
            invoked_us,
            returned_us: opts.clock.now_us(),
        });
        match answer {
            Ok(job_id) => {
                return SubmitRecord {
                    request_id,
                    job_id: Some(job_id),
                    attempts,
                }
            }
            Err(e) => {
                caller.failed();
                if start.elapsed() > SUBMIT_DEADLINE || attempts >= SUBMIT_ATTEMPTS_MAX {
                    tracing::warn!(%request_id, error = %e, "submit never acknowledged");
                    return SubmitRecord {
                        request_id,
                        job_id: None,
                        attempts,
                    };
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// One cancel of the job of request `key`, as a record and as an op of
/// client `n`'s history.
async fn cancel_one(
    job_id: u64,
    caller: &mut Caller,
    n: u32,
    key: &str,
    clock: Clock,
) -> (CancelRecord, Op) {
    let invoked_us = clock.now_us();
    let outcome = match caller.client().await {
        Err(_) => CancelOutcome::Unknown,
        Ok(mut client) => {
            let call = client.cancel_job(CancelJobRequest {
                job_id,
                only_task: false,
            });
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(r)) => CancelOutcome::Acked {
                    previous: r.into_inner().previous_state,
                },
                // "has already ended" is the state machine's refusal; any
                // other failure may or may not have been applied.
                Ok(Err(s)) if s.message().contains("has already ended") => {
                    CancelOutcome::Refused(s.message().to_string())
                }
                Ok(Err(_)) | Err(_) => CancelOutcome::Unknown,
            }
        }
    };
    if outcome == CancelOutcome::Unknown {
        caller.failed();
    }
    let op = Op {
        client: n,
        key: key.to_string(),
        call: Call::Cancel {
            job_id,
            outcome: outcome.clone(),
        },
        invoked_us,
        returned_us: clock.now_us(),
    };
    (CancelRecord { job_id, outcome }, op)
}

async fn edit_qos(priority: u32, caller: &mut Caller) -> QosEdit {
    let acked = match caller.client().await {
        Err(_) => false,
        Ok(mut client) => matches!(
            tokio::time::timeout(CALL_TIMEOUT, client.upsert_qos(drill_qos(priority))).await,
            Ok(Ok(_))
        ),
    };
    if !acked {
        caller.failed();
    }
    QosEdit { priority, acked }
}

/// A linearizable read of an acknowledged job (of request `key`): it
/// must exist. No answer at all proves nothing (the member may be down).
/// Also returned as an op of client `n`'s history, with the state read.
async fn read_back(
    job_id: u64,
    caller: &mut Caller,
    n: u32,
    key: &str,
    clock: Clock,
) -> (Option<Violation>, Op) {
    let invoked_us = clock.now_us();
    let (violation, read) = get_job(job_id, caller).await;
    let op = Op {
        client: n,
        key: key.to_string(),
        call: Call::Get { job_id, read },
        invoked_us,
        returned_us: clock.now_us(),
    };
    (violation, op)
}

async fn get_job(job_id: u64, caller: &mut Caller) -> (Option<Violation>, Option<Read>) {
    let Ok(mut client) = caller.client().await else {
        return (None, None);
    };
    let call = client.get_job(GetJobRequest {
        job_id,
        stale: false,
    });
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(job)) => (
            None,
            Some(Read::Found {
                state: job.into_inner().state,
            }),
        ),
        Ok(Err(s)) if s.code() == Code::NotFound => (
            Some(Violation {
                check: "acknowledged submits exist exactly once",
                detail: format!(
                    "a read after the ack did not find job {job_id}: {}",
                    s.message()
                ),
            }),
            Some(Read::NotFound),
        ),
        _ => {
            caller.failed();
            (None, None)
        }
    }
}

/// Samples every host's allocation once a second until `stop`: a host
/// holding more CPUs than it has is a violation.
pub async fn monitor_hosts(servers: Vec<String>, stop: Arc<AtomicBool>) -> (u64, Vec<Violation>) {
    let mut caller = Caller::new(servers, 0);
    let mut samples = 0;
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut client) = caller.client().await {
            match tokio::time::timeout(CALL_TIMEOUT, client.list_hosts(ListHostsRequest {})).await {
                Ok(Ok(r)) => {
                    samples += 1;
                    for h in r.into_inner().hosts {
                        let cpus = h.inventory.as_ref().map_or(0, |i| i.cpus);
                        if h.alloc_cpus > cpus && out.len() < 100 {
                            out.push(Violation {
                                check: "no host over-allocated",
                                detail: format!(
                                    "{} had {} cpus allocated of {cpus} (sampled)",
                                    h.name, h.alloc_cpus
                                ),
                            });
                        }
                    }
                }
                _ => caller.failed(),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (samples, out)
}
