//! A fake-inventory file: GPUs and emulators written down instead of
//! discovered, for tests and demo hosts. It replaces NVML, KFD and the
//! config's emulators; it is read again at every re-discovery, so a test
//! makes a GPU "disappear" by rewriting it.
//!
//! ```toml
//! [[gpus]]
//! index = 0
//! type = "h100"
//! uuid = "GPU-5e1f..."     # optional
//! memory_mb = 81920        # optional
//!
//! [[emulators]]
//! kind = "zebu"
//! name = "zse5-a"
//! group = "rack3"          # optional
//! unit_ids = [0, 1, 2, 3]
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use berth_proto::api::{EmulatorSet, Gpu};
use serde::Deserialize;

use super::GPUS_PER_HOST_MAX;

/// Most emulator sets and units a file may list.
pub const FAKE_EMULATOR_SETS_MAX: usize = 64;
pub const FAKE_EMULATOR_UNITS_MAX: usize = 4096;

/// Errors reading a fake-inventory file; each names the file and, where
/// it can, the key.
#[derive(Debug, thiserror::Error)]
pub enum FakeInventoryError {
    #[error("cannot read fake inventory file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid fake inventory file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeFile {
    #[serde(default)]
    gpus: Vec<FakeGpu>,
    #[serde(default)]
    emulators: Vec<FakeEmulators>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeGpu {
    index: u32,
    #[serde(rename = "type")]
    gpu_type: String,
    #[serde(default)]
    uuid: String,
    #[serde(default)]
    memory_mb: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeEmulators {
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    group: String,
    unit_ids: Vec<u32>,
}

/// What a fake-inventory file lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeInventory {
    pub gpus: Vec<Gpu>,
    pub emulators: Vec<EmulatorSet>,
}

/// Reads and checks a fake-inventory file.
pub fn load(path: &Path) -> Result<FakeInventory, FakeInventoryError> {
    let text = std::fs::read_to_string(path).map_err(|error| FakeInventoryError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse(&text, path)
}

/// Parses fake-inventory text; `path` only names the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<FakeInventory, FakeInventoryError> {
    let invalid = |message: String| FakeInventoryError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: FakeFile = toml::from_str(text).map_err(|e| {
        invalid(match e.span() {
            Some(span) => {
                let (line, column) = crate::config::line_column(text, span.start);
                format!("line {line}, column {column}: {}", e.message())
            }
            None => e.message().to_string(),
        })
    })?;
    if file.gpus.len() > GPUS_PER_HOST_MAX as usize {
        return Err(invalid(format!(
            "gpus: {} listed, at most {GPUS_PER_HOST_MAX}",
            file.gpus.len()
        )));
    }
    let mut indices = BTreeSet::new();
    let mut gpus = Vec::with_capacity(file.gpus.len());
    for (i, g) in file.gpus.into_iter().enumerate() {
        let gpu_type = g.gpu_type.trim().to_ascii_lowercase();
        if gpu_type.is_empty() || gpu_type.contains(|c: char| c.is_whitespace() || c == ':') {
            return Err(invalid(format!(
                "gpus[{i}].type {:?} must be a non-empty word without ':'",
                g.gpu_type
            )));
        }
        if !indices.insert(g.index) {
            return Err(invalid(format!(
                "gpus[{i}].index {} is listed twice",
                g.index
            )));
        }
        gpus.push(Gpu {
            index: g.index,
            model: gpu_type,
            memory_mb: g.memory_mb,
            uuid: g.uuid,
        });
    }
    gpus.sort_by_key(|g| g.index);
    if file.emulators.len() > FAKE_EMULATOR_SETS_MAX {
        return Err(invalid(format!(
            "emulators: {} sets listed, at most {FAKE_EMULATOR_SETS_MAX}",
            file.emulators.len()
        )));
    }
    let mut emulators = Vec::with_capacity(file.emulators.len());
    for (i, e) in file.emulators.into_iter().enumerate() {
        if e.kind.trim().is_empty() {
            return Err(invalid(format!("emulators[{i}].kind is empty")));
        }
        if e.unit_ids.is_empty() || e.unit_ids.len() > FAKE_EMULATOR_UNITS_MAX {
            return Err(invalid(format!(
                "emulators[{i}].unit_ids must list 1 to {FAKE_EMULATOR_UNITS_MAX} units"
            )));
        }
        let distinct: BTreeSet<u32> = e.unit_ids.iter().copied().collect();
        if distinct.len() != e.unit_ids.len() {
            return Err(invalid(format!(
                "emulators[{i}].unit_ids lists a unit twice"
            )));
        }
        emulators.push(EmulatorSet {
            kind: e.kind.trim().to_string(),
            name: e.name,
            group: e.group,
            unit_ids: e.unit_ids,
        });
    }
    Ok(FakeInventory { gpus, emulators })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> &'static Path {
        Path::new("/etc/berth/fake.toml")
    }

    #[test]
    fn parses_gpus_and_emulators() {
        let text = r#"
            [[gpus]]
            index = 1
            type = "H100"
            uuid = "GPU-b"
            [[gpus]]
            index = 0
            type = "h100"
            memory_mb = 81920
            [[emulators]]
            kind = "zebu"
            name = "zse5-a"
            group = "rack3"
            unit_ids = [0, 1, 2, 3]
        "#;
        let inv = parse(text, path()).unwrap();
        assert_eq!(
            inv.gpus,
            vec![
                Gpu {
                    index: 0,
                    model: "h100".into(),
                    memory_mb: 81920,
                    uuid: String::new()
                },
                Gpu {
                    index: 1,
                    model: "h100".into(),
                    memory_mb: 0,
                    uuid: "GPU-b".into()
                },
            ]
        );
        assert_eq!(
            inv.emulators,
            vec![EmulatorSet {
                kind: "zebu".into(),
                name: "zse5-a".into(),
                group: "rack3".into(),
                unit_ids: vec![0, 1, 2, 3],
            }]
        );
        assert_eq!(parse("", path()).unwrap(), FakeInventory::default());
    }

    fn error(text: &str) -> String {
        parse(text, path()).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_file_and_the_key() {
        let e = error("[[gpus]]\nindex = 0\ntype = \"h100\"\ncolour = \"green\"\n");
        assert!(e.contains("/etc/berth/fake.toml"), "{e}");
        assert!(e.contains("colour"), "{e}");
        assert!(e.contains("line 4"), "{e}");

        let e = error("[[gpus]]\nindex = 0\n");
        assert!(
            e.contains("/etc/berth/fake.toml") && e.contains("type"),
            "{e}"
        );

        let e =
            error("[[gpus]]\nindex = 0\ntype = \"h100\"\n[[gpus]]\nindex = 0\ntype = \"h100\"\n");
        assert!(e.contains("gpus[1].index 0 is listed twice"), "{e}");

        let e = error("[[gpus]]\nindex = 0\ntype = \"\"\n");
        assert!(e.contains("gpus[0].type"), "{e}");

        let e = error("[[emulators]]\nkind = \"zebu\"\nunit_ids = []\n");
        assert!(e.contains("emulators[0].unit_ids"), "{e}");

        let e = error("[[emulators]]\nkind = \"zebu\"\nunit_ids = [1, 1]\n");
        assert!(
            e.contains("emulators[0].unit_ids lists a unit twice"),
            "{e}"
        );

        let e = error("gpu = 3\n");
        assert!(e.contains("gpu"), "{e}");
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = load(Path::new("/nonexistent/fake.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/fake.toml"), "{e}");
    }
}
