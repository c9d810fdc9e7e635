//! Conversions between the API's policy messages (QOS, accounts, users,
//! partitions) and the scheduler's types. Input from a client is checked
//! here for what the proto cannot say (TRES keys, flag names); the state
//! machine checks consistency between objects.

use std::collections::HashMap;

use berth_proto::api;
use berth_scheduler::qos::PreemptMode;
use berth_scheduler::{
    Account, Limits, Partition, Qos, QosFlags, TresKind, TresLimits, UserRecord,
};
use berth_state::policy::PartitionRecord;

fn tres_from(map: &HashMap<String, u64>, what: &str) -> Result<TresLimits, String> {
    let mut limits = TresLimits::default();
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        let kind = TresKind::ALL
            .into_iter()
            .find(|k| k.key() == key)
            .ok_or_else(|| {
                format!("{what}: unknown TRES {key:?} (expected node, cpu, mem_mb, gpu or emu)")
            })?;
        limits.set(kind, map.get(key).copied());
    }
    Ok(limits)
}

fn tres_to(limits: &TresLimits) -> HashMap<String, u64> {
    limits
        .iter()
        .map(|(k, v)| (k.key().to_string(), v))
        .collect()
}

pub fn limits_from(l: Option<&api::Limits>) -> Result<Limits, String> {
    let Some(l) = l else {
        return Ok(Limits::default());
    };
    Ok(Limits {
        grp_tres: tres_from(&l.grp_tres, "grp_tres")?,
        grp_tres_mins: tres_from(&l.grp_tres_mins, "grp_tres_mins")?,
        grp_jobs: l.grp_jobs,
        grp_submit_jobs: l.grp_submit_jobs,
        grp_wall_s: l.grp_wall_s,
        max_tres_per_job: tres_from(&l.max_tres_per_job, "max_tres_per_job")?,
        max_tres_per_node: tres_from(&l.max_tres_per_node, "max_tres_per_node")?,
        max_tres_per_user: tres_from(&l.max_tres_per_user, "max_tres_per_user")?,
        max_jobs_per_user: l.max_jobs_per_user,
        max_submit_jobs_per_user: l.max_submit_jobs_per_user,
        max_wall_s: l.max_wall_s,
        min_tres_per_job: tres_from(&l.min_tres_per_job, "min_tres_per_job")?,
    })
}

pub fn limits_to(l: &Limits) -> api::Limits {
    api::Limits {
        grp_tres: tres_to(&l.grp_tres),
        grp_tres_mins: tres_to(&l.grp_tres_mins),
        grp_jobs: l.grp_jobs,
        grp_submit_jobs: l.grp_submit_jobs,
        grp_wall_s: l.grp_wall_s,
        max_tres_per_job: tres_to(&l.max_tres_per_job),
        max_tres_per_node: tres_to(&l.max_tres_per_node),
        max_tres_per_user: tres_to(&l.max_tres_per_user),
        max_jobs_per_user: l.max_jobs_per_user,
        max_submit_jobs_per_user: l.max_submit_jobs_per_user,
        max_wall_s: l.max_wall_s,
        min_tres_per_job: tres_to(&l.min_tres_per_job),
    }
}

pub fn qos_from(q: &api::Qos) -> Result<Qos, String> {
    let mut limits = limits_from(q.limits.as_ref())?;
    if limits.max_wall_s.is_none() && q.max_wall_s > 0 {
        limits.max_wall_s = Some(q.max_wall_s);
    }
    if limits.max_jobs_per_user.is_none() && q.max_jobs_per_user > 0 {
        limits.max_jobs_per_user = Some(q.max_jobs_per_user);
    }
    let mut flags = QosFlags::default();
    for f in &q.flags {
        if !flags.set_by_name(f) {
            return Err(format!(
                "QOS {}: unknown flag {f:?} (expected one of {})",
                q.name,
                QosFlags::NAMES.join(", ")
            ));
        }
    }
    Ok(Qos {
        name: q.name.clone(),
        priority: q.priority,
        limits,
        flags,
        usage_factor: q.usage_factor.unwrap_or(1.0),
        usage_threshold: q.usage_threshold,
        preempt: q.preempt.clone(),
        grace_time_s: (q.grace_time_s > 0).then_some(q.grace_time_s),
        preempt_mode: match q.preempt_mode.to_ascii_lowercase().as_str() {
            // Unset on a QOS: the partition's mode applies.
            "" | "off" => PreemptMode::Off,
            "requeue" => PreemptMode::Requeue,
            "cancel" => PreemptMode::Cancel,
            "suspend" => {
                return Err(format!(
                    "QOS {}: preempt_mode suspend is not supported: Berth does not stop and continue jobs, and a suspended job would keep its allocation; use requeue or cancel",
                    q.name
                ))
            }
            other => {
                return Err(format!(
                    "QOS {}: unknown preempt_mode {other:?} (expected requeue or cancel)",
                    q.name
                ))
            }
        },
        preempt_exempt_time_s: q.preempt_exempt_time_s,
        idle_fill_preemptable: q.idle_fill_preemptable,
    })
}

/// A preempt mode's word, as the API carries it ("" for a QOS's unset).
fn preempt_mode_word(mode: PreemptMode, unset: &'static str) -> String {
    match mode {
        PreemptMode::Off => unset,
        PreemptMode::Requeue => "requeue",
        PreemptMode::Cancel => "cancel",
        PreemptMode::Suspend => "suspend",
    }
    .to_string()
}

fn flag_names(f: &QosFlags) -> Vec<String> {
    let set = [
        f.deny_on_limit,
        f.no_reserve,
        f.over_part_qos,
        f.partition_max_nodes,
        f.partition_min_nodes,
        f.partition_time_limit,
        f.requires_reservation,
        f.relative,
        f.usage_factor_safe,
        f.no_decay,
        f.enforce_usage_threshold,
    ];
    QosFlags::NAMES
        .iter()
        .zip(set)
        .filter(|(_, on)| *on)
        .map(|(n, _)| n.to_string())
        .collect()
}

pub fn qos_to(q: &Qos) -> api::Qos {
    api::Qos {
        name: q.name.clone(),
        priority: q.priority,
        max_wall_s: q.limits.max_wall_s.unwrap_or(0),
        max_jobs_per_user: q.limits.max_jobs_per_user.unwrap_or(0),
        preempt: q.preempt.clone(),
        grace_time_s: q.grace_time_s.unwrap_or(0),
        limits: Some(limits_to(&q.limits)),
        flags: flag_names(&q.flags),
        usage_factor: Some(q.usage_factor),
        usage_threshold: q.usage_threshold,
        preempt_mode: preempt_mode_word(q.preempt_mode, ""),
        preempt_exempt_time_s: q.preempt_exempt_time_s,
        idle_fill_preemptable: q.idle_fill_preemptable,
    }
}

/// `names` in their first order, each once: a list is a set that a
/// client may have built by appending.
fn dedup(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        if !out.contains(n) {
            out.push(n.clone());
        }
    }
    out
}

pub fn account_from(a: &api::Account) -> Result<Account, String> {
    // The default QOS is also allowed, and first.
    let mut qos: Vec<String> = Vec::with_capacity(a.qos.len() + 1);
    if !a.default_qos.is_empty() {
        qos.push(a.default_qos.clone());
    }
    qos.extend(a.qos.iter().cloned());
    Ok(Account {
        name: a.name.clone(),
        parent: if a.parent.is_empty() {
            berth_scheduler::assoc::ROOT_ACCOUNT.to_string()
        } else {
            a.parent.clone()
        },
        shares: if a.shares == 0 { 1 } else { a.shares },
        users: a.users.clone(),
        qos: dedup(&qos),
        priority: a.priority,
        max_priority: a.max_priority,
        limits: limits_from(a.limits.as_ref()).map_err(|e| format!("account {}: {e}", a.name))?,
        preempt: dedup(&a.preempt),
    })
}

pub fn account_to(a: &Account) -> api::Account {
    api::Account {
        name: a.name.clone(),
        parent: a.parent.clone(),
        shares: a.shares,
        users: a.users.clone(),
        default_qos: a.qos.first().cloned().unwrap_or_default(),
        priority: a.priority,
        max_priority: a.max_priority,
        qos: a.qos.clone(),
        limits: Some(limits_to(&a.limits)),
        preempt: a.preempt.clone(),
    }
}

pub fn user_from(u: &api::User) -> UserRecord {
    UserRecord {
        name: u.name.clone(),
        priority: u.priority,
        default_account: u.default_account.clone(),
    }
}

pub fn user_to(u: &UserRecord) -> api::User {
    api::User {
        name: u.name.clone(),
        priority: u.priority,
        default_account: u.default_account.clone(),
    }
}

pub fn partition_from(p: &api::Partition) -> Result<PartitionRecord, String> {
    let preempt_mode = match p.preempt_mode.to_ascii_lowercase().as_str() {
        "" | "off" => PreemptMode::Off,
        "requeue" => PreemptMode::Requeue,
        "cancel" => PreemptMode::Cancel,
        other => {
            return Err(format!(
                "partition {}: unknown preempt_mode {other:?} (expected off, requeue or cancel)",
                p.name
            ))
        }
    };
    Ok(PartitionRecord {
        partition: Partition {
            name: p.name.clone(),
            default: p.is_default,
            max_time_s: (p.max_time_s > 0).then_some(p.max_time_s),
            default_time_s: (p.default_time_s > 0).then_some(p.default_time_s),
            max_nodes: p.max_nodes,
            min_nodes: p.min_nodes,
            priority_job_factor: p.priority_job_factor,
            qos: p.qos.clone(),
            preempt_mode,
            reserve_all_alternatives: p.reserve_all_alternatives,
        },
        hosts: p.hosts.clone(),
    })
}

pub fn partition_to(p: &PartitionRecord) -> api::Partition {
    let q = &p.partition;
    api::Partition {
        name: q.name.clone(),
        hosts: p.hosts.clone(),
        is_default: q.default,
        default_time_s: q.default_time_s.unwrap_or(0),
        max_time_s: q.max_time_s.unwrap_or(0),
        qos: q.qos.clone(),
        max_nodes: q.max_nodes,
        min_nodes: q.min_nodes,
        priority_job_factor: q.priority_job_factor,
        preempt_mode: preempt_mode_word(q.preempt_mode, "off"),
        reserve_all_alternatives: q.reserve_all_alternatives,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_round_trips_and_bad_keys_are_named() {
        let mut limits = api::Limits::default();
        limits.grp_tres.insert("gpu".into(), 16);
        let q = api::Qos {
            name: "team".into(),
            priority: 5,
            limits: Some(limits.clone()),
            flags: vec!["DenyOnLimit".into()],
            ..Default::default()
        };
        let parsed = qos_from(&q).expect("valid");
        assert_eq!(parsed.limits.grp_tres.gpu, Some(16));
        assert!(parsed.flags.deny_on_limit);
        assert_eq!(qos_from(&qos_to(&parsed)), Ok(parsed));
        limits.grp_tres.insert("gpus".into(), 1);
        let bad = api::Qos {
            limits: Some(limits),
            ..q.clone()
        };
        assert_eq!(
            qos_from(&bad).unwrap_err(),
            "grp_tres: unknown TRES \"gpus\" (expected node, cpu, mem_mb, gpu or emu)"
        );
        let bad_flag = api::Qos {
            flags: vec!["Fast".into()],
            ..q
        };
        assert!(qos_from(&bad_flag)
            .unwrap_err()
            .contains("unknown flag \"Fast\""));
    }

    #[test]
    fn account_preempt_list_round_trips() {
        let a = api::Account {
            name: "physics".into(),
            default_qos: "high".into(),
            qos: vec!["normal".into(), "high".into()],
            preempt: vec!["chem".into(), "bio".into(), "chem".into()],
            ..Default::default()
        };
        let parsed = account_from(&a).expect("valid");
        assert_eq!(parsed.preempt, ["chem", "bio"]);
        assert_eq!(parsed.qos, ["high", "normal"]);
        let back = account_to(&parsed);
        assert_eq!(back.preempt, ["chem", "bio"]);
        assert_eq!(account_from(&back), Ok(parsed));
        let none = account_from(&api::Account {
            name: "chem".into(),
            ..Default::default()
        })
        .expect("valid");
        assert!(none.preempt.is_empty());
        assert!(account_to(&none).preempt.is_empty());
    }
}
