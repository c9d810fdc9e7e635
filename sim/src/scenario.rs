//! Scenario files (`berth sim run`), parsed from text into what the engine
//! runs. The file is read with serde into the structs of `file`: an
//! unknown key, a missing key or a value of the wrong kind is refused
//! with its line (`located`). What serde cannot check (names that must
//! exist, ranges, hostlists, arrays, dependencies) is checked here, each
//! error naming the file, the key and what was expected.

mod file;
mod located;

use std::collections::{BTreeMap, BTreeSet};

use berth_scheduler::assoc::{Account, UserRecord, ROOT_ACCOUNT};
use berth_scheduler::catalog::Catalog;
use berth_scheduler::deps::{DepKind, Dependency, DependencySpec};
use berth_scheduler::idlefill::EXEMPT_WINDOW_MAX_S;
use berth_scheduler::model::{EmulatorInventory, Host, Inventory, JobSpec, Resources};
use berth_scheduler::partition::Partition;
use berth_scheduler::pass::{PendingJob, Policy, Shape, Snapshot};
use berth_scheduler::qos::{Limits, PreemptMode, Qos, QosFlags, NORMAL_QOS};
use berth_scheduler::resv::AdminReservation;

use self::file::{
    AccountFile, EmulatorFile, EventFile, HostFile, JobFile, PartitionFile, QosFile,
    ReservationFile, ScenarioFile, SchedulerFile, ShapeKeys, UserFile,
};
use crate::engine::submit_spec::{resource_set, set_shape};
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

/// Names the file in the errors of the checks serde cannot make.
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

    /// Refuses `name` at `key` when it is `taken`: `what` names are used
    /// once.
    fn once(&self, key: &str, what: &str, name: &str, taken: bool) -> Result<(), SimError> {
        if taken {
            let expected = format!("{what} names used once; {name} is named twice");
            return Err(self.invalid(key, expected));
        }
        Ok(())
    }

    fn unknown(&self, key: &str) -> SimError {
        SimError::UnknownKey {
            file: self.file.to_string(),
            key: key.to_string(),
        }
    }

    /// `value` when it is a finite number >= 0.
    fn non_negative(&self, key: &str, value: Option<f64>) -> Result<Option<f64>, SimError> {
        match value {
            Some(x) if !(x >= 0.0 && x.is_finite()) => Err(self.invalid(key, "a number >= 0")),
            _ => Ok(value),
        }
    }
}

/// Sets `slot` to `value` when the key was given.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

/// Parses a scenario. `file` names it in errors.
pub fn parse_scenario(text: &str, file: &str) -> Result<Scenario, SimError> {
    let ctx = Ctx { file };
    let f: ScenarioFile = toml::from_str(text).map_err(|e| located::file_error(text, file, &e))?;
    let policy = policy_of(&ctx, &f.scheduler)?;
    let stop_grace_s = f.scheduler.stop_grace_s.unwrap_or(STOP_GRACE_S_DEFAULT);
    let partitions = partitions_of(&ctx, &f.partitions)?;
    let qos = qos_list_of(&ctx, &f.qos)?;
    let qos_names: BTreeSet<&str> = qos.iter().map(|q| q.name.as_str()).collect();
    for (i, p) in partitions.iter().enumerate() {
        if !p.qos.is_empty() && !qos_names.contains(p.qos.as_str()) {
            return Err(ctx.invalid(
                &format!("partitions[{i}].qos"),
                format!("a name of [[qos]], not {:?}", p.qos),
            ));
        }
    }
    let hosts = hosts_of(&ctx, &f.hosts, &partitions)?;
    let accounts = accounts_of(&ctx, &f.accounts, &qos_names)?;
    let users = users_of(&ctx, &f.users, &accounts)?;
    let reservations = reservations_of(&ctx, &f.reservations, &hosts, &accounts)?;
    let world = Snapshot {
        partitions,
        qos,
        accounts,
        users,
        reservations,
        ..Snapshot::default()
    };
    let (jobs, job_index) = jobs_of(&ctx, &f.jobs, &world, &hosts)?;
    let events = events_of(&ctx, &f.events, &world, &hosts, &jobs, &job_index)?;
    Ok(Scenario {
        name: f.name,
        until_s: f.until_s,
        policy,
        hosts,
        world,
        jobs,
        events,
        stop_grace_s,
    })
}

fn policy_of(ctx: &Ctx, s: &SchedulerFile) -> Result<Policy, SimError> {
    let at_least = |key: &str, value: Option<usize>, min: usize| match value {
        Some(n) if n < min => {
            Err(ctx.invalid(&format!("scheduler.{key}"), format!("a number >= {min}")))
        }
        _ => Ok(value),
    };
    let mut policy = Policy::default();
    set(&mut policy.backfill, s.backfill);
    set(&mut policy.bf_reservations, s.bf_reservations);
    let max_jobs = at_least("max_jobs_per_pass", s.max_jobs_per_pass, 1)?;
    set(&mut policy.max_jobs_per_pass, max_jobs);
    let max_test = at_least("bf_max_job_test", s.bf_max_job_test, 1)?;
    set(&mut policy.bf_max_job_test, max_test);
    set(&mut policy.bf_resolution_s, s.bf_resolution_s);
    set(&mut policy.bf_window_s, s.bf_window_s);
    set(
        &mut policy.pass_budget_host_checks,
        s.pass_budget_host_checks,
    );
    let top_n = s.reserve_all_alternatives_top_n;
    set(&mut policy.reserve_all_alternatives_top_n, top_n);
    set(&mut policy.max_reserve_time_s, s.max_reserve_time_s);
    priority_of(ctx, s, &mut policy)?;
    preemption_of(ctx, s, &mut policy)?;
    let evictions = at_least("max_evictions_per_tick", s.max_evictions_per_tick, 1)?;
    set(&mut policy.preemption.max_evictions_per_tick, evictions);
    idle_fill_of(ctx, s, &mut policy)?;
    Ok(policy)
}

/// The `priority_*` keys of `[scheduler]`.
fn priority_of(ctx: &Ctx, s: &SchedulerFile, policy: &mut Policy) -> Result<(), SimError> {
    let w = &mut policy.priority;
    set(&mut w.age, s.priority_weight_age);
    set(&mut w.fairshare, s.priority_weight_fairshare);
    set(&mut w.job_size, s.priority_weight_job_size);
    set(&mut w.partition, s.priority_weight_partition);
    set(&mut w.qos, s.priority_weight_qos);
    set(&mut w.assoc, s.priority_weight_assoc);
    if s.priority_max_age_s == Some(0) {
        return Err(ctx.invalid("scheduler.priority_max_age_s", "a number of seconds >= 1"));
    }
    set(&mut w.max_age_s, s.priority_max_age_s);
    set(&mut w.decay_half_life_s, s.priority_decay_half_life_s);
    Ok(())
}

/// The preemption keys of `[scheduler]`.
fn preemption_of(ctx: &Ctx, s: &SchedulerFile, policy: &mut Policy) -> Result<(), SimError> {
    let pre = &mut policy.preemption;
    set(&mut pre.enabled, s.preemption_enabled);
    set(&mut pre.min_runtime_s, s.min_preemption_runtime_s);
    // TOML's integers are i64s: a u64 read from one fits.
    let gap = s
        .preemption_gap
        .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    set(&mut pre.gap, gap);
    if s.preemption_threshold.is_some_and(|n| n > 100) {
        return Err(ctx.invalid(
            "scheduler.preemption_threshold",
            "a percentage of utilization from 0 to 100",
        ));
    }
    set(&mut pre.threshold_pct, s.preemption_threshold);
    set(&mut pre.multi_victim, s.preemption_multi_victim);
    Ok(())
}

/// The four `idle_fill_*` keys of `[scheduler]`.
fn idle_fill_of(ctx: &Ctx, s: &SchedulerFile, policy: &mut Policy) -> Result<(), SimError> {
    let f = &mut policy.idle_fill;
    set(&mut f.enabled, s.idle_fill_enabled);
    if let Some(n) = s.idle_fill_exempt_secs {
        if n > EXEMPT_WINDOW_MAX_S {
            return Err(ctx.invalid(
                "scheduler.idle_fill_exempt_secs",
                format!("a number of seconds <= {EXEMPT_WINDOW_MAX_S}"),
            ));
        }
        f.exempt_s = n;
    }
    let factor = s.idle_fill_max_borrow_factor;
    let factor = ctx.non_negative("scheduler.idle_fill_max_borrow_factor", factor)?;
    set(&mut f.max_borrow_factor, factor);
    let key = "scheduler.idle_fill_max_cluster_fraction";
    let fraction = ctx.non_negative(key, s.idle_fill_max_cluster_fraction)?;
    if fraction.is_some_and(|x| x > 1.0) {
        return Err(ctx.invalid(key, "a share of the hosts between 0 and 1"));
    }
    set(&mut f.max_cluster_fraction, fraction);
    Ok(())
}

fn partitions_of(ctx: &Ctx, list: &[PartitionFile]) -> Result<Vec<Partition>, SimError> {
    let mut partitions: Vec<Partition> = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let path = format!("partitions[{i}]");
        let key = format!("{path}.name");
        if p.name.is_empty() {
            return Err(ctx.invalid(&key, "a partition name"));
        }
        let taken = partitions.iter().any(|q| q.name == p.name);
        ctx.once(&key, "partition", &p.name, taken)?;
        let preempt_mode = match p.preempt_mode.as_deref() {
            None | Some("off") => PreemptMode::Off,
            Some("requeue") => PreemptMode::Requeue,
            Some("cancel") => PreemptMode::Cancel,
            Some(other) => return Err(ctx.invalid(
                &format!("{path}.preempt_mode"),
                format!("off, requeue or cancel, not {other:?} (suspend is not supported: a suspended job would keep its allocation)"),
            )),
        };
        partitions.push(Partition {
            name: p.name.clone(),
            default: p.default,
            max_time_s: p.max_time_s.filter(|&m| m > 0),
            default_time_s: p.default_time_s.filter(|&m| m > 0),
            max_nodes: p.max_nodes,
            min_nodes: p.min_nodes,
            priority_job_factor: p.priority_job_factor,
            qos: p.qos.clone(),
            preempt_mode,
            reserve_all_alternatives: p.reserve_all_alternatives,
        });
    }
    if partitions.iter().filter(|p| p.default).count() > 1 {
        return Err(ctx.invalid("partitions", "at most one partition with default = true"));
    }
    Ok(partitions)
}

/// One `[[qos]]` table (also the `set` of a `modify_qos` event) over
/// `base`: only the keys given change.
fn qos_from(ctx: &Ctx, q: &QosFile, path: &str, base: Qos) -> Result<Qos, SimError> {
    let mut qos = base;
    set(&mut qos.priority, q.priority);
    qos.limits = q.limits_over(qos.limits);
    if let Some(flags) = &q.flags {
        qos.flags = qos_flags(ctx, path, flags)?;
    }
    let usage_factor = ctx.non_negative(&format!("{path}.usage_factor"), q.usage_factor)?;
    set(&mut qos.usage_factor, usage_factor);
    let key = format!("{path}.usage_threshold");
    let threshold = ctx.non_negative(&key, q.usage_threshold)?;
    if threshold.is_some_and(|x| x > 1.0) {
        return Err(ctx.invalid(&key, "a fair-share factor between 0 and 1"));
    }
    qos.usage_threshold = threshold.or(qos.usage_threshold);
    set(&mut qos.preempt, q.preempt.clone());
    if let Some(mode) = &q.preempt_mode {
        qos.preempt_mode = match mode.as_str() {
            "requeue" => PreemptMode::Requeue,
            "cancel" => PreemptMode::Cancel,
            other => return Err(ctx.invalid(
                &format!("{path}.preempt_mode"),
                format!("requeue or cancel, not {other:?} (suspend is not supported: this scheduler does not stop and continue jobs, and a suspended job would keep its allocation)"),
            )),
        };
    }
    qos.preempt_exempt_time_s = q.preempt_exempt_time_s.or(qos.preempt_exempt_time_s);
    qos.grace_time_s = q.grace_time_s.or(qos.grace_time_s);
    set(&mut qos.idle_fill_preemptable, q.idle_fill_preemptable);
    Ok(qos)
}

/// Slurm's QOS flags by name.
fn qos_flags(ctx: &Ctx, path: &str, names: &[String]) -> Result<QosFlags, SimError> {
    let mut flags = QosFlags::default();
    for f in names {
        if !flags.set_by_name(f) {
            return Err(ctx.invalid(
                &format!("{path}.flags"),
                format!(
                    "Slurm QOS flags ({}), not {f:?}",
                    QosFlags::NAMES.join(", ")
                ),
            ));
        }
    }
    Ok(flags)
}

fn qos_list_of(ctx: &Ctx, list: &[QosFile]) -> Result<Vec<Qos>, SimError> {
    let mut out: Vec<Qos> = Vec::new();
    for (i, q) in list.iter().enumerate() {
        let path = format!("qos[{i}]");
        let key = format!("{path}.name");
        let name = q
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.invalid(&key, "a QOS name"))?;
        ctx.once(&key, "QOS", name, out.iter().any(|x| x.name == name))?;
        out.push(qos_from(ctx, q, &path, Qos::named(name))?);
    }
    if !out.iter().any(|q| q.name == NORMAL_QOS) {
        // As in Slurm, `normal` always exists.
        out.push(Qos::default());
    }
    for (i, q) in out.iter().enumerate() {
        if let Some(bad) = q
            .preempt
            .iter()
            .find(|n| !out.iter().any(|x| x.name == **n))
        {
            return Err(ctx.invalid(
                &format!("qos[{i}].preempt"),
                format!("names of [[qos]], not {bad:?}"),
            ));
        }
    }
    Ok(out)
}

fn hosts_of(ctx: &Ctx, list: &[HostFile], partitions: &[Partition]) -> Result<Vec<Host>, SimError> {
    let mut hosts = Vec::new();
    let mut seen_hosts = BTreeSet::new();
    for (i, h) in list.iter().enumerate() {
        let path = format!("hosts[{i}]");
        let names =
            hostlist::expand(&h.names).map_err(|e| ctx.invalid(&format!("{path}.names"), e))?;
        if h.cpus == 0 {
            return Err(ctx.invalid(&format!("{path}.cpus"), "a number of CPUs >= 1"));
        }
        let emulator = match h.emulators.as_slice() {
            [] => None,
            [e] => Some(host_emulator(ctx, e, &format!("{path}.emulators[0]"))?),
            _ => return Err(ctx.invalid(
                &format!("{path}.emulators"),
                "an array of at most one { kind, group, units } table (a host carries one emulator attachment)",
            )),
        };
        let inventory = Inventory {
            cpus: h.cpus,
            mem_mb: h.mem_mb,
            gpus: h.gpus,
            gpu_type: h.gpu_type.clone(),
            emulator,
            // The host's `features` key fills `Host::features`.
            features: Vec::new(),
        };
        for p in &h.partitions {
            if !partitions.iter().any(|q| q.name == *p) {
                return Err(ctx.invalid(
                    &format!("{path}.partitions"),
                    format!("names of [[partitions]], not {p:?}"),
                ));
            }
        }
        for name in names {
            let taken = !seen_hosts.insert(name.clone());
            ctx.once(&format!("{path}.names"), "host", &name, taken)?;
            let mut host = Host::new(name, inventory.clone());
            host.partitions = h.partitions.clone();
            host.features = h.features.clone();
            hosts.push(host);
        }
    }
    if hosts.is_empty() {
        return Err(ctx.invalid("hosts", "at least one [[hosts]] group"));
    }
    Ok(hosts)
}

fn host_emulator(ctx: &Ctx, e: &EmulatorFile, path: &str) -> Result<EmulatorInventory, SimError> {
    if e.kind.is_empty() {
        return Err(ctx.invalid(&format!("{path}.kind"), "an emulator kind such as \"zebu\""));
    }
    Ok(EmulatorInventory {
        kind: e.kind.clone(),
        group: e.group.clone(),
        units: e.units,
    })
}

fn accounts_of(
    ctx: &Ctx,
    list: &[AccountFile],
    qos_names: &BTreeSet<&str>,
) -> Result<Vec<Account>, SimError> {
    let mut accounts: Vec<Account> = Vec::new();
    for (i, a) in list.iter().enumerate() {
        let path = format!("accounts[{i}]");
        let key = format!("{path}.name");
        if a.name.is_empty() || a.name == ROOT_ACCOUNT {
            return Err(ctx.invalid(&key, "an account name other than \"root\""));
        }
        let taken = accounts.iter().any(|x| x.name == a.name);
        ctx.once(&key, "account", &a.name, taken)?;
        if let Some(q) = a.qos.iter().find(|q| !qos_names.contains(q.as_str())) {
            return Err(ctx.invalid(
                &format!("{path}.qos"),
                format!("names of [[qos]], not {q:?}"),
            ));
        }
        let limits = a.limits_over(Limits::default());
        if !limits.min_tres_per_job.is_empty() {
            return Err(ctx.invalid(
                &format!("{path}.min_tres_per_job"),
                "no min_tres_per_job on an account (Slurm has it on QOS only)",
            ));
        }
        accounts.push(Account {
            name: a.name.clone(),
            parent: a.parent.clone().unwrap_or_else(|| ROOT_ACCOUNT.to_string()),
            shares: a.shares,
            users: a.users.clone(),
            qos: a.qos.clone(),
            priority: a.priority,
            max_priority: a.max_priority,
            limits,
            preempt: a.preempt.clone(),
        });
    }
    for (i, a) in accounts.iter().enumerate() {
        check_account_links(ctx, &accounts, i, a)?;
    }
    Ok(accounts)
}

/// An account's `preempt` and `parent` name accounts, and its parents
/// lead to the root.
fn check_account_links(
    ctx: &Ctx,
    accounts: &[Account],
    i: usize,
    a: &Account,
) -> Result<(), SimError> {
    let known = |name: &str| accounts.iter().any(|x| x.name == name);
    if let Some(bad) = a.preempt.iter().find(|n| !known(n)) {
        return Err(ctx.invalid(
            &format!("accounts[{i}].preempt"),
            format!("names of [[accounts]], not {bad:?}"),
        ));
    }
    if a.parent != ROOT_ACCOUNT && !known(&a.parent) {
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
    Ok(())
}

fn users_of(
    ctx: &Ctx,
    list: &[UserFile],
    accounts: &[Account],
) -> Result<Vec<UserRecord>, SimError> {
    let mut users = Vec::new();
    for (i, u) in list.iter().enumerate() {
        let (name, default_account) = (&u.name, &u.default_account);
        if !default_account.is_empty()
            && !accounts
                .iter()
                .any(|a| a.name == *default_account && a.users.contains(name))
        {
            return Err(ctx.invalid(
                &format!("users[{i}].default_account"),
                format!("an account that lists user {name:?}, not {default_account:?}"),
            ));
        }
        users.push(UserRecord {
            name: name.clone(),
            priority: u.priority,
            default_account: default_account.clone(),
        });
    }
    Ok(users)
}

/// The resource keys given in `keys`, over `base` (for a job, one CPU on
/// one host).
fn shape_of(
    ctx: &Ctx,
    keys: ShapeKeys,
    path: &str,
    base: Option<&Shape>,
) -> Result<Shape, SimError> {
    let mut shape = base
        .cloned()
        .unwrap_or_else(|| Shape::one(Resources::cpu_mem(1, 0)));
    if keys.nodes == Some(0) {
        return Err(ctx.invalid(&format!("{path}.nodes"), "a number of hosts >= 1"));
    }
    set(&mut shape.nodes, keys.nodes);
    set(&mut shape.per_host.cpus, keys.cpus.map(|c| c.max(1)));
    set(&mut shape.per_host.mem_mb, keys.mem_mb);
    set(&mut shape.per_host.gpus, keys.gpus);
    set(&mut shape.gpu_type, keys.gpu_type);
    if let Some(e) = keys.emulators {
        if e.units == 0 {
            let key = format!("{path}.emulators.units");
            return Err(ctx.invalid(&key, "a number of units >= 1"));
        }
        shape.emu_kind = e.kind;
        shape.emu_group = e.group;
        shape.per_host.emu = e.units;
    }
    set(&mut shape.exclusive, keys.exclusive);
    set(&mut shape.features, keys.features);
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

type JobIndex = BTreeMap<String, Vec<usize>>;

/// `[[reservations]]`: admin windows. Names are unique, hosts exist, users
/// and accounts are the scenario's, and two windows never overlap on a
/// host (a host is in at most one reservation at a time).
fn reservations_of(
    ctx: &Ctx,
    list: &[ReservationFile],
    hosts: &[Host],
    accounts: &[Account],
) -> Result<Vec<AdminReservation>, SimError> {
    let mut out: Vec<AdminReservation> = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let path = format!("reservations[{i}]");
        let key = format!("{path}.name");
        if r.name.is_empty() {
            return Err(ctx.invalid(&key, "a reservation name"));
        }
        let taken = out.iter().any(|o| o.name == r.name);
        ctx.once(&key, "reservation", &r.name, taken)?;
        let window = reservation_of(ctx, r, &path, hosts, accounts)?;
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

/// One window, its hosts, users and accounts checked.
fn reservation_of(
    ctx: &Ctx,
    r: &ReservationFile,
    path: &str,
    hosts: &[Host],
    accounts: &[Account],
) -> Result<AdminReservation, SimError> {
    let names = hostlist::expand(&r.hosts)
        .map_err(|e| ctx.invalid(&format!("{path}.hosts"), format!("a hostlist ({e})")))?;
    if let Some(n) = names.iter().find(|n| !hosts.iter().any(|h| h.name == **n)) {
        return Err(ctx.invalid(
            &format!("{path}.hosts"),
            format!("hosts of [[hosts]], not {n:?}"),
        ));
    }
    if r.duration_s == 0 {
        let key = format!("{path}.duration_s");
        return Err(ctx.invalid(&key, "a duration in seconds >= 1"));
    }
    if let Some(u) = r
        .users
        .iter()
        .find(|u| !accounts.iter().any(|a| a.users.contains(u)))
    {
        return Err(ctx.invalid(
            &format!("{path}.users"),
            format!("users named in [[accounts]], not {u:?}"),
        ));
    }
    if let Some(a) = r
        .accounts
        .iter()
        .find(|a| !accounts.iter().any(|x| x.name == **a))
    {
        return Err(ctx.invalid(
            &format!("{path}.accounts"),
            format!("names of [[accounts]], not {a:?}"),
        ));
    }
    Ok(AdminReservation {
        name: r.name.clone(),
        hosts: names,
        start_ms: r.start_s.saturating_mul(1000),
        end_ms: r.start_s.saturating_add(r.duration_s).saturating_mul(1000),
        users: r.users.clone(),
        accounts: r.accounts.clone(),
    })
}

fn jobs_of(
    ctx: &Ctx,
    list: &[JobFile],
    world: &Snapshot,
    hosts: &[Host],
) -> Result<(Vec<SimJob>, JobIndex), SimError> {
    let catalog = Catalog::new(world);
    let mut jobs: Vec<SimJob> = Vec::new();
    // Scenario id -> the job indices it names (several for an array).
    let mut job_index: JobIndex = BTreeMap::new();
    for (i, j) in list.iter().enumerate() {
        let path = format!("jobs[{i}] (id {:?})", j.id);
        if job_index.contains_key(&j.id) {
            return Err(ctx.invalid(&format!("{path}.id"), "job ids used once"));
        }
        let spec = job_spec(ctx, j, &path, world, &catalog, hosts)?;
        let indices = push_tasks(ctx, j, &path, spec, &mut jobs)?;
        job_index.insert(j.id.clone(), indices);
    }
    // Dependencies name jobs by id, earlier or later in the file.
    for (i, j) in list.iter().enumerate() {
        let Some(text) = &j.dependency else {
            continue;
        };
        let spec = scenario_dependency(text, &job_index)
            .map_err(|e| ctx.invalid(&format!("jobs[{i}] (id {:?}).dependency", j.id), e))?;
        for &k in &job_index[&j.id] {
            jobs[k].dependency = Some(spec.clone());
        }
    }
    Ok((jobs, job_index))
}

/// What one `[[jobs]]` entry asks, checked against the scenario.
fn job_spec(
    ctx: &Ctx,
    j: &JobFile,
    path: &str,
    world: &Snapshot,
    catalog: &Catalog,
    hosts: &[Host],
) -> Result<PendingJob, SimError> {
    check_job_names(ctx, j, path, catalog)?;
    let shape = shape_of(ctx, j.shape_keys(), path, None)?;
    let (alternatives, path_partitions) = alternatives_of(ctx, j, path, &shape, catalog)?;
    let mut spec = PendingJob {
        shape,
        alternatives,
        path_partitions,
        user: j.user.clone(),
        account: j.account.clone(),
        qos: j.qos.clone(),
        partitions: j.partition.clone(),
        // Checked at submit, as `sbatch --reservation` is: a name that
        // does not exist or does not admit the job is refused then.
        reservation: j.reservation.clone(),
        ..PendingJob::default()
    };
    if !can_run(&spec, world, catalog, hosts) {
        return Err(ctx.invalid(
            path,
            "resources some hosts of the scenario could hold (no host group has enough of what it asks, of its kind, in its partition)",
        ));
    }
    let asked_limit_s = j.time_limit_s.filter(|&t| t > 0);
    // Slurm's default time limit: the partition's DefaultTime, else MaxTime.
    let default_limit_s = catalog
        .partitions_of(&spec)
        .first()
        .and_then(|p| p.default_limit_s());
    spec.time_limit_s = asked_limit_s.or(default_limit_s).unwrap_or(0);
    spec.nice = i32::try_from(j.priority_nice)
        .ok()
        .filter(|n| n.abs() <= 2_147_483_645)
        .ok_or_else(|| {
            ctx.invalid(
                &format!("{path}.priority_nice"),
                "a nice value that fits in 32 bits",
            )
        })?;
    if let Some(b) = j.begin_s {
        spec.begin_ms = b.saturating_mul(1000);
    }
    spec.preemptible = j.preemptible;
    Ok(spec)
}

/// The user, account, QOS and partitions a job names exist, and the
/// account lists the user.
fn check_job_names(ctx: &Ctx, j: &JobFile, path: &str, catalog: &Catalog) -> Result<(), SimError> {
    let (user, asked) = (&j.user, &j.account);
    let Some(account) = catalog.account_of(user, asked) else {
        return Err(if asked.is_empty() {
            ctx.invalid(
                &format!("{path}.user"),
                format!("a user named in [[accounts]], not {user:?}"),
            )
        } else {
            ctx.invalid(
                &format!("{path}.account"),
                format!("a name of [[accounts]], not {asked:?}"),
            )
        });
    };
    if !account.users.contains(user) {
        return Err(ctx.invalid(
            &format!("{path}.account"),
            format!(
                "an account that lists user {user:?}, not {:?}",
                account.name
            ),
        ));
    }
    if !j.qos.is_empty() && catalog.qos(&j.qos).is_none() {
        return Err(ctx.invalid(
            &format!("{path}.qos"),
            format!("a name of [[qos]], not {:?}", j.qos),
        ));
    }
    if let Some(p) = j.partition.iter().find(|p| catalog.partition(p).is_none()) {
        return Err(ctx.invalid(
            &format!("{path}.partition"),
            format!("a name of [[partitions]], not {p:?}"),
        ));
    }
    Ok(())
}

/// A job's alternatives over its own `shape`, and the partition of each
/// (none at all when every one runs in the job's).
fn alternatives_of(
    ctx: &Ctx,
    j: &JobFile,
    path: &str,
    shape: &Shape,
    catalog: &Catalog,
) -> Result<(Vec<Shape>, Vec<String>), SimError> {
    let mut shapes = Vec::new();
    let mut partitions = Vec::new();
    for (k, alt) in j.alternatives.iter().enumerate() {
        let apath = format!("{path}.alternatives[{k}]");
        shapes.push(shape_of(ctx, alt.shape_keys(), &apath, Some(shape))?);
        // An alternative may run in a partition of its own.
        let own = &alt.partition;
        if !own.is_empty() && catalog.partition(own).is_none() {
            return Err(ctx.invalid(
                &format!("{apath}.partition"),
                format!("a name of [[partitions]], not {own:?}"),
            ));
        }
        partitions.push(own.clone());
    }
    if partitions.iter().all(String::is_empty) {
        partitions.clear();
    }
    Ok((shapes, partitions))
}

/// Whether the job could run at all, with every host up: on some path,
/// in some partition it may use.
fn can_run(spec: &PendingJob, world: &Snapshot, catalog: &Catalog, hosts: &[Host]) -> bool {
    let candidates: Vec<Option<&Partition>> = if world.partitions.is_empty() {
        vec![None]
    } else {
        catalog.partitions_of(spec).into_iter().map(Some).collect()
    };
    spec.paths().iter().enumerate().any(|(k, s)| {
        candidates
            .iter()
            .any(|&p| catalog.runs_in(spec, k, p) && possible(s, hosts, p.map(|p| p.name.as_str())))
    })
}

/// The job, or its array's tasks (`{id}_{task}`), appended to `jobs`:
/// their indices.
fn push_tasks(
    ctx: &Ctx,
    j: &JobFile,
    path: &str,
    pending: PendingJob,
    jobs: &mut Vec<SimJob>,
) -> Result<Vec<usize>, SimError> {
    let exit_code = i32::try_from(j.exit_code)
        .map_err(|_| ctx.invalid(&format!("{path}.exit_code"), "an exit code"))?;
    let task_ids = match &j.array {
        None => None,
        Some(a) => {
            let spec = berth_scheduler::array::parse(a)
                .map_err(|e| ctx.invalid(&format!("{path}.array"), e.to_string()))?;
            Some(spec.indexes)
        }
    };
    let mut spec = submit_of(ctx, path, &pending)?;
    // Slurm's job name: `name`, else the id; every task of an array has
    // the array's.
    spec.name = j.name.clone().unwrap_or_else(|| j.id.clone());
    spec.hold = j.hold;
    spec.array = j.array.clone().unwrap_or_default();
    let first = jobs.len();
    let tasks: Vec<(String, Option<(usize, u32)>)> = match &task_ids {
        None => vec![(j.id.clone(), None)],
        Some(ids) => ids
            .iter()
            .map(|&k| (format!("{}_{k}", j.id), Some((first, k))))
            .collect(),
    };
    let mut indices = Vec::new();
    for (name, array_task) in tasks {
        indices.push(jobs.len());
        jobs.push(SimJob {
            runtime_s: j.runtime_s,
            exit_code,
            array_task,
            stop_takes_s: j.stop_takes_s,
            ..SimJob::new(name, j.at_s, spec.clone())
        });
    }
    Ok(indices)
}

/// The submit `sbatch` would send for `pending`, the job as the scenario
/// describes it.
fn submit_of(ctx: &Ctx, path: &str, pending: &PendingJob) -> Result<JobSpec, SimError> {
    let mut spec = JobSpec {
        user: pending.user.clone(),
        account: pending.account.clone(),
        qos: pending.qos.clone(),
        partitions: pending.partitions.clone(),
        reservation: pending.reservation.clone(),
        time_limit_s: pending.time_limit_s,
        nice: pending.nice,
        begin_ms: pending.begin_ms,
        preemptible: pending.preemptible,
        ..JobSpec::default()
    };
    set_shape(&mut spec, &pending.shape);
    for (k, alt) in pending.alternatives.iter().enumerate() {
        // A submit has one `--exclusive` and one `--constraint` for all
        // its alternatives.
        if alt.exclusive != pending.shape.exclusive || alt.features != pending.shape.features {
            return Err(ctx.invalid(
                &format!("{path}.alternatives[{k}]"),
                "the job's own exclusive and features (a submit has one of each for all its alternatives)",
            ));
        }
        let partition = pending.path_partitions.get(k).map_or("", String::as_str);
        spec.alternatives.push(resource_set(alt, partition));
    }
    Ok(spec)
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

/// What an event's `action` may be.
const ACTIONS: &str = "one of cancel, release, hold, host_down, host_up, modify_qos, set_priority";

fn events_of(
    ctx: &Ctx,
    list: &[EventFile],
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
    let mut order: Vec<(usize, &EventFile)> = list.iter().enumerate().collect();
    order.sort_by_key(|(i, e)| (e.at_s, *i));
    for (i, e) in order {
        let path = format!("events[{i}]");
        let named_jobs = || event_jobs(ctx, e, &path, jobs, job_index);
        let named_hosts = || event_hosts(ctx, e, &path, hosts);
        let action = match e.action.as_str() {
            "cancel" => SimAction::Cancel(named_jobs()?),
            "release" => SimAction::Release(named_jobs()?),
            "hold" => SimAction::Hold(named_jobs()?),
            "host_down" => SimAction::HostDown(named_hosts()?),
            "host_up" => SimAction::HostUp(named_hosts()?),
            "modify_qos" => modify_qos(ctx, e, &path, &mut qos_now)?,
            "set_priority" => set_priority(ctx, e, &path, world)?,
            _ => return Err(ctx.invalid(&format!("{path}.action"), ACTIONS)),
        };
        events.push(SimEvent {
            at_s: e.at_s,
            action,
        });
    }
    Ok(events)
}

/// The jobs an event's `job` names (an array's tasks), submitted by then.
fn event_jobs(
    ctx: &Ctx,
    e: &EventFile,
    path: &str,
    jobs: &[SimJob],
    job_index: &JobIndex,
) -> Result<Vec<usize>, SimError> {
    let key = format!("{path}.job");
    let name = e
        .job
        .as_deref()
        .ok_or_else(|| ctx.invalid(&key, "the id of a [[jobs]] entry"))?;
    let found = job_index
        .get(name)
        .cloned()
        .ok_or_else(|| ctx.invalid(&key, format!("the id of a [[jobs]] entry, not {name:?}")))?;
    if found.iter().any(|&j| e.at_s < jobs[j].submit_s) {
        return Err(ctx.invalid(
            &format!("{path}.at_s"),
            format!("a time at or after job {name:?} is submitted"),
        ));
    }
    Ok(found)
}

/// The hosts an event's `host` names (a hostlist).
fn event_hosts(
    ctx: &Ctx,
    e: &EventFile,
    path: &str,
    hosts: &[Host],
) -> Result<Vec<String>, SimError> {
    let key = format!("{path}.host");
    let expr = e
        .host
        .as_deref()
        .ok_or_else(|| ctx.invalid(&key, "a host name or hostlist"))?;
    let names = hostlist::expand(expr).map_err(|m| ctx.invalid(&key, m))?;
    if let Some(n) = names.iter().find(|n| !hosts.iter().any(|h| h.name == **n)) {
        return Err(ctx.invalid(&key, format!("hosts of [[hosts]], not {n:?}")));
    }
    Ok(names)
}

/// An event's `set` table.
fn set_of<'e>(ctx: &Ctx, e: &'e EventFile, path: &str) -> Result<&'e QosFile, SimError> {
    e.set.as_ref().ok_or_else(|| {
        ctx.invalid(
            &format!("{path}.set"),
            "a table of what to change, e.g. set = { priority = 10 }",
        )
    })
}

/// `modify_qos`: the QOS as it is by then, with the keys of `set`.
fn modify_qos(
    ctx: &Ctx,
    e: &EventFile,
    path: &str,
    qos_now: &mut BTreeMap<String, Qos>,
) -> Result<SimAction, SimError> {
    let key = format!("{path}.qos");
    let name = e
        .qos
        .as_deref()
        .ok_or_else(|| ctx.invalid(&key, "a name of [[qos]]"))?;
    let base = qos_now
        .get(name)
        .cloned()
        .ok_or_else(|| ctx.invalid(&key, format!("a name of [[qos]], not {name:?}")))?;
    let set = set_of(ctx, e, path)?;
    if set.name.is_some() {
        return Err(ctx.unknown(&format!("{path}.set.name")));
    }
    let modified = qos_from(ctx, set, &format!("{path}.set"), base)?;
    if let Some(bad) = modified.preempt.iter().find(|n| !qos_now.contains_key(*n)) {
        return Err(ctx.invalid(
            &format!("{path}.set.preempt"),
            format!("names of [[qos]], not {bad:?}"),
        ));
    }
    qos_now.insert(name.to_string(), modified.clone());
    Ok(SimAction::ModifyQos(Box::new(modified)))
}

/// `set_priority`: an account's or a user's new priority.
fn set_priority(
    ctx: &Ctx,
    e: &EventFile,
    path: &str,
    world: &Snapshot,
) -> Result<SimAction, SimError> {
    let set = set_of(ctx, e, path)?;
    let only_priority = QosFile {
        priority: set.priority,
        ..QosFile::default()
    };
    if *set != only_priority {
        return Err(ctx.invalid(
            &format!("{path}.set"),
            "only the key priority (set_priority changes nothing else)",
        ));
    }
    let priority = set.priority.ok_or_else(|| {
        ctx.invalid(
            &format!("{path}.set.priority"),
            "the new priority, a whole number",
        )
    })?;
    match (&e.account, &e.user) {
        (Some(a), None) => {
            if !world.accounts.iter().any(|x| x.name == *a) {
                return Err(ctx.invalid(
                    &format!("{path}.account"),
                    format!("a name of [[accounts]], not {a:?}"),
                ));
            }
            Ok(SimAction::SetAccountPriority(a.clone(), priority))
        }
        (None, Some(u)) => {
            if !world.accounts.iter().any(|x| x.users.contains(u)) {
                return Err(ctx.invalid(
                    &format!("{path}.user"),
                    format!("a user named in [[accounts]], not {u:?}"),
                ));
            }
            Ok(SimAction::SetUserPriority(u.clone(), priority))
        }
        _ => Err(ctx.invalid(path, "exactly one of account or user")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[[hosts]]\nnames = \"n[1-2]\"\ncpus = 4\n\n\
        [[accounts]]\nname = \"lab\"\nusers = [\"u1\"]\n";

    fn error_of(text: &str) -> String {
        match parse_scenario(text, "s.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn an_unknown_key_in_a_nested_table_is_refused_with_its_line() {
        let job = "[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\n\
            emulators = { kind = \"zebu\", unit = 1 }\n";
        assert_eq!(
            error_of(&format!("{BASE}{job}")),
            "s.toml: line 12: unknown key jobs[0] (id \"a\").emulators.unit"
        );
        assert_eq!(
            error_of(&format!(
                "[scheduler]\nbackfill = true\nbackfil = false\n{BASE}"
            )),
            "s.toml: line 3: unknown key scheduler.backfil"
        );
        // An array of tables spans the tables written between its own.
        let split = format!("{BASE}[[hosts]]\nnames = \"m1\"\ncpus = 1\ngpu = 1\n");
        assert_eq!(
            error_of(&split),
            "s.toml: line 11: unknown key hosts[1].gpu"
        );
        // A sub-table under a header of its own is not within its parent's
        // span.
        let sub = "[[hosts]]\nnames = \"n1\"\ncpus = 1\n\
            [[hosts.emulators]]\nkind = \"z\"\nunits = 1\nx = 2\n";
        assert_eq!(
            error_of(sub),
            "s.toml: line 7: unknown key hosts[0].emulators[0].x"
        );
    }

    #[test]
    fn a_value_of_the_wrong_kind_names_key_line_and_expectation() {
        assert_eq!(
            error_of(&format!(
                "{BASE}[[jobs]]\nid = \"a\"\nat_s = \"soon\"\nuser = \"u1\"\n"
            )),
            "s.toml: line 10: jobs[0] (id \"a\").at_s: expected a whole number >= 0"
        );
        assert_eq!(
            error_of(&format!(
                "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\nfeatures = [\"ib\", 2]\n"
            )),
            "s.toml: line 12: jobs[0] (id \"a\").features[1]: expected a string"
        );
        assert_eq!(
            error_of(&format!("[[qos]]\nname = \"q\"\nmax_tres_per_job = 4\n{BASE}")),
            "s.toml: line 3: qos[0].max_tres_per_job: expected a TRES table such as { node = 4, gpu = 16 }"
        );
        assert_eq!(
            error_of(&format!("[scheduler]\nbf_window_s = -1\n{BASE}")),
            "s.toml: line 2: scheduler.bf_window_s: expected a whole number >= 0"
        );
        assert_eq!(
            error_of("hosts = 3\n"),
            "s.toml: line 1: hosts: expected an array"
        );
    }

    #[test]
    fn a_missing_required_key_is_refused_by_name() {
        assert_eq!(
            error_of("[[hosts]]\nnames = \"n1\"\n"),
            "s.toml: line 1: missing key hosts[0].cpus"
        );
        assert_eq!(
            error_of(&format!("{BASE}[[jobs]]\nid = \"a\"\nuser = \"u1\"\n")),
            "s.toml: line 8: missing key jobs[0] (id \"a\").at_s"
        );
        assert_eq!(
            error_of(&format!(
                "{BASE}[[events]]\naction = \"cancel\"\njob = \"a\"\n"
            )),
            "s.toml: line 8: missing key events[0].at_s"
        );
    }

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let s = parse_scenario(BASE, "s.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.name, "");
        assert_eq!(s.stop_grace_s, STOP_GRACE_S_DEFAULT);
        assert!(s.policy.backfill);
        assert_eq!(s.world.accounts[0].shares, 1);
        assert_eq!(s.world.accounts[0].parent, ROOT_ACCOUNT);
        assert_eq!(s.world.qos.len(), 1, "normal always exists");
        assert_eq!(s.hosts.len(), 2);
        assert_eq!(s.hosts[0].inventory.mem_mb, 0);
    }

    #[test]
    fn a_qos_priority_may_be_negative() {
        let text = format!(
            "[[qos]]\nname = \"burst\"\npriority = -1000000\nidle_fill_preemptable = true\n{BASE}"
        );
        let s = parse_scenario(&text, "s.toml").unwrap_or_else(|e| panic!("{e}"));
        let burst = s.world.qos.iter().find(|q| q.name == "burst");
        assert_eq!(burst.map(|q| q.priority), Some(-1_000_000));
    }
}
