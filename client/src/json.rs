//! `--json` output. The generated messages do not derive serde, and their
//! enums are bare i32s, so this spells each one out with state names in
//! Slurm's words. Field names follow api.proto so tools can rely on them.

use crate::state::{job_state, state_code, state_from_i32, state_name};
use berth_proto::api::{
    ClusterStatusResponse, ExplainJobResponse, Job, JobSpec, SubmitJobResponse,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A job: every field of `Job`, its spec nested, plus the squeue state code.
pub fn job_json(job: &Job) -> Value {
    let state = job_state(job);
    json!({
        "job_id": job.job_id,
        "state": state_name(state),
        "state_code": state_code(state),
        "reason": job.reason,
        "reason_text": job.reason_text,
        "submit_ms": job.submit_ms,
        "start_ms": job.start_ms,
        "end_ms": job.end_ms,
        "hosts": job.hosts,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "alloc_id": job.alloc_id,
        "priority": job.priority,
        "borrowed": job.borrowed,
        "predicted_start_ms": job.predicted_start_ms,
        "alternative": job.alternative,
        "steps": job.steps.iter().map(|s| json!({
            "step_id": s.step_id,
            "name": s.name,
            "state": state_name(state_from_i32(s.state)),
            "exit_code": s.exit_code,
            "start_ms": s.start_ms,
            "end_ms": s.end_ms,
            "hosts": s.hosts,
            "ntasks": s.ntasks,
        })).collect::<Vec<Value>>(),
        "spec": spec_json(&job.spec.clone().unwrap_or_default()),
    })
}

/// A job spec, env sorted by name so output is stable.
pub fn spec_json(spec: &JobSpec) -> Value {
    let env: BTreeMap<&String, &String> = spec.env.iter().collect();
    json!({
        "name": spec.name,
        "user": spec.user,
        "command": spec.command,
        "workdir": spec.workdir,
        "env": env,
        "cpus": spec.cpus,
        "mem_mb": spec.mem_mb,
        "nodes": spec.nodes,
        "time_limit_s": spec.time_limit_s,
        "partitions": spec.partitions,
        "qos": spec.qos,
        "account": spec.account,
        "gres": spec.gres,
        "stdout_path": spec.stdout_path,
        "stderr_path": spec.stderr_path,
        "requeue": spec.requeue,
        "hold": spec.hold,
        "nice": spec.nice,
        "comment": spec.comment,
        "interactive": spec.interactive,
        "alternatives": spec.alternatives.iter().map(|a| json!({
            "gres": a.gres,
            "cpus": a.cpus,
            "mem_mb": a.mem_mb,
            "nodes": a.nodes,
            "partition": a.partition,
        })).collect::<Vec<Value>>(),
    })
}

/// A list of jobs as `squeue --json` prints it.
pub fn jobs_json(jobs: &[Job], truncated: bool) -> Value {
    json!({
        "jobs": jobs.iter().map(job_json).collect::<Vec<_>>(),
        "truncated": truncated,
    })
}

/// The answer to a submit.
pub fn submit_json(response: &SubmitJobResponse) -> Value {
    json!({ "job_id": response.job_id, "duplicate": response.duplicate })
}

/// The answer to a cancel of `job_id`.
pub fn cancel_json(job_id: u64, previous_state: i32) -> Value {
    json!({
        "job_id": job_id,
        "previous_state": state_name(state_from_i32(previous_state)),
    })
}

/// An explanation, host by host.
pub fn explain_json(explain: &ExplainJobResponse) -> Value {
    json!({
        "job_id": explain.job_id,
        "state": state_name(state_from_i32(explain.state)),
        "reason": explain.reason,
        "reason_text": explain.reason_text,
        "hosts": explain.hosts.iter().map(|h| json!({
            "host": h.host,
            "lacks": h.lacks,
        })).collect::<Vec<_>>(),
    })
}

/// The answering node's view of the cluster.
pub fn cluster_status_json(status: &ClusterStatusResponse) -> Value {
    json!({
        "node_id": status.node_id,
        "role": status.role,
        "leader_id": status.leader_id,
        "leader_addr": status.leader_addr,
        "term": status.term,
        "commit_index": status.commit_index,
        "applied_index": status.applied_index,
        "next_job_id": status.next_job_id,
        "members": status.members.iter().map(|m| json!({
            "node_id": m.node_id,
            "addr": m.addr,
            "voter": m.voter,
            "matched_index": m.matched_index,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{HostRejection, JobState, Member};

    #[test]
    fn jobs_carry_state_names_and_their_spec() {
        let mut spec = JobSpec {
            name: "x".into(),
            ..Default::default()
        };
        spec.env.insert("B".into(), "2".into());
        spec.env.insert("A".into(), "1".into());
        let job = Job {
            job_id: 5,
            state: JobState::NodeFail as i32,
            spec: Some(spec),
            steps: vec![berth_proto::api::JobStep {
                step_id: 0,
                name: "hostname".into(),
                state: JobState::Failed as i32,
                exit_code: 2,
                ..Default::default()
            }],
            ..Default::default()
        };
        let value = job_json(&job);
        assert_eq!(value["state"], "NODE_FAIL");
        assert_eq!(value["state_code"], "NF");
        assert_eq!(value["spec"]["name"], "x");
        assert_eq!(value["steps"][0]["state"], "FAILED");
        assert_eq!(value["steps"][0]["exit_code"], 2);
        assert_eq!(value["spec"]["env"].to_string(), r#"{"A":"1","B":"2"}"#);
        let list = jobs_json(&[job], true);
        assert_eq!(list["jobs"][0]["job_id"], 5);
        assert_eq!(list["truncated"], true);
    }

    #[test]
    fn other_answers_spell_out_their_enums() {
        assert_eq!(cancel_json(3, 2)["previous_state"], "RUNNING");
        assert_eq!(cancel_json(3, 99)["previous_state"], "UNKNOWN");
        let explain = ExplainJobResponse {
            job_id: 1,
            state: JobState::Pending as i32,
            reason: "Resources".into(),
            reason_text: "no host has 8 cpus free".into(),
            hosts: vec![HostRejection {
                host: "h1".into(),
                lacks: "cpus: needs 8, 2 free".into(),
            }],
        };
        let value = explain_json(&explain);
        assert_eq!(value["state"], "PENDING");
        assert_eq!(value["hosts"][0]["lacks"], "cpus: needs 8, 2 free");
        let status = ClusterStatusResponse {
            members: vec![Member {
                node_id: 2,
                addr: "h:1".into(),
                voter: true,
                matched_index: 9,
            }],
            ..Default::default()
        };
        assert_eq!(
            cluster_status_json(&status)["members"][0]["matched_index"],
            9
        );
        let submit = SubmitJobResponse {
            job_id: 4,
            duplicate: true,
        };
        assert_eq!(
            submit_json(&submit).to_string(),
            r#"{"duplicate":true,"job_id":4}"#
        );
    }
}
