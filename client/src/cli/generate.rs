//! Shell completions and man pages, generated from the same clap
//! definitions that parse the command line, so they cannot drift.

use super::{Tool, ALL_TOOLS};
use anyhow::{bail, Context as _, Result};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
    /// Completions for this name of the binary (berth, sbatch, squeue, ...)
    #[arg(long, value_name = "NAME", default_value = "berth")]
    pub tool: String,
}

#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    /// Directory to write the pages into (berth.1, berth-submit.1, sbatch.1, ...)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// The clap command of a tool, as it parses.
pub fn command_of(tool: Tool) -> clap::Command {
    match tool {
        Tool::Berth => super::BerthCli::command(),
        Tool::Sbatch => super::SbatchCli::command(),
        Tool::Srun => super::SrunCli::command(),
        Tool::Salloc => super::SallocCli::command(),
        Tool::Squeue => super::SqueueCli::command(),
        Tool::Scancel => super::ScancelCli::command(),
        Tool::Sacct => super::SacctCli::command(),
        Tool::Sacctmgr => super::SacctmgrCli::command(),
        Tool::Scontrol => super::ScontrolCli::command(),
        Tool::Sinfo => super::SinfoCli::command(),
        Tool::Sprio => super::SprioCli::command(),
    }
}

pub fn completions(args: CompletionsArgs) -> Result<ExitCode> {
    let Some(tool) = ALL_TOOLS.iter().find(|t| t.prog() == args.tool) else {
        let names: Vec<&str> = ALL_TOOLS.iter().map(|t| t.prog()).collect();
        bail!(
            "unknown tool \"{}\": expected one of {}",
            args.tool,
            names.join(", ")
        );
    };
    let mut command = command_of(*tool);
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, tool.prog(), &mut out);
    super::output::emit(&String::from_utf8_lossy(&out))?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `berth.1`, a page per berth subcommand (`berth-submit.1`) and a
/// page per Slurm name (`sbatch.1`); returns the paths written.
pub fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut write = |name: &str, command: clap::Command| -> Result<()> {
        let mut bytes = Vec::new();
        clap_mangen::Man::new(command)
            .render(&mut bytes)
            .with_context(|| format!("cannot render the {name} page"))?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let berth = super::BerthCli::command();
    for sub in berth.get_subcommands() {
        // clap names commands with 'static strings; these few page names
        // live as long as the process anyway.
        let name: &'static str = Box::leak(format!("berth-{}", sub.get_name()).into_boxed_str());
        write(name, sub.clone().name(name))?;
    }
    write("berth", berth)?;
    for tool in ALL_TOOLS.iter().filter(|t| **t != Tool::Berth) {
        write(tool.prog(), command_of(*tool))?;
    }
    Ok(written)
}

pub fn man(args: ManArgs) -> Result<ExitCode> {
    let written = write_man_pages(&args.dir)?;
    eprintln!(
        "wrote {} man pages to {}",
        written.len(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_completions_and_a_page() {
        for tool in ALL_TOOLS {
            let mut command = command_of(tool);
            let mut out = Vec::new();
            clap_complete::generate(Shell::Bash, &mut command, tool.prog(), &mut out);
            let text = String::from_utf8_lossy(&out);
            assert!(
                text.contains(&format!("complete -F _{}", tool.prog())),
                "{}",
                tool.prog()
            );
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let written = write_man_pages(dir.path()).expect("pages");
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        for name in [
            "berth.1",
            "berth-submit.1",
            "berth-sacct.1",
            "sbatch.1",
            "squeue.1",
            "sacctmgr.1",
            "srun.1",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        let sbatch = std::fs::read_to_string(dir.path().join("sbatch.1")).expect("read");
        assert!(sbatch.contains(".TH sbatch 1"), "{sbatch}");
        assert!(sbatch.contains("cpus\\-per\\-task"), "{sbatch}");
    }
}
