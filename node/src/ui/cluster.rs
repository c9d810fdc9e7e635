//! The Cluster page: members, leader, term, commit and applied index, the
//! last failover as this node saw it, and the last scheduling pass this
//! node ran.

use berth_proto::api::ClusterStatusResponse;
use maud::{html, Markup};

use super::fmt;
use super::track::{LastPass, LeaderChange};

/// What the page shows besides ClusterStatus (this node's soft state).
#[derive(Debug, Clone, Default)]
pub struct ClusterView {
    pub status: ClusterStatusResponse,
    /// Leader changes this node saw, oldest first.
    pub leader_changes: Vec<LeaderChange>,
    /// Since when this node has known no leader, if it knows none now.
    pub leaderless_since_ms: Option<u64>,
    /// The last pass this node ran (passes run on the leader only).
    pub last_pass: Option<LastPass>,
}

fn leader_name(id: Option<u64>) -> String {
    match id {
        Some(id) => format!("node {id}"),
        None => "none known".into(),
    }
}

pub fn render(view: &ClusterView, now_ms: u64) -> Markup {
    let s = &view.status;
    let is_leader = s.leader_id != 0 && s.leader_id == s.node_id;
    let last_failover = view.leader_changes.iter().rev().find(|c| c.from.is_some());
    html! {
        dl.facts #cluster-facts {
            dt { "This node" } dd { "node " (s.node_id) " (" (s.role) ")" }
            dt { "Leader" } dd {
                @if s.leader_id == 0 { "none known right now" }
                @else { "node " (s.leader_id) " at " (s.leader_addr) }
            }
            dt { "Term" } dd { (s.term) }
            dt { "Commit index" } dd { (s.commit_index) @if !is_leader { " (as far as this follower knows: what it applied)" } }
            dt { "Applied index" } dd { (s.applied_index) }
            dt { "Next job id" } dd { (s.next_job_id) }
        }
        h2 #members-heading { "Members" }
        table #members {
            thead { tr {
                th scope="col" { "Node" }
                th scope="col" { "Address" }
                th scope="col" { "Role" }
                th scope="col" class="num" { "Matched index" }
            } }
            tbody {
                @for m in &s.members {
                    tr id={ "member-" (m.node_id) } {
                        th scope="row" { (m.node_id) }
                        td { (m.addr) }
                        td {
                            (if m.voter { "voter" } else { "learner" })
                            @if m.node_id == s.leader_id { ", leader" }
                            @if m.node_id == s.node_id { " (this node)" }
                        }
                        td.num {
                            @if is_leader { (if m.node_id == s.node_id { s.commit_index.max(m.matched_index) } else { m.matched_index }) }
                            @else { "known to the leader" }
                        }
                    }
                }
            }
        }
        h2 #failover-heading { "Last failover" }
        @if let Some(since) = view.leaderless_since_ms {
            p #leaderless { strong { "No leader known" } " for " (fmt::duration_s(now_ms.saturating_sub(since) / 1000)) ": an election is under way." }
        }
        @match last_failover {
            Some(c) => p #last-failover {
                "At " (fmt::time_ms(c.at_ms)) " (" (fmt::relative_ms(c.at_ms, now_ms)) ") the leader changed from "
                (leader_name(c.from)) " to node " (c.to) " in term " (c.term) "; "
                @match c.leaderless_ms {
                    Some(ms) => { "this node was without a leader for " (ms) " ms." }
                    None => { "this node saw no gap (the new leader's first message was the first sign)." }
                }
            },
            None => p #last-failover { "None since this node started." },
        }
        p.note {
            "Seen from this node: the time runs from the moment it saw the old leader gone to the moment it knew the new one. "
            "The old leader's silence before an election starts (up to the election timeout) comes on top."
        }
        @if view.leader_changes.len() > 1 {
            table #leader-changes {
                caption.note { "Leader changes seen by this node since it started, newest first" }
                thead { tr {
                    th scope="col" { "When" }
                    th scope="col" { "From" }
                    th scope="col" { "To" }
                    th scope="col" class="num" { "Term" }
                    th scope="col" class="num" { "Without a leader" }
                } }
                tbody {
                    @for c in view.leader_changes.iter().rev() {
                        tr {
                            td { (fmt::time_ms(c.at_ms)) }
                            td { (leader_name(c.from)) }
                            td { "node " (c.to) }
                            td.num { (c.term) }
                            td.num { @match c.leaderless_ms { Some(ms) => { (ms) " ms" } None => { "\u{2014}" } } }
                        }
                    }
                }
            }
        }
        h2 #pass-heading { "Scheduler" }
        @match view.last_pass {
            Some(p) => p #last-pass {
                "Last pass on this node " (fmt::relative_ms(p.at_ms, now_ms)) " (" (fmt::time_ms(p.at_ms)) "): took "
                (format!("{:.1}", p.duration_us as f64 / 1000.0)) " ms, planned " (p.starts) " starts, left "
                (p.waiting) " jobs waiting."
                @if !is_leader { " This node is not the leader now; passes run on the leader." }
            },
            None => p #last-pass {
                @if is_leader { "No pass has run yet on this node." }
                @else { "This node has run no pass: passes run on the leader (node " (s.leader_id) "); its Cluster page shows them." }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::Member;

    const NOW_MS: u64 = 1_796_312_737_000;

    fn status(node_id: u64) -> ClusterStatusResponse {
        ClusterStatusResponse {
            node_id,
            leader_id: 2,
            leader_addr: "127.0.0.1:7002".into(),
            term: 5,
            role: if node_id == 2 { "Leader" } else { "Follower" }.into(),
            commit_index: 120,
            applied_index: 120,
            members: vec![
                Member {
                    node_id: 1,
                    addr: "127.0.0.1:7001".into(),
                    voter: true,
                    matched_index: 119,
                },
                Member {
                    node_id: 2,
                    addr: "127.0.0.1:7002".into(),
                    voter: true,
                    matched_index: 0,
                },
                Member {
                    node_id: 4,
                    addr: "127.0.0.1:7004".into(),
                    voter: false,
                    matched_index: 80,
                },
            ],
            next_job_id: 31,
        }
    }

    #[test]
    fn the_leader_shows_members_failover_and_pass_time() {
        let view = ClusterView {
            status: status(2),
            leader_changes: vec![
                LeaderChange {
                    at_ms: NOW_MS - 600_000,
                    from: None,
                    to: 1,
                    term: 1,
                    leaderless_ms: None,
                },
                LeaderChange {
                    at_ms: NOW_MS - 60_000,
                    from: Some(1),
                    to: 2,
                    term: 5,
                    leaderless_ms: Some(412),
                },
            ],
            leaderless_since_ms: None,
            last_pass: Some(LastPass {
                at_ms: NOW_MS - 2_000,
                duration_us: 1_530,
                starts: 3,
                waiting: 7,
            }),
        };
        let html = render(&view, NOW_MS).into_string();
        assert!(html.contains("<dt>Leader</dt><dd>node 2 at 127.0.0.1:7002</dd><dt>Term</dt><dd>5</dd><dt>Commit index</dt><dd>120</dd>"));
        assert!(html.contains(
            "<tr id=\"member-1\"><th scope=\"row\">1</th><td>127.0.0.1:7001</td><td>voter</td><td class=\"num\">119</td></tr>"
        ));
        assert!(html.contains(
            "<tr id=\"member-2\"><th scope=\"row\">2</th><td>127.0.0.1:7002</td><td>voter, leader (this node)</td><td class=\"num\">120</td></tr>"
        ));
        assert!(html.contains("<td>learner</td><td class=\"num\">80</td>"));
        assert!(html.contains(
            "<p id=\"last-failover\">At 2026-12-03 15:44:37 UTC (1m 0s ago) the leader changed from node 1 to node 2 in term 5; this node was without a leader for 412 ms.</p>"
        ));
        assert!(html.contains(
            "<p id=\"last-pass\">Last pass on this node 2s ago (2026-12-03 15:45:35 UTC): took 1.5 ms, planned 3 starts, left 7 jobs waiting.</p>"
        ));
        assert!(html.contains("<td>none known</td><td>node 1</td>"));
    }

    #[test]
    fn a_follower_points_at_the_leader_for_passes() {
        let view = ClusterView {
            status: status(1),
            leaderless_since_ms: Some(NOW_MS - 3_000),
            ..Default::default()
        };
        let html = render(&view, NOW_MS).into_string();
        assert!(html.contains("<dd>120 (as far as this follower knows: what it applied)</dd>"));
        assert!(html.contains("<td class=\"num\">known to the leader</td>"));
        assert!(html.contains("<p id=\"last-failover\">None since this node started.</p>"));
        assert!(html.contains("<p id=\"leaderless\"><strong>No leader known</strong> for 3s: an election is under way.</p>"));
        assert!(html.contains(
            "<p id=\"last-pass\">This node has run no pass: passes run on the leader (node 2); its Cluster page shows them.</p>"
        ));
        assert!(!html.contains("leader-changes"));
    }
}
