//! `berth`, the Berth CLI. Multi-call: installed (or symlinked) as `sbatch`,
//! `squeue` or `scancel` it behaves as `berth submit`, `berth queue` or
//! `berth cancel`, so Slurm users and scripts keep their commands.

mod cli;

use cli::Tool;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let tool = Tool::from_argv0(argv.first());
    let invocation = match cli::parse(tool, &argv) {
        Ok(invocation) => invocation,
        Err(err) => return cli::clap_errors::report(tool, &err),
    };
    // One thread is plenty for a handful of sequential RPCs and starts
    // faster than a pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return fail(
                tool,
                &anyhow::Error::new(err).context("cannot start the runtime"),
            )
        }
    };
    // The command's future is as large as the largest subcommand's (tens
    // of KiB), and on the main thread's stack each page it spanned was a
    // page fault at start. Boxed: 233 -> 215 page faults per `sbatch`
    // submit (`perf stat -e page-faults`).
    match runtime.block_on(Box::pin(cli::run(tool, invocation))) {
        Ok(code) => code,
        Err(err) => fail(tool, &err),
    }
}

/// Prints `prog: error: message` on one line, Slurm's style, and fails.
fn fail(tool: Tool, err: &anyhow::Error) -> ExitCode {
    eprintln!(
        "{}: error: {}",
        tool.prog(),
        cli::output::one_line(&format!("{err:#}"))
    );
    ExitCode::FAILURE
}
