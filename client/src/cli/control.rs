//! `berth hold|release|requeue`: Slurm's `scontrol hold`, `release`,
//! `requeue` and `requeuehold`, job by job; a refused job is reported in
//! Slurm's words and the rest go on.

use super::{ids::parse_job_id, output, GlobalArgs};
use anyhow::Result;
use berth_client::{servers_from, ClientError, Cluster};
use berth_proto::api::control_job_request::Action;
use berth_proto::api::ControlJobRequest;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct ControlArgs {
    /// Jobs to act on
    #[arg(value_name = "JOB_ID", required = true)]
    pub ids: Vec<String>,
    /// An administrator's hold (JobHeldAdmin), lifted only by an admin release
    #[arg(long)]
    pub admin: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct ReleaseArgs {
    /// Jobs to release
    #[arg(value_name = "JOB_ID", required = true)]
    pub ids: Vec<String>,
    /// Also lift an administrator's hold (needs the admin role)
    #[arg(long)]
    pub admin: bool,
}

#[derive(Args, Debug, Clone, Default)]
pub struct RequeueArgs {
    /// Jobs to requeue
    #[arg(value_name = "JOB_ID", required = true)]
    pub ids: Vec<String>,
    /// Queue them again held (as scontrol requeuehold)
    #[arg(long)]
    pub hold: bool,
}

pub async fn hold(global: &GlobalArgs, args: ControlArgs) -> Result<ExitCode> {
    let action = if args.admin {
        Action::HoldAdmin
    } else {
        Action::Hold
    };
    each(global, &args.ids, action, false, "hold").await
}

pub async fn release(global: &GlobalArgs, args: ReleaseArgs) -> Result<ExitCode> {
    each(global, &args.ids, Action::Release, args.admin, "release").await
}

pub async fn requeue(global: &GlobalArgs, args: RequeueArgs) -> Result<ExitCode> {
    let action = if args.hold {
        Action::RequeueHold
    } else {
        Action::Requeue
    };
    each(global, &args.ids, action, false, "requeue").await
}

pub async fn each(
    global: &GlobalArgs,
    ids: &[String],
    action: Action,
    admin: bool,
    verb: &str,
) -> Result<ExitCode> {
    let ids = ids
        .iter()
        .map(|id| parse_job_id(id))
        .collect::<Result<Vec<u64>>>()?;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let mut failed = false;
    for job_id in ids {
        let request = ControlJobRequest {
            job_id,
            action: action as i32,
            admin,
            ..Default::default()
        };
        match cluster.control_job(request).await {
            Ok(_) => {}
            Err(err @ ClientError::Rpc { .. }) => {
                eprintln!(
                    "berth: error: {verb} of job {job_id}: {}",
                    output::one_line(&err.to_string())
                );
                failed = true;
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
