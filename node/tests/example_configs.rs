//! The example configs shipped in deploy/ and the ones `berthd dev` writes
//! must load: a config that drifts from the code is a bug.

use berth_node::config::NodeConfig;

#[test]
fn deploy_examples_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    for i in 1..=3 {
        let path = dir.join(format!("node-{i}.toml"));
        let config = NodeConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.node_id, i);
        assert_eq!(config.members.len(), 3);
        assert_eq!(config.bootstrap, i == 1);
    }
}

#[test]
fn dev_cluster_configs_validate_and_round_trip() {
    let configs = berth_node::dev::cluster_configs(std::path::Path::new("/tmp/berth-x"), 5, 7101);
    assert_eq!(configs.len(), 5);
    assert_eq!(configs.iter().filter(|c| c.bootstrap).count(), 1);
    for c in &configs {
        c.validate().unwrap_or_else(|e| panic!("{e}"));
        let text = toml::to_string(c).expect("serialize");
        let back: NodeConfig = toml::from_str(&text).expect("parse back");
        assert_eq!(back.listen, c.listen);
    }
}
