//! `berth events ID [--follow]`: a job's history (submitted, priority set
//! and updated, allocated, started, held, requeued, ended), one line per
//! event with its time; `--follow` keeps printing until the job ends.

use super::{ids::parse_job_id, output, GlobalArgs};
use anyhow::Result;
use berth_client::show::timestamp;
use berth_client::{servers_from, Cluster};
use berth_proto::api::JobEvent;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug, Clone, Default)]
pub struct EventsArgs {
    /// The job
    #[arg(value_name = "JOB_ID")]
    pub id: String,
    /// Keep printing new events until the job ends
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One JSON object per event
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, args: EventsArgs) -> Result<ExitCode> {
    let id = parse_job_id(&args.id)?;
    let mut stream = Cluster::new(servers_from(global.server.clone()))
        .job_events(id, args.follow)
        .await?;
    let mut last_seq = 0u64;
    while let Some(event) = stream.message().await? {
        if last_seq > 0 && event.seq > last_seq + 1 {
            // The cluster keeps a job's most recent events only.
            output::emit(&format!(
                "... {} older events no longer kept\n",
                event.seq - last_seq - 1
            ))?;
        }
        last_seq = event.seq;
        if args.json {
            output::emit_json(&event_json(&event))?;
        } else {
            output::emit(&format_event(&event))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `2026-12-03T10:00:00Z  submitted  Submitted by alice : 1 cpus, 0 MiB`.
pub fn format_event(e: &JobEvent) -> String {
    format!("{}  {:<18} {}\n", timestamp(e.time_ms), e.kind, e.message)
}

fn event_json(e: &JobEvent) -> serde_json::Value {
    serde_json::json!({
        "job_id": e.job_id,
        "seq": e.seq,
        "time": timestamp(e.time_ms),
        "kind": e.kind,
        "message": e.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_aligned_line_per_event() {
        let e = JobEvent {
            job_id: 3,
            time_ms: 0,
            kind: "submitted".into(),
            message: "Submitted by alice".into(),
            seq: 1,
        };
        assert_eq!(
            format_event(&e),
            "Unknown  submitted          Submitted by alice\n"
        );
        assert_eq!(event_json(&e)["seq"], 1);
    }
}
