//! `berth explain ID`: why a job is where it is, and for a waiting job
//! what each candidate host lacks.

use super::{ids::parse_job_id, output, GlobalArgs};
use anyhow::Result;
use berth_client::json::explain_json;
use berth_client::state::{state_from_i32, state_name};
use berth_client::{servers_from, Cluster};
use berth_proto::api::ExplainJobResponse;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct ExplainArgs {
    /// The job
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// Print the explanation as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: ExplainArgs) -> Result<ExitCode> {
    let id = parse_job_id(&args.id)?;
    let explain = Cluster::new(servers_from(global.server.clone()))
        .explain_job(id)
        .await?;
    if args.json {
        output::emit_json(&explain_json(&explain))?;
    } else {
        output::emit(&format_explain(&explain))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "Job 5 is PENDING (Resources): words", then one aligned line per host.
pub fn format_explain(explain: &ExplainJobResponse) -> String {
    let state = state_name(state_from_i32(explain.state));
    let reason = if explain.reason.is_empty() {
        "None"
    } else {
        &explain.reason
    };
    let mut out = format!("Job {} is {state} ({reason})", explain.job_id);
    if !explain.reason_text.is_empty() {
        out.push_str(": ");
        out.push_str(&output::one_line(&explain.reason_text));
    }
    out.push('\n');
    let width = explain
        .hosts
        .iter()
        .map(|h| h.host.chars().count())
        .max()
        .unwrap_or(0);
    for host in &explain.hosts {
        out.push_str(&format!(
            "  {:<width$}  {}\n",
            host.host,
            output::one_line(&host.lacks)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{HostRejection, JobState};

    #[test]
    fn hosts_are_listed_aligned() {
        let explain = ExplainJobResponse {
            job_id: 5,
            state: JobState::Pending as i32,
            reason: "Resources".into(),
            reason_text: "no host has 8 CPUs free".into(),
            hosts: vec![
                HostRejection {
                    host: "h1".into(),
                    lacks: "cpus: needs 8, 2 free".into(),
                },
                HostRejection {
                    host: "gpu-12".into(),
                    lacks: "partition: not in gpu".into(),
                },
            ],
        };
        assert_eq!(
            format_explain(&explain),
            "Job 5 is PENDING (Resources): no host has 8 CPUs free\n\
             \x20 h1      cpus: needs 8, 2 free\n\
             \x20 gpu-12  partition: not in gpu\n"
        );
        let running = ExplainJobResponse {
            job_id: 6,
            state: JobState::Running as i32,
            ..Default::default()
        };
        assert_eq!(format_explain(&running), "Job 6 is RUNNING (None)\n");
    }
}
