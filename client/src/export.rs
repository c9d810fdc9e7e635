//! `sbatch --export`: which environment variables a job gets.
//!
//! Slurm's default, ALL, copies the whole submitting environment into the
//! job. Berth deliberately does not: a login shell's environment (PATH,
//! SSH_AUTH_SOCK, DISPLAY, module state...) means nothing on another host
//! and would be replicated through Raft with every job. `JobSpec.env` holds
//! only what was named explicitly, on top of the agent's own environment:
//!
//! - `NAME=VALUE` sets NAME to VALUE;
//! - `NAME` copies NAME's value from the caller (skipped when unset);
//! - `ALL` and `NONE` are accepted for Slurm compatibility and add nothing.

use std::collections::HashMap;
use thiserror::Error;

/// An `--export` entry that is not ALL, NONE, NAME or NAME=VALUE.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid --export entry \"{0}\": expected ALL, NONE, NAME or NAME=VALUE with NAME made of letters, digits and _")]
pub struct ExportError(pub String);

/// Parses a comma-separated `--export` list into the job's extra
/// environment. `lookup` reads the caller's environment (a parameter so
/// tests need not touch the process's).
pub fn parse_export(
    spec: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<HashMap<String, String>, ExportError> {
    let mut env = HashMap::new();
    for item in spec.split(',') {
        if item.eq_ignore_ascii_case("ALL") || item.eq_ignore_ascii_case("NONE") {
            continue;
        }
        let (name, value) = match item.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (item, None),
        };
        if !is_env_name(name) {
            return Err(ExportError(item.to_string()));
        }
        if let Some(value) = value.or_else(|| lookup(name)) {
            env.insert(name.to_string(), value);
        }
    }
    Ok(env)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str) -> Option<String> {
        (name == "EDITOR").then(|| "vi".to_string())
    }

    fn pairs(list: &[(&str, &str)]) -> HashMap<String, String> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keywords_add_nothing() {
        assert_eq!(parse_export("ALL", caller), Ok(HashMap::new()));
        assert_eq!(parse_export("none", caller), Ok(HashMap::new()));
    }

    #[test]
    fn pairs_and_names_are_exported() {
        assert_eq!(
            parse_export("ALL,A=1,EDITOR,B=x=y,C=,UNSET_VAR", caller),
            Ok(pairs(&[
                ("A", "1"),
                ("EDITOR", "vi"),
                ("B", "x=y"),
                ("C", "")
            ]))
        );
        assert_eq!(parse_export("_X1=2", caller), Ok(pairs(&[("_X1", "2")])));
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "1A=2", "A-B=1", "=1", "A B", "ALL,,B=1"] {
            assert!(parse_export(bad, caller).is_err(), "{bad}");
        }
        assert_eq!(
            parse_export("A=1,9X", caller),
            Err(ExportError("9X".into()))
        );
    }
}
