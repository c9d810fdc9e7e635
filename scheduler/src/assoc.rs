//! Accounts and users: Slurm's association tree (root → accounts → users),
//! with shares for fair share, allowed QOS, limits, and the admin-set
//! priority inputs of the queue model (account and user priority).

use serde::{Deserialize, Serialize};

use crate::qos::Limits;

/// The root of the association tree; an account without a parent hangs here.
pub const ROOT_ACCOUNT: &str = "root";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Account {
    pub name: String,
    /// The parent account; [`ROOT_ACCOUNT`] for a top-level one.
    pub parent: String,
    /// Fair-share weight among its siblings (Slurm's `Fairshare=`); also
    /// the weight that divides its served fraction for the least-served
    /// ordering of ties.
    pub shares: u32,
    pub users: Vec<String>,
    /// QOS its jobs may use; the first is the default. Empty: `normal` only.
    pub qos: Vec<String>,
    /// Admin-set priority input added to its jobs' priority.
    pub priority: i64,
    /// The highest priority its users may ask for with a negative nice.
    pub max_priority: i64,
    pub limits: Limits,
    /// Accounts whose preemptible jobs this account's jobs may preempt by
    /// priority (besides its own); empty by default.
    pub preempt: Vec<String>,
}

impl Default for Account {
    fn default() -> Self {
        Account {
            name: String::new(),
            parent: ROOT_ACCOUNT.to_string(),
            shares: 1,
            users: Vec::new(),
            qos: Vec::new(),
            priority: 0,
            max_priority: 0,
            limits: Limits::default(),
            preempt: Vec::new(),
        }
    }
}

/// A user's own settings: the admin-set user priority input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UserRecord {
    pub name: String,
    pub priority: i64,
    /// The account used when a job names none; empty = the first account
    /// that lists the user.
    pub default_account: String,
}
