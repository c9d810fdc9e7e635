//! The linearizability checker on hand-made histories: ones a correct
//! cluster can produce pass, and each kind of anomaly is named with its
//! key and ops. Instants are µs on the drill's clock.

use super::*;

fn op(client: u32, key: &str, call: Call, invoked_us: u64, returned_us: u64) -> Op {
    Op {
        client,
        key: key.into(),
        call,
        invoked_us,
        returned_us,
    }
}

fn submit(client: u32, key: &str, job_id: Option<u64>, t: (u64, u64)) -> Op {
    op(client, key, Call::Submit { job_id }, t.0, t.1)
}

fn cancel(client: u32, key: &str, job_id: u64, outcome: CancelOutcome, t: (u64, u64)) -> Op {
    op(client, key, Call::Cancel { job_id, outcome }, t.0, t.1)
}

fn acked_from(previous: JobState) -> CancelOutcome {
    CancelOutcome::Acked {
        previous: previous as i32,
    }
}

fn get(client: u32, key: &str, job_id: u64, state: JobState, t: (u64, u64)) -> Op {
    let read = Some(Read::Found {
        state: state as i32,
    });
    op(client, key, Call::Get { job_id, read }, t.0, t.1)
}

fn not_found(client: u32, key: &str, job_id: u64, t: (u64, u64)) -> Op {
    let read = Some(Read::NotFound);
    op(client, key, Call::Get { job_id, read }, t.0, t.1)
}

fn details(summary: &Summary) -> Vec<&str> {
    summary
        .violations
        .iter()
        .map(|v| v.detail.as_str())
        .collect()
}

#[test]
fn concurrent_history_of_two_keys_passes() {
    let history = [
        // r1: the first attempt timed out (it applied: the get that
        // overlaps the retry already sees the job), the retry is
        // acknowledged; a get overlapping the cancel reads the job
        // before it, the next one after it.
        submit(0, "r1", None, (0, 3_000)),
        submit(0, "r1", Some(5), (3_100, 3_200)),
        get(1, "r1", 5, JobState::Pending, (3_150, 3_400)),
        cancel(0, "r1", 5, acked_from(JobState::Pending), (4_000, 4_500)),
        get(1, "r1", 5, JobState::Pending, (4_100, 4_200)),
        get(1, "r1", 5, JobState::Cancelled, (4_300, 4_400)),
        get(FINAL_READER, "r1", 5, JobState::Cancelled, (9_000, 9_100)),
        // r2: cancelled while running: it still reads RUNNING, then ends
        // CANCELLED. A get without an answer is dropped.
        submit(1, "r2", Some(6), (100, 200)),
        get(1, "r2", 6, JobState::Running, (300, 400)),
        cancel(1, "r2", 6, acked_from(JobState::Running), (500, 600)),
        op(
            1,
            "r2",
            Call::Get {
                job_id: 6,
                read: None,
            },
            650,
            690,
        ),
        get(1, "r2", 6, JobState::Running, (700, 800)),
        get(FINAL_READER, "r2", 6, JobState::Cancelled, (9_000, 9_100)),
    ];
    let summary = check(&history, STEPS_PER_KEY_MAX);
    assert_eq!(details(&summary), Vec::<&str>::new());
    assert_eq!(summary.undecided, Vec::<String>::new());
    assert_eq!((summary.ops, summary.keys), (12, 2));
}

#[test]
fn stale_read_after_an_acknowledged_cancel_is_caught() {
    let history = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, acked_from(JobState::Pending), (20, 30)),
        get(1, "r1", 5, JobState::Pending, (40, 50)),
    ];
    let summary = check(&history, STEPS_PER_KEY_MAX);
    assert_eq!(
        details(&summary),
        vec![
            "key r1: not linearizable: after client 0 submit -> job 5 [0..10 us], \
             client 0 cancel 5 -> acked from Pending [20..30 us] \
             (2 of 3 answered ops placed; job 5 Cancelled), \
             none of these fits: client 1 get 5 -> Pending [40..50 us]"
        ]
    );
    assert_eq!(summary.violations[0].check, CHECK);
}

#[test]
fn read_overlapping_the_cancel_may_see_either_side() {
    let history = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, acked_from(JobState::Pending), (20, 30)),
        // Invoked before the cancel returned: it may come before it.
        get(1, "r1", 5, JobState::Pending, (25, 50)),
    ];
    assert_eq!(check(&history, STEPS_PER_KEY_MAX).violations, vec![]);
}

#[test]
fn job_seen_before_its_submit_was_invoked_is_caught() {
    let history = [
        get(1, "r1", 5, JobState::Pending, (0, 10)),
        submit(0, "r1", Some(5), (20, 30)),
    ];
    assert_eq!(
        details(&check(&history, STEPS_PER_KEY_MAX)),
        vec![
            "key r1: not linearizable: after the start \
             (0 of 2 answered ops placed; the job Absent), \
             none of these fits: client 1 get 5 -> Pending [0..10 us]"
        ]
    );
}

#[test]
fn timed_out_submit_that_later_shows_up_passes() {
    // Never acknowledged, yet the job exists afterwards: one of the
    // unanswered attempts applied.
    let history = [
        submit(0, "r1", None, (0, 3_000_000)),
        submit(0, "r1", None, (3_100_000, 6_100_000)),
        get(
            FINAL_READER,
            "r1",
            5,
            JobState::Completed,
            (9_000_000, 9_000_100),
        ),
    ];
    assert_eq!(check(&history, STEPS_PER_KEY_MAX).violations, vec![]);
    // A retry acknowledged after a timed-out attempt names the same job.
    let retried = [
        submit(0, "r1", None, (0, 3_000_000)),
        get(1, "r1", 5, JobState::Running, (3_000_010, 3_000_020)),
        submit(0, "r1", Some(5), (3_100_000, 3_100_500)),
    ];
    assert_eq!(check(&retried, STEPS_PER_KEY_MAX).violations, vec![]);
}

#[test]
fn timed_out_submit_that_never_shows_up_passes() {
    let history = [
        submit(0, "r1", None, (0, 3_000_000)),
        not_found(FINAL_READER, "r1", 0, (9_000_000, 9_000_100)),
    ];
    let summary = check(&history, STEPS_PER_KEY_MAX);
    assert_eq!(summary.violations, vec![]);
    assert_eq!((summary.ops, summary.keys), (2, 1));
}

#[test]
fn acknowledged_submit_that_disappears_is_caught() {
    let history = [
        submit(0, "r1", Some(5), (0, 10)),
        not_found(1, "r1", 5, (20, 30)),
    ];
    assert_eq!(
        details(&check(&history, STEPS_PER_KEY_MAX)),
        vec![
            "key r1: not linearizable: after client 0 submit -> job 5 [0..10 us] \
             (1 of 2 answered ops placed; job 5 Pending|Running|Completed|Failed|Timeout|NodeFail|Preempted), \
             none of these fits: client 1 get 5 -> not found [20..30 us]"
        ]
    );
}

#[test]
fn one_request_id_answered_with_two_jobs_is_caught() {
    let history = [
        submit(0, "r1", Some(5), (0, 10)),
        submit(0, "r1", Some(6), (20, 30)),
    ];
    assert_eq!(
        details(&check(&history, STEPS_PER_KEY_MAX)),
        vec![
            "key r1: not linearizable: after client 0 submit -> job 5 [0..10 us] \
             (1 of 2 answered ops placed; job 5 Pending|Running|Completed|Failed|Timeout|NodeFail|Preempted), \
             none of these fits: client 0 submit -> job 6 [20..30 us]"
        ]
    );
}

#[test]
fn cancelled_end_needs_a_cancel_that_may_have_applied() {
    // A timed-out cancel explains a CANCELLED end.
    let unknown = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, CancelOutcome::Unknown, (20, 3_000_020)),
        get(
            FINAL_READER,
            "r1",
            5,
            JobState::Cancelled,
            (9_000_000, 9_000_100),
        ),
    ];
    assert_eq!(check(&unknown, STEPS_PER_KEY_MAX).violations, vec![]);
    // Without any cancel, nothing does.
    let none = [
        submit(0, "r1", Some(5), (0, 10)),
        get(
            FINAL_READER,
            "r1",
            5,
            JobState::Cancelled,
            (9_000_000, 9_000_100),
        ),
    ];
    assert_eq!(check(&none, STEPS_PER_KEY_MAX).violations.len(), 1);
    // A cancel acknowledged while running ends CANCELLED, not COMPLETED.
    let completed = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, acked_from(JobState::Running), (20, 30)),
        get(
            FINAL_READER,
            "r1",
            5,
            JobState::Completed,
            (9_000_000, 9_000_100),
        ),
    ];
    assert_eq!(
        details(&check(&completed, STEPS_PER_KEY_MAX)),
        vec![
            "key r1: not linearizable: after client 0 submit -> job 5 [0..10 us], \
             client 0 cancel 5 -> acked from Running [20..30 us] \
             (2 of 3 answered ops placed; job 5 Stopping|Cancelled|NodeFail), \
             none of these fits: final listing get 5 -> Completed [9000000..9000100 us]"
        ]
    );
}

#[test]
fn refused_cancel_needs_an_ended_job() {
    let early = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, CancelOutcome::Refused("ended".into()), (20, 30)),
        get(1, "r1", 5, JobState::Completed, (40, 50)),
    ];
    assert_eq!(check(&early, STEPS_PER_KEY_MAX).violations, vec![]);
    let then_running = [
        submit(0, "r1", Some(5), (0, 10)),
        cancel(0, "r1", 5, CancelOutcome::Refused("ended".into()), (20, 30)),
        get(1, "r1", 5, JobState::Running, (40, 50)),
    ];
    assert_eq!(check(&then_running, STEPS_PER_KEY_MAX).violations.len(), 1);
}

#[test]
fn retries_through_an_outage_cost_one_branch() {
    // 300 unanswered attempts, then the acknowledged one: the first
    // unanswered attempt stands for all of them.
    let mut history: Vec<Op> = (0..300)
        .map(|i| submit(0, "r1", None, (i * 1_000, i * 1_000 + 900)))
        .collect();
    history.push(submit(0, "r1", Some(5), (300_000, 300_100)));
    let summary = check(&history, STEPS_PER_KEY_MAX);
    assert_eq!(summary.violations, vec![]);
    assert_eq!((summary.ops, summary.steps), (301, 2));
}

#[test]
fn step_bound_gives_undecided_not_a_hang() {
    // A read of COMPLETED, then (after it returned) one of PENDING: no
    // order explains it. Eleven reads overlapping both can go anywhere,
    // so refuting it means trying every subset of them first: thousands
    // of steps, more than a bound of 5 allows.
    let mut history = vec![
        submit(0, "r1", Some(5), (0, 10)),
        get(1, "r1", 5, JobState::Completed, (20, 30)),
        get(2, "r1", 5, JobState::Pending, (40, 50)),
    ];
    for c in 3..=13 {
        history.push(get(c, "r1", 5, JobState::Completed, (20, 1_000)));
    }
    let bounded = check(&history, 5);
    assert_eq!(bounded.undecided, vec!["r1".to_string()]);
    assert_eq!(bounded.violations, vec![]);
    assert_eq!(bounded.steps, 6);
    // With room, the same history is refuted.
    let full = check(&history, STEPS_PER_KEY_MAX);
    assert_eq!(full.undecided, Vec::<String>::new());
    assert_eq!(full.violations.len(), 1);
    // The start, then every subset of the eleven with and without the
    // COMPLETED read: 1 + 2^12 nodes, each visited once thanks to the memo.
    assert_eq!(full.steps, 4_097);
}

#[test]
fn final_listing_reads_every_submit() {
    let submits = [
        SubmitRecord {
            request_id: "r1".into(),
            job_id: Some(5),
            attempts: 1,
        },
        SubmitRecord {
            request_id: "r2".into(),
            job_id: None,
            attempts: 4,
        },
    ];
    let jobs = [FinalJob {
        job_id: 5,
        request_id: "r1".into(),
        state: JobState::Completed as i32,
        reason: String::new(),
        alloc_id: 50,
        host: "h1".into(),
        cpus: 1,
        qos: "normal".into(),
        start_ms: 1_000,
        end_ms: 2_000,
    }];
    assert_eq!(
        final_reads(&submits, &jobs, 100, 200),
        vec![
            get(FINAL_READER, "r1", 5, JobState::Completed, (100, 200)),
            not_found(FINAL_READER, "r2", 0, (100, 200)),
        ]
    );
}
