//! Reports to the leader (started, exited, stop done), kept in order and
//! retried until the cluster acknowledges each one.
//!
//! Reports are idempotent per allocation on the server side, so a retry
//! after a lost answer is harmless. An answer with `accepted = false` means
//! the cluster no longer knows the allocation: the report is dropped. The
//! queue is bounded; when full, the oldest report is dropped with a warning.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_proto::agent::agent_service_client::AgentServiceClient;
use berth_proto::agent::{ExitedReport, StartedReport, StepReport, StopAck};
use tokio::sync::{mpsc, watch, Notify};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::backoff::Backoff;

/// Most reports held at once.
pub const OUTBOX_CAPACITY_REPORTS: usize = 10_000;
/// Limit on one report RPC, in ms.
pub const REPORT_RPC_TIMEOUT_MS: u64 = 5_000;
/// First delay before retrying a failed report, in ms.
pub const REPORT_RETRY_BACKOFF_MIN_MS: u64 = 100;
/// Longest delay between retries of a report, in ms.
pub const REPORT_RETRY_BACKOFF_MAX_MS: u64 = 2_000;
/// How often [`Outbox::flush`] looks whether the queue is empty, in ms.
const FLUSH_POLL_MS: u64 = 20;

/// One report to deliver.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Started(StartedReport),
    Exited(ExitedReport),
    StopAck(StopAck),
    /// An srun step started or ended (for sacct).
    Step(StepReport),
}

impl Report {
    /// The allocation the report is about.
    pub fn alloc_id(&self) -> u64 {
        match self {
            Report::Started(r) => r.alloc_id,
            Report::Exited(r) => r.alloc_id,
            Report::StopAck(r) => r.alloc_id,
            Report::Step(r) => r.alloc_id,
        }
    }

    /// A short name for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Report::Started(_) => "started",
            Report::Exited(_) => "exited",
            Report::StopAck(_) => "stop-ack",
            Report::Step(_) => "step",
        }
    }
}

/// Tells the supervisor that the cluster is done with an exit report
/// (acknowledged, rejected as stale, or given up on), so the allocation may
/// be forgotten once the leader no longer lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitDelivered {
    pub alloc_id: u64,
}

#[derive(Debug)]
struct Queue {
    /// (sequence number, report); the number tells the sender whether the
    /// front it sent is still the front after a concurrent drop-oldest.
    items: VecDeque<(u64, Report)>,
    next_seq: u64,
    capacity: usize,
}

/// The bounded, shared report queue. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Outbox {
    queue: Arc<Mutex<Queue>>,
    wake: Arc<Notify>,
}

impl Outbox {
    /// An empty outbox holding at most `capacity` reports (at least 1).
    pub fn new(capacity: usize) -> Self {
        Outbox {
            queue: Arc::new(Mutex::new(Queue {
                items: VecDeque::new(),
                next_seq: 0,
                capacity: capacity.max(1),
            })),
            wake: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The lock is never held across a panic point that could leave the
        // queue inconsistent, so a poisoned lock is still usable.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a report; never blocks. Returns the report dropped to make
    /// room, if the queue was full.
    pub fn push(&self, report: Report) -> Option<Report> {
        let (dropped, capacity) = {
            let mut q = self.lock();
            let dropped = if q.items.len() >= q.capacity {
                q.items.pop_front().map(|(_, r)| r)
            } else {
                None
            };
            let seq = q.next_seq;
            q.next_seq += 1;
            q.items.push_back((seq, report));
            (dropped, q.capacity)
        };
        if let Some(r) = &dropped {
            tracing::warn!(
                kind = r.kind(),
                alloc_id = r.alloc_id(),
                capacity,
                "outbox full, dropping the oldest report"
            );
        }
        // notify_one keeps a permit if the sender is not waiting yet, so a
        // push between its emptiness check and its wait is not lost.
        self.wake.notify_one();
        dropped
    }

    /// The reports waiting for an answer, oldest first.
    pub fn pending(&self) -> Vec<Report> {
        self.lock().items.iter().map(|(_, r)| r.clone()).collect()
    }

    /// Reports waiting for an answer.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queued reports, oldest first (for tests).
    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> Vec<Report> {
        self.lock().items.iter().map(|(_, r)| r.clone()).collect()
    }

    fn front(&self) -> Option<(u64, Report)> {
        self.lock().items.front().cloned()
    }

    fn pop_if_front(&self, seq: u64) {
        let mut q = self.lock();
        if q.items.front().map(|(s, _)| *s) == Some(seq) {
            q.items.pop_front();
        }
    }

    /// Waits until the queue is empty or `timeout` passes; true if empty.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.is_empty() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(FLUSH_POLL_MS)).await;
        }
    }

    /// Delivers reports in order over whatever channel the session
    /// currently publishes, forever (until `channel_rx`'s sender is gone).
    /// Tells `delivered` when an exit report is settled.
    pub async fn run_sender(
        self,
        mut channel_rx: watch::Receiver<Option<Channel>>,
        delivered: mpsc::Sender<ExitDelivered>,
    ) {
        let mut backoff = Backoff::new(REPORT_RETRY_BACKOFF_MIN_MS, REPORT_RETRY_BACKOFF_MAX_MS);
        loop {
            let Some((seq, report)) = self.front() else {
                self.wake.notified().await;
                continue;
            };
            let channel = loop {
                if let Some(c) = channel_rx.borrow_and_update().clone() {
                    break c;
                }
                if channel_rx.changed().await.is_err() {
                    return;
                }
            };
            let settled = match send(channel, &report).await {
                Ok(true) => {
                    tracing::debug!(
                        kind = report.kind(),
                        alloc_id = report.alloc_id(),
                        "report acknowledged"
                    );
                    true
                }
                Ok(false) => {
                    tracing::info!(
                        kind = report.kind(),
                        alloc_id = report.alloc_id(),
                        "report stale, dropped"
                    );
                    true
                }
                Err(status) if is_permanent(&status) => {
                    tracing::error!(
                        kind = report.kind(),
                        alloc_id = report.alloc_id(),
                        code = ?status.code(),
                        message = status.message(),
                        "report rejected, dropped"
                    );
                    true
                }
                Err(status) => {
                    let delay = backoff.next_delay();
                    tracing::debug!(
                        kind = report.kind(),
                        alloc_id = report.alloc_id(),
                        code = ?status.code(),
                        message = status.message(),
                        retry_in_ms = delay.as_millis() as u64,
                        "report failed, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    false
                }
            };
            if settled {
                backoff.reset();
                self.pop_if_front(seq);
                if let Report::Exited(r) = &report {
                    let _ = delivered
                        .send(ExitDelivered {
                            alloc_id: r.alloc_id,
                        })
                        .await;
                }
            }
        }
    }
}

/// Errors that no retry will fix: the report itself is refused, or the
/// server has no such call (an older berthd and a step report, during a
/// rolling upgrade done agents first): retrying would hold every later
/// report, exits included, behind it.
fn is_permanent(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::InvalidArgument | Code::NotFound | Code::Unimplemented
    )
}

/// Sends one report; Ok(accepted) on an answer.
async fn send(channel: Channel, report: &Report) -> Result<bool, Status> {
    let mut client = AgentServiceClient::with_interceptor(channel, crate::credentials::get())
        .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES);
    let call = async {
        let ack = match report {
            Report::Started(r) => client.report_started(r.clone()).await?,
            Report::Exited(r) => client.report_exited(r.clone()).await?,
            Report::StopAck(r) => client.ack_stop(r.clone()).await?,
            Report::Step(r) => client.report_step(r.clone()).await?,
        };
        Ok(ack.into_inner().accepted)
    };
    match tokio::time::timeout(Duration::from_millis(REPORT_RPC_TIMEOUT_MS), call).await {
        Ok(result) => result,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {REPORT_RPC_TIMEOUT_MS} ms"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(alloc_id: u64) -> Report {
        Report::Started(StartedReport {
            alloc_id,
            ..Default::default()
        })
    }

    #[test]
    fn refusals_no_retry_can_fix_are_permanent() {
        for code in [Code::InvalidArgument, Code::NotFound, Code::Unimplemented] {
            assert!(is_permanent(&Status::new(code, "")), "{code:?}");
        }
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::FailedPrecondition,
        ] {
            assert!(!is_permanent(&Status::new(code, "")), "{code:?}");
        }
    }

    #[test]
    fn drops_oldest_when_full() {
        let o = Outbox::new(2);
        assert_eq!(o.push(started(1)), None);
        assert_eq!(o.push(started(2)), None);
        assert_eq!(o.push(started(3)), Some(started(1)));
        assert_eq!(o.len(), 2);
        assert_eq!(o.front().map(|(_, r)| r.alloc_id()), Some(2));
    }

    #[test]
    fn pop_only_removes_the_sent_front() {
        let o = Outbox::new(2);
        o.push(started(1));
        let (seq, _) = o.front().unwrap();
        // While "sending" 1, two more arrive and push 1 out.
        o.push(started(2));
        o.push(started(3));
        o.pop_if_front(seq);
        assert_eq!(o.len(), 2, "report 2 must not be popped for 1's ack");
    }

    #[tokio::test]
    async fn flush_times_out_without_a_sender() {
        let o = Outbox::new(4);
        assert!(o.flush(Duration::from_millis(1)).await);
        o.push(started(1));
        assert!(!o.flush(Duration::from_millis(30)).await);
    }
}
