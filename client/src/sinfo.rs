//! Hosts and partitions as sinfo and `scontrol show node|partition` print
//! them: sinfo's default view (`PARTITION AVAIL TIMELIMIT NODES STATE
//! NODELIST`, one line per partition and state, host lists compressed),
//! `-N`, `-N -l`, `-R` (down and drained hosts with their reasons).
//!
//! A partition with no host list holds every host; with no partitions
//! configured, every host is in the default partition `batch`, as the
//! scheduler treats them.

use crate::hostlist::compress;
use crate::queue::DEFAULT_PARTITION;
use crate::squeue_format::fit;
use crate::time::format_elapsed;
use berth_proto::api::{Host, Partition};

/// sinfo's compact state (`%t`) from the API's host state.
pub fn compact_state(state: &str) -> &str {
    match state {
        "mixed" => "mix",
        "allocated" => "alloc",
        "drain" => "drain",
        "down" => "down",
        "idle" => "idle",
        _ => "unk",
    }
}

/// sinfo's long state (`%T`).
pub fn long_state(state: &str) -> &'static str {
    match state {
        "mixed" => "mixed",
        "allocated" => "allocated",
        "drain" => "drained",
        "down" => "down",
        "idle" => "idle",
        _ => "unknown",
    }
}

/// The partitions to show, with the default one marked; the implicit
/// `batch` partition of every host when none is configured.
pub fn effective_partitions(partitions: &[Partition]) -> Vec<Partition> {
    if partitions.is_empty() {
        return vec![Partition {
            name: DEFAULT_PARTITION.to_string(),
            is_default: true,
            ..Default::default()
        }];
    }
    partitions.to_vec()
}

/// The hosts of one partition, in the order the API listed them.
pub fn members<'a>(partition: &Partition, hosts: &'a [Host]) -> Vec<&'a Host> {
    hosts
        .iter()
        .filter(|h| partition.hosts.is_empty() || partition.hosts.contains(&h.name))
        .collect()
}

fn partition_label(p: &Partition) -> String {
    if p.is_default {
        format!("{}*", p.name)
    } else {
        p.name.clone()
    }
}

/// sinfo's TIMELIMIT: "infinite" without a maximum.
pub fn limit(secs: u64) -> String {
    if secs == 0 {
        "infinite".to_string()
    } else {
        format_elapsed(secs)
    }
}

/// `sinfo`: `%9P %.5a %.10l %.6D %.6t %N`.
pub fn format_sinfo(hosts: &[Host], partitions: &[Partition], noheader: bool) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n");
    }
    for p in effective_partitions(partitions) {
        let members = members(&p, hosts);
        // States in the order they first appear, as sinfo groups them.
        let mut states: Vec<&str> = Vec::new();
        for h in &members {
            let s = compact_state(&h.state);
            if !states.contains(&s) {
                states.push(s);
            }
        }
        let mut lines: Vec<(usize, &str, String)> = states
            .iter()
            .map(|s| {
                let names: Vec<String> = members
                    .iter()
                    .filter(|h| compact_state(&h.state) == *s)
                    .map(|h| h.name.clone())
                    .collect();
                (names.len(), *s, compress(&names))
            })
            .collect();
        if lines.is_empty() {
            lines.push((0, "n/a", String::new()));
        }
        for (count, state, list) in lines {
            out.push_str(&format!(
                "{} {} {} {} {} {}\n",
                fit(&partition_label(&p), Some(9), false),
                fit("up", Some(5), true),
                fit(&limit(p.max_time_s), Some(10), true),
                fit(&count.to_string(), Some(6), true),
                fit(state, Some(6), true),
                list
            ));
        }
    }
    out
}

/// `sinfo -N` (`%#N %.6D %#P %6t`) and `sinfo -N -l`
/// (`%#N %.6D %#P %.11T %.4c %.8z %.6m %.8d %.6w %.8f %20E`): one line per
/// host and partition. `-l` starts with the time of the listing.
pub fn format_sinfo_nodes(
    hosts: &[Host],
    partitions: &[Partition],
    long: bool,
    noheader: bool,
    now_line: &str,
) -> String {
    let mut rows: Vec<(&Host, String)> = Vec::new();
    for p in effective_partitions(partitions) {
        for h in members(&p, hosts) {
            rows.push((h, partition_label(&p)));
        }
    }
    rows.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let node_w = rows
        .iter()
        .map(|(h, _)| h.name.chars().count())
        // The host column is at least as wide as its header.
        .chain(std::iter::once("NODELIST".len() + 1))
        .max()
        .unwrap_or(9);
    let part_w = rows
        .iter()
        .map(|(_, p)| p.chars().count())
        .chain(std::iter::once("PARTITION".len()))
        .max()
        .unwrap_or(9);
    let mut out = String::new();
    if long {
        out.push_str(now_line);
        out.push('\n');
    }
    let line = |cells: [String; 4], extra: Option<[String; 7]>| {
        let mut s = format!(
            "{} {} {} {}",
            fit(&cells[0], Some(node_w), false),
            fit(&cells[1], Some(6), true),
            fit(&cells[2], Some(part_w), false),
            if extra.is_some() {
                fit(&cells[3], Some(11), true)
            } else {
                fit(&cells[3], Some(6), false)
            }
        );
        if let Some(e) = extra {
            let widths = [4, 8, 6, 8, 6, 8];
            for (value, w) in e.iter().take(6).zip(widths) {
                s.push(' ');
                s.push_str(&fit(value, Some(w), true));
            }
            s.push(' ');
            s.push_str(&fit(&e[6], Some(20), false));
        }
        s.trim_end().to_string() + "\n"
    };
    if !noheader {
        let extra = long.then(|| {
            [
                "CPUS", "S:C:T", "MEMORY", "TMP_DISK", "WEIGHT", "AVAIL_FE", "REASON",
            ]
            .map(str::to_string)
        });
        out.push_str(&line(
            ["NODELIST", "NODES", "PARTITION", "STATE"].map(str::to_string),
            extra,
        ));
    }
    for (h, p) in rows {
        let inv = h.inventory.clone().unwrap_or_default();
        let state = if long {
            long_state(&h.state).to_string()
        } else {
            compact_state(&h.state).to_string()
        };
        let extra = long.then(|| {
            [
                inv.cpus.to_string(),
                // Berth does not record sockets, cores and threads.
                "N/A".to_string(),
                inv.memory_mb.to_string(),
                "0".to_string(),
                "1".to_string(),
                if inv.features.is_empty() {
                    "(null)".to_string()
                } else {
                    inv.features.join(",")
                },
                if h.reason.is_empty() {
                    "none".to_string()
                } else {
                    h.reason.clone()
                },
            ]
        });
        out.push_str(&line([h.name.clone(), "1".to_string(), p, state], extra));
    }
    out
}

/// `sinfo -R` (`%20E %9u %19H %N`): down and drained hosts grouped by
/// reason. Berth does not record who set a reason or when: "Unknown".
pub fn format_sinfo_reasons(hosts: &[Host], noheader: bool) -> String {
    let mut out = String::new();
    if !noheader {
        out.push_str("REASON               USER      TIMESTAMP           NODELIST\n");
    }
    let mut reasons: Vec<&str> = Vec::new();
    for h in hosts {
        if matches!(h.state.as_str(), "drain" | "down") {
            let reason = if h.reason.is_empty() {
                "Not responding"
            } else {
                h.reason.as_str()
            };
            if !reasons.contains(&reason) {
                reasons.push(reason);
            }
        }
    }
    for reason in reasons {
        let names: Vec<String> = hosts
            .iter()
            .filter(|h| matches!(h.state.as_str(), "drain" | "down"))
            .filter(|h| h.reason == reason || (h.reason.is_empty() && reason == "Not responding"))
            .map(|h| h.name.clone())
            .collect();
        out.push_str(&format!(
            "{} {} {} {}\n",
            fit(reason, Some(20), false),
            fit("Unknown", Some(9), false),
            fit("Unknown", Some(19), false),
            compress(&names)
        ));
    }
    out
}

/// A host's generic resources in Slurm's words: `gpu:a100:2,emu:zebu:4`.
pub fn host_gres(host: &Host) -> String {
    let inv = host.inventory.clone().unwrap_or_default();
    let mut parts = Vec::new();
    if !inv.gpus.is_empty() {
        let model = inv.gpus[0].model.clone();
        if model.is_empty() {
            parts.push(format!("gpu:{}", inv.gpus.len()));
        } else {
            parts.push(format!("gpu:{model}:{}", inv.gpus.len()));
        }
    }
    for e in &inv.emulators {
        parts.push(format!("emu:{}:{}", e.kind, e.unit_ids.len()));
    }
    if parts.is_empty() {
        "(null)".to_string()
    } else {
        parts.join(",")
    }
}

/// `scontrol show node`: one `Key=Value` block per host, blank line after.
pub fn format_show_nodes(hosts: &[Host], partitions: &[Partition]) -> String {
    let parts = effective_partitions(partitions);
    let mut out = String::new();
    for h in hosts {
        let inv = h.inventory.clone().unwrap_or_default();
        let member_of: Vec<String> = parts
            .iter()
            .filter(|p| p.hosts.is_empty() || p.hosts.contains(&h.name))
            .map(|p| p.name.clone())
            .collect();
        let features = if inv.features.is_empty() {
            "(null)".to_string()
        } else {
            inv.features.join(",")
        };
        out.push_str(&format!(
            "NodeName={}\n   CPUAlloc={} CPUTot={}\n   AvailableFeatures={features}\n   Gres={}\n   RealMemory={} AllocMem={}\n   State={}\n   Partitions={}\n   Reason={}\n\n",
            h.name,
            h.alloc_cpus,
            inv.cpus,
            host_gres(h),
            inv.memory_mb,
            h.alloc_memory_mb,
            long_state(&h.state).to_ascii_uppercase(),
            if member_of.is_empty() { "(null)".to_string() } else { member_of.join(",") },
            if h.reason.is_empty() { "(null)" } else { &h.reason },
        ));
    }
    out
}

/// `scontrol show partition`: one block per partition, blank line after.
pub fn format_show_partitions(hosts: &[Host], partitions: &[Partition]) -> String {
    let mut out = String::new();
    for p in effective_partitions(partitions) {
        let names: Vec<String> = members(&p, hosts).iter().map(|h| h.name.clone()).collect();
        let time = |secs: u64, none: &str| {
            if secs == 0 {
                none.to_string()
            } else {
                crate::time::format_time_limit(secs)
            }
        };
        out.push_str(&format!(
            "PartitionName={}\n   Default={} QoS={}\n   MaxNodes={} MinNodes={}\n   DefaultTime={} MaxTime={}\n   Nodes={}\n   PriorityJobFactor={} State=UP TotalNodes={}\n\n",
            p.name,
            if p.is_default { "YES" } else { "NO" },
            if p.qos.is_empty() { "N/A" } else { &p.qos },
            p.max_nodes.map(|n| n.to_string()).unwrap_or_else(|| "UNLIMITED".to_string()),
            p.min_nodes.unwrap_or(0),
            time(p.default_time_s, "NONE"),
            time(p.max_time_s, "UNLIMITED"),
            if names.is_empty() { "(null)".to_string() } else { compress(&names) },
            p.priority_job_factor.max(1),
            names.len(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::{Gpu, Inventory};

    fn host(name: &str, state: &str, reason: &str) -> Host {
        Host {
            name: name.into(),
            inventory: Some(Inventory {
                cpus: 8,
                memory_mb: 16_384,
                ..Default::default()
            }),
            state: state.into(),
            reason: reason.into(),
            ..Default::default()
        }
    }

    fn cluster() -> (Vec<Host>, Vec<Partition>) {
        let mut gpu = host("g1", "mixed", "");
        if let Some(inv) = gpu.inventory.as_mut() {
            inv.gpus = vec![
                Gpu {
                    index: 0,
                    model: "a100".into(),
                    ..Default::default()
                };
                2
            ];
        }
        gpu.alloc_cpus = 2;
        let hosts = vec![
            host("n01", "idle", ""),
            host("n02", "idle", ""),
            host("n03", "allocated", ""),
            host("n04", "drain", "disk swap"),
            host("n05", "down", ""),
            gpu,
        ];
        let partitions = vec![
            Partition {
                name: "cpu".into(),
                hosts: ["n01", "n02", "n03", "n04", "n05"]
                    .map(String::from)
                    .to_vec(),
                is_default: true,
                max_time_s: 86_400,
                ..Default::default()
            },
            Partition {
                name: "gpu".into(),
                hosts: vec!["g1".into()],
                max_time_s: 7_200,
                qos: "gpuq".into(),
                ..Default::default()
            },
        ];
        (hosts, partitions)
    }

    #[test]
    fn default_view() {
        let (hosts, partitions) = cluster();
        assert_eq!(
            format_sinfo(&hosts, &partitions, false),
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             cpu*         up 1-00:00:00      2   idle n[01-02]\n\
             cpu*         up 1-00:00:00      1  alloc n03\n\
             cpu*         up 1-00:00:00      1  drain n04\n\
             cpu*         up 1-00:00:00      1   down n05\n\
             gpu          up    2:00:00      1    mix g1\n"
        );
        assert_eq!(
            format_sinfo(&hosts[..2], &[], true),
            "batch*       up   infinite      2   idle n[01-02]\n"
        );
    }

    #[test]
    fn node_views() {
        let (hosts, partitions) = cluster();
        assert_eq!(
            format_sinfo_nodes(&hosts[..2], &partitions, false, false, ""),
            "NODELIST   NODES PARTITION STATE\n\
             n01            1 cpu*      idle\n\
             n02            1 cpu*      idle\n"
        );
        assert_eq!(
            format_sinfo_nodes(&hosts[3..4], &partitions, true, false, "Thu Jan  1 00:00:00 1970"),
            "Thu Jan  1 00:00:00 1970\n\
             NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n\
             n04            1 cpu*          drained    8      N/A  16384        0      1   (null) disk swap\n"
        );
    }

    #[test]
    fn reasons() {
        let (hosts, _) = cluster();
        assert_eq!(
            format_sinfo_reasons(&hosts, false),
            "REASON               USER      TIMESTAMP           NODELIST\n\
             disk swap            Unknown   Unknown             n04\n\
             Not responding       Unknown   Unknown             n05\n"
        );
    }

    #[test]
    fn scontrol_show_node_and_partition() {
        let (hosts, partitions) = cluster();
        assert_eq!(
            format_show_nodes(&hosts[5..], &partitions),
            "NodeName=g1\n   CPUAlloc=2 CPUTot=8\n   AvailableFeatures=(null)\n   Gres=gpu:a100:2\n   RealMemory=16384 AllocMem=0\n   State=MIXED\n   Partitions=gpu\n   Reason=(null)\n\n"
        );
        assert_eq!(
            format_show_partitions(&hosts, &partitions[1..]),
            "PartitionName=gpu\n   Default=NO QoS=gpuq\n   MaxNodes=UNLIMITED MinNodes=0\n   DefaultTime=NONE MaxTime=02:00:00\n   Nodes=g1\n   PriorityJobFactor=1 State=UP TotalNodes=1\n\n"
        );
    }
}
