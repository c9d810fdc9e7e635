//! Idle-fill on a GPU cluster with team quotas: utilization and waits
//! with idle-fill off and on (docs/idle-fill.md, "Measured"). Ignored by
//! default (it simulates a week of work three times); run with
//! `cargo test -p berth-sim --release --test idle_fill_measure -- --ignored --nocapture`.

use std::time::Instant;

use berth_scheduler::IdleFill;
use berth_sim::gpu_teams::{gpu_teams_input, wait_by_class, GpuTeams, JobWaits};
use berth_sim::simulate;

struct Run {
    label: &'static str,
    utilization: f64,
    waits: JobWaits,
    borrowed_starts: usize,
    reclaims: usize,
    wall_ms: u128,
}

fn run(cfg: &GpuTeams, label: &'static str, idle_fill: IdleFill) -> Run {
    let input = gpu_teams_input(cfg, idle_fill);
    let t0 = Instant::now();
    let out = simulate(&input).unwrap_or_else(|e| panic!("{label}: {e}"));
    Run {
        label,
        utilization: out.stats.utilization,
        waits: wait_by_class(&out.lines),
        borrowed_starts: out.stats.borrowed_starts,
        reclaims: out.stats.reclaims,
        wall_ms: t0.elapsed().as_millis(),
    }
}

/// Mean wait to the first start over the jobs `pick` takes, and how many.
fn mean_wait(w: &JobWaits, pick: &dyn Fn(&str, bool) -> bool) -> (f64, usize) {
    let waits: Vec<u64> = w
        .jobs
        .iter()
        .filter_map(|(name, (submit, start))| {
            let (at, borrowed) = (*start)?;
            pick(name, borrowed).then_some(at - submit)
        })
        .collect();
    let n = waits.len();
    (waits.iter().sum::<u64>() as f64 / n.max(1) as f64, n)
}

#[test]
#[ignore]
fn idle_fill_on_a_gpu_cluster_with_team_quotas() {
    let cfg = GpuTeams::default();
    let heavy = |name: &str| {
        let team: usize = name[1..name.find('-').unwrap_or(1)].parse().unwrap_or(0);
        team < cfg.heavy_teams
    };
    let on = IdleFill {
        enabled: true,
        ..IdleFill::default()
    };
    let runs = [
        run(&cfg, "off", IdleFill::default()),
        run(&cfg, "on", on.clone()),
        run(
            &cfg,
            "on, factor 1.0",
            IdleFill {
                max_borrow_factor: 1.0,
                ..on
            },
        ),
    ];
    let off = &runs[0];
    for r in &runs {
        // Light teams stay within their quota: every job of theirs has a
        // claim, in every run.
        let (light, light_n) = mean_wait(&r.waits, &|n, _| !heavy(n));
        let (heavy_w, heavy_n) = mean_wait(&r.waits, &|n, _| heavy(n));
        // Jobs that started on a claim in the idle-fill run, and the same
        // jobs in the run without it.
        let claim_jobs = |n: &str| {
            runs[1]
                .waits
                .jobs
                .get(n)
                .and_then(|(_, s)| *s)
                .is_some_and(|(_, b)| !b)
        };
        let (claimed, claimed_n) = mean_wait(&r.waits, &|n, _| claim_jobs(n));
        println!(
            "{{\"run\":\"{}\",\"utilization\":{},\"light_teams_mean_wait_s\":{:.1},\"light_jobs\":{},\"heavy_teams_mean_wait_s\":{:.1},\"heavy_jobs\":{},\"jobs_started_on_a_claim_mean_wait_s\":{:.1},\"those_jobs\":{},\"borrowed_starts\":{},\"reclaims\":{},\"sim_wall_ms\":{}}}",
            r.label, r.utilization, light, light_n, heavy_w, heavy_n, claimed, claimed_n,
            r.borrowed_starts, r.reclaims, r.wall_ms
        );
    }
    assert_eq!(off.borrowed_starts + off.reclaims, 0);
    assert!(runs[1].borrowed_starts > 0);
    assert!(runs[1].utilization > off.utilization);
}
