//! Host discovery: name, CPUs, memory, GPUs (NVIDIA through NVML, AMD from
//! the KFD topology) and emulators (from the config, with health checks),
//! or a fake-inventory file in their place; then whether the host is fit
//! (`check`), which is the drain reason it registers with.

pub mod amd;
pub mod check;
pub mod emulators;
pub mod fake;
pub mod nvml;
pub mod settings;

use berth_proto::api::{Gpu, Inventory};

use self::fake::FakeInventoryError;
use self::nvml::NvidiaProbe;
use self::settings::InventorySettings;

/// Most GPUs one host reports.
pub const GPUS_PER_HOST_MAX: u32 = 64;

/// Errors discovering the host's resources.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read /proc/meminfo: {0}")]
    ReadMeminfo(std::io::Error),
    #[error("/proc/meminfo: {0}")]
    Meminfo(String),
    #[error(transparent)]
    Fake(#[from] FakeInventoryError),
}

/// What the agent tells the cluster about its host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostReport {
    pub inventory: Inventory,
    /// Why the host should take no work; empty when it is fit.
    pub drain_reason: String,
}

/// Discovers the host's inventory again and again, remembering the GPUs of
/// the first discovery so that one that disappears later is noticed.
pub struct Discoverer {
    settings: InventorySettings,
    nvidia: Option<NvidiaProbe>,
    baseline: Option<Vec<Gpu>>,
}

impl Discoverer {
    pub fn new(settings: InventorySettings) -> Discoverer {
        Discoverer {
            settings,
            nvidia: None,
            baseline: None,
        }
    }

    pub fn settings(&self) -> &InventorySettings {
        &self.settings
    }

    /// One discovery. Blocking: it reads sysfs, calls NVML and runs health
    /// commands, so async callers run it on a blocking thread.
    pub fn discover(&mut self) -> Result<HostReport, InventoryError> {
        let mut inventory = discover(self.settings.cpus, self.settings.memory_mb)?;
        inventory.features = self.settings.features.clone();
        let mut problems = Vec::new();
        let (sets, health) = emulators::check(&self.settings.emulators);
        inventory.emulators = sets;
        problems.extend(health);
        match &self.settings.fake_inventory_file {
            Some(path) => {
                let fake = fake::load(path)?;
                inventory.gpus = fake.gpus;
                inventory.emulators.extend(fake.emulators);
            }
            None => {
                let nvidia = self.nvidia.get_or_insert_with(NvidiaProbe::new);
                let mut gpus = nvidia.gpus();
                match amd::discover(&self.settings.sysfs_root) {
                    Ok(amd) => gpus.extend(amd),
                    Err(e) => problems.push(format!("AMD GPU discovery failed: {e}")),
                }
                inventory.gpus = gpus;
            }
        }
        let baseline = self.baseline.get_or_insert_with(|| inventory.gpus.clone());
        let drain_reason =
            check::drain_reason(&self.settings.declared, &inventory, baseline, &problems);
        Ok(HostReport {
            inventory,
            drain_reason,
        })
    }
}

/// A discovery as `berth-agent --print-inventory` shows it: one line per
/// fact, each GPU and emulator set on its own line, then the drain
/// verdict.
pub fn report_text(report: &HostReport) -> String {
    let inv = &report.inventory;
    let mut out = format!(
        "cpus: {}\nmemory_mb: {}\ngpus: {}\n",
        inv.cpus,
        inv.memory_mb,
        inv.gpus.len()
    );
    for g in &inv.gpus {
        let model = if g.model.is_empty() {
            "unknown"
        } else {
            &g.model
        };
        let uuid = if g.uuid.is_empty() { "-" } else { &g.uuid };
        out.push_str(&format!(
            "  gpu {}: {model}, {} MiB, {uuid}\n",
            g.index, g.memory_mb
        ));
    }
    out.push_str(&format!("emulator sets: {}\n", inv.emulators.len()));
    for e in &inv.emulators {
        out.push_str(&format!(
            "  {} {} group {}: {} units\n",
            e.kind,
            e.name,
            e.group,
            e.unit_ids.len()
        ));
    }
    out.push_str(&format!("features: {}\n", inv.features.join(",")));
    if report.drain_reason.is_empty() {
        out.push_str("drain: no\n");
    } else {
        out.push_str(&format!("drain: {}\n", report.drain_reason));
    }
    out
}

/// Discovers the host's CPUs and memory, then applies the config's
/// overrides (which exist for fake hosts in tests and `berthd dev`).
pub fn discover(
    cpus_override: Option<u32>,
    memory_mb_override: Option<u64>,
) -> Result<Inventory, InventoryError> {
    let cpus = match cpus_override {
        Some(c) => c,
        None => discover_cpus(),
    };
    let memory_mb = match memory_mb_override {
        Some(m) => m,
        None => {
            let text =
                std::fs::read_to_string("/proc/meminfo").map_err(InventoryError::ReadMeminfo)?;
            parse_meminfo_total_mb(&text).map_err(InventoryError::Meminfo)?
        }
    };
    Ok(Inventory {
        cpus,
        memory_mb,
        ..Default::default()
    })
}

/// CPUs this process may run on. `available_parallelism` honours the
/// affinity mask and cgroup quotas, which is what jobs will actually get.
fn discover_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// Extracts `MemTotal` from /proc/meminfo text, in MiB (rounded down).
pub fn parse_meminfo_total_mb(text: &str) -> Result<u64, String> {
    let line = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .ok_or_else(|| "no MemTotal line".to_string())?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields
        .next()
        .ok_or_else(|| format!("MemTotal has no value: {line:?}"))?
        .parse()
        .map_err(|e| format!("MemTotal value in {line:?}: {e}"))?;
    // The kernel always prints kB; anything else means a format we do not
    // understand, better to fail than to report a wrong size.
    match fields.next() {
        Some("kB") => Ok(value / 1024),
        other => Err(format!("MemTotal unit {other:?} is not kB")),
    }
}

/// This machine's hostname: /proc/sys/kernel/hostname, else gethostname(2).
pub fn hostname() -> Result<String, String> {
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let name = name.trim();
        if !name.is_empty() {
            return Ok(name.to_string());
        }
    }
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    if name.is_empty() {
        return Err("hostname is empty".to_string());
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_report_reads_one_fact_per_line() {
        let report = super::HostReport {
            inventory: super::Inventory {
                cpus: 16,
                memory_mb: 4096,
                gpus: vec![super::Gpu {
                    index: 0,
                    model: "h200".into(),
                    memory_mb: 143_771,
                    uuid: "GPU-1".into(),
                }],
                features: vec!["ib".into()],
                ..Default::default()
            },
            drain_reason: String::new(),
        };
        assert_eq!(
            super::report_text(&report),
            "cpus: 16\nmemory_mb: 4096\ngpus: 1\n  gpu 0: h200, 143771 MiB, GPU-1\n\
             emulator sets: 0\nfeatures: ib\ndrain: no\n"
        );
    }

    use super::*;

    const SAMPLE: &str = "MemTotal:       24683584 kB\n\
                          MemFree:        21949840 kB\n\
                          MemAvailable:   22987196 kB\n";

    #[test]
    fn parses_memtotal_in_mib() {
        assert_eq!(parse_meminfo_total_mb(SAMPLE), Ok(24683584 / 1024));
    }

    #[test]
    fn memtotal_need_not_be_first() {
        let text = "MemFree: 10 kB\nMemTotal: 2048 kB\n";
        assert_eq!(parse_meminfo_total_mb(text), Ok(2));
    }

    #[test]
    fn rejects_missing_or_garbled() {
        assert!(parse_meminfo_total_mb("MemFree: 10 kB\n").is_err());
        assert!(parse_meminfo_total_mb("MemTotal: lots kB\n").is_err());
        assert!(parse_meminfo_total_mb("MemTotal: 10 MB\n").is_err());
        assert!(parse_meminfo_total_mb("MemTotal:\n").is_err());
    }

    #[test]
    fn overrides_win() {
        let inv = discover(Some(3), Some(100)).unwrap();
        assert_eq!(inv.cpus, 3);
        assert_eq!(inv.memory_mb, 100);
        assert!(inv.gpus.is_empty());
    }

    fn fake_settings(dir: &std::path::Path, fake: &str) -> InventorySettings {
        let path = dir.join("fake.toml");
        std::fs::write(&path, fake).unwrap();
        InventorySettings {
            cpus: Some(4),
            memory_mb: Some(1024),
            fake_inventory_file: Some(path),
            sysfs_root: dir.join("sys"),
            declared: settings::DeclaredInventory {
                gpus: Some(2),
                gpu_type: Some("h100".into()),
                emulator_units: None,
            },
            ..InventorySettings::default()
        }
    }

    const TWO_H100: &str = "[[gpus]]\nindex = 0\ntype = \"h100\"\nuuid = \"GPU-a\"\n\
                            [[gpus]]\nindex = 1\ntype = \"h100\"\nuuid = \"GPU-b\"\n";

    #[test]
    fn a_fake_file_replaces_discovery_and_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let settings = fake_settings(dir.path(), TWO_H100);
        let path = settings.fake_inventory_file.clone().unwrap();
        let mut d = Discoverer::new(settings);
        let first = d.discover().unwrap();
        assert_eq!(first.inventory.cpus, 4);
        assert_eq!(first.inventory.gpus.len(), 2);
        assert_eq!(first.drain_reason, "");

        // GPU-b falls off the bus.
        std::fs::write(
            &path,
            "[[gpus]]\nindex = 0\ntype = \"h100\"\nuuid = \"GPU-a\"\n",
        )
        .unwrap();
        let second = d.discover().unwrap();
        assert_eq!(second.inventory.gpus.len(), 1);
        assert_eq!(
            second.drain_reason,
            "declared 2 gpus, discovered 1 (h100 at 0); gpu 1 (GPU-b) gone since the agent started"
        );

        // It comes back: fit again.
        std::fs::write(&path, TWO_H100).unwrap();
        assert_eq!(d.discover().unwrap(), first);

        // A broken file is an error naming it.
        std::fs::write(&path, "[[gpus]]\nindex = \"zero\"\n").unwrap();
        let err = d.discover().unwrap_err().to_string();
        assert!(err.contains("fake.toml"), "{err}");
    }

    #[test]
    fn kfd_gpus_are_discovered_from_the_sysfs_root() {
        let dir = tempfile::tempdir().unwrap();
        amd::tests::fixture(
            &dir.path().join("sys"),
            &[(7, "gfx942", "11", 1 << 30), (8, "gfx942", "12", 1 << 30)],
        );
        let settings = InventorySettings {
            fake_inventory_file: None,
            declared: settings::DeclaredInventory {
                gpus: Some(4),
                ..Default::default()
            },
            ..fake_settings(dir.path(), "")
        };
        let report = Discoverer::new(settings).discover().unwrap();
        // Where NVML is present its GPUs come first; this machine has none.
        let amd: Vec<&Gpu> = report
            .inventory
            .gpus
            .iter()
            .filter(|g| g.model == "gfx942")
            .collect();
        assert_eq!(amd.len(), 2);
        assert_eq!(amd[1].uuid, "12");
        if report.inventory.gpus.len() == 2 {
            assert_eq!(
                report.drain_reason,
                "declared 4 gpus, discovered 2 (gfx942 at 0,1)"
            );
        }
    }

    #[test]
    fn discovers_something() {
        let inv = discover(None, None).unwrap();
        assert!(inv.cpus >= 1);
        assert!(inv.memory_mb >= 1);
        assert!(!hostname().unwrap().is_empty());
    }
}
