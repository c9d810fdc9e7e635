//! The Queue page: pending and running jobs (or those of one state), with
//! their reason in words and predicted start, filtered by user, partition
//! and state and sorted, all from query parameters so the page works
//! without JavaScript.

use berth_proto::api::{Job, JobState};
use maud::{html, Markup};
use serde::Deserialize;

use super::fmt;
use super::layout::state_badge;

/// The query string of `/ui/queue`. Empty values (what an untouched form
/// field sends) mean "no filter"; an unknown key is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueQuery {
    pub user: String,
    pub partition: String,
    /// A state name as in [`STATE_CHOICES`]; empty: pending and running.
    pub state: String,
    /// A key of [`SORT_KEYS`]; empty: priority.
    pub sort: String,
    /// `asc` or `desc`; empty: the key's natural order.
    pub order: String,
}

/// The states the filter offers: (query value, label, states asked for).
pub const STATE_CHOICES: &[(&str, &str, &[JobState])] = &[
    (
        "",
        "Pending and running",
        &[JobState::Pending, JobState::Running],
    ),
    ("pending", "Pending", &[JobState::Pending]),
    ("running", "Running", &[JobState::Running]),
    ("completed", "Completed", &[JobState::Completed]),
    ("failed", "Failed", &[JobState::Failed]),
    ("cancelled", "Cancelled", &[JobState::Cancelled]),
    ("timeout", "Timeout", &[JobState::Timeout]),
    ("node_fail", "Node fail", &[JobState::NodeFail]),
    ("preempted", "Preempted", &[JobState::Preempted]),
];

/// Sort keys: (query value, label, descending by default).
pub const SORT_KEYS: &[(&str, &str, bool)] = &[
    ("priority", "Priority", true),
    ("id", "Job id", false),
    ("submit", "Submit time", false),
    ("user", "User", false),
    ("partition", "Partition", false),
    ("state", "State", false),
    ("start", "Start (predicted or actual)", false),
];

/// A query that passed its checks: the states to list and the order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlan {
    pub states: Vec<JobState>,
    pub sort: &'static str,
    pub descending: bool,
}

impl QueueQuery {
    /// Checks the values; the error names the parameter and what it takes.
    pub fn plan(&self) -> Result<QueuePlan, String> {
        let states = STATE_CHOICES
            .iter()
            .find(|(value, _, _)| *value == self.state)
            .map(|(_, _, states)| states.to_vec())
            .ok_or_else(|| {
                format!(
                    "state {:?} is not one of: {}",
                    self.state,
                    STATE_CHOICES
                        .iter()
                        .skip(1)
                        .map(|c| c.0)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        let key = if self.sort.is_empty() {
            "priority"
        } else {
            &self.sort
        };
        let (sort, _, default_desc) = SORT_KEYS
            .iter()
            .find(|(value, _, _)| *value == key)
            .ok_or_else(|| {
                format!(
                    "sort {:?} is not one of: {}",
                    self.sort,
                    SORT_KEYS.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
                )
            })?;
        let descending = match self.order.as_str() {
            "" => *default_desc,
            "asc" => false,
            "desc" => true,
            other => return Err(format!("order {other:?} is not asc or desc")),
        };
        Ok(QueuePlan {
            states,
            sort,
            descending,
        })
    }
}

/// A job's partition as the queue shows it: where it runs, else the
/// partitions it asked for.
fn partitions(job: &Job) -> String {
    job.spec
        .as_ref()
        .map(|s| s.partitions.join(","))
        .unwrap_or_default()
}

fn state_name(job: &Job) -> &'static str {
    JobState::try_from(job.state)
        .unwrap_or(JobState::Unspecified)
        .as_str_name()
}

/// When it starts or started: the start for a placed job, else the
/// prediction (0 when none).
fn start_ms(job: &Job) -> u64 {
    if job.start_ms > 0 {
        job.start_ms
    } else {
        job.predicted_start_ms
    }
}

/// Keeps the jobs the filters match (the states were asked of the API)
/// and sorts them; ties go by job id so the order is stable.
pub fn select(mut jobs: Vec<Job>, query: &QueueQuery, plan: &QueuePlan) -> Vec<Job> {
    jobs.retain(|j| {
        let spec = j.spec.as_ref();
        (query.user.is_empty() || spec.is_some_and(|s| s.user == query.user))
            && (query.partition.is_empty()
                || spec.is_some_and(|s| s.partitions.contains(&query.partition)))
    });
    let user = |j: &Job| j.spec.as_ref().map(|s| s.user.clone()).unwrap_or_default();
    jobs.sort_by(|a, b| {
        let order = match plan.sort {
            "id" => a.job_id.cmp(&b.job_id),
            "submit" => a.submit_ms.cmp(&b.submit_ms),
            "user" => user(a).cmp(&user(b)),
            "partition" => partitions(a).cmp(&partitions(b)),
            "state" => state_name(a).cmp(state_name(b)),
            // No start known sorts last either way round.
            "start" => (start_ms(a) == 0, start_ms(a)).cmp(&(start_ms(b) == 0, start_ms(b))),
            _ => a.priority.cmp(&b.priority),
        };
        let order = if plan.descending {
            order.reverse()
        } else {
            order
        };
        order.then(a.job_id.cmp(&b.job_id))
    });
    jobs
}

/// The page body. `jobs` are already selected and sorted; `truncated`
/// says the API returned only the first of more.
pub fn render(
    jobs: &[Job],
    query: &QueueQuery,
    plan: &QueuePlan,
    truncated: bool,
    now_ms: u64,
) -> Markup {
    let pending = jobs
        .iter()
        .filter(|j| j.state == JobState::Pending as i32)
        .count();
    let running = jobs
        .iter()
        .filter(|j| j.state == JobState::Running as i32)
        .count();
    html! {
        form.filters method="get" action="/ui/queue" aria-label="Filter and sort the queue" {
            label { "User" input name="user" type="text" value=(query.user) placeholder="any"; }
            label { "Partition" input name="partition" type="text" value=(query.partition) placeholder="any"; }
            label { "State"
                select name="state" {
                    @for (value, label, _) in STATE_CHOICES {
                        option value=(value) selected[*value == query.state] { (label) }
                    }
                }
            }
            label { "Sort by"
                select name="sort" {
                    @for (value, label, _) in SORT_KEYS {
                        option value=(value) selected[*value == plan.sort] { (label) }
                    }
                }
            }
            label { "Order"
                select name="order" {
                    option value="asc" selected[!plan.descending] { "Ascending" }
                    option value="desc" selected[plan.descending] { "Descending" }
                }
            }
            button type="submit" { "Apply" }
        }
        p #queue-summary {
            "Jobs shown: " (jobs.len()) " (" (pending) " pending, " (running) " running)."
            @if truncated {
                " Only the first jobs the API returns are listed; narrow the filter to see the rest."
            }
        }
        @if jobs.is_empty() {
            p.note { "No job matches these filters." }
        } @else {
            div.scroll { table #queue {
                caption.note { "Sorted by " (plan.sort) (if plan.descending { ", descending" } else { ", ascending" }) }
                thead {
                    tr {
                        th scope="col" { "Job" }
                        th scope="col" { "Name" }
                        th scope="col" { "User" }
                        th scope="col" { "Account" }
                        th scope="col" { "Partition" }
                        th scope="col" { "QOS" }
                        th scope="col" { "State" }
                        th scope="col" { "Asks for" }
                        th scope="col" class="num" { "Priority" }
                        th scope="col" { "Submitted" }
                        th scope="col" { "Start" }
                        th scope="col" { "Reason" }
                    }
                }
                tbody {
                    @for job in jobs {
                        (row(job, now_ms))
                    }
                }
            } }
        }
    }
}

fn row(job: &Job, now_ms: u64) -> Markup {
    let spec = job.spec.clone().unwrap_or_default();
    let state = state_name(job);
    html! {
        tr id={ "job-" (job.job_id) } {
            th scope="row" { a href={ "/ui/jobs/" (job.job_id) } { (job.job_id) } }
            td.nowrap { (spec.name) }
            td { (spec.user) }
            td { (spec.account) }
            td { (partitions(job)) }
            td { (spec.qos) }
            td {
                (state_badge(state))
                @if job.borrowed { " (borrowed)" }
            }
            td.nowrap {
                (fmt::count(u64::from(spec.cpus), "CPU")) ", " (fmt::mem_mb(spec.mem_mb))
                @for g in &spec.gres { br; (g) }
            }
            td.num { @if job.state == JobState::Pending as i32 { (job.priority) } }
            td.nowrap { (fmt::relative_ms(job.submit_ms, now_ms)) }
            td.nowrap {
                @if job.start_ms > 0 {
                    "started " (fmt::relative_ms(job.start_ms, now_ms))
                    @if !job.hosts.is_empty() { br; "on " (job.hosts.join(", ")) }
                } @else if job.predicted_start_ms > 0 {
                    "expected " (fmt::relative_ms(job.predicted_start_ms, now_ms))
                } @else {
                    "\u{2014}"
                }
            }
            td.reason { @if job.state == JobState::Pending as i32 { (job.reason_text) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::JobSpec;

    const NOW_MS: u64 = 1_796_312_737_000;

    fn job(id: u64, user: &str, partition: &str, state: JobState, priority: u64) -> Job {
        Job {
            job_id: id,
            spec: Some(JobSpec {
                name: format!("j{id}"),
                user: user.into(),
                account: "physics".into(),
                partitions: vec![partition.into()],
                qos: "normal".into(),
                cpus: 2,
                mem_mb: 2048,
                gres: vec!["gpu:1".into()],
                ..Default::default()
            }),
            state: state as i32,
            submit_ms: NOW_MS - 60_000 + id,
            priority,
            ..Default::default()
        }
    }

    fn fixture() -> Vec<Job> {
        let mut pending = job(7, "alice", "gpu", JobState::Pending, 900);
        pending.reason = "Resources".into();
        pending.reason_text = "Resources: cpus 64 asked > 32 on the largest host".into();
        pending.predicted_start_ms = NOW_MS + 125_000;
        let mut running = job(3, "bob", "cpu", JobState::Running, 0);
        running.start_ms = NOW_MS - 30_000;
        running.hosts = vec!["node-a".into()];
        running.borrowed = true;
        vec![
            running,
            pending,
            job(9, "alice", "cpu", JobState::Pending, 100),
        ]
    }

    #[test]
    fn query_values_are_checked_and_name_the_parameter() {
        let plan = QueueQuery::default().plan().unwrap();
        assert_eq!(
            plan,
            QueuePlan {
                states: vec![JobState::Pending, JobState::Running],
                sort: "priority",
                descending: true,
            }
        );
        let bad = QueueQuery {
            state: "sleeping".into(),
            ..Default::default()
        };
        assert_eq!(
            bad.plan().unwrap_err(),
            "state \"sleeping\" is not one of: pending, running, completed, failed, cancelled, timeout, node_fail, preempted"
        );
        let bad = QueueQuery {
            sort: "colour".into(),
            ..Default::default()
        };
        assert!(bad
            .plan()
            .unwrap_err()
            .starts_with("sort \"colour\" is not one of: priority, id"));
        let bad = QueueQuery {
            order: "up".into(),
            ..Default::default()
        };
        assert_eq!(bad.plan().unwrap_err(), "order \"up\" is not asc or desc");
    }

    #[test]
    fn filters_and_sorts() {
        let query = QueueQuery::default();
        let plan = query.plan().unwrap();
        let ids: Vec<u64> = select(fixture(), &query, &plan)
            .iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(ids, vec![7, 9, 3], "priority, highest first");

        let query = QueueQuery {
            user: "alice".into(),
            sort: "id".into(),
            ..Default::default()
        };
        let plan = query.plan().unwrap();
        let ids: Vec<u64> = select(fixture(), &query, &plan)
            .iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(ids, vec![7, 9]);

        let query = QueueQuery {
            partition: "cpu".into(),
            sort: "start".into(),
            order: "asc".into(),
            ..Default::default()
        };
        let plan = query.plan().unwrap();
        let ids: Vec<u64> = select(fixture(), &query, &plan)
            .iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(ids, vec![3, 9], "a job with no start known sorts last");
    }

    #[test]
    fn renders_rows_with_reason_and_predicted_start() {
        let query = QueueQuery::default();
        let plan = query.plan().unwrap();
        let jobs = select(fixture(), &query, &plan);
        let html = render(&jobs, &query, &plan, false, NOW_MS).into_string();
        assert!(html.contains("<p id=\"queue-summary\">Jobs shown: 3 (2 pending, 1 running).</p>"));
        assert!(html.contains(concat!(
            "<tr id=\"job-7\"><th scope=\"row\"><a href=\"/ui/jobs/7\">7</a></th>",
            "<td class=\"nowrap\">j7</td><td>alice</td><td>physics</td><td>gpu</td><td>normal</td>",
            "<td><span class=\"state state-PENDING\">PENDING</span></td>",
            "<td class=\"nowrap\">2 CPUs, 2.0 GiB<br>gpu:1</td>",
            "<td class=\"num\">900</td><td class=\"nowrap\">59s ago</td><td class=\"nowrap\">expected in 2m 5s</td>",
            "<td class=\"reason\">Resources: cpus 64 asked &gt; 32 on the largest host</td></tr>"
        )));
        assert!(html.contains(concat!(
            "<td><span class=\"state state-RUNNING\">RUNNING</span> (borrowed)</td>",
            "<td class=\"nowrap\">2 CPUs, 2.0 GiB<br>gpu:1</td>",
            "<td class=\"num\"></td><td class=\"nowrap\">59s ago</td><td class=\"nowrap\">started 30s ago<br>on node-a</td>",
            "<td class=\"reason\"></td></tr>"
        )));
        assert!(html.contains("<option value=\"priority\" selected>Priority</option>"));
        assert!(html.contains("<option value=\"desc\" selected>Descending</option>"));
        // Every column header is scoped.
        assert_eq!(html.matches("<th scope=\"col\"").count(), 12);
    }

    #[test]
    fn user_text_is_escaped() {
        let mut evil = job(1, "<script>alert(1)</script>", "cpu", JobState::Pending, 1);
        evil.reason_text = "\"><img src=x>".into();
        let query = QueueQuery {
            user: "\"><b>".into(),
            ..Default::default()
        };
        let plan = QueueQuery::default().plan().unwrap();
        let html = render(&[evil], &query, &plan, true, NOW_MS).into_string();
        assert!(!html.contains("<script>alert"));
        assert!(!html.contains("<img"));
        assert!(!html.contains("<b>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("value=\"&quot;&gt;&lt;b&gt;\""));
        assert!(html.contains("narrow the filter"));
    }
}
