//! `--alt` / `--alternative`: one alternative resource set of a job, a
//! comma list of `KEY=VALUE` with the keys `gres`, `cpus`, `mem` (sizes as
//! `--mem`), `nodes` and `partition`. What a set leaves out is the job's
//! own option, so each set sent to the cluster is complete. A `gres`
//! value may list several entries: words without `=` after `gres=` add to
//! it (`gres=gpu:a100:2,emu:zebu:1,cpus=8`).

use berth_proto::api::ResourceSet;
use thiserror::Error;

use crate::mem::parse_mem_mb;

/// The keys a set may give, in the order the error lists them.
pub const ALT_KEYS: &[&str] = &["gres", "cpus", "mem", "nodes", "partition"];

/// Why an `--alt` text was refused.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid --alt \"{text}\": {why}")]
pub struct AltError {
    /// The set as the user gave it.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

/// The job's own resource options: the default of each key a set omits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AltDefaults {
    pub gres: Vec<String>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub nodes: u32,
}

/// Parses one `--alt` text over the job's own options.
pub fn parse_alt(text: &str, defaults: &AltDefaults) -> Result<ResourceSet, AltError> {
    let fail = |why: String| AltError {
        text: text.to_string(),
        why,
    };
    let mut set = ResourceSet {
        gres: defaults.gres.clone(),
        cpus: defaults.cpus,
        mem_mb: defaults.mem_mb,
        nodes: defaults.nodes,
        partition: String::new(),
    };
    let mut seen: Vec<&str> = Vec::new();
    // Whether the last key was gres (then a word without '=' adds to it).
    let mut in_gres = false;
    for word in text.split(',').map(str::trim) {
        if word.is_empty() {
            return Err(fail(
                "an empty entry (two commas, or a comma at an end)".into(),
            ));
        }
        let Some((key, value)) = word.split_once('=') else {
            if in_gres {
                set.gres.push(word.to_string());
                continue;
            }
            return Err(fail(format!("\"{word}\" is not KEY=VALUE")));
        };
        let key = key.trim();
        let value = value.trim();
        let Some(&known) = ALT_KEYS.iter().find(|k| **k == key) else {
            return Err(fail(format!(
                "unknown key \"{key}\": expected gres, cpus, mem, nodes or partition"
            )));
        };
        if seen.contains(&known) {
            return Err(fail(format!("{known} is given twice")));
        }
        seen.push(known);
        if value.is_empty() {
            return Err(fail(format!("{known} has no value")));
        }
        in_gres = known == "gres";
        match known {
            "gres" => set.gres = vec![value.to_string()],
            "cpus" => {
                set.cpus =
                    value.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                        fail(format!("cpus={value}: expected a number at least 1"))
                    })?;
            }
            "mem" => {
                set.mem_mb = parse_mem_mb(value).map_err(|e| fail(format!("mem: {e}")))?;
            }
            "nodes" => {
                let n: u32 =
                    value.parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| {
                        fail(format!("nodes={value}: expected a number at least 1"))
                    })?;
                set.nodes = n;
            }
            _ => set.partition = value.to_string(),
        }
    }
    // Checked here with the scheduler's parser so a typo fails before the
    // submit; the cluster checks again.
    let mut shape = berth_scheduler::Shape::default();
    berth_scheduler::gres::apply_gres(&mut shape, &set.gres).map_err(|e| fail(e.to_string()))?;
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> AltDefaults {
        AltDefaults {
            gres: vec!["gpu:1".into()],
            cpus: 2,
            mem_mb: 1024,
            nodes: 0,
        }
    }

    #[test]
    fn the_documented_sets_parse() {
        let set = parse_alt(
            "gres=emu:palladium:4,cpus=8,mem=32G,partition=emu",
            &defaults(),
        )
        .expect("valid");
        assert_eq!(set.gres, ["emu:palladium:4"]);
        assert_eq!(set.cpus, 8);
        assert_eq!(set.mem_mb, 32 * 1024);
        assert_eq!(set.partition, "emu");
        let set = parse_alt("gres=gpu:a100:2,cpus=16,mem=128G", &defaults()).expect("valid");
        assert_eq!(set.gres, ["gpu:a100:2"]);
        assert_eq!((set.cpus, set.mem_mb), (16, 128 * 1024));
        assert_eq!(set.partition, "");
    }

    #[test]
    fn what_a_set_leaves_out_is_the_jobs_own() {
        let set = parse_alt("cpus=4", &defaults()).expect("valid");
        assert_eq!(set.gres, ["gpu:1"]);
        assert_eq!((set.cpus, set.mem_mb, set.nodes), (4, 1024, 0));
        let set = parse_alt("mem=512,nodes=1", &defaults()).expect("valid");
        assert_eq!((set.cpus, set.mem_mb, set.nodes), (2, 512, 1));
    }

    #[test]
    fn gres_may_list_several_entries() {
        let set = parse_alt("gres=gpu:a100:2,emu:zebu:1,cpus=8", &defaults()).expect("valid");
        assert_eq!(set.gres, ["gpu:a100:2", "emu:zebu:1"]);
        assert_eq!(set.cpus, 8);
    }

    #[test]
    fn bad_sets_are_refused_naming_what_is_wrong() {
        let err = |text: &str| parse_alt(text, &defaults()).unwrap_err().to_string();
        assert_eq!(
            err("gpus=2"),
            "invalid --alt \"gpus=2\": unknown key \"gpus\": expected gres, cpus, mem, nodes or partition"
        );
        assert_eq!(
            err("cpus=0"),
            "invalid --alt \"cpus=0\": cpus=0: expected a number at least 1"
        );
        assert!(err("cpus=4,cpus=8").contains("cpus is given twice"));
        assert!(err("mem=lots").starts_with("invalid --alt \"mem=lots\": mem: invalid memory size"));
        assert!(err("nodes=0").contains("nodes=0: expected a number at least 1"));
        assert!(err("cpus=4,,mem=1G").contains("an empty entry"));
        assert!(err("cpus=4,oops").contains("\"oops\" is not KEY=VALUE"));
        assert!(err("partition=").contains("partition has no value"));
        assert!(err("gres=gpu:a100:x").starts_with("invalid --alt \"gres=gpu:a100:x\": "));
    }
}
