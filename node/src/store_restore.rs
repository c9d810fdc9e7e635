//! `berthd store restore`: makes a new node's store from a backup file
//! (`berth admin backup`). The work is `berth_raft_store::backup::restore`;
//! this parses the members and prints what was restored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use berth_node::config::NodeConfig;
use berth_raft_store::backup::{self, RestoreReport};
use openraft::BasicNode;

/// Members given on the command line at most; a Raft cluster has 3 or 5.
const RESTORE_MEMBERS_MAX: usize = 64;

/// Where to restore and for which cluster: from a node config file, or from
/// the three flags.
pub struct Target {
    pub data_dir: PathBuf,
    pub node_id: u64,
    pub members: BTreeMap<u64, BasicNode>,
}

impl Target {
    /// The node's data_dir, id and members, as `berthd --config` would use them.
    pub fn from_config(path: &Path) -> anyhow::Result<Target> {
        let config = NodeConfig::load(path)?;
        Ok(Target {
            data_dir: config.data_dir.clone(),
            node_id: config.node_id,
            members: config
                .members
                .iter()
                .map(|m| {
                    (
                        m.id,
                        BasicNode {
                            addr: m.addr.clone(),
                        },
                    )
                })
                .collect(),
        })
    }

    /// From `--data-dir`, `--node-id` and `--members ID=HOST:PORT,...`.
    pub fn from_flags(
        data_dir: PathBuf,
        node_id: u64,
        members: &[String],
    ) -> anyhow::Result<Target> {
        Ok(Target {
            data_dir,
            node_id,
            members: parse_members(members)?,
        })
    }
}

/// Parses `ID=HOST:PORT` items; refuses duplicates and malformed ones.
pub fn parse_members(items: &[String]) -> anyhow::Result<BTreeMap<u64, BasicNode>> {
    if items.len() > RESTORE_MEMBERS_MAX {
        anyhow::bail!("at most {RESTORE_MEMBERS_MAX} members, got {}", items.len());
    }
    let mut members = BTreeMap::new();
    for item in items {
        let (id, addr) = item
            .split_once('=')
            .with_context(|| format!("member \"{item}\": expected ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 1)
            .with_context(|| format!("member \"{item}\": the id must be a number >= 1"))?;
        let addr = addr.trim();
        let port_ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            anyhow::bail!("member \"{item}\": the address must be HOST:PORT");
        }
        if members
            .insert(
                id,
                BasicNode {
                    addr: addr.to_string(),
                },
            )
            .is_some()
        {
            anyhow::bail!("member id {id} is given twice");
        }
    }
    Ok(members)
}

/// Restores `file` for `target` and prints what was made.
pub fn run(file: &Path, target: &Target) -> anyhow::Result<()> {
    let report = backup::restore(file, &target.data_dir, target.node_id, &target.members)?;
    print!("{}", render(file, target, &report));
    Ok(())
}

fn render(file: &Path, target: &Target, r: &RestoreReport) -> String {
    let old = r
        .backup_log_id
        .map(|l| format!("index {} (term {})", l.index, l.leader_id.term))
        .unwrap_or_else(|| "an empty log".into());
    let voters: Vec<String> = r.voters.iter().map(|v| v.to_string()).collect();
    format!(
        "restored {} into {}\n\
         taken at       {old} of the old cluster\n\
         restored at    index {} (term 0)\n\
         jobs           {}\n\
         hosts          {}\n\
         next job id    {}\n\
         voters         {}\n\
         next: start node {} with data_dir = {}; start the other members with empty \
         data directories: they receive this state from the leader as a Raft snapshot\n",
        file.display(),
        r.store.display(),
        r.restored_log_id.index,
        r.jobs,
        r.hosts,
        r.next_job_id,
        voters.join(", "),
        target.node_id,
        target.data_dir.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_and_bad_ones_are_named() {
        let ok =
            parse_members(&["1=127.0.0.1:7101".into(), "2=node-2:7101".into()]).expect("members");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[&2].addr, "node-2:7101");
        for (bad, says) in [
            ("1", "expected ID=HOST:PORT"),
            ("0=h:1", "must be a number >= 1"),
            ("x=h:1", "must be a number >= 1"),
            ("1=h", "HOST:PORT"),
            ("1=:7101", "HOST:PORT"),
        ] {
            let err = parse_members(&[bad.to_string()])
                .expect_err(bad)
                .to_string();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains(bad), "{bad}: {err}");
        }
        let err = parse_members(&["1=h:1".into(), "1=h:2".into()]).expect_err("twice");
        assert!(err.to_string().contains("given twice"), "{err}");
    }
}
