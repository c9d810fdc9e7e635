//! `scontrol update JobId=N KEY=VALUE...`: Slurm's keys (any case), each
//! value read as sbatch reads the same option, sent as one `UpdateJob`.
//! The cluster checks the new spec as it checks a submit and answers what
//! changed. `Priority=N` (administrators) fixes a job's priority in
//! place of multifactor until it is held and released; `Priority=0` holds
//! it, as in Slurm.

use super::ids::{parse_job_ref, JobRef};
use super::submit::{parse_constraint, parse_dependency};
use super::{output, GlobalArgs};
use anyhow::{anyhow, bail, Result};
use berth_client::begin::parse_begin;
use berth_client::time::parse_time_limit;
use berth_client::{now_ms, servers_from, Cluster};
use berth_proto::api::UpdateJobRequest;
use std::process::ExitCode;

/// An update as typed: the job it names and the request (whose `job_id`
/// is the array's id when `target` is one task of an array, resolved
/// before sending).
#[derive(Debug)]
pub struct ParsedUpdate {
    /// `JobId=12` (an array's id stands for the whole array) or
    /// `JobId=12_3` (that task only).
    pub target: JobRef,
    pub request: UpdateJobRequest,
}

/// Reads the words after `update` into a request (the time now resolves
/// `StartTime=now+1hour`). Every key once; an unknown key or a bad value
/// is an error naming it, and nothing is sent.
pub fn parse_update(words: &[String], now_ms: u64) -> Result<ParsedUpdate> {
    let mut request = UpdateJobRequest::default();
    let mut job_id = None;
    let mut seen = std::collections::BTreeSet::new();
    for word in words {
        let Some((key, value)) = word.split_once('=') else {
            bail!("Invalid input: {word}: expected KEY=VALUE (e.g. TimeLimit=30)");
        };
        let lower = key.to_ascii_lowercase();
        if !seen.insert(lower.clone()) {
            bail!("Invalid input: {key} is given twice");
        }
        let invalid =
            |what: &str, why: String| anyhow!("Invalid {what} specification: {value}: {why}");
        match lower.as_str() {
            "jobid" => job_id = Some(parse_job_ref(value)?),
            "timelimit" => {
                request.time_limit_s =
                    Some(parse_time_limit(value).map_err(|e| invalid("TimeLimit", e.to_string()))?)
            }
            "partition" => {
                let list: Vec<String> = value.split(',').map(|p| p.trim().to_string()).collect();
                if list.iter().any(String::is_empty) {
                    return Err(invalid("Partition", "an empty partition name".into()));
                }
                request.set_partitions = true;
                request.partitions = list;
            }
            "qos" => {
                if value.trim().is_empty() {
                    return Err(invalid("QOS", "an empty name".into()));
                }
                request.qos = Some(value.trim().to_string());
            }
            "nice" => {
                request.nice = Some(
                    value
                        .trim()
                        .parse::<i32>()
                        .map_err(|_| invalid("Nice", "expected a whole number".into()))?,
                )
            }
            "dependency" => {
                request.dependency = Some(if value.trim().is_empty() {
                    String::new()
                } else {
                    parse_dependency(value)?
                })
            }
            "starttime" | "begintime" => {
                request.begin_ms = Some(
                    parse_begin(value, now_ms).map_err(|e| invalid("StartTime", e.to_string()))?,
                )
            }
            "name" | "jobname" => {
                if value.is_empty() {
                    return Err(invalid("Name", "a job name cannot be empty".into()));
                }
                request.name = Some(value.to_string());
            }
            "comment" => request.comment = Some(value.to_string()),
            "features" => {
                request.set_features = true;
                request.features = if value.trim().is_empty() {
                    Vec::new()
                } else {
                    parse_constraint(value)?
                };
            }
            "priority" => {
                request.priority = Some(value.trim().parse::<u32>().map_err(|_| {
                    invalid(
                        "Priority",
                        "expected a whole number from 0 to 4294967295".into(),
                    )
                })?)
            }
            _ => bail!("Update of this parameter is not supported: {word}"),
        }
    }
    let target = job_id.ok_or_else(|| anyhow!("No job identification provided: give JobId=N"))?;
    request.job_id = match target {
        JobRef::Job(id) => id,
        JobRef::Task { array, .. } => array,
    };
    let changes_something = request.time_limit_s.is_some()
        || request.set_partitions
        || request.qos.is_some()
        || request.nice.is_some()
        || request.dependency.is_some()
        || request.begin_ms.is_some()
        || request.name.is_some()
        || request.comment.is_some()
        || request.set_features
        || request.priority.is_some();
    if !changes_something {
        bail!("No changes specified for job {target}");
    }
    Ok(ParsedUpdate { target, request })
}

/// Sends the update. Like scontrol it prints nothing when it worked
/// (`--json`: the changes); a refusal is one line and exit 1.
pub async fn run(global: &GlobalArgs, json: bool, words: &[String]) -> Result<ExitCode> {
    let ParsedUpdate {
        target,
        mut request,
    } = parse_update(words, now_ms())?;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    if let JobRef::Task { array, task } = target {
        request.job_id = super::cancel::task_job_id(&mut cluster, array, task).await?;
        request.only_task = true;
    }
    let job_id = request.job_id;
    match cluster.update_job(request).await {
        Ok(answer) => {
            if json {
                output::emit_json(&serde_json::json!({
                    "job_id": job_id,
                    "changes": answer.changes,
                }))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        // Slurm's words with the cluster's reason, without the transport
        // details.
        Err(berth_client::ClientError::Rpc { status, .. }) => {
            bail!("slurm_update error: {}", output::one_line(status.message()))
        }
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2023-11-14T22:13:20Z.
    const NOW_MS: u64 = 1_700_000_000_000;

    fn parse(words: &[&str]) -> Result<UpdateJobRequest> {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        parse_update(&words, NOW_MS).map(|u| u.request)
    }

    fn error(words: &[&str]) -> String {
        match parse(words) {
            Ok(r) => panic!("accepted {r:?}"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn every_key_reaches_the_request() {
        let r = parse(&[
            "JobId=12",
            "TimeLimit=1:30:00",
            "partition=a,b",
            "QOS=high",
            "Nice=-5",
            "Dependency=afterok:3:4",
            "StartTime=now+1hour",
            "Name=renamed",
            "Comment=two words",
            "Features=a100&ib",
        ])
        .expect("valid");
        assert_eq!(r.job_id, 12);
        assert_eq!(r.time_limit_s, Some(5_400));
        assert!(r.set_partitions);
        assert_eq!(r.partitions, ["a", "b"]);
        assert_eq!(r.qos.as_deref(), Some("high"));
        assert_eq!(r.nice, Some(-5));
        assert_eq!(r.dependency.as_deref(), Some("afterok:3:4"));
        assert_eq!(r.begin_ms, Some(NOW_MS + 3_600_000));
        assert_eq!(r.name.as_deref(), Some("renamed"));
        assert_eq!(r.comment.as_deref(), Some("two words"));
        assert!(r.set_features);
        assert_eq!(r.features, ["a100", "ib"]);
        // Unset keys stay unset.
        let only = parse(&["jobid=3", "timelimit=UNLIMITED"]).expect("valid");
        assert_eq!(only.time_limit_s, Some(0));
        assert!(!only.set_partitions && only.name.is_none() && only.nice.is_none());
        // Empty Dependency= and Features= clear them.
        let cleared = parse(&["JobId=3", "Dependency=", "Features="]).expect("valid");
        assert_eq!(cleared.dependency.as_deref(), Some(""));
        assert!(cleared.set_features && cleared.features.is_empty());
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        assert_eq!(
            error(&["JobId=1", "Shoe=4"]),
            "Update of this parameter is not supported: Shoe=4"
        );
        assert!(error(&["JobId=1", "TimeLimit=soon"])
            .starts_with("Invalid TimeLimit specification: soon: "));
        assert_eq!(
            error(&["JobId=1", "Nice=low"]),
            "Invalid Nice specification: low: expected a whole number"
        );
        assert!(error(&["JobId=1", "StartTime=someday"])
            .starts_with("Invalid StartTime specification: someday: "));
        assert!(error(&["JobId=1", "Dependency=afterok"]).contains("needs at least one job id"));
        assert!(error(&["JobId=1", "Features=a|b"]).contains("'|' is not supported"));
        assert_eq!(
            error(&["JobId=1", "Partition=a,,b"]),
            "Invalid Partition specification: a,,b: an empty partition name"
        );
        assert_eq!(
            error(&["JobId=1", "Priority=high"]),
            "Invalid Priority specification: high: expected a whole number from 0 to 4294967295"
        );
        assert_eq!(
            parse(&["JobId=1", "priority=5000"])
                .expect("valid")
                .priority,
            Some(5000)
        );
        assert_eq!(
            parse(&["JobId=1", "Priority=0"]).expect("valid").priority,
            Some(0)
        );
        assert_eq!(
            error(&["TimeLimit=5"]),
            "No job identification provided: give JobId=N"
        );
        assert_eq!(error(&["JobId=1"]), "No changes specified for job 1");
        assert_eq!(
            error(&["JobId=1", "Nice=1", "nice=2"]),
            "Invalid input: nice is given twice"
        );
        assert!(error(&["JobId=1", "TimeLimit"]).starts_with("Invalid input: TimeLimit"));
        assert!(error(&["JobId=x", "Nice=1"]).contains("invalid job id \"x\""));
        assert!(error(&["JobId=12_x", "Nice=1"]).contains("expected ARRAYID_TASK"));
        assert_eq!(error(&["JobId=12_3"]), "No changes specified for job 12_3");
    }

    #[test]
    fn an_array_task_is_named_apart_from_its_array() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let task = parse_update(&words(&["JobId=12_3", "Nice=1"]), NOW_MS).expect("valid");
        assert_eq!(task.target, JobRef::Task { array: 12, task: 3 });
        let whole = parse_update(&words(&["JobId=12", "Nice=1"]), NOW_MS).expect("valid");
        assert_eq!(whole.target, JobRef::Job(12));
        // Sent as is, an array's id is the whole array.
        assert!(!whole.request.only_task);
    }
}
