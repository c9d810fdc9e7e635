//! `berth admin`: cluster administration. `berth admin backup FILE` writes
//! a consistent backup of the replicated state to FILE (restore it with
//! `berthd store restore`).

use super::{output, GlobalArgs};
use anyhow::{Context, Result};
use berth_client::backup::{write_backup, BackupWritten};
use berth_client::{servers_from, Cluster};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Subcommand, Debug, Clone)]
pub enum AdminCommand {
    /// Write a consistent backup of the cluster's state to FILE (via
    /// FILE.tmp, synced, then renamed); restore it with `berthd store restore`
    Backup(BackupArgs),
    /// Tokens for users (signed with the cluster's token secret)
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand, Debug, Clone)]
pub enum TokenCommand {
    /// Print a signed token for a user; they pass it with --token or
    /// BERTH_TOKEN. Needs the token secret file, so only whoever holds it
    /// (the cluster's admin) can issue tokens
    Issue(TokenIssueArgs),
}

#[derive(Args, Debug, Clone)]
pub struct TokenIssueArgs {
    /// The user the token speaks for
    #[arg(long)]
    pub user: String,
    /// A role to grant (repeatable); `admin` may change policy and
    /// membership and act on anyone's jobs
    #[arg(long = "role", value_name = "ROLE")]
    pub roles: Vec<String>,
    /// How long the token is valid, in seconds
    #[arg(long, default_value_t = 86_400)]
    pub ttl_s: u64,
    /// The token secret (berthd's auth.token_secret_file)
    #[arg(long, value_name = "FILE")]
    pub secret_file: PathBuf,
}

/// Longest token lifetime accepted: a year.
const TOKEN_TTL_MAX_S: u64 = 366 * 86_400;

fn issue_token(args: &TokenIssueArgs) -> Result<String> {
    let user = args.user.trim();
    if user.is_empty() || user.chars().any(char::is_whitespace) {
        anyhow::bail!("--user must be a user name without spaces");
    }
    if args.ttl_s == 0 || args.ttl_s > TOKEN_TTL_MAX_S {
        anyhow::bail!("--ttl-s must be between 1 and {TOKEN_TTL_MAX_S}");
    }
    let text = std::fs::read(&args.secret_file)
        .with_context(|| format!("cannot read {}", args.secret_file.display()))?;
    let secret = berth_auth::secret_from_file_text(&text)
        .with_context(|| format!("{}", args.secret_file.display()))?;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let claims = berth_auth::Claims {
        user: user.to_string(),
        roles: args.roles.clone(),
        exp_s: now_s.saturating_add(args.ttl_s),
    };
    Ok(berth_auth::issue(&claims, &secret)?)
}

#[derive(Args, Debug, Clone)]
pub struct BackupArgs {
    /// Where to write the backup; replaced only once the whole backup has
    /// arrived and checks out
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub async fn run(global: &GlobalArgs, command: AdminCommand) -> Result<ExitCode> {
    let args = match command {
        AdminCommand::Backup(args) => args,
        AdminCommand::Token(TokenCommand::Issue(args)) => {
            output::emit(&format!("{}\n", issue_token(&args)?))?;
            return Ok(ExitCode::SUCCESS);
        }
    };
    let started = Instant::now();
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let stream = cluster.backup_state().await?;
    let written = write_backup(stream, &args.file)
        .await
        .with_context(|| format!("backup to {} failed", args.file.display()))?;
    let server = cluster.current_server().unwrap_or("?").to_string();
    output::emit(&format_written(
        &written,
        &server,
        started.elapsed().as_millis(),
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// One line a fact: where, at which index, what it holds, how big.
pub fn format_written(w: &BackupWritten, server: &str, took_ms: u128) -> String {
    let i = &w.info;
    let voters: Vec<String> = i.voter_ids.iter().map(|v| v.to_string()).collect();
    format!(
        "Backup written to {}\n\
         log index {} (term {}), voters {}\n\
         {} jobs, {} hosts\n\
         {} bytes ({} of snapshot), CRC-32 {:#010x}, in {} ms via {server}\n",
        w.path.display(),
        i.last_log_index,
        i.last_log_term,
        if voters.is_empty() {
            "none".to_string()
        } else {
            voters.join(",")
        },
        i.jobs,
        i.hosts,
        i.file_bytes,
        i.snapshot_bytes,
        i.file_crc32,
        took_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::BackupInfo;

    #[test]
    fn the_summary_names_index_jobs_and_bytes() {
        let written = BackupWritten {
            path: PathBuf::from("/backups/berth.bak"),
            chunks: 1,
            info: BackupInfo {
                format_version: 1,
                last_log_index: 1234,
                last_log_term: 5,
                voter_ids: vec![1, 2, 3],
                jobs: 40,
                hosts: 2,
                snapshot_bytes: 9000,
                file_bytes: 9300,
                file_crc32: 0xCBF4_3926,
                created_ms: 1,
            },
        };
        assert_eq!(
            format_written(&written, "127.0.0.1:7101", 12),
            "Backup written to /backups/berth.bak\n\
             log index 1234 (term 5), voters 1,2,3\n\
             40 jobs, 2 hosts\n\
             9300 bytes (9000 of snapshot), CRC-32 0xcbf43926, in 12 ms via 127.0.0.1:7101\n"
        );
    }
}
