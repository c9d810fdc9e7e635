//! Scenario files (`berth sim run`), parsed from text into what the engine
//! runs. Every key is checked: a key this simulator knows but does not
//! implement yet is refused by name, an unknown key is refused, and a value
//! of the wrong kind names the key and what was expected.

use std::collections::{BTreeMap, BTreeSet};

use toml::{Table, Value};

use berth_scheduler::assoc::{Account, UserRecord, ROOT_ACCOUNT};
use berth_scheduler::deps::{DepKind, Dependency, DependencySpec};
use berth_scheduler::idlefill::{IdleFill, EXEMPT_WINDOW_MAX_S};
use berth_scheduler::model::{EmulatorInventory, Host, Inventory, Resources};
use berth_scheduler::partition::Partition;
use berth_scheduler::pass::{PendingJob, Policy, Shape, Snapshot};
use berth_scheduler::qos::{Limits, PreemptMode, Qos, QosFlags, TresKind, TresLimits, NORMAL_QOS};
use berth_scheduler::resv::AdminReservation;

use crate::engine::{SimAction, SimEvent, SimJob};
use crate::hostlist;
use crate::SimError;

/// A parsed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub until_s: Option<u64>,
    pub policy: Policy,
    pub hosts: Vec<Host>,
    /// Partitions, QOS, accounts and users.
    pub world: Snapshot,
    pub jobs: Vec<SimJob>,
    pub events: Vec<SimEvent>,
    /// Seconds between the stop signal and the kill (`stop_grace_s`,
    /// default 30): bounds a job's `stop_takes_s`.
    pub stop_grace_s: u64,
}

/// The agent's default stop grace (SIGTERM to SIGKILL), as berthd's.
pub const STOP_GRACE_S_DEFAULT: u64 = 30;

/// Keys that exist in the scenario format (SIM.md) but that this simulator
/// does not implement yet. Each may appear only with the value that means
/// "off", given here; any other value is refused rather than ignored.
const NOT_YET: &[(&str, &str, Option<&str>)] = &[
    // (section, key, accepted "off" value as TOML)
];

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn invalid(&self, key: &str, expected: impl Into<String>) -> SimError {
        SimError::Invalid {
            file: self.file.to_string(),
            key: key.to_string(),
            expected: expected.into(),
        }
    }

    /// Refuses keys of `table` (at `path`, in `section`) outside `known`.
    fn check_keys(
        &self,
        table: &Table,
        section: &str,
        path: &str,
        known: &[&str],
    ) -> Result<(), SimError> {
        for (key, value) in table {
            let full = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            if known.contains(&key.as_str()) {
                continue;
            }
            if let Some((_, _, off)) = NOT_YET.iter().find(|(s, k, _)| *s == section && k == key) {
                let accepted =
                    off.and_then(|o| o.parse::<Value>().ok().or_else(|| parse_scalar(o)));
                if accepted.as_ref() == Some(value) {
                    continue;
                }
                return Err(SimError::Unsupported {
                    file: self.file.to_string(),
                    key: full,
                });
            }
            return Err(SimError::UnknownKey {
                file: self.file.to_string(),
                key: full,
            });
        }
        Ok(())
    }

    fn u64_of(&self, table: &Table, path: &str, key: &str) -> Result<Option<u64>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "a whole number >= 0")),
        }
    }

    fn u32_of(&self, table: &Table, path: &str, key: &str) -> Result<Option<u32>, SimError> {
        match self.u64_of(table, path, key)? {
            None => Ok(None),
            Some(n) => u32::try_from(n)
                .map(Some)
                .map_err(|_| self.invalid(&format!("{path}.{key}"), "a whole number below 2^32")),
        }
    }

    fn i64_of(&self, table: &Table, path: &str, key: &str) -> Result<Option<i64>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(*n)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "a whole number")),
        }
    }

    fn f64_of(&self, table: &Table, path: &str, key: &str) -> Result<Option<f64>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Float(x)) if *x >= 0.0 && x.is_finite() => Ok(Some(*x)),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(*n as f64)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "a number >= 0")),
        }
    }

    fn table_of<'t>(
        &self,
        table: &'t Table,
        path: &str,
        key: &str,
    ) -> Result<Option<&'t Table>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(t)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "an inline table { ... }")),
        }
    }

    /// A TRES table such as `{ node = 4, gpu = 16 }`.
    fn tres_of(&self, table: &Table, path: &str, key: &str) -> Result<TresLimits, SimError> {
        let mut limits = TresLimits::default();
        let Some(t) = self.table_of(table, path, key)? else {
            return Ok(limits);
        };
        let here = format!("{path}.{key}");
        for (k, v) in t {
            let kind = TresKind::ALL
                .into_iter()
                .find(|kind| kind.key() == k)
                .ok_or_else(|| {
                    self.invalid(
                        &format!("{here}.{k}"),
                        "a TRES key: node, cpu, mem_mb, gpu or emu",
                    )
                })?;
            let n = match v {
                Value::Integer(n) if *n >= 0 => *n as u64,
                _ => return Err(self.invalid(&format!("{here}.{k}"), "a whole number >= 0")),
            };
            limits.set(kind, Some(n));
        }
        Ok(limits)
    }

    fn u32_limit(&self, table: &Table, path: &str, key: &str) -> Result<Option<u32>, SimError> {
        self.u32_of(table, path, key)
    }

    /// The limit keys shared by QOS and accounts.
    fn limits_of(&self, table: &Table, path: &str) -> Result<Limits, SimError> {
        Ok(Limits {
            grp_tres: self.tres_of(table, path, "grp_tres")?,
            grp_tres_mins: self.tres_of(table, path, "grp_tres_mins")?,
            grp_jobs: self.u32_limit(table, path, "grp_jobs")?,
            grp_submit_jobs: self.u32_limit(table, path, "grp_submit_jobs")?,
            grp_wall_s: self.u64_of(table, path, "grp_wall_s")?,
            max_tres_per_job: self.tres_of(table, path, "max_tres_per_job")?,
            max_tres_per_node: self.tres_of(table, path, "max_tres_per_node")?,
            max_tres_per_user: self.tres_of(table, path, "max_tres_per_user")?,
            max_jobs_per_user: self.u32_limit(table, path, "max_jobs_per_user")?,
            max_submit_jobs_per_user: self.u32_limit(table, path, "max_submit_jobs_per_user")?,
            max_wall_s: self.u64_of(table, path, "max_wall_s")?,
            min_tres_per_job: self.tres_of(table, path, "min_tres_per_job")?,
        })
    }

    fn bool_of(&self, table: &Table, path: &str, key: &str) -> Result<Option<bool>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "true or false")),
        }
    }

    fn str_of<'t>(
        &self,
        table: &'t Table,
        path: &str,
        key: &str,
    ) -> Result<Option<&'t str>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "a string")),
        }
    }

    fn strings_of(
        &self,
        table: &Table,
        path: &str,
        key: &str,
    ) -> Result<Option<Vec<String>>, SimError> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.invalid(&format!("{path}.{key}"), "an array of strings")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.invalid(&format!("{path}.{key}"), "an array of strings")),
        }
    }

    fn tables_of<'t>(&self, root: &'t Table, key: &str) -> Result<Vec<&'t Table>, SimError> {
        match root.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_table()
                        .ok_or_else(|| self.invalid(key, format!("[[{key}]] tables")))
                })
                .collect(),
            Some(_) => Err(self.invalid(key, format!("[[{key}]] tables"))),
        }
    }
}

/// A bare scalar such as `false` or `0` is not a TOML document; parse it as
/// the value of a key.
fn parse_scalar(text: &str) -> Option<Value> {
    let table: Table = format!("v = {text}").parse().ok()?;
    table.get("v").cloned()
}

/// Limit keys accepted on `[[qos]]` and `[[accounts]]`.
const LIMIT_KEYS: &[&str] = &[
    "grp_tres",
    "grp_tres_mins",
    "grp_jobs",
    "grp_submit_jobs",
    "grp_wall_s",
    "max_tres_per_job",
    "max_tres_per_node",
    "max_tres_per_user",
    "max_jobs_per_user",
    "max_submit_jobs_per_user",
    "max_wall_s",
    "min_tres_per_job",
];

const QOS_KEYS: &[&str] = &[
    "name",
    "priority",
    "flags",
    "usage_factor",
    "usage_threshold",
    "preempt",
    "preempt_mode",
    "preempt_exempt_time_s",
    "grace_time_s",
    "idle_fill_preemptable",
];

fn with_limits(keys: &[&'static str]) -> Vec<&'static str> {
    keys.iter().chain(LIMIT_KEYS).copied().collect()
}

/// Parses a scenario. `file` names it in errors.
pub fn parse_scenario(text: &str, file: &str) -> Result<Scenario, SimError> {
    let ctx = Ctx { file };
    let root: Table = text.parse().map_err(|e: toml::de::Error| SimError::Toml {
        file: file.to_string(),
        message: e.to_string().lines().collect::<Vec<_>>().join(" "),
    })?;
    ctx.check_keys(
        &root,
        "",
        "",
        &[
            "name",
            "until_s",
            "scheduler",
            "hosts",
            "partitions",
            "qos",
            "accounts",
            "users",
            "jobs",
            "events",
            "reservations",
        ],
    )?;
    let name = ctx
        .str_of(&root, "", "name")?
        .unwrap_or_default()
        .to_string();
    let until_s = ctx.u64_of(&root, "", "until_s")?;
    let policy = parse_policy(&ctx, &root)?;
    let stop_grace_s = match root.get("scheduler") {
        Some(Value::Table(sched)) => ctx.u64_of(sched, "scheduler", "stop_grace_s")?,
        _ => None,
    }
    .unwrap_or(STOP_GRACE_S_DEFAULT);
    let partitions = parse_partitions(&ctx, &root)?;
    let qos = parse_qos_list(&ctx, &root)?;
    let qos_names: BTreeSet<&str> = qos.iter().map(|q| q.name.as_str()).collect();
    for (i, p) in partitions.iter().enumerate() {
        if !p.qos.is_empty() && !qos_names.contains(p.qos.as_str()) {
            return Err(ctx.invalid(
                &format!("partitions[{i}].qos"),
                format!("a name of [[qos]], not {:?}", p.qos),
            ));
        }
    }
    let hosts = parse_hosts(&ctx, &root, &partitions)?;
    let accounts = parse_accounts(&ctx, &root, &qos_names)?;
    let users = parse_users(&ctx, &root, &accounts)?;
    let reservations = parse_reservations(&ctx, &root, &hosts, &accounts)?;
    let world = Snapshot {
        partitions,
        qos,
        accounts,
        users,
        reservations,
        ..Snapshot::default()
    };
    let (jobs, job_index) = parse_jobs(&ctx, &root, &world, &hosts)?;
    let events = parse_events(&ctx, &root, &world, &hosts, &jobs, &job_index)?;
    Ok(Scenario {
        name,
        until_s,
        policy,
        hosts,
        world,
        jobs,
        events,
        stop_grace_s,
    })
}

fn parse_policy(ctx: &Ctx, root: &Table) -> Result<Policy, SimError> {
    let mut policy = Policy::default();
    let sched = match root.get("scheduler") {
        None => return Ok(policy),
        Some(Value::Table(sched)) => sched,
        Some(_) => return Err(ctx.invalid("scheduler", "a [scheduler] table")),
    };
    ctx.check_keys(
        sched,
        "scheduler",
        "scheduler",
        &[
            "backfill",
            "bf_reservations",
            "max_jobs_per_pass",
            "bf_resolution_s",
            "bf_window_s",
            "bf_max_job_test",
            "pass_budget_host_checks",
            "priority_weight_age",
            "priority_weight_fairshare",
            "priority_weight_job_size",
            "priority_weight_partition",
            "priority_weight_qos",
            "priority_weight_assoc",
            "priority_max_age_s",
            "priority_decay_half_life_s",
            "preemption_enabled",
            "min_preemption_runtime_s",
            "preemption_gap",
            "preemption_threshold",
            "preemption_multi_victim",
            "max_evictions_per_tick",
            "stop_grace_s",
            "idle_fill_enabled",
            "idle_fill_exempt_secs",
            "idle_fill_max_borrow_factor",
            "idle_fill_max_cluster_fraction",
            "reserve_all_alternatives_top_n",
            "max_reserve_time_s",
        ],
    )?;
    let p = "scheduler";
    let usize_of = |key: &str, min: u64| -> Result<Option<usize>, SimError> {
        match ctx.u64_of(sched, p, key)? {
            None => Ok(None),
            Some(n) if n < min => {
                Err(ctx.invalid(&format!("{p}.{key}"), format!("a number >= {min}")))
            }
            Some(n) => usize::try_from(n)
                .map(Some)
                .map_err(|_| ctx.invalid(&format!("{p}.{key}"), "a smaller number")),
        }
    };
    if let Some(b) = ctx.bool_of(sched, p, "backfill")? {
        policy.backfill = b;
    }
    if let Some(n) = usize_of("bf_reservations", 0)? {
        policy.bf_reservations = n;
    }
    if let Some(n) = usize_of("max_jobs_per_pass", 1)? {
        policy.max_jobs_per_pass = n;
    }
    if let Some(n) = usize_of("bf_max_job_test", 1)? {
        policy.bf_max_job_test = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "bf_resolution_s")? {
        policy.bf_resolution_s = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "bf_window_s")? {
        policy.bf_window_s = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "pass_budget_host_checks")? {
        policy.pass_budget_host_checks = n;
    }
    if let Some(n) = usize_of("reserve_all_alternatives_top_n", 0)? {
        policy.reserve_all_alternatives_top_n = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "max_reserve_time_s")? {
        policy.max_reserve_time_s = n;
    }
    let w = &mut policy.priority;
    for (key, slot) in [
        ("priority_weight_age", &mut w.age),
        ("priority_weight_fairshare", &mut w.fairshare),
        ("priority_weight_job_size", &mut w.job_size),
        ("priority_weight_partition", &mut w.partition),
        ("priority_weight_qos", &mut w.qos),
        ("priority_weight_assoc", &mut w.assoc),
    ] {
        if let Some(n) = ctx.u32_of(sched, p, key)? {
            *slot = n;
        }
    }
    if let Some(n) = ctx.u64_of(sched, p, "priority_max_age_s")? {
        if n == 0 {
            return Err(ctx.invalid("scheduler.priority_max_age_s", "a number of seconds >= 1"));
        }
        w.max_age_s = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "priority_decay_half_life_s")? {
        w.decay_half_life_s = n;
    }
    let pre = &mut policy.preemption;
    if let Some(b) = ctx.bool_of(sched, p, "preemption_enabled")? {
        pre.enabled = b;
    }
    if let Some(n) = ctx.u64_of(sched, p, "min_preemption_runtime_s")? {
        pre.min_runtime_s = n;
    }
    if let Some(n) = ctx.u64_of(sched, p, "preemption_gap")? {
        pre.gap = i64::try_from(n)
            .map_err(|_| ctx.invalid("scheduler.preemption_gap", "a smaller number"))?;
    }
    if let Some(n) = ctx.u64_of(sched, p, "preemption_threshold")? {
        if n > 100 {
            return Err(ctx.invalid(
                "scheduler.preemption_threshold",
                "a percentage of utilization from 0 to 100",
            ));
        }
        pre.threshold_pct = n as u32;
    }
    if let Some(b) = ctx.bool_of(sched, p, "preemption_multi_victim")? {
        pre.multi_victim = b;
    }
    if let Some(n) = usize_of("max_evictions_per_tick", 1)? {
        pre.max_evictions_per_tick = n;
    }
    parse_idle_fill(ctx, sched, &mut policy.idle_fill)?;
    Ok(policy)
}

/// The four `idle_fill_*` keys of `[scheduler]`.
fn parse_idle_fill(ctx: &Ctx, sched: &Table, f: &mut IdleFill) -> Result<(), SimError> {
    let p = "scheduler";
    if let Some(b) = ctx.bool_of(sched, p, "idle_fill_enabled")? {
        f.enabled = b;
    }
    if let Some(n) = ctx.u64_of(sched, p, "idle_fill_exempt_secs")? {
        if n > EXEMPT_WINDOW_MAX_S {
            return Err(ctx.invalid(
                "scheduler.idle_fill_exempt_secs",
                format!("a number of seconds <= {EXEMPT_WINDOW_MAX_S}"),
            ));
        }
        f.exempt_s = n;
    }
    if let Some(x) = ctx.f64_of(sched, p, "idle_fill_max_borrow_factor")? {
        f.max_borrow_factor = x;
    }
    if let Some(x) = ctx.f64_of(sched, p, "idle_fill_max_cluster_fraction")? {
        if x > 1.0 {
            return Err(ctx.invalid(
                "scheduler.idle_fill_max_cluster_fraction",
                "a share of the hosts between 0 and 1",
            ));
        }
        f.max_cluster_fraction = x;
    }
    Ok(())
}

fn parse_partitions(ctx: &Ctx, root: &Table) -> Result<Vec<Partition>, SimError> {
    let mut partitions: Vec<Partition> = Vec::new();
    for (i, p) in ctx.tables_of(root, "partitions")?.into_iter().enumerate() {
        let path = format!("partitions[{i}]");
        ctx.check_keys(
            p,
            "partitions",
            &path,
            &[
                "name",
                "default",
                "max_time_s",
                "default_time_s",
                "max_nodes",
                "min_nodes",
                "priority_job_factor",
                "qos",
                "preempt_mode",
                "reserve_all_alternatives",
            ],
        )?;
        let pname = ctx
            .str_of(p, &path, "name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "a partition name"))?;
        if partitions.iter().any(|q| q.name == pname) {
            return Err(ctx.invalid(
                &format!("{path}.name"),
                format!("partition names used once; {pname} is named twice"),
            ));
        }
        partitions.push(Partition {
            name: pname.to_string(),
            default: ctx.bool_of(p, &path, "default")?.unwrap_or(false),
            max_time_s: ctx.u64_of(p, &path, "max_time_s")?.filter(|&m| m > 0),
            default_time_s: ctx.u64_of(p, &path, "default_time_s")?.filter(|&m| m > 0),
            max_nodes: ctx.u32_of(p, &path, "max_nodes")?,
            min_nodes: ctx.u32_of(p, &path, "min_nodes")?,
            priority_job_factor: ctx.u32_of(p, &path, "priority_job_factor")?.unwrap_or(0),
            qos: ctx.str_of(p, &path, "qos")?.unwrap_or_default().to_string(),
            preempt_mode: match ctx.str_of(p, &path, "preempt_mode")? {
                None | Some("off") => PreemptMode::Off,
                Some("requeue") => PreemptMode::Requeue,
                Some("cancel") => PreemptMode::Cancel,
                Some(other) => {
                    return Err(ctx.invalid(
                        &format!("{path}.preempt_mode"),
                        format!("off, requeue or cancel, not {other:?} (suspend is not supported: a suspended job would keep its allocation)"),
                    ))
                }
            },
            reserve_all_alternatives: ctx
                .bool_of(p, &path, "reserve_all_alternatives")?
                .unwrap_or(false),
        });
    }
    if partitions.iter().filter(|p| p.default).count() > 1 {
        return Err(ctx.invalid("partitions", "at most one partition with default = true"));
    }
    Ok(partitions)
}

/// One `[[qos]]` table (also the `set` of a `modify_qos` event, on top of
/// `base`).
fn qos_from(ctx: &Ctx, q: &Table, path: &str, base: Qos) -> Result<Qos, SimError> {
    let mut qos = base;
    if let Some(n) = ctx.u32_of(q, path, "priority")? {
        qos.priority = n;
    }
    if LIMIT_KEYS.iter().any(|k| q.contains_key(*k)) {
        let parsed = ctx.limits_of(q, path)?;
        // Only the keys given change.
        let l = &mut qos.limits;
        for key in LIMIT_KEYS {
            if !q.contains_key(*key) {
                continue;
            }
            match *key {
                "grp_tres" => l.grp_tres = parsed.grp_tres,
                "grp_tres_mins" => l.grp_tres_mins = parsed.grp_tres_mins,
                "grp_jobs" => l.grp_jobs = parsed.grp_jobs,
                "grp_submit_jobs" => l.grp_submit_jobs = parsed.grp_submit_jobs,
                "grp_wall_s" => l.grp_wall_s = parsed.grp_wall_s,
                "max_tres_per_job" => l.max_tres_per_job = parsed.max_tres_per_job,
                "max_tres_per_node" => l.max_tres_per_node = parsed.max_tres_per_node,
                "max_tres_per_user" => l.max_tres_per_user = parsed.max_tres_per_user,
                "max_jobs_per_user" => l.max_jobs_per_user = parsed.max_jobs_per_user,
                "max_submit_jobs_per_user" => {
                    l.max_submit_jobs_per_user = parsed.max_submit_jobs_per_user
                }
                "max_wall_s" => l.max_wall_s = parsed.max_wall_s,
                _ => l.min_tres_per_job = parsed.min_tres_per_job,
            }
        }
    }
    if let Some(flags) = ctx.strings_of(q, path, "flags")? {
        let mut set = QosFlags::default();
        for f in &flags {
            if !set.set_by_name(f) {
                return Err(ctx.invalid(
                    &format!("{path}.flags"),
                    format!(
                        "Slurm QOS flags ({}), not {f:?}",
                        QosFlags::NAMES.join(", ")
                    ),
                ));
            }
        }
        qos.flags = set;
    }
    if let Some(x) = ctx.f64_of(q, path, "usage_factor")? {
        qos.usage_factor = x;
    }
    if let Some(x) = ctx.f64_of(q, path, "usage_threshold")? {
        if x > 1.0 {
            return Err(ctx.invalid(
                &format!("{path}.usage_threshold"),
                "a fair-share factor between 0 and 1",
            ));
        }
        qos.usage_threshold = Some(x);
    }
    if let Some(names) = ctx.strings_of(q, path, "preempt")? {
        qos.preempt = names;
    }
    if let Some(mode) = ctx.str_of(q, path, "preempt_mode")? {
        qos.preempt_mode = match mode {
            "requeue" => PreemptMode::Requeue,
            "cancel" => PreemptMode::Cancel,
            other => {
                return Err(ctx.invalid(
                    &format!("{path}.preempt_mode"),
                    format!("requeue or cancel, not {other:?} (suspend is not supported: this scheduler does not stop and continue jobs, and a suspended job would keep its allocation)"),
                ))
            }
        };
    }
    if let Some(n) = ctx.u64_of(q, path, "preempt_exempt_time_s")? {
        qos.preempt_exempt_time_s = Some(n);
    }
    if let Some(n) = ctx.u64_of(q, path, "grace_time_s")? {
        qos.grace_time_s = Some(n);
    }
    if let Some(b) = ctx.bool_of(q, path, "idle_fill_preemptable")? {
        qos.idle_fill_preemptable = b;
    }
    Ok(qos)
}

fn parse_qos_list(ctx: &Ctx, root: &Table) -> Result<Vec<Qos>, SimError> {
    let mut list: Vec<Qos> = Vec::new();
    let keys = with_limits(QOS_KEYS);
    for (i, q) in ctx.tables_of(root, "qos")?.into_iter().enumerate() {
        let path = format!("qos[{i}]");
        ctx.check_keys(q, "qos", &path, &keys)?;
        let qname = ctx
            .str_of(q, &path, "name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "a QOS name"))?;
        if list.iter().any(|x| x.name == qname) {
            return Err(ctx.invalid(
                &format!("{path}.name"),
                format!("QOS names used once; {qname} is named twice"),
            ));
        }
        list.push(qos_from(ctx, q, &path, Qos::named(qname))?);
    }
    if !list.iter().any(|q| q.name == NORMAL_QOS) {
        // As in Slurm, `normal` always exists.
        list.push(Qos::default());
    }
    for (i, q) in list.iter().enumerate() {
        if let Some(bad) = q
            .preempt
            .iter()
            .find(|n| !list.iter().any(|x| x.name == **n))
        {
            return Err(ctx.invalid(
                &format!("qos[{i}].preempt"),
                format!("names of [[qos]], not {bad:?}"),
            ));
        }
    }
    Ok(list)
}

fn parse_hosts(ctx: &Ctx, root: &Table, partitions: &[Partition]) -> Result<Vec<Host>, SimError> {
    let mut hosts = Vec::new();
    let mut seen_hosts = BTreeSet::new();
    for (i, h) in ctx.tables_of(root, "hosts")?.into_iter().enumerate() {
        let path = format!("hosts[{i}]");
        ctx.check_keys(
            h,
            "hosts",
            &path,
            &[
                "names",
                "cpus",
                "mem_mb",
                "gpus",
                "gpu_type",
                "emulators",
                "features",
                "partitions",
            ],
        )?;
        let names = ctx.str_of(h, &path, "names")?.ok_or_else(|| {
            ctx.invalid(&format!("{path}.names"), "a hostlist such as \"n[1-4]\"")
        })?;
        let names =
            hostlist::expand(names).map_err(|e| ctx.invalid(&format!("{path}.names"), e))?;
        let cpus = ctx
            .u32_of(h, &path, "cpus")?
            .filter(|&c| c > 0)
            .ok_or_else(|| ctx.invalid(&format!("{path}.cpus"), "a number of CPUs >= 1"))?;
        let emulator = match h.get("emulators") {
            None => None,
            Some(Value::Array(items)) if items.len() <= 1 => match items.first() {
                None => None,
                Some(Value::Table(e)) => Some(emulator_of(ctx, e, &format!("{path}.emulators[0]"))?),
                Some(_) => return Err(ctx.invalid(&format!("{path}.emulators"), "[{ kind = ..., group = ..., units = N }]")),
            },
            Some(_) => {
                return Err(ctx.invalid(
                    &format!("{path}.emulators"),
                    "an array of at most one { kind, group, units } table (a host carries one emulator attachment)",
                ))
            }
        };
        let inventory = Inventory {
            cpus,
            mem_mb: ctx.u64_of(h, &path, "mem_mb")?.unwrap_or(0),
            gpus: ctx.u32_of(h, &path, "gpus")?.unwrap_or(0),
            gpu_type: ctx
                .str_of(h, &path, "gpu_type")?
                .unwrap_or_default()
                .to_string(),
            emulator,
            // The host's `features` key fills `Host::features`.
            features: Vec::new(),
        };
        let host_partitions = ctx.strings_of(h, &path, "partitions")?.unwrap_or_default();
        for p in &host_partitions {
            if !partitions.iter().any(|q| q.name == *p) {
                return Err(ctx.invalid(
                    &format!("{path}.partitions"),
                    format!("names of [[partitions]], not {p:?}"),
                ));
            }
        }
        let features = ctx.strings_of(h, &path, "features")?.unwrap_or_default();
        for name in names {
            if !seen_hosts.insert(name.clone()) {
                return Err(ctx.invalid(
                    &format!("{path}.names"),
                    format!("host names used once; {name} is named twice"),
                ));
            }
            let mut host = Host::new(name, inventory.clone());
            host.partitions = host_partitions.clone();
            host.features = features.clone();
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return Err(ctx.invalid("hosts", "at least one [[hosts]] group"));
    }
    Ok(hosts)
}

fn emulator_of(ctx: &Ctx, e: &Table, path: &str) -> Result<EmulatorInventory, SimError> {
    ctx.check_keys(e, "emulators", path, &["kind", "group", "units"])?;
    Ok(EmulatorInventory {
        kind: ctx
            .str_of(e, path, "kind")?
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                ctx.invalid(&format!("{path}.kind"), "an emulator kind such as \"zebu\"")
            })?
            .to_string(),
        group: ctx
            .str_of(e, path, "group")?
            .unwrap_or_default()
            .to_string(),
        units: ctx
            .u32_of(e, path, "units")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.units"), "a number of units"))?,
    })
}

fn parse_accounts(
    ctx: &Ctx,
    root: &Table,
    qos_names: &BTreeSet<&str>,
) -> Result<Vec<Account>, SimError> {
    let mut accounts: Vec<Account> = Vec::new();
    let keys = with_limits(&[
        "name",
        "parent",
        "shares",
        "users",
        "qos",
        "priority",
        "max_priority",
        "preempt",
    ]);
    let tables = ctx.tables_of(root, "accounts")?;
    for (i, a) in tables.iter().enumerate() {
        let path = format!("accounts[{i}]");
        ctx.check_keys(a, "accounts", &path, &keys)?;
        let aname = ctx
            .str_of(a, &path, "name")?
            .filter(|n| !n.is_empty() && *n != ROOT_ACCOUNT)
            .ok_or_else(|| {
                ctx.invalid(
                    &format!("{path}.name"),
                    "an account name other than \"root\"",
                )
            })?;
        if accounts.iter().any(|x| x.name == aname) {
            return Err(ctx.invalid(
                &format!("{path}.name"),
                format!("account names used once; {aname} is named twice"),
            ));
        }
        let qos = ctx.strings_of(a, &path, "qos")?.unwrap_or_default();
        for q in &qos {
            if !qos_names.contains(q.as_str()) {
                return Err(ctx.invalid(
                    &format!("{path}.qos"),
                    format!("names of [[qos]], not {q:?}"),
                ));
            }
        }
        let limits = ctx.limits_of(a, &path)?;
        if !limits.min_tres_per_job.is_empty() {
            return Err(ctx.invalid(
                &format!("{path}.min_tres_per_job"),
                "no min_tres_per_job on an account (Slurm has it on QOS only)",
            ));
        }
        accounts.push(Account {
            name: aname.to_string(),
            parent: ctx
                .str_of(a, &path, "parent")?
                .unwrap_or(ROOT_ACCOUNT)
                .to_string(),
            shares: ctx.u32_of(a, &path, "shares")?.unwrap_or(1),
            users: ctx.strings_of(a, &path, "users")?.unwrap_or_default(),
            qos,
            priority: ctx.i64_of(a, &path, "priority")?.unwrap_or(0),
            max_priority: ctx.i64_of(a, &path, "max_priority")?.unwrap_or(0),
            limits,
            preempt: ctx.strings_of(a, &path, "preempt")?.unwrap_or_default(),
        });
    }
    for (i, a) in accounts.iter().enumerate() {
        if let Some(bad) = a
            .preempt
            .iter()
            .find(|n| !accounts.iter().any(|x| x.name == **n))
        {
            return Err(ctx.invalid(
                &format!("accounts[{i}].preempt"),
                format!("names of [[accounts]], not {bad:?}"),
            ));
        }
        if a.parent != ROOT_ACCOUNT && !accounts.iter().any(|p| p.name == a.parent) {
            return Err(ctx.invalid(
                &format!("accounts[{i}].parent"),
                format!("\"root\" or a name of [[accounts]], not {:?}", a.parent),
            ));
        }
        // Walk up: a cycle never reaches the root.
        let mut name = a.parent.as_str();
        for _ in 0..=accounts.len() {
            if name == ROOT_ACCOUNT {
                break;
            }
            if name == a.name {
                return Err(ctx.invalid(
                    &format!("accounts[{i}].parent"),
                    "a tree: this parent leads back to the account",
                ));
            }
            name = accounts
                .iter()
                .find(|p| p.name == name)
                .map_or(ROOT_ACCOUNT, |p| p.parent.as_str());
        }
    }
    Ok(accounts)
}

fn parse_users(ctx: &Ctx, root: &Table, accounts: &[Account]) -> Result<Vec<UserRecord>, SimError> {
    let mut users = Vec::new();
    for (i, u) in ctx.tables_of(root, "users")?.into_iter().enumerate() {
        let path = format!("users[{i}]");
        ctx.check_keys(u, "users", &path, &["name", "priority", "default_account"])?;
        let uname = ctx
            .str_of(u, &path, "name")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "a user name"))?;
        let default_account = ctx.str_of(u, &path, "default_account")?.unwrap_or_default();
        if !default_account.is_empty()
            && !accounts
                .iter()
                .any(|a| a.name == default_account && a.users.iter().any(|x| x == uname))
        {
            return Err(ctx.invalid(
                &format!("{path}.default_account"),
                format!("an account that lists user {uname:?}, not {default_account:?}"),
            ));
        }
        users.push(UserRecord {
            name: uname.to_string(),
            priority: ctx.i64_of(u, &path, "priority")?.unwrap_or(0),
            default_account: default_account.to_string(),
        });
    }
    Ok(users)
}

/// An alternative's keys: a job's resource keys ([`SHAPE_KEYS`]), then
/// the partition it runs in.
const ALTERNATIVE_KEYS: &[&str] = &[
    "nodes",
    "cpus",
    "mem_mb",
    "gpus",
    "gpu_type",
    "emulators",
    "exclusive",
    "features",
    "partition",
];

/// The resource keys of a job or of one of its alternatives.
const SHAPE_KEYS: &[&str] = ALTERNATIVE_KEYS.split_at(ALTERNATIVE_KEYS.len() - 1).0;

fn shape_of(ctx: &Ctx, t: &Table, path: &str, base: Option<&Shape>) -> Result<Shape, SimError> {
    let mut shape = base
        .cloned()
        .unwrap_or_else(|| Shape::one(Resources::cpu_mem(1, 0)));
    if let Some(n) = ctx.u32_of(t, path, "nodes")? {
        if n == 0 {
            return Err(ctx.invalid(&format!("{path}.nodes"), "a number of hosts >= 1"));
        }
        shape.nodes = n;
    }
    if let Some(c) = ctx.u32_of(t, path, "cpus")? {
        shape.per_host.cpus = c.max(1);
    }
    if let Some(m) = ctx.u64_of(t, path, "mem_mb")? {
        shape.per_host.mem_mb = m;
    }
    if let Some(g) = ctx.u32_of(t, path, "gpus")? {
        shape.per_host.gpus = g;
    }
    if let Some(g) = ctx.str_of(t, path, "gpu_type")? {
        shape.gpu_type = g.to_string();
    }
    if let Some(e) = ctx.table_of(t, path, "emulators")? {
        let epath = format!("{path}.emulators");
        ctx.check_keys(e, "emulators", &epath, &["kind", "group", "units"])?;
        shape.emu_kind = ctx
            .str_of(e, &epath, "kind")?
            .ok_or_else(|| ctx.invalid(&format!("{epath}.kind"), "an emulator kind"))?
            .to_string();
        shape.emu_group = ctx
            .str_of(e, &epath, "group")?
            .unwrap_or_default()
            .to_string();
        shape.per_host.emu = ctx
            .u32_of(e, &epath, "units")?
            .filter(|&u| u > 0)
            .ok_or_else(|| ctx.invalid(&format!("{epath}.units"), "a number of units >= 1"))?;
    }
    if let Some(x) = ctx.bool_of(t, path, "exclusive")? {
        shape.exclusive = x;
    }
    if let Some(f) = ctx.strings_of(t, path, "features")? {
        shape.features = f;
    }
    Ok(shape)
}

/// Whether some `nodes` hosts of the scenario (all up) in `partition`
/// could hold `shape`.
fn possible(shape: &Shape, hosts: &[Host], partition: Option<&str>) -> bool {
    hosts
        .iter()
        .filter(|h| berth_scheduler::fit::eligible(h, shape, partition).is_ok())
        .filter(|h| shape.per_host.within(h.inventory.resources()))
        .count()
        >= shape.hosts_needed()
}

/// `"0-9%2"`, `"1,3,5"`, `"0-15:4"`: the task ids and the `%max`.
fn parse_array(text: &str) -> Result<(Vec<u32>, u32), String> {
    /// Bound on tasks per array in a scenario.
    const ARRAY_TASKS_MAX: usize = 10_000;
    let (spec, max) = match text.split_once('%') {
        Some((s, m)) => (
            s,
            m.trim()
                .parse::<u32>()
                .map_err(|_| format!("a number after %, not {m:?}"))?,
        ),
        None => (text, 0),
    };
    let mut ids = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| format!("a step >= 1 after ':', not {s:?}"))?,
            ),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a, b),
            None => (range, range),
        };
        let lo: u32 = lo
            .parse()
            .map_err(|_| format!("task ids such as 0-9%2, not {text:?}"))?;
        let hi: u32 = hi
            .parse()
            .map_err(|_| format!("task ids such as 0-9%2, not {text:?}"))?;
        if hi < lo {
            return Err(format!("a range low-high with low <= high, not {range:?}"));
        }
        let mut k = lo;
        while k <= hi {
            ids.push(k);
            if ids.len() > ARRAY_TASKS_MAX {
                return Err(format!("at most {ARRAY_TASKS_MAX} tasks"));
            }
            k = match k.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok((ids, max))
}

type JobIndex = BTreeMap<String, Vec<usize>>;

/// `[[reservations]]`: admin windows. Names are unique, hosts exist, users
/// and accounts are the scenario's, and two windows never overlap on a
/// host (a host is in at most one reservation at a time).
fn parse_reservations(
    ctx: &Ctx,
    root: &Table,
    hosts: &[Host],
    accounts: &[Account],
) -> Result<Vec<AdminReservation>, SimError> {
    let mut out: Vec<AdminReservation> = Vec::new();
    for (i, r) in ctx.tables_of(root, "reservations")?.into_iter().enumerate() {
        let path = format!("reservations[{i}]");
        ctx.check_keys(
            r,
            "reservations",
            &path,
            &[
                "name",
                "hosts",
                "start_s",
                "duration_s",
                "users",
                "accounts",
            ],
        )?;
        let name = ctx
            .str_of(r, &path, "name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "a reservation name"))?;
        if out.iter().any(|o| o.name == name) {
            return Err(ctx.invalid(
                &format!("{path}.name"),
                format!("reservation names used once; {name} is named twice"),
            ));
        }
        let list = ctx
            .str_of(r, &path, "hosts")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.hosts"), "a hostlist, e.g. node[01-04]"))?;
        let names = hostlist::expand(list)
            .map_err(|e| ctx.invalid(&format!("{path}.hosts"), format!("a hostlist ({e})")))?;
        for n in &names {
            if !hosts.iter().any(|h| &h.name == n) {
                return Err(ctx.invalid(
                    &format!("{path}.hosts"),
                    format!("hosts of [[hosts]], not {n:?}"),
                ));
            }
        }
        let start_s = ctx
            .u64_of(r, &path, "start_s")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.start_s"), "a start time in seconds"))?;
        let duration_s = ctx
            .u64_of(r, &path, "duration_s")?
            .filter(|&d| d > 0)
            .ok_or_else(|| {
                ctx.invalid(&format!("{path}.duration_s"), "a duration in seconds >= 1")
            })?;
        let users = ctx.strings_of(r, &path, "users")?.unwrap_or_default();
        for u in &users {
            if !accounts.iter().any(|a| a.users.contains(u)) {
                return Err(ctx.invalid(
                    &format!("{path}.users"),
                    format!("users named in [[accounts]], not {u:?}"),
                ));
            }
        }
        let account_names = ctx.strings_of(r, &path, "accounts")?.unwrap_or_default();
        for a in &account_names {
            if !accounts.iter().any(|x| &x.name == a) {
                return Err(ctx.invalid(
                    &format!("{path}.accounts"),
                    format!("names of [[accounts]], not {a:?}"),
                ));
            }
        }
        let window = AdminReservation {
            name: name.to_string(),
            hosts: names,
            start_ms: start_s.saturating_mul(1000),
            end_ms: start_s.saturating_add(duration_s).saturating_mul(1000),
            users,
            accounts: account_names,
        };
        if let Some((other, host)) = out.iter().find_map(|o| {
            let shared = o.hosts.iter().find(|h| window.hosts.contains(h))?;
            (o.start_ms < window.end_ms && window.start_ms < o.end_ms).then_some((o, shared))
        }) {
            return Err(ctx.invalid(
                &path,
                format!(
                    "a window that does not overlap another on the same host; {} overlaps {} on {host}",
                    window.name, other.name
                ),
            ));
        }
        out.push(window);
    }
    Ok(out)
}

fn parse_jobs(
    ctx: &Ctx,
    root: &Table,
    world: &Snapshot,
    hosts: &[Host],
) -> Result<(Vec<SimJob>, JobIndex), SimError> {
    let catalog = berth_scheduler::catalog::Catalog::new(world);
    let mut jobs: Vec<SimJob> = Vec::new();
    // Scenario id -> the job indices it names (several for an array).
    let mut job_index: JobIndex = BTreeMap::new();
    // Dependencies are resolved after every id is known.
    let mut pending_deps: Vec<(Vec<usize>, String, String)> = Vec::new();
    let job_keys: Vec<&str> = [
        "id",
        "name",
        "at_s",
        "user",
        "account",
        "qos",
        "partition",
        "time_limit_s",
        "runtime_s",
        "exit_code",
        "hold",
        "priority_nice",
        "dependency",
        "array",
        "begin_s",
        "alternatives",
        "preemptible",
        "stop_takes_s",
        "reservation",
    ]
    .iter()
    .chain(SHAPE_KEYS)
    .copied()
    .collect();
    for (i, j) in ctx.tables_of(root, "jobs")?.into_iter().enumerate() {
        let path = format!("jobs[{i}]");
        let id = ctx
            .str_of(j, &path, "id")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.id"), "the job's name, a string"))?
            .to_string();
        let path = format!("jobs[{i}] (id {id:?})");
        ctx.check_keys(j, "jobs", &path, &job_keys)?;
        if job_index.contains_key(&id) {
            return Err(ctx.invalid(&format!("{path}.id"), "job ids used once"));
        }
        let at_s = ctx
            .u64_of(j, &path, "at_s")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.at_s"), "a submit time in seconds"))?;
        let user = ctx
            .str_of(j, &path, "user")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.user"), "a user named in [[accounts]]"))?;
        let asked_account = ctx.str_of(j, &path, "account")?.unwrap_or_default();
        let Some(account) = catalog.account_of(user, asked_account) else {
            return Err(if asked_account.is_empty() {
                ctx.invalid(
                    &format!("{path}.user"),
                    format!("a user named in [[accounts]], not {user:?}"),
                )
            } else {
                ctx.invalid(
                    &format!("{path}.account"),
                    format!("a name of [[accounts]], not {asked_account:?}"),
                )
            });
        };
        if !account.users.iter().any(|u| u == user) {
            return Err(ctx.invalid(
                &format!("{path}.account"),
                format!(
                    "an account that lists user {user:?}, not {:?}",
                    account.name
                ),
            ));
        }
        let qos = ctx.str_of(j, &path, "qos")?.unwrap_or_default();
        if !qos.is_empty() && catalog.qos(qos).is_none() {
            return Err(ctx.invalid(
                &format!("{path}.qos"),
                format!("a name of [[qos]], not {qos:?}"),
            ));
        }
        let partitions: Vec<String> = match j.get("partition") {
            None => Vec::new(),
            Some(Value::String(p)) => p.split(',').map(|s| s.trim().to_string()).collect(),
            Some(_) => ctx.strings_of(j, &path, "partition")?.unwrap_or_default(),
        };
        for p in &partitions {
            if catalog.partition(p).is_none() {
                return Err(ctx.invalid(
                    &format!("{path}.partition"),
                    format!("a name of [[partitions]], not {p:?}"),
                ));
            }
        }
        let shape = shape_of(ctx, j, &path, None)?;
        let mut alternatives = Vec::new();
        let mut path_partitions = Vec::new();
        if let Some(alts) = j.get("alternatives") {
            let Value::Array(items) = alts else {
                return Err(ctx.invalid(
                    &format!("{path}.alternatives"),
                    "an array of resource tables",
                ));
            };
            for (k, alt) in items.iter().enumerate() {
                let apath = format!("{path}.alternatives[{k}]");
                let Value::Table(t) = alt else {
                    return Err(ctx.invalid(&apath, "a table of resource keys"));
                };
                ctx.check_keys(t, "alternatives", &apath, ALTERNATIVE_KEYS)?;
                alternatives.push(shape_of(ctx, t, &apath, Some(&shape))?);
                // An alternative may run in a partition of its own.
                let own = ctx.str_of(t, &apath, "partition")?.unwrap_or_default();
                if !own.is_empty() && catalog.partition(own).is_none() {
                    return Err(ctx.invalid(
                        &format!("{apath}.partition"),
                        format!("a name of [[partitions]], not {own:?}"),
                    ));
                }
                path_partitions.push(own.to_string());
            }
        }
        if path_partitions.iter().all(String::is_empty) {
            path_partitions.clear();
        }
        let mut spec = PendingJob {
            shape,
            alternatives,
            path_partitions,
            user: user.to_string(),
            account: asked_account.to_string(),
            qos: qos.to_string(),
            partitions,
            // Checked at submit, as `sbatch --reservation` is: a name that
            // does not exist or does not admit the job is refused then.
            reservation: ctx
                .str_of(j, &path, "reservation")?
                .unwrap_or_default()
                .to_string(),
            ..PendingJob::default()
        };
        // Where it could run at all, with every host up.
        let candidate_partitions: Vec<Option<&Partition>> = if world.partitions.is_empty() {
            vec![None]
        } else {
            catalog.partitions_of(&spec).into_iter().map(Some).collect()
        };
        let can_run = spec.paths().iter().enumerate().any(|(k, s)| {
            candidate_partitions.iter().any(|&p| {
                catalog.runs_in(&spec, k, p) && possible(s, hosts, p.map(|p| p.name.as_str()))
            })
        });
        if !can_run {
            return Err(ctx.invalid(
                &path,
                "resources some hosts of the scenario could hold (no host group has enough of what it asks, of its kind, in its partition)",
            ));
        }
        let asked_limit_s = ctx.u64_of(j, &path, "time_limit_s")?.filter(|&t| t > 0);
        // Slurm's default time limit: the partition's DefaultTime, else MaxTime.
        let default_limit_s = catalog
            .partitions_of(&spec)
            .first()
            .and_then(|p| p.default_limit_s());
        spec.time_limit_s = asked_limit_s.or(default_limit_s).unwrap_or(0);
        spec.nice = match ctx.i64_of(j, &path, "priority_nice")? {
            None => 0,
            Some(n) => i32::try_from(n)
                .ok()
                .filter(|n| n.abs() <= 2_147_483_645)
                .ok_or_else(|| {
                    ctx.invalid(
                        &format!("{path}.priority_nice"),
                        "a nice value that fits in 32 bits",
                    )
                })?,
        };
        if let Some(b) = ctx.u64_of(j, &path, "begin_s")? {
            spec.begin_ms = b.saturating_mul(1000);
        }
        spec.preemptible = ctx.bool_of(j, &path, "preemptible")?.unwrap_or(false);
        let stop_takes_s = ctx.u64_of(j, &path, "stop_takes_s")?.unwrap_or(0);
        let runtime_s = ctx.u64_of(j, &path, "runtime_s")?;
        let exit_code = match j.get("exit_code") {
            None => 0,
            Some(Value::Integer(n)) => i32::try_from(*n)
                .map_err(|_| ctx.invalid(&format!("{path}.exit_code"), "an exit code"))?,
            Some(_) => {
                return Err(ctx.invalid(&format!("{path}.exit_code"), "an integer exit code"))
            }
        };
        let hold = ctx.bool_of(j, &path, "hold")?.unwrap_or(false);
        let (task_ids, array_max) = match ctx.str_of(j, &path, "array")? {
            None => (None, 0),
            Some(a) => {
                let (ids, max) =
                    parse_array(a).map_err(|e| ctx.invalid(&format!("{path}.array"), e))?;
                (Some(ids), max)
            }
        };
        let first = jobs.len();
        let mut indices = Vec::new();
        let names: Vec<String> = match &task_ids {
            None => vec![id.clone()],
            Some(ids) => ids.iter().map(|k| format!("{id}_{k}")).collect(),
        };
        // Slurm's job name: `name`, else the id; every task of an array
        // has the array's.
        let job_name = ctx
            .str_of(j, &path, "name")?
            .unwrap_or(id.as_str())
            .to_string();
        for name in names {
            indices.push(jobs.len());
            jobs.push(SimJob {
                name,
                job_name: job_name.clone(),
                submit_s: at_s,
                spec: spec.clone(),
                runtime_s,
                exit_code,
                hold,
                rejected: None,
                dependency: None,
                array_of: task_ids.as_ref().map(|_| (first, array_max)),
                stop_takes_s,
            });
        }
        if let Some(d) = ctx.str_of(j, &path, "dependency")? {
            pending_deps.push((indices.clone(), d.to_string(), path.clone()));
        }
        job_index.insert(id, indices);
    }
    for (indices, text, path) in pending_deps {
        let spec = scenario_dependency(&text, &job_index)
            .map_err(|e| ctx.invalid(&format!("{path}.dependency"), e))?;
        for i in indices {
            jobs[i].dependency = Some(spec.clone());
        }
    }
    Ok((jobs, job_index))
}

/// A dependency written with scenario ids (`afterok:a0:a1,afterany:b`,
/// `singleton`); the ids become job indices (an array id stands for all
/// its tasks).
fn scenario_dependency(text: &str, index: &JobIndex) -> Result<DependencySpec, String> {
    let any = text.contains('?');
    if any && text.contains(',') {
        return Err("either ',' (all) or '?' (any) between dependencies, not both".into());
    }
    let mut deps = Vec::new();
    for part in text.split([',', '?']) {
        let mut fields = part.trim().split(':');
        let kind = match fields.next().unwrap_or_default() {
            "afterok" => DepKind::AfterOk,
            "afterany" => DepKind::AfterAny,
            "afternotok" => DepKind::AfterNotOk,
            "singleton" => DepKind::Singleton,
            other => {
                return Err(format!(
                    "afterok, afterany, afternotok or singleton, not {other:?}"
                ))
            }
        };
        let mut jobs = Vec::new();
        for name in fields {
            let targets = index
                .get(name)
                .ok_or_else(|| format!("ids of [[jobs]] after the kind, not {name:?}"))?;
            jobs.extend(targets.iter().map(|&i| i as u64));
        }
        if kind == DepKind::Singleton && !jobs.is_empty() {
            return Err("singleton takes no job ids".into());
        }
        if kind != DepKind::Singleton && jobs.is_empty() {
            return Err(format!("at least one job id after {part:?}"));
        }
        deps.push(Dependency { kind, jobs });
    }
    Ok(DependencySpec { all: !any, deps })
}

fn parse_events(
    ctx: &Ctx,
    root: &Table,
    world: &Snapshot,
    hosts: &[Host],
    jobs: &[SimJob],
    job_index: &JobIndex,
) -> Result<Vec<SimEvent>, SimError> {
    let mut events = Vec::new();
    // QOS as modified so far, so successive modify_qos events build up.
    let mut qos_now: BTreeMap<String, Qos> = world
        .qos
        .iter()
        .map(|q| (q.name.clone(), q.clone()))
        .collect();
    let mut tables: Vec<(usize, &Table)> = ctx
        .tables_of(root, "events")?
        .into_iter()
        .enumerate()
        .collect();
    tables.sort_by_key(|(i, t)| (t.get("at_s").and_then(Value::as_integer).unwrap_or(0), *i));
    for (i, e) in tables {
        let path = format!("events[{i}]");
        ctx.check_keys(
            e,
            "events",
            &path,
            &[
                "at_s", "action", "job", "host", "qos", "account", "user", "set",
            ],
        )?;
        let at_s = ctx
            .u64_of(e, &path, "at_s")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.at_s"), "a time in seconds"))?;
        let action = ctx.str_of(e, &path, "action")?.unwrap_or_default();
        let job_of = || -> Result<Vec<usize>, SimError> {
            let name = ctx
                .str_of(e, &path, "job")?
                .ok_or_else(|| ctx.invalid(&format!("{path}.job"), "the id of a [[jobs]] entry"))?;
            let found = job_index.get(name).cloned().ok_or_else(|| {
                ctx.invalid(
                    &format!("{path}.job"),
                    format!("the id of a [[jobs]] entry, not {name:?}"),
                )
            })?;
            if found.iter().any(|&j| at_s < jobs[j].submit_s) {
                return Err(ctx.invalid(
                    &format!("{path}.at_s"),
                    format!("a time at or after job {name:?} is submitted"),
                ));
            }
            Ok(found)
        };
        let hosts_of = || -> Result<Vec<String>, SimError> {
            let expr = ctx
                .str_of(e, &path, "host")?
                .ok_or_else(|| ctx.invalid(&format!("{path}.host"), "a host name or hostlist"))?;
            let names =
                hostlist::expand(expr).map_err(|m| ctx.invalid(&format!("{path}.host"), m))?;
            for n in &names {
                if !hosts.iter().any(|h| h.name == *n) {
                    return Err(ctx.invalid(
                        &format!("{path}.host"),
                        format!("hosts of [[hosts]], not {n:?}"),
                    ));
                }
            }
            Ok(names)
        };
        let set = || -> Result<&Table, SimError> {
            ctx.table_of(e, &path, "set")?.ok_or_else(|| {
                ctx.invalid(
                    &format!("{path}.set"),
                    "a table of what to change, e.g. set = { priority = 10 }",
                )
            })
        };
        let act =
            match action {
                "cancel" => SimAction::Cancel(job_of()?),
                "release" => SimAction::Release(job_of()?),
                "hold" => SimAction::Hold(job_of()?),
                "host_down" => SimAction::HostDown(hosts_of()?),
                "host_up" => SimAction::HostUp(hosts_of()?),
                "modify_qos" => {
                    let qname = ctx
                        .str_of(e, &path, "qos")?
                        .ok_or_else(|| ctx.invalid(&format!("{path}.qos"), "a name of [[qos]]"))?;
                    let base = qos_now.get(qname).cloned().ok_or_else(|| {
                        ctx.invalid(
                            &format!("{path}.qos"),
                            format!("a name of [[qos]], not {qname:?}"),
                        )
                    })?;
                    let set = set()?;
                    let keys: Vec<&str> = with_limits(QOS_KEYS)
                        .into_iter()
                        .filter(|k| *k != "name")
                        .collect();
                    ctx.check_keys(set, "qos", &format!("{path}.set"), &keys)?;
                    let modified = qos_from(ctx, set, &format!("{path}.set"), base)?;
                    if let Some(bad) = modified.preempt.iter().find(|n| !qos_now.contains_key(*n)) {
                        return Err(ctx.invalid(
                            &format!("{path}.set.preempt"),
                            format!("names of [[qos]], not {bad:?}"),
                        ));
                    }
                    qos_now.insert(qname.to_string(), modified.clone());
                    SimAction::ModifyQos(Box::new(modified))
                }
                "set_priority" => {
                    let set = set()?;
                    ctx.check_keys(set, "set_priority", &format!("{path}.set"), &["priority"])?;
                    let priority = ctx
                        .i64_of(set, &format!("{path}.set"), "priority")?
                        .ok_or_else(|| {
                            ctx.invalid(
                                &format!("{path}.set.priority"),
                                "the new priority, a whole number",
                            )
                        })?;
                    match (
                        ctx.str_of(e, &path, "account")?,
                        ctx.str_of(e, &path, "user")?,
                    ) {
                        (Some(a), None) => {
                            if !world.accounts.iter().any(|x| x.name == a) {
                                return Err(ctx.invalid(
                                    &format!("{path}.account"),
                                    format!("a name of [[accounts]], not {a:?}"),
                                ));
                            }
                            SimAction::SetAccountPriority(a.to_string(), priority)
                        }
                        (None, Some(u)) => {
                            if !world
                                .accounts
                                .iter()
                                .any(|x| x.users.iter().any(|y| y == u))
                            {
                                return Err(ctx.invalid(
                                    &format!("{path}.user"),
                                    format!("a user named in [[accounts]], not {u:?}"),
                                ));
                            }
                            SimAction::SetUserPriority(u.to_string(), priority)
                        }
                        _ => return Err(ctx.invalid(&path, "exactly one of account or user")),
                    }
                }
                _ => return Err(ctx.invalid(
                    &format!("{path}.action"),
                    "one of cancel, release, hold, host_down, host_up, modify_qos, set_priority",
                )),
            };
        events.push(SimEvent { at_s, action: act });
    }
    Ok(events)
}
