//! Name lookups over a snapshot's policy objects, built once per pass:
//! QOS, accounts (with their ancestors), users and partitions, and how a
//! job's unset fields resolve (default account, default QOS, default
//! partition, default time limit).

use crate::assoc::{Account, UserRecord, ROOT_ACCOUNT};
use crate::fxhash::FxMap;
use crate::model::Host;
use crate::partition::{Partition, IMPLICIT_PARTITION};
use crate::pass::{PendingJob, Snapshot};
use crate::qos::{Qos, NORMAL_QOS};

/// Bound on the depth of the account tree, so a cycle in bad input cannot
/// loop forever.
pub const ACCOUNT_DEPTH_MAX: usize = 32;

pub struct Catalog<'a> {
    qos: FxMap<&'a str, &'a Qos>,
    /// Used when the snapshot defines no QOS named `normal`.
    normal: Qos,
    accounts: FxMap<&'a str, &'a Account>,
    /// user -> the accounts that list them, in snapshot order.
    user_accounts: FxMap<&'a str, Vec<&'a Account>>,
    users: FxMap<&'a str, &'a UserRecord>,
    partitions: FxMap<&'a str, &'a Partition>,
    default_partition: Option<&'a Partition>,
    /// True when the snapshot defines partitions: hosts then serve only
    /// the partitions they list.
    pub partitioned: bool,
    /// True when the snapshot defines accounts: every job then needs one.
    pub has_accounts: bool,
    /// The highest QOS priority (normalises the QOS factor); may be
    /// negative when every QOS is.
    pub qos_priority_max: i64,
    /// The highest partition `priority_job_factor`.
    pub partition_factor_max: u32,
}

impl<'a> Catalog<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Catalog<'a> {
        let qos: FxMap<&str, &Qos> = snapshot.qos.iter().map(|q| (q.name.as_str(), q)).collect();
        let accounts: FxMap<&str, &Account> = snapshot
            .accounts
            .iter()
            .map(|a| (a.name.as_str(), a))
            .collect();
        let mut user_accounts: FxMap<&str, Vec<&Account>> = FxMap::default();
        for a in &snapshot.accounts {
            for u in &a.users {
                user_accounts.entry(u.as_str()).or_default().push(a);
            }
        }
        let partitions: FxMap<&str, &Partition> = snapshot
            .partitions
            .iter()
            .map(|p| (p.name.as_str(), p))
            .collect();
        let default_partition = snapshot
            .partitions
            .iter()
            .find(|p| p.default)
            .or(snapshot.partitions.first());
        Catalog {
            qos_priority_max: snapshot.qos.iter().map(|q| q.priority).max().unwrap_or(0),
            partition_factor_max: snapshot
                .partitions
                .iter()
                .map(|p| p.priority_job_factor)
                .max()
                .unwrap_or(0),
            qos,
            normal: Qos::default(),
            accounts,
            user_accounts,
            users: snapshot
                .users
                .iter()
                .map(|u| (u.name.as_str(), u))
                .collect(),
            partitions,
            default_partition,
            partitioned: !snapshot.partitions.is_empty(),
            has_accounts: !snapshot.accounts.is_empty(),
        }
    }

    pub fn qos(&self, name: &str) -> Option<&Qos> {
        match self.qos.get(name) {
            Some(q) => Some(q),
            None if name == NORMAL_QOS => Some(&self.normal),
            None => None,
        }
    }

    pub fn account(&self, name: &str) -> Option<&'a Account> {
        self.accounts.get(name).copied()
    }

    pub fn user(&self, name: &str) -> Option<&'a UserRecord> {
        self.users.get(name).copied()
    }

    pub fn partition(&self, name: &str) -> Option<&'a Partition> {
        self.partitions.get(name).copied()
    }

    /// The partition of a job that names none: the one marked default,
    /// else the first configured; `None` when none is configured.
    pub fn default_partition(&self) -> Option<&'a Partition> {
        self.default_partition
    }

    /// Whether a job may name partition `name`: a configured one, or the
    /// implicit one when none is configured.
    pub fn partition_exists(&self, name: &str) -> bool {
        if self.partitioned {
            self.partition(name).is_some()
        } else {
            name == IMPLICIT_PARTITION
        }
    }

    /// The account a job of `user` runs under when it names `asked` ("" =
    /// the user's default). `None` when the user has no account at all.
    pub fn account_of(&self, user: &str, asked: &str) -> Option<&'a Account> {
        if !asked.is_empty() {
            return self.account(asked);
        }
        if let Some(default) = self
            .user(user)
            .map(|u| u.default_account.as_str())
            .filter(|d| !d.is_empty())
        {
            return self.account(default);
        }
        self.user_accounts
            .get(user)
            .and_then(|a| a.first().copied())
    }

    /// The QOS name a job runs under: the one it asked, else its account's
    /// default (the first it allows), else `normal`.
    pub fn qos_name_of<'j>(&self, job_qos: &'j str, account: Option<&'a Account>) -> &'j str
    where
        'a: 'j,
    {
        if !job_qos.is_empty() {
            return job_qos;
        }
        account
            .and_then(|a| a.qos.first())
            .map(String::as_str)
            .unwrap_or(NORMAL_QOS)
    }

    /// The account and its ancestors up to (not including) the root, the
    /// account itself first.
    pub fn lineage(&self, account: &'a str) -> Vec<&'a str> {
        let mut chain = Vec::new();
        let mut name = account;
        for _ in 0..ACCOUNT_DEPTH_MAX {
            if name.is_empty() || name == ROOT_ACCOUNT {
                break;
            }
            chain.push(name);
            match self.account(name) {
                Some(a) => name = a.parent.as_str(),
                None => break,
            }
        }
        chain
    }

    /// The partitions a job may run in, in its order of preference: its
    /// own list (the default partition when it names none), then those
    /// its alternatives name. Empty when the snapshot has no partitions
    /// (every host serves every job).
    pub fn partitions_of(&self, job: &PendingJob) -> Vec<&'a Partition> {
        if !self.partitioned {
            return Vec::new();
        }
        let mut list: Vec<&'a Partition> = if job.partitions.is_empty() {
            self.default_partition.into_iter().collect()
        } else {
            job.partitions
                .iter()
                .filter_map(|p| self.partition(p))
                .collect()
        };
        for name in job.path_partitions.iter().filter(|n| !n.is_empty()) {
            if let Some(p) = self.partition(name) {
                if !list.iter().any(|l| l.name == p.name) {
                    list.push(p);
                }
            }
        }
        list
    }

    /// Whether `job`'s resource path `path` may run in `partition`: an
    /// alternative that names a partition runs there alone; every other
    /// path runs in the job's own partitions (`None`: a site without
    /// partitions, where every path runs).
    pub fn runs_in(&self, job: &PendingJob, path: usize, partition: Option<&Partition>) -> bool {
        let own = job.path_partitions.get(path).map_or("", String::as_str);
        self.path_runs_in(&job.partitions, own, partition)
    }

    /// [`Catalog::runs_in`] from the job's partitions and the partition
    /// its path names ("" = none), for callers holding a spec rather than
    /// a [`PendingJob`].
    pub fn path_runs_in(
        &self,
        job_partitions: &[String],
        own: &str,
        partition: Option<&Partition>,
    ) -> bool {
        let Some(p) = partition else {
            return true;
        };
        if !own.is_empty() {
            return own == p.name;
        }
        if job_partitions.is_empty() {
            return self.default_partition.is_some_and(|d| d.name == p.name);
        }
        job_partitions.contains(&p.name)
    }

    /// Whether `host` serves `partition` (`None`: no partitions defined).
    pub fn host_in(&self, host: &Host, partition: Option<&Partition>) -> bool {
        match partition {
            None => true,
            Some(p) => host.partitions.contains(&p.name),
        }
    }
}
