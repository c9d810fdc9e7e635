//! Host discovery: name, CPUs and memory. GPUs and emulators come later.

use berth_proto::api::Inventory;

/// Errors discovering the host's resources.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read /proc/meminfo: {0}")]
    ReadMeminfo(std::io::Error),
    #[error("/proc/meminfo: {0}")]
    Meminfo(String),
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

    #[test]
    fn discovers_something() {
        let inv = discover(None, None).unwrap();
        assert!(inv.cpus >= 1);
        assert!(inv.memory_mb >= 1);
        assert!(!hostname().unwrap().is_empty());
    }
}
