//! `berth job ID`: one job, as `scontrol show job` shows it.

use super::{ids::parse_job_id, output, GlobalArgs};
use anyhow::Result;
use berth_client::json::job_json;
use berth_client::show::format_job_details;
use berth_client::{now_ms, servers_from, Cluster};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct JobArgs {
    /// The job
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// Print the job as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: JobArgs) -> Result<ExitCode> {
    let id = parse_job_id(&args.id)?;
    let job = Cluster::new(servers_from(global.server.clone()))
        .get_job(id)
        .await?;
    if args.json {
        output::emit_json(&job_json(&job))?;
    } else {
        output::emit(&format_job_details(&job, now_ms()))?;
    }
    Ok(ExitCode::SUCCESS)
}
