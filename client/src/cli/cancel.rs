//! `berth cancel` / `scancel`: cancel jobs one by one, reporting each
//! failure as scancel does and going on with the rest.

use super::{ids::parse_job_id, output, GlobalArgs, Tool};
use anyhow::Result;
use berth_client::json::cancel_json;
use berth_client::{servers_from, ClientError, Cluster};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct CancelArgs {
    /// Jobs to cancel
    #[arg(value_name = "JOB_ID", required = true)]
    pub ids: Vec<String>,
    /// Print each job's previous state as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(tool: Tool, global: &GlobalArgs, args: CancelArgs) -> Result<ExitCode> {
    let ids = args
        .ids
        .iter()
        .map(|id| parse_job_id(id))
        .collect::<Result<Vec<u64>>>()?;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let mut answers = Vec::new();
    let mut failed = false;
    for id in ids {
        match cluster.cancel_job(id).await {
            Ok(response) => answers.push(cancel_json(id, response.previous_state)),
            // The server refused this job: say so and go on.
            Err(err @ ClientError::Rpc { .. }) => {
                eprintln!(
                    "{}: error: Kill job error on job id {id}: {}",
                    tool.prog(),
                    output::one_line(&err.to_string())
                );
                failed = true;
            }
            // No cluster to talk to: every other id would fail the same way.
            Err(err) => return Err(err.into()),
        }
    }
    if args.json {
        output::emit_json(&serde_json::Value::Array(answers))?;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
