//! AMD GPUs from the kernel's KFD topology in sysfs:
//! `<root>/class/kfd/kfd/topology/nodes/<N>/`, one node per CPU socket and
//! per GPU. A node whose `gpu_id` is not 0 is a GPU; ROCm numbers the GPU
//! nodes in node order, which is the index `ROCR_VISIBLE_DEVICES` takes.
//! The root is a parameter so tests run on a fixture tree.

use std::path::{Path, PathBuf};

use berth_proto::api::Gpu;

/// Errors reading a KFD topology that exists.
#[derive(Debug, thiserror::Error)]
pub enum KfdError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// Path of the KFD topology's node folder under `sysfs_root`.
pub fn nodes_dir(sysfs_root: &Path) -> PathBuf {
    sysfs_root.join("class/kfd/kfd/topology/nodes")
}

/// The AMD GPUs in the topology under `sysfs_root`. No topology (no amdgpu
/// driver) is no GPUs, not an error; a topology that cannot be read is.
pub fn discover(sysfs_root: &Path) -> Result<Vec<Gpu>, KfdError> {
    let dir = nodes_dir(sysfs_root);
    let read_dir = match std::fs::read_dir(&dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(KfdError::Read { path: dir, error }),
    };
    let mut nodes: Vec<(u32, PathBuf)> = Vec::new();
    for entry in read_dir {
        let entry = entry.map_err(|error| KfdError::Read {
            path: dir.clone(),
            error,
        })?;
        // Only numbered node folders; anything else is not a node.
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            nodes.push((n, entry.path()));
        }
        if nodes.len() > KFD_NODES_MAX {
            return Err(KfdError::Parse {
                path: dir,
                message: format!("more than {KFD_NODES_MAX} nodes"),
            });
        }
    }
    nodes.sort();
    let mut gpus = Vec::new();
    for (_, node) in nodes {
        if gpu_id(&node)? == 0 {
            continue;
        }
        let props_path = node.join("properties");
        let props = read(&props_path)?;
        let uuid = property(&props, "unique_id")
            .filter(|v| *v != "0")
            .map(str::to_string)
            .unwrap_or_default();
        gpus.push(Gpu {
            index: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
            model: model(&node, &props),
            memory_mb: local_memory_mb(&node)?,
            uuid,
        });
        if gpus.len() >= super::GPUS_PER_HOST_MAX as usize {
            break;
        }
    }
    Ok(gpus)
}

/// Most KFD nodes read (CPU sockets plus GPUs).
pub const KFD_NODES_MAX: usize = 1024;

fn read(path: &Path) -> Result<String, KfdError> {
    std::fs::read_to_string(path).map_err(|error| KfdError::Read {
        path: path.to_path_buf(),
        error,
    })
}

/// The node's `gpu_id` file, else the `gpu_id` property (0 for a CPU).
fn gpu_id(node: &Path) -> Result<u64, KfdError> {
    let file = node.join("gpu_id");
    let (path, text) = match std::fs::read_to_string(&file) {
        Ok(t) => (file, t),
        Err(_) => {
            let props_path = node.join("properties");
            let props = read(&props_path)?;
            match property(&props, "gpu_id") {
                Some(v) => (props_path, v.to_string()),
                None => return Ok(0),
            }
        }
    };
    text.trim().parse().map_err(|e| KfdError::Parse {
        path,
        message: format!("gpu_id {:?}: {e}", text.trim()),
    })
}

/// `key value` lines, as KFD writes its properties.
fn property<'a>(props: &'a str, key: &str) -> Option<&'a str> {
    props.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next() == Some(key))
            .then(|| fields.next())
            .flatten()
    })
}

/// The node's `name` file (the gfx target, e.g. `gfx90a`), else the gfx
/// target from `gfx_target_version` (90010 -> gfx90a).
fn model(node: &Path, props: &str) -> String {
    if let Ok(name) = std::fs::read_to_string(node.join("name")) {
        let name = name.trim();
        if !name.is_empty() {
            return name.to_ascii_lowercase();
        }
    }
    match property(props, "gfx_target_version").and_then(|v| v.parse::<u32>().ok()) {
        Some(v) if v > 0 => {
            let (major, minor, step) = (v / 10_000, (v / 100) % 100, v % 100);
            format!("gfx{major}{minor:x}{step:x}")
        }
        _ => "amd".to_string(),
    }
}

/// Sum of the node's memory banks, in MiB.
fn local_memory_mb(node: &Path) -> Result<u64, KfdError> {
    let banks = node.join("mem_banks");
    let Ok(entries) = std::fs::read_dir(&banks) else {
        return Ok(0);
    };
    let mut bytes = 0u64;
    for entry in entries.take(KFD_NODES_MAX) {
        let entry = entry.map_err(|error| KfdError::Read {
            path: banks.clone(),
            error,
        })?;
        let path = entry.path().join("properties");
        let props = read(&path)?;
        if let Some(v) = property(&props, "size_in_bytes") {
            let size: u64 = v.parse().map_err(|e| KfdError::Parse {
                path: path.clone(),
                message: format!("size_in_bytes {v:?}: {e}"),
            })?;
            bytes = bytes.saturating_add(size);
        }
    }
    Ok(bytes / (1024 * 1024))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a KFD topology: node 0 a CPU, then one GPU node per entry
    /// of `gpus` as (gpu_id, name, unique_id, bytes).
    pub(crate) fn fixture(root: &Path, gpus: &[(u64, &str, &str, u64)]) {
        let nodes = nodes_dir(root);
        let cpu = nodes.join("0");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("gpu_id"), "0\n").unwrap();
        std::fs::write(cpu.join("properties"), "cpu_cores_count 64\nsimd_count 0\n").unwrap();
        for (i, (id, name, unique, bytes)) in gpus.iter().enumerate() {
            let node = nodes.join((i + 1).to_string());
            std::fs::create_dir_all(node.join("mem_banks/0")).unwrap();
            std::fs::write(node.join("gpu_id"), format!("{id}\n")).unwrap();
            std::fs::write(node.join("name"), format!("{name}\n")).unwrap();
            std::fs::write(
                node.join("properties"),
                format!("cpu_cores_count 0\nsimd_count 440\nunique_id {unique}\ngfx_target_version 90010\n"),
            )
            .unwrap();
            std::fs::write(
                node.join("mem_banks/0/properties"),
                format!("heap_type 1\nsize_in_bytes {bytes}\n"),
            )
            .unwrap();
        }
    }

    #[test]
    fn gpu_nodes_become_gpus_in_node_order() {
        let dir = tempfile::tempdir().unwrap();
        fixture(
            dir.path(),
            &[
                (45678, "gfx90a", "1234567890", 64 << 30),
                (45679, "gfx90a", "1234567891", 64 << 30),
            ],
        );
        // A non-numbered entry is not a node.
        std::fs::create_dir_all(nodes_dir(dir.path()).join("lost+found")).unwrap();
        let gpus = discover(dir.path()).unwrap();
        assert_eq!(
            gpus,
            vec![
                Gpu {
                    index: 0,
                    model: "gfx90a".into(),
                    memory_mb: 65536,
                    uuid: "1234567890".into()
                },
                Gpu {
                    index: 1,
                    model: "gfx90a".into(),
                    memory_mb: 65536,
                    uuid: "1234567891".into()
                },
            ]
        );
    }

    #[test]
    fn node_order_is_numeric_and_gfx_version_names_a_nameless_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let specs: Vec<(u64, &str, &str, u64)> =
            (0..11).map(|i| (100 + i, "gfx942", "0", 1 << 20)).collect();
        fixture(dir.path(), &specs);
        // Node 11 (the tenth GPU) sorts after node 2, not after node 1.
        std::fs::remove_file(nodes_dir(dir.path()).join("11/name")).unwrap();
        let gpus = discover(dir.path()).unwrap();
        assert_eq!(gpus.len(), 11);
        assert_eq!(gpus[10].model, "gfx90a");
        assert_eq!(gpus[9].model, "gfx942");
        assert!(gpus.iter().all(|g| g.uuid.is_empty()));
    }

    #[test]
    fn no_topology_is_no_gpus_and_garbage_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(discover(dir.path()).unwrap(), Vec::new());
        fixture(dir.path(), &[(1, "gfx90a", "1", 1 << 20)]);
        std::fs::write(nodes_dir(dir.path()).join("1/gpu_id"), "lots\n").unwrap();
        let err = discover(dir.path()).unwrap_err().to_string();
        assert!(err.contains("nodes/1/gpu_id"), "{err}");
        assert!(err.contains("lots"), "{err}");
    }
}
