//! Argument errors in Slurm's words. An unknown option reads exactly as
//! sbatch's getopt puts it (`sbatch: unrecognized option '--foo'`), so
//! wrappers that grep for it keep working; every other mistake is one
//! `prog: error: ...` line. Exit code 1, as Slurm's tools use.

use super::Tool;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::process::ExitCode;

/// What to print for a clap error, and where.
#[derive(Debug, PartialEq, Eq)]
pub enum Report {
    /// Help or version asked for: clap's own text on stdout, success.
    Display,
    /// Help shown because a subcommand was missing: stderr, failure.
    HelpInstead,
    /// These lines on stderr, failure.
    Lines(Vec<String>),
}

/// Prints the error as [`describe`] says and returns the exit code.
pub fn report(tool: Tool, err: &clap::Error) -> ExitCode {
    match describe(tool, err) {
        Report::Display => {
            // A closed stdout is no reason to fail `--help | head`.
            let _ = err.print();
            ExitCode::SUCCESS
        }
        Report::HelpInstead => {
            eprint!("{}", err.render());
            ExitCode::FAILURE
        }
        Report::Lines(lines) => {
            for line in lines {
                eprintln!("{line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Decides what a clap error should look like for `tool`.
pub fn describe(tool: Tool, err: &clap::Error) -> Report {
    let prog = tool.prog();
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Report::Display,
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Report::HelpInstead,
        ErrorKind::UnknownArgument => match unknown_argument(err) {
            Some(arg) if arg.starts_with('-') => Report::Lines(vec![
                format!("{prog}: unrecognized option '{arg}'"),
                format!("Try \"{prog} --help\" for more information"),
            ]),
            Some(arg) => Report::Lines(vec![format!("{prog}: error: unexpected argument '{arg}'")]),
            None => Report::Lines(vec![format!("{prog}: error: {}", first_line(err))]),
        },
        _ => Report::Lines(vec![format!("{prog}: error: {}", first_line(err))]),
    }
}

/// The error as a phrase without a program name, for errors found in
/// `#SBATCH` lines: "unrecognized option '--foo'" or clap's message.
pub fn phrase(err: &clap::Error) -> String {
    if err.kind() != ErrorKind::UnknownArgument {
        return first_line(err);
    }
    match unknown_argument(err) {
        Some(arg) if arg.starts_with('-') => format!("unrecognized option '{arg}'"),
        Some(arg) => format!("unexpected argument '{arg}'"),
        None => first_line(err),
    }
}

/// The offending word of an unknown-argument error, without any `=value`.
fn unknown_argument(err: &clap::Error) -> Option<String> {
    match err.get(ContextKind::InvalidArg)? {
        ContextValue::String(arg) => {
            let name = match arg.split_once('=') {
                Some((name, _)) if arg.starts_with("--") => name,
                _ => arg.as_str(),
            };
            Some(name.to_string())
        }
        _ => None,
    }
}

/// clap's message without its "error: " prefix, tips and usage: its first
/// paragraph folded onto one line (a missing argument's name is on the
/// line after "were not provided:").
fn first_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty())
        .collect();
    let message = paragraph.join(" ");
    match message.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None if message.is_empty() => "invalid arguments".to_string(),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse;
    use std::ffi::OsString;

    fn error(tool: Tool, args: &[&str]) -> Report {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        match parse(tool, &argv) {
            Ok(parsed) => panic!("{args:?} parsed: {parsed:?}"),
            Err(err) => describe(tool, &err),
        }
    }

    #[test]
    fn unknown_options_read_as_getopt_puts_them() {
        assert_eq!(
            error(Tool::Sbatch, &["sbatch", "--bogus", "--wrap", "true"]),
            Report::Lines(vec![
                "sbatch: unrecognized option '--bogus'".into(),
                "Try \"sbatch --help\" for more information".into(),
            ])
        );
        assert_eq!(
            error(Tool::Berth, &["berth", "queue", "--bogus=3"]),
            Report::Lines(vec![
                "berth: unrecognized option '--bogus'".into(),
                "Try \"berth --help\" for more information".into(),
            ])
        );
    }

    #[test]
    fn other_mistakes_are_one_line() {
        let Report::Lines(lines) = error(Tool::Sbatch, &["sbatch", "-c", "many", "x.sh"]) else {
            panic!("expected lines");
        };
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("sbatch: error: invalid value 'many'"),
            "{}",
            lines[0]
        );
        let Report::Lines(lines) = error(Tool::Berth, &["berth", "job", "1", "2"]) else {
            panic!("expected lines");
        };
        assert_eq!(lines, ["berth: error: unexpected argument '2'"]);
        // scancel without ids or filters is refused when it runs.
        assert_eq!(
            error(Tool::Srun, &["srun", "-n", "2"]),
            Report::Lines(vec![
                "srun: error: the following required arguments were not provided: <COMMAND>..."
                    .into()
            ])
        );
        let Report::Lines(lines) = error(Tool::Sacct, &["sacct", "-j"]) else {
            panic!("expected lines");
        };
        assert!(
            lines[0].starts_with("sacct: error: a value is required for '--jobs"),
            "{lines:?}"
        );
    }

    #[test]
    fn help_and_missing_subcommands() {
        assert_eq!(error(Tool::Sbatch, &["sbatch", "--help"]), Report::Display);
        assert_eq!(error(Tool::Squeue, &["squeue", "--help"]), Report::Display);
        assert_eq!(error(Tool::Berth, &["berth", "--version"]), Report::Display);
        assert_eq!(error(Tool::Berth, &["berth"]), Report::HelpInstead);
    }
}
