//! Scenario files (`berth sim run`), parsed from text into what the engine
//! runs. Every key is checked: a key this simulator knows but does not
//! implement yet is refused by name, an unknown key is refused, and a value
//! of the wrong kind names the key and what was expected.

use std::collections::{BTreeMap, BTreeSet};

use toml::{Table, Value};

use super::engine::{SimAction, SimEvent, SimJob};
use super::hostlist;
use super::SimError;
use crate::model::{Host, HostState, Inventory, Resources};
use crate::pass::Policy;

/// A parsed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub until_s: Option<u64>,
    pub policy: Policy,
    pub hosts: Vec<Host>,
    pub jobs: Vec<SimJob>,
    pub events: Vec<SimEvent>,
}

/// Keys that exist in the scenario format (SIM.md) but that this simulator
/// does not implement yet. Each may appear only with the value that means
/// "off", given here; any other value is refused rather than ignored.
const NOT_YET: &[(&str, &str, Option<&str>)] = &[
    // (section, key, accepted "off" value as TOML)
    ("", "qos", None),
    ("", "reservations", None),
    ("scheduler", "idle_fill_enabled", Some("false")),
    ("scheduler", "idle_fill_exempt_secs", None),
    ("scheduler", "idle_fill_max_borrow_factor", None),
    ("scheduler", "idle_fill_max_cluster_fraction", None),
    ("scheduler", "preemption_enabled", Some("false")),
    ("scheduler", "min_preemption_runtime_s", None),
    ("scheduler", "preemption_gap", None),
    ("scheduler", "preemption_threshold", None),
    ("scheduler", "preemption_multi_victim", None),
    ("scheduler", "max_evictions_per_tick", None),
    ("scheduler", "reserve_all_alternatives_top_n", None),
    ("scheduler", "max_reserve_time_s", None),
    ("scheduler", "stop_grace_s", None),
    ("hosts", "gpus", Some("0")),
    ("hosts", "gpu_type", None),
    ("hosts", "emulators", None),
    ("partitions", "preempt_mode", Some("\"off\"")),
    ("partitions", "qos", Some("\"\"")),
    ("partitions", "reserve_all_alternatives", Some("false")),
    ("accounts", "parent", Some("\"root\"")),
    ("accounts", "shares", Some("1")),
    ("accounts", "qos", None),
    ("jobs", "qos", None),
    ("jobs", "gpus", Some("0")),
    ("jobs", "emulators", None),
    ("jobs", "priority_nice", Some("0")),
    ("jobs", "preemptible", Some("false")),
    ("jobs", "dependency", None),
    ("jobs", "array", None),
    ("jobs", "reservation", None),
    ("jobs", "stop_takes_s", None),
    ("jobs", "alternatives", None),
    ("events", "host", None),
    ("events", "qos", None),
    ("events", "set", None),
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
            "accounts",
            "jobs",
            "events",
        ],
    )?;
    let name = ctx
        .str_of(&root, "", "name")?
        .unwrap_or_default()
        .to_string();
    let until_s = ctx.u64_of(&root, "", "until_s")?;

    let mut policy = Policy::default();
    match root.get("scheduler") {
        None => {}
        Some(Value::Table(sched)) => {
            ctx.check_keys(
                sched,
                "scheduler",
                "scheduler",
                &["backfill", "bf_reservations", "max_jobs_per_pass"],
            )?;
            if let Some(b) = ctx.bool_of(sched, "scheduler", "backfill")? {
                policy.backfill = b;
            }
            if let Some(n) = ctx.u64_of(sched, "scheduler", "bf_reservations")? {
                policy.bf_reservations = usize::try_from(n)
                    .map_err(|_| ctx.invalid("scheduler.bf_reservations", "a small number"))?;
            }
            if let Some(n) = ctx.u64_of(sched, "scheduler", "max_jobs_per_pass")? {
                if n == 0 {
                    return Err(ctx.invalid("scheduler.max_jobs_per_pass", "a number >= 1"));
                }
                policy.max_jobs_per_pass = usize::try_from(n)
                    .map_err(|_| ctx.invalid("scheduler.max_jobs_per_pass", "a smaller number"))?;
            }
        }
        Some(_) => return Err(ctx.invalid("scheduler", "a [scheduler] table")),
    }

    // Partitions: this slice runs one partition that holds every host.
    let partitions = ctx.tables_of(&root, "partitions")?;
    if partitions.len() > 1 {
        return Err(SimError::Unsupported {
            file: file.to_string(),
            key: "partitions (more than one)".into(),
        });
    }
    let mut partition: Option<(String, Option<u64>)> = None;
    for (i, p) in partitions.iter().enumerate() {
        let path = format!("partitions[{i}]");
        ctx.check_keys(p, "partitions", &path, &["name", "default", "max_time_s"])?;
        let pname = ctx
            .str_of(p, &path, "name")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "a partition name"))?;
        // Checked for its type; with one partition it is the default anyway.
        ctx.bool_of(p, &path, "default")?;
        let max_time_s = ctx.u64_of(p, &path, "max_time_s")?;
        partition = Some((pname.to_string(), max_time_s.filter(|&m| m > 0)));
    }

    let mut hosts = Vec::new();
    let mut seen_hosts = BTreeSet::new();
    for (i, h) in ctx.tables_of(&root, "hosts")?.into_iter().enumerate() {
        let path = format!("hosts[{i}]");
        ctx.check_keys(
            h,
            "hosts",
            &path,
            &["names", "cpus", "mem_mb", "partitions"],
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
        let mem_mb = ctx.u64_of(h, &path, "mem_mb")?.unwrap_or(0);
        for p in ctx.strings_of(h, &path, "partitions")?.unwrap_or_default() {
            if partition.as_ref().map(|(n, _)| n) != Some(&p) {
                return Err(ctx.invalid(
                    &format!("{path}.partitions"),
                    format!("names of [[partitions]], not {p:?}"),
                ));
            }
        }
        for name in names {
            if !seen_hosts.insert(name.clone()) {
                return Err(ctx.invalid(
                    &format!("{path}.names"),
                    format!("host names used once; {name} is named twice"),
                ));
            }
            hosts.push(Host {
                name,
                inventory: Inventory { cpus, mem_mb },
                state: HostState::Up,
                allocated: Resources::default(),
            });
        }
    }
    if hosts.is_empty() {
        return Err(ctx.invalid("hosts", "at least one [[hosts]] group"));
    }

    // user -> accounts they belong to.
    let mut user_accounts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, a) in ctx.tables_of(&root, "accounts")?.into_iter().enumerate() {
        let path = format!("accounts[{i}]");
        ctx.check_keys(a, "accounts", &path, &["name", "users"])?;
        let aname = ctx
            .str_of(a, &path, "name")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.name"), "an account name"))?;
        let users = ctx.strings_of(a, &path, "users")?.unwrap_or_default();
        for u in &users {
            user_accounts
                .entry(u.clone())
                .or_default()
                .insert(aname.to_string());
        }
    }

    let mut jobs = Vec::new();
    let mut job_index: BTreeMap<String, usize> = BTreeMap::new();
    for (i, j) in ctx.tables_of(&root, "jobs")?.into_iter().enumerate() {
        let path = format!("jobs[{i}]");
        let id = ctx
            .str_of(j, &path, "id")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.id"), "the job's name, a string"))?
            .to_string();
        let path = format!("jobs[{i}] (id {id:?})");
        ctx.check_keys(
            j,
            "jobs",
            &path,
            &[
                "id",
                "at_s",
                "user",
                "account",
                "partition",
                "nodes",
                "cpus",
                "mem_mb",
                "exclusive",
                "time_limit_s",
                "runtime_s",
                "exit_code",
                "hold",
            ],
        )?;
        if job_index.insert(id.clone(), i).is_some() {
            return Err(ctx.invalid(&format!("{path}.id"), "job ids used once"));
        }
        let at_s = ctx
            .u64_of(j, &path, "at_s")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.at_s"), "a submit time in seconds"))?;
        let user = ctx
            .str_of(j, &path, "user")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.user"), "a user named in [[accounts]]"))?;
        let Some(theirs) = user_accounts.get(user) else {
            return Err(ctx.invalid(
                &format!("{path}.user"),
                format!("a user named in [[accounts]], not {user:?}"),
            ));
        };
        if let Some(acct) = ctx.str_of(j, &path, "account")? {
            if !theirs.contains(acct) {
                return Err(ctx.invalid(
                    &format!("{path}.account"),
                    format!("an account that lists user {user:?}, not {acct:?}"),
                ));
            }
        }
        if let Some(p) = ctx.str_of(j, &path, "partition")? {
            if partition.as_ref().map(|(n, _)| n.as_str()) != Some(p) {
                return Err(ctx.invalid(
                    &format!("{path}.partition"),
                    format!("a name of [[partitions]], not {p:?}"),
                ));
            }
        }
        let nodes = ctx.u32_of(j, &path, "nodes")?.unwrap_or(1);
        if nodes == 0 {
            return Err(ctx.invalid(&format!("{path}.nodes"), "a number of hosts >= 1"));
        }
        let cpus = ctx.u32_of(j, &path, "cpus")?.unwrap_or(1).max(1);
        let mem_mb = ctx.u64_of(j, &path, "mem_mb")?.unwrap_or(0);
        let exclusive = ctx.bool_of(j, &path, "exclusive")?.unwrap_or(false);
        let asked_limit_s = ctx.u64_of(j, &path, "time_limit_s")?.filter(|&t| t > 0);
        let max_time_s = partition.as_ref().and_then(|p| p.1);
        let mut rejected = None;
        if let (Some(asked), Some(max)) = (asked_limit_s, max_time_s) {
            if asked > max {
                rejected = Some(format!(
                    "time_limit_s {asked} exceeds the partition's max_time_s {max}"
                ));
            }
        }
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
        jobs.push(SimJob {
            name: id,
            submit_s: at_s,
            nodes,
            request: Resources { cpus, mem_mb },
            exclusive,
            // Slurm's default time limit is the partition's MaxTime.
            time_limit_s: asked_limit_s.or(max_time_s),
            runtime_s,
            exit_code,
            hold,
            rejected,
        });
    }

    let mut events = Vec::new();
    for (i, e) in ctx.tables_of(&root, "events")?.into_iter().enumerate() {
        let path = format!("events[{i}]");
        ctx.check_keys(e, "events", &path, &["at_s", "action", "job"])?;
        let at_s = ctx
            .u64_of(e, &path, "at_s")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.at_s"), "a time in seconds"))?;
        let action = match ctx.str_of(e, &path, "action")? {
            Some("cancel") => SimAction::Cancel,
            Some("release") => SimAction::Release,
            Some(other @ ("host_down" | "host_up" | "modify_qos" | "set_priority")) => {
                return Err(SimError::Unsupported {
                    file: file.to_string(),
                    key: format!("{path}.action = {other:?}"),
                })
            }
            _ => return Err(ctx.invalid(&format!("{path}.action"), "\"cancel\" or \"release\"")),
        };
        let job_name = ctx
            .str_of(e, &path, "job")?
            .ok_or_else(|| ctx.invalid(&format!("{path}.job"), "the id of a [[jobs]] entry"))?;
        let job = *job_index.get(job_name).ok_or_else(|| {
            ctx.invalid(
                &format!("{path}.job"),
                format!("the id of a [[jobs]] entry, not {job_name:?}"),
            )
        })?;
        if at_s < jobs[job].submit_s {
            return Err(ctx.invalid(
                &format!("{path}.at_s"),
                format!("a time at or after job {job_name:?} is submitted"),
            ));
        }
        events.push(SimEvent { at_s, action, job });
    }

    Ok(Scenario {
        name,
        until_s,
        policy,
        hosts,
        jobs,
        events,
    })
}
