//! `berth cluster status`: the answering node's view of the Raft cluster.

use super::{output, GlobalArgs};
use anyhow::Result;
use berth_client::json::cluster_status_json;
use berth_client::{servers_from, Cluster};
use berth_proto::api::{ClusterStatusRequest, ClusterStatusResponse};
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Subcommand, Debug, Clone)]
pub enum ClusterCommand {
    /// Members, leader, term, commit and applied index of the answering node
    Status(StatusArgs),
}

#[derive(Args, Debug, Clone, Default)]
pub struct StatusArgs {
    /// Print the status as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &GlobalArgs, command: ClusterCommand) -> Result<ExitCode> {
    let ClusterCommand::Status(args) = command;
    let mut cluster = Cluster::new(servers_from(global.server.clone()));
    let status = cluster.cluster_status().await?;
    // Each member's own term, role, commit and applied index, asked of it
    // directly (a node only knows its own); None when it does not answer.
    let mut per_node = Vec::with_capacity(status.members.len());
    for member in &status.members {
        let own = match berth_client::connect(std::slice::from_ref(&member.addr)).await {
            Ok(mut client) => client
                .cluster_status(ClusterStatusRequest {})
                .await
                .ok()
                .map(|r| r.into_inner()),
            Err(_) => None,
        };
        per_node.push((member.node_id, own));
    }
    if args.json {
        let mut json = cluster_status_json(&status);
        json["nodes"] = serde_json::Value::Array(
            per_node
                .iter()
                .map(|(id, own)| match own {
                    Some(s) => serde_json::json!({
                        "node_id": id, "reachable": true, "role": s.role, "term": s.term,
                        "leader_id": s.leader_id, "commit_index": s.commit_index,
                        "applied_index": s.applied_index,
                    }),
                    None => serde_json::json!({"node_id": id, "reachable": false}),
                })
                .collect(),
        );
        output::emit_json(&json)?;
    } else {
        let server = cluster.current_server().unwrap_or("?").to_string();
        output::emit(&format_status(&status, &server))?;
        output::emit(&format_nodes(&per_node))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One line per member with what it says of itself.
pub fn format_nodes(per_node: &[(u64, Option<ClusterStatusResponse>)]) -> String {
    let mut out = format!(
        "\n{:>6}  {:<10}  {:>6}  {:>10}  {:>10}\n",
        "NODE", "ITS ROLE", "TERM", "COMMIT", "APPLIED"
    );
    for (id, own) in per_node {
        match own {
            Some(s) => out.push_str(&format!(
                "{id:>6}  {:<10}  {:>6}  {:>10}  {:>10}\n",
                s.role, s.term, s.commit_index, s.applied_index
            )),
            None => out.push_str(&format!("{id:>6}  unreachable\n")),
        }
    }
    out
}

/// A summary of the answering node, then one line per member. A node only
/// knows its followers' matched index when it is the leader, so other
/// nodes show "-" there.
pub fn format_status(status: &ClusterStatusResponse, server: &str) -> String {
    let role = if status.role.is_empty() {
        "unknown role"
    } else {
        &status.role
    };
    let mut out = format!(
        "Answered by node {} ({role}) at {server}\n\
         Term {}, commit index {}, applied index {}, next job id {}\n",
        status.node_id, status.term, status.commit_index, status.applied_index, status.next_job_id
    );
    if status.leader_id == 0 {
        out.push_str("Leader: none known\n");
    } else {
        let addr = if status.leader_addr.is_empty() {
            "unknown address"
        } else {
            &status.leader_addr
        };
        out.push_str(&format!("Leader: node {} at {addr}\n", status.leader_id));
    }
    let width = status
        .members
        .iter()
        .map(|m| m.addr.chars().count())
        .chain(["ADDRESS".len()])
        .max()
        .unwrap_or(0);
    out.push_str(&format!(
        "{:>6}  {:<width$}  {:<7}  {:>8}\n",
        "NODE", "ADDRESS", "ROLE", "MATCHED"
    ));
    for member in &status.members {
        let role = match (member.node_id == status.leader_id, member.voter) {
            (true, _) => "leader",
            (false, true) => "voter",
            (false, false) => "learner",
        };
        let matched = if member.matched_index == 0 {
            "-".to_string()
        } else {
            member.matched_index.to_string()
        };
        out.push_str(&format!(
            "{:>6}  {:<width$}  {role:<7}  {matched:>8}\n",
            member.node_id, member.addr
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::Member;

    #[test]
    fn status_names_the_leader_and_each_member() {
        let status = ClusterStatusResponse {
            node_id: 2,
            leader_id: 1,
            leader_addr: "127.0.0.1:7101".into(),
            term: 3,
            role: "Follower".into(),
            commit_index: 40,
            applied_index: 39,
            next_job_id: 7,
            members: vec![
                Member {
                    node_id: 1,
                    addr: "127.0.0.1:7101".into(),
                    voter: true,
                    matched_index: 40,
                },
                Member {
                    node_id: 2,
                    addr: "127.0.0.1:7102".into(),
                    voter: true,
                    matched_index: 0,
                },
                Member {
                    node_id: 4,
                    addr: "127.0.0.1:7104".into(),
                    voter: false,
                    matched_index: 12,
                },
            ],
        };
        assert_eq!(
            format_status(&status, "127.0.0.1:7102"),
            "Answered by node 2 (Follower) at 127.0.0.1:7102\n\
             Term 3, commit index 40, applied index 39, next job id 7\n\
             Leader: node 1 at 127.0.0.1:7101\n\
             \x20 NODE  ADDRESS         ROLE      MATCHED\n\
             \x20    1  127.0.0.1:7101  leader         40\n\
             \x20    2  127.0.0.1:7102  voter           -\n\
             \x20    4  127.0.0.1:7104  learner        12\n"
        );
        let leaderless = ClusterStatusResponse::default();
        assert!(format_status(&leaderless, "h:1").contains("Leader: none known\n"));
    }

    #[test]
    fn each_node_line_says_what_it_reports_or_that_it_is_unreachable() {
        let own = ClusterStatusResponse {
            node_id: 1,
            role: "Leader".into(),
            term: 3,
            commit_index: 40,
            applied_index: 40,
            ..Default::default()
        };
        let text = format_nodes(&[(1, Some(own)), (3, None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            "     1  Leader           3          40          40"
        );
        assert_eq!(lines[3], "     3  unreachable");
    }
}
