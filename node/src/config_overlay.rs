//! Settings from outside the config file: `BERTH_` environment variables
//! and `--set KEY=VALUE` flags, applied over the file's TOML before it is
//! checked, so the same rules hold (unknown keys are errors). Precedence:
//! flags over environment over file.
//!
//! A key is a dotted path (`scheduler.pass_interval_ms`). In the
//! environment the dots become double underscores and the name is upper
//! case: `BERTH_SCHEDULER__PASS_INTERVAL_MS=500`, `BERTH_NODE_ID=2`. A
//! value is read as TOML (`500`, `true`, `"text"`, `[1, 2]`), and as a
//! plain string when it is not TOML (`BERTH_DATA_DIR=/var/lib/berth`).

use toml::{Table, Value};

/// `BERTH_` variables that belong to other tools (the CLI) and are not
/// berthd settings, so their presence in a shared environment is fine.
pub const NOT_SETTINGS: &[&str] = &["BERTH_SERVER", "BERTH_LOG", "BERTH_TOKEN"];

/// Longest dotted key path accepted (the config is two levels deep).
const KEY_DEPTH_MAX: usize = 4;

/// One setting and where it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub origin: String,
    pub key: Vec<String>,
    pub value: String,
}

/// The berthd settings among `vars` (name, value), in name order.
pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Setting> {
    let mut settings: Vec<Setting> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with("BERTH_") && !NOT_SETTINGS.contains(&name.as_str()))
        .map(|(name, value)| Setting {
            key: name["BERTH_".len()..]
                .split("__")
                .map(str::to_ascii_lowercase)
                .collect(),
            origin: format!("environment variable {name}"),
            value,
        })
        .collect();
    settings.sort_by(|a, b| a.origin.cmp(&b.origin));
    settings
}

/// A `--set KEY=VALUE` flag.
pub fn from_flag(flag: &str) -> Result<Setting, String> {
    let (key, value) = flag
        .split_once('=')
        .ok_or_else(|| format!("--set {flag:?}: expected KEY=VALUE"))?;
    Ok(Setting {
        origin: format!("--set {key}"),
        key: key.split('.').map(str::to_string).collect(),
        value: value.to_string(),
    })
}

/// Writes each setting into `table`. The shape is checked here only as far
/// as a path must go through tables; whether the key exists is decided by
/// the config's own deserialisation, which names it.
pub fn apply(table: &mut Table, settings: &[Setting]) -> Result<(), String> {
    for s in settings {
        if s.key.is_empty() || s.key.len() > KEY_DEPTH_MAX || s.key.iter().any(String::is_empty) {
            return Err(format!("{}: not a setting name", s.origin));
        }
        let (last, parents) = s
            .key
            .split_last()
            .ok_or_else(|| format!("{}: empty", s.origin))?;
        let mut here = &mut *table;
        for part in parents {
            let slot = here
                .entry(part.clone())
                .or_insert_with(|| Value::Table(Table::new()));
            here = slot
                .as_table_mut()
                .ok_or_else(|| format!("{}: {part} is not a section", s.origin))?;
        }
        here.insert(last.clone(), parse_value(&s.value));
    }
    Ok(())
}

/// TOML when it parses as a TOML value, else the text as a string.
fn parse_value(text: &str) -> Value {
    format!("v = {text}")
        .parse::<Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_and_flags_overlay_the_file_in_order() {
        let mut table: Table = "node_id = 1\n[scheduler]\npass_interval_ms = 1000\n"
            .parse()
            .expect("toml");
        let env = from_env([
            (
                "BERTH_SCHEDULER__PASS_INTERVAL_MS".to_string(),
                "500".to_string(),
            ),
            ("BERTH_DATA_DIR".to_string(), "/var/lib/berth".to_string()),
            ("BERTH_SERVER".to_string(), "ignored:1".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ]);
        assert_eq!(env.len(), 2);
        apply(&mut table, &env).expect("env");
        let flag = from_flag("scheduler.backfill=false").expect("flag");
        apply(&mut table, &[flag]).expect("flag");
        assert_eq!(
            table["scheduler"]["pass_interval_ms"].as_integer(),
            Some(500)
        );
        assert_eq!(table["scheduler"]["backfill"].as_bool(), Some(false));
        assert_eq!(table["data_dir"].as_str(), Some("/var/lib/berth"));
    }

    #[test]
    fn bad_settings_are_named() {
        assert_eq!(
            from_flag("nodeid").unwrap_err(),
            "--set \"nodeid\": expected KEY=VALUE"
        );
        let mut table: Table = "node_id = 1\n".parse().expect("toml");
        let s = from_flag("node_id.x=1").expect("flag");
        assert_eq!(
            apply(&mut table, &[s]).unwrap_err(),
            "--set node_id.x: node_id is not a section"
        );
    }
}
