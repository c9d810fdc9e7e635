//! A local cluster as docker compose containers: every node a
//! `berth/berthd` container and every agent a `berth/agent` container,
//! built `FROM scratch` by `deploy/docker/build-images.sh`, on one private
//! compose network with fixed addresses that this machine reaches directly.
//! The drill's `--target compose` runs on it; a kill is `docker kill`, a
//! cut is `docker network disconnect`.
//!
//! The cluster's directory is bind-mounted at the same path in every
//! container, so configs, stores (read after the drill for the digest
//! check) and the jobs' marker file have one path inside and out.
//!
//! An agent container's first process is `sleep` under docker's init (which
//! reaps orphans); the agent itself is started with `docker exec`, so that
//! `kill -9` of the agent leaves its jobs running, as on a real host, and a
//! restart re-adopts them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The first member's last address byte; `.1` is the network's gateway.
const FIRST_MEMBER_BYTE: u8 = 10;
/// Members of one cluster at most.
pub const MEMBERS_MAX: u8 = 200;
/// The longest a container takes to stop after `docker kill`.
const STOP_DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Where the agent image holds the agent (`deploy/docker/build-images.sh`).
pub const AGENT_PROGRAM: &str = "/usr/local/bin/berth-agent";

#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("the compose target is not available here: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Command(#[from] crate::procs::CommandFailed),
    #[error("no member labelled {0:?}")]
    NoSuchMember(String),
    #[error("a compose cluster holds at most {MEMBERS_MAX} members")]
    Full,
    #[error("{0}")]
    Other(String),
}

fn run(program: &str, args: &[&str]) -> Result<String, ComposeError> {
    Ok(crate::procs::run_command(program, args)?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Node,
    Agent,
}

#[derive(Debug, Clone)]
struct Member {
    label: String,
    kind: Kind,
    container: String,
    ip: String,
    /// Node: `berthd`'s arguments (its entrypoint is berthd).
    args: Vec<String>,
}

/// The containers of one cluster; all removed (with their network) on
/// drop, after their output is saved as `<label>.docker.log`.
#[derive(Debug)]
pub struct ComposeLab {
    dir: PathBuf,
    project: String,
    file: PathBuf,
    image_tag: String,
    /// `10.a.b`
    subnet: String,
    members: Vec<Member>,
    created: bool,
}

impl ComposeLab {
    /// A lab for `dir`, with images `berth/berthd:TAG` and
    /// `berth/agent:TAG` (`BERTH_IMAGE_TAG`, default `latest`), which must
    /// have been built.
    pub fn new(dir: &Path) -> Result<ComposeLab, ComposeError> {
        let image_tag = std::env::var("BERTH_IMAGE_TAG").unwrap_or_else(|_| "latest".into());
        run("docker-compose", &["version", "--short"])
            .map_err(|e| ComposeError::Unavailable(format!("docker-compose does not run: {e}")))?;
        for image in ["berthd", "agent"] {
            let name = format!("berth/{image}:{image_tag}");
            if run("docker", &["image", "inspect", &name]).is_err() {
                return Err(ComposeError::Unavailable(format!(
                    "image {name} is missing; build it: cargo build --workspace --bins && \
                     deploy/docker/build-images.sh --profile debug --tag {image_tag}"
                )));
            }
        }
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let taken = run("ip", &["-o", "-4", "addr", "show"]).unwrap_or_default();
        let subnet = crate::netlab::free_subnet_in(&taken, pid, n)
            .ok_or_else(|| ComposeError::Other("no free 10.x.y.0/24 subnet".into()))?;
        Ok(ComposeLab {
            dir: dir.to_path_buf(),
            project: format!("berthdrill{pid}x{n}"),
            file: dir.join("docker-compose.yml"),
            image_tag,
            subnet,
            members: Vec::new(),
            created: false,
        })
    }

    fn add(&mut self, label: &str, kind: Kind) -> Result<String, ComposeError> {
        if self.members.len() >= usize::from(MEMBERS_MAX) {
            return Err(ComposeError::Full);
        }
        let ip = format!(
            "{}.{}",
            self.subnet,
            usize::from(FIRST_MEMBER_BYTE) + self.members.len()
        );
        self.members.push(Member {
            label: label.to_string(),
            kind,
            container: format!("{}-{label}", self.project),
            ip: ip.clone(),
            args: Vec::new(),
        });
        Ok(ip)
    }

    /// Adds a node container; returns its address.
    pub fn add_node(&mut self, label: &str) -> Result<String, ComposeError> {
        self.add(label, Kind::Node)
    }

    /// Adds an agent container; returns its address.
    pub fn add_agent(&mut self, label: &str) -> Result<String, ComposeError> {
        self.add(label, Kind::Agent)
    }

    fn member(&self, label: &str) -> Result<&Member, ComposeError> {
        self.members
            .iter()
            .find(|m| m.label == label)
            .ok_or_else(|| ComposeError::NoSuchMember(label.to_string()))
    }

    /// Sets node `label`'s `berthd` arguments (before [`Self::create`]).
    pub fn set_node_args(&mut self, label: &str, args: Vec<String>) -> Result<(), ComposeError> {
        let m = self
            .members
            .iter_mut()
            .find(|m| m.label == label)
            .ok_or_else(|| ComposeError::NoSuchMember(label.to_string()))?;
        m.args = args;
        Ok(())
    }

    fn network(&self) -> String {
        // docker-compose 1.x names a project's network `<project>_<name>`.
        format!("{}_drill", self.project)
    }

    /// Writes the compose file and creates every container, started by
    /// none.
    pub fn create(&mut self) -> Result<(), ComposeError> {
        std::fs::write(&self.file, self.render())
            .map_err(|e| ComposeError::Other(e.to_string()))?;
        self.created = true;
        self.compose(&["up", "--no-start"]).map(drop)
    }

    /// The compose file: one service per member at its address, the
    /// cluster's directory mounted at its own path in each.
    fn render(&self) -> String {
        let mut yaml = format!(
            "# Written by berth-drill (chaos-tests/src/compose.rs) for one run.\n\
             version: \"3.8\"\nnetworks:\n  drill:\n    ipam:\n      config:\n        \
             - subnet: {}.0/24\nservices:\n",
            self.subnet
        );
        let dir = self.dir.display().to_string();
        for m in &self.members {
            let (image, command) = match m.kind {
                Kind::Node => ("berthd", json_list(&m.args)),
                Kind::Agent => ("agent", "[\"infinity\"]".to_string()),
            };
            // The agent is exec'd in later (`exec_detached`); sleep keeps
            // the container, and the jobs an agent left, alive.
            let entrypoint = if m.kind == Kind::Agent {
                "    entrypoint: [\"/bin/sleep\"]\n"
            } else {
                ""
            };
            yaml.push_str(&format!(
                "  {label}:\n    image: berth/{image}:{tag}\n    container_name: {container}\n\
                 {entrypoint}    command: {command}\n    init: true\n    restart: \"no\"\n\
                 \x20   volumes: [\"{dir}:{dir}\"]\n    networks:\n      drill:\n        \
                 ipv4_address: {ip}\n",
                label = m.label,
                tag = self.image_tag,
                container = m.container,
                ip = m.ip,
            ));
        }
        yaml
    }

    fn compose(&self, args: &[&str]) -> Result<String, ComposeError> {
        let file = self.file.display().to_string();
        let mut all = vec!["-p", &self.project, "-f", &file];
        all.extend_from_slice(args);
        run("docker-compose", &all)
    }

    /// Starts member `label`'s container.
    pub fn start(&self, label: &str) -> Result<(), ComposeError> {
        run("docker", &["start", &self.member(label)?.container]).map(drop)
    }

    /// The host pid of member `label`'s container's first process (for a
    /// node, `berthd`), while it runs.
    pub fn pid(&self, label: &str) -> Result<Option<u32>, ComposeError> {
        let out = run(
            "docker",
            &[
                "inspect",
                "-f",
                "{{.State.Pid}}",
                &self.member(label)?.container,
            ],
        )?;
        Ok(out.trim().parse::<u32>().ok().filter(|p| *p != 0))
    }

    /// The pid `berthd` runs as: the child of the container's init.
    pub fn node_pid(&self, label: &str) -> Result<Option<u32>, ComposeError> {
        Ok(self.pid(label)?.and_then(first_child))
    }

    /// `docker kill` (SIGKILL) member `label`'s container, and waits until
    /// it has stopped.
    pub fn kill(&self, label: &str) -> Result<(), ComposeError> {
        let container = &self.member(label)?.container;
        // An error is a container already stopped: checked below.
        let _ = run("docker", &["kill", "-s", "KILL", container]);
        let start = Instant::now();
        while self.pid(label)?.is_some() {
            if start.elapsed() > STOP_DEADLINE {
                return Err(ComposeError::Other(format!(
                    "{container} still runs {STOP_DEADLINE:?} after docker kill"
                )));
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// The address of member `label`.
    pub fn ip(&self, label: &str) -> Result<String, ComposeError> {
        Ok(self.member(label)?.ip.clone())
    }

    /// kill -9 the processes in member `label`'s container whose program
    /// is named `program` and whose arguments include every one of
    /// `args` (as this machine sees them: one kernel, one /proc), and waits
    /// until they are gone; the container and its other processes run on.
    pub fn kill_process(
        &self,
        label: &str,
        program: &str,
        args: &[&str],
    ) -> Result<(), ComposeError> {
        let _ = self.member(label)?;
        if processes_named(program, args).is_empty() {
            // Killing nothing would let a second one start beside it.
            return Err(ComposeError::Other(format!(
                "no {program} with {args:?} runs in {label}"
            )));
        }
        let start = Instant::now();
        loop {
            let pids = processes_named(program, args);
            if pids.is_empty() {
                return Ok(());
            }
            for pid in pids {
                // SAFETY: kill(2); a pid that has gone meanwhile is ESRCH.
                unsafe {
                    libc::kill(pid as i32, libc::SIGKILL);
                }
            }
            if start.elapsed() > STOP_DEADLINE {
                return Err(ComposeError::Other(format!(
                    "{program} in {label} survives SIGKILL for {STOP_DEADLINE:?}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Runs `argv` in agent `label`'s container, detached, its output
    /// appended to `log` (a path under the cluster's directory).
    pub fn exec_detached(
        &self,
        label: &str,
        argv: &[String],
        log: &Path,
    ) -> Result<(), ComposeError> {
        let container = &self.member(label)?.container;
        let line = format!(
            "exec {} >> {} 2>&1",
            argv.iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
            shell_quote(&log.display().to_string())
        );
        run("docker", &["exec", "-d", container, "/bin/sh", "-c", &line]).map(drop)
    }

    /// Cuts member `label` off its network (every packet to and from it is
    /// lost until [`Self::heal`]).
    pub fn cut(&self, label: &str) -> Result<(), ComposeError> {
        let m = self.member(label)?;
        run(
            "docker",
            &["network", "disconnect", "-f", &self.network(), &m.container],
        )
        .map(drop)
    }

    /// Puts member `label` back on its network at its address.
    pub fn heal(&self, label: &str) -> Result<(), ComposeError> {
        let m = self.member(label)?;
        run(
            "docker",
            &[
                "network",
                "connect",
                "--ip",
                &m.ip,
                &self.network(),
                &m.container,
            ],
        )
        .map(drop)
    }
}

impl Drop for ComposeLab {
    fn drop(&mut self) {
        if !self.created {
            return;
        }
        for m in &self.members {
            if let Ok(out) = Command::new("docker").args(["logs", &m.container]).output() {
                let mut text = out.stdout;
                text.extend_from_slice(&out.stderr);
                let _ = std::fs::write(self.dir.join(format!("{}.docker.log", m.label)), text);
            }
        }
        let _ = self.compose(&["down", "-v", "--remove-orphans", "-t", "0"]);
    }
}

/// The processes whose program's file name is `program` and whose
/// arguments include each of `args`.
fn processes_named(program: &str, args: &[&str]) -> Vec<u32> {
    crate::procs::pids_where(|argv| {
        let named = argv.first().is_some_and(|a0| {
            Path::new(&*String::from_utf8_lossy(a0))
                .file_name()
                .is_some_and(|f| f == program)
        });
        named && args.iter().all(|want| argv.contains(&want.as_bytes()))
    })
}

/// The first child of process `pid` (from `/proc`), if any.
fn first_child(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn json_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compose_file_puts_each_member_at_its_address_with_the_directory_mounted() {
        let mut lab = ComposeLab {
            dir: PathBuf::from("/d"),
            project: "berthdrill1x0".into(),
            file: PathBuf::from("/d/docker-compose.yml"),
            image_tag: "t".into(),
            subnet: "10.150.2".into(),
            members: Vec::new(),
            created: false,
        };
        assert_eq!(lab.add_node("n1").unwrap(), "10.150.2.10");
        assert_eq!(lab.add_agent("a1").unwrap(), "10.150.2.11");
        lab.set_node_args("n1", vec!["--config".into(), "/d/node-1.toml".into()])
            .unwrap();
        assert!(lab.set_node_args("n9", Vec::new()).is_err());
        assert_eq!(lab.network(), "berthdrill1x0_drill");
        let expected = "# Written by berth-drill (chaos-tests/src/compose.rs) for one run.
version: \"3.8\"
networks:
  drill:
    ipam:
      config:
        - subnet: 10.150.2.0/24
services:
  n1:
    image: berth/berthd:t
    container_name: berthdrill1x0-n1
    command: [\"--config\",\"/d/node-1.toml\"]
    init: true
    restart: \"no\"
    volumes: [\"/d:/d\"]
    networks:
      drill:
        ipv4_address: 10.150.2.10
  a1:
    image: berth/agent:t
    container_name: berthdrill1x0-a1
    entrypoint: [\"/bin/sleep\"]
    command: [\"infinity\"]
    init: true
    restart: \"no\"
    volumes: [\"/d:/d\"]
    networks:
      drill:
        ipv4_address: 10.150.2.11
";
        assert_eq!(lab.render(), expected);
    }

    #[test]
    fn arguments_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("/a b/it's"), "'/a b/it'\\''s'");
    }
}
