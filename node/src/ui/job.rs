//! The Job page: the job's public facts, "Why it is not running yet" for a
//! pending job (its reason with the numbers and, host by host, what each
//! candidate host lacks, from ExplainJob), its priority breakdown, and,
//! when the viewer may see them, its spec and event history.

use berth_proto::api::{ExplainJobResponse, Job, JobEvent, JobState, PriorityFactors};
use maud::{html, Markup};

use super::fmt;
use super::layout::state_badge;

/// Everything the page shows, gathered by the handler.
#[derive(Debug, Clone, Default)]
pub struct JobView {
    pub job: Job,
    /// For a pending job: the reason and each host's lacks.
    pub explain: Option<ExplainJobResponse>,
    /// For a pending job the last pass ranked.
    pub priority: Option<PriorityFactors>,
    pub events: Vec<JobEvent>,
    /// The viewer may see the spec and the event history (their own job,
    /// an admin, or a site without `[ui] private_job_details`).
    pub details_visible: bool,
}

pub fn render(view: &JobView, now_ms: u64) -> Markup {
    let job = &view.job;
    let spec = job.spec.clone().unwrap_or_default();
    let state = JobState::try_from(job.state)
        .unwrap_or(JobState::Unspecified)
        .as_str_name();
    let pending = job.state == JobState::Pending as i32;
    html! {
        dl.facts #job-facts {
            dt { "State" } dd { (state_badge(state)) @if job.borrowed { " on borrowed (idle-fill) capacity, may be reclaimed" } }
            dt { "Name" } dd { (spec.name) }
            dt { "User" } dd { (spec.user) }
            dt { "Account" } dd { (spec.account) }
            dt { "Partition" } dd { (spec.partitions.join(", ")) }
            dt { "QOS" } dd { (spec.qos) }
            dt { "Asks for" } dd {
                (spec.cpus) " CPUs, " (fmt::mem_mb(spec.mem_mb))
                @if !spec.gres.is_empty() { ", " (spec.gres.join(", ")) }
                @if spec.nodes > 1 { ", " (spec.nodes) " hosts" }
            }
            dt { "Time limit" } dd { @if spec.time_limit_s > 0 { (fmt::duration_s(spec.time_limit_s)) } @else { "none" } }
            dt { "Submitted" } dd { (fmt::time_ms(job.submit_ms)) " (" (fmt::relative_ms(job.submit_ms, now_ms)) ")" }
            @if job.start_ms > 0 {
                dt { "Started" } dd { (fmt::time_ms(job.start_ms)) " on " (job.hosts.join(", ")) }
            }
            @if job.end_ms > 0 {
                dt { "Ended" } dd {
                    (fmt::time_ms(job.end_ms)) ", exit code " (job.exit_code)
                    @if job.exit_signal != 0 { ", signal " (job.exit_signal) }
                }
            }
            @if pending {
                dt { "Priority" } dd { (job.priority) }
                dt { "Expected start" } dd {
                    @if job.predicted_start_ms > 0 {
                        (fmt::time_ms(job.predicted_start_ms)) " (" (fmt::relative_ms(job.predicted_start_ms, now_ms)) ")"
                    } @else {
                        "not predicted: the last pass reserved no room for it"
                    }
                }
            }
        }
        @if pending {
            (why(job, view.explain.as_ref()))
        }
        @if let Some(p) = &view.priority {
            h2 #priority { "Priority breakdown" }
            table.compact #priority-factors {
                caption.note {
                    @if p.fixed {
                        "Fixed by an administrator (scontrol update Priority=); a hold and release gives it back to multifactor."
                    } @else {
                        "The parts of its priority at the last scheduling pass (sprio)."
                    }
                }
                thead { tr {
                    @for h in ["Total", "Age", "Fair share", "Job size", "Partition", "QOS", "Association", "Site", "Nice"] {
                        th scope="col" class="num" { (h) }
                    }
                } }
                tbody { tr {
                    @for v in [p.total, p.age, p.fairshare, p.jobsize, p.partition_factor, p.qos, p.assoc, p.site, p.nice] {
                        td.num { (v) }
                    }
                } }
            }
        }
        @if view.details_visible {
            h2 #spec { "Spec" }
            dl.facts #job-spec {
                dt { "Command" } dd { pre { (spec.command) } }
                dt { "Working directory" } dd { (spec.workdir) }
                dt { "Standard output" } dd { (spec.stdout_path) }
                dt { "Standard error" } dd { (spec.stderr_path) }
                dt { "Requeue" } dd { (if spec.requeue { "yes" } else { "no" }) }
                dt { "Nice" } dd { (spec.nice) }
                @if !spec.comment.is_empty() { dt { "Comment" } dd { (spec.comment) } }
            }
            @if !spec.env.is_empty() {
                table #job-env {
                    caption.note { "Environment" }
                    thead { tr { th scope="col" { "Variable" } th scope="col" { "Value" } } }
                    tbody {
                        @for (k, v) in &spec.env {
                            tr { th scope="row" { (k) } td { (v) } }
                        }
                    }
                }
            }
            h2 #events { "Event history" }
            @if view.events.is_empty() {
                p.note { "No events recorded." }
            } @else {
                table #job-events {
                    thead { tr {
                        th scope="col" class="num" { "#" }
                        th scope="col" { "Time" }
                        th scope="col" { "Event" }
                        th scope="col" { "Message" }
                    } }
                    tbody {
                        @for e in &view.events {
                            tr {
                                td.num { (e.seq) }
                                td { (fmt::time_ms(e.time_ms)) }
                                td { (e.kind) }
                                td { (e.message) }
                            }
                        }
                    }
                }
            }
        } @else {
            p.note #details-private {
                "This site keeps a job's command, environment, paths and event history private to its owner ("
                (spec.user) ") and admins."
            }
        }
    }
}

/// "Why it is not running yet": the reason and every candidate host's lacks.
fn why(job: &Job, explain: Option<&ExplainJobResponse>) -> Markup {
    let reason_text = explain
        .map(|e| e.reason_text.as_str())
        .unwrap_or(job.reason_text.as_str());
    let reason = explain.map(|e| e.reason.as_str()).unwrap_or(&job.reason);
    html! {
        section.why #why aria-labelledby="why-heading" {
            h2 #why-heading { "Why it is not running yet" }
            p #why-reason { strong { (reason_text) } " " span.note { "(Slurm reason " (reason) ")" } }
            @match explain {
                None => p.note { "What each host lacks is not known right now (the leader did not answer)." },
                Some(e) if e.hosts.is_empty() => p #why-hosts-none { "No host is registered with the cluster: there is nowhere it could run yet." },
                Some(e) => {
                    table #why-hosts {
                        caption.note { "What each candidate host lacks for this job" }
                        thead { tr { th scope="col" { "Host" } th scope="col" { "What it lacks" } } }
                        tbody {
                            @for h in &e.hosts {
                                tr { th scope="row" { (h.host) } td { (h.lacks) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{HostRejection, JobSpec};

    const NOW_MS: u64 = 1_796_312_737_000;

    fn pending() -> JobView {
        let job = Job {
            job_id: 42,
            spec: Some(JobSpec {
                name: "big".into(),
                user: "alice".into(),
                account: "physics".into(),
                partitions: vec!["gpu".into()],
                qos: "normal".into(),
                command: "echo $HOME && sleep 1".into(),
                workdir: "/home/alice".into(),
                cpus: 64,
                mem_mb: 1024,
                env: [("OMP_NUM_THREADS".to_string(), "8".to_string())].into(),
                ..Default::default()
            }),
            state: JobState::Pending as i32,
            reason: "Resources".into(),
            reason_text: "Resources".into(),
            submit_ms: NOW_MS - 5_000,
            priority: 1234,
            ..Default::default()
        };
        JobView {
            explain: Some(ExplainJobResponse {
                job_id: 42,
                state: JobState::Pending as i32,
                reason: "Resources".into(),
                reason_text: "Resources: cpus 64 asked, the largest host has 8".into(),
                hosts: vec![
                    HostRejection {
                        host: "node-a".into(),
                        lacks: "cpus: 64 asked, 8 total".into(),
                    },
                    HostRejection {
                        host: "node-b".into(),
                        lacks: "host is drained: GPU 1 gone".into(),
                    },
                ],
            }),
            priority: Some(PriorityFactors {
                job_id: 42,
                total: 1234,
                age: 10,
                fairshare: 1000,
                jobsize: 24,
                qos: 200,
                ..Default::default()
            }),
            events: vec![JobEvent {
                job_id: 42,
                time_ms: NOW_MS - 5_000,
                kind: "SUBMITTED".into(),
                message: "submitted by alice".into(),
                seq: 1,
            }],
            details_visible: true,
            job,
        }
    }

    #[test]
    fn a_pending_job_says_why_host_by_host() {
        let html = render(&pending(), NOW_MS).into_string();
        assert!(html.contains(
            "<p id=\"why-reason\"><strong>Resources: cpus 64 asked, the largest host has 8</strong> <span class=\"note\">(Slurm reason Resources)</span></p>"
        ));
        assert!(html.contains(concat!(
            "<tbody><tr><th scope=\"row\">node-a</th><td>cpus: 64 asked, 8 total</td></tr>",
            "<tr><th scope=\"row\">node-b</th><td>host is drained: GPU 1 gone</td></tr></tbody>"
        )));
        assert!(html.contains(concat!(
            "<tbody><tr><td class=\"num\">1234</td><td class=\"num\">10</td><td class=\"num\">1000</td>",
            "<td class=\"num\">24</td><td class=\"num\">0</td><td class=\"num\">200</td>",
            "<td class=\"num\">0</td><td class=\"num\">0</td><td class=\"num\">0</td></tr></tbody>"
        )));
        assert!(html.contains(
            "<dt>Expected start</dt><dd>not predicted: the last pass reserved no room for it</dd>"
        ));
        assert!(html.contains("<dd><pre>echo $HOME &amp;&amp; sleep 1</pre></dd>"));
        assert!(html.contains("<tr><th scope=\"row\">OMP_NUM_THREADS</th><td>8</td></tr>"));
        assert!(html.contains(
            "<tr><td class=\"num\">1</td><td>2026-12-03 15:45:32 UTC</td><td>SUBMITTED</td><td>submitted by alice</td></tr>"
        ));
        assert!(!html.contains("details-private"));
    }

    #[test]
    fn private_details_are_left_out() {
        let mut view = pending();
        view.details_visible = false;
        let html = render(&view, NOW_MS).into_string();
        assert!(!html.contains("echo $HOME"));
        assert!(!html.contains("OMP_NUM_THREADS"));
        assert!(!html.contains("submitted by alice"));
        assert!(!html.contains("/home/alice"));
        assert!(html.contains("private to its owner (alice) and admins"));
        // Public fields and the reason stay.
        assert!(html.contains("<dt>User</dt><dd>alice</dd>"));
        assert!(html.contains("id=\"why-hosts\""));
    }

    #[test]
    fn a_running_job_has_no_why_section() {
        let mut view = pending();
        view.job.state = JobState::Running as i32;
        view.job.start_ms = NOW_MS - 1_000;
        view.job.hosts = vec!["node-c".into()];
        view.job.borrowed = true;
        view.explain = None;
        view.priority = None;
        let html = render(&view, NOW_MS).into_string();
        assert!(!html.contains("Why it is not running yet"));
        assert!(html.contains("<dt>Started</dt><dd>2026-12-03 15:45:36 UTC on node-c</dd>"));
        assert!(
            html.contains("RUNNING</span> on borrowed (idle-fill) capacity, may be reclaimed</dd>")
        );
    }

    #[test]
    fn a_pending_job_with_no_host_at_all() {
        let mut view = pending();
        if let Some(e) = view.explain.as_mut() {
            e.hosts.clear();
        }
        let html = render(&view, NOW_MS).into_string();
        assert!(html.contains("<p id=\"why-hosts-none\">No host is registered with the cluster: there is nowhere it could run yet.</p>"));
    }
}
