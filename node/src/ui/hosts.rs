//! The Hosts page: each host's state, inventory (CPUs, memory, GPUs,
//! emulator units), what is allocated and to which jobs, and why a host is
//! drained or down.

use std::collections::BTreeMap;

use berth_proto::api::{Host, Job};
use maud::{html, Markup};

use super::fmt;
use super::layout::state_badge;

/// The running jobs on each host, by host name.
pub fn jobs_by_host(running: &[Job]) -> BTreeMap<String, Vec<&Job>> {
    let mut by_host: BTreeMap<String, Vec<&Job>> = BTreeMap::new();
    for job in running {
        for host in &job.hosts {
            by_host.entry(host.clone()).or_default().push(job);
        }
    }
    by_host
}

pub fn render(hosts: &[Host], running: &[Job]) -> Markup {
    let by_host = jobs_by_host(running);
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for h in hosts {
        *by_state.entry(h.state.as_str()).or_default() += 1;
    }
    html! {
        p #hosts-summary {
            (hosts.len()) " hosts"
            @for (state, n) in &by_state { ", " (n) " " (state) }
            "."
        }
        @if hosts.is_empty() {
            p.note { "No host has registered yet: start a berth-agent pointed at this cluster." }
        } @else {
            table #hosts {
                thead { tr {
                    th scope="col" { "Host" }
                    th scope="col" { "State" }
                    th scope="col" class="num" { "CPUs used / total" }
                    th scope="col" class="num" { "Memory used / total" }
                    th scope="col" { "GPUs" }
                    th scope="col" { "Emulator units" }
                    th scope="col" { "Partitions" }
                    th scope="col" { "Features" }
                    th scope="col" { "Running jobs" }
                    th scope="col" { "Drain or down reason" }
                } }
                tbody {
                    @for h in hosts {
                        (row(h, by_host.get(&h.name).map(Vec::as_slice).unwrap_or(&[])))
                    }
                }
            }
        }
    }
}

fn row(host: &Host, jobs: &[&Job]) -> Markup {
    let inv = host.inventory.clone().unwrap_or_default();
    let gpus_used: u64 = jobs
        .iter()
        .map(|j| j.spec.as_ref().map_or(0, |s| fmt::gpus_asked(&s.gres)))
        .sum();
    html! {
        tr id={ "host-" (host.name) } {
            th scope="row" { (host.name) }
            td { (state_badge(&host.state)) }
            td.num { (host.alloc_cpus) " / " (inv.cpus) }
            td.num { (fmt::mem_mb(host.alloc_memory_mb)) " / " (fmt::mem_mb(inv.memory_mb)) }
            td {
                @if inv.gpus.is_empty() { "none" } @else {
                    (gpus_used) " of " (inv.gpus.len()) " in use: "
                    (inv.gpus.iter().map(|g| format!("{} {} ({})", g.index, g.model, fmt::mem_mb(g.memory_mb))).collect::<Vec<_>>().join(", "))
                }
            }
            td {
                @if inv.emulators.is_empty() { "none" } @else {
                    (inv.emulators.iter().map(|e| format!("{} {} ({} units{})", e.kind, e.name, e.unit_ids.len(),
                        if e.group.is_empty() { String::new() } else { format!(", group {}", e.group) })).collect::<Vec<_>>().join("; "))
                }
            }
            td { (inv.partitions.join(", ")) }
            td { (inv.features.join(", ")) }
            td {
                @for (i, job) in jobs.iter().enumerate() {
                    @if i > 0 { ", " }
                    a href={ "/ui/jobs/" (job.job_id) } { (job.job_id) }
                    " (" (fmt::count(u64::from(job.spec.as_ref().map_or(0, |s| s.cpus)), "CPU"))
                    @if job.borrowed { ", borrowed" }
                    ")"
                }
            }
            td { (host.reason) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{EmulatorSet, Gpu, Inventory, JobSpec, JobState};

    fn hosts() -> Vec<Host> {
        vec![
            Host {
                name: "gpu-1".into(),
                inventory: Some(Inventory {
                    cpus: 32,
                    memory_mb: 262_144,
                    gpus: vec![
                        Gpu {
                            index: 0,
                            model: "a100".into(),
                            memory_mb: 40_960,
                            uuid: String::new(),
                        },
                        Gpu {
                            index: 1,
                            model: "a100".into(),
                            memory_mb: 40_960,
                            uuid: String::new(),
                        },
                    ],
                    emulators: vec![],
                    features: vec!["ib".into()],
                    partitions: vec!["gpu".into()],
                }),
                state: "mixed".into(),
                alloc_cpus: 4,
                alloc_memory_mb: 8192,
                reason: String::new(),
            },
            Host {
                name: "emu-1".into(),
                inventory: Some(Inventory {
                    cpus: 8,
                    memory_mb: 16_384,
                    emulators: vec![EmulatorSet {
                        kind: "zebu".into(),
                        name: "z1".into(),
                        group: "rack2".into(),
                        unit_ids: vec![0, 1, 2, 3],
                    }],
                    ..Default::default()
                }),
                state: "drain".into(),
                reason: "declared 8 CPUs, found 4".into(),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn renders_inventory_allocation_and_drain_reason() {
        let running = vec![Job {
            job_id: 5,
            spec: Some(JobSpec {
                cpus: 4,
                gres: vec!["gpu:a100:1".into()],
                ..Default::default()
            }),
            state: JobState::Running as i32,
            hosts: vec!["gpu-1".into()],
            borrowed: true,
            ..Default::default()
        }];
        let html = render(&hosts(), &running).into_string();
        assert!(html.contains("<p id=\"hosts-summary\">2 hosts, 1 drain, 1 mixed.</p>"));
        assert!(html.contains(concat!(
            "<tr id=\"host-gpu-1\"><th scope=\"row\">gpu-1</th>",
            "<td><span class=\"state state-mixed\">mixed</span></td>",
            "<td class=\"num\">4 / 32</td><td class=\"num\">8.0 GiB / 256.0 GiB</td>",
            "<td>1 of 2 in use: 0 a100 (40.0 GiB), 1 a100 (40.0 GiB)</td>",
            "<td>none</td><td>gpu</td><td>ib</td>",
            "<td><a href=\"/ui/jobs/5\">5</a> (4 CPUs, borrowed)</td><td></td></tr>"
        )));
        assert!(html.contains(concat!(
            "<td>zebu z1 (4 units, group rack2)</td><td></td><td></td><td></td>",
            "<td>declared 8 CPUs, found 4</td></tr>"
        )));
    }

    #[test]
    fn no_hosts_says_how_to_get_some() {
        let html = render(&[], &[]).into_string();
        assert!(html.contains("<p id=\"hosts-summary\">0 hosts.</p>"));
        assert!(html.contains("No host has registered yet"));
        assert!(!html.contains("<table"));
    }
}
