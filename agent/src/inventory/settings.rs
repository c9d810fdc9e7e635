//! The inventory part of the agent's config file: what the host is declared
//! to have, its emulators, a fake-inventory file, and re-discovery.
//!
//! ```toml
//! fake_inventory_file = "/etc/berth/fake-inventory.toml"  # replaces discovery
//! sysfs_root = "/sys"                # where the KFD topology is read
//! rediscover_interval_s = 60         # how often inventory is looked at again
//! features = ["a100", "ib"]          # what jobs may ask for (sbatch -C)
//!
//! [declared]                         # what this host should have
//! gpus = 8
//! gpu_type = "h100"
//! emulator_units = 4
//!
//! [[emulators]]
//! kind = "zebu"
//! name = "zse5-a"
//! group = "rack3"
//! units = 4                          # ids 0..4, or list them:
//! # unit_ids = [0, 1, 2, 3]
//! health_command = "/usr/local/bin/zebu-check zse5-a"
//! health_timeout_s = 10
//! ```

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;

/// Default seconds between re-discoveries.
pub const DEFAULT_REDISCOVER_INTERVAL_S: u64 = 60;
/// Bounds on the re-discovery period, in s.
pub const REDISCOVER_INTERVAL_MIN_S: u64 = 1;
pub const REDISCOVER_INTERVAL_MAX_S: u64 = 86_400;
/// Default and largest limit on one emulator health command, in s.
pub const DEFAULT_HEALTH_TIMEOUT_S: u64 = 10;
pub const HEALTH_TIMEOUT_MAX_S: u64 = 600;
/// Most emulator sets and units per set in the config.
pub const EMULATOR_SETS_MAX: usize = 64;
pub const EMULATOR_UNITS_MAX: u32 = 4096;
/// Most features a host may declare, and longest name, in bytes (the same
/// bounds the cluster checks at registration).
pub const FEATURES_MAX: usize = 64;
pub const FEATURE_NAME_BYTES_MAX: usize = 64;

/// `[declared]`: what the host should have. Discovery that disagrees
/// drains the host with a reason.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredInventory {
    pub gpus: Option<u32>,
    pub gpu_type: Option<String>,
    /// Emulator units over all sets.
    pub emulator_units: Option<u32>,
}

/// One `[[emulators]]` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatorConfig {
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub group: String,
    pub units: Option<u32>,
    pub unit_ids: Option<Vec<u32>>,
    pub health_command: Option<String>,
    pub health_timeout_s: Option<u64>,
}

/// One emulator set, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmulatorSpec {
    pub kind: String,
    pub name: String,
    pub group: String,
    pub unit_ids: Vec<u32>,
    pub health_command: Option<String>,
    pub health_timeout_s: u64,
}

/// Everything inventory discovery runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventorySettings {
    /// Replace discovered CPUs and memory (fake hosts in tests).
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub fake_inventory_file: Option<PathBuf>,
    pub sysfs_root: PathBuf,
    pub declared: DeclaredInventory,
    pub emulators: Vec<EmulatorSpec>,
    pub rediscover_interval_s: u64,
    /// Features jobs may require (`sbatch --constraint`), as declared.
    pub features: Vec<String>,
}

impl Default for InventorySettings {
    fn default() -> Self {
        InventorySettings {
            cpus: None,
            memory_mb: None,
            fake_inventory_file: None,
            sysfs_root: PathBuf::from("/sys"),
            declared: DeclaredInventory::default(),
            emulators: Vec::new(),
            rediscover_interval_s: DEFAULT_REDISCOVER_INTERVAL_S,
            features: Vec::new(),
        }
    }
}

/// The config file's inventory keys, as written.
#[derive(Debug, Default, Clone)]
pub struct InventoryKeys {
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    pub fake_inventory_file: Option<PathBuf>,
    pub sysfs_root: Option<PathBuf>,
    pub rediscover_interval_s: Option<u64>,
    pub declared: Option<DeclaredInventory>,
    pub emulators: Option<Vec<EmulatorConfig>>,
    pub features: Option<Vec<String>>,
}

impl InventorySettings {
    /// Checks the keys; an error names the key and what is wrong.
    pub fn resolve(keys: InventoryKeys) -> Result<InventorySettings, String> {
        let rediscover_interval_s = keys
            .rediscover_interval_s
            .unwrap_or(DEFAULT_REDISCOVER_INTERVAL_S);
        if !(REDISCOVER_INTERVAL_MIN_S..=REDISCOVER_INTERVAL_MAX_S).contains(&rediscover_interval_s)
        {
            return Err(format!(
                "rediscover_interval_s = {rediscover_interval_s} is outside \
                 {REDISCOVER_INTERVAL_MIN_S}..={REDISCOVER_INTERVAL_MAX_S}"
            ));
        }
        let declared = keys.declared.unwrap_or_default();
        if let Some(t) = &declared.gpu_type {
            if t.trim().is_empty() || t.contains(|c: char| c.is_whitespace() || c == ':') {
                return Err(format!(
                    "declared.gpu_type {t:?} must be a non-empty word without ':'"
                ));
            }
        }
        if declared.gpus.unwrap_or(0) > super::GPUS_PER_HOST_MAX {
            return Err(format!(
                "declared.gpus is above the maximum {}",
                super::GPUS_PER_HOST_MAX
            ));
        }
        let written = keys.emulators.unwrap_or_default();
        if written.len() > EMULATOR_SETS_MAX {
            return Err(format!(
                "emulators: {} sets, at most {EMULATOR_SETS_MAX}",
                written.len()
            ));
        }
        let mut emulators = Vec::with_capacity(written.len());
        for (i, e) in written.into_iter().enumerate() {
            emulators.push(emulator_spec(i, e)?);
        }
        let features = keys.features.unwrap_or_default();
        check_features(&features)?;
        Ok(InventorySettings {
            features,
            cpus: keys.cpus,
            memory_mb: keys.memory_mb,
            fake_inventory_file: keys.fake_inventory_file,
            sysfs_root: keys.sysfs_root.unwrap_or_else(|| PathBuf::from("/sys")),
            declared,
            emulators,
            rediscover_interval_s,
        })
    }
}

/// `features`: at most [`FEATURES_MAX`] distinct names of 1 to
/// [`FEATURE_NAME_BYTES_MAX`] letters, digits, `_`, `-` or `.` (what
/// `--constraint` can name).
fn check_features(features: &[String]) -> Result<(), String> {
    if features.len() > FEATURES_MAX {
        return Err(format!(
            "features: {} given, at most {FEATURES_MAX}",
            features.len()
        ));
    }
    for f in features {
        let valid = !f.is_empty()
            && f.len() <= FEATURE_NAME_BYTES_MAX
            && f.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(format!(
                "features: {f:?} is not a feature name (1 to {FEATURE_NAME_BYTES_MAX} letters, digits, '_', '-' or '.')"
            ));
        }
    }
    if features.iter().collect::<BTreeSet<_>>().len() != features.len() {
        return Err("features: a feature is listed twice".into());
    }
    Ok(())
}

fn emulator_spec(i: usize, e: EmulatorConfig) -> Result<EmulatorSpec, String> {
    let at = format!("emulators[{i}]");
    if e.kind.trim().is_empty() || e.kind.contains(|c: char| c.is_whitespace() || c == ':') {
        return Err(format!(
            "{at}.kind {:?} must be a non-empty word without ':'",
            e.kind
        ));
    }
    let unit_ids = match (e.units, e.unit_ids) {
        (None, None) => return Err(format!("{at}: give units or unit_ids")),
        (Some(n), None) => (0..n).collect(),
        (None, Some(ids)) => ids,
        (Some(n), Some(ids)) if ids.len() == n as usize => ids,
        (Some(n), Some(ids)) => {
            return Err(format!(
                "{at}: units = {n} but unit_ids lists {}",
                ids.len()
            ))
        }
    };
    if unit_ids.is_empty() || unit_ids.len() > EMULATOR_UNITS_MAX as usize {
        return Err(format!("{at}: must have 1 to {EMULATOR_UNITS_MAX} units"));
    }
    if unit_ids.iter().collect::<BTreeSet<_>>().len() != unit_ids.len() {
        return Err(format!("{at}.unit_ids lists a unit twice"));
    }
    let health_timeout_s = e.health_timeout_s.unwrap_or(DEFAULT_HEALTH_TIMEOUT_S);
    if !(1..=HEALTH_TIMEOUT_MAX_S).contains(&health_timeout_s) {
        return Err(format!(
            "{at}.health_timeout_s = {health_timeout_s} is outside 1..={HEALTH_TIMEOUT_MAX_S}"
        ));
    }
    if e.health_command
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err(format!("{at}.health_command is empty"));
    }
    Ok(EmulatorSpec {
        kind: e.kind,
        name: e.name,
        group: e.group,
        unit_ids,
        health_command: e.health_command,
        health_timeout_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emulator(kind: &str) -> EmulatorConfig {
        EmulatorConfig {
            kind: kind.into(),
            name: "z1".into(),
            group: "rack1".into(),
            units: Some(2),
            unit_ids: None,
            health_command: None,
            health_timeout_s: None,
        }
    }

    #[test]
    fn units_become_ids_and_defaults_apply() {
        let s = InventorySettings::resolve(InventoryKeys {
            emulators: Some(vec![emulator("zebu")]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(s.emulators[0].unit_ids, vec![0, 1]);
        assert_eq!(s.emulators[0].health_timeout_s, DEFAULT_HEALTH_TIMEOUT_S);
        assert_eq!(s.rediscover_interval_s, DEFAULT_REDISCOVER_INTERVAL_S);
        assert_eq!(s.sysfs_root, PathBuf::from("/sys"));
        assert!(s.features.is_empty());
        let with = InventorySettings::resolve(InventoryKeys {
            features: Some(vec!["a100".into(), "ib".into()]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(with.features, ["a100", "ib"]);
    }

    #[test]
    fn bad_keys_are_named() {
        let cases: Vec<(InventoryKeys, &str)> = vec![
            (
                InventoryKeys {
                    rediscover_interval_s: Some(0),
                    ..Default::default()
                },
                "rediscover_interval_s",
            ),
            (
                InventoryKeys {
                    declared: Some(DeclaredInventory {
                        gpu_type: Some("h 100".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                "declared.gpu_type",
            ),
            (
                InventoryKeys {
                    emulators: Some(vec![EmulatorConfig {
                        units: None,
                        ..emulator("zebu")
                    }]),
                    ..Default::default()
                },
                "emulators[0]: give units or unit_ids",
            ),
            (
                InventoryKeys {
                    emulators: Some(vec![
                        emulator("zebu"),
                        EmulatorConfig {
                            unit_ids: Some(vec![1, 2, 3]),
                            ..emulator("palladium")
                        },
                    ]),
                    ..Default::default()
                },
                "emulators[1]: units = 2 but unit_ids lists 3",
            ),
            (
                InventoryKeys {
                    emulators: Some(vec![EmulatorConfig {
                        health_timeout_s: Some(0),
                        ..emulator("zebu")
                    }]),
                    ..Default::default()
                },
                "emulators[0].health_timeout_s",
            ),
            (
                InventoryKeys {
                    emulators: Some(vec![emulator("")]),
                    ..Default::default()
                },
                "emulators[0].kind",
            ),
            (
                InventoryKeys {
                    features: Some(vec!["a100".into(), "has space".into()]),
                    ..Default::default()
                },
                "features: \"has space\" is not a feature name",
            ),
            (
                InventoryKeys {
                    features: Some(vec!["ib".into(), "ib".into()]),
                    ..Default::default()
                },
                "features: a feature is listed twice",
            ),
            (
                InventoryKeys {
                    features: Some(vec![String::new()]),
                    ..Default::default()
                },
                "features: \"\" is not a feature name",
            ),
        ];
        for (keys, expected) in cases {
            let err = InventorySettings::resolve(keys).unwrap_err();
            assert!(err.contains(expected), "{err} should name {expected}");
        }
    }
}
