//! Whether a request fits a host, and if not, what the host lacks. The same
//! function is used by the pass and by the plan re-check in `apply`
//! (invariant 3), so the two can never disagree.

use std::fmt;

use crate::model::{Host, HostState, Resources};
use crate::pass::Shape;

/// What a host lacks for a request, with the numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lack {
    NotUp(HostState),
    /// The host is not in the partition the job runs in.
    Partition(String),
    GpuType {
        wanted: String,
        has: String,
    },
    Emulator {
        wanted_kind: String,
        wanted_group: String,
        has: String,
    },
    Feature(String),
    Gpus {
        needed: u32,
        free: u32,
        total: u32,
    },
    EmulatorUnits {
        needed: u32,
        free: u32,
        total: u32,
    },
    Cpus {
        needed: u32,
        free: u32,
        total: u32,
    },
    Memory {
        needed_mb: u64,
        free_mb: u64,
        total_mb: u64,
    },
}

impl Lack {
    /// True when the host could take the request once running work ends.
    pub fn is_transient(&self) -> bool {
        match self {
            Lack::NotUp(_)
            | Lack::Partition(_)
            | Lack::GpuType { .. }
            | Lack::Emulator { .. }
            | Lack::Feature(_) => false,
            Lack::Gpus { needed, total, .. } | Lack::EmulatorUnits { needed, total, .. } => {
                needed <= total
            }
            Lack::Cpus { needed, total, .. } => needed <= total,
            Lack::Memory {
                needed_mb,
                total_mb,
                ..
            } => needed_mb <= total_mb,
        }
    }
}

impl fmt::Display for Lack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lack::NotUp(state) => write!(f, "host is {state:?}"),
            Lack::Partition(p) => write!(f, "not in partition {p}"),
            Lack::GpuType { wanted, has } if has.is_empty() => {
                write!(f, "gpu type: needs {wanted}, host has none")
            }
            Lack::GpuType { wanted, has } => write!(f, "gpu type: needs {wanted}, host has {has}"),
            Lack::Emulator {
                wanted_kind,
                wanted_group,
                has,
            } => {
                let has = if has.is_empty() { "none" } else { has };
                if wanted_group.is_empty() {
                    write!(f, "emulator: needs {wanted_kind}, host has {has}")
                } else {
                    write!(
                        f,
                        "emulator: needs {wanted_kind} in {wanted_group}, host has {has}"
                    )
                }
            }
            Lack::Feature(feature) => write!(f, "feature: needs {feature}"),
            Lack::Gpus {
                needed,
                free,
                total,
            } => write!(f, "gpus: needs {needed}, {free} free of {total}"),
            Lack::EmulatorUnits {
                needed,
                free,
                total,
            } => write!(f, "emulator units: needs {needed}, {free} free of {total}"),
            Lack::Cpus {
                needed,
                free,
                total,
            } => write!(f, "cpus: needs {needed}, {free} free of {total}"),
            Lack::Memory {
                needed_mb,
                free_mb,
                total_mb,
            } => write!(
                f,
                "memory: needs {needed_mb} MiB, {free_mb} MiB free of {total_mb} MiB"
            ),
        }
    }
}

/// `Ok` when `request` fits in what `host` has free now; otherwise every
/// dimension it lacks.
pub fn fits(host: &Host, request: Resources) -> Result<(), Vec<Lack>> {
    if host.state != HostState::Up {
        return Err(vec![Lack::NotUp(host.state)]);
    }
    let free = host.free();
    let total = host.inventory.resources();
    let mut lacks = Vec::new();
    if request.cpus > free.cpus {
        lacks.push(Lack::Cpus {
            needed: request.cpus,
            free: free.cpus,
            total: total.cpus,
        });
    }
    if request.mem_mb > free.mem_mb {
        lacks.push(Lack::Memory {
            needed_mb: request.mem_mb,
            free_mb: free.mem_mb,
            total_mb: total.mem_mb,
        });
    }
    if request.gpus > free.gpus {
        lacks.push(Lack::Gpus {
            needed: request.gpus,
            free: free.gpus,
            total: total.gpus,
        });
    }
    if request.emu > free.emu {
        lacks.push(Lack::EmulatorUnits {
            needed: request.emu,
            free: free.emu,
            total: total.emu,
        });
    }
    if lacks.is_empty() {
        Ok(())
    } else {
        Err(lacks)
    }
}

/// Whether `host` is the kind of host `shape` may run on at all, free
/// room aside: in the partition (`None` when the site has none), the GPU
/// model, the emulator kind and group, the features. The first mismatch is
/// returned.
pub fn eligible(host: &Host, shape: &Shape, partition: Option<&str>) -> Result<(), Lack> {
    if let Some(p) = partition {
        if !host.partitions.iter().any(|h| h == p) {
            return Err(Lack::Partition(p.to_string()));
        }
    }
    let inv = &host.inventory;
    if shape.per_host.gpus > 0 && !shape.gpu_type.is_empty() && inv.gpu_type != shape.gpu_type {
        return Err(Lack::GpuType {
            wanted: shape.gpu_type.clone(),
            has: inv.gpu_type.clone(),
        });
    }
    if shape.per_host.emu > 0 && !shape.emu_kind.is_empty() {
        let matches = inv.emulator.as_ref().is_some_and(|e| {
            e.kind == shape.emu_kind && (shape.emu_group.is_empty() || e.group == shape.emu_group)
        });
        if !matches {
            return Err(Lack::Emulator {
                wanted_kind: shape.emu_kind.clone(),
                wanted_group: shape.emu_group.clone(),
                has: inv
                    .emulator
                    .as_ref()
                    .map(|e| format!("{} in {}", e.kind, e.group))
                    .unwrap_or_default(),
            });
        }
    }
    if let Some(missing) = shape.features.iter().find(|f| !host.features.contains(f)) {
        return Err(Lack::Feature(missing.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Inventory;

    fn host(cpus: u32, mem_mb: u64, used_cpus: u32) -> Host {
        let mut h = Host::new("h1", Inventory::cpu_mem(cpus, mem_mb));
        h.allocated = Resources::cpu_mem(used_cpus, 0);
        h
    }

    #[test]
    fn fits_when_free() {
        assert_eq!(fits(&host(4, 1024, 2), Resources::cpu_mem(2, 1024)), Ok(()));
    }

    #[test]
    fn names_every_lacking_dimension() {
        let lacks = fits(&host(4, 1024, 3), Resources::cpu_mem(2, 2048)).unwrap_err();
        assert_eq!(lacks.len(), 2);
        assert_eq!(lacks[0].to_string(), "cpus: needs 2, 1 free of 4");
        assert!(lacks[0].is_transient());
        assert!(!lacks[1].is_transient());
    }

    #[test]
    fn down_host_takes_nothing() {
        let mut h = host(4, 1024, 0);
        h.state = HostState::Down;
        assert_eq!(
            fits(&h, Resources::cpu_mem(1, 0)),
            Err(vec![Lack::NotUp(HostState::Down)])
        );
    }
}
