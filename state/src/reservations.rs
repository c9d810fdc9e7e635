//! The replicated admin reservation table (`CreateReservation`,
//! `DeleteReservation`): windows on hosts for some users or accounts, or
//! for no one (maintenance). Validated here, in `apply` (deterministic),
//! and refused whole with a sentence naming what is wrong. The scheduler
//! reads them from the snapshot (`berth_scheduler::resv`); `apply`'s
//! re-check of a placement respects them too ([`SmState::reservation_blocks`]).

use berth_scheduler::resv::{self, AdminReservation};
use berth_scheduler::{JobSpec, PendingJob};

use super::SmState;
use crate::command::Response;
use crate::policy::POLICY_NAME_BYTES_MAX;

/// Reservations kept at most, ended ones included (delete those).
pub const RESERVATIONS_MAX: usize = 1_000;
/// Hosts, users and accounts one reservation may name, each.
pub const RESERVATION_NAMES_MAX: usize = 10_000;

impl SmState {
    pub(super) fn create_reservation(
        &mut self,
        reservation: &AdminReservation,
        now_ms: u64,
    ) -> Response {
        if let Err(reason) = self.validate_reservation(reservation, now_ms) {
            return Response::Rejected { reason };
        }
        let mut r = reservation.clone();
        r.hosts.sort();
        // Jobs already running on its hosts go on: a reservation keeps new
        // work off, as in Slurm; the admin drains or cancels the rest.
        self.data.policy.reservations.insert(r.name.clone(), r);
        Response::PolicySet
    }

    pub(super) fn delete_reservation(&mut self, name: &str) -> Response {
        if self.data.policy.reservations.remove(name).is_none() {
            return Response::Rejected {
                reason: format!("no reservation named {name}"),
            };
        }
        Response::PolicySet
    }

    fn validate_reservation(&self, r: &AdminReservation, now_ms: u64) -> Result<(), String> {
        name_ok("reservation", &r.name)?;
        if self.data.policy.reservations.contains_key(&r.name) {
            return Err(format!("reservation {} already exists", r.name));
        }
        if self.data.policy.reservations.len() >= RESERVATIONS_MAX {
            return Err(format!(
                "there are already {RESERVATIONS_MAX} reservations; delete ended ones first"
            ));
        }
        if r.hosts.is_empty() {
            return Err(format!("reservation {}: no hosts given", r.name));
        }
        for (what, list) in [
            ("hosts", &r.hosts),
            ("users", &r.users),
            ("accounts", &r.accounts),
        ] {
            if list.len() > RESERVATION_NAMES_MAX {
                return Err(format!(
                    "reservation {}: more than {RESERVATION_NAMES_MAX} {what}",
                    r.name
                ));
            }
            let mut sorted: Vec<&String> = list.iter().collect();
            sorted.sort();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                return Err(format!("reservation {}: {} listed twice", r.name, w[0]));
            }
        }
        for host in &r.hosts {
            if !self.data.hosts.contains_key(host) {
                return Err(format!("reservation {}: no host named {host}", r.name));
            }
        }
        for user in &r.users {
            name_ok("user", user)?;
        }
        for account in &r.accounts {
            name_ok("account", account)?;
            if !self.data.policy.accounts.is_empty()
                && !self.data.policy.accounts.contains_key(account)
            {
                return Err(format!(
                    "reservation {}: no account named {account}",
                    r.name
                ));
            }
        }
        if r.end_ms <= r.start_ms {
            return Err(format!(
                "reservation {}: the window ends ({} ms) before it starts ({} ms)",
                r.name, r.end_ms, r.start_ms
            ));
        }
        if r.end_ms <= now_ms {
            return Err(format!(
                "reservation {}: the window is already over (it ended at {} ms, now is {now_ms} ms)",
                r.name, r.end_ms
            ));
        }
        // Slurm refuses two reservations on one node at once (without its
        // OVERLAP flag, which Berth does not offer).
        for other in self.data.policy.reservations.values() {
            if other.end_ms <= now_ms || !other.overlaps(r.start_ms, Some(r.end_ms)) {
                continue;
            }
            if let Some(h) = r.hosts.iter().find(|h| other.hosts.contains(h)) {
                return Err(format!(
                    "reservation {} overlaps reservation {} on host {h}",
                    r.name, other.name
                ));
            }
        }
        Ok(())
    }

    /// The submit check of `--reservation` (with the account resolved):
    /// it must exist, not have ended, and admit the job.
    pub(super) fn check_reservation(&self, spec: &JobSpec, now_ms: u64) -> Result<(), String> {
        if spec.reservation.is_empty() {
            return Ok(());
        }
        let job = PendingJob {
            user: spec.user.clone(),
            reservation: spec.reservation.clone(),
            ..PendingJob::default()
        };
        let all = self.reservation_list();
        resv::check_submit(&job, &spec.account, &all, now_ms).map_err(|e| e.to_string())
    }

    /// Every reservation, as the scheduler's snapshot carries them.
    pub fn reservation_list(&self) -> Vec<AdminReservation> {
        self.data.policy.reservations.values().cloned().collect()
    }

    /// `apply`'s re-check of a placement against the reservations
    /// (invariant 3): a job outside a window may be placed on its host only
    /// if, by its time limit, it ends before the window starts; a job
    /// naming a reservation only on its hosts, inside its open window.
    /// `Some(why)` when the placement must be dropped.
    pub(super) fn reservation_blocks(
        &self,
        spec: &JobSpec,
        host: &str,
        now_ms: u64,
    ) -> Option<String> {
        let until_ms = (spec.time_limit_s > 0)
            .then(|| now_ms.saturating_add(spec.time_limit_s.saturating_mul(1000)));
        let own = (!spec.reservation.is_empty())
            .then(|| self.data.policy.reservations.get(&spec.reservation));
        if let Some(own) = own {
            let Some(own) = own else {
                return Some(format!("reservation {} does not exist", spec.reservation));
            };
            if !own.hosts.iter().any(|h| h == host) {
                return Some(format!("{host} is not in reservation {}", own.name));
            }
            if !(own.start_ms <= now_ms && now_ms < own.end_ms) {
                return Some(format!("reservation {} is not open", own.name));
            }
            if !own.admits(&spec.user, &spec.account) {
                return Some(format!("reservation {} does not admit the job", own.name));
            }
        }
        self.data
            .policy
            .reservations
            .values()
            .filter(|r| Some(r.name.as_str()) != own.flatten().map(|o| o.name.as_str()))
            .filter(|r| r.end_ms > now_ms && r.hosts.iter().any(|h| h == host))
            .find(|r| r.overlaps(now_ms, until_ms))
            .map(|r| format!("{host} is reserved by {} from {} ms", r.name, r.start_ms))
    }
}

/// A reservation, user or account name: 1 to 64 bytes, no whitespace,
/// comma or control character (the policy tables' rule).
fn name_ok(kind: &str, name: &str) -> Result<(), String> {
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
}
