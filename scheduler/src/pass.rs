//! One scheduling pass: `schedule(&Snapshot, &Policy, now_ms) -> Plan`.
//!
//! Jobs are considered in queue order (the order of `Snapshot::pending`,
//! which is submit order). A job starts when enough hosts have its
//! resources free now; a multi-host job is a gang and starts on all its
//! hosts at once or not at all; an exclusive job takes whole hosts.
//!
//! With `backfill` on (EASY backfill) the first `bf_reservations` jobs that
//! cannot start get a reservation: the earliest time enough hosts will be
//! free, computed from an availability profile of every host (running
//! jobs free their room at start + time limit). Jobs behind them start now
//! only if they fit around every reservation: they end before it, or they
//! use room it does not need. A job without a time limit cannot be known to
//! end, so it only gets room no reservation needs. Other blocked jobs wait
//! with `Priority`.
//!
//! With `backfill` off the pass is strict FIFO: the first job that cannot
//! start blocks every job behind it. In both, a job no set of hosts could
//! ever hold does not block the queue (`ReqNodeNotAvail`), nor does a held
//! one (`JobHeldUser`).
//!
//! Every host a job is placed on has passed [`fits`], the check `apply`
//! repeats (invariant 3).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::fit::fits;
use crate::model::{Host, HostState, JobId, Resources};
use crate::profile::Profile;
use crate::reason::Reason;

/// A pending job as the pass sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    pub id: JobId,
    /// What each of its hosts must provide.
    pub request: Resources,
    pub held: bool,
    /// Hosts it needs at once (a gang); 0 counts as 1.
    #[serde(default)]
    pub nodes: u32,
    /// Whole hosts: nothing else runs beside it.
    #[serde(default)]
    pub exclusive: bool,
    /// 0 = none.
    #[serde(default)]
    pub time_limit_s: u64,
    #[serde(default)]
    pub submit_ms: u64,
}

impl PendingJob {
    /// A single-host, shared job without a time limit.
    pub fn new(id: JobId, request: Resources) -> PendingJob {
        PendingJob {
            id,
            request,
            held: false,
            nodes: 1,
            exclusive: false,
            time_limit_s: 0,
            submit_ms: 0,
        }
    }

    fn hosts_needed(&self) -> usize {
        self.nodes.max(1) as usize
    }

    fn duration_ms(&self) -> Option<u64> {
        (self.time_limit_s > 0).then(|| self.time_limit_s.saturating_mul(1000))
    }
}

/// A running job as the pass sees it: where it holds room and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningJob {
    pub id: JobId,
    pub hosts: Vec<String>,
    /// What it holds on each of its hosts.
    pub per_host: Resources,
    /// Start + time limit; `None` when it has no limit (never known to end).
    pub end_ms: Option<u64>,
}

/// The state a pass reads: hosts (with what is allocated on them), the
/// pending jobs in queue order, and the running jobs with their end times.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub hosts: Vec<Host>,
    pub pending: Vec<PendingJob>,
    #[serde(default)]
    pub running: Vec<RunningJob>,
}

/// Knobs of the pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// At most this many jobs are examined per pass (Slurm's
    /// `default_queue_depth`): the bound on a pass's work.
    pub max_jobs_per_pass: usize,
    /// EASY backfill; `false` is strict FIFO.
    pub backfill: bool,
    /// How many blocked jobs, from the top of the queue, get a reservation.
    pub bf_reservations: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_jobs_per_pass: 10_000,
            backfill: true,
            bf_reservations: 1,
        }
    }
}

/// One job placed on one host: what the live state machine applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub job_id: JobId,
    pub host: String,
    /// What it takes on the host (the whole host for an exclusive job).
    pub resources: Resources,
}

/// A multi-host job (a gang) placed on all its hosts at once. Kept apart
/// from [`Placement`] because the state machine holds one allocation per
/// job: the live leader proposes only `starts`, and the snapshot it builds
/// asks for one host per job, so its plans never hold a gang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangPlacement {
    pub job_id: JobId,
    /// In name order.
    pub hosts: Vec<String>,
    /// What it takes on each host.
    pub resources: Resources,
}

/// Room promised to a blocked job: where and from when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub job_id: JobId,
    pub start_ms: u64,
    pub hosts: Vec<String>,
}

/// What a pass decided: placements to propose (single-host jobs in
/// `starts`, gangs in `gang_starts`), reservations it kept room for, and
/// why each job it looked at and did not place is waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub starts: Vec<Placement>,
    pub reasons: BTreeMap<JobId, Reason>,
    #[serde(default)]
    pub gang_starts: Vec<GangPlacement>,
    #[serde(default)]
    pub reservations: Vec<Reservation>,
}

/// What `request` takes on `host`: the whole host when `exclusive`. `None`
/// when the host could never hold it, even empty.
pub fn need_on(host: &Host, request: Resources, exclusive: bool) -> Option<Resources> {
    let total = host.inventory.resources();
    if !request.within(total) {
        return None;
    }
    Some(if exclusive { total } else { request })
}

/// The hosts that are up, their profiles, and an index by free CPUs now so
/// that finding room does not look at hosts that are full.
struct Pool {
    /// Up hosts, by name; the views carry what this pass placed, for `fits`.
    views: Vec<Host>,
    profiles: Vec<Profile>,
    /// (free CPUs now, host index).
    by_free_cpus: BTreeSet<(u32, usize)>,
    /// Distinct inventories of up hosts, with how many hosts have each.
    classes: Vec<(Resources, usize)>,
}

impl Pool {
    fn new(snapshot: &Snapshot, now_ms: u64) -> Pool {
        let mut views: Vec<Host> = snapshot
            .hosts
            .iter()
            .filter(|h| h.state == HostState::Up)
            .cloned()
            .collect();
        views.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<&str, usize> = views
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name.as_str(), i))
            .collect();
        let mut releases: Vec<Vec<(u64, Resources)>> = vec![Vec::new(); views.len()];
        for job in &snapshot.running {
            let Some(end_ms) = job.end_ms else { continue };
            for host in &job.hosts {
                if let Some(&i) = index.get(host.as_str()) {
                    releases[i].push((end_ms, job.per_host));
                }
            }
        }
        let profiles: Vec<Profile> = views
            .iter()
            .zip(releases)
            .map(|(h, r)| Profile::new(now_ms, h.free(), r))
            .collect();
        let by_free_cpus = profiles
            .iter()
            .enumerate()
            .map(|(i, p)| (p.free_now().cpus, i))
            .collect();
        let mut class_counts: BTreeMap<(u32, u64), usize> = BTreeMap::new();
        for h in &views {
            *class_counts
                .entry((h.inventory.cpus, h.inventory.mem_mb))
                .or_default() += 1;
        }
        let classes = class_counts
            .into_iter()
            .map(|((cpus, mem_mb), n)| (Resources { cpus, mem_mb }, n))
            .collect();
        Pool {
            views,
            profiles,
            by_free_cpus,
            classes,
        }
    }

    /// How many up hosts could hold the job if they were empty.
    fn capable_hosts(&self, job: &PendingJob) -> usize {
        self.classes
            .iter()
            .filter(|(total, _)| job.request.within(*total))
            .map(|(_, n)| n)
            .sum()
    }

    /// Hosts that can take the job now and keep it for its time limit
    /// without touching room promised to a reservation. Looks only at hosts
    /// with enough CPUs free now, fullest first (best fit), then by name.
    fn room_now(&self, job: &PendingJob, now_ms: u64) -> Option<Vec<usize>> {
        let wanted = job.hosts_needed();
        let mut chosen = Vec::with_capacity(wanted);
        for &(_, i) in self.by_free_cpus.range((job.request.cpus, 0)..) {
            let host = &self.views[i];
            let Some(need) = need_on(host, job.request, job.exclusive) else {
                continue;
            };
            if !self.profiles[i].holds(need, now_ms, job.duration_ms()) {
                continue;
            }
            if fits(host, need).is_err() {
                continue;
            }
            chosen.push(i);
            if chosen.len() == wanted {
                // Name order, so a gang's host list reads naturally.
                chosen.sort_unstable();
                return Some(chosen);
            }
        }
        None
    }

    /// The earliest time enough hosts can hold the job together for its
    /// time limit, and which. Each host's own earliest start is a
    /// candidate; the first candidate at which enough hosts hold the job
    /// wins (a host's room can close again at a later reservation, so each
    /// is checked at the candidate time itself).
    fn earliest_room(&self, job: &PendingJob, now_ms: u64) -> Option<(u64, Vec<usize>)> {
        let wanted = job.hosts_needed();
        let duration_ms = job.duration_ms();
        let mut starts: Vec<(u64, usize, Resources)> = self
            .views
            .iter()
            .enumerate()
            .filter_map(|(i, host)| {
                let need = need_on(host, job.request, job.exclusive)?;
                let at_ms = self.profiles[i].earliest(need, now_ms, duration_ms)?;
                Some((at_ms, i, need))
            })
            .collect();
        starts.sort_unstable_by_key(|s| (s.0, s.1));
        for k in wanted.saturating_sub(1)..starts.len() {
            let at_ms = starts[k].0;
            let mut chosen: Vec<usize> = starts[..=k]
                .iter()
                .filter(|(_, i, need)| self.profiles[*i].holds(*need, at_ms, duration_ms))
                .map(|s| s.1)
                .take(wanted)
                .collect();
            if chosen.len() == wanted {
                chosen.sort_unstable();
                return Some((at_ms, chosen));
            }
        }
        None
    }

    /// Takes the job's room on `hosts` from `from_ms` for its time limit.
    fn take(&mut self, job: &PendingJob, hosts: &[usize], from_ms: u64, now_ms: u64) -> Resources {
        let until_ms = job.duration_ms().map(|d| from_ms.saturating_add(d));
        let mut first_need = Resources::default();
        for (n, &i) in hosts.iter().enumerate() {
            let Some(need) = need_on(&self.views[i], job.request, job.exclusive) else {
                continue;
            };
            if n == 0 {
                first_need = need;
            }
            let before = self.profiles[i].free_now().cpus;
            self.profiles[i].take(need, from_ms, until_ms);
            if from_ms <= now_ms {
                self.views[i].allocated = self.views[i].allocated.saturating_add(need);
            }
            let after = self.profiles[i].free_now().cpus;
            if before != after {
                self.by_free_cpus.remove(&(before, i));
                self.by_free_cpus.insert((after, i));
            }
        }
        first_need
    }

    fn names(&self, hosts: &[usize]) -> Vec<String> {
        hosts.iter().map(|&i| self.views[i].name.clone()).collect()
    }
}

/// Runs one pass over `snapshot` at `now_ms`.
pub fn schedule(snapshot: &Snapshot, policy: &Policy, now_ms: u64) -> Plan {
    let mut pool = Pool::new(snapshot, now_ms);
    let mut plan = Plan::default();
    // FIFO: set once a job is blocked; everything behind it waits.
    let mut blocked = false;
    let mut reservations_made = 0usize;

    for job in snapshot.pending.iter().take(policy.max_jobs_per_pass) {
        if job.held {
            plan.reasons.insert(job.id, Reason::JobHeldUser);
            continue;
        }
        if blocked {
            plan.reasons.insert(job.id, Reason::Priority);
            continue;
        }
        if pool.capable_hosts(job) < job.hosts_needed() {
            plan.reasons.insert(job.id, Reason::ReqNodeNotAvail);
            continue;
        }
        if let Some(hosts) = pool.room_now(job, now_ms) {
            let resources = pool.take(job, &hosts, now_ms, now_ms);
            let mut names = pool.names(&hosts);
            if names.len() == 1 {
                plan.starts.push(Placement {
                    job_id: job.id,
                    host: names.remove(0),
                    resources,
                });
            } else {
                plan.gang_starts.push(GangPlacement {
                    job_id: job.id,
                    hosts: names,
                    resources,
                });
            }
            continue;
        }
        if !policy.backfill {
            plan.reasons.insert(job.id, Reason::Resources);
            blocked = true;
            continue;
        }
        if reservations_made < policy.bf_reservations {
            reservations_made += 1;
            if let Some((start_ms, hosts)) = pool.earliest_room(job, now_ms) {
                pool.take(job, &hosts, start_ms, now_ms);
                plan.reservations.push(Reservation {
                    job_id: job.id,
                    start_ms,
                    hosts: pool.names(&hosts),
                });
            }
            plan.reasons.insert(job.id, Reason::Resources);
        } else {
            plan.reasons.insert(job.id, Reason::Priority);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostState, Inventory};

    fn host(name: &str, cpus: u32) -> Host {
        Host {
            name: name.into(),
            inventory: Inventory { cpus, mem_mb: 1024 },
            state: HostState::Up,
            allocated: Resources::default(),
        }
    }

    fn job(id: JobId, cpus: u32) -> PendingJob {
        PendingJob::new(id, Resources { cpus, mem_mb: 0 })
    }

    #[test]
    fn places_in_fifo_order_first_fit() {
        let snap = Snapshot {
            hosts: vec![host("b", 4), host("a", 2)],
            pending: vec![job(1, 2), job(2, 4), job(3, 1)],
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        let placed: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(placed, vec![(1, "a"), (2, "b")]);
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Resources));
    }

    #[test]
    fn blocked_job_holds_back_the_queue() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: vec![job(1, 2), job(2, 2), job(3, 1)],
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.starts.len(), 1);
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Priority));
    }

    #[test]
    fn impossible_job_does_not_block() {
        let snap = Snapshot {
            hosts: vec![host("a", 2)],
            pending: vec![job(1, 64), job(2, 1), job(3, 1)],
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
        assert_eq!(plan.starts.len(), 2);
    }

    #[test]
    fn held_jobs_are_skipped_and_bound_is_respected() {
        let mut held = job(1, 1);
        held.held = true;
        let snap = Snapshot {
            hosts: vec![host("a", 8)],
            pending: vec![held, job(2, 1), job(3, 1)],
            ..Snapshot::default()
        };
        let policy = Policy {
            max_jobs_per_pass: 2,
            ..Policy::default()
        };
        let plan = schedule(&snap, &policy, 0);
        assert_eq!(plan.reasons.get(&1), Some(&Reason::JobHeldUser));
        assert_eq!(plan.starts.len(), 1);
        assert_eq!(plan.starts[0].job_id, 2);
    }

    #[test]
    fn down_hosts_get_nothing() {
        let mut down = host("a", 8);
        down.state = HostState::Down;
        let snap = Snapshot {
            hosts: vec![down],
            pending: vec![job(1, 1)],
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert!(plan.starts.is_empty());
        assert_eq!(plan.reasons.get(&1), Some(&Reason::ReqNodeNotAvail));
    }

    fn running(id: JobId, host: &str, cpus: u32, end_ms: Option<u64>) -> RunningJob {
        RunningJob {
            id,
            hosts: vec![host.into()],
            per_host: Resources { cpus, mem_mb: 0 },
            end_ms,
        }
    }

    fn gang(id: JobId, nodes: u32, cpus: u32, time_limit_s: u64) -> PendingJob {
        PendingJob {
            nodes,
            time_limit_s,
            ..job(id, cpus)
        }
    }

    /// Two hosts; `a` is full until 100 s. The 2-host head is promised both
    /// hosts at 100 s; a 50 s job backfills onto `b`, a 200 s one may not,
    /// and neither may a job with no limit.
    fn blocked_head() -> Snapshot {
        let mut a = host("a", 4);
        a.allocated.cpus = 4;
        Snapshot {
            hosts: vec![a, host("b", 4)],
            pending: vec![
                gang(1, 2, 4, 100),
                gang(2, 1, 4, 200),
                job(3, 4),
                gang(4, 1, 4, 50),
            ],
            running: vec![running(9, "a", 4, Some(100_000))],
        }
    }

    #[test]
    fn easy_reserves_the_head_and_backfills_only_what_ends_in_time() {
        let plan = schedule(&blocked_head(), &Policy::default(), 0);
        assert_eq!(
            plan.reservations,
            vec![Reservation {
                job_id: 1,
                start_ms: 100_000,
                hosts: vec!["a".into(), "b".into()],
            }]
        );
        assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&2), Some(&Reason::Priority));
        assert_eq!(plan.reasons.get(&3), Some(&Reason::Priority));
        let started: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(started, vec![(4, "b")]);
    }

    #[test]
    fn fifo_policy_backfills_nothing() {
        let policy = Policy {
            backfill: false,
            ..Policy::default()
        };
        let plan = schedule(&blocked_head(), &policy, 0);
        assert!(plan.starts.is_empty() && plan.reservations.is_empty());
        assert_eq!(plan.reasons.get(&1), Some(&Reason::Resources));
        assert_eq!(plan.reasons.get(&4), Some(&Reason::Priority));
    }

    #[test]
    fn gangs_go_to_gang_starts_and_exclusive_takes_whole_hosts() {
        let mut busy = host("c", 4);
        busy.allocated.cpus = 1;
        let exclusive = PendingJob {
            exclusive: true,
            ..gang(1, 2, 1, 0)
        };
        let snap = Snapshot {
            hosts: vec![host("a", 4), host("b", 4), busy],
            pending: vec![exclusive, job(2, 3)],
            ..Snapshot::default()
        };
        let plan = schedule(&snap, &Policy::default(), 0);
        assert_eq!(
            plan.gang_starts,
            vec![GangPlacement {
                job_id: 1,
                hosts: vec!["a".into(), "b".into()],
                resources: Resources {
                    cpus: 4,
                    mem_mb: 1024
                },
            }]
        );
        let started: Vec<(JobId, &str)> = plan
            .starts
            .iter()
            .map(|p| (p.job_id, p.host.as_str()))
            .collect();
        assert_eq!(started, vec![(2, "c")]);
    }
}
