//! `scontrol`: show job|node|partition|reservation in Slurm's `Key=Value`
//! layout, hold|uhold|release|requeue|requeuehold of jobs, create /
//! delete reservation (`berth_client::reservation`), and `update` of a job
//! (`scontrol_update`).

use super::{control, ids::parse_job_ids, output, GlobalArgs};
use anyhow::{anyhow, bail, Result};
use berth_client::json::{job_json, jobs_json};
use berth_client::show::format_job_details;
use berth_client::sinfo::{effective_partitions, format_show_nodes, format_show_partitions};
use berth_client::{now_ms, servers_from, Cluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::{Job, ListJobsRequest};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct ScontrolArgs {
    /// Print what `show` finds as JSON
    #[arg(long)]
    pub json: bool,
    /// One line per record (`-o`)
    #[arg(short = 'o', long = "oneliner")]
    pub oneliner: bool,
    /// The command: show job|node|partition|reservation [NAME],
    /// hold|uhold|release|requeue|requeuehold JOB_ID[,...],
    /// update JobId=N KEY=VALUE...
    #[arg(value_name = "COMMAND", trailing_var_arg = true, required = true)]
    pub words: Vec<String>,
}

pub async fn run(global: &GlobalArgs, args: ScontrolArgs) -> Result<ExitCode> {
    let words: Vec<String> = args.words.clone();
    let verb = words
        .first()
        .map(|w| w.to_ascii_lowercase())
        .unwrap_or_default();
    let rest = &words[1.min(words.len())..];
    match verb.as_str() {
        "show" => show(global, &args, rest).await,
        "hold" | "uhold" | "release" | "requeue" | "requeuehold" => {
            let ids: Vec<String> = rest
                .iter()
                .map(|w| {
                    parse_job_ids(w).map(|ids| ids.iter().map(u64::to_string).collect::<Vec<_>>())
                })
                .collect::<Result<Vec<_>>>()?
                .concat();
            if ids.is_empty() {
                bail!("{verb}: no job id given");
            }
            let (action, admin) = match verb.as_str() {
                // A user hold either way: an admin hold needs the admin
                // role, which `berth hold --admin` asks for explicitly.
                "hold" | "uhold" => (Action::Hold, false),
                "release" => (Action::Release, false),
                "requeue" => (Action::Requeue, false),
                _ => (Action::RequeueHold, false),
            };
            control::each(global, &ids, action, admin, &verb).await
        }
        "update" => super::scontrol_update::run(global, args.json, rest).await,
        "create" | "delete" => reservation(global, &verb, rest).await,
        "" => bail!("no command given"),
        other => bail!("invalid keyword: {other}"),
    }
}

/// `create reservation Key=Value...` and `delete reservation NAME`
/// (admin calls; the state machine validates and answers in words).
async fn reservation(global: &GlobalArgs, verb: &str, rest: &[String]) -> Result<ExitCode> {
    let what = rest
        .first()
        .map(|w| w.to_ascii_lowercase())
        .unwrap_or_default();
    if !matches!(what.as_str(), "reservation" | "res") {
        bail!("{verb}: only reservations can be {verb}d (scontrol {verb} reservation ...)");
    }
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let args = &rest[1..];
    if verb == "create" {
        let r = berth_client::reservation::parse_create(args, now_ms())?;
        let name = r.name.clone();
        cluster.create_reservation(r).await?;
        output::emit(&format!("Reservation created: {name}\n"))?;
    } else {
        let [name] = args else {
            bail!("delete reservation: give exactly one reservation name");
        };
        cluster.delete_reservation(name.clone()).await?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(global: &GlobalArgs, args: &ScontrolArgs, rest: &[String]) -> Result<ExitCode> {
    let what = rest
        .first()
        .map(|w| w.to_ascii_lowercase())
        .ok_or_else(|| anyhow!("show: say what to show: job, node, partition or reservation"))?;
    let name = rest.get(1).cloned();
    if rest.len() > 2 {
        bail!("show: unexpected argument '{}'", rest[2]);
    }
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let text = match what.as_str() {
        "job" | "jobs" | "jobid" => {
            let jobs: Vec<Job> = match &name {
                Some(id) => {
                    let mut jobs = Vec::new();
                    for id in parse_job_ids(id)? {
                        match cluster.get_job(id).await {
                            Ok(job) => jobs.push(job),
                            Err(err) if err.code() == Some(tonic::Code::NotFound) => {
                                bail!("Invalid job id specified")
                            }
                            Err(err) => return Err(err.into()),
                        }
                    }
                    jobs
                }
                None => {
                    cluster
                        .list_jobs(ListJobsRequest {
                            states: berth_client::state::ALL_STATES
                                .iter()
                                .map(|s| *s as i32)
                                .collect(),
                            ..Default::default()
                        })
                        .await?
                        .jobs
                }
            };
            if args.json {
                return emit_json(&if jobs.len() == 1 && name.is_some() {
                    job_json(&jobs[0])
                } else {
                    jobs_json(&jobs, false)
                });
            }
            if jobs.is_empty() {
                "No jobs in the system\n".to_string()
            } else {
                let now = now_ms();
                let blocks: Vec<String> = jobs.iter().map(|j| format_job_details(j, now)).collect();
                blocks.join("\n") + "\n"
            }
        }
        "node" | "nodes" | "nodename" => {
            let mut hosts = cluster.list_hosts().await?;
            let partitions = cluster.list_partitions().await?;
            if let Some(n) = &name {
                hosts.retain(|h| &h.name == n);
                if hosts.is_empty() {
                    bail!("Node {n} not found");
                }
            }
            if args.json {
                return emit_json(
                    &json!({ "nodes": hosts.iter().map(host_json).collect::<Vec<_>>() }),
                );
            }
            format_show_nodes(&hosts, &partitions)
        }
        "partition" | "partitions" | "partitionname" => {
            let hosts = cluster.list_hosts().await?;
            let mut partitions = effective_partitions(&cluster.list_partitions().await?);
            if let Some(n) = &name {
                partitions.retain(|p| &p.name == n);
                if partitions.is_empty() {
                    bail!("Partition {n} not found");
                }
            }
            if args.json {
                return emit_json(
                    &json!({ "partitions": partitions.iter().map(partition_json).collect::<Vec<_>>() }),
                );
            }
            format_show_partitions(&hosts, &partitions)
        }
        "reservation" | "reservations" | "res" => {
            let mut reservations = cluster.list_reservations().await?;
            if let Some(name) = &name {
                reservations.retain(|r| r.name == *name);
                if reservations.is_empty() {
                    bail!("Reservation {name} not found");
                }
            }
            if args.json {
                return emit_json(&json!({ "reservations": reservations.iter().map(|r| json!({
                    "name": r.name, "hosts": r.hosts, "start_ms": r.start_ms, "end_ms": r.end_ms,
                    "users": r.users, "accounts": r.accounts,
                })).collect::<Vec<_>>() }));
            }
            berth_client::reservation::format_show(&reservations, now_ms())
        }
        other => {
            bail!("show: invalid entity \"{other}\": expected job, node, partition or reservation")
        }
    };
    let text = if args.oneliner { oneliner(&text) } else { text };
    output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `-o`: each record's indented lines joined onto one.
pub fn oneliner(text: &str) -> String {
    let mut out = String::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let words: Vec<&str> = block.lines().map(str::trim).collect();
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

fn emit_json(value: &serde_json::Value) -> Result<ExitCode> {
    output::emit_json(value)?;
    Ok(ExitCode::SUCCESS)
}

pub fn host_json(h: &berth_proto::api::Host) -> serde_json::Value {
    let inv = h.inventory.clone().unwrap_or_default();
    json!({
        "name": h.name,
        "state": h.state,
        "reason": h.reason,
        "cpus": inv.cpus,
        "memory_mb": inv.memory_mb,
        "alloc_cpus": h.alloc_cpus,
        "alloc_memory_mb": h.alloc_memory_mb,
        "gpus": inv.gpus.iter().map(|g| json!({"index": g.index, "model": g.model, "memory_mb": g.memory_mb})).collect::<Vec<_>>(),
        "emulators": inv.emulators.iter().map(|e| json!({"kind": e.kind, "name": e.name, "group": e.group, "unit_ids": e.unit_ids})).collect::<Vec<_>>(),
        "features": inv.features,
    })
}

pub fn partition_json(p: &berth_proto::api::Partition) -> serde_json::Value {
    json!({
        "name": p.name,
        "hosts": p.hosts,
        "is_default": p.is_default,
        "default_time_s": p.default_time_s,
        "max_time_s": p.max_time_s,
        "qos": p.qos,
        "max_nodes": p.max_nodes,
        "min_nodes": p.min_nodes,
        "priority_job_factor": p.priority_job_factor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oneliner_joins_each_record() {
        assert_eq!(
            oneliner("NodeName=a\n   CPUTot=1\n\nNodeName=b\n   CPUTot=2\n\n"),
            "NodeName=a CPUTot=1\nNodeName=b CPUTot=2\n"
        );
    }
}
