//! Scenario files run through the simulator, compared byte for byte with
//! the event streams worked out by hand (see tests/scenarios/README.md).

use berth_sim::run_scenario;

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
scenario!(qos_preemption_requeues_the_background_run, "preempt-urgent");
scenario!(
    jobs_that_did_not_opt_in_are_never_evicted,
    "preempt-opt-in-off"
);
scenario!(preemption_is_off_by_default, "preempt-disabled-default");
scenario!(
    victims_run_their_minimum_runtime_first,
    "preempt-min-runtime"
);
scenario!(victims_within_the_gap_are_near_misses, "preempt-gap");
scenario!(
    below_the_threshold_nothing_is_evicted,
    "preempt-threshold-below"
);
scenario!(
    at_the_threshold_the_victim_is_evicted,
    "preempt-threshold-above"
);
scenario!(qos_cancel_mode_ends_the_victim, "preempt-cancel-mode");
scenario!(
    an_eviction_that_does_not_help_is_not_made,
    "preempt-no-help"
);
scenario!(most_recently_started_goes_among_equals, "preempt-ties");
scenario!(gang_victims_are_stopped_whole, "preempt-gang-victim");
scenario!(
    several_victims_per_pass_bounded_by_the_tick,
    "preempt-multi-victim"
);
scenario!(
    account_preempt_lists_allow_other_groups,
    "preempt-account-lists"
);
scenario!(victims_get_their_grace_and_stop_time, "preempt-grace-stop");
scenario!(
    exempt_time_qos_over_global_partition_qos_first,
    "preempt-exempt-precedence"
);
scenario!(
    partition_preempt_mode_off_shields_its_jobs,
    "preempt-partition-off"
);
scenario!(
    one_victim_per_blocked_job_by_default,
    "preempt-single-victim-miss"
);
scenario!(
    idle_fill_borrow_factor_caps_loans,
    "idle-fill-borrow-factor"
);
scenario!(
    idle_fill_reclaims_several_borrowed_jobs_together,
    "idle-fill-reclaim-together"
);
scenario!(
    idle_fill_exempt_window_doubles_per_reclaim,
    "idle-fill-exempt-doubling"
);
scenario!(
    idle_fill_claim_that_cannot_fit_evicts_nothing,
    "idle-fill-claim-never-fits"
);
scenario!(idle_fill_two_qos_borrow_at_once, "idle-fill-two-qos");
scenario!(
    idle_fill_reclaims_a_borrowed_gang_whole,
    "idle-fill-gang-victim"
);
scenario!(
    idle_fill_preempt_mode_off_still_reclaims_borrowed_runs,
    "idle-fill-preempt-off"
);
scenario!(
    idle_fill_never_lends_without_a_time_limit,
    "idle-fill-no-time-limit"
);
scenario!(
    idle_fill_cluster_fraction_tighter_than_factor,
    "idle-fill-fraction-tighter"
);
scenario!(
    idle_fill_factor_tighter_than_cluster_fraction,
    "idle-fill-factor-tighter"
);
scenario!(
    idle_fill_lowered_ceiling_refuses_loans_evicts_nothing,
    "idle-fill-ceiling-lowered"
);
scenario!(
    idle_fill_needs_the_node_cap_to_be_the_only_limit,
    "idle-fill-other-limit"
);
scenario!(
    idle_fill_reclaims_the_cheapest_run_first,
    "idle-fill-burst-first"
);
scenario!(
    idle_fill_opportunistic_jobs_displace_only_cheaper_runs,
    "idle-fill-opportunistic-tier"
);
scenario!(
    idle_fill_borrowers_last_and_without_reservations,
    "idle-fill-borrowers-last"
);
scenario!(
    idle_fill_recovers_only_hosts_whose_jobs_are_all_reclaimable,
    "idle-fill-shared-host"
);
scenario!(
    idle_fill_deep_queues_drop_lending_first,
    "idle-fill-deep-queue"
);
scenario!(
    maintenance_blocks_an_overrun_and_lets_a_short_job_in,
    "resv-maint-window"
);
scenario!(maintenance_holds_the_fifo_queue, "resv-maint-fifo");
scenario!(reservation_for_a_user_and_its_refusals, "resv-users");
scenario!(reservation_for_an_account_with_a_gang, "resv-accounts-gang");
scenario!(
    reservation_jobs_run_past_the_window_not_into_another,
    "resv-past-window"
);
scenario!(
    requires_reservation_at_submit_and_in_the_pass,
    "resv-requires-reservation"
);
scenario!(
    multipath_an_alternative_frees_while_another_is_reserved,
    "multipath-alt-frees"
);
scenario!(
    single_path_is_locked_to_its_earliest_alternative,
    "multipath-off-lock-in"
);
scenario!(
    multipath_falls_back_after_max_reserve_time,
    "multipath-max-reserve-time"
);
scenario!(multipath_only_for_the_top_n, "multipath-top-n");
scenario!(
    an_alternative_runs_in_its_own_partition_and_only_there,
    "alternative-partition"
);
scenario!(
    multipath_holds_alternatives_under_their_own_partitions,
    "multipath-own-partitions"
);
scenario!(multipath_within_the_backfill_window, "multipath-bf-window");
scenario!(multipath_first_listed_wins_a_tie, "multipath-same-instant");
scenario!(
    multipath_backfill_before_each_alternatives_start,
    "multipath-backfill-before-start"
);
scenario!(
    multipath_is_opt_in_per_partition,
    "multipath-partition-opt-in"
);

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
fn every_key_of_the_format_is_implemented() {
    // The value that means "off" is accepted, and so is every other.
    let off = format!("[scheduler]\npreemption_enabled = false\n{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\npreemptible = false\n");
    assert!(run_scenario(&off, "s.toml").is_ok());
    // A job naming a reservation the scenario lacks is refused at submit.
    let resv =
        format!("{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\nreservation = \"maint\"\n");
    let out = run_scenario(&resv, "s.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        out.lines().next(),
        Some("{\"t_s\":0,\"event\":\"rejected\",\"job\":\"a\",\"error\":\"Requested reservation is invalid: no reservation named maint\"}")
    );
}

#[test]
fn suspend_and_unknown_preempt_names_are_refused() {
    assert_eq!(
        error_of(&format!("[[qos]]\nname = \"s\"\npreempt_mode = \"suspend\"\n{BASE}")),
        "s.toml: qos[0].preempt_mode: expected requeue or cancel, not \"suspend\" (suspend is not supported: this scheduler does not stop and continue jobs, and a suspended job would keep its allocation)"
    );
    assert_eq!(
        error_of(&format!(
            "[[qos]]\nname = \"s\"\npreempt = [\"gold\"]\n{BASE}"
        )),
        "s.toml: qos[0].preempt: expected names of [[qos]], not \"gold\""
    );
    assert_eq!(
        error_of(&format!("[scheduler]\npreemption_threshold = 101\n{BASE}")),
        "s.toml: scheduler.preemption_threshold: expected a percentage of utilization from 0 to 100"
    );
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
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\nalternatives = [{{ cpus = 1, partition = \"gpu\" }}]\n"
        )),
        "s.toml: jobs[0] (id \"a\").alternatives[0].partition: expected a name of [[partitions]], not \"gpu\""
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
        "s.toml: line 3: qos[0].grp_tres.gpus: expected a TRES key: node, cpu, mem_mb, gpu or emu"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\narray = \"5-1\"\n"
        )),
        "s.toml: jobs[0] (id \"a\").array: expected --array \"5-1\": range 5-1 goes down (expected e.g. 0-15%4, 1,3,5 or 0-15:4)"
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
        "s.toml: line 1: unknown key colour"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = 0\nuser = \"u1\"\ncpu = 2\n"
        )),
        "s.toml: line 13: unknown key jobs[0] (id \"a\").cpu"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[jobs]]\nid = \"a\"\nat_s = -5\nuser = \"u1\"\n"
        )),
        "s.toml: line 11: jobs[0] (id \"a\").at_s: expected a whole number >= 0"
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

#[test]
fn idle_fill_settings_out_of_range_name_the_key() {
    assert_eq!(
        error_of(&format!(
            "[scheduler]\nidle_fill_max_cluster_fraction = 1.5\n{BASE}"
        )),
        "s.toml: scheduler.idle_fill_max_cluster_fraction: expected a share of the hosts between 0 and 1"
    );
    assert_eq!(
        error_of(&format!(
            "[scheduler]\nidle_fill_max_borrow_factor = -2.0\n{BASE}"
        )),
        "s.toml: scheduler.idle_fill_max_borrow_factor: expected a number >= 0"
    );
    assert_eq!(
        error_of(&format!(
            "[scheduler]\nidle_fill_exempt_secs = 3601\n{BASE}"
        )),
        "s.toml: scheduler.idle_fill_exempt_secs: expected a number of seconds <= 3600"
    );
    assert_eq!(
        error_of(&format!("[scheduler]\nidle_fill_enabled = 1\n{BASE}")),
        "s.toml: line 2: scheduler.idle_fill_enabled: expected true or false"
    );
    assert_eq!(
        error_of(&format!(
            "{BASE}[[qos]]\nname = \"burst\"\nidle_fill_preemptable = \"yes\"\n"
        )),
        "s.toml: line 11: qos[0].idle_fill_preemptable: expected true or false"
    );
}

#[test]
fn bad_reservations_name_the_key() {
    let window = |body: &str| format!("{BASE}[[reservations]]\n{body}\n");
    assert_eq!(
        error_of(&window(
            "name = \"r\"\nhosts = \"n9\"\nstart_s = 0\nduration_s = 10"
        )),
        "s.toml: reservations[0].hosts: expected hosts of [[hosts]], not \"n9\""
    );
    assert_eq!(
        error_of(&window(
            "name = \"r\"\nhosts = \"n1\"\nstart_s = 0\nduration_s = 0"
        )),
        "s.toml: reservations[0].duration_s: expected a duration in seconds >= 1"
    );
    assert_eq!(
        error_of(&window(
            "name = \"r\"\nhosts = \"n1\"\nstart_s = 0\nduration_s = 10\nusers = [\"zed\"]"
        )),
        "s.toml: reservations[0].users: expected users named in [[accounts]], not \"zed\""
    );
    assert_eq!(
        error_of(&window(
            "name = \"r\"\nhosts = \"n1\"\nstart_s = 0\nduration_s = 10\nflags = [\"MAINT\"]"
        )),
        "s.toml: line 14: unknown key reservations[0].flags"
    );
    let two = format!(
        "{BASE}[[reservations]]\nname = \"a\"\nhosts = \"n[1-2]\"\nstart_s = 0\nduration_s = 100\n\
         [[reservations]]\nname = \"b\"\nhosts = \"n2\"\nstart_s = 99\nduration_s = 10\n"
    );
    assert_eq!(
        error_of(&two),
        "s.toml: reservations[1]: expected a window that does not overlap another on the same host; b overlaps a on n2"
    );
    // Back to back on one host is fine.
    let adjacent = two.replace("start_s = 99", "start_s = 100");
    assert!(run_scenario(&adjacent, "s.toml").is_ok());
}

/// `singleton` waits only for jobs of the same job name and the same user
/// (Slurm's rule, the live cluster's too): another user's job of that
/// name, or the same user's job of another name, does not hold it back.
#[test]
fn singleton_matches_job_name_and_user() {
    let job = |id: &str, name: &str, user: &str, dep: &str| {
        format!(
            "[[jobs]]\nid = \"{id}\"\nname = \"{name}\"\nat_s = 0\nuser = \"{user}\"\ncpus = 1\ntime_limit_s = 100\nruntime_s = 10\n{dep}"
        )
    };
    let base = "until_s = 1000\n[[hosts]]\nnames = \"n[1-2]\"\ncpus = 4\n\n[[accounts]]\nname = \"lab\"\nusers = [\"u1\", \"u2\"]\n";
    let text = format!(
        "{base}{}{}{}{}",
        job("first", "train", "u2", ""),
        job("other", "eval", "u1", ""),
        job("single", "train", "u1", "dependency = \"singleton\"\n"),
        job("second", "train", "u1", "dependency = \"singleton\"\n"),
    );
    let out = run_scenario(&text, "s.toml").unwrap_or_else(|e| panic!("{e}"));
    // u2's train and u1's eval run beside "single" at 0; "second" (same
    // name and user as "single", submitted after it) waits for it.
    for started in ["first", "other", "single"] {
        let line = format!("{{\"t_s\":0,\"event\":\"start\",\"job\":\"{started}\"");
        assert!(out.contains(&line), "{started} did not start at 0:\n{out}");
    }
    assert!(
        out.contains(
            "{\"t_s\":0,\"event\":\"pending\",\"job\":\"second\",\"reason\":\"Dependency\"}"
        ),
        "{out}"
    );
    assert!(
        out.contains("{\"t_s\":10,\"event\":\"start\",\"job\":\"second\""),
        "{out}"
    );
}

/// Each task of an array counts as a job against the submit limits, as in
/// Slurm, and an array that would pass a limit is refused whole.
#[test]
fn an_array_is_refused_whole_by_the_submit_limits() {
    let text = "until_s = 1000\n[[hosts]]\nnames = \"n1\"\ncpus = 8\n\n\
        [[qos]]\nname = \"team\"\nmax_submit_jobs_per_user = 3\n\n\
        [[accounts]]\nname = \"lab\"\nusers = [\"u1\"]\nqos = [\"team\"]\n\n\
        [[jobs]]\nid = \"four\"\nat_s = 0\nuser = \"u1\"\nqos = \"team\"\ncpus = 1\ntime_limit_s = 100\nruntime_s = 10\narray = \"0-3\"\n\n\
        [[jobs]]\nid = \"three\"\nat_s = 1\nuser = \"u1\"\nqos = \"team\"\ncpus = 1\ntime_limit_s = 100\nruntime_s = 10\narray = \"0-2\"\n";
    let out = run_scenario(text, "s.toml").unwrap_or_else(|e| panic!("{e}"));
    let rejected: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("\"event\":\"rejected\""))
        .collect();
    assert_eq!(rejected.len(), 4, "every task of the 4-task array: {out}");
    assert!(
        rejected[0].contains("jobs submitted by user u1 0 + 4 > 3 (QOS team MaxSubmitJobsPerUser)"),
        "{}",
        rejected[0]
    );
    for task in 0..3 {
        let line = format!("\"event\":\"submit\",\"job\":\"three_{task}\"");
        assert!(out.contains(&line), "three_{task} was not submitted: {out}");
    }
}
