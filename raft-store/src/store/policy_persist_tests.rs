//! The policy tables and usage are written only by apply batches that may
//! change them (`may_change_policy`); these tests check that what a
//! reopened store loads is still exactly what was in memory.

use berth_scheduler::{JobSpec, Placement};
use openraft::{CommittedLeaderId, EntryPayload};
use tempfile::TempDir;

use super::*;
use berth_state::command::Request;
use berth_state::policy::PolicyChange;

fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request::new(command)),
    }
}

fn submit(request_id: &str, now_ms: u64) -> Command {
    Command::SubmitJob {
        request_id: request_id.into(),
        spec: JobSpec {
            user: "alice".into(),
            command: "true".into(),
            cpus: 2,
            ..JobSpec::default()
        },
        now_ms,
    }
}

fn register(name: &str) -> Command {
    serde_json::from_value(serde_json::json!({"RegisterHost": {
        "name": name,
        "inventory": {"cpus": 8, "mem_mb": 4096},
        "agent_restarted": false,
        "running_allocs": [],
        "now_ms": 5,
    }}))
    .expect("register command")
}

fn plan(snapshot_index: u64, now_ms: u64, starts: Vec<Placement>) -> Command {
    Command::ApplyPlan {
        gang_starts: Vec::new(),
        snapshot_index,
        now_ms,
        starts,
        evictions: Vec::new(),
        borrowed: Vec::new(),
    }
}

fn placement(job_id: u64, host: &str, resources: berth_scheduler::Resources) -> Placement {
    serde_json::from_value(serde_json::json!({
        "job_id": job_id,
        "host": host,
        "resources": resources,
    }))
    .expect("placement")
}

fn policy_json(state: &SmState) -> (String, String) {
    (
        serde_json::to_string(&state.data.policy).expect("policy"),
        serde_json::to_string(&state.data.usage).expect("usage"),
    )
}

fn account(name: &str) -> Command {
    Command::SetPolicy {
        change: PolicyChange::UpsertAccount(berth_scheduler::Account {
            name: name.into(),
            users: vec!["alice".into()],
            ..Default::default()
        }),
        now_ms: 6,
    }
}

#[test]
fn only_submits_leave_policy_and_usage_unwritten() {
    assert!(!may_change_policy(&submit("a", 1)));
    assert!(!may_change_policy(&Command::Batch {
        commands: vec![submit("a", 1), submit("b", 1)],
    }));
    assert!(may_change_policy(&Command::Batch {
        commands: vec![submit("a", 1), account("lab")],
    }));
    assert!(may_change_policy(&account("lab")));
    assert!(may_change_policy(&plan(1, 1, Vec::new())));
    assert!(may_change_policy(&Command::CancelJob {
        job_id: 1,
        now_ms: 1,
    }));
}

#[test]
fn a_submit_changes_neither_policy_nor_usage() {
    let mut state = SmState::default();
    let mut dirty = Dirty::default();
    state.apply(&register("h1"), &mut dirty);
    state.apply(&account("lab"), &mut dirty);
    state.apply(&submit("first", 1_000), &mut dirty);
    let resources = state.job(1).expect("job 1").job.spec.per_host();
    state.apply(
        &plan(3, 2_000, vec![placement(1, "h1", resources)]),
        &mut dirty,
    );
    state.apply(&plan(4, 9_000, Vec::new()), &mut dirty);
    let before = policy_json(&state);
    assert_ne!(
        before.1,
        serde_json::to_string(&berth_state::policy::UsageState::default()).expect("usage"),
        "a running job under an account accrues usage"
    );
    for n in 0..3 {
        let response = state.apply(&submit(&format!("more-{n}"), 20_000), &mut dirty);
        assert!(matches!(
            response,
            Response::Submitted {
                duplicate: false,
                ..
            }
        ));
    }
    assert_eq!(policy_json(&state), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_and_usage_survive_reopen_after_batches_of_submits() {
    let dir = TempDir::new().expect("tempdir");
    let expected = {
        let mut handles = open(dir.path()).expect("open");
        let sm = &mut handles.state_machine;
        sm.apply(vec![
            entry(1, register("h1")),
            entry(2, account("lab")),
            entry(3, submit("first", 1_000)),
        ])
        .await
        .expect("apply");
        let resources = handles
            .state
            .read()
            .expect("lock")
            .job(1)
            .expect("job 1")
            .job
            .spec
            .per_host();
        sm.apply(vec![entry(
            4,
            plan(3, 2_000, vec![placement(1, "h1", resources)]),
        )])
        .await
        .expect("apply");
        sm.apply(vec![entry(5, plan(4, 9_000, Vec::new()))])
            .await
            .expect("apply");
        // Batches that write neither policy nor usage.
        sm.apply(vec![
            entry(6, submit("s1", 10_000)),
            entry(7, submit("s2", 10_000)),
        ])
        .await
        .expect("apply");
        sm.apply(vec![entry(
            8,
            Command::Batch {
                commands: vec![submit("s3", 11_000), submit("s4", 11_000)],
            },
        )])
        .await
        .expect("apply");
        let state = handles.state.read().expect("lock");
        assert_eq!(state.data.jobs.len(), 5);
        policy_json(&state)
    };
    let reopened = open(dir.path()).expect("reopen");
    let state = reopened.state.read().expect("lock");
    assert_eq!(state.data.jobs.len(), 5);
    assert_eq!(state.applied_index(), 8);
    assert_eq!(policy_json(&state), expected);
}
