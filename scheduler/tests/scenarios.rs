//! Scenario files run through the simulator, compared byte for byte with
//! the event streams worked out by hand (see tests/scenarios/README.md).

use berth_scheduler::sim::run_scenario;

macro_rules! scenario {
    ($(#[$attr:meta])* $test:ident, $name:literal) => {
        #[test]
        $(#[$attr])*
        fn $test() {
            let toml = include_str!(concat!("scenarios/", $name, ".toml"));
            let expected = include_str!(concat!("scenarios/", $name, ".jsonl"));
            let file = concat!($name, ".toml");
            let got = run_scenario(toml, file).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                got, expected,
                "{file}: output differs from the expected stream"
            );
            // Deterministic: a second run gives the same bytes.
            assert_eq!(run_scenario(toml, file).ok(), Some(got));
        }
    };
}

scenario!(
    easy_backfill_starts_c_in_the_gap_and_d_after_b,
    "easy-backfill"
);
scenario!(
    fifo_without_backfill_holds_everything_behind_the_head,
    "fifo-no-backfill"
);
scenario!(gangs_start_whole_or_not_at_all, "gang-all-or-nothing");
scenario!(exclusive_jobs_take_whole_hosts, "exclusive-vs-shared");
scenario!(
    jobs_without_a_limit_get_only_room_the_head_does_not_need,
    "no-time-limit"
);
scenario!(
    one_reservation_lets_the_second_job_be_pushed_back,
    "bf-reservations-1"
);
scenario!(two_reservations_protect_the_second_job, "bf-reservations-2");
scenario!(cancel_pending_running_and_finished_jobs, "cancel");
scenario!(impossible_jobs_wait_without_blocking, "impossible");
scenario!(held_jobs_wait_until_released, "held");
scenario!(a_job_ending_early_frees_its_host_early, "runtime-shorter");
scenario!(a_job_past_its_limit_ends_timeout, "timeout");
scenario!(
    partition_max_time_is_default_and_ceiling,
    "partition-limits"
);
scenario!(qos_node_limit_waits_without_blocking, "qos-grp-node");
scenario!(qos_gpu_limit_counts_gpus_in_use, "qos-grp-gpu");
scenario!(
    parent_account_cpu_limit_holds_its_children,
    "assoc-parent-cpu"
);
scenario!(grp_jobs_and_max_jobs_per_user, "grp-jobs-per-user");
scenario!(
    max_wall_and_limits_never_met_wait_for_good,
    "max-wall-never"
);
scenario!(deny_on_limit_rejects_at_submit, "deny-on-limit");
scenario!(
    partition_qos_comes_first_unless_over_part_qos,
    "partition-qos"
);
scenario!(qos_account_user_and_age_order_the_queue, "priority-factors");
scenario!(nice_lowers_and_raises_within_max_priority, "nice");
scenario!(the_account_that_used_less_goes_first, "fairshare");
scenario!(least_served_account_breaks_priority_ties, "least-served");
scenario!(afterok_afternotok_afterany_singleton, "dependencies");
scenario!(array_max_limits_running_tasks, "array-max");
scenario!(begin_time_and_hold_release, "begin-hold");
scenario!(gpu_type_and_emulators_choose_hosts, "gpu-type-emulators");
scenario!(first_alternative_that_fits_now_wins, "alternatives");
scenario!(
    first_partition_that_can_run_the_job_wins,
    "several-partitions"
);
scenario!(
    set_priority_and_modify_qos_events,
    "set-priority-modify-qos"
);
scenario!(host_down_ends_its_jobs_node_fail, "host-down");
scenario!(grp_tres_mins_with_and_without_decay, "grp-tres-mins");
scenario!(no_reservation_beyond_the_backfill_window, "bf-window");
scenario!(bf_max_job_test_bounds_backfill_tries, "bf-max-job-test");
scenario!(max_jobs_per_pass_bounds_a_pass, "max-jobs-per-pass");

fn error_of(toml: &str) -> String {
    match run_scenario(toml, "s.toml") {
        Ok(out) => panic!("expected an error, got output:\n{out}"),
        Err(e) => e.to_string(),
    }
}

const BASE: &str = r#"
[[hosts]]
names = "n[1-2]"
cpus = 4

[[accounts]]
name = "lab"
users = ["u1"]
"#;

#[test]
fn features_not_implemented_yet_are_refused_by_name() {
    let idle = include_str!("scenarios/unsupported/idle-fill-borrow-factor.toml");
    assert_eq!(
        run_scenario(idle, "idle-fill-borrow-factor.toml")
            .unwrap_err()
            .to_string(),
        "idle-fill-borrow-factor.toml: scheduler.idle_fill_enabled is not supported by this simulator yet"
    );
    let preempt = include_str!("scenarios/unsupported/preempt-urgent.toml");
    assert_eq!(
        run_scenario(preempt, "preempt-urgent.toml")
            .unwrap_err()
            .to_string(),
        "preempt-urgent.toml: scheduler.preemption_enabled is not supported by this simulator yet"
    );
    let reservation =
        format!("{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\nreservation = \"maint\"\n");
    assert_eq!(
        error_of(&reservation),
        "s.toml: jobs[0] (id \"a\").reservation is not supported by this simulator yet"
    );
    // The value that means "off" is accepted: nothing is being ignored.
    let off = format!("[scheduler]\npreemption_enabled = false\n{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\npreemptible = false\n");
    assert!(run_scenario(&off, "s.toml").is_ok());
}

#[test]
fn impossible_requests_and_unknown_names_are_errors() {
    assert_eq!(
        error_of(&format!("{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\ngpus = 2\n")),
        "s.toml: jobs[0] (id \"a\"): expected resources some hosts of the scenario could hold (no host group has enough of what it asks, of its kind, in its partition)"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\nqos = \"gold\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").qos: expected a name of [[qos]], not \"gold\""
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\naccount = \"chem\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").account: expected a name of [[accounts]], not \"chem\""
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\npartition = \"gpu\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").partition: expected a name of [[partitions]], not \"gpu\""
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\ndependency = \"afterok:b\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").dependency: expected ids of [[jobs]] after the kind, not \"b\""
    );
    assert_eq!(
        error_of(&format!("[[qos]]\nname = \"q\"\nflags = [\"Fast\"]\n{BASE}")),
        "s.toml: qos[0].flags: expected Slurm QOS flags (DenyOnLimit, NoReserve, OverPartQOS, PartitionMaxNodes, PartitionMinNodes, PartitionTimeLimit, RequiresReservation, Relative, UsageFactorSafe, NoDecay, EnforceUsageThreshold), not \"Fast\""
    );
    assert_eq!(
        error_of(&format!(
            "[[qos]]\nname = \"q\"\ngrp_tres = {{ gpus = 4 }}\n{BASE}"
        )),
        "s.toml: qos[0].grp_tres.gpus: expected a TRES key: node, cpu, mem_mb, gpu or emu"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\narray = \"5-1\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").array: expected a range low-high with low <= high, not \"5-1\""
    );
    assert_eq!(
        error_of(&format!("{BASE}[[events]]\nat_s = 1\naction = \"reboot\"\n")),
        "s.toml: events[0].action: expected one of cancel, release, hold, host_down, host_up, modify_qos, set_priority"
    );
}

#[test]
fn unknown_keys_and_bad_values_name_file_key_and_expectation() {
    assert_eq!(
        error_of(&format!("colour = 1\n{BASE}")),
        "s.toml: unknown key colour"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\ncpu = 2\n"
        )),
        "s.toml: unknown key jobs[0] (id \"a\").cpu"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = -5\nuser = \"u1\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").at_s: expected a whole number >= 0"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"zed\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").user: expected a user named in [[accounts]], not \"zed\""
    );
    assert_eq!(
        error_of("[[hosts]]\nnames = \"n[3-1]\"\ncpus = 4\n"),
        "s.toml: hosts[0].names: expected a range of numbers such as 1-4 or 01-16 in \"n[3-1]\", not \"3-1\""
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[events]]\nat_s = 1\naction = \"cancel\"\njob = \"nobody\"\n"
        )),
        "s.toml: events[0].job: expected the id of a [[jobs]] entry, not \"nobody\""
    );
    assert!(error_of("until_s = [").starts_with("s.toml: not valid TOML: "));
}
