//! sacctmgr's words: `add|modify|delete|show` of `qos`, `account`, `user`
//! and `association`, with `Key=Value`, `Key+=V`, `Key-=V`, `where` and
//! `set`, `format=`; applying them to the API's policy messages, and the
//! tables `show` prints.
//!
//! What Berth cannot store (Description, Organization, AdminLevel, ...)
//! is refused by name rather than dropped.

use crate::mem::parse_mem_mb;
use crate::sacct::{render_columns, Layout};
use crate::time::{format_time_limit, parse_time_limit};
use berth_proto::api::{Account, Limits, Qos, User};
use std::collections::HashMap;
use thiserror::Error;

/// Words one command may have.
pub const WORDS_MAX: usize = 256;
/// Entries one list value (`Preempt=a,b`, `GrpTRES=cpu=1,...`) may have.
pub const LIST_ITEMS_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Add,
    Modify,
    Delete,
    Show,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entity {
    Qos,
    Account,
    User,
    Association,
}

impl Entity {
    pub fn label(self) -> &'static str {
        match self {
            Entity::Qos => "QOS",
            Entity::Account => "account",
            Entity::User => "user",
            Entity::Association => "association",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Set,
    Add,
    Remove,
}

/// `Key=Value`, `Key+=Value` or `Key-=Value`; the key in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assign {
    pub key: String,
    pub op: Op,
    pub value: String,
}

/// A parsed sacctmgr command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub verb: Verb,
    pub entity: Entity,
    /// Names given bare or as `Name=`.
    pub names: Vec<String>,
    /// `where` conditions other than names.
    pub conditions: Vec<Assign>,
    /// Settings (`set` ones for modify; all the others for add).
    pub settings: Vec<Assign>,
    /// `format=` columns, as given.
    pub format: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SacctmgrError {
    #[error("No command given")]
    NoCommand,
    #[error("Unknown command \"{0}\": expected add, modify, delete or show")]
    UnknownVerb(String),
    #[error("Unknown entity \"{0}\": expected qos, account, user or association")]
    UnknownEntity(String),
    #[error("too many words (at most {WORDS_MAX})")]
    TooManyWords,
    #[error("\"{0}\" needs a name")]
    NoName(&'static str),
    #[error("Unknown option: {0}")]
    UnknownKey(String),
    #[error("{key} is not supported by Berth: {why}")]
    Unsupported { key: String, why: &'static str },
    #[error("Bad value \"{value}\" for {key}: {why}")]
    BadValue {
        key: String,
        value: String,
        why: String,
    },
    #[error("{0} cannot be used with += or -=")]
    NotAList(String),
    #[error("Unknown field \"{0}\" in format=")]
    UnknownField(String),
    #[error("{what} \"{name}\" does not exist")]
    Missing { what: &'static str, name: String },
    #[error("{0}")]
    Other(String),
}

fn bad(key: &str, value: &str, why: impl Into<String>) -> SacctmgrError {
    SacctmgrError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

fn parse_assign(word: &str) -> Option<Assign> {
    let eq = word.find('=')?;
    let (head, value) = (&word[..eq], &word[eq + 1..]);
    let (key, op) = if let Some(k) = head.strip_suffix('+') {
        (k, Op::Add)
    } else if let Some(k) = head.strip_suffix('-') {
        (k, Op::Remove)
    } else {
        (head, Op::Set)
    };
    Some(Assign {
        key: key.to_ascii_lowercase(),
        op,
        value: value.to_string(),
    })
}

/// Parses the words after sacctmgr's own options.
pub fn parse_request(words: &[String]) -> Result<Request, SacctmgrError> {
    if words.len() > WORDS_MAX {
        return Err(SacctmgrError::TooManyWords);
    }
    let mut it = words.iter();
    let verb_word = it.next().ok_or(SacctmgrError::NoCommand)?;
    let verb = match verb_word.to_ascii_lowercase().as_str() {
        "add" | "create" => Verb::Add,
        "modify" | "update" => Verb::Modify,
        "delete" | "remove" => Verb::Delete,
        "show" | "list" => Verb::Show,
        _ => return Err(SacctmgrError::UnknownVerb(verb_word.clone())),
    };
    let entity_word = it.next().ok_or(SacctmgrError::NoCommand)?;
    let entity = match entity_word.to_ascii_lowercase().as_str() {
        "qos" => Entity::Qos,
        "account" | "accounts" => Entity::Account,
        "user" | "users" => Entity::User,
        "association" | "associations" | "assoc" => Entity::Association,
        _ => return Err(SacctmgrError::UnknownEntity(entity_word.clone())),
    };
    let mut request = Request {
        verb,
        entity,
        names: Vec::new(),
        conditions: Vec::new(),
        settings: Vec::new(),
        format: None,
    };
    // Before `set` (modify) words are conditions; for add, settings.
    let mut in_set = verb == Verb::Add;
    for word in it {
        let lower = word.to_ascii_lowercase();
        if lower == "where" {
            in_set = false;
            continue;
        }
        if lower == "set" {
            if verb != Verb::Modify {
                return Err(SacctmgrError::Other(format!(
                    "\"set\" is only for modify, not {verb_word}"
                )));
            }
            in_set = true;
            continue;
        }
        match parse_assign(word) {
            None => {
                if in_set && verb == Verb::Modify {
                    return Err(SacctmgrError::UnknownKey(word.clone()));
                }
                request.names.extend(split_list(word, "Name")?);
            }
            Some(a) if a.key == "format" => {
                request.format = Some(split_list(&a.value, "format")?);
            }
            Some(a)
                if (a.key == "name" || a.key == "names") && !(in_set && verb == Verb::Modify) =>
            {
                request.names.extend(split_list(&a.value, "Name")?);
            }
            Some(a) if in_set => request.settings.push(a),
            Some(a) => request.conditions.push(a),
        }
    }
    if verb == Verb::Modify && request.settings.is_empty() {
        return Err(SacctmgrError::Other(
            "modify needs settings after \"set\"".to_string(),
        ));
    }
    if verb != Verb::Show && request.names.is_empty() && entity != Entity::Association {
        return Err(SacctmgrError::NoName(entity.label()));
    }
    Ok(request)
}

fn split_list(text: &str, key: &str) -> Result<Vec<String>, SacctmgrError> {
    let items: Vec<String> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if items.len() > LIST_ITEMS_MAX {
        return Err(bad(
            key,
            text,
            format!("more than {LIST_ITEMS_MAX} entries"),
        ));
    }
    Ok(items)
}

/// A TRES key in Slurm's spelling to the API's.
fn tres_key(name: &str) -> Option<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "cpu" => Some("cpu"),
        "mem" => Some("mem_mb"),
        "node" => Some("node"),
        "gres/gpu" | "gpu" => Some("gpu"),
        "gres/emu" | "emu" => Some("emu"),
        _ => None,
    }
}

/// Applies `cpu=24,mem=100G,gres/gpu=4` to a TRES map; `-1` removes a key.
pub fn apply_tres(
    map: &mut HashMap<String, u64>,
    key: &str,
    value: &str,
) -> Result<(), SacctmgrError> {
    for item in split_list(value, key)? {
        let (name, amount) = item
            .split_once('=')
            .ok_or_else(|| bad(key, value, format!("\"{item}\" is not NAME=COUNT")))?;
        let api_key = tres_key(name).ok_or_else(|| {
            bad(
                key,
                value,
                format!("unknown TRES \"{name}\" (cpu, mem, node, gres/gpu, gres/emu)"),
            )
        })?;
        if amount == "-1" {
            map.remove(api_key);
            continue;
        }
        let count = if api_key == "mem_mb" {
            parse_mem_mb(amount).map_err(|e| bad(key, value, e.to_string()))?
        } else {
            amount
                .parse::<u64>()
                .map_err(|_| bad(key, value, format!("\"{amount}\" is not a count")))?
        };
        map.insert(api_key.to_string(), count);
    }
    Ok(())
}

/// TRES map as Slurm prints it: sorted, `mem` in M, GPUs as gres/gpu.
pub fn format_tres(map: &HashMap<String, u64>) -> String {
    let mut items: Vec<(String, String)> = map
        .iter()
        .map(|(k, v)| match k.as_str() {
            "mem_mb" => ("mem".to_string(), format!("{v}M")),
            "gpu" => ("gres/gpu".to_string(), v.to_string()),
            "emu" => ("gres/emu".to_string(), v.to_string()),
            other => (other.to_string(), v.to_string()),
        })
        .collect();
    items.sort();
    items
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn number<T: std::str::FromStr>(a: &Assign) -> Result<T, SacctmgrError> {
    a.value
        .parse::<T>()
        .map_err(|_| bad(&a.key, &a.value, "not a number"))
}

/// `-1` clears an optional count, as in Slurm.
fn optional_count(a: &Assign) -> Result<Option<u32>, SacctmgrError> {
    if a.value == "-1" {
        return Ok(None);
    }
    number(a).map(Some)
}

fn optional_time(a: &Assign) -> Result<Option<u64>, SacctmgrError> {
    if a.value == "-1" {
        return Ok(None);
    }
    parse_time_limit(&a.value)
        .map(Some)
        .map_err(|e| bad(&a.key, &a.value, e.to_string()))
}

fn apply_list(list: &mut Vec<String>, a: &Assign) -> Result<(), SacctmgrError> {
    let items = split_list(&a.value, &a.key)?;
    match a.op {
        Op::Set => *list = items,
        Op::Add => {
            for item in items {
                if !list.contains(&item) {
                    list.push(item);
                }
            }
        }
        Op::Remove => list.retain(|x| !items.contains(x)),
    }
    Ok(())
}

fn scalar(a: &Assign) -> Result<(), SacctmgrError> {
    if a.op != Op::Set {
        return Err(SacctmgrError::NotAList(a.key.clone()));
    }
    Ok(())
}

fn unsupported(key: &str) -> Option<&'static str> {
    Some(match key {
        "description" | "descr" => "descriptions are not stored",
        "organization" | "org" => "organizations are not stored",
        "adminlevel" | "admin" => "admin rights come from tokens (berth admin token issue)",
        "cluster" | "clusters" => "a Berth cluster is one cluster",
        _ => return None,
    })
}

/// Applies limit keys shared by QOS and associations; false when `a` is
/// not one of them.
fn apply_limit(limits: &mut Limits, a: &Assign, qos: bool) -> Result<bool, SacctmgrError> {
    let key = a.key.as_str();
    let map = match key {
        "grptres" => Some(&mut limits.grp_tres),
        "grptresmins" => Some(&mut limits.grp_tres_mins),
        "maxtres" | "maxtresperjob" | "maxtresperjobs" => Some(&mut limits.max_tres_per_job),
        "maxtrespernode" | "maxtrespn" => Some(&mut limits.max_tres_per_node),
        "maxtresperuser" | "maxtrespu" if qos => Some(&mut limits.max_tres_per_user),
        "mintres" | "mintresperjob" if qos => Some(&mut limits.min_tres_per_job),
        _ => None,
    };
    if let Some(map) = map {
        scalar(a)?;
        apply_tres(map, key, &a.value)?;
        return Ok(true);
    }
    match key {
        "grpjobs" => limits.grp_jobs = optional_count(a)?,
        "grpsubmitjobs" | "grpsubmit" => limits.grp_submit_jobs = optional_count(a)?,
        "grpwall" => limits.grp_wall_s = optional_time(a)?,
        "maxwall" | "maxwalldurationperjob" => limits.max_wall_s = optional_time(a)?,
        "maxjobsperuser" | "maxjobspu" if qos => limits.max_jobs_per_user = optional_count(a)?,
        "maxjobs" if !qos => limits.max_jobs_per_user = optional_count(a)?,
        "maxsubmitjobsperuser" | "maxsubmitpu" if qos => {
            limits.max_submit_jobs_per_user = optional_count(a)?
        }
        "maxsubmitjobs" | "maxsubmit" if !qos => {
            limits.max_submit_jobs_per_user = optional_count(a)?
        }
        _ => return Ok(false),
    }
    scalar(a)?;
    Ok(true)
}

/// Applies settings to a QOS.
pub fn apply_qos(qos: &mut Qos, settings: &[Assign]) -> Result<(), SacctmgrError> {
    for a in settings {
        if let Some(why) = unsupported(&a.key) {
            return Err(SacctmgrError::Unsupported {
                key: a.key.clone(),
                why,
            });
        }
        let limits = qos.limits.get_or_insert_with(Limits::default);
        if apply_limit(limits, a, true)? {
            continue;
        }
        match a.key.as_str() {
            "priority" => {
                scalar(a)?;
                qos.priority = number(a)?;
            }
            "preempt" => apply_list(&mut qos.preempt, a)?,
            // -1 clears, as for every limit (Slurm's wording); only as a
            // plain set, since "add or remove -1" means nothing.
            "flags" if a.value == "-1" => {
                if a.op != Op::Set {
                    return Err(bad(&a.key, &a.value, "-1 clears all flags: use Flags=-1"));
                }
                qos.flags.clear();
            }
            "flags" => apply_list(&mut qos.flags, a)?,
            "gracetime" => {
                scalar(a)?;
                // 0 is "none" on the wire: the agents' stop grace applies.
                qos.grace_time_s = if a.value == "-1" { 0 } else { number(a)? };
            }
            "usagefactor" => {
                scalar(a)?;
                // Unset rather than 1.0, so the default stays the
                // server's to decide.
                qos.usage_factor = if a.value == "-1" {
                    None
                } else {
                    Some(number(a)?)
                };
            }
            "usagethreshold" | "usagethres" => {
                scalar(a)?;
                qos.usage_threshold = if a.value == "-1" {
                    None
                } else {
                    Some(number(a)?)
                };
            }
            "preemptmode" => {
                scalar(a)?;
                qos.preempt_mode = match a.value.to_ascii_lowercase().as_str() {
                    // Unset: the partition's mode applies.
                    "" | "off" | "-1" => String::new(),
                    m @ ("requeue" | "cancel" | "suspend") => m.to_string(),
                    _ => return Err(bad(&a.key, &a.value, "expected Requeue, Cancel or Off")),
                };
            }
            "preemptexempttime" => {
                scalar(a)?;
                qos.preempt_exempt_time_s = optional_time(a)?;
            }
            "idlefillpreemptable" => {
                scalar(a)?;
                qos.idle_fill_preemptable = match a.value.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "1" => true,
                    "no" | "false" | "0" => false,
                    _ => return Err(bad(&a.key, &a.value, "expected yes or no")),
                };
            }
            _ => return Err(SacctmgrError::UnknownKey(a.key.clone())),
        }
    }
    Ok(())
}

/// Applies settings to an account (`add account` / `modify account`).
pub fn apply_account(account: &mut Account, settings: &[Assign]) -> Result<(), SacctmgrError> {
    for a in settings {
        if let Some(why) = unsupported(&a.key) {
            return Err(SacctmgrError::Unsupported {
                key: a.key.clone(),
                why,
            });
        }
        let limits = account.limits.get_or_insert_with(Limits::default);
        if apply_limit(limits, a, false)? {
            continue;
        }
        match a.key.as_str() {
            "parent" => {
                scalar(a)?;
                account.parent = a.value.clone();
            }
            "fairshare" | "shares" | "share" => {
                scalar(a)?;
                account.shares = number(a)?;
            }
            "defaultqos" | "defqos" => {
                scalar(a)?;
                account.default_qos = a.value.clone();
            }
            "qos" | "qoslevel" => apply_list(&mut account.qos, a)?,
            "preempt" => apply_list(&mut account.preempt, a)?,
            "priority" => {
                scalar(a)?;
                account.priority = number(a)?;
            }
            "maxpriority" => {
                scalar(a)?;
                account.max_priority = number(a)?;
            }
            _ => return Err(SacctmgrError::UnknownKey(a.key.clone())),
        }
    }
    Ok(())
}

/// What `add/modify user` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserChange {
    /// Accounts the user joins (`Account=`/`Accounts=`).
    pub join: Vec<String>,
    pub default_account: Option<String>,
    pub priority: Option<i64>,
}

pub fn user_change(settings: &[Assign]) -> Result<UserChange, SacctmgrError> {
    let mut change = UserChange::default();
    for a in settings {
        if let Some(why) = unsupported(&a.key) {
            return Err(SacctmgrError::Unsupported {
                key: a.key.clone(),
                why,
            });
        }
        scalar(a)?;
        match a.key.as_str() {
            "account" | "accounts" => change.join = split_list(&a.value, &a.key)?,
            "defaultaccount" | "defaccount" => change.default_account = Some(a.value.clone()),
            "priority" => change.priority = Some(number(a)?),
            _ => return Err(SacctmgrError::UnknownKey(a.key.clone())),
        }
    }
    Ok(change)
}

/// Applies a user change to the user's own record.
pub fn apply_user(user: &mut User, change: &UserChange) {
    if let Some(d) = &change.default_account {
        user.default_account = d.clone();
    }
    if let Some(p) = change.priority {
        user.priority = p;
    }
    if user.default_account.is_empty() {
        if let Some(first) = change.join.first() {
            user.default_account = first.clone();
        }
    }
}

/// A column of a `show` table: name, width, and how to read a value.
struct Col<T> {
    name: &'static str,
    width: usize,
    get: fn(&T) -> String,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn wall(v: Option<u64>) -> String {
    v.map(format_time_limit).unwrap_or_default()
}

fn lim<T>(f: fn(&Limits) -> T) -> impl Fn(&Option<Limits>) -> T {
    move |l| f(&l.clone().unwrap_or_default())
}

fn qos_columns() -> Vec<Col<Qos>> {
    vec![
        Col {
            name: "Name",
            width: 10,
            get: |q| q.name.clone(),
        },
        Col {
            name: "Priority",
            width: 10,
            get: |q| q.priority.to_string(),
        },
        Col {
            name: "GraceTime",
            width: 10,
            get: |q| format_time_limit(q.grace_time_s).replace("Partition_Limit", "00:00:00"),
        },
        Col {
            name: "Preempt",
            width: 10,
            get: |q| q.preempt.join(","),
        },
        Col {
            name: "PreemptMode",
            width: 11,
            get: |q| {
                if q.preempt_mode.is_empty() {
                    "cluster".to_string()
                } else {
                    q.preempt_mode.clone()
                }
            },
        },
        Col {
            name: "PreemptExemptTime",
            width: 19,
            get: |q| {
                q.preempt_exempt_time_s
                    .map(format_time_limit)
                    .unwrap_or_default()
            },
        },
        Col {
            name: "Flags",
            width: 10,
            get: |q| q.flags.join(","),
        },
        Col {
            name: "UsageThres",
            width: 10,
            get: |q| opt(q.usage_threshold),
        },
        Col {
            name: "UsageFactor",
            width: 11,
            get: |q| format!("{:.6}", q.usage_factor.unwrap_or(1.0)),
        },
        Col {
            name: "GrpTRES",
            width: 13,
            get: |q| lim(|l| format_tres(&l.grp_tres))(&q.limits),
        },
        Col {
            name: "GrpTRESMins",
            width: 13,
            get: |q| lim(|l| format_tres(&l.grp_tres_mins))(&q.limits),
        },
        Col {
            name: "GrpJobs",
            width: 7,
            get: |q| lim(|l| opt(l.grp_jobs))(&q.limits),
        },
        Col {
            name: "GrpSubmit",
            width: 9,
            get: |q| lim(|l| opt(l.grp_submit_jobs))(&q.limits),
        },
        Col {
            name: "GrpWall",
            width: 11,
            get: |q| lim(|l| wall(l.grp_wall_s))(&q.limits),
        },
        Col {
            name: "MaxTRES",
            width: 13,
            get: |q| lim(|l| format_tres(&l.max_tres_per_job))(&q.limits),
        },
        Col {
            name: "MaxTRESPerNode",
            width: 14,
            get: |q| lim(|l| format_tres(&l.max_tres_per_node))(&q.limits),
        },
        Col {
            name: "MaxWall",
            width: 11,
            get: |q| lim(|l| wall(l.max_wall_s))(&q.limits),
        },
        Col {
            name: "MaxTRESPU",
            width: 13,
            get: |q| lim(|l| format_tres(&l.max_tres_per_user))(&q.limits),
        },
        Col {
            name: "MaxJobsPU",
            width: 9,
            get: |q| lim(|l| opt(l.max_jobs_per_user))(&q.limits),
        },
        Col {
            name: "MaxSubmitPU",
            width: 11,
            get: |q| lim(|l| opt(l.max_submit_jobs_per_user))(&q.limits),
        },
        Col {
            name: "MinTRES",
            width: 13,
            get: |q| lim(|l| format_tres(&l.min_tres_per_job))(&q.limits),
        },
    ]
}

/// `show qos` without format=: Slurm's default columns that Berth has.
pub const QOS_DEFAULT_FORMAT: &str = "Name,Priority,GraceTime,Preempt,Flags,UsageThres,UsageFactor,GrpTRES,GrpTRESMins,GrpJobs,GrpSubmit,GrpWall,MaxTRES,MaxTRESPerNode,MaxWall,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MinTRES";

/// One association: an account (no user) or a user under an account.
#[derive(Debug, Clone, PartialEq)]
pub struct Assoc {
    pub account: Account,
    pub user: Option<String>,
}

fn assoc_columns() -> Vec<Col<Assoc>> {
    vec![
        Col {
            name: "Cluster",
            width: 10,
            get: |_| "berth".to_string(),
        },
        Col {
            name: "Account",
            width: 10,
            get: |a| a.account.name.clone(),
        },
        Col {
            name: "User",
            width: 10,
            get: |a| a.user.clone().unwrap_or_default(),
        },
        Col {
            name: "Parent",
            width: 10,
            get: |a| {
                if a.user.is_some() {
                    String::new()
                } else {
                    a.account.parent.clone()
                }
            },
        },
        Col {
            name: "Share",
            width: 9,
            get: |a| {
                if a.user.is_some() {
                    "1".to_string()
                } else {
                    a.account.shares.to_string()
                }
            },
        },
        Col {
            name: "Priority",
            width: 10,
            get: |a| {
                if a.user.is_some() {
                    String::new()
                } else {
                    a.account.priority.to_string()
                }
            },
        },
        Col {
            name: "GrpJobs",
            width: 7,
            get: |a| lim(|l| opt(l.grp_jobs))(&a.account.limits),
        },
        Col {
            name: "GrpTRES",
            width: 13,
            get: |a| lim(|l| format_tres(&l.grp_tres))(&a.account.limits),
        },
        Col {
            name: "GrpSubmit",
            width: 9,
            get: |a| lim(|l| opt(l.grp_submit_jobs))(&a.account.limits),
        },
        Col {
            name: "GrpWall",
            width: 11,
            get: |a| lim(|l| wall(l.grp_wall_s))(&a.account.limits),
        },
        Col {
            name: "GrpTRESMins",
            width: 13,
            get: |a| lim(|l| format_tres(&l.grp_tres_mins))(&a.account.limits),
        },
        Col {
            name: "MaxJobs",
            width: 7,
            get: |a| lim(|l| opt(l.max_jobs_per_user))(&a.account.limits),
        },
        Col {
            name: "MaxTRES",
            width: 13,
            get: |a| lim(|l| format_tres(&l.max_tres_per_job))(&a.account.limits),
        },
        Col {
            name: "MaxTRESPerNode",
            width: 14,
            get: |a| lim(|l| format_tres(&l.max_tres_per_node))(&a.account.limits),
        },
        Col {
            name: "MaxSubmit",
            width: 9,
            get: |a| lim(|l| opt(l.max_submit_jobs_per_user))(&a.account.limits),
        },
        Col {
            name: "MaxWall",
            width: 11,
            get: |a| lim(|l| wall(l.max_wall_s))(&a.account.limits),
        },
        Col {
            name: "QOS",
            width: 20,
            get: |a| allowed_qos(&a.account).join(","),
        },
        Col {
            name: "Def QOS",
            width: 9,
            get: |a| a.account.default_qos.clone(),
        },
        Col {
            name: "Preempt",
            width: 10,
            get: |a| {
                if a.user.is_some() {
                    String::new()
                } else {
                    a.account.preempt.join(",")
                }
            },
        },
    ]
}

/// The QOS an account's jobs may use: the default first, then the list.
fn allowed_qos(account: &Account) -> Vec<String> {
    let mut all = Vec::new();
    if !account.default_qos.is_empty() {
        all.push(account.default_qos.clone());
    }
    for q in &account.qos {
        if !all.contains(q) {
            all.push(q.clone());
        }
    }
    if all.is_empty() {
        all.push("normal".to_string());
    }
    all
}

pub const ASSOC_DEFAULT_FORMAT: &str = "Cluster,Account,User,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,GrpWall,GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,MaxWall,QOS,Def QOS";

fn account_columns() -> Vec<Col<Account>> {
    vec![
        Col {
            name: "Account",
            width: 10,
            get: |a| a.name.clone(),
        },
        Col {
            name: "Parent",
            width: 10,
            get: |a| a.parent.clone(),
        },
        Col {
            name: "Share",
            width: 9,
            get: |a| a.shares.to_string(),
        },
        Col {
            name: "Priority",
            width: 10,
            get: |a| a.priority.to_string(),
        },
        Col {
            name: "Def QOS",
            width: 9,
            get: |a| a.default_qos.clone(),
        },
        Col {
            name: "QOS",
            width: 20,
            get: |a| allowed_qos(a).join(","),
        },
        Col {
            name: "Preempt",
            width: 10,
            get: |a| a.preempt.join(","),
        },
        Col {
            name: "Users",
            width: 20,
            get: |a| a.users.join(","),
        },
    ]
}

/// Preempt is Berth's own (Slurm's accounts have no preempt list), so it
/// goes last, where a script reading Slurm's columns by position does
/// not trip on it.
pub const ACCOUNT_DEFAULT_FORMAT: &str = "Account,Parent,Share,Priority,Def QOS,QOS,Preempt";

fn user_columns() -> Vec<Col<User>> {
    vec![
        Col {
            name: "User",
            width: 10,
            get: |u| u.name.clone(),
        },
        Col {
            name: "Def Acct",
            width: 10,
            get: |u| u.default_account.clone(),
        },
        Col {
            name: "Priority",
            width: 10,
            get: |u| u.priority.to_string(),
        },
    ]
}

pub const USER_DEFAULT_FORMAT: &str = "User,Def Acct,Priority";

fn table<T>(
    all: Vec<Col<T>>,
    format: &[String],
    items: &[T],
    layout: Layout,
    noheader: bool,
) -> Result<String, SacctmgrError> {
    let mut cols = Vec::new();
    for spec in format {
        let (name, width) = match spec.split_once('%') {
            Some((n, w)) => (
                n,
                Some(
                    w.parse::<usize>()
                        .ok()
                        .filter(|w| (1..=1024).contains(w))
                        .ok_or_else(|| bad("format", spec, "width must be 1 to 1024"))?,
                ),
            ),
            None => (spec.as_str(), None),
        };
        let squash = |s: &str| s.replace(' ', "").to_ascii_lowercase();
        let col = all
            .iter()
            .find(|c| squash(c.name) == squash(name))
            .ok_or_else(|| SacctmgrError::UnknownField(name.to_string()))?;
        cols.push((col.name, width.unwrap_or(col.width), col.get));
    }
    let names: Vec<String> = cols.iter().map(|c| c.0.to_string()).collect();
    let widths: Vec<usize> = cols.iter().map(|c| c.1).collect();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| cols.iter().map(|c| (c.2)(item)).collect())
        .collect();
    Ok(render_columns(
        &names,
        &widths,
        &[],
        &rows,
        layout,
        noheader,
    ))
}

fn format_or(format: &Option<Vec<String>>, default: &str) -> Vec<String> {
    format
        .clone()
        .unwrap_or_else(|| default.split(',').map(str::to_string).collect())
}

pub fn show_qos(
    qos: &[Qos],
    format: &Option<Vec<String>>,
    layout: Layout,
    noheader: bool,
) -> Result<String, SacctmgrError> {
    table(
        qos_columns(),
        &format_or(format, QOS_DEFAULT_FORMAT),
        qos,
        layout,
        noheader,
    )
}

pub fn show_accounts(
    accounts: &[Account],
    format: &Option<Vec<String>>,
    layout: Layout,
    noheader: bool,
) -> Result<String, SacctmgrError> {
    table(
        account_columns(),
        &format_or(format, ACCOUNT_DEFAULT_FORMAT),
        accounts,
        layout,
        noheader,
    )
}

pub fn show_users(
    users: &[User],
    format: &Option<Vec<String>>,
    layout: Layout,
    noheader: bool,
) -> Result<String, SacctmgrError> {
    table(
        user_columns(),
        &format_or(format, USER_DEFAULT_FORMAT),
        users,
        layout,
        noheader,
    )
}

/// Every association: each account, then each of its users.
pub fn associations(accounts: &[Account]) -> Vec<Assoc> {
    let mut out = Vec::new();
    for a in accounts {
        out.push(Assoc {
            account: a.clone(),
            user: None,
        });
        for u in &a.users {
            out.push(Assoc {
                account: a.clone(),
                user: Some(u.clone()),
            });
        }
    }
    out
}

pub fn show_assocs(
    assocs: &[Assoc],
    format: &Option<Vec<String>>,
    layout: Layout,
    noheader: bool,
) -> Result<String, SacctmgrError> {
    table(
        assoc_columns(),
        &format_or(format, ASSOC_DEFAULT_FORMAT),
        assocs,
        layout,
        noheader,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn parses_slurm_syntax() {
        let r = parse_request(&words("add qos name=x priority=10 GrpTRES=cpu=24")).expect("ok");
        assert_eq!((r.verb, r.entity), (Verb::Add, Entity::Qos));
        assert_eq!(r.names, ["x"]);
        assert_eq!(r.settings.len(), 2);
        assert_eq!(r.settings[1].key, "grptres");
        assert_eq!(r.settings[1].value, "cpu=24");

        let r = parse_request(&words("modify qos x set priority=10")).expect("ok");
        assert_eq!(r.names, ["x"]);
        assert_eq!(r.settings[0].key, "priority");

        let r =
            parse_request(&words("modify account where name=proj set qos+=alligator")).expect("ok");
        assert_eq!(r.names, ["proj"]);
        assert_eq!(r.settings[0].op, Op::Add);

        let r = parse_request(&words("show qos format=Name,Priority,GrpTRES")).expect("ok");
        assert_eq!(r.format, Some(words("Name Priority GrpTRES")));
        assert_eq!(
            parse_request(&words("list assoc")).expect("ok").entity,
            Entity::Association
        );
    }

    #[test]
    fn bad_commands_are_named() {
        let err = |s: &str| parse_request(&words(s)).unwrap_err().to_string();
        assert_eq!(
            err("frob qos"),
            "Unknown command \"frob\": expected add, modify, delete or show"
        );
        assert_eq!(
            err("add cluster x"),
            "Unknown entity \"cluster\": expected qos, account, user or association"
        );
        assert_eq!(err("add qos"), "\"QOS\" needs a name");
        assert_eq!(err("modify qos x"), "modify needs settings after \"set\"");
        assert_eq!(err("modify qos x set bogus"), "Unknown option: bogus");
        assert_eq!(
            err("add qos x set priority=1"),
            "\"set\" is only for modify, not add"
        );
    }

    #[test]
    fn qos_settings_apply() {
        let mut q = Qos {
            name: "x".into(),
            preempt: vec!["low".into()],
            ..Default::default()
        };
        let r = parse_request(&words(
            "modify qos x set priority=10 GrpTRES=cpu=24,mem=1G,gres/gpu=4 MaxWall=2:00:00 preempt+=scavenger MaxJobsPU=3 Flags=DenyOnLimit UsageFactor=0.5",
        ))
        .expect("ok");
        apply_qos(&mut q, &r.settings).expect("valid");
        assert_eq!(q.priority, 10);
        assert_eq!(q.preempt, ["low", "scavenger"]);
        let l = q.limits.clone().expect("limits");
        assert_eq!(format_tres(&l.grp_tres), "cpu=24,gres/gpu=4,mem=1024M");
        assert_eq!(l.max_wall_s, Some(7200));
        assert_eq!(l.max_jobs_per_user, Some(3));
        assert_eq!(q.usage_factor, Some(0.5));
        let r = parse_request(&words(
            "modify qos x set GrpTRES=cpu=-1 MaxWall=-1 preempt-=low",
        ))
        .expect("ok");
        apply_qos(&mut q, &r.settings).expect("valid");
        let l = q.limits.clone().expect("limits");
        assert_eq!(format_tres(&l.grp_tres), "gres/gpu=4,mem=1024M");
        assert_eq!(l.max_wall_s, None);
        assert_eq!(q.preempt, ["scavenger"]);
    }

    #[test]
    fn bad_settings_are_refused() {
        let err = |s: &str| {
            let r = parse_request(&words(s)).expect("parses");
            let mut q = Qos::default();
            apply_qos(&mut q, &r.settings).unwrap_err().to_string()
        };
        assert_eq!(err("add qos x GrpTRES=cpus=1"), "Bad value \"cpus=1\" for grptres: unknown TRES \"cpus\" (cpu, mem, node, gres/gpu, gres/emu)");
        assert_eq!(
            err("add qos x GrpTRES=cpu"),
            "Bad value \"cpu\" for grptres: \"cpu\" is not NAME=COUNT"
        );
        assert_eq!(
            err("add qos x GrpTRES=cpu=x"),
            "Bad value \"cpu=x\" for grptres: \"x\" is not a count"
        );
        assert_eq!(
            err("add qos x priority=high"),
            "Bad value \"high\" for priority: not a number"
        );
        assert_eq!(
            err("add qos x priority+=1"),
            "priority cannot be used with += or -="
        );
        assert_eq!(
            err("add qos x Organization=physics"),
            "organization is not supported by Berth: organizations are not stored"
        );
        assert_eq!(
            err("add qos x PreemptMode=gang"),
            "Bad value \"gang\" for preemptmode: expected Requeue, Cancel or Off"
        );
        assert_eq!(
            err("add qos x IdleFillPreemptable=maybe"),
            "Bad value \"maybe\" for idlefillpreemptable: expected yes or no"
        );
        assert!(err("add qos x MaxWall=1:xx").starts_with("Bad value \"1:xx\" for maxwall"));
        assert_eq!(err("add qos x Bogus=1"), "Unknown option: bogus");
    }

    #[test]
    fn negative_priority_is_accepted_and_shown() {
        let mut q = Qos {
            name: "burst".into(),
            ..Default::default()
        };
        let r = parse_request(&words("modify qos burst set priority=-1000000")).expect("ok");
        apply_qos(&mut q, &r.settings).expect("a negative priority is valid");
        assert_eq!(q.priority, -1_000_000);
        let format = Some(words("Name Priority"));
        assert_eq!(
            show_qos(std::slice::from_ref(&q), &format, Layout::Parsable2, true).expect("ok"),
            "burst|-1000000\n"
        );
        assert_eq!(
            show_qos(&[q], &format, Layout::Columns, false).expect("ok"),
            "      Name   Priority \n\
             ---------- ---------- \n\
             \x20    burst   -1000000 \n"
        );
    }

    #[test]
    fn flags_and_usage_factor_clear_with_minus_one() {
        let mut q = Qos::default();
        let set = |q: &mut Qos, line: &str| {
            let r = parse_request(&words(line)).expect("parses");
            apply_qos(q, &r.settings)
        };
        set(
            &mut q,
            "modify qos x set Flags=DenyOnLimit,NoDecay UsageFactor=2",
        )
        .expect("valid");
        assert_eq!(q.flags, ["DenyOnLimit", "NoDecay"]);
        assert_eq!(q.usage_factor, Some(2.0));
        set(&mut q, "modify qos x set Flags=-1 UsageFactor=-1").expect("-1 clears");
        assert!(q.flags.is_empty());
        assert_eq!(q.usage_factor, None);
        assert_eq!(
            show_qos(
                &[q.clone()],
                &Some(words("Flags UsageFactor")),
                Layout::Parsable2,
                true
            )
            .expect("ok"),
            "|1.000000\n"
        );
        assert_eq!(
            set(&mut q, "modify qos x set Flags+=-1")
                .unwrap_err()
                .to_string(),
            "Bad value \"-1\" for flags: -1 clears all flags: use Flags=-1"
        );
        assert_eq!(
            set(&mut q, "modify qos x set UsageFactor+=-1")
                .unwrap_err()
                .to_string(),
            "usagefactor cannot be used with += or -="
        );
    }

    /// GraceTime and UsageThreshold clear with -1 too, as every limit does.
    #[test]
    fn grace_time_and_usage_threshold_clear_with_minus_one() {
        let mut q = Qos::default();
        let set = |q: &mut Qos, line: &str| {
            let r = parse_request(&words(line)).expect("parses");
            apply_qos(q, &r.settings)
        };
        set(&mut q, "modify qos x set GraceTime=60 UsageThreshold=0.5").expect("valid");
        assert_eq!((q.grace_time_s, q.usage_threshold), (60, Some(0.5)));
        set(&mut q, "modify qos x set GraceTime=-1 UsageThreshold=-1").expect("-1 clears");
        assert_eq!((q.grace_time_s, q.usage_threshold), (0, None));
    }

    #[test]
    fn preemption_and_idle_fill_settings() {
        let mut q = Qos::default();
        let r = parse_request(&words(
            "modify qos x set PreemptMode=Cancel PreemptExemptTime=5:00 IdleFillPreemptable=yes",
        ))
        .expect("ok");
        apply_qos(&mut q, &r.settings).expect("apply");
        assert_eq!(q.preempt_mode, "cancel");
        assert_eq!(q.preempt_exempt_time_s, Some(300));
        assert!(q.idle_fill_preemptable);
        let r = parse_request(&words(
            "modify qos x set PreemptMode=Off PreemptExemptTime=-1",
        ))
        .expect("ok");
        apply_qos(&mut q, &r.settings).expect("apply");
        assert_eq!(
            (q.preempt_mode.as_str(), q.preempt_exempt_time_s),
            ("", None)
        );
    }

    #[test]
    fn account_and_user_settings() {
        let mut a = Account {
            name: "proj".into(),
            ..Default::default()
        };
        let r = parse_request(&words("add account proj parent=root fairshare=5 defaultqos=normal qos=normal,high GrpJobs=10 MaxJobs=2")).expect("ok");
        apply_account(&mut a, &r.settings).expect("valid");
        assert_eq!((a.parent.as_str(), a.shares), ("root", 5));
        assert_eq!(a.qos, ["normal", "high"]);
        let l = a.limits.clone().expect("limits");
        assert_eq!((l.grp_jobs, l.max_jobs_per_user), (Some(10), Some(2)));
        let r = parse_request(&words("add user bob account=proj")).expect("ok");
        let change = user_change(&r.settings).expect("valid");
        let mut u = User {
            name: "bob".into(),
            ..Default::default()
        };
        apply_user(&mut u, &change);
        assert_eq!(u.default_account, "proj");
    }

    #[test]
    fn account_preempt_lists() {
        let mut a = Account {
            name: "proj".into(),
            users: vec!["bob".into()],
            ..Default::default()
        };
        let set = |a: &mut Account, line: &str| {
            let r = parse_request(&words(line)).expect("parses");
            apply_account(a, &r.settings)
        };
        set(&mut a, "modify account proj set Preempt=chem,bio").expect("valid");
        assert_eq!(a.preempt, ["chem", "bio"]);
        set(&mut a, "modify account proj set preempt+=bio,scav").expect("valid");
        assert_eq!(a.preempt, ["chem", "bio", "scav"]);
        set(&mut a, "modify account proj set preempt-=chem").expect("valid");
        assert_eq!(a.preempt, ["bio", "scav"]);
        assert_eq!(
            show_accounts(std::slice::from_ref(&a), &None, Layout::Parsable2, false).expect("ok"),
            "Account|Parent|Share|Priority|Def QOS|QOS|Preempt\nproj||0|0||normal|bio,scav\n"
        );
        assert_eq!(
            show_assocs(
                &associations(std::slice::from_ref(&a)),
                &Some(words("Account User Preempt")),
                Layout::Parsable2,
                false
            )
            .expect("ok"),
            "Account|User|Preempt\nproj||bio,scav\nproj|bob|\n"
        );
        set(&mut a, "modify account proj set preempt=").expect("an empty list clears");
        assert!(a.preempt.is_empty());
    }

    #[test]
    fn show_tables() {
        let q = Qos {
            name: "high".into(),
            priority: 10,
            limits: Some(Limits {
                grp_tres: [("cpu".to_string(), 24)].into_iter().collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let format = Some(words("Name Priority GrpTRES"));
        assert_eq!(
            show_qos(std::slice::from_ref(&q), &format, Layout::Columns, false).expect("ok"),
            "      Name   Priority       GrpTRES \n\
             ---------- ---------- ------------- \n\
             \x20     high         10        cpu=24 \n"
        );
        assert_eq!(
            show_qos(&[q], &format, Layout::Parsable2, true).expect("ok"),
            "high|10|cpu=24\n"
        );
        let a = Account {
            name: "proj".into(),
            users: vec!["bob".into()],
            ..Default::default()
        };
        assert_eq!(
            show_assocs(
                &associations(&[a]),
                &Some(words("Account User QOS")),
                Layout::Parsable2,
                false
            )
            .expect("ok"),
            "Account|User|QOS\nproj||normal\nproj|bob|normal\n"
        );
        assert_eq!(
            show_users(&[], &Some(words("bogus")), Layout::Columns, false).unwrap_err(),
            SacctmgrError::UnknownField("bogus".into())
        );
    }
}
