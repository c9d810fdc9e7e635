//! The site's policy objects as replicated state: QOS, accounts (the
//! association tree), users and partitions, plus the decayed usage fair
//! share and the usage limits read. Changed only by `SetPolicy` commands;
//! each change is validated in `apply` (deterministic) and refused whole
//! when it would leave the tables inconsistent.

use std::collections::{BTreeMap, BTreeSet};

use berth_scheduler::assoc::ROOT_ACCOUNT;
use berth_scheduler::qos::NORMAL_QOS;
use berth_scheduler::usage::Usage;
use berth_scheduler::{Account, AdminReservation, Partition, Qos, UserRecord};
use serde::{Deserialize, Serialize};

/// Longest policy object name accepted, in bytes.
pub const POLICY_NAME_BYTES_MAX: usize = 64;
/// Most objects of each kind (QOS, accounts, users, partitions).
pub const POLICY_OBJECTS_MAX: usize = 100_000;

/// A partition and the hosts it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PartitionRecord {
    pub partition: Partition,
    /// Host names; empty means every host.
    pub hosts: Vec<String>,
}

/// Every policy object, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyTables {
    pub qos: BTreeMap<String, Qos>,
    pub accounts: BTreeMap<String, Account>,
    pub users: BTreeMap<String, UserRecord>,
    pub partitions: BTreeMap<String, PartitionRecord>,
    /// Admin reservations by name, ended ones included until deleted
    /// (a job naming an ended one is told so). Changed only by
    /// `CreateReservation` / `DeleteReservation`.
    pub reservations: BTreeMap<String, AdminReservation>,
    /// Fair-share usage half-life (Slurm's `PriorityDecayHalfLife`); 0 =
    /// no decay; unset = [`DECAY_HALF_LIFE_S_DEFAULT`]. Written only when
    /// set, so stores that never set it read and write as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decay_half_life_s: Option<u64>,
}

/// Slurm's `PriorityDecayHalfLife` default: 7 days.
pub const DECAY_HALF_LIFE_S_DEFAULT: u64 = 7 * 86_400;
/// Longest half-life accepted: ten years (Slurm takes any; beyond this the
/// decay is nil anyway).
pub const DECAY_HALF_LIFE_S_MAX: u64 = 10 * 365 * 86_400;

/// Decayed usage and the time it was last brought up to date.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageState {
    pub usage: Usage,
    pub at_ms: u64,
}

/// One change to the policy tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PolicyChange {
    UpsertQos(Qos),
    DeleteQos(String),
    UpsertAccount(Account),
    DeleteAccount(String),
    UpsertUser(UserRecord),
    UpsertPartition(PartitionRecord),
    DeletePartition(String),
    /// Sets the usage half-life (`PriorityDecayHalfLife`, seconds; 0 = no
    /// decay). Added in command version 15.
    SetDecayHalfLife(u64),
}

impl PolicyTables {
    /// True when the site has defined nothing: jobs then run without
    /// associations, limits or partitions, and the checks are skipped.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
            && self.partitions.is_empty()
            && self
                .qos
                .values()
                .all(|q| q.name == NORMAL_QOS && *q == Qos::default())
    }

    /// Whether some QOS or account limits how many jobs may be submitted
    /// (only then must a submit count the jobs already there).
    pub fn has_submit_limits(&self) -> bool {
        self.qos
            .values()
            .map(|q| &q.limits)
            .chain(self.accounts.values().map(|a| &a.limits))
            .any(|l| l.grp_submit_jobs.is_some() || l.max_submit_jobs_per_user.is_some())
    }

    /// Whether `name` is a QOS (`normal` always is).
    pub fn has_qos(&self, name: &str) -> bool {
        name == NORMAL_QOS || self.qos.contains_key(name)
    }

    /// Checks `change` against the tables; `Err` says what is wrong.
    pub fn validate(&self, change: &PolicyChange) -> Result<(), String> {
        let name_ok = |kind: &str, name: &str| -> Result<(), String> {
            if name.is_empty() {
                return Err(format!("{kind} name is empty"));
            }
            if name.len() > POLICY_NAME_BYTES_MAX {
                return Err(format!(
                    "{kind} name is longer than {POLICY_NAME_BYTES_MAX} bytes"
                ));
            }
            if name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ',')
            {
                return Err(format!(
                    "{kind} name {name:?} has whitespace, a comma or a control character"
                ));
            }
            Ok(())
        };
        let room = |kind: &str, len: usize, exists: bool| -> Result<(), String> {
            if !exists && len >= POLICY_OBJECTS_MAX {
                return Err(format!("there are already {POLICY_OBJECTS_MAX} {kind}s"));
            }
            Ok(())
        };
        match change {
            PolicyChange::UpsertQos(q) => {
                name_ok("QOS", &q.name)?;
                room("QOS", self.qos.len(), self.qos.contains_key(&q.name))?;
                if !(q.usage_factor.is_finite() && q.usage_factor >= 0.0) {
                    return Err(format!(
                        "QOS {}: usage_factor must be a number >= 0",
                        q.name
                    ));
                }
                if let Some(t) = q.usage_threshold {
                    if !(0.0..=1.0).contains(&t) {
                        return Err(format!(
                            "QOS {}: usage_threshold must be between 0 and 1",
                            q.name
                        ));
                    }
                }
                for p in &q.preempt {
                    if !self.has_qos(p) && *p != q.name {
                        return Err(format!("QOS {}: preempts unknown QOS {p}", q.name));
                    }
                }
                if q.flags.relative {
                    // Its limits are shares of its partition's resources,
                    // which only mean something for a single partition.
                    let users: Vec<&str> = self
                        .partitions_using_qos(&q.name)
                        .map(|p| p.partition.name.as_str())
                        .collect();
                    if users.len() > 1 {
                        return Err(format!(
                            "QOS {}: cannot be Relative, it is in use by partitions {} \
                             (a Relative QOS may be the QOS of one partition only)",
                            q.name,
                            users.join(", ")
                        ));
                    }
                }
                Ok(())
            }
            PolicyChange::DeleteQos(name) => {
                if !self.qos.contains_key(name) {
                    return Err(format!("no QOS named {name}"));
                }
                if let Some(a) = self.accounts.values().find(|a| a.qos.contains(name)) {
                    return Err(format!(
                        "QOS {name} is allowed on account {}; remove it there first",
                        a.name
                    ));
                }
                if let Some(p) = self.partitions.values().find(|p| p.partition.qos == *name) {
                    return Err(format!(
                        "QOS {name} is the QOS of partition {}",
                        p.partition.name
                    ));
                }
                Ok(())
            }
            PolicyChange::UpsertAccount(a) => {
                name_ok("account", &a.name)?;
                if a.name == ROOT_ACCOUNT {
                    return Err("the root account is implicit and cannot be defined".into());
                }
                room(
                    "account",
                    self.accounts.len(),
                    self.accounts.contains_key(&a.name),
                )?;
                if a.parent != ROOT_ACCOUNT && !a.parent.is_empty() {
                    if !self.accounts.contains_key(&a.parent) {
                        return Err(format!(
                            "account {}: no parent account {}",
                            a.name, a.parent
                        ));
                    }
                    // The new parent may not be the account or below it.
                    let mut up = a.parent.as_str();
                    for _ in 0..=self.accounts.len() {
                        if up == a.name {
                            return Err(format!(
                                "account {}: parent {} would make a cycle",
                                a.name, a.parent
                            ));
                        }
                        match self.accounts.get(up) {
                            Some(p) if p.parent != ROOT_ACCOUNT && !p.parent.is_empty() => {
                                up = p.parent.as_str()
                            }
                            _ => break,
                        }
                    }
                }
                for q in &a.qos {
                    if !self.has_qos(q) {
                        return Err(format!("account {}: no QOS named {q}", a.name));
                    }
                }
                if !a.limits.min_tres_per_job.is_empty() {
                    return Err(format!(
                        "account {}: min_tres_per_job is a QOS limit, not an account's",
                        a.name
                    ));
                }
                for u in &a.users {
                    name_ok("user", u)?;
                }
                self.check_account_preempt(a)
            }
            PolicyChange::DeleteAccount(name) => {
                if !self.accounts.contains_key(name) {
                    return Err(format!("no account named {name}"));
                }
                if let Some(c) = self.accounts.values().find(|c| c.parent == *name) {
                    return Err(format!("account {name} has child account {}", c.name));
                }
                Ok(())
            }
            PolicyChange::UpsertUser(u) => {
                name_ok("user", &u.name)?;
                room("user", self.users.len(), self.users.contains_key(&u.name))?;
                if !u.default_account.is_empty() {
                    match self.accounts.get(&u.default_account) {
                        Some(a) if a.users.contains(&u.name) => {}
                        Some(_) => {
                            return Err(format!(
                                "user {}: account {} does not list the user",
                                u.name, u.default_account
                            ))
                        }
                        None => {
                            return Err(format!(
                                "user {}: no account named {}",
                                u.name, u.default_account
                            ))
                        }
                    }
                }
                Ok(())
            }
            PolicyChange::UpsertPartition(p) => {
                name_ok("partition", &p.partition.name)?;
                room(
                    "partition",
                    self.partitions.len(),
                    self.partitions.contains_key(&p.partition.name),
                )?;
                if !p.partition.qos.is_empty() && !self.has_qos(&p.partition.qos) {
                    return Err(format!(
                        "partition {}: no QOS named {}",
                        p.partition.name, p.partition.qos
                    ));
                }
                let relative = self
                    .qos
                    .get(&p.partition.qos)
                    .is_some_and(|q| q.flags.relative);
                if relative {
                    // Re-upserting the partition that already has it is no
                    // second use.
                    if let Some(other) = self
                        .partitions_using_qos(&p.partition.qos)
                        .find(|o| o.partition.name != p.partition.name)
                    {
                        return Err(format!(
                            "partition {}: QOS {} is Relative and is in use by partition {} \
                             (a Relative QOS may be the QOS of one partition only)",
                            p.partition.name, p.partition.qos, other.partition.name
                        ));
                    }
                }
                if let (Some(lo), Some(hi)) = (p.partition.min_nodes, p.partition.max_nodes) {
                    if lo > hi {
                        return Err(format!(
                            "partition {}: min_nodes {lo} > max_nodes {hi}",
                            p.partition.name
                        ));
                    }
                }
                Ok(())
            }
            PolicyChange::DeletePartition(name) => {
                if !self.partitions.contains_key(name) {
                    return Err(format!("no partition named {name}"));
                }
                Ok(())
            }
            PolicyChange::SetDecayHalfLife(s) if *s > DECAY_HALF_LIFE_S_MAX => Err(format!(
                "PriorityDecayHalfLife {s} s is above the most accepted, {DECAY_HALF_LIFE_S_MAX} s"
            )),
            PolicyChange::SetDecayHalfLife(_) => Ok(()),
        }
    }

    /// The partitions whose partition QOS is `qos`, in name order.
    fn partitions_using_qos<'a>(
        &'a self,
        qos: &'a str,
    ) -> impl Iterator<Item = &'a PartitionRecord> + 'a {
        self.partitions
            .values()
            .filter(move |p| p.partition.qos == qos)
    }

    /// An account's preempt list names other accounts that exist, each
    /// once. Its own jobs need no entry (within an account the priority
    /// rule applies without a list), so naming itself is a mistake worth
    /// saying; the bound on the list is the number of accounts.
    fn check_account_preempt(&self, a: &Account) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for p in &a.preempt {
            if *p == a.name {
                return Err(format!(
                    "account {}: cannot list itself in preempt (its own jobs need no list)",
                    a.name
                ));
            }
            if !self.accounts.contains_key(p) {
                return Err(format!("account {}: preempts unknown account {p}", a.name));
            }
            if !seen.insert(p.as_str()) {
                return Err(format!("account {}: preempt lists {p} twice", a.name));
            }
        }
        Ok(())
    }

    /// Applies a validated change.
    pub fn apply(&mut self, change: &PolicyChange) {
        match change {
            PolicyChange::UpsertQos(q) => {
                self.qos.insert(q.name.clone(), q.clone());
            }
            PolicyChange::DeleteQos(n) => {
                self.qos.remove(n);
                // `normal` outlives its definition (it is implicit), so
                // lists that name it still mean something.
                if n != NORMAL_QOS {
                    for q in self.qos.values_mut() {
                        q.preempt.retain(|p| p != n);
                    }
                }
            }
            PolicyChange::UpsertAccount(a) => {
                let mut a = a.clone();
                if a.parent.is_empty() {
                    a.parent = ROOT_ACCOUNT.to_string();
                }
                self.accounts.insert(a.name.clone(), a);
            }
            PolicyChange::DeleteAccount(n) => {
                self.accounts.remove(n);
                // A later account of the same name must not inherit the
                // right to be preempted (the reference: deleted groups
                // leave every list).
                for a in self.accounts.values_mut() {
                    a.preempt.retain(|p| p != n);
                }
            }
            PolicyChange::UpsertUser(u) => {
                self.users.insert(u.name.clone(), u.clone());
            }
            PolicyChange::UpsertPartition(p) => {
                let mut p = p.clone();
                p.hosts.sort();
                p.hosts.dedup();
                // One default partition: the newest one that says so.
                if p.partition.default {
                    for other in self.partitions.values_mut() {
                        other.partition.default = false;
                    }
                }
                self.partitions.insert(p.partition.name.clone(), p);
            }
            PolicyChange::DeletePartition(n) => {
                self.partitions.remove(n);
            }
            PolicyChange::SetDecayHalfLife(s) => {
                self.decay_half_life_s = Some(*s);
            }
        }
    }

    /// The usage half-life in force, in seconds (0 = no decay).
    pub fn decay_half_life_s(&self) -> u64 {
        self.decay_half_life_s.unwrap_or(DECAY_HALF_LIFE_S_DEFAULT)
    }

    /// The partitions `host` belongs to.
    pub fn partitions_of_host(&self, host: &str) -> Vec<String> {
        self.partitions
            .values()
            .filter(|p| p.hosts.is_empty() || p.hosts.iter().any(|h| h == host))
            .map(|p| p.partition.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_would_break_the_tables() {
        let mut t = PolicyTables::default();
        let team = Qos::named("team");
        assert_eq!(t.validate(&PolicyChange::UpsertQos(team.clone())), Ok(()));
        t.apply(&PolicyChange::UpsertQos(team));
        let physics = Account {
            name: "physics".into(),
            qos: vec!["team".into()],
            ..Account::default()
        };
        t.apply(&PolicyChange::UpsertAccount(physics.clone()));
        assert_eq!(
            t.validate(&PolicyChange::DeleteQos("team".into())),
            Err("QOS team is allowed on account physics; remove it there first".into())
        );
        let child = Account {
            name: "hep".into(),
            parent: "physics".into(),
            ..Account::default()
        };
        t.apply(&PolicyChange::UpsertAccount(child));
        let cycle = Account {
            parent: "hep".into(),
            ..physics
        };
        assert_eq!(
            t.validate(&PolicyChange::UpsertAccount(cycle)),
            Err("account physics: parent hep would make a cycle".into())
        );
        let bad_qos = Account {
            name: "chem".into(),
            qos: vec!["gold".into()],
            ..Account::default()
        };
        assert_eq!(
            t.validate(&PolicyChange::UpsertAccount(bad_qos)),
            Err("account chem: no QOS named gold".into())
        );
        assert_eq!(
            t.validate(&PolicyChange::DeleteAccount("physics".into())),
            Err("account physics has child account hep".into())
        );
        assert!(t
            .validate(&PolicyChange::UpsertQos(Qos::named("a b")))
            .is_err());
        assert!(!t.is_empty());
        assert!(PolicyTables::default().is_empty());
    }

    fn partition(name: &str, qos: &str) -> PolicyChange {
        let mut p = PartitionRecord::default();
        p.partition.name = name.into();
        p.partition.qos = qos.into();
        PolicyChange::UpsertPartition(p)
    }

    fn relative(name: &str) -> Qos {
        let mut q = Qos::named(name);
        q.flags.relative = true;
        q
    }

    #[test]
    fn a_relative_qos_is_the_qos_of_one_partition_only() {
        let mut t = PolicyTables::default();
        upsert(&mut t, PolicyChange::UpsertQos(relative("rel")));
        upsert(&mut t, partition("a", "rel"));
        // The partition that has it may be changed again.
        upsert(&mut t, partition("a", "rel"));
        let before = t.clone();
        assert_eq!(
            t.validate(&partition("b", "rel")),
            Err(
                "partition b: QOS rel is Relative and is in use by partition a \
                 (a Relative QOS may be the QOS of one partition only)"
                    .into()
            )
        );
        assert_eq!(t, before, "a refusal changes nothing");
        // A plain QOS may serve many partitions, and then cannot turn
        // Relative.
        upsert(&mut t, PolicyChange::UpsertQos(Qos::named("shared")));
        upsert(&mut t, partition("b", "shared"));
        upsert(&mut t, partition("c", "shared"));
        assert_eq!(
            t.validate(&PolicyChange::UpsertQos(relative("shared"))),
            Err(
                "QOS shared: cannot be Relative, it is in use by partitions b, c \
                 (a Relative QOS may be the QOS of one partition only)"
                    .into()
            )
        );
        // With one partition left on it, it may.
        upsert(&mut t, partition("c", ""));
        upsert(&mut t, PolicyChange::UpsertQos(relative("shared")));
        assert_eq!(
            t.validate(&partition("c", "shared")),
            Err(
                "partition c: QOS shared is Relative and is in use by partition b \
                 (a Relative QOS may be the QOS of one partition only)"
                    .into()
            )
        );
    }

    fn account(name: &str, preempt: &[&str]) -> Account {
        Account {
            name: name.into(),
            preempt: preempt.iter().map(|p| p.to_string()).collect(),
            ..Account::default()
        }
    }

    fn upsert(t: &mut PolicyTables, change: PolicyChange) {
        assert_eq!(t.validate(&change), Ok(()));
        t.apply(&change);
    }

    fn preempt_of(t: &PolicyTables, name: &str) -> Vec<String> {
        t.accounts[name].preempt.clone()
    }

    #[test]
    fn account_preempt_lists_name_other_existing_accounts() {
        let mut t = PolicyTables::default();
        upsert(&mut t, PolicyChange::UpsertAccount(account("B", &[])));
        upsert(&mut t, PolicyChange::UpsertAccount(account("C", &[])));
        let refused = |t: &PolicyTables, preempt: &[&str]| {
            t.validate(&PolicyChange::UpsertAccount(account("A", preempt)))
        };
        assert_eq!(
            refused(&t, &["B", "physics"]),
            Err("account A: preempts unknown account physics".into())
        );
        assert_eq!(
            refused(&t, &["root"]),
            Err("account A: preempts unknown account root".into())
        );
        assert_eq!(
            refused(&t, &["A"]),
            Err("account A: cannot list itself in preempt (its own jobs need no list)".into())
        );
        assert_eq!(
            refused(&t, &["C", "B", "C"]),
            Err("account A: preempt lists C twice".into())
        );
        upsert(
            &mut t,
            PolicyChange::UpsertAccount(account("A", &["B", "C"])),
        );
        assert_eq!(preempt_of(&t, "A"), ["B", "C"]);
        // Lists may point both ways: each side opts in for itself.
        upsert(&mut t, PolicyChange::UpsertAccount(account("B", &["A"])));
        assert_eq!(preempt_of(&t, "B"), ["A"]);
        // An existing account that turns bad is refused too, and kept.
        assert_eq!(
            t.validate(&PolicyChange::UpsertAccount(account("B", &["B"]))),
            Err("account B: cannot list itself in preempt (its own jobs need no list)".into())
        );
    }

    #[test]
    fn deleting_an_account_takes_it_off_every_preempt_list() {
        let mut t = PolicyTables::default();
        upsert(&mut t, PolicyChange::UpsertAccount(account("C", &[])));
        upsert(&mut t, PolicyChange::UpsertAccount(account("B", &["C"])));
        upsert(
            &mut t,
            PolicyChange::UpsertAccount(account("A", &["B", "C"])),
        );
        upsert(&mut t, PolicyChange::DeleteAccount("C".into()));
        assert_eq!(preempt_of(&t, "A"), ["B"]);
        assert_eq!(preempt_of(&t, "B"), Vec::<String>::new());
        // A new account of the old name is on nobody's list.
        upsert(&mut t, PolicyChange::UpsertAccount(account("C", &[])));
        assert_eq!(preempt_of(&t, "A"), ["B"]);
        assert_eq!(preempt_of(&t, "B"), Vec::<String>::new());
        upsert(&mut t, PolicyChange::DeleteAccount("B".into()));
        assert_eq!(preempt_of(&t, "A"), Vec::<String>::new());
        assert_eq!(
            t.accounts.keys().collect::<Vec<_>>(),
            ["A", "C"],
            "nothing else deleted"
        );
    }

    #[test]
    fn deleting_a_qos_takes_it_off_every_preempt_list() {
        let qos = |name: &str, preempt: &[&str]| Qos {
            preempt: preempt.iter().map(|p| p.to_string()).collect(),
            ..Qos::named(name)
        };
        let preempt_of = |t: &PolicyTables, name: &str| t.qos[name].preempt.clone();
        let mut t = PolicyTables::default();
        upsert(&mut t, PolicyChange::UpsertQos(qos("low", &[])));
        upsert(&mut t, PolicyChange::UpsertQos(qos("normal", &[])));
        upsert(
            &mut t,
            PolicyChange::UpsertQos(qos("high", &["low", "normal", "high"])),
        );
        upsert(&mut t, PolicyChange::UpsertQos(qos("mid", &["low"])));
        upsert(&mut t, PolicyChange::DeleteQos("low".into()));
        assert_eq!(preempt_of(&t, "high"), ["normal", "high"]);
        assert_eq!(preempt_of(&t, "mid"), Vec::<String>::new());
        // `normal` stays a QOS once its definition is deleted, so lists
        // keep naming it.
        upsert(&mut t, PolicyChange::DeleteQos("normal".into()));
        assert_eq!(preempt_of(&t, "high"), ["normal", "high"]);
        upsert(&mut t, PolicyChange::DeleteQos("high".into()));
        assert_eq!(t.qos.keys().collect::<Vec<_>>(), ["mid"]);
    }
}
