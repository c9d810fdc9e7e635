//! `berth sim` end to end through the binary: files read, gzip decoded,
//! JSON lines on stdout, bad input refused with the file and key named.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BERTH: &str = env!("CARGO_BIN_EXE_berth");
const SCENARIOS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/tests/scenarios");
const KTH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sim/tests/data/kth-sp2-first-2000.swf"
);

fn berth(args: &[&str]) -> Output {
    Command::new(BERTH)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run berth: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_prints_the_scenario_event_stream() {
    let scenario = format!("{SCENARIOS}/easy-backfill.toml");
    let out = berth(&["sim", "run", "--scenario", &scenario]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let expected = std::fs::read_to_string(format!("{SCENARIOS}/easy-backfill.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text(&out.stdout), expected);
}

#[test]
fn unknown_keys_fail_naming_file_and_key() {
    // Every key of the format is implemented now; an unknown one is refused.
    let dir = std::env::temp_dir().join(format!("berth-sim-unknown-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let scenario = dir.join("s.toml");
    std::fs::write(&scenario, "colour = 1\n").unwrap_or_else(|e| panic!("{e}"));
    let path = scenario.display().to_string();
    let out = berth(&["sim", "run", "--scenario", &path]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!("berth: error: {path}: line 1: unknown key colour\n")
    );
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn swf_reads_gzip_like_plain_text() {
    let plain = std::fs::read(KTH).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("berth-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let gz_path = dir.join("kth.swf.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&plain).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&gz_path, gz.finish().unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    let gz_arg = gz_path.display().to_string();
    let args = |trace: &str| {
        berth(&[
            "sim",
            "swf",
            "--trace",
            trace,
            "--cpus-per-node",
            "1",
            "--policy",
            "easy",
            "--max-jobs",
            "300",
        ])
    };
    let (a, b) = (args(KTH), args(&gz_arg));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(a.status.code(), Some(0), "{}", text(&a.stderr));
    assert_eq!(b.status.code(), Some(0), "{}", text(&b.stderr));
    // Everything but the measured wall time is the same.
    let strip = |o: &Output| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
        assert!(v["sim_wall_ms"].is_u64());
        v["sim_wall_ms"] = serde_json::Value::Null;
        v
    };
    let summary = strip(&a);
    assert_eq!(summary, strip(&b));
    assert_eq!(summary["jobs"], 300);
}

#[test]
fn bench_pass_prints_one_line() {
    let out = berth(&[
        "sim",
        "bench-pass",
        "--pending",
        "200",
        "--hosts",
        "20",
        "--passes",
        "3",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (
            v["pending"].as_u64(),
            v["hosts"].as_u64(),
            v["passes"].as_u64()
        ),
        (Some(200), Some(20), Some(3))
    );
    assert!(v["started_per_pass"].as_u64().is_some_and(|n| n > 0));
    let bad = berth(&[
        "sim",
        "bench-pass",
        "--pending",
        "1",
        "--hosts",
        "1",
        "--passes",
        "0",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("--passes"));
}

#[test]
fn swf_plot_writes_an_svg_with_both_series_and_no_bar_off_a_terminal() {
    let dir = std::env::temp_dir().join(format!("berth-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let svg_path = dir.join("kth.svg");
    let svg_arg = svg_path.display().to_string();
    let out = berth(&[
        "sim",
        "swf",
        "--trace",
        KTH,
        "--cpus-per-node",
        "1",
        "--max-jobs",
        "300",
        "--plot",
        &svg_arg,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // stderr is a pipe here: no progress bar.
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\"recorded_mean_wait_s\":"), "{stdout}");
    let svg = std::fs::read_to_string(&svg_path).unwrap_or_else(|e| panic!("{e}"));
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for series in ["<polyline id=\"utilization\"", "<polyline id=\"pending\""] {
        assert!(svg.contains(series), "{series} missing");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn farm_prints_single_then_multi_path_figures() {
    let out = berth(&[
        "sim",
        "farm",
        "--groups",
        "12",
        "--long-jobs",
        "30",
        "--alternatives",
        "10",
        "--filler-jobs",
        "200",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["multi_path"].as_bool(), Some(false));
    assert_eq!(lines[1]["multi_path"].as_bool(), Some(true));
    assert_eq!(lines[1]["long_started"].as_u64(), Some(30));
    let bad = berth(&["sim", "farm", "--groups", "4", "--alternatives", "10"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(text(&bad.stderr).contains("groups >= alternatives"));
}
