//! Accrued usage for fair share and the usage-based limits (`GrpTRESMins`,
//! `GrpWall`): TRES-seconds and wall-seconds per account and per QOS,
//! decayed with a half-life (Slurm's `PriorityDecayHalfLife`). Pure: the
//! caller says how much time passed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::limits::per_host_tres;
use crate::model::Resources;
use crate::qos::{TresAmounts, TresKind};

/// Decayed usage of one account or QOS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UsageRecord {
    /// TRES-seconds, indexed by [`TresKind::index`], times the usage factor.
    pub tres_s: [f64; 5],
    /// Wall-clock seconds of its jobs (for `GrpWall`).
    pub wall_s: f64,
}

impl UsageRecord {
    /// Fair share's usage: CPU-seconds (Slurm's default billing TRES).
    pub fn billing(&self) -> f64 {
        self.tres_s[TresKind::Cpu.index()]
    }

    fn scale(&mut self, factor: f64) {
        for v in &mut self.tres_s {
            *v *= factor;
        }
        self.wall_s *= factor;
    }
}

/// All usage the scheduler reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub accounts: BTreeMap<String, UsageRecord>,
    pub qos: BTreeMap<String, UsageRecord>,
}

/// The factor usage keeps after `elapsed_s` with half-life `half_life_s`
/// (0 = no decay).
pub fn decay_factor(elapsed_s: f64, half_life_s: u64) -> f64 {
    if half_life_s == 0 || elapsed_s <= 0.0 {
        1.0
    } else {
        (-(elapsed_s / half_life_s as f64) * std::f64::consts::LN_2).exp()
    }
}

impl Usage {
    /// Decays every record by `elapsed_s`, except the QOS listed in
    /// `no_decay_qos` (Slurm's `NoDecay` flag; account usage always decays).
    pub fn decay(&mut self, elapsed_s: f64, half_life_s: u64, no_decay_qos: &[&str]) {
        let factor = decay_factor(elapsed_s, half_life_s);
        if factor == 1.0 {
            return;
        }
        for record in self.accounts.values_mut() {
            record.scale(factor);
        }
        for (name, record) in self.qos.iter_mut() {
            if !no_decay_qos.contains(&name.as_str()) {
                record.scale(factor);
            }
        }
    }

    /// Adds what a job holding `tres` for `elapsed_s` used, times
    /// `usage_factor`, to its account (and the account's ancestors, listed
    /// in `accounts`) and its QOS.
    pub fn accrue(
        &mut self,
        accounts: &[&str],
        qos: &str,
        tres: &TresAmounts,
        elapsed_s: f64,
        usage_factor: f64,
    ) {
        let mut add = UsageRecord::default();
        for kind in TresKind::ALL {
            add.tres_s[kind.index()] = tres.get(kind) as f64 * elapsed_s * usage_factor;
        }
        add.wall_s = elapsed_s;
        let apply = |record: &mut UsageRecord| {
            for (a, b) in record.tres_s.iter_mut().zip(add.tres_s) {
                *a += b;
            }
            record.wall_s += add.wall_s;
        };
        for account in accounts {
            apply(self.accounts.entry((*account).to_string()).or_default());
        }
        apply(self.qos.entry(qos.to_string()).or_default());
    }

    /// Charges `elapsed_s` of a run to the account lineage and QOS it runs
    /// under (`catalog` resolves the `user`'s `account` and `qos` as asked,
    /// "" for the defaults), times that QOS's usage factor: every one of
    /// its `hosts` hosts, each holding `per_host`. The one rule by which
    /// the cluster's state machine and the simulator charge a run.
    pub fn charge_run(&mut self, catalog: &Catalog<'_>, run: &RunCharge<'_>, elapsed_s: f64) {
        let account = catalog.account_of(run.user, run.account);
        let qos = catalog.qos_name_of(run.qos, account);
        let factor = catalog.qos(qos).map_or(1.0, |q| q.usage_factor);
        let lineage = account
            .map(|a| catalog.lineage(&a.name))
            .unwrap_or_default();
        let tres = per_host_tres(run.per_host, run.hosts);
        self.accrue(&lineage, qos, &tres, elapsed_s, factor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_life_halves() {
        assert!((decay_factor(3600.0, 3600) - 0.5).abs() < 1e-12);
        assert_eq!(decay_factor(10.0, 0), 1.0);
    }

    #[test]
    fn accrue_then_decay_except_no_decay_qos() {
        let mut usage = Usage::default();
        let mut tres = TresAmounts::default();
        tres.set(TresKind::Cpu, 4);
        usage.accrue(&["a", "root"], "q", &tres, 10.0, 2.0);
        assert_eq!(usage.accounts["a"].billing(), 80.0);
        assert_eq!(usage.accounts["root"].wall_s, 10.0);
        usage.decay(100.0, 100, &["q"]);
        assert_eq!(usage.accounts["a"].billing(), 40.0);
        assert_eq!(usage.qos["q"].billing(), 80.0);
    }
}

/// A run to charge: who asked for it, under what, and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct RunCharge<'a> {
    pub user: &'a str,
    /// As the job asked it; "" for the user's default.
    pub account: &'a str,
    /// As the job asked it; "" for the account's default.
    pub qos: &'a str,
    /// How many hosts it holds, each `per_host`.
    pub hosts: u64,
    pub per_host: Resources,
}
