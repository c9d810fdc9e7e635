//! Whether a just-submitted job could start at once: what decides if its
//! submit wakes the leader's scheduling loop before the next tick.

use berth_scheduler::{JobId, JobState};

use super::{policy_apply, SmState};

impl SmState {
    /// Whether pending job `job_id` might start now without anyone making
    /// room for it: on one of its paths, enough hosts not drained have free
    /// room covering its per-host ask (idle hosts, for an exclusive path).
    ///
    /// A necessary condition only, judged on resources alone (no liveness,
    /// GPU model, feature, partition, reservation or limit), so it errs
    /// towards true. False means a pass now would start it only by evicting
    /// work (preemption or an idle-fill reclaim); the job still gets its
    /// reason and its chance at the next tick, and anything that frees room
    /// (an exit, a new host) wakes the loop itself. True as well for a job
    /// it cannot judge (not pending, or gone). O(hosts × paths).
    pub fn may_start_without_evictions(&self, job_id: JobId, now_ms: u64) -> bool {
        let Some(record) = self.data.jobs.get(&job_id) else {
            return true;
        };
        if record.job.state != JobState::Pending {
            return true;
        }
        if record.job.held() || record.job.spec.begin_ms > now_ms {
            return false;
        }
        // Its resource paths, as the pass reads them.
        let view = policy_apply::pending_of(&record.job.spec);
        let hosts = || {
            self.data
                .hosts
                .values()
                .filter(|h| h.drain_reason.is_empty())
        };
        view.paths().iter().any(|shape| {
            let wanted = shape.hosts_needed();
            let roomy = if shape.exclusive {
                hosts().filter(|h| h.allocated.is_zero()).count()
            } else {
                hosts()
                    .filter(|h| {
                        let free = h.inventory.resources().saturating_sub(h.allocated);
                        shape.per_host.within(free)
                    })
                    .count()
            };
            roomy >= wanted
        })
    }
}

#[cfg(test)]
mod tests {
    use berth_scheduler::{HostState, Inventory, JobSpec, Resources};

    use super::super::test_support::{accepted, apply, placement, plan, register, started, submit};
    use super::super::SmState;
    use crate::command::Command;

    fn cpus(n: u32, nodes: u32) -> JobSpec {
        JobSpec {
            user: "u".into(),
            command: "true".into(),
            cpus: n,
            mem_mb: 100,
            nodes,
            ..JobSpec::default()
        }
    }

    #[test]
    fn no_host_means_no_start_without_evictions() {
        let mut s = SmState::default();
        let id = accepted(submit(&mut s, "r1", cpus(1, 1)));
        assert!(!s.may_start_without_evictions(id, 10));
        // A job it cannot judge is taken to need a pass.
        assert!(s.may_start_without_evictions(id + 100, 10));
    }

    #[test]
    fn free_room_on_enough_hosts_is_needed() {
        let mut s = SmState::default();
        register(&mut s, "h1", Inventory::cpu_mem(8, 4096));
        register(&mut s, "h2", Inventory::cpu_mem(8, 4096));
        let small = accepted(submit(&mut s, "r1", cpus(6, 1)));
        let too_big = accepted(submit(&mut s, "r2", cpus(9, 1)));
        let gang = accepted(submit(&mut s, "r3", cpus(4, 2)));
        let wide = accepted(submit(&mut s, "r4", cpus(1, 3)));
        assert!(s.may_start_without_evictions(small, 10));
        assert!(!s.may_start_without_evictions(too_big, 10));
        assert!(s.may_start_without_evictions(gang, 10));
        assert!(!s.may_start_without_evictions(wide, 10));
        // 6 of h1's 8 CPUs taken: the 2-host gang of 4 no longer fits.
        let taken = Resources {
            cpus: 6,
            mem_mb: 100,
            ..Resources::default()
        };
        assert_eq!(
            started(apply(
                &mut s,
                plan(vec![placement(small, "h1", taken, "", 0)], Vec::new())
            )),
            1
        );
        assert!(!s.may_start_without_evictions(gang, 10));
        // Started: no longer pending, so not judged here.
        assert!(s.may_start_without_evictions(small, 10));
    }

    #[test]
    fn held_later_exclusive_and_drained_jobs_and_hosts() {
        let mut s = SmState::default();
        register(&mut s, "h1", Inventory::cpu_mem(8, 4096));
        let held = accepted(submit(
            &mut s,
            "r1",
            JobSpec {
                hold: true,
                ..cpus(1, 1)
            },
        ));
        let later = accepted(submit(
            &mut s,
            "r2",
            JobSpec {
                begin_ms: 5_000,
                ..cpus(1, 1)
            },
        ));
        assert!(!s.may_start_without_evictions(held, 10));
        assert!(!s.may_start_without_evictions(later, 10));
        assert!(s.may_start_without_evictions(later, 5_000));
        let whole = accepted(submit(
            &mut s,
            "r3",
            JobSpec {
                exclusive: true,
                ..cpus(1, 1)
            },
        ));
        assert!(s.may_start_without_evictions(whole, 10));
        apply(
            &mut s,
            Command::RegisterHost {
                name: "h1".into(),
                inventory: Inventory::cpu_mem(8, 4096),
                agent_restarted: false,
                running_allocs: Vec::new(),
                now_ms: 20,
                drain_reason: "maintenance".into(),
                step_addr: String::new(),
            },
        );
        assert_eq!(
            s.scheduler_snapshot(|_| HostState::Up).hosts[0].state,
            HostState::Drain
        );
        assert!(!s.may_start_without_evictions(whole, 10));
    }
}
