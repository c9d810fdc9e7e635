//! `sinfo`: partitions and hosts, as sinfo's default view, `-N`, `-N -l`
//! and `-R`; `--json` for tools.

use super::{output, GlobalArgs};
use anyhow::Result;
use berth_client::sinfo::{
    effective_partitions, format_sinfo, format_sinfo_nodes, format_sinfo_reasons,
};
use berth_client::{now_ms, servers_from, Cluster};
use clap::{ArgAction, Args};
use serde_json::json;
use std::process::ExitCode;

/// Options of `sinfo`. `-h` is --noheader, as in sinfo; help is --help.
#[derive(Args, Debug, Clone, Default)]
#[command(disable_help_flag = true)]
pub struct SinfoArgs {
    /// One line per host (node-oriented)
    #[arg(short = 'N', long = "Node")]
    pub node: bool,
    /// Long format: more columns, and the time of the listing first
    #[arg(short = 'l', long = "long")]
    pub long: bool,
    /// Down and drained hosts with their reasons
    #[arg(short = 'R', long = "list-reasons")]
    pub reasons: bool,
    /// Only these partitions, comma-separated
    #[arg(short = 'p', long = "partition", value_name = "PARTITION[,...]")]
    pub partition: Option<String>,
    /// Leave out the header line
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// Print hosts and partitions as JSON
    #[arg(long)]
    pub json: bool,
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
}

pub async fn run(global: &GlobalArgs, args: SinfoArgs) -> Result<ExitCode> {
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let hosts = cluster.list_hosts().await?;
    let mut partitions = effective_partitions(&cluster.list_partitions().await?);
    if let Some(list) = &args.partition {
        let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
        partitions.retain(|p| wanted.contains(&p.name.as_str()));
    }
    if args.json {
        output::emit_json(&json!({
            "nodes": hosts.iter().map(super::scontrol::host_json).collect::<Vec<_>>(),
            "partitions": partitions.iter().map(super::scontrol::partition_json).collect::<Vec<_>>(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let text = if args.reasons {
        format_sinfo_reasons(&hosts, args.noheader)
    } else if args.node || args.long {
        if args.node {
            format_sinfo_nodes(
                &hosts,
                &partitions,
                args.long,
                args.noheader,
                &ctime(now_ms()),
            )
        } else {
            // `sinfo -l` without -N: the partition view with the time first.
            format!(
                "{}\n{}",
                ctime(now_ms()),
                format_sinfo(&hosts, &partitions, args.noheader)
            )
        }
    } else {
        format_sinfo(&hosts, &partitions, args.noheader)
    };
    output::emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The listing time as sinfo -l prints it ("Thu Dec  3 13:52:00 2026"),
/// in UTC.
pub fn ctime(ms: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let stamp = berth_client::show::timestamp(ms.max(1));
    // "YYYY-MM-DDTHH:MM:SSZ"
    let year = &stamp[0..4];
    let month: usize = stamp[5..7].parse().unwrap_or(1);
    let day: u32 = stamp[8..10].parse().unwrap_or(1);
    let clock = &stamp[11..19];
    let weekday = DAYS[((ms / 86_400_000) % 7) as usize];
    format!(
        "{weekday} {} {day:>2} {clock} {year}",
        MONTHS[month.clamp(1, 12) - 1]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctime_reads_like_slurm() {
        assert_eq!(ctime(0), "Thu Jan  1 00:00:00 1970");
        assert_eq!(ctime(1_700_000_000_000), "Tue Nov 14 22:13:20 2023");
    }
}
