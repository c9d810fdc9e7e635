//! The emulator-farm measurement of multi-path reservations: the same
//! seeded farm (64 groups, long exclusive jobs with 12 alternatives, small
//! filler jobs) with `reserve_all_alternatives` off and on.

use berth_sim::farm::{run_farm, FarmConfig, FarmFigures};

fn both(config: &FarmConfig) -> (FarmFigures, FarmFigures) {
    let single = run_farm(config, false).unwrap_or_else(|e| panic!("{e}"));
    let multi = run_farm(config, true).unwrap_or_else(|e| panic!("{e}"));
    (single, multi)
}

/// A small farm, in every test run: every long job runs either way, only
/// multi-path writes dispatch lines, and a second run gives the same.
#[test]
fn small_farm_runs_both_ways_deterministically() {
    let config = FarmConfig {
        groups: 16,
        long_jobs: 60,
        filler_jobs: 500,
        span_s: 43_200,
        ..FarmConfig::default()
    };
    let (single, multi) = both(&config);
    assert_eq!(single.long_started, 60);
    assert_eq!(multi.long_started, 60);
    assert_eq!(single.multi_path_dispatches, 0);
    assert!(multi.multi_path_dispatches > 0);
    assert_eq!(run_farm(&config, true).ok(), Some(multi));
}

/// The measurement docs/multi-path.md reports (about a minute in release):
/// `cargo test -p berth-sim --release --test farm -- --ignored --nocapture`
#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn multi_path_on_a_64_group_emulator_farm() {
    for (bf_reservations, top_n) in [(1, 1), (4, 4)] {
        let config = FarmConfig {
            bf_reservations,
            top_n,
            ..FarmConfig::default()
        };
        let (single, multi) = both(&config);
        println!("bf_reservations={bf_reservations} top_n={top_n}");
        println!("{}", serde_json::to_string(&single).unwrap_or_default());
        println!("{}", serde_json::to_string(&multi).unwrap_or_default());
        assert_eq!(single.long_started, config.long_jobs as usize);
        assert_eq!(multi.long_started, config.long_jobs as usize);
    }
}
