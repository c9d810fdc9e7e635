//! The simulator's engine against a second, independent driver of the
//! cluster's state machine: a seeded random workload (single and
//! multi-host jobs, exclusive jobs, jobs with alternative resource sets,
//! begin times, arrays, dependencies, exit codes,
//! time limits, cancels, holds and releases, a QOS limit set mid-run, an
//! account's priority changed, QOS preemption that requeues or cancels,
//! idle-fill lending past a QOS node cap and reclaiming, hosts lost and
//! back) is run by
//! `berth sim`'s engine and by the driver below, which proposes to
//! `berth_state::SmState::apply`, command by command, what the leader and
//! the agents would. Both run the same state machine and leader pass, so
//! this holds the engine's own part: the order of an instant, exits, stops
//! and lost hosts, and the lines it writes. Both must give every job the
//! same id, start, hosts, end and final state, and charge accounts the
//! same usage.
//!
//! CI runs 150 seeds; for a longer run:
//! `BERTH_DIFF_SEEDS=1-2000 cargo test -p berth-sim --test differential`.
//! A failing seed shows both outcomes side by side; to look closer,
//! `BERTH_DIFF_SEEDS=N DUMP_JOB=j4 DUMP_SIM=T1-T2 cargo test -p berth-sim
//! --test differential -- --nocapture` also prints job j4's events in the
//! state machine and the simulator's lines from T1 to T2 s.

use std::collections::{BTreeMap, BTreeSet};

use berth_scheduler::catalog::Catalog;
use berth_scheduler::deps;
use berth_scheduler::model::{
    Host, HostState, Inventory, JobId, JobSpec, JobState, ResourceSet, Resources,
};
use berth_scheduler::pass::{Policy, Snapshot};
use berth_scheduler::preempt::exempt_s;
use berth_scheduler::qos::{PreemptMode, NORMAL_QOS};
use berth_scheduler::usage::Usage;
use berth_scheduler::{Account, Qos, TresKind};
use berth_sim::bench::SplitMix64;
use berth_sim::engine::{simulate, SimAction, SimEvent, SimInput, SimJob};
use berth_state::leader_pass::{apply_plan_command, PassMemory};
use berth_state::policy::PolicyChange;
use berth_state::{Command, Dirty, JobAction, Response, SmState};

/// Seeds CI runs.
const CI_SEEDS: std::ops::RangeInclusive<u64> = 1..=150;
/// The most instants one run may take: a bound on the driver's loop.
const INSTANTS_MAX: usize = 100_000;

/// The simulator's own seeded generator, so the workload is the same on
/// every machine.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.0.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.0.below(100) < percent
    }
}

/// One submit of the workload: a job, or an array of `tasks` jobs.
struct Submit {
    name: String,
    at_s: u64,
    spec: JobSpec,
    tasks: u32,
    runtime_s: u64,
    exit_code: i32,
    /// Index of an earlier submit whose first job this one waits for.
    after: Option<(usize, &'static str)>,
}

struct Workload {
    hosts: Vec<(String, u32)>,
    accounts: Vec<String>,
    /// Preemption on, and whether `normal`'s victims are cancelled.
    preemption: Option<bool>,
    /// Idle-fill on: `normal` lends past its node cap, and reclaims.
    idle_fill: bool,
    submits: Vec<Submit>,
    /// (time, what): `Cancel(submit)`, `Down(host)`, `Up(host)`.
    events: Vec<(u64, Event)>,
}

#[derive(Clone, Copy)]
enum Event {
    Cancel(usize),
    Hold(usize),
    Release(usize),
    /// QOS `normal` gets at most this many running jobs per user.
    LimitNormal(u32),
    /// Account `b`'s priority becomes this.
    PriorityOfB(i64),
    Down(usize),
    Up(usize),
}

/// The QOS every job runs under unless it asks `high`, which may preempt
/// it: requeued or, when `cancel`, ended for good. With idle-fill on, its
/// jobs may hold 2 hosts, and borrow idle ones past that.
fn normal_qos(w: &Workload, max_jobs_per_user: Option<u32>) -> Qos {
    let cancel = w.preemption == Some(true);
    let mut qos = Qos {
        name: NORMAL_QOS.into(),
        preempt_mode: if cancel {
            PreemptMode::Cancel
        } else {
            PreemptMode::Requeue
        },
        ..Qos::default()
    };
    qos.limits.max_jobs_per_user = max_jobs_per_user;
    if w.idle_fill {
        qos.limits.grp_tres.node = Some(2);
    }
    qos
}

fn high_qos() -> Qos {
    Qos {
        name: "high".into(),
        priority: 1000,
        preempt: vec![NORMAL_QOS.into()],
        ..Qos::default()
    }
}

fn workload(seed: u64) -> Workload {
    let mut rng = Rng::new(seed);
    let hosts: Vec<(String, u32)> = (0..rng.range(3, 6))
        .map(|h| (format!("h{h}"), if rng.chance(50) { 4 } else { 8 }))
        .collect();
    let accounts = vec!["a".to_string(), "b".to_string()];
    let mut submits: Vec<Submit> = Vec::new();
    let mut at_s = 0;
    for n in 0..rng.range(15, 40) {
        at_s += rng.range(0, 40);
        let nodes = if rng.chance(25) { rng.range(2, 3) } else { 1 } as u32;
        let time_limit_s = rng.range(60, 900);
        let after = (n > 0 && rng.chance(20)).then(|| {
            let kind = if rng.chance(50) {
                "afterok"
            } else {
                "afterany"
            };
            (rng.range(0, n - 1) as usize, kind)
        });
        let tasks = if rng.chance(15) { rng.range(2, 4) } else { 1 } as u32;
        let account = accounts[rng.range(0, 1) as usize].clone();
        let qos = if rng.chance(15) { "high" } else { "" };
        // Either this shape or another: fewer hosts with more CPUs each.
        let alternatives = if tasks == 1 && rng.chance(15) {
            vec![
                ResourceSet {
                    cpus: 1,
                    nodes: 2,
                    ..ResourceSet::default()
                },
                ResourceSet {
                    cpus: 4,
                    nodes: 1,
                    ..ResourceSet::default()
                },
            ]
        } else {
            Vec::new()
        };
        let spec = JobSpec {
            qos: qos.into(),
            alternatives,
            name: format!("j{n}"),
            user: if rng.chance(50) { "alice" } else { "bob" }.into(),
            account,
            command: "true".into(),
            cpus: rng.range(1, 4) as u32,
            mem_mb: rng.range(0, 4) * 512,
            nodes,
            time_limit_s,
            // Whole hosts (`--exclusive`).
            exclusive: rng.chance(10),
            // Eligible up to a minute after its submit (`--begin`).
            begin_ms: if rng.chance(10) {
                (at_s + rng.range(1, 60)) * 1000
            } else {
                0
            },
            ..JobSpec::default()
        };
        submits.push(Submit {
            name: format!("j{n}"),
            at_s,
            spec,
            tasks,
            runtime_s: rng.range(10, time_limit_s + 120),
            exit_code: if rng.chance(15) { 1 } else { 0 },
            after,
        });
    }
    let last_s = at_s + 600;
    let mut events = Vec::new();
    for _ in 0..rng.range(0, 4) {
        let s = rng.range(0, submits.len() as u64 - 1) as usize;
        events.push((rng.range(submits[s].at_s, last_s), Event::Cancel(s)));
    }
    for _ in 0..rng.range(0, 3) {
        let s = rng.range(0, submits.len() as u64 - 1) as usize;
        let hold_s = rng.range(submits[s].at_s, last_s);
        events.push((hold_s, Event::Hold(s)));
        events.push((hold_s + rng.range(0, 200), Event::Release(s)));
    }
    if rng.chance(30) {
        let limit = rng.range(1, 3) as u32;
        events.push((rng.range(0, last_s), Event::LimitNormal(limit)));
    }
    if rng.chance(30) {
        let priority = rng.range(0, 2000) as i64 - 1000;
        events.push((rng.range(0, last_s), Event::PriorityOfB(priority)));
    }
    if rng.chance(60) {
        let h = rng.range(0, hosts.len() as u64 - 1) as usize;
        let down_s = rng.range(0, last_s);
        events.push((down_s, Event::Down(h)));
        events.push((down_s + rng.range(1, 300), Event::Up(h)));
    }
    events.sort_by_key(|(t, _)| *t);
    let preemption = rng.chance(50).then(|| rng.chance(30));
    let idle_fill = rng.chance(40);
    Workload {
        hosts,
        accounts,
        preemption,
        idle_fill,
        submits,
        events,
    }
}

/// What happened to one job, as either side saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    name: String,
    job_id: JobId,
    start_s: Option<u64>,
    hosts: Vec<String>,
    end_s: Option<u64>,
    state: String,
}

impl Outcome {
    /// A job pending at the end has no run to compare (a requeued one's
    /// last run is history).
    fn settled(self) -> Outcome {
        if self.state != "PENDING" {
            return self;
        }
        Outcome {
            start_s: None,
            hosts: Vec::new(),
            end_s: None,
            ..self
        }
    }
}

/// Each submit's first job index (the simulator's) and its task names.
fn task_names(w: &Workload) -> Vec<(usize, Vec<String>)> {
    let mut first = 0;
    w.submits
        .iter()
        .map(|s| {
            let names = if s.tasks == 1 {
                vec![s.name.clone()]
            } else {
                (0..s.tasks).map(|k| format!("{}_{k}", s.name)).collect()
            };
            let at = first;
            first += names.len();
            (at, names)
        })
        .collect()
}

fn hosts_of(w: &Workload) -> Vec<Host> {
    w.hosts
        .iter()
        .map(|(name, cpus)| Host {
            name: name.clone(),
            inventory: Inventory::cpu_mem(*cpus, 8192),
            state: HostState::Up,
            allocated: Resources::default(),
            partitions: Vec::new(),
            features: Vec::new(),
        })
        .collect()
}

fn account(name: &str, priority: i64) -> Account {
    Account {
        name: name.into(),
        priority,
        users: vec!["alice".into(), "bob".into()],
        qos: vec![NORMAL_QOS.into(), "high".into()],
        ..Default::default()
    }
}

fn policy_of(w: &Workload) -> Policy {
    let mut policy = Policy::default();
    policy.preemption.enabled = w.preemption.is_some();
    policy.idle_fill.enabled = w.idle_fill;
    policy
}

/// The workload through the simulator's engine.
fn by_simulator(w: &Workload) -> (Vec<Outcome>, BTreeMap<String, [f64; 2]>) {
    let names = task_names(w);
    let mut jobs = Vec::new();
    for (s, (first, tasks)) in w.submits.iter().zip(&names) {
        let dependency = s.after.map(|(target, kind)| {
            deps::parse(&format!("{kind}:{}", names[target].0)).expect("dependency parses")
        });
        let mut spec = s.spec.clone();
        if s.tasks > 1 {
            spec.array = format!("0-{}", s.tasks - 1);
        }
        for (k, name) in tasks.iter().enumerate() {
            jobs.push(SimJob {
                runtime_s: Some(s.runtime_s),
                exit_code: s.exit_code,
                dependency: dependency.clone(),
                array_task: (s.tasks > 1).then_some((*first, k as u32)),
                ..SimJob::new(name.clone(), s.at_s, spec.clone())
            });
        }
    }
    let events = w
        .events
        .iter()
        .map(|&(at_s, e)| SimEvent {
            at_s,
            action: match e {
                Event::Cancel(s) => {
                    let (first, tasks) = &names[s];
                    SimAction::Cancel((*first..first + tasks.len()).collect())
                }
                Event::Hold(s) | Event::Release(s) => {
                    let (first, tasks) = &names[s];
                    let jobs = (*first..first + tasks.len()).collect();
                    match e {
                        Event::Hold(_) => SimAction::Hold(jobs),
                        _ => SimAction::Release(jobs),
                    }
                }
                Event::LimitNormal(n) => SimAction::ModifyQos(Box::new(normal_qos(w, Some(n)))),
                Event::PriorityOfB(p) => SimAction::SetAccountPriority("b".into(), p),
                Event::Down(h) => SimAction::HostDown(vec![w.hosts[h].0.clone()]),
                Event::Up(h) => SimAction::HostUp(vec![w.hosts[h].0.clone()]),
            },
        })
        .collect();
    let input = SimInput {
        hosts: hosts_of(w),
        jobs,
        events,
        policy: policy_of(w),
        world: Snapshot {
            accounts: w.accounts.iter().map(|a| account(a, 0)).collect(),
            qos: vec![normal_qos(w, None), high_qos()],
            ..Snapshot::default()
        },
        until_s: None,
        emit_events: true,
        stop_grace_s: 30,
    };
    let output = simulate(&input).expect("the simulation runs");
    if let Ok(window) = std::env::var("DUMP_SIM") {
        let (lo, hi) = window.split_once('-').expect("DUMP_SIM=T1-T2");
        let (lo, hi): (u64, u64) = (lo.parse().expect("T1"), hi.parse().expect("T2"));
        for line in output.lines.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            if v["t_s"].as_u64().is_some_and(|t| t >= lo && t <= hi) {
                eprintln!("SIM {line}");
            }
        }
    }
    let mut by_name: BTreeMap<String, Outcome> = BTreeMap::new();
    for line in output.lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let name = v["job"].as_str().unwrap_or_default().to_string();
        let t_s = v["t_s"].as_u64();
        match v["event"].as_str() {
            Some("submit") => {
                by_name.insert(
                    name.clone(),
                    Outcome {
                        name,
                        job_id: v["job_id"].as_u64().expect("an id"),
                        start_s: None,
                        hosts: Vec::new(),
                        end_s: None,
                        state: "PENDING".into(),
                    },
                );
            }
            Some("start") => {
                let o = by_name.get_mut(&name).expect("started after its submit");
                o.start_s = t_s;
                o.hosts = v["hosts"]
                    .as_array()
                    .expect("hosts")
                    .iter()
                    .filter_map(|h| h.as_str().map(str::to_string))
                    .collect();
                o.state = "RUNNING".into();
            }
            Some("end") if v["requeue"].as_bool() == Some(true) => {
                // Back in the queue: that run is history.
                let o = by_name.get_mut(&name).expect("ended after its submit");
                o.state = "PENDING".into();
                o.start_s = None;
                o.hosts.clear();
            }
            Some("end") => {
                let o = by_name.get_mut(&name).expect("ended after its submit");
                o.end_s = t_s;
                o.state = v["state"].as_str().expect("a state").into();
            }
            Some("rejected") => panic!("the simulator refused a submit: {line}"),
            _ => {}
        }
    }
    let mut outcomes: Vec<Outcome> = by_name.into_values().map(Outcome::settled).collect();
    outcomes.sort_by_key(|o| o.job_id);
    (outcomes, usage_by_account(&output.usage))
}

/// CPU-seconds and node-seconds charged to each account.
fn usage_by_account(usage: &Usage) -> BTreeMap<String, [f64; 2]> {
    usage
        .accounts
        .iter()
        .map(|(a, u)| {
            let t = |k: TresKind| u.tres_s[k.index()];
            (a.clone(), [t(TresKind::Cpu), t(TresKind::Node)])
        })
        .collect()
}

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum End {
    /// On its own, with this exit code.
    Exits(i32),
    /// At its time limit.
    Timeout,
    /// Stopped by an eviction, at the end of its grace.
    Evicted,
}

/// Passes one instant may run beyond its first, as the simulator's (a
/// pass runs again when an eviction freed room at once, as a leader's
/// would when the victim's exit is reported).
const ROUNDS_PER_INSTANT_MAX: usize = 4;

/// The cluster's state machine, driven as the leader and the agents would
/// drive it, with the simulator's order within an instant: runs reaching
/// their end, submits, events, then the pass.
struct Cluster {
    state: SmState,
    memory: PassMemory,
    policy: Policy,
    down: BTreeSet<String>,
    /// (time, job id, alloc id, how).
    ends: BTreeSet<(u64, JobId, u64, End)>,
    /// Allocations whose eviction is already under way.
    evicting: BTreeSet<u64>,
    /// Each job's real run time, and exit code.
    runs: BTreeMap<JobId, (u64, i32)>,
    /// Instants where a run's preemption exempt time is over: a blocked
    /// job may evict it then, so the simulator passes there (a leader
    /// passes every few seconds anyway).
    wakes: BTreeSet<u64>,
}

impl Cluster {
    fn apply(&mut self, command: Command) -> Response {
        self.state.apply(&command, &mut Dirty::default())
    }

    fn batch_host(&self, job_id: JobId) -> Option<(String, u64)> {
        let alloc = self.state.job(job_id)?.job.alloc.as_ref()?;
        Some((alloc.host.clone(), alloc.alloc_id))
    }

    fn exit(&mut self, job_id: JobId, alloc_id: u64, code: i32, signal: i32, now_ms: u64) {
        let Some((host, current)) = self.batch_host(job_id) else {
            return;
        };
        if current != alloc_id
            || self.state.job(job_id).map(|r| r.job.state) != Some(JobState::Running)
        {
            return;
        }
        self.apply(Command::JobExited {
            job_id,
            alloc_id,
            host,
            exit_code: code,
            signal,
            launch_error: String::new(),
            now_ms,
        });
    }

    /// Asks for a pass when `job_id`, started at `t_s`, stops being exempt
    /// from preemption or from idle-fill's reclaim.
    fn wake_at_exempt_end(&mut self, job_id: JobId, t_s: u64) {
        // A run on lent capacity is safe from reclaim for its window.
        if let Some(job) = self.state.job(job_id).map(|r| &r.job) {
            let window_s = self.policy.idle_fill.exempt_window_s(job.reclaims);
            if self.policy.idle_fill.enabled && job.borrowed && window_s > 0 {
                self.wakes.insert(t_s + window_s);
            }
        }
        if !self.policy.preemption.enabled {
            return;
        }
        let snapshot = self.state.scheduler_snapshot(|_| HostState::Up);
        let Some(view) = snapshot.running.iter().find(|r| r.id == job_id) else {
            return;
        };
        let exempt = exempt_s(view, &Catalog::new(&snapshot), &self.policy.preemption);
        if exempt > 0 {
            self.wakes.insert(t_s + exempt);
        }
    }

    /// The instant's pass, again while an eviction frees room at once.
    fn pass(&mut self, t_s: u64) {
        for _ in 0..=ROUNDS_PER_INSTANT_MAX {
            if !self.pass_round(t_s) {
                break;
            }
        }
    }

    /// One pass and its plan; true when a victim exited at once.
    fn pass_round(&mut self, t_s: u64) -> bool {
        let now_ms = t_s * 1000;
        let down = self.down.clone();
        let snapshot = self
            .state
            .pass_input(|h| {
                if down.contains(h) {
                    HostState::Down
                } else {
                    HostState::Up
                }
            })
            .into_snapshot_at(now_ms);
        let running_before: BTreeSet<JobId> = self.state.running_ids().collect();
        let plan = self.memory.schedule(snapshot, &self.policy, now_ms);
        if let Some(command) = apply_plan_command(&plan, self.state.applied_index(), now_ms) {
            self.apply(command);
        }
        let started: Vec<JobId> = self
            .state
            .running_ids()
            .filter(|id| !running_before.contains(id))
            .collect();
        for job_id in started {
            let (host, alloc_id) = self.batch_host(job_id).expect("a started job's allocation");
            self.apply(Command::JobStarted {
                job_id,
                alloc_id,
                host,
                pid: 1,
                now_ms,
            });
            let limit_s = self
                .state
                .job(job_id)
                .map_or(0, |r| r.job.spec.time_limit_s);
            let (runtime_s, code) = self.runs[&job_id];
            let end = if limit_s > 0 && runtime_s > limit_s {
                (t_s + limit_s, job_id, alloc_id, End::Timeout)
            } else {
                (t_s + runtime_s, job_id, alloc_id, End::Exits(code))
            };
            self.ends.insert(end);
            self.wake_at_exempt_end(job_id, t_s);
        }
        // Victims the plan chose: stopped at the end of their grace (their
        // stop takes no time).
        let evicted: Vec<(JobId, u64, u64)> = self
            .state
            .running_ids()
            .filter_map(|id| {
                let job = &self.state.job(id)?.job;
                let mark = job.evicted.as_ref()?;
                let alloc_id = job.alloc.as_ref()?.alloc_id;
                (!self.evicting.contains(&alloc_id)).then_some((id, alloc_id, mark.grace_s))
            })
            .collect();
        let mut exited_now = false;
        for (job_id, alloc_id, grace_s) in evicted {
            self.evicting.insert(alloc_id);
            if grace_s == 0 {
                self.exit(job_id, alloc_id, 0, 15, now_ms);
                exited_now = true;
            } else {
                self.ends
                    .insert((t_s + grace_s, job_id, alloc_id, End::Evicted));
            }
        }
        exited_now
    }
}

/// The workload through `SmState::apply`.
fn by_state_machine(w: &Workload) -> (Vec<Outcome>, BTreeMap<String, [f64; 2]>) {
    let mut c = Cluster {
        state: SmState::default(),
        memory: PassMemory::default(),
        policy: policy_of(w),
        down: BTreeSet::new(),
        ends: BTreeSet::new(),
        evicting: BTreeSet::new(),
        runs: BTreeMap::new(),
        wakes: BTreeSet::new(),
    };
    for host in hosts_of(w) {
        c.apply(Command::RegisterHost {
            name: host.name,
            inventory: host.inventory,
            agent_restarted: false,
            running_allocs: Vec::new(),
            now_ms: 0,
            drain_reason: String::new(),
            step_addr: String::new(),
        });
    }
    let changes = [normal_qos(w, None), high_qos()]
        .into_iter()
        .map(PolicyChange::UpsertQos)
        .chain(
            w.accounts
                .iter()
                .map(|a| PolicyChange::UpsertAccount(account(a, 0))),
        );
    for change in changes {
        let set = c.apply(Command::SetPolicy { change, now_ms: 0 });
        assert_eq!(set, Response::PolicySet);
    }
    let names = task_names(w);
    let mut first_id: Vec<JobId> = Vec::new();
    let mut name_of: BTreeMap<JobId, String> = BTreeMap::new();
    let mut times: BTreeSet<u64> = w.submits.iter().map(|s| s.at_s).collect();
    // Begin times are instants too: a job held only by its begin time is
    // looked at when that time comes (the leader's next pass).
    times.extend(
        w.submits
            .iter()
            .map(|s| s.spec.begin_ms.div_ceil(1000))
            .filter(|&b| b > 0),
    );
    times.extend(w.events.iter().map(|(t, _)| *t));
    let (mut next_submit, mut next_event) = (0, 0);
    for _ in 0..INSTANTS_MAX {
        let next_end = c.ends.first().map(|e| e.0);
        let next_wake = c.wakes.first().copied();
        let Some(t_s) = times
            .first()
            .copied()
            .into_iter()
            .chain(next_end)
            .chain(next_wake)
            .min()
        else {
            break;
        };
        times.remove(&t_s);
        c.wakes.remove(&t_s);
        let now_ms = t_s * 1000;
        while c.ends.first().is_some_and(|e| e.0 == t_s) {
            let Some((_, job_id, alloc_id, end)) = c.ends.pop_first() else {
                break;
            };
            match end {
                End::Timeout => {
                    c.apply(Command::TimeLimitReached {
                        allocations: vec![(job_id, alloc_id)],
                        now_ms,
                    });
                    c.exit(job_id, alloc_id, 0, 15, now_ms);
                }
                End::Exits(code) => c.exit(job_id, alloc_id, code, 0, now_ms),
                End::Evicted => c.exit(job_id, alloc_id, 0, 15, now_ms),
            }
        }
        while w.submits.get(next_submit).is_some_and(|s| s.at_s == t_s) {
            let s = &w.submits[next_submit];
            let mut spec = s.spec.clone();
            if s.tasks > 1 {
                spec.array = format!("0-{}", s.tasks - 1);
            }
            if let Some((target, kind)) = s.after {
                spec.dependency = format!("{kind}:{}", first_id[target]);
            }
            let response = c.apply(Command::SubmitJob {
                request_id: s.name.clone(),
                spec,
                now_ms,
            });
            let Response::Submitted { job_id, .. } = response else {
                panic!("the state machine refused {}: {response:?}", s.name);
            };
            first_id.push(job_id);
            for (k, name) in names[next_submit].1.iter().enumerate() {
                let id = job_id + k as u64;
                name_of.insert(id, name.clone());
                c.runs.insert(id, (s.runtime_s, s.exit_code));
            }
            next_submit += 1;
        }
        while w.events.get(next_event).is_some_and(|e| e.0 == t_s) {
            match w.events[next_event].1 {
                Event::Cancel(s) => {
                    let Some(&first) = first_id.get(s) else {
                        next_event += 1;
                        continue;
                    };
                    for id in first..first + names[s].1.len() as u64 {
                        c.apply(Command::CancelJob { job_id: id, now_ms });
                        if let Some((_, alloc_id)) = c.batch_host(id) {
                            c.exit(id, alloc_id, 0, 15, now_ms);
                        }
                    }
                }
                Event::Hold(s) | Event::Release(s) => {
                    let action = match w.events[next_event].1 {
                        Event::Hold(_) => JobAction::Hold,
                        _ => JobAction::Release { admin: false },
                    };
                    if let Some(&first) = first_id.get(s) {
                        for job_id in first..first + names[s].1.len() as u64 {
                            c.apply(Command::ControlJob {
                                job_id,
                                action,
                                now_ms,
                            });
                        }
                    }
                }
                Event::LimitNormal(n) => {
                    let change = PolicyChange::UpsertQos(normal_qos(w, Some(n)));
                    let set = c.apply(Command::SetPolicy { change, now_ms });
                    assert_eq!(set, Response::PolicySet);
                }
                Event::PriorityOfB(p) => {
                    let change = PolicyChange::UpsertAccount(account("b", p));
                    let set = c.apply(Command::SetPolicy { change, now_ms });
                    assert_eq!(set, Response::PolicySet);
                }
                Event::Down(h) => {
                    let host = w.hosts[h].0.clone();
                    c.down.insert(host.clone());
                    c.apply(Command::HostsSilent {
                        hosts: vec![host],
                        timeout_ms: 0,
                        now_ms,
                    });
                }
                Event::Up(h) => {
                    c.down.remove(&w.hosts[h].0);
                }
            }
            next_event += 1;
        }
        c.pass(t_s);
    }
    if let Ok(job) = std::env::var("DUMP_JOB") {
        for r in c.state.jobs().filter(|r| name_of[&r.job.id] == job) {
            for e in &r.events {
                eprintln!("  {} {} {}", e.time_ms / 1000, e.kind, e.message);
            }
        }
    }
    let outcomes = c
        .state
        .jobs()
        .map(|r| {
            let alloc = r.job.alloc.as_ref();
            Outcome {
                name: name_of[&r.job.id].clone(),
                job_id: r.job.id,
                start_s: alloc.map(|a| a.start_ms / 1000),
                hosts: alloc.map_or_else(Vec::new, |a| a.hosts().map(str::to_string).collect()),
                end_s: (r.job.end_ms > 0).then_some(r.job.end_ms / 1000),
                state: r.job.state.slurm_name().to_string(),
            }
            .settled()
        })
        .collect();
    COVERAGE.with(|cov| cov.borrow_mut().add(&c.state));
    (outcomes, usage_by_account(&c.state.data.usage.usage))
}

/// What the seeds exercised, so a workload that stopped reaching a rule
/// (no preemption, no reclaim) fails the test instead of passing idly.
#[derive(Debug, Default)]
struct Coverage {
    gangs: u64,
    arrays: u64,
    preempted: u64,
    reclaimed: u64,
    borrowed_starts: u64,
    states: BTreeSet<&'static str>,
}

impl Coverage {
    fn add(&mut self, state: &SmState) {
        for r in state.jobs() {
            let job = &r.job;
            self.gangs += u64::from(job.spec.nodes > 1 && job.alloc.is_some());
            self.arrays += u64::from(job.spec.array_task_count > 1);
            self.reclaimed += u64::from(job.reclaims);
            self.states.insert(job.state.slurm_name());
            for e in &r.events {
                self.preempted += u64::from(e.message.starts_with("PREEMPTED"));
                self.borrowed_starts += u64::from(e.message.contains("on borrowed capacity"));
            }
        }
    }
}

thread_local! {
    static COVERAGE: std::cell::RefCell<Coverage> = std::cell::RefCell::new(Coverage::default());
}

fn compare(seed: u64) -> Result<(), String> {
    let w = workload(seed);
    let (sim, sim_usage) = by_simulator(&w);
    let (state, state_usage) = by_state_machine(&w);
    if sim.len() != state.len() {
        return Err(format!(
            "seed {seed}: {} jobs in the simulator, {} in the state machine",
            sim.len(),
            state.len()
        ));
    }
    for (a, b) in sim.iter().zip(&state) {
        if a != b {
            return Err(format!(
                "seed {seed}: job {} differs:\n  simulator:     {a:?}\n  state machine: {b:?}\n{}",
                a.name,
                side_by_side(&w, &sim, &state)
            ));
        }
    }
    // Charged at the same instants, in another order of additions.
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    let accounts: BTreeSet<&String> = sim_usage.keys().chain(state_usage.keys()).collect();
    for account in accounts {
        let (a, b) = (sim_usage.get(account), state_usage.get(account));
        let agree = match (a, b) {
            (Some(a), Some(b)) => same(a[0], b[0]) && same(a[1], b[1]),
            _ => false,
        };
        if !agree {
            return Err(format!(
                "seed {seed}: account {account}'s usage (CPU-s, node-s) differs: \
                 simulator {a:?}, state machine {b:?}"
            ));
        }
    }
    Ok(())
}

fn seeds() -> Vec<u64> {
    let Ok(text) = std::env::var("BERTH_DIFF_SEEDS") else {
        return CI_SEEDS.collect();
    };
    let (lo, hi) = text.split_once('-').unwrap_or((&text, &text));
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("BERTH_DIFF_SEEDS: expected N or N-M, not {text:?}"))
    };
    (parse(lo)..=parse(hi)).collect()
}

#[test]
fn the_simulator_and_the_state_machine_agree_on_every_job() {
    let failures: Vec<String> = seeds()
        .into_iter()
        .filter_map(|s| compare(s).err())
        .collect();
    let coverage = COVERAGE.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if std::env::var("BERTH_DIFF_SEEDS").is_err() {
        let c = &coverage;
        let reached = c.gangs > 0
            && c.arrays > 0
            && c.preempted > 0
            && c.reclaimed > 0
            && c.borrowed_starts > 0
            && [
                "COMPLETED",
                "FAILED",
                "TIMEOUT",
                "CANCELLED",
                "NODE_FAIL",
                "PREEMPTED",
            ]
            .iter()
            .all(|s| c.states.contains(s));
        assert!(
            reached,
            "the CI seeds no longer reach every rule: {coverage:?}"
        );
    }
    eprintln!("{coverage:?}");
    // The first few in full: each carries its whole workload.
    let shown: Vec<&str> = failures.iter().take(3).map(String::as_str).collect();
    assert!(
        failures.is_empty(),
        "{} seeds differ; the first {}:\n{}",
        failures.len(),
        shown.len(),
        shown.join("\n")
    );
}

/// One seed's workload and both outcomes side by side, `*` on the jobs
/// that differ: what a failure shows.
fn side_by_side(w: &Workload, sim: &[Outcome], state: &[Outcome]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for (a, b) in sim.iter().zip(state) {
        let mark = if a == b { " " } else { "*" };
        let _ = writeln!(
            out,
            "{mark} {} sim {:?} {:?} {:?} {} | state {:?} {:?} {:?} {}",
            a.name, a.start_s, a.hosts, a.end_s, a.state, b.start_s, b.hosts, b.end_s, b.state
        );
    }
    for s in &w.submits {
        let _ = writeln!(
            out,
            "submit {} at {} nodes {} cpus {} qos {:?} limit {} run {} tasks {} after {:?}",
            s.name,
            s.at_s,
            s.spec.nodes,
            s.spec.cpus,
            s.spec.qos,
            s.spec.time_limit_s,
            s.runtime_s,
            s.tasks,
            s.after
        );
    }
    let _ = writeln!(
        out,
        "hosts {:?} preemption {:?} idle-fill {}",
        w.hosts, w.preemption, w.idle_fill
    );
    for (t, e) in &w.events {
        let what = match e {
            Event::Cancel(s) => format!("cancel {s}"),
            Event::Hold(s) => format!("hold {s}"),
            Event::Release(s) => format!("release {s}"),
            Event::LimitNormal(n) => format!("limit {n}"),
            Event::PriorityOfB(p) => format!("priority of b {p}"),
            Event::Down(h) => format!("down {h}"),
            Event::Up(h) => format!("up {h}"),
        };
        let _ = writeln!(out, "event {t} {what}");
    }
    out
}
