//! Each checker on a clean history and on one that breaks it: a checker
//! that cannot fail would prove nothing about the drill.

use super::*;

fn job(job_id: u64, request_id: &str, state: JobState) -> FinalJob {
    FinalJob {
        job_id,
        request_id: request_id.into(),
        state: state as i32,
        reason: String::new(),
        alloc_id: job_id * 10,
        host: "h1".into(),
        cpus: 1,
        qos: "normal".into(),
        start_ms: 1_000,
        end_ms: 2_000,
    }
}

fn acked(request_id: &str, job_id: u64) -> SubmitRecord {
    SubmitRecord {
        request_id: request_id.into(),
        job_id: Some(job_id),
        attempts: 1,
    }
}

#[test]
fn submits_clean_history_passes() {
    let submits = [
        acked("r1", 1),
        acked("r2", 2),
        // Never acknowledged, but applied: allowed (a timed-out write).
        SubmitRecord {
            request_id: "r3".into(),
            job_id: None,
            attempts: 3,
        },
    ];
    let jobs = [
        job(1, "r1", JobState::Completed),
        job(2, "r2", JobState::Completed),
        job(3, "r3", JobState::Completed),
    ];
    assert_eq!(acknowledged_submits_exist_once(&submits, &jobs), vec![]);
}

#[test]
fn submits_lost_duplicated_or_foreign_are_caught() {
    let submits = [acked("r1", 1), acked("r2", 2), acked("r4", 2)];
    let jobs = [
        job(2, "r2", JobState::Completed),
        job(5, "r2", JobState::Completed),
        job(6, "zz", JobState::Completed),
    ];
    let found: Vec<String> = acknowledged_submits_exist_once(&submits, &jobs)
        .into_iter()
        .map(|v| v.detail)
        .collect();
    assert_eq!(
        found,
        vec![
            "acknowledged submit r1 (job 1) is missing",
            "job id 2 acknowledged to two submits: r2 and r4",
            "acknowledged submit r4 got job 2, which holds submit r2",
            "job 6 holds request id \"zz\", which no submitter sent",
            "submit r2 made 2 jobs: [2, 5]",
        ]
    );
}

#[test]
fn markers_parse_and_skip_torn_lines() {
    let text = "start 1 10 h1 5000000000\nend 1 10 h1 6000000000\nstart 2 2\n\n";
    let (markers, bad) = parse_markers(text);
    assert_eq!(bad, 1);
    assert_eq!(
        markers,
        vec![
            RunMarker {
                start: true,
                job_id: 1,
                alloc_id: 10,
                host: "h1".into(),
                time_ms: 5_000
            },
            RunMarker {
                start: false,
                job_id: 1,
                alloc_id: 10,
                host: "h1".into(),
                time_ms: 6_000
            },
        ]
    );
}

fn marker(start: bool, job_id: u64, alloc_id: u64, host: &str, time_ms: u64) -> RunMarker {
    RunMarker {
        start,
        job_id,
        alloc_id,
        host: host.into(),
        time_ms,
    }
}

#[test]
fn sequential_runs_pass_and_overlapping_runs_fail() {
    let mut j = job(1, "r1", JobState::Completed);
    j.alloc_id = 11;
    j.end_ms = 9_000;
    // Run 10 ended (marker) before run 11 started; run 11 has no end
    // marker (killed), so the state's end bounds it.
    let markers = [
        marker(true, 1, 10, "h1", 1_000),
        marker(false, 1, 10, "h1", 2_000),
        marker(true, 1, 11, "h1", 3_000),
    ];
    let (runs, bad) = runs_from_markers(&markers, std::slice::from_ref(&j));
    assert_eq!(bad, vec![]);
    assert_eq!(runs[1].end_ms, 9_000);
    assert_eq!(no_double_runs(&runs), vec![]);

    let overlapping = [
        marker(true, 1, 10, "h1", 1_000),
        marker(true, 1, 11, "h2", 1_500),
        marker(false, 1, 10, "h1", 2_000),
    ];
    let (runs, bad) = runs_from_markers(&overlapping, std::slice::from_ref(&j));
    assert_eq!(bad.len(), 1, "allocation 11 ran on h2 but was placed on h1");
    assert_eq!(no_double_runs(&runs).len(), 1);
}

#[test]
fn one_allocation_launched_twice_is_caught() {
    let j = job(1, "r1", JobState::Completed);
    let markers = [
        marker(true, 1, 10, "h1", 1_000),
        marker(true, 1, 10, "h1", 1_500),
    ];
    let (_, bad) = runs_from_markers(&markers, &[j]);
    assert_eq!(
        bad[0].detail,
        "job 1 allocation 10 was launched twice (on h1 and h1)"
    );
}

#[test]
fn capacity_counts_back_to_back_once_and_catches_overlap() {
    let cap: BTreeMap<String, u32> = [("h1".to_string(), 2)].into();
    let hold = |cpus, start_ms, end_ms| Holding {
        key: "h1".into(),
        cpus,
        start_ms,
        end_ms,
    };
    // 2 cpus, then 2 cpus from the instant the first ends: never 4.
    let fine = [
        hold(2, 0, 10),
        hold(2, 10, 20),
        hold(1, 20, 30),
        hold(1, 25, 30),
    ];
    assert_eq!(within_capacity("c", &fine, &cap), vec![]);
    let over = [hold(2, 0, 10), hold(1, 9, 20)];
    assert_eq!(
        within_capacity("c", &over, &cap)[0].detail,
        "h1 held 3 cpus at 9 ms, more than its 2"
    );
    let unknown = [Holding {
        key: "h9".into(),
        cpus: 1,
        start_ms: 0,
        end_ms: 1,
    }];
    assert_eq!(within_capacity("c", &unknown, &cap).len(), 1);
}

#[test]
fn settled_allows_final_and_explained_pending_only() {
    let mut pending = job(2, "r2", JobState::Pending);
    pending.reason = "Resources".into();
    let ok = [job(1, "r1", JobState::Completed), pending.clone()];
    assert_eq!(jobs_settled(&ok), vec![]);
    pending.reason.clear();
    let bad = [job(3, "r3", JobState::Running), pending];
    assert_eq!(jobs_settled(&bad).len(), 2);
}

#[test]
fn cancels_must_end_cancelled() {
    let cancel = |job_id, previous: JobState| CancelRecord {
        job_id,
        outcome: CancelOutcome::Acked {
            previous: previous as i32,
        },
    };
    let jobs = [
        job(1, "r1", JobState::Cancelled),
        job(2, "r2", JobState::NodeFail),
        job(3, "r3", JobState::Completed),
    ];
    let ok = [
        cancel(1, JobState::Pending),
        cancel(2, JobState::Running),
        CancelRecord {
            job_id: 3,
            outcome: CancelOutcome::Unknown,
        },
    ];
    assert_eq!(cancels_honoured(&ok, &jobs), vec![]);
    let bad = [cancel(3, JobState::Running), cancel(2, JobState::Pending)];
    assert_eq!(cancels_honoured(&bad, &jobs).len(), 2);
}

#[test]
fn qos_final_value_must_follow_the_last_ack() {
    let e = |priority, acked| QosEdit { priority, acked };
    let edits = [e(5, true), e(7, true), e(9, false)];
    assert_eq!(qos_edits_linearizable(0, &edits, 7), vec![]);
    assert_eq!(qos_edits_linearizable(0, &edits, 9), vec![]);
    assert_eq!(qos_edits_linearizable(0, &edits, 5).len(), 1);
    assert_eq!(qos_edits_linearizable(0, &edits, 0).len(), 1);
    assert_eq!(qos_edits_linearizable(3, &[e(4, false)], 3), vec![]);
}

#[test]
fn node_fail_needs_a_killed_agent() {
    let j = job(1, "r1", JobState::NodeFail);
    let outage = |host: &str, killed_ms, restarted_ms| AgentOutage {
        host: host.into(),
        killed_ms,
        restarted_ms,
    };
    // Killed while the job ran (1,000..2,000).
    assert_eq!(
        node_fail_explained(std::slice::from_ref(&j), &[outage("h1", 1_500, 1_800)]),
        vec![]
    );
    // Placed while the agent was down, failed at its registration.
    assert_eq!(
        node_fail_explained(std::slice::from_ref(&j), &[outage("h1", 100, 300)]),
        vec![]
    );
    assert_eq!(
        node_fail_explained(std::slice::from_ref(&j), &[outage("h2", 1_500, 1_800)]).len(),
        1
    );
    assert_eq!(
        node_fail_explained(std::slice::from_ref(&j), &[outage("h1", 5_000, 5_500)]).len(),
        1
    );
    let mut late = j;
    late.start_ms = 20_000;
    late.end_ms = 21_000;
    assert_eq!(
        node_fail_explained(&[late], &[outage("h1", 100, 300)]).len(),
        1
    );
}

#[test]
fn replicas_must_match() {
    let a = vec![job(1, "r1", JobState::Completed)];
    let mut b = a.clone();
    assert_eq!(replicas_agree(&[(1, a.clone()), (2, b.clone())]), vec![]);
    b[0].state = JobState::Running as i32;
    assert_eq!(replicas_agree(&[(1, a.clone()), (2, b)]).len(), 1);
    assert_eq!(replicas_agree(&[(1, a), (2, vec![])]).len(), 1);
}
