//! Network namespaces for a local cluster: every node and agent gets a
//! namespace of its own with one address on a private bridge, so a drill
//! can cut one of them off from every other process (its link goes down:
//! packets are lost, connections stall, nothing is refused), then heal it.
//! Loopback cannot do that; a process in its own namespace can.
//!
//! Needs root (or CAP_NET_ADMIN) and iproute2's `ip`. The bridge is
//! `bth<tag>` with `10.<a>.<b>.1/24` in the caller's namespace, so the
//! harness and the drill's clients reach every member directly; member
//! `k` (from 0) is namespace `bth<tag>-<label>` with `10.<a>.<b>.<10+k>`
//! on its `eth0`, whose other end `bth<tag>m<k in hex>` sits on the
//! bridge. Where the
//! host's firewall drops forwarded packets (Docker sets FORWARD to DROP,
//! and bridged packets pass through it), one ACCEPT rule for the bridge
//! is added and removed again with the lab.
//!
//! Everything is removed on drop; a lab left behind by a killed process
//! (its pid is in the tag) is removed by the next lab made on the machine.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Members of one lab at most (addresses `.10` up to `.10 + MEMBERS_MAX`).
pub const MEMBERS_MAX: u8 = 200;
/// The first member's last address byte; `.1` is the bridge.
const FIRST_MEMBER_BYTE: u8 = 10;
/// Every lab's bridge, namespaces and host-side links start so.
const PREFIX: &str = "bth";
/// Subnets tried before giving up on finding a free one.
const SUBNET_ATTEMPTS_MAX: u32 = 256;

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, thiserror::Error)]
pub enum NetlabError {
    #[error("network namespaces are not available here: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Command(#[from] crate::procs::CommandFailed),
    #[error("no member labelled {0:?} in this lab")]
    NoSuchMember(String),
    #[error("a lab holds at most {MEMBERS_MAX} members")]
    Full,
    #[error("no free 10.x.y.0/24 subnet after {SUBNET_ATTEMPTS_MAX} tries")]
    NoSubnet,
}

/// Ok when this process can make what a lab needs: it is root, and a
/// namespace and a bridge can be made and removed (root in a container
/// without CAP_NET_ADMIN/CAP_SYS_ADMIN cannot). Probed once per process.
pub fn available() -> Result<(), NetlabError> {
    static PROBED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    PROBED
        .get_or_init(probe)
        .clone()
        .map_err(NetlabError::Unavailable)
}

fn probe() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (namespaces and links need CAP_NET_ADMIN)".into());
    }
    if let Err(e) = Command::new("ip").arg("-V").output() {
        return Err(format!("iproute2's `ip` cannot run: {e}"));
    }
    // Named like a lab of this process, so a probe a kill interrupted is
    // swept like any lab left behind.
    let tag = format!("{:x}xp", std::process::id());
    let namespace = format!("{PREFIX}{tag}-probe");
    let bridge = format!("{PREFIX}{tag}");
    let made = run(&["netns", "add", &namespace])
        .and_then(|_| run(&["link", "add", &bridge, "type", "bridge"]));
    let _ = run(&["link", "del", &bridge]);
    let _ = run(&["netns", "del", &namespace]);
    made.map(drop).map_err(|e| e.to_string())
}

fn run(args: &[&str]) -> Result<String, NetlabError> {
    run_program("ip", args)
}

fn run_program(program: &str, args: &[&str]) -> Result<String, NetlabError> {
    Ok(crate::procs::run_command(program, args)?)
}

/// One member: a namespace with one address.
#[derive(Debug, Clone)]
struct Member {
    label: String,
    namespace: String,
    /// The bridge-side end of its link: down is cut off.
    link: String,
    ip: String,
}

/// A bridge and the namespaces on it; all removed on drop.
#[derive(Debug)]
pub struct NetLab {
    tag: String,
    bridge: String,
    /// `10.a.b`
    subnet: String,
    members: Vec<Member>,
    /// The FORWARD rule added for the bridge, to delete on drop.
    forward_rule: bool,
}

impl NetLab {
    /// A bridge on a free `10.x.y.0/24` subnet, with no members yet.
    pub fn create() -> Result<NetLab, NetlabError> {
        available()?;
        sweep_abandoned();
        let pid = std::process::id();
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        // pid in hex then a per-process count: unique among live labs,
        // and the pid tells `sweep_abandoned` whether the owner lives.
        let tag = format!("{pid:x}x{n:x}");
        let bridge = format!("{PREFIX}{tag}");
        if bridge.len() > 12 {
            // Links are named `<bridge>m<k in hex>` and a name holds 15
            // bytes.
            return Err(NetlabError::Unavailable(format!(
                "tag {tag} too long for interface names"
            )));
        }
        let subnet = free_subnet(pid, n)?;
        run(&["link", "add", &bridge, "type", "bridge"])?;
        let mut lab = NetLab {
            tag,
            bridge: bridge.clone(),
            subnet: subnet.clone(),
            members: Vec::new(),
            forward_rule: false,
        };
        run(&["addr", "add", &format!("{subnet}.1/24"), "dev", &bridge])?;
        run(&["link", "set", &bridge, "up"])?;
        // Bridged packets go through the host's FORWARD chain where
        // br_netfilter is loaded; Docker's DROP policy would eat them.
        if run_program("iptables", &forward_rule_args("-I", &bridge)).is_ok() {
            lab.forward_rule = true;
        }
        Ok(lab)
    }

    /// Adds a member labelled `label` (e.g. `n1`, `a2`); returns its
    /// address.
    pub fn add(&mut self, label: &str) -> Result<String, NetlabError> {
        if self.members.len() >= usize::from(MEMBERS_MAX) {
            return Err(NetlabError::Full);
        }
        let index = self.members.len();
        let k = usize::from(FIRST_MEMBER_BYTE) + index;
        let namespace = format!("{PREFIX}{}-{label}", self.tag);
        // In hex, so the name stays within an interface name's 15 bytes.
        let link = format!("{}m{index:x}", self.bridge);
        let ip = format!("{}.{k}", self.subnet);
        run(&["netns", "add", &namespace])?;
        // Recorded before it is wired, so a failure below still removes it.
        self.members.push(Member {
            label: label.to_string(),
            namespace: namespace.clone(),
            link: link.clone(),
            ip: ip.clone(),
        });
        run(&[
            "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
        ])?;
        run(&["link", "set", &link, "master", &self.bridge, "up"])?;
        run(&[
            "-n",
            &namespace,
            "addr",
            "add",
            &format!("{ip}/24"),
            "dev",
            "eth0",
        ])?;
        run(&["-n", &namespace, "link", "set", "eth0", "up"])?;
        run(&["-n", &namespace, "link", "set", "lo", "up"])?;
        Ok(ip)
    }

    fn member(&self, label: &str) -> Result<&Member, NetlabError> {
        self.members
            .iter()
            .find(|m| m.label == label)
            .ok_or_else(|| NetlabError::NoSuchMember(label.to_string()))
    }

    /// The address of member `label`.
    pub fn ip(&self, label: &str) -> Result<String, NetlabError> {
        Ok(self.member(label)?.ip.clone())
    }

    /// The namespace a member's processes run in (`ip netns exec NS ...`).
    pub fn namespace(&self, label: &str) -> Result<String, NetlabError> {
        Ok(self.member(label)?.namespace.clone())
    }

    /// Cuts member `label` off from everyone: its link goes down, and
    /// whatever it sends or is sent is lost until [`Self::heal`].
    pub fn cut(&self, label: &str) -> Result<(), NetlabError> {
        run(&["link", "set", &self.member(label)?.link, "down"]).map(drop)
    }

    /// Puts member `label` back on the bridge.
    pub fn heal(&self, label: &str) -> Result<(), NetlabError> {
        run(&["link", "set", &self.member(label)?.link, "up"]).map(drop)
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // A namespace's removal takes its veth pair with it.
        for m in &self.members {
            let _ = run(&["netns", "del", &m.namespace]);
        }
        let _ = run(&["link", "del", &self.bridge]);
        if self.forward_rule {
            let _ = run_program("iptables", &forward_rule_args("-D", &self.bridge));
        }
    }
}

fn forward_rule_args<'a>(op: &'a str, bridge: &'a str) -> [&'a str; 9] {
    [
        op, "FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT", "-w",
    ]
}

/// A `10.a.b` no interface on this machine has an address in, chosen from
/// the owner's pid and lab count so parallel labs start apart.
fn free_subnet(pid: u32, n: u32) -> Result<String, NetlabError> {
    let taken = run(&["-o", "-4", "addr", "show"])?;
    free_subnet_in(&taken, pid, n).ok_or(NetlabError::NoSubnet)
}

/// A `10.a.b` (a in 150..250) that no line of `ip -o -4 addr show`
/// output `taken` has an address in, starting from one the pid and count
/// pick.
pub(crate) fn free_subnet_in(taken: &str, pid: u32, n: u32) -> Option<String> {
    let start = pid.wrapping_mul(31).wrapping_add(n.wrapping_mul(7));
    (0..SUBNET_ATTEMPTS_MAX).find_map(|attempt| {
        let v = start.wrapping_add(attempt) % (100 * 250);
        let subnet = format!("10.{}.{}", 150 + v / 250, v % 250 + 1);
        (!taken.contains(&format!("inet {subnet}."))).then_some(subnet)
    })
}

/// Removes the bridges and namespaces of labs whose owner process is gone
/// (killed before its drop ran).
fn sweep_abandoned() {
    let owner_gone = |tag: &str| {
        tag.split_once('x')
            .and_then(|(pid, _)| u32::from_str_radix(pid, 16).ok())
            .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(list) = run(&["netns", "list"]) {
        for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if let Some(rest) = ns.strip_prefix(PREFIX) {
                if rest.split_once('-').is_some_and(|(tag, _)| owner_gone(tag)) {
                    let _ = run(&["netns", "del", ns]);
                }
            }
        }
    }
    if let Ok(links) = run(&["-o", "link", "show", "type", "bridge"]) {
        for name in links.lines().filter_map(|l| l.split(": ").nth(1)) {
            if let Some(tag) = name.strip_prefix(PREFIX) {
                if owner_gone(tag) {
                    let _ = run(&["link", "del", name]);
                    let _ = run_program("iptables", &forward_rule_args("-D", name));
                }
            }
        }
    }
}
