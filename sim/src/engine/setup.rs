//! The simulated cluster's first commands: its hosts register, and an
//! administrator enters the scenario's policy (QOS, accounts, users,
//! partitions, reservations), each through the command a live cluster
//! takes for it, so the state validates it as it would there.

use std::collections::BTreeSet;

use berth_scheduler::assoc::{Account, ROOT_ACCOUNT};
use berth_scheduler::model::Host;
use berth_state::policy::{PartitionRecord, PolicyChange, DECAY_HALF_LIFE_S_DEFAULT};
use berth_state::Command;

use super::SimInput;
use crate::SimError;

/// Each command with what it sets up (named in an error).
pub(super) fn commands(input: &SimInput) -> Vec<Result<(String, Command), SimError>> {
    let mut out: Vec<Result<(String, Command), SimError>> = Vec::new();
    for host in &input.hosts {
        out.push(Ok((format!("host {}", host.name), register(host))));
    }
    let world = &input.world;
    let policy = |what: String, change: PolicyChange| Ok((what, set_policy(change)));
    for q in &world.qos {
        out.push(policy(
            format!("qos {}", q.name),
            PolicyChange::UpsertQos(q.clone()),
        ));
    }
    // A preempt list may name any account, even a later or a mutual one,
    // and the state refuses a name that does not exist yet: every account
    // first without its list, then the lists, as an admin would.
    for a in parents_first(&world.accounts) {
        out.push(policy(
            format!("account {}", a.name),
            PolicyChange::UpsertAccount(Account {
                preempt: Vec::new(),
                ..a.clone()
            }),
        ));
    }
    for a in world.accounts.iter().filter(|a| !a.preempt.is_empty()) {
        out.push(policy(
            format!("account {} preempt", a.name),
            PolicyChange::UpsertAccount(a.clone()),
        ));
    }
    for u in &world.users {
        out.push(policy(
            format!("user {}", u.name),
            PolicyChange::UpsertUser(u.clone()),
        ));
    }
    for p in &world.partitions {
        let hosts = input
            .hosts
            .iter()
            .filter(|h| h.partitions.contains(&p.name))
            .map(|h| h.name.clone())
            .collect();
        let record = PartitionRecord {
            partition: p.clone(),
            hosts,
        };
        out.push(policy(
            format!("partition {}", p.name),
            PolicyChange::UpsertPartition(record),
        ));
    }
    let half_life_s = input.policy.priority.decay_half_life_s;
    if half_life_s != DECAY_HALF_LIFE_S_DEFAULT {
        out.push(policy(
            "priority_decay_half_life_s".into(),
            PolicyChange::SetDecayHalfLife(half_life_s),
        ));
    }
    for r in &world.reservations {
        let command = Command::CreateReservation {
            reservation: r.clone(),
            now_ms: 0,
        };
        out.push(Ok((format!("reservation {}", r.name), command)));
    }
    if world.usage != Default::default() {
        out.push(Err(SimError::Internal(
            "starting usage cannot be entered into the cluster".into(),
        )));
    }
    out
}

/// The host's agent registers it, with its features in its inventory as
/// an agent declares them.
fn register(host: &Host) -> Command {
    let mut inventory = host.inventory.clone();
    for f in &host.features {
        if !inventory.features.contains(f) {
            inventory.features.push(f.clone());
        }
    }
    Command::RegisterHost {
        name: host.name.clone(),
        inventory,
        agent_restarted: false,
        running_allocs: Vec::new(),
        now_ms: 0,
        drain_reason: String::new(),
        step_addr: String::new(),
    }
}

fn set_policy(change: PolicyChange) -> Command {
    Command::SetPolicy { change, now_ms: 0 }
}

/// Accounts with each parent before its children (the state refuses an
/// account whose parent does not exist yet); a cycle or a missing parent
/// is left for the state to refuse.
fn parents_first(accounts: &[Account]) -> Vec<&Account> {
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut out: Vec<&Account> = Vec::with_capacity(accounts.len());
    // Each round places at least one account or stops: at most n rounds.
    for _ in 0..=accounts.len() {
        let before = out.len();
        for a in accounts {
            let parent_ready = a.parent.is_empty()
                || a.parent == ROOT_ACCOUNT
                || placed.contains(a.parent.as_str());
            if parent_ready && !placed.contains(a.name.as_str()) {
                placed.insert(a.name.as_str());
                out.push(a);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out.extend(
        accounts
            .iter()
            .filter(|a| !placed.contains(a.name.as_str())),
    );
    out
}
