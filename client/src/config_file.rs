//! The client's config file: where the servers are, and optionally the
//! token and CA to use, for users who would rather not export variables.
//!
//! Found at `$BERTH_CONFIG` (which must then exist), else
//! `$HOME/.config/berth/client.toml`, else `/etc/berth/client.toml`. A
//! command-line flag wins over the environment, which wins over the file.
//!
//! ```toml
//! servers = ["10.0.0.1:7101", "10.0.0.2:7101", "10.0.0.3:7101"]
//! token = "..."          # as from `berth admin token issue`
//! ca = "/etc/berth/ca.pem"
//! ```

use serde::Deserialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The environment variable naming the config file.
pub const CONFIG_ENV: &str = "BERTH_CONFIG";
/// The system-wide file, read when no other is found.
pub const SYSTEM_CONFIG: &str = "/etc/berth/client.toml";
/// A config file larger than this is surely not one.
pub const CONFIG_BYTES_MAX: u64 = 64 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Servers to try, in order, as `host:port`.
    #[serde(default)]
    pub servers: Vec<String>,
    /// The user's token.
    pub token: Option<String>,
    /// The cluster's CA certificate (PEM): connect with TLS.
    pub ca: Option<PathBuf>,
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read the client config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("client config {path} is larger than {CONFIG_BYTES_MAX} bytes")]
    TooLarge { path: String },
    #[error("client config {path}: {message}")]
    Parse { path: String, message: String },
}

/// Which file to read: `BERTH_CONFIG`'s (required to exist), else the
/// first of the user's and the system's that exists, else none.
pub fn config_path(
    env: Option<&str>,
    home: Option<&str>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let user = home.map(|h| Path::new(h).join(".config/berth/client.toml"));
    [user, Some(PathBuf::from(SYSTEM_CONFIG))]
        .into_iter()
        .flatten()
        .find(|p| exists(p))
}

/// Parses a config file's text.
pub fn parse_config(text: &str, path: &Path) -> Result<ClientConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.display().to_string(),
        message: e.message().to_string(),
    })
}

/// Where to connect, as the command line gave it, and after [`fill`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// `--server`: "host:port[,...]".
    pub server: Option<String>,
    /// `--token`.
    pub token: Option<String>,
    /// `--ca`.
    pub ca: Option<PathBuf>,
}

/// Fills what neither a flag nor the environment gave from the client
/// config file, if there is one (flag, then environment, then file).
pub fn fill(mut reach: Reach) -> Result<Reach, ConfigError> {
    let Some(config) = load()? else {
        return Ok(reach);
    };
    let unset = |name: &str| std::env::var_os(name).is_none_or(|v| v.is_empty());
    if reach.server.is_none() && unset(crate::SERVER_ENV) && !config.servers.is_empty() {
        reach.server = Some(config.servers.join(","));
    }
    if reach.token.is_none() && unset(crate::TOKEN_ENV) {
        reach.token = config.token;
    }
    if reach.ca.is_none() && unset(crate::CA_ENV) {
        reach.ca = config.ca;
    }
    Ok(reach)
}

/// Reads the config file this process should use, if there is one.
pub fn load() -> Result<Option<ClientConfig>, ConfigError> {
    let env = std::env::var(CONFIG_ENV).ok();
    let home = std::env::var("HOME").ok();
    let Some(path) = config_path(env.as_deref(), home.as_deref(), &|p| p.is_file()) else {
        return Ok(None);
    };
    let display = path.display().to_string();
    let size = std::fs::metadata(&path)
        .map_err(|source| ConfigError::Read {
            path: display.clone(),
            source,
        })?
        .len();
    if size > CONFIG_BYTES_MAX {
        return Err(ConfigError::TooLarge { path: display });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: display,
        source,
    })?;
    parse_config(&text, &path).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_order() {
        let none = |_: &Path| false;
        let all = |_: &Path| true;
        assert_eq!(
            config_path(Some("/x.toml"), Some("/home/a"), &none),
            Some(PathBuf::from("/x.toml"))
        );
        assert_eq!(
            config_path(None, Some("/home/a"), &all),
            Some(PathBuf::from("/home/a/.config/berth/client.toml"))
        );
        let system = |p: &Path| p == Path::new(SYSTEM_CONFIG);
        assert_eq!(
            config_path(Some(""), Some("/home/a"), &system),
            Some(PathBuf::from(SYSTEM_CONFIG))
        );
        assert_eq!(config_path(None, None, &none), None);
    }

    #[test]
    fn parses_and_refuses_unknown_keys() {
        let path = Path::new("c.toml");
        let config = parse_config(
            "servers = [\"a:1\", \"b:2\"]\ntoken = \"t\"\nca = \"/ca.pem\"\n",
            path,
        )
        .expect("valid");
        assert_eq!(config.servers, ["a:1", "b:2"]);
        assert_eq!(config.token.as_deref(), Some("t"));
        assert_eq!(config.ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            parse_config("", path).expect("empty"),
            ClientConfig::default()
        );
        let err = parse_config("server = \"a:1\"\n", path).expect_err("unknown key");
        assert!(
            err.to_string()
                .starts_with("client config c.toml: unknown field `server`"),
            "{err}"
        );
        assert!(parse_config("servers = \"a:1\"\n", path).is_err());
    }
}
