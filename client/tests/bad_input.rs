//! The binary refuses bad input with one clear line and a failing exit
//! code, before (or without) reaching any cluster.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// Runs `program args` with stdin empty and no BERTH_SERVER from the
/// environment of whoever runs the tests.
fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("BERTH_SERVER")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn submit_without_a_command_is_one_line() {
    let out = run(Path::new(BERTH), &["--server", "127.0.0.1:1", "submit"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("berth: error: no command to run"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_malformed_time_names_the_time() {
    let out = run(
        Path::new(BERTH),
        &["submit", "--wrap", "true", "-t", "1:xx"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("invalid time limit \"1:xx\""), "{err}");
}

#[test]
fn a_malformed_memory_size_and_node_count_are_refused() {
    let out = run(
        Path::new(BERTH),
        &["submit", "--wrap", "true", "--mem", "lots"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid memory size \"lots\""));
    let out = run(Path::new(BERTH), &["submit", "--wrap", "true", "-N", "two"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid node count \"two\""));
}

#[test]
fn no_server_answering_is_reported_quickly() {
    let started = Instant::now();
    let out = run(Path::new(BERTH), &["--server", "127.0.0.1:1", "queue"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(
        err.trim_end(),
        "berth: error: no Berth server answered (tried 127.0.0.1:1)"
    );
}

#[test]
fn the_server_list_comes_from_the_environment() {
    let out = Command::new(BERTH)
        .args(["cluster", "status"])
        .env("BERTH_SERVER", "http://127.0.0.1:1,127.0.0.1:2")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("(tried 127.0.0.1:1, 127.0.0.1:2)"),
        "{}",
        stderr(&out)
    );
}

/// The binary under another name, through a symlink in a fresh directory.
fn linked_as(name: &str) -> std::path::PathBuf {
    // Tests run in parallel: each call gets its own directory, so one test
    // never removes the link another is about to run.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "berth-client-test-{}-{call}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let link = dir.join(name);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BERTH, &link).expect("symlink");
    link
}

#[test]
fn sbatch_speaks_getopt_for_unknown_options() {
    let sbatch = linked_as("sbatch");
    let out = run(&sbatch, &["--bogus", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("sbatch: unrecognized option '--bogus'\n"),
        "{err}"
    );
}

#[test]
fn sbatch_errors_carry_its_name() {
    let sbatch = linked_as("sbatch");
    let out = run(&sbatch, &["--wrap", "true", "-t", "soon"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("sbatch: error: invalid time limit \"soon\""));
}

#[test]
fn a_bad_sbatch_directive_is_refused_before_connecting() {
    let dir = linked_as("sbatch");
    let script = dir.with_file_name("job.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --mail-typo=x\necho hi\n").expect("write");
    let out = run(
        &dir,
        &["--server", "127.0.0.1:1", script.to_str().expect("utf-8")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim_end(),
        "sbatch: error: invalid directive found in batch script: unrecognized option '--mail-typo'"
    );
}

#[test]
fn a_bad_alternative_key_is_refused_in_sbatch_words_before_connecting() {
    let sbatch = linked_as("sbatch");
    let out = run(
        &sbatch,
        &[
            "--server",
            "127.0.0.1:1",
            "--wrap",
            "true",
            "--alt=gres=emu:zebu:2,cpu=8",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim_end(),
        "sbatch: error: invalid --alt \"gres=emu:zebu:2,cpu=8\": unknown key \"cpu\": expected gres, cpus, mem, nodes or partition"
    );
    let script = sbatch.with_file_name("alt.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --alt=cpus=0\necho hi\n").expect("write");
    let out = run(
        &sbatch,
        &["--server", "127.0.0.1:1", script.to_str().expect("utf-8")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim_end(),
        "sbatch: error: invalid --alt \"cpus=0\": cpus=0: expected a number at least 1"
    );
}

#[test]
fn squeue_takes_h_for_noheader_and_scancel_needs_ids() {
    let squeue = linked_as("squeue");
    let out = run(&squeue, &["-h", "--server", "127.0.0.1:1"]);
    assert!(
        stderr(&out).contains("no Berth server answered"),
        "{}",
        stderr(&out)
    );
    let scancel = linked_as("scancel");
    let out = run(&scancel, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with("scancel: error: "));
    // An array task (12_3) is a job reference now; a step is not.
    let out = run(&scancel, &["12.0"]);
    assert!(stderr(&out).contains("job arrays and steps are not supported yet"));
}
