//! `sacctmgr`: QOS, accounts, users and associations in Slurm's syntax,
//! through the admin API. A change is shown, then committed after a `y`
//! at the prompt, or at once with `-i`. Standard input that is not a
//! terminal cannot answer, so without `-i` the change is discarded, as
//! Slurm's sacctmgr discards it when its prompt times out; the exit code
//! is then 1 so a script sees that nothing changed.

use super::{output, GlobalArgs};
use anyhow::{bail, Context as _, Result};
use berth_client::sacct::Layout;
use berth_client::sacctmgr::{
    apply_account, apply_qos, apply_user, associations, parse_request, show_accounts, show_assocs,
    show_qos, show_users, user_change, Entity, Request, Verb,
};
use berth_client::{servers_from, Cluster};
use berth_proto::api::{Account, Qos, User};
use clap::Args;
use serde_json::json;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct SacctmgrArgs {
    /// Commit without asking
    #[arg(short = 'i', long = "immediate")]
    pub immediate: bool,
    /// Leave out the header
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,
    /// Fields separated by '|', one after every field
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,
    /// Fields separated by '|'
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,
    /// Print what `show` finds as JSON
    #[arg(long)]
    pub json: bool,
    /// add|modify|delete|show qos|account|user|association [NAME] [where ...]
    /// [set Key=Value ...] [format=...]
    #[arg(value_name = "COMMAND", trailing_var_arg = true, required = true)]
    pub words: Vec<String>,
}

pub async fn run(global: &GlobalArgs, args: SacctmgrArgs) -> Result<ExitCode> {
    let request = parse_request(&args.words)?;
    let layout = if args.parsable2 {
        Layout::Parsable2
    } else if args.parsable {
        Layout::Parsable
    } else {
        Layout::Columns
    };
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    if request.verb == Verb::Show {
        return show(&mut cluster, &args, &request, layout).await;
    }
    if !request.conditions.is_empty() && request.entity != Entity::User {
        bail!(
            "only names can select what to {:?}: unsupported condition {}=",
            request.verb,
            request.conditions[0].key
        );
    }
    match request.entity {
        Entity::Qos => qos(&mut cluster, &args, &request).await,
        Entity::Account => account(&mut cluster, &args, &request).await,
        Entity::User => user(&mut cluster, &args, &request).await,
        Entity::Association => bail!(
            "associations are changed through accounts and users: sacctmgr add user NAME account=ACCOUNT, modify account NAME set ..."
        ),
    }
}

async fn show(
    cluster: &mut Cluster,
    args: &SacctmgrArgs,
    request: &Request,
    layout: Layout,
) -> Result<ExitCode> {
    let named = |name: &str| request.names.is_empty() || request.names.iter().any(|n| n == name);
    let text = match request.entity {
        Entity::Qos => {
            let mut all = cluster.list_qos().await?;
            all.retain(|q| named(&q.name));
            if args.json {
                output::emit_json(&json!({"qos": all.iter().map(qos_json).collect::<Vec<_>>()}))?;
                return Ok(ExitCode::SUCCESS);
            }
            show_qos(&all, &request.format, layout, args.noheader)?
        }
        Entity::Account => {
            let mut all = cluster.list_accounts().await?;
            all.retain(|a| named(&a.name));
            if args.json {
                output::emit_json(
                    &json!({"accounts": all.iter().map(account_json).collect::<Vec<_>>()}),
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            show_accounts(&all, &request.format, layout, args.noheader)?
        }
        Entity::User => {
            let mut all = cluster.list_users().await?;
            all.retain(|u| named(&u.name));
            if args.json {
                output::emit_json(&json!({"users": all.iter().map(|u| json!({
                    "name": u.name, "priority": u.priority, "default_account": u.default_account,
                })).collect::<Vec<_>>()}))?;
                return Ok(ExitCode::SUCCESS);
            }
            show_users(&all, &request.format, layout, args.noheader)?
        }
        Entity::Association => {
            let accounts = cluster.list_accounts().await?;
            let mut all = associations(&accounts);
            let wanted_users: Vec<&str> = request
                .conditions
                .iter()
                .filter(|c| c.key == "user" || c.key == "users")
                .flat_map(|c| c.value.split(','))
                .collect();
            let wanted_accounts: Vec<&str> = request
                .conditions
                .iter()
                .filter(|c| c.key == "account" || c.key == "accounts")
                .flat_map(|c| c.value.split(','))
                .collect();
            all.retain(|a| {
                (wanted_users.is_empty()
                    || a.user.as_deref().is_some_and(|u| wanted_users.contains(&u)))
                    && (wanted_accounts.is_empty()
                        || wanted_accounts.contains(&a.account.name.as_str()))
            });
            if args.json {
                output::emit_json(&json!({"associations": all.iter().map(|a| json!({
                    "account": a.account.name, "user": a.user, "parent": a.account.parent,
                })).collect::<Vec<_>>()}))?;
                return Ok(ExitCode::SUCCESS);
            }
            show_assocs(&all, &request.format, layout, args.noheader)?
        }
    };
    output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Asks before a change: `-i` says yes, a terminal may say yes, anything
/// else is no.
fn confirmed(args: &SacctmgrArgs) -> Result<bool> {
    if args.immediate {
        return Ok(true);
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        println!(" Changes Discarded (standard input is not a terminal; use -i to commit without asking)");
        return Ok(false);
    }
    print!(" Would you like to commit changes? (You have 30 seconds to decide)\n(N/y): ");
    std::io::stdout()
        .flush()
        .context("cannot write the prompt")?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .context("cannot read the answer")?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes" | "YES");
    if !yes {
        println!(" Changes Discarded");
    }
    Ok(yes)
}

fn done(committed: bool) -> ExitCode {
    if committed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn qos(cluster: &mut Cluster, args: &SacctmgrArgs, request: &Request) -> Result<ExitCode> {
    let existing = cluster.list_qos().await?;
    let find = |name: &str| existing.iter().find(|q| q.name == name).cloned();
    match request.verb {
        Verb::Add | Verb::Modify => {
            let mut changed: Vec<Qos> = Vec::new();
            for name in &request.names {
                let mut q = match (request.verb, find(name)) {
                    (Verb::Add, Some(_)) => bail!("QOS {name} already exists (use modify)"),
                    (Verb::Add, None) => Qos {
                        name: name.clone(),
                        ..Default::default()
                    },
                    (_, Some(q)) => q,
                    (_, None) => bail!("QOS {name} does not exist"),
                };
                apply_qos(&mut q, &request.settings)?;
                changed.push(q);
            }
            let verb = if request.verb == Verb::Add {
                "Adding"
            } else {
                "Modified"
            };
            summary(verb, "QOS", &request.names, &request.settings);
            if !confirmed(args)? {
                return Ok(done(false));
            }
            for q in changed {
                cluster.upsert_qos(q).await?;
            }
        }
        Verb::Delete => {
            for name in &request.names {
                if find(name).is_none() {
                    bail!("QOS {name} does not exist");
                }
            }
            summary("Deleting", "QOS", &request.names, &[]);
            if !confirmed(args)? {
                return Ok(done(false));
            }
            for name in &request.names {
                cluster.delete_qos(name.clone()).await?;
            }
        }
        Verb::Show => unreachable!("show is answered before"),
    }
    Ok(done(true))
}

async fn account(
    cluster: &mut Cluster,
    args: &SacctmgrArgs,
    request: &Request,
) -> Result<ExitCode> {
    let existing = cluster.list_accounts().await?;
    let find = |name: &str| existing.iter().find(|a| a.name == name).cloned();
    match request.verb {
        Verb::Add | Verb::Modify => {
            let mut changed: Vec<Account> = Vec::new();
            for name in &request.names {
                let mut a = match (request.verb, find(name)) {
                    (Verb::Add, Some(_)) => bail!("account {name} already exists (use modify)"),
                    (Verb::Add, None) => Account {
                        name: name.clone(),
                        shares: 1,
                        ..Default::default()
                    },
                    (_, Some(a)) => a,
                    (_, None) => bail!("account {name} does not exist"),
                };
                apply_account(&mut a, &request.settings)?;
                changed.push(a);
            }
            let verb = if request.verb == Verb::Add {
                "Adding"
            } else {
                "Modified"
            };
            summary(verb, "account", &request.names, &request.settings);
            if !confirmed(args)? {
                return Ok(done(false));
            }
            for a in changed {
                cluster.upsert_account(a).await?;
            }
        }
        Verb::Delete => {
            for name in &request.names {
                if find(name).is_none() {
                    bail!("account {name} does not exist");
                }
            }
            summary("Deleting", "account", &request.names, &[]);
            if !confirmed(args)? {
                return Ok(done(false));
            }
            for name in &request.names {
                cluster.delete_account(name.clone()).await?;
            }
        }
        Verb::Show => unreachable!("show is answered before"),
    }
    Ok(done(true))
}

async fn user(cluster: &mut Cluster, args: &SacctmgrArgs, request: &Request) -> Result<ExitCode> {
    let accounts = cluster.list_accounts().await?;
    let users = cluster.list_users().await?;
    let mut account_changes: Vec<Account> = Vec::new();
    let mut user_changes: Vec<User> = Vec::new();
    let account_named = |name: &str, pending: &Vec<Account>| -> Result<Account> {
        pending
            .iter()
            .find(|a| a.name == name)
            .or_else(|| accounts.iter().find(|a| a.name == name))
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("account {name} does not exist"))
    };
    let put = |a: Account, pending: &mut Vec<Account>| {
        pending.retain(|p| p.name != a.name);
        pending.push(a);
    };
    match request.verb {
        Verb::Add | Verb::Modify => {
            // For modify, `where account=` would select associations;
            // only the user's own settings can change here.
            if request.verb == Verb::Modify && !request.conditions.is_empty() {
                bail!("modify user takes only names before \"set\"; association limits live on the account");
            }
            let change = user_change(&request.settings)?;
            for name in &request.names {
                let current = users.iter().find(|u| &u.name == name).cloned();
                let member = accounts.iter().any(|a| a.users.contains(name));
                if request.verb == Verb::Add && change.join.is_empty() && !member {
                    bail!("a new user needs an account: sacctmgr add user {name} account=ACCOUNT");
                }
                if request.verb == Verb::Modify && current.is_none() && !member {
                    bail!("user {name} does not exist");
                }
                for account in &change.join {
                    let mut a = account_named(account, &account_changes)?;
                    if !a.users.contains(name) {
                        a.users.push(name.clone());
                    }
                    put(a, &mut account_changes);
                }
                let mut u = current.unwrap_or(User {
                    name: name.clone(),
                    ..Default::default()
                });
                apply_user(&mut u, &change);
                user_changes.push(u);
            }
            let verb = if request.verb == Verb::Add {
                "Adding"
            } else {
                "Modified"
            };
            summary(verb, "user", &request.names, &request.settings);
        }
        Verb::Delete => {
            let only: Vec<String> = request
                .conditions
                .iter()
                .filter(|c| c.key == "account" || c.key == "accounts")
                .flat_map(|c| c.value.split(',').map(str::to_string))
                .collect();
            if let Some(c) = request
                .conditions
                .iter()
                .find(|c| c.key != "account" && c.key != "accounts")
            {
                bail!("delete user: unsupported condition {}=", c.key);
            }
            for name in &request.names {
                let mut found = false;
                for a in accounts.iter().filter(|a| a.users.contains(name)) {
                    if !only.is_empty() && !only.contains(&a.name) {
                        continue;
                    }
                    let mut a = account_named(&a.name, &account_changes)?;
                    a.users.retain(|u| u != name);
                    put(a, &mut account_changes);
                    found = true;
                }
                if !found {
                    bail!("user {name} has no such association");
                }
            }
            // The user's own settings (priority, default account) stay:
            // the API has no call that deletes them.
            summary("Deleting user associations of", "user", &request.names, &[]);
        }
        Verb::Show => unreachable!("show is answered before"),
    }
    if !confirmed(args)? {
        return Ok(done(false));
    }
    for a in account_changes {
        cluster.upsert_account(a).await?;
    }
    for u in user_changes {
        cluster.upsert_user(u).await?;
    }
    Ok(done(true))
}

fn summary(verb: &str, what: &str, names: &[String], settings: &[berth_client::sacctmgr::Assign]) {
    let mut text = format!(" {verb} {what}(s)\n");
    for n in names {
        text.push_str(&format!("  {n}\n"));
    }
    if !settings.is_empty() {
        text.push_str(" Settings\n");
        for s in settings {
            let op = match s.op {
                berth_client::sacctmgr::Op::Set => "=",
                berth_client::sacctmgr::Op::Add => "+=",
                berth_client::sacctmgr::Op::Remove => "-=",
            };
            text.push_str(&format!("  {:<15}{op} {}\n", s.key, s.value));
        }
    }
    print!("{text}");
}

fn qos_json(q: &Qos) -> serde_json::Value {
    let l = q.limits.clone().unwrap_or_default();
    json!({
        "name": q.name,
        "priority": q.priority,
        "preempt": q.preempt,
        "grace_time_s": q.grace_time_s,
        "flags": q.flags,
        "usage_factor": q.usage_factor,
        "usage_threshold": q.usage_threshold,
        "limits": limits_json(&l),
    })
}

fn account_json(a: &Account) -> serde_json::Value {
    json!({
        "name": a.name,
        "parent": a.parent,
        "shares": a.shares,
        "users": a.users,
        "default_qos": a.default_qos,
        "qos": a.qos,
        "priority": a.priority,
        "max_priority": a.max_priority,
        "preempt": a.preempt,
        "limits": limits_json(&a.limits.clone().unwrap_or_default()),
    })
}

fn limits_json(l: &berth_proto::api::Limits) -> serde_json::Value {
    let sorted = |m: &std::collections::HashMap<String, u64>| {
        m.iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    json!({
        "grp_tres": sorted(&l.grp_tres),
        "grp_tres_mins": sorted(&l.grp_tres_mins),
        "grp_jobs": l.grp_jobs,
        "grp_submit_jobs": l.grp_submit_jobs,
        "grp_wall_s": l.grp_wall_s,
        "max_tres_per_job": sorted(&l.max_tres_per_job),
        "max_tres_per_node": sorted(&l.max_tres_per_node),
        "max_tres_per_user": sorted(&l.max_tres_per_user),
        "max_jobs_per_user": l.max_jobs_per_user,
        "max_submit_jobs_per_user": l.max_submit_jobs_per_user,
        "max_wall_s": l.max_wall_s,
        "min_tres_per_job": sorted(&l.min_tres_per_job),
    })
}
