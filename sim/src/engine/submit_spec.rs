//! A job's resource request written as `sbatch` sends it: the scheduler's
//! [`Shape`] turned back into a [`JobSpec`]'s CPUs, memory, nodes and
//! `--gres` entries, so the simulator submits what a user would and the
//! state machine parses it as it parses every submit.

use berth_scheduler::model::{JobSpec, ResourceSet};
use berth_scheduler::pass::Shape;

/// The `--gres` entries for `shape`'s GPUs and emulator units.
fn gres_of(shape: &Shape) -> Vec<String> {
    let mut gres = Vec::new();
    let r = shape.per_host;
    if r.gpus > 0 {
        gres.push(if shape.gpu_type.is_empty() {
            format!("gpu:{}", r.gpus)
        } else {
            format!("gpu:{}:{}", shape.gpu_type, r.gpus)
        });
    }
    if r.emu > 0 {
        gres.push(if shape.emu_group.is_empty() {
            format!("emu:{}:{}", shape.emu_kind, r.emu)
        } else {
            format!("emu:{}:{}:{}", shape.emu_kind, shape.emu_group, r.emu)
        });
    }
    gres
}

/// Sets `spec`'s own request (CPUs, memory, GRES, nodes, `--exclusive`,
/// `--constraint`) to `shape`.
pub fn set_shape(spec: &mut JobSpec, shape: &Shape) {
    spec.cpus = shape.per_host.cpus.max(1);
    spec.mem_mb = shape.per_host.mem_mb;
    spec.gres = gres_of(shape);
    spec.nodes = shape.nodes.max(1);
    spec.exclusive = shape.exclusive;
    spec.features = shape.features.clone();
}

/// One `--alt` set: `shape` in `partition` ("" = the job's partitions).
/// Its `exclusive` and `features` are the job's, as for every submit.
pub fn resource_set(shape: &Shape, partition: &str) -> ResourceSet {
    ResourceSet {
        gres: gres_of(shape),
        cpus: shape.per_host.cpus.max(1),
        mem_mb: shape.per_host.mem_mb,
        nodes: shape.nodes.max(1),
        partition: partition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_scheduler::model::Resources;

    /// What is written parses back to the same shape.
    #[test]
    fn a_shape_survives_the_round_trip_through_a_spec() {
        let shape = Shape {
            nodes: 2,
            per_host: Resources {
                gpus: 4,
                emu: 1,
                ..Resources::cpu_mem(8, 1024)
            },
            gpu_type: "a100".into(),
            emu_kind: "zebu".into(),
            emu_group: "rackA".into(),
            exclusive: true,
            features: vec!["ib".into()],
        };
        let mut spec = JobSpec::default();
        set_shape(&mut spec, &shape);
        assert_eq!(spec.shape(), Ok(shape.clone()));
        spec.alternatives = vec![resource_set(&shape, "emu")];
        assert_eq!(spec.alternative_shapes(), Ok(vec![shape]));
    }
}
