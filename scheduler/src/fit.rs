//! Whether a request fits a host, and if not, what the host lacks. The same
//! function is used by the pass and by the plan re-check in `apply`
//! (invariant 3), so the two can never disagree.

use std::fmt;

use crate::model::{Host, HostState, Resources};

/// What a host lacks for a request, with the numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lack {
    NotUp(HostState),
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
            Lack::NotUp(_) => false,
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
    if lacks.is_empty() {
        Ok(())
    } else {
        Err(lacks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Inventory;

    fn host(cpus: u32, mem_mb: u64, used_cpus: u32) -> Host {
        Host {
            name: "h1".into(),
            inventory: Inventory { cpus, mem_mb },
            state: HostState::Up,
            allocated: Resources {
                cpus: used_cpus,
                mem_mb: 0,
            },
        }
    }

    #[test]
    fn fits_when_free() {
        assert_eq!(
            fits(
                &host(4, 1024, 2),
                Resources {
                    cpus: 2,
                    mem_mb: 1024
                }
            ),
            Ok(())
        );
    }

    #[test]
    fn names_every_lacking_dimension() {
        let lacks = fits(
            &host(4, 1024, 3),
            Resources {
                cpus: 2,
                mem_mb: 2048,
            },
        )
        .unwrap_err();
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
            fits(&h, Resources { cpus: 1, mem_mb: 0 }),
            Err(vec![Lack::NotUp(HostState::Down)])
        );
    }
}
