//! The Fair share and quotas page: each account's shares and decayed
//! usage beside its siblings', what its running jobs hold now against its
//! quota (GrpTRES, GrpJobs), the same for each QOS, and the running jobs
//! on borrowed (idle-fill) capacity.

use std::collections::BTreeMap;

use berth_proto::api::{Account, Job, Limits, Qos};
use maud::{html, Markup};

use super::fmt;

/// Everything the page shows, gathered by the handler.
#[derive(Debug, Clone, Default)]
pub struct FairShareView {
    pub accounts: Vec<Account>,
    pub qos: Vec<Qos>,
    pub running: Vec<Job>,
    /// Decayed usage per account, CPU-seconds (fair share's billing).
    pub usage_cpu_s: BTreeMap<String, f64>,
}

/// What a group of running jobs holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub jobs: u64,
    pub cpus: u64,
    pub mem_mb: u64,
    pub gpus: u64,
    pub borrowed: u64,
}

impl Held {
    fn add(&mut self, job: &Job) {
        let spec = job.spec.clone().unwrap_or_default();
        // A job holds its request on each of its hosts.
        let hosts = job.hosts.len().max(1) as u64;
        self.jobs += 1;
        self.cpus += u64::from(spec.cpus.max(1)) * hosts;
        self.mem_mb += spec.mem_mb * hosts;
        self.gpus += fmt::gpus_asked(&spec.gres) * hosts;
        self.borrowed += u64::from(job.borrowed);
    }
}

/// What running jobs hold, grouped by `key` (account or QOS).
pub fn held_by(running: &[Job], key: impl Fn(&Job) -> String) -> BTreeMap<String, Held> {
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    for job in running {
        held.entry(key(job)).or_default().add(job);
    }
    held
}

/// `used / limit`, or `used` with "no limit" when the quota has none.
fn against(used: String, limit: Option<String>) -> Markup {
    html! {
        @match limit {
            Some(l) => { (used) " / " (l) }
            None => { (used) span.note { " (no limit)" } }
        }
    }
}

fn grp(limits: Option<&Limits>, key: &str) -> Option<u64> {
    limits.and_then(|l| l.grp_tres.get(key).copied())
}

/// `part` as a percentage of `whole` with one decimal, or a dash.
fn percent(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "\u{2014}".into()
    }
}

pub fn render(view: &FairShareView) -> Markup {
    let by_account = held_by(&view.running, |j| {
        j.spec
            .as_ref()
            .map(|s| s.account.clone())
            .unwrap_or_default()
    });
    let by_qos = held_by(&view.running, |j| {
        j.spec.as_ref().map(|s| s.qos.clone()).unwrap_or_default()
    });
    // Shares and usage are compared among siblings (same parent), as fair
    // share does.
    let mut sibling_shares: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sibling_usage: BTreeMap<&str, f64> = BTreeMap::new();
    for a in &view.accounts {
        *sibling_shares.entry(a.parent.as_str()).or_default() += u64::from(a.shares);
        *sibling_usage.entry(a.parent.as_str()).or_default() +=
            view.usage_cpu_s.get(&a.name).copied().unwrap_or(0.0);
    }
    let borrowed: Vec<&Job> = view.running.iter().filter(|j| j.borrowed).collect();
    html! {
        h2 #accounts-heading { "Accounts" }
        @if view.accounts.is_empty() {
            p.note #no-accounts { "No account is defined: every job shares one pool and fair share has nothing to divide." }
        } @else {
            table #accounts {
                caption.note { "Shares and usage are compared with the account's siblings (same parent). Usage is decayed CPU time. Held now: what its running jobs hold, against its GrpTRES and GrpJobs quota." }
                thead { tr {
                    th scope="col" { "Account" }
                    th scope="col" { "Parent" }
                    th scope="col" class="num" { "Shares" }
                    th scope="col" class="num" { "Share of siblings" }
                    th scope="col" class="num" { "Usage (CPU-hours)" }
                    th scope="col" class="num" { "Usage of siblings" }
                    th scope="col" class="num" { "Running jobs" }
                    th scope="col" class="num" { "CPUs held" }
                    th scope="col" class="num" { "Memory held" }
                    th scope="col" class="num" { "GPUs held" }
                    th scope="col" class="num" { "On borrowed capacity" }
                } }
                tbody {
                    @for a in &view.accounts {
                        @let held = by_account.get(&a.name).copied().unwrap_or_default();
                        @let usage = view.usage_cpu_s.get(&a.name).copied().unwrap_or(0.0);
                        @let limits = a.limits.as_ref();
                        tr id={ "account-" (a.name) } {
                            th scope="row" { (a.name) }
                            td { @if a.parent.is_empty() { "root" } @else { (a.parent) } }
                            td.num { (a.shares) }
                            td.num { (percent(f64::from(a.shares), sibling_shares.get(a.parent.as_str()).copied().unwrap_or(0) as f64)) }
                            td.num { (format!("{:.1}", usage / 3600.0)) }
                            td.num { (percent(usage, sibling_usage.get(a.parent.as_str()).copied().unwrap_or(0.0))) }
                            td.num { (against(held.jobs.to_string(), limits.and_then(|l| l.grp_jobs).map(|n| n.to_string()))) }
                            td.num { (against(held.cpus.to_string(), grp(limits, "cpu").map(|n| n.to_string()))) }
                            td.num { (against(fmt::mem_mb(held.mem_mb), grp(limits, "mem_mb").map(fmt::mem_mb))) }
                            td.num { (against(held.gpus.to_string(), grp(limits, "gpu").map(|n| n.to_string()))) }
                            td.num { (held.borrowed) }
                        }
                    }
                }
            }
        }
        h2 #qos-heading { "QOS" }
        @if view.qos.is_empty() {
            p.note { "No QOS is defined." }
        } @else {
            table #qos {
                thead { tr {
                    th scope="col" { "QOS" }
                    th scope="col" class="num" { "Priority" }
                    th scope="col" class="num" { "Usage factor" }
                    th scope="col" class="num" { "Running jobs" }
                    th scope="col" class="num" { "CPUs held" }
                    th scope="col" class="num" { "GPUs held" }
                    th scope="col" { "Flags" }
                } }
                tbody {
                    @for q in &view.qos {
                        @let held = by_qos.get(&q.name).copied().unwrap_or_default();
                        @let limits = q.limits.as_ref();
                        tr id={ "qos-" (q.name) } {
                            th scope="row" { (q.name) }
                            td.num { (q.priority) }
                            td.num { (q.usage_factor.unwrap_or(1.0)) }
                            td.num { (against(held.jobs.to_string(), limits.and_then(|l| l.grp_jobs).map(|n| n.to_string()))) }
                            td.num { (against(held.cpus.to_string(), grp(limits, "cpu").map(|n| n.to_string()))) }
                            td.num { (against(held.gpus.to_string(), grp(limits, "gpu").map(|n| n.to_string()))) }
                            td { (q.flags.join(", ")) }
                        }
                    }
                }
            }
        }
        h2 #borrowed-heading { "Borrowed capacity" }
        @if borrowed.is_empty() {
            p #borrowed-none { "No running job is on borrowed (idle-fill) capacity." }
        } @else {
            table #borrowed {
                caption.note { "Running jobs on capacity lent by idle-fill; they may be reclaimed." }
                thead { tr {
                    th scope="col" { "Job" }
                    th scope="col" { "User" }
                    th scope="col" { "Account" }
                    th scope="col" { "Hosts" }
                    th scope="col" class="num" { "CPUs" }
                } }
                tbody {
                    @for j in &borrowed {
                        @let spec = j.spec.clone().unwrap_or_default();
                        tr {
                            th scope="row" { a href={ "/ui/jobs/" (j.job_id) } { (j.job_id) } }
                            td { (spec.user) }
                            td { (spec.account) }
                            td { (j.hosts.join(", ")) }
                            td.num { (spec.cpus) }
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
    use berth_proto::api::{JobSpec, JobState};

    fn running(id: u64, account: &str, qos: &str, cpus: u32, gres: &[&str], borrowed: bool) -> Job {
        Job {
            job_id: id,
            spec: Some(JobSpec {
                user: "alice".into(),
                account: account.into(),
                qos: qos.into(),
                cpus,
                mem_mb: 1024,
                gres: gres.iter().map(|g| g.to_string()).collect(),
                ..Default::default()
            }),
            state: JobState::Running as i32,
            hosts: vec!["h1".into()],
            borrowed,
            ..Default::default()
        }
    }

    fn view() -> FairShareView {
        FairShareView {
            accounts: vec![
                Account {
                    name: "physics".into(),
                    shares: 3,
                    limits: Some(Limits {
                        grp_tres: [("cpu".to_string(), 16), ("gpu".to_string(), 2)].into(),
                        grp_jobs: Some(10),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Account {
                    name: "chem".into(),
                    shares: 1,
                    ..Default::default()
                },
            ],
            qos: vec![Qos {
                name: "normal".into(),
                priority: 10,
                limits: Some(Limits {
                    grp_tres: [("gpu".to_string(), 8)].into(),
                    ..Default::default()
                }),
                flags: vec!["DenyOnLimit".into()],
                ..Default::default()
            }],
            running: vec![
                running(1, "physics", "normal", 4, &["gpu:a100:1"], false),
                running(2, "physics", "normal", 2, &[], true),
                running(3, "chem", "normal", 1, &[], false),
            ],
            usage_cpu_s: [
                ("physics".to_string(), 27_000.0),
                ("chem".to_string(), 9_000.0),
            ]
            .into(),
        }
    }

    #[test]
    fn accounts_show_shares_usage_and_quota() {
        let html = render(&view()).into_string();
        assert!(html.contains(concat!(
            "<tr id=\"account-physics\"><th scope=\"row\">physics</th><td>root</td>",
            "<td class=\"num\">3</td><td class=\"num\">75.0%</td>",
            "<td class=\"num\">7.5</td><td class=\"num\">75.0%</td>",
            "<td class=\"num\">2 / 10</td><td class=\"num\">6 / 16</td>",
            "<td class=\"num\">2.0 GiB<span class=\"note\"> (no limit)</span></td>",
            "<td class=\"num\">1 / 2</td><td class=\"num\">1</td></tr>"
        )));
        assert!(html.contains(concat!(
            "<td class=\"num\">1</td><td class=\"num\">25.0%</td>",
            "<td class=\"num\">2.5</td><td class=\"num\">25.0%</td>"
        )));
        assert!(html.contains(concat!(
            "<tr id=\"qos-normal\"><th scope=\"row\">normal</th><td class=\"num\">10</td>",
            "<td class=\"num\">1</td><td class=\"num\">3<span class=\"note\"> (no limit)</span></td>",
            "<td class=\"num\">7<span class=\"note\"> (no limit)</span></td>",
            "<td class=\"num\">1 / 8</td><td>DenyOnLimit</td></tr>"
        )));
        assert!(html.contains(concat!(
            "<tbody><tr><th scope=\"row\"><a href=\"/ui/jobs/2\">2</a></th>",
            "<td>alice</td><td>physics</td><td>h1</td><td class=\"num\">2</td></tr></tbody>"
        )));
    }

    #[test]
    fn nothing_defined_nothing_borrowed() {
        let html = render(&FairShareView::default()).into_string();
        assert!(html.contains("id=\"no-accounts\""));
        assert!(html.contains(
            "<p id=\"borrowed-none\">No running job is on borrowed (idle-fill) capacity.</p>"
        ));
    }
}
