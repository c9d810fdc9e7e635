//! Agent configuration: an optional TOML file, overridden by command-line
//! flags, with the server list falling back to `BERTH_SERVER`.
//!
//! ```toml
//! host = "gpu017"                      # default: this machine's hostname
//! servers = ["10.0.0.1:7100", "10.0.0.2:7100"]
//! work_dir = "/scratch"                # default: the agent's current dir
//! heartbeat_interval_ms = 1000         # the server's RegisterResponse wins
//! stop_grace_s = 30                    # when an assignment says 0
//! cpus = 4                             # override discovered CPUs
//! memory_mb = 8192                     # override discovered memory
//! features = ["a100", "ib"]            # what `sbatch -C` may ask for
//! ```
//!
//! `cpus` and `memory_mb` replace what the agent discovers; they exist so
//! that tests and `berthd dev` can make small fake hosts. Checking declared
//! against discovered inventory (and draining on mismatch) comes later.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::inventory::settings::{
    DeclaredInventory, EmulatorConfig, InventoryKeys, InventorySettings,
};

/// Default heartbeat period until the server says otherwise, in ms.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 1000;
/// Shortest heartbeat period accepted from config or server, in ms.
pub const HEARTBEAT_INTERVAL_MIN_MS: u64 = 10;
/// Longest heartbeat period accepted from config or server, in ms.
pub const HEARTBEAT_INTERVAL_MAX_MS: u64 = 600_000;
/// Default SIGTERM-to-SIGKILL grace when an assignment gives 0, in s.
pub const DEFAULT_STOP_GRACE_S: u64 = 30;
/// Largest stop grace accepted in the config, in s (one day).
pub const STOP_GRACE_MAX_S: u64 = 86_400;
/// Most servers accepted in the list.
pub const SERVERS_MAX: usize = 64;
/// Where the step service listens when the config names nothing (the
/// port is slurmd's, which srun's counterpart here replaces).
pub const DEFAULT_STEP_LISTEN: &str = "0.0.0.0:6818";
/// Environment variable holding the comma-separated server list.
pub const SERVER_ENV: &str = "BERTH_SERVER";

/// Errors loading or validating the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The io error is part of the message, not a `source`, so a printed
    // error chain does not say it twice.
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error(
        "no servers given: pass --server HOST:PORT[,HOST:PORT...], set `servers` in the \
         config file, or set {SERVER_ENV}"
    )]
    NoServers,
    #[error("cannot determine this host's name ({0}); set `host` or pass --host")]
    NoHostname(String),
    #[error("cannot determine the current directory for work_dir: {0}")]
    NoWorkDir(std::io::Error),
}

/// The config file as written. Every key is optional; unknown keys are
/// rejected so a typo does not silently fall back to a default.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub host: Option<String>,
    pub servers: Option<Vec<String>>,
    pub work_dir: Option<PathBuf>,
    pub heartbeat_interval_ms: Option<u64>,
    pub stop_grace_s: Option<u64>,
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    /// The secret nodes and agents share (when the cluster runs with auth).
    pub cluster_secret_file: Option<PathBuf>,
    /// The cluster's CA (PEM): connect with TLS and verify the nodes.
    pub tls_ca_file: Option<PathBuf>,
    // Jobs (see `runner`, `statedir`, `cgroup`, `user`).
    pub state_dir: Option<PathBuf>,
    pub cgroup_parent: Option<PathBuf>,
    pub job_user: Option<JobUserKey>,
    pub allow_root_jobs: Option<bool>,
    pub job_shim: Option<PathBuf>,
    // Inventory (see `inventory::settings`).
    pub fake_inventory_file: Option<PathBuf>,
    pub sysfs_root: Option<PathBuf>,
    pub rediscover_interval_s: Option<u64>,
    pub declared: Option<DeclaredInventory>,
    pub emulators: Option<Vec<EmulatorConfig>>,
    /// Features jobs may require (`sbatch -C`), e.g. `["a100", "ib"]`.
    pub features: Option<Vec<String>>,
    // Steps (see `steps`).
    /// Where to serve srun's tasks for multi-host jobs; `""` serves none.
    pub step_listen: Option<String>,
    /// The address other hosts dial for it, when not this host's name
    /// (or the bound address) with the bound port.
    pub step_advertise: Option<String>,
    /// TLS on the step service: this host's certificate chain and key
    /// (PEM), signed by the cluster's CA (`tls_ca_file`), which srun
    /// verifies it with. Both or neither.
    pub step_tls_cert_file: Option<PathBuf>,
    pub step_tls_key_file: Option<PathBuf>,
}

impl FileConfig {
    /// The inventory keys checked and resolved: what discovery reads.
    /// Needs no server or host name, so `berth-agent --print-inventory`
    /// can show what a host would report before it joins a cluster.
    pub fn inventory_settings(&self, origin: &str) -> Result<InventorySettings, ConfigError> {
        let invalid = |message: &str| ConfigError::Invalid {
            origin: origin.to_string(),
            message: message.to_string(),
        };
        if self.cpus == Some(0) {
            return Err(invalid("cpus must be at least 1"));
        }
        if self.memory_mb == Some(0) {
            return Err(invalid("memory_mb must be at least 1"));
        }
        InventorySettings::resolve(InventoryKeys {
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            fake_inventory_file: self.fake_inventory_file.clone(),
            sysfs_root: self.sysfs_root.clone(),
            rediscover_interval_s: self.rediscover_interval_s,
            declared: self.declared.clone(),
            emulators: self.emulators.clone(),
            features: self.features.clone(),
        })
        .map_err(|message| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        })
    }

    /// Parses TOML text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let message = match e.span() {
                Some(span) => {
                    let (line, column) = line_column(text, span.start);
                    format!("line {line}, column {column}: {}", e.message())
                }
                None => e.message().to_string(),
            };
            ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            }
        })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::parse(&text, path)
    }
}

/// Values given on the command line; each one replaces the file's.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub servers: Vec<String>,
    pub host: Option<String>,
    pub work_dir: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
}

/// `job_user` as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobUserKey {
    Submitter,
    Agent,
}

/// Where allocation records live when the config names no `state_dir`
/// (each host in its own subdirectory).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/berth-agent";
/// Name of the job shim binary, looked for next to the agent's.
pub const JOB_SHIM_NAME: &str = "berth-job-shim";

/// How the agent runs jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSettings {
    /// This host's records: `state_dir/HOST`.
    pub state_dir: PathBuf,
    /// `None`: the default under the cgroup2 mount; `Some("")`: off.
    pub cgroup_parent: Option<PathBuf>,
    pub job_user: crate::user::JobUser,
    pub allow_root_jobs: bool,
    /// `None`: look next to the agent binary.
    pub job_shim: Option<PathBuf>,
}

/// The resolved configuration the agent runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub host: String,
    pub servers: Vec<String>,
    pub work_dir: PathBuf,
    pub heartbeat_interval_ms: u64,
    pub stop_grace_s: u64,
    pub cpus: Option<u32>,
    pub memory_mb: Option<u64>,
    /// Sent with every call when the cluster runs with auth.
    pub cluster_secret: Option<Vec<u8>>,
    /// The cluster's CA (PEM) when the cluster runs with TLS.
    pub tls_ca: Option<Vec<u8>>,
    /// State directory, cgroups, job user.
    pub jobs: JobSettings,
    /// GPUs, emulators, declared inventory, re-discovery.
    pub inventory: InventorySettings,
    /// Where the step service listens; `None`: it is off, and this host
    /// runs no srun tasks of multi-host jobs started elsewhere.
    pub step_listen: Option<std::net::SocketAddr>,
    /// The address to register for it, when given; else derived from the
    /// bound address (see `steps::advertised_addr`).
    pub step_advertise: Option<String>,
    /// The step service's certificate chain and key (PEM), when it serves
    /// TLS.
    pub step_tls: Option<(Vec<u8>, Vec<u8>)>,
    /// Where the cluster's CA is (`tls_ca_file`): jobs get it as
    /// `BERTH_CA`, so their srun and berth commands verify what they dial.
    pub tls_ca_file: Option<PathBuf>,
}

impl Config {
    /// Merges file, flags and environment. Precedence: flags, then the file,
    /// then `env_servers` (the value of `BERTH_SERVER`) for the server list.
    /// `origin` names where the file values came from, for errors.
    pub fn resolve(
        file: FileConfig,
        origin: &str,
        overrides: Overrides,
        env_servers: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };

        let inventory = file.inventory_settings(origin)?;
        let servers = if !overrides.servers.is_empty() {
            overrides.servers
        } else if let Some(s) = file.servers {
            s
        } else {
            env_servers.map(split_servers).unwrap_or_default()
        };
        let servers: Vec<String> = servers.iter().map(|s| s.trim().to_string()).collect();
        if servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        if servers.len() > SERVERS_MAX {
            return Err(invalid(format!(
                "{} servers given, at most {SERVERS_MAX} are accepted",
                servers.len()
            )));
        }
        for s in &servers {
            validate_server(s).map_err(&invalid)?;
        }

        let host = match overrides.host.or(file.host) {
            Some(h) => h.trim().to_string(),
            None => crate::inventory::hostname().map_err(ConfigError::NoHostname)?,
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(invalid(format!(
                "host {host:?} must be non-empty, without spaces or commas"
            )));
        }

        let work_dir = match overrides.work_dir.or(file.work_dir) {
            Some(d) => d,
            None => std::env::current_dir().map_err(ConfigError::NoWorkDir)?,
        };

        let heartbeat_interval_ms = file
            .heartbeat_interval_ms
            .unwrap_or(DEFAULT_HEARTBEAT_INTERVAL_MS);
        if !(HEARTBEAT_INTERVAL_MIN_MS..=HEARTBEAT_INTERVAL_MAX_MS).contains(&heartbeat_interval_ms)
        {
            return Err(invalid(format!(
                "heartbeat_interval_ms = {heartbeat_interval_ms} is outside \
                 {HEARTBEAT_INTERVAL_MIN_MS}..={HEARTBEAT_INTERVAL_MAX_MS}"
            )));
        }
        let stop_grace_s = file.stop_grace_s.unwrap_or(DEFAULT_STOP_GRACE_S);
        if stop_grace_s > STOP_GRACE_MAX_S {
            return Err(invalid(format!(
                "stop_grace_s = {stop_grace_s} is above the maximum {STOP_GRACE_MAX_S}"
            )));
        }
        let tls_ca = match &file.tls_ca_file {
            None => None,
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| invalid(format!("tls_ca_file {}: {e}", path.display())))?,
            ),
        };
        let cluster_secret = match &file.cluster_secret_file {
            None => None,
            Some(path) => {
                let text = std::fs::read(path)
                    .map_err(|e| invalid(format!("cluster_secret_file {}: {e}", path.display())))?;
                Some(
                    berth_auth::secret_from_file_text(&text).map_err(|e| {
                        invalid(format!("cluster_secret_file {}: {e}", path.display()))
                    })?,
                )
            }
        };

        let state_root = overrides
            .state_dir
            .or(file.state_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        if state_root.as_os_str().is_empty() {
            return Err(invalid("state_dir must not be empty".to_string()));
        }
        let jobs = JobSettings {
            state_dir: state_root.join(&host),
            cgroup_parent: file.cgroup_parent,
            job_user: match file.job_user {
                Some(JobUserKey::Agent) => crate::user::JobUser::Agent,
                Some(JobUserKey::Submitter) | None => crate::user::JobUser::Submitter,
            },
            allow_root_jobs: file.allow_root_jobs.unwrap_or(false),
            job_shim: file.job_shim,
        };

        let step_listen = match file.step_listen.as_deref().map(str::trim) {
            Some("") => None,
            listen => {
                let text = listen.unwrap_or(DEFAULT_STEP_LISTEN);
                Some(text.parse::<std::net::SocketAddr>().map_err(|e| {
                    invalid(format!(
                        "step_listen {text:?} is not IP:PORT ({e}); \"\" turns the step service off"
                    ))
                })?)
            }
        };
        let step_advertise = match file.step_advertise.map(|a| a.trim().to_string()) {
            Some(a) if a.is_empty() || a.len() > 255 || a.contains(char::is_whitespace) => {
                return Err(invalid(format!(
                    "step_advertise {a:?} must be HOST:PORT, 1 to 255 bytes, without spaces"
                )));
            }
            other => other,
        };

        let step_tls = match (&file.step_tls_cert_file, &file.step_tls_key_file) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let read = |path: &PathBuf, key: &str| {
                    std::fs::read(path)
                        .map_err(|e| invalid(format!("{key} {}: {e}", path.display())))
                };
                if tls_ca.is_none() {
                    return Err(invalid(
                        "step_tls_cert_file needs tls_ca_file: srun verifies the step service with the cluster's CA"
                            .to_string(),
                    ));
                }
                Some((
                    read(cert, "step_tls_cert_file")?,
                    read(key, "step_tls_key_file")?,
                ))
            }
            _ => {
                return Err(invalid(
                    "step_tls_cert_file and step_tls_key_file go together".to_string(),
                ))
            }
        };

        Ok(Config {
            step_tls,
            tls_ca_file: file.tls_ca_file.clone(),
            step_listen,
            step_advertise,
            jobs,
            inventory,
            host,
            servers,
            work_dir,
            heartbeat_interval_ms,
            stop_grace_s,
            cpus: file.cpus,
            memory_mb: file.memory_mb,
            cluster_secret,
            tls_ca,
        })
    }
}

/// 1-based line and column of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.chars().rev().take_while(|&c| c != '\n').count() + 1;
    (line, column)
}

/// Splits a comma-separated server list, dropping empty items.
pub fn split_servers(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A server is `host:port`, optionally with an `http://` or `https://`
/// scheme in front.
fn validate_server(s: &str) -> Result<(), String> {
    let bare = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .unwrap_or(s);
    let ok = match bare.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("server {s:?} is not HOST:PORT"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> &'static Path {
        Path::new("/etc/berth/agent.toml")
    }

    fn with_host(file: FileConfig) -> FileConfig {
        FileConfig {
            host: Some("h1".into()),
            ..file
        }
    }

    #[test]
    fn parses_all_keys() {
        let text = r#"
            host = "gpu017"
            servers = ["10.0.0.1:7100", "10.0.0.2:7100"]
            work_dir = "/scratch"
            heartbeat_interval_ms = 250
            stop_grace_s = 5
            cpus = 4
            memory_mb = 8192
        "#;
        let file = FileConfig::parse(text, path()).unwrap();
        let cfg = Config::resolve(file, "agent.toml", Overrides::default(), None).unwrap();
        assert_eq!(cfg.host, "gpu017");
        assert_eq!(cfg.servers, vec!["10.0.0.1:7100", "10.0.0.2:7100"]);
        assert_eq!(cfg.work_dir, PathBuf::from("/scratch"));
        assert_eq!(cfg.heartbeat_interval_ms, 250);
        assert_eq!(cfg.stop_grace_s, 5);
        assert_eq!(cfg.cpus, Some(4));
        assert_eq!(cfg.memory_mb, Some(8192));
    }

    #[test]
    fn parses_inventory_keys_and_rejects_unknown_ones_in_sections() {
        let text = r#"
            servers = ["a:1"]
            host = "gpu017"
            fake_inventory_file = "/etc/berth/fake.toml"
            rediscover_interval_s = 5
            [declared]
            gpus = 8
            gpu_type = "h100"
            [[emulators]]
            kind = "zebu"
            group = "rack3"
            units = 2
            health_command = "true"
        "#;
        let file = FileConfig::parse(text, path()).unwrap();
        let cfg = Config::resolve(file, "agent.toml", Overrides::default(), None).unwrap();
        assert_eq!(cfg.inventory.declared.gpus, Some(8));
        assert_eq!(cfg.inventory.rediscover_interval_s, 5);
        assert_eq!(cfg.inventory.emulators[0].unit_ids, vec![0, 1]);
        assert_eq!(
            cfg.inventory.fake_inventory_file,
            Some(PathBuf::from("/etc/berth/fake.toml"))
        );

        let err = FileConfig::parse("[declared]\ngpu = 8\n", path()).unwrap_err();
        assert!(err.to_string().contains("gpu"), "{err}");
        let err =
            FileConfig::parse("[[emulators]]\nkind = \"zebu\"\nunit = 2\n", path()).unwrap_err();
        assert!(err.to_string().contains("unit"), "{err}");
        let file = FileConfig::parse(
            "servers = [\"a:1\"]\nhost = \"h\"\n[[emulators]]\nkind = \"zebu\"\n",
            path(),
        )
        .unwrap();
        let err = Config::resolve(file, "agent.toml", Overrides::default(), None).unwrap_err();
        assert!(
            err.to_string()
                .contains("agent.toml: emulators[0]: give units or unit_ids"),
            "{err}"
        );
    }

    #[test]
    fn job_keys_resolve_with_defaults() {
        let text = r#"
            servers = ["a:1"]
            host = "n1"
            state_dir = "/srv/berth-state"
            cgroup_parent = ""
            job_user = "agent"
            allow_root_jobs = true
            job_shim = "/opt/berth/berth-job-shim"
        "#;
        let file = FileConfig::parse(text, path()).unwrap();
        let cfg = Config::resolve(file, "f", Overrides::default(), None).unwrap();
        assert_eq!(cfg.jobs.state_dir, PathBuf::from("/srv/berth-state/n1"));
        assert_eq!(cfg.jobs.cgroup_parent, Some(PathBuf::new()));
        assert_eq!(cfg.jobs.job_user, crate::user::JobUser::Agent);
        assert!(cfg.jobs.allow_root_jobs);
        assert_eq!(
            cfg.jobs.job_shim,
            Some(PathBuf::from("/opt/berth/berth-job-shim"))
        );

        let file = FileConfig::parse("servers = [\"a:1\"]\nhost = \"n1\"\n", path()).unwrap();
        let flags = Overrides {
            state_dir: Some("/tmp/s".into()),
            ..Default::default()
        };
        let cfg = Config::resolve(file.clone(), "f", flags, None).unwrap();
        assert_eq!(cfg.jobs.state_dir, PathBuf::from("/tmp/s/n1"));
        let cfg = Config::resolve(file, "f", Overrides::default(), None).unwrap();
        assert_eq!(
            cfg.jobs.state_dir,
            PathBuf::from(DEFAULT_STATE_DIR).join("n1")
        );
        assert_eq!(cfg.jobs.job_user, crate::user::JobUser::Submitter);
        assert!(!cfg.jobs.allow_root_jobs);

        let err = FileConfig::parse("job_user = \"root\"\n", path()).unwrap_err();
        assert!(err.to_string().contains("root"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected_and_named() {
        let err = FileConfig::parse("host = \"a\"\nheartbeat_ms = 5\n", path()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/etc/berth/agent.toml"), "{msg}");
        assert!(msg.contains("heartbeat_ms"), "{msg}");
        assert!(msg.contains("line 2, column 1"), "{msg}");
    }

    #[test]
    fn wrong_type_is_rejected() {
        let err = FileConfig::parse("cpus = \"four\"\n", path()).unwrap_err();
        assert!(matches!(err, ConfigError::Parse { .. }));
    }

    #[test]
    fn defaults_apply() {
        let file = with_host(FileConfig {
            servers: Some(vec!["a:1".into()]),
            work_dir: Some("/w".into()),
            ..Default::default()
        });
        let cfg = Config::resolve(file, "f", Overrides::default(), None).unwrap();
        assert_eq!(cfg.heartbeat_interval_ms, DEFAULT_HEARTBEAT_INTERVAL_MS);
        assert_eq!(cfg.stop_grace_s, DEFAULT_STOP_GRACE_S);
        assert_eq!(cfg.cpus, None);
    }

    #[test]
    fn flags_beat_file_and_file_beats_env() {
        let file = with_host(FileConfig {
            servers: Some(vec!["file:1".into()]),
            ..Default::default()
        });
        let flags = Overrides {
            servers: vec!["flag:1".into()],
            host: Some("flaghost".into()),
            work_dir: Some("/flag".into()),
            state_dir: None,
        };
        let cfg = Config::resolve(file.clone(), "f", flags, Some("env:1")).unwrap();
        assert_eq!(cfg.servers, vec!["flag:1"]);
        assert_eq!(cfg.host, "flaghost");
        assert_eq!(cfg.work_dir, PathBuf::from("/flag"));

        let cfg = Config::resolve(file, "f", Overrides::default(), Some("env:1")).unwrap();
        assert_eq!(cfg.servers, vec!["file:1"]);

        let cfg = Config::resolve(
            with_host(FileConfig::default()),
            "f",
            Overrides::default(),
            Some("env:1, env:2,"),
        )
        .unwrap();
        assert_eq!(cfg.servers, vec!["env:1", "env:2"]);
    }

    #[test]
    fn missing_servers_is_an_error() {
        let err = Config::resolve(
            with_host(FileConfig::default()),
            "f",
            Overrides::default(),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::NoServers));
    }

    #[test]
    fn bad_values_are_rejected() {
        let base = with_host(FileConfig {
            servers: Some(vec!["a:1".into()]),
            ..Default::default()
        });
        let bad = [
            FileConfig {
                servers: Some(vec!["no-port".into()]),
                ..base.clone()
            },
            FileConfig {
                heartbeat_interval_ms: Some(0),
                ..base.clone()
            },
            FileConfig {
                stop_grace_s: Some(STOP_GRACE_MAX_S + 1),
                ..base.clone()
            },
            FileConfig {
                cpus: Some(0),
                ..base.clone()
            },
            FileConfig {
                host: Some("two words".into()),
                ..base.clone()
            },
            FileConfig {
                step_listen: Some("not an address".into()),
                ..base.clone()
            },
            FileConfig {
                step_advertise: Some("two words:1".into()),
                ..base.clone()
            },
            // A certificate without its key, and TLS without the CA srun
            // would verify it with.
            FileConfig {
                step_tls_cert_file: Some("/etc/hostname".into()),
                ..base.clone()
            },
            FileConfig {
                step_tls_cert_file: Some("/etc/hostname".into()),
                step_tls_key_file: Some("/etc/hostname".into()),
                ..base.clone()
            },
        ];
        for file in bad {
            let err = Config::resolve(file.clone(), "agent.toml", Overrides::default(), None)
                .expect_err(&format!("{file:?} should be rejected"));
            assert!(err.to_string().starts_with("agent.toml: "), "{err}");
        }
    }

    #[test]
    fn the_step_service_listens_on_slurmds_port_unless_told() {
        let base = with_host(FileConfig {
            servers: Some(vec!["a:1".into()]),
            ..Default::default()
        });
        let resolve = |file: FileConfig| {
            Config::resolve(file, "agent.toml", Overrides::default(), None).expect("valid")
        };
        assert_eq!(
            resolve(base.clone()).step_listen,
            Some("0.0.0.0:6818".parse().expect("addr"))
        );
        let off = FileConfig {
            step_listen: Some(String::new()),
            ..base.clone()
        };
        assert_eq!(resolve(off).step_listen, None);
        let lo = FileConfig {
            step_listen: Some("127.0.0.1:0".into()),
            step_advertise: Some("gpu01.example:7000".into()),
            ..base
        };
        let config = resolve(lo);
        assert_eq!(
            config.step_listen,
            Some("127.0.0.1:0".parse().expect("addr"))
        );
        assert_eq!(config.step_advertise.as_deref(), Some("gpu01.example:7000"));
    }

    #[test]
    fn server_forms() {
        assert!(validate_server("127.0.0.1:7100").is_ok());
        assert!(validate_server("http://node1:7100").is_ok());
        assert!(validate_server("[::1]:7100").is_ok());
        assert!(validate_server("node1").is_err());
        assert!(validate_server("node1:http").is_err());
        assert!(validate_server(":7100").is_err());
    }
}
