//! "Why is my job not running?", host by host (invariant 7): for a pending
//! job, what each host lacks for it, in the job's own terms. The pass's
//! reason says what holds the job as a whole; this lists the candidates.

use crate::catalog::Catalog;
use crate::fit::{eligible, fits, Lack};
use crate::model::{Host, HostState};
use crate::partition::Partition;
use crate::pass::{need_on, PendingJob, Snapshot};

/// What one host lacks for the job; empty when it could take it now (the
/// room is then held for jobs ahead of it, or for a reservation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostVerdict {
    pub host: String,
    pub lacks: Vec<Lack>,
}

impl HostVerdict {
    /// The verdict in words, as `berth explain` prints it.
    pub fn text(&self) -> String {
        if self.lacks.is_empty() {
            return "nothing: it has room now (held for jobs ahead in the queue or a reservation)"
                .to_string();
        }
        self.lacks
            .iter()
            .map(Lack::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Every host of the snapshot, in name order, with what it lacks for
/// `job`. A host is judged against the job's partitions and resource
/// paths; where any (partition, path) fits, the host lacks nothing; else
/// the lacks of the first path in the first partition the host serves (or
/// of the first partition when it serves none) are shown.
pub fn explain_hosts(snapshot: &Snapshot, job: &PendingJob) -> Vec<HostVerdict> {
    let catalog = Catalog::new(snapshot);
    let partitions: Vec<Option<&Partition>> = if catalog.partitioned {
        catalog.partitions_of(job).into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let mut hosts: Vec<&Host> = snapshot.hosts.iter().collect();
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    hosts
        .into_iter()
        .map(|host| HostVerdict {
            host: host.name.clone(),
            lacks: lacks_on(host, job, &catalog, &partitions),
        })
        .collect()
}

fn lacks_on(
    host: &Host,
    job: &PendingJob,
    catalog: &Catalog<'_>,
    partitions: &[Option<&Partition>],
) -> Vec<Lack> {
    if host.state != HostState::Up {
        return vec![Lack::NotUp(host.state)];
    }
    let Some(&first_partition) = partitions.first() else {
        return vec![Lack::Partition(job.partitions.join(","))];
    };
    // Prefer a partition this host serves, so the lack shown is about
    // resources rather than membership.
    let shown_partition = partitions
        .iter()
        .copied()
        .find(|p| p.is_none_or(|p| host.partitions.contains(&p.name)))
        .unwrap_or(first_partition);
    let mut first: Option<Vec<Lack>> = None;
    for &partition in partitions {
        let pname = partition.map(|p| p.name.as_str());
        for (path, shape) in job.paths().iter().enumerate() {
            if !catalog.runs_in(job, path, partition) {
                continue;
            }
            let lacks = match eligible(host, shape, pname) {
                Err(lack) => vec![lack],
                Ok(()) => {
                    let need =
                        need_on(host, shape.per_host, shape.exclusive).unwrap_or(shape.per_host);
                    match fits(host, need) {
                        Ok(()) => return Vec::new(),
                        Err(lacks) => lacks,
                    }
                }
            };
            if same_partition(partition, shown_partition) && first.is_none() {
                first = Some(lacks);
            }
        }
    }
    first.unwrap_or_default()
}

/// The same partition (by name), or both `None` (a site without any).
fn same_partition(a: Option<&Partition>, b: Option<&Partition>) -> bool {
    a.map(|p| &p.name) == b.map(|p| &p.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Inventory, Resources};
    use crate::pass::Shape;

    #[test]
    fn each_host_says_what_it_lacks() {
        let mut gpu = Host::new("g1", Inventory::cpu_mem(8, 1024));
        gpu.inventory.gpus = 4;
        gpu.inventory.gpu_type = "a100".into();
        gpu.allocated.gpus = 3;
        let cpu = Host::new("c1", Inventory::cpu_mem(8, 1024));
        let mut down = Host::new("d1", Inventory::cpu_mem(8, 1024));
        down.state = HostState::Down;
        let mut job = PendingJob::new(7, Resources::cpu_mem(1, 0));
        job.shape = Shape {
            gpu_type: "a100".into(),
            ..Shape::one(Resources {
                gpus: 2,
                ..Resources::cpu_mem(1, 0)
            })
        };
        let snapshot = Snapshot {
            hosts: vec![gpu, cpu, down],
            ..Snapshot::default()
        };
        let texts: Vec<(String, String)> = explain_hosts(&snapshot, &job)
            .iter()
            .map(|v| (v.host.clone(), v.text()))
            .collect();
        assert_eq!(
            texts,
            vec![
                ("c1".into(), "gpu type: needs a100, host has none".into()),
                ("d1".into(), "host is Down".into()),
                ("g1".into(), "gpus: needs 2, 1 free of 4".into()),
            ]
        );
    }
}
