//! Whether a host is fit to take work: declared inventory against what was
//! discovered, GPUs present at start that are gone now, and the problems
//! discovery found (failing emulator health checks). The answer is the
//! drain reason the agent registers with; empty means fit.

use berth_proto::api::{Gpu, Inventory};

use super::settings::DeclaredInventory;

/// Longest drain reason sent, in bytes (the cluster refuses longer ones).
pub const DRAIN_REASON_BYTES_MAX: usize = 1024;

/// The drain reason for `found`, or empty. `baseline` is the GPUs seen at
/// the agent's first discovery.
pub fn drain_reason(
    declared: &DeclaredInventory,
    found: &Inventory,
    baseline: &[Gpu],
    problems: &[String],
) -> String {
    let mut reasons: Vec<String> = Vec::new();
    let found_gpus = u32::try_from(found.gpus.len()).unwrap_or(u32::MAX);
    if let Some(want) = declared.gpus {
        if want != found_gpus {
            reasons.push(format!(
                "declared {want} gpus, discovered {found_gpus}{}",
                gpu_summary(&found.gpus)
            ));
        }
    }
    if let Some(want) = &declared.gpu_type {
        let want = want.to_ascii_lowercase();
        let other: Vec<&str> = found
            .gpus
            .iter()
            .map(|g| g.model.as_str())
            .filter(|m| !m.eq_ignore_ascii_case(&want))
            .collect();
        if let Some(first) = other.first() {
            reasons.push(format!(
                "declared gpu_type {want}, discovered {first} ({} of {} gpus)",
                other.len(),
                found.gpus.len()
            ));
        }
    }
    if let Some(want) = declared.emulator_units {
        let units: usize = found.emulators.iter().map(|e| e.unit_ids.len()).sum();
        if units != want as usize {
            reasons.push(format!(
                "declared {want} emulator units, discovered {units}"
            ));
        }
    }
    let gone: Vec<String> = baseline
        .iter()
        .filter(|b| !found.gpus.iter().any(|g| same_gpu(b, g)))
        .map(|b| {
            if b.uuid.is_empty() {
                format!("gpu {}", b.index)
            } else {
                format!("gpu {} ({})", b.index, b.uuid)
            }
        })
        .collect();
    if !gone.is_empty() {
        reasons.push(format!("{} gone since the agent started", gone.join(", ")));
    }
    reasons.extend(problems.iter().cloned());
    truncate(reasons.join("; "))
}

/// A GPU is the same device by UUID when both have one, else by index and
/// model.
fn same_gpu(a: &Gpu, b: &Gpu) -> bool {
    if !a.uuid.is_empty() && !b.uuid.is_empty() {
        a.uuid == b.uuid
    } else {
        a.index == b.index && a.model == b.model
    }
}

/// " (h100 at 0,1,2,3)" for what was found, empty when nothing was.
fn gpu_summary(gpus: &[Gpu]) -> String {
    let Some(first) = gpus.first() else {
        return String::new();
    };
    let indices: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
    format!(" ({} at {})", first.model, indices.join(","))
}

pub(crate) fn truncate(mut s: String) -> String {
    if s.len() > DRAIN_REASON_BYTES_MAX {
        let mut end = DRAIN_REASON_BYTES_MAX - 3;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_proto::api::EmulatorSet;

    fn gpu(index: u32, model: &str, uuid: &str) -> Gpu {
        Gpu {
            index,
            model: model.into(),
            memory_mb: 0,
            uuid: uuid.into(),
        }
    }

    fn with_gpus(gpus: Vec<Gpu>) -> Inventory {
        Inventory {
            cpus: 8,
            memory_mb: 1024,
            gpus,
            ..Default::default()
        }
    }

    fn declared(gpus: Option<u32>, gpu_type: Option<&str>) -> DeclaredInventory {
        DeclaredInventory {
            gpus,
            gpu_type: gpu_type.map(str::to_string),
            emulator_units: None,
        }
    }

    #[test]
    fn agreeing_or_undeclared_inventory_is_fit() {
        let found = with_gpus((0..4).map(|i| gpu(i, "h100", "")).collect());
        assert_eq!(
            drain_reason(&declared(Some(4), Some("H100")), &found, &[], &[]),
            ""
        );
        assert_eq!(
            drain_reason(&DeclaredInventory::default(), &found, &[], &[]),
            ""
        );
    }

    #[test]
    fn fewer_gpus_than_declared_drains_with_the_numbers() {
        let found = with_gpus((0..4).map(|i| gpu(i, "h100", "")).collect());
        assert_eq!(
            drain_reason(&declared(Some(8), Some("h100")), &found, &[], &[]),
            "declared 8 gpus, discovered 4 (h100 at 0,1,2,3)"
        );
        assert_eq!(
            drain_reason(&declared(Some(2), None), &with_gpus(Vec::new()), &[], &[]),
            "declared 2 gpus, discovered 0"
        );
    }

    #[test]
    fn another_type_drains() {
        let found = with_gpus(vec![gpu(0, "a100", ""), gpu(1, "a100", "")]);
        assert_eq!(
            drain_reason(&declared(Some(2), Some("h100")), &found, &[], &[]),
            "declared gpu_type h100, discovered a100 (2 of 2 gpus)"
        );
    }

    #[test]
    fn a_gpu_gone_since_start_drains_and_problems_are_appended() {
        let baseline = vec![
            gpu(0, "h100", "GPU-a"),
            gpu(1, "h100", "GPU-b"),
            gpu(2, "h100", ""),
        ];
        // GPU-b fell off; GPU-a is renumbered but the same device.
        let found = with_gpus(vec![gpu(1, "h100", "GPU-a"), gpu(2, "h100", "")]);
        let problems =
            vec!["emulator zebu z1 health check failed: `x` ended with exit status: 1".to_string()];
        assert_eq!(
            drain_reason(&DeclaredInventory::default(), &found, &baseline, &problems),
            "gpu 1 (GPU-b) gone since the agent started; emulator zebu z1 health check failed: `x` ended with exit status: 1"
        );
    }

    #[test]
    fn emulator_units_are_counted_over_sets() {
        let mut found = with_gpus(Vec::new());
        found.emulators = vec![
            EmulatorSet {
                kind: "zebu".into(),
                unit_ids: vec![0, 1],
                ..Default::default()
            },
            EmulatorSet {
                kind: "zebu".into(),
                unit_ids: vec![0],
                ..Default::default()
            },
        ];
        let d = DeclaredInventory {
            emulator_units: Some(4),
            ..Default::default()
        };
        assert_eq!(
            drain_reason(&d, &found, &[], &[]),
            "declared 4 emulator units, discovered 3"
        );
    }

    #[test]
    fn long_reasons_are_cut_to_the_bound() {
        let problems = vec!["é".repeat(DRAIN_REASON_BYTES_MAX)];
        let r = drain_reason(
            &DeclaredInventory::default(),
            &with_gpus(Vec::new()),
            &[],
            &problems,
        );
        assert!(r.len() <= DRAIN_REASON_BYTES_MAX);
        assert!(r.ends_with("..."));
    }
}
