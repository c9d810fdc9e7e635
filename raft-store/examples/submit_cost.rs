//! What one `SubmitJob` costs in `apply` as the queue grows, with and
//! without a submit limit set (a `MaxSubmitJobsPerUser` QOS), on the real
//! state machine in memory (no disk). Prints the mean per submit over each
//! block of submits:
//!
//!   cargo run --release -p berth-raft-store --example submit_cost -- [JOBS] [BLOCK]
//!
//! (defaults 20,000 and 5,000). A cost that grows with the queue is a
//! per-submit walk of the unfinished jobs.

use std::time::Instant;

use berth_scheduler::{Account, JobSpec, Limits, Qos};
use berth_state::policy::PolicyChange;
use berth_state::Command;
use berth_state::{Dirty, SmState};

fn arg(n: usize, default: u32) -> u32 {
    std::env::args()
        .nth(n)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("argument {n}: a number, not {a:?}"))
        })
        .unwrap_or(default)
}

fn run(jobs: u32, block: u32, submit_limit: bool) {
    let mut s = SmState::default();
    let qos = Qos {
        name: "normal".into(),
        limits: Limits {
            max_submit_jobs_per_user: submit_limit.then_some(u32::MAX),
            ..Default::default()
        },
        ..Default::default()
    };
    let account = Account {
        name: "lab".into(),
        users: vec!["alice".into()],
        ..Default::default()
    };
    for change in [
        PolicyChange::UpsertQos(qos),
        PolicyChange::UpsertAccount(account),
    ] {
        s.apply(
            &Command::SetPolicy { change, now_ms: 1 },
            &mut Dirty::default(),
        );
    }
    let spec = JobSpec {
        user: "alice".into(),
        command: "python train.py".into(),
        cpus: 8,
        gres: vec!["gpu:1".into()],
        ..JobSpec::default()
    };
    let label = if submit_limit { "with" } else { "without" };
    let mut started = Instant::now();
    for i in 0..jobs {
        let command = Command::SubmitJob {
            request_id: format!("r{i}"),
            spec: spec.clone(),
            now_ms: 2,
        };
        s.apply(&command, &mut Dirty::default());
        if (i + 1) % block == 0 {
            let per_submit_us = started.elapsed().as_secs_f64() * 1e6 / f64::from(block);
            println!(
                "{label} a submit limit: submits {}-{}: {per_submit_us:.1} us per submit",
                i + 2 - block,
                i + 1
            );
            started = Instant::now();
        }
    }
}

fn main() {
    let jobs = arg(1, 20_000);
    let block = arg(2, 5_000).max(1);
    run(jobs, block, false);
    run(jobs, block, true);
}
