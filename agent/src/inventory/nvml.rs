//! NVIDIA GPUs through NVML. `nvml-wrapper` loads libnvidia-ml.so when
//! asked, so a host without the driver runs the same binary: it reports no
//! NVIDIA GPUs, and says so in one log line for the life of the process.

use berth_proto::api::Gpu;
use nvml_wrapper::Nvml;

/// NVML, loaded once. Loading it again at every re-discovery would repeat
/// the "not available" line and re-open the library for nothing.
pub struct NvidiaProbe {
    nvml: Option<Nvml>,
}

impl NvidiaProbe {
    /// Loads NVML; where it cannot be loaded or initialised the probe finds
    /// no GPUs from now on, and this is the one line that says why.
    pub fn new() -> NvidiaProbe {
        match Nvml::init() {
            Ok(nvml) => NvidiaProbe { nvml: Some(nvml) },
            Err(e) => {
                tracing::info!(error = %e, "NVML not available; this host reports no NVIDIA GPUs");
                NvidiaProbe { nvml: None }
            }
        }
    }

    /// Whether NVML loaded.
    pub fn available(&self) -> bool {
        self.nvml.is_some()
    }

    /// The GPUs NVML sees now, by device index. A device NVML cannot
    /// describe is left out (and logged): a GPU that falls off the bus is
    /// exactly what re-discovery must notice.
    pub fn gpus(&self) -> Vec<Gpu> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let count = match nvml.device_count() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "NVML device count failed; reporting no NVIDIA GPUs");
                return Vec::new();
            }
        };
        let mut gpus = Vec::new();
        for index in 0..count.min(super::GPUS_PER_HOST_MAX) {
            let described = nvml.device_by_index(index).and_then(|d| {
                Ok(Gpu {
                    index,
                    model: gpu_type_from_name(&d.name()?),
                    memory_mb: d.memory_info()?.total / (1024 * 1024),
                    uuid: d.uuid()?,
                })
            });
            match described {
                Ok(gpu) => gpus.push(gpu),
                Err(e) => tracing::warn!(index, error = %e, "NVML cannot describe a GPU"),
            }
        }
        gpus
    }
}

impl Default for NvidiaProbe {
    fn default() -> Self {
        NvidiaProbe::new()
    }
}

/// The scheduler's GPU type from NVML's product name: lower case, without
/// the vendor and product-line words and the memory/form-factor suffix, so
/// that `--gres=gpu:h100:1` matches "NVIDIA H100 80GB HBM3".
pub fn gpu_type_from_name(name: &str) -> String {
    const NOISE: [&str; 5] = ["nvidia", "tesla", "geforce", "quadro", "graphics"];
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split_whitespace()
        .filter(|w| !NOISE.contains(w))
        .collect();
    let Some(first) = words.first() else {
        return lower.trim().to_string();
    };
    // "RTX 4090", "GTX 1080": the line word alone says nothing.
    let model = if matches!(*first, "rtx" | "gtx") {
        match words.get(1) {
            Some(next) => format!("{first}{next}"),
            None => first.to_string(),
        }
    } else {
        first.to_string()
    };
    // "a100-sxm4-80gb" -> "a100"
    model.split('-').next().unwrap_or(&model).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_names_become_types() {
        assert_eq!(gpu_type_from_name("NVIDIA H100 80GB HBM3"), "h100");
        assert_eq!(gpu_type_from_name("NVIDIA A100-SXM4-80GB"), "a100");
        assert_eq!(gpu_type_from_name("Tesla V100-SXM2-16GB"), "v100");
        assert_eq!(gpu_type_from_name("NVIDIA GeForce RTX 4090"), "rtx4090");
        assert_eq!(gpu_type_from_name("NVIDIA H200"), "h200");
        assert_eq!(gpu_type_from_name("NVIDIA L40S"), "l40s");
    }

    /// This machine has no NVIDIA driver: the probe loads nothing, finds
    /// nothing, and does not fail.
    #[test]
    fn without_the_library_there_are_no_gpus() {
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return; // a GPU machine: the real discovery is tested there
        }
        let probe = NvidiaProbe::new();
        assert!(!probe.available());
        assert!(probe.gpus().is_empty());
    }
}
