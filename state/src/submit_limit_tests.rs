//! Submit limits as the state machine keeps their counts between submits
//! (`SmState::submit_counts`): the same answers as counting afresh, across
//! single submits, arrays, ends and policy changes.

use berth_scheduler::{Account, JobSpec, Qos};

use super::test_support::{accepted, apply, rejected, submit};
use super::*;
use crate::command::Command;
use crate::policy::PolicyChange;

/// QOS normal allows 3 submitted jobs per user; account lab (alice, bob)
/// 5 in all.
fn limited() -> SmState {
    let mut s = SmState::default();
    let mut normal = Qos::named("normal");
    normal.limits.max_submit_jobs_per_user = Some(3);
    let lab = Account {
        name: "lab".into(),
        users: vec!["alice".into(), "bob".into()],
        limits: berth_scheduler::Limits {
            grp_submit_jobs: Some(5),
            ..Default::default()
        },
        ..Default::default()
    };
    for change in [
        PolicyChange::UpsertQos(normal),
        PolicyChange::UpsertAccount(lab),
    ] {
        assert_eq!(
            apply(&mut s, Command::SetPolicy { change, now_ms: 2 }),
            Response::PolicySet
        );
    }
    s
}

fn job(user: &str) -> JobSpec {
    JobSpec {
        user: user.into(),
        command: "true".into(),
        cpus: 1,
        ..JobSpec::default()
    }
}

#[test]
fn kept_counts_refuse_exactly_where_fresh_counts_would() {
    let mut s = limited();
    let first = accepted(submit(&mut s, "a1", job("alice")));
    accepted(submit(&mut s, "a2", job("alice")));
    // An array of 2 is 2 jobs: 2 + 2 > 3.
    let array = JobSpec {
        array: "0-1".into(),
        ..job("alice")
    };
    assert_eq!(
        rejected(submit(&mut s, "a3", array)),
        "job submit limit reached: jobs submitted by user alice 2 + 2 > 3 (QOS normal MaxSubmitJobsPerUser)"
    );
    accepted(submit(&mut s, "a4", job("alice")));
    assert_eq!(
        rejected(submit(&mut s, "a5", job("alice"))),
        "job submit limit reached: jobs submitted by user alice 3 + 1 > 3 (QOS normal MaxSubmitJobsPerUser)"
    );
    // bob has his own 3, but the account has 5 in all.
    accepted(submit(&mut s, "b1", job("bob")));
    accepted(submit(&mut s, "b2", job("bob")));
    assert_eq!(
        rejected(submit(&mut s, "b3", job("bob"))),
        "job submit limit reached: jobs submitted 5 + 1 > 5 (account lab GrpSubmitJobs)"
    );
    // A job that ends gives its place back (the counts are rebuilt).
    let cancelled = apply(
        &mut s,
        Command::CancelJob {
            job_id: first,
            now_ms: 30,
        },
    );
    assert!(
        matches!(cancelled, Response::Cancelled { .. }),
        "{cancelled:?}"
    );
    accepted(submit(&mut s, "b3-again", job("bob")));
    assert_eq!(
        rejected(submit(&mut s, "a6", job("alice"))),
        "job submit limit reached: jobs submitted 5 + 1 > 5 (account lab GrpSubmitJobs)"
    );
    // A retried request id answers the first submit, counting nothing.
    assert!(matches!(
        submit(&mut s, "b1", job("bob")),
        Response::Submitted {
            duplicate: true,
            ..
        }
    ));
    // A raised limit takes effect at once.
    let mut roomy = Qos::named("normal");
    roomy.limits.max_submit_jobs_per_user = Some(10);
    let lab = Account {
        name: "lab".into(),
        users: vec!["alice".into(), "bob".into()],
        ..Default::default()
    };
    for change in [
        PolicyChange::UpsertQos(roomy),
        PolicyChange::UpsertAccount(lab),
    ] {
        apply(&mut s, Command::SetPolicy { change, now_ms: 40 });
    }
    // alice has 2 (a2, a4); 8 more make 10.
    for n in 0..8 {
        accepted(submit(&mut s, &format!("a-more-{n}"), job("alice")));
    }
    assert_eq!(
        rejected(submit(&mut s, "a-too-many", job("alice"))),
        "job submit limit reached: jobs submitted by user alice 10 + 1 > 10 (QOS normal MaxSubmitJobsPerUser)"
    );
}
