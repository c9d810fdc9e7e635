//! The `sbatch` binary's fast path: the command lines it can submit by
//! itself, without `berth`'s full parser, and how it builds their job.
//!
//! Why a second parser: a bulk submitter starts one process per job, and
//! in `berth` most of that process's cost is being a large program (page
//! faults over its text, relocations, clap's tables, the allocator's
//! start), not the submit. The small `sbatch` binary parses a fixed set of
//! options here and hands every other command line, unchanged, to `berth`
//! (see `src/bin/sbatch/main.rs`).
//!
//! The rule that keeps the two from drifting apart: **when in doubt,
//! delegate.** [`parse`] answers [`Parsed::Delegate`] for any option it
//! does not know, any abbreviation or attached short value, any option
//! given twice, any value that starts with `-` or is empty, and any value
//! it would refuse; `berth` then gives the answer and the error message.
//! So the fast path only ever submits what `berth sbatch` would submit,
//! and never words an error of its own about the command line. The client
//! crate's tests compare the two parsers' jobs over a corpus of command
//! lines (`cli::submit::tests::the_fast_path_makes_the_job_berth_makes`).

use crate::mem::parse_mem_mb;
use crate::script::{check_script, sbatch_directives, script_command};
use crate::time::parse_time_limit;
use crate::{comma_list, wrap_job_name};
use berth_proto::api::{JobSpec, SubmitJobRequest};
use std::path::{Path, PathBuf};

/// Longest batch script the fast path reads itself; a larger one goes to
/// `berth`, which reads any size.
pub const SCRIPT_BYTES_MAX: u64 = 1024 * 1024;

/// Most arguments the fast path looks at; a longer command line goes to
/// `berth`.
pub const ARGS_MAX: usize = 256;

/// What [`parse`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The fast path can submit this command line (boxed: the options
    /// are a few hundred bytes, and a delegated command line needs none).
    Submit(Box<FastSubmit>),
    /// Hand the command line to `berth`, unchanged.
    Delegate,
}

/// The options the fast path knows, as given (values unparsed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FastOptions {
    pub wrap: Option<String>,
    pub job_name: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub account: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub chdir: Option<String>,
    pub comment: Option<String>,
    pub time: Option<String>,
    pub mem: Option<String>,
    pub hold: bool,
    pub parsable: bool,
}

/// A command line the fast path submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastSubmit {
    /// The command line's options over the script's `#SBATCH` lines.
    pub options: FastOptions,
    /// What the job runs.
    pub source: FastSource,
}

/// What the job runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FastSource {
    /// `--wrap CMD`.
    Wrap(String),
    /// A batch script file and its arguments.
    Script {
        text: String,
        /// The file's name: the job's default name.
        name: String,
        args: Vec<String>,
    },
}

/// One option the fast path knows: its short and long names and whether
/// it takes a value.
struct Known {
    short: Option<char>,
    long: &'static str,
    takes_value: bool,
}

const KNOWN: &[Known] = &[
    Known {
        short: None,
        long: "wrap",
        takes_value: true,
    },
    Known {
        short: Some('J'),
        long: "job-name",
        takes_value: true,
    },
    Known {
        short: Some('p'),
        long: "partition",
        takes_value: true,
    },
    Known {
        short: Some('q'),
        long: "qos",
        takes_value: true,
    },
    Known {
        short: Some('A'),
        long: "account",
        takes_value: true,
    },
    Known {
        short: Some('o'),
        long: "output",
        takes_value: true,
    },
    Known {
        short: Some('e'),
        long: "error",
        takes_value: true,
    },
    Known {
        short: Some('D'),
        long: "chdir",
        takes_value: true,
    },
    Known {
        short: None,
        long: "comment",
        takes_value: true,
    },
    Known {
        short: Some('t'),
        long: "time",
        takes_value: true,
    },
    Known {
        short: None,
        long: "mem",
        takes_value: true,
    },
    Known {
        short: Some('H'),
        long: "hold",
        takes_value: false,
    },
    Known {
        short: None,
        long: "parsable",
        takes_value: false,
    },
];

/// Parses `args` (the command line without the program name), reading the
/// batch script when one is named. Touches nothing but that file.
pub fn parse(args: &[String]) -> Parsed {
    let Some(command_line) = parse_words(args, true) else {
        return Parsed::Delegate;
    };
    let (options, script) = command_line;
    let Some((path, script_args)) = script else {
        return match &options.wrap {
            Some(command) if !command.trim().is_empty() => Parsed::Submit(Box::new(FastSubmit {
                source: FastSource::Wrap(command.clone()),
                options,
            })),
            // No command (a script on stdin, or none at all): `berth`
            // reads stdin or says what is missing.
            _ => Parsed::Delegate,
        };
    };
    if options.wrap.is_some() {
        return Parsed::Delegate;
    }
    let Some(text) = read_script(Path::new(&path)) else {
        return Parsed::Delegate;
    };
    let Ok(words) = sbatch_directives(&text) else {
        return Parsed::Delegate;
    };
    let Some((directives, None)) = parse_words(&words, false) else {
        return Parsed::Delegate;
    };
    if directives.wrap.is_some() {
        return Parsed::Delegate;
    }
    let name = Path::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.clone());
    Parsed::Submit(Box::new(FastSubmit {
        options: options.overlaid_on(directives),
        source: FastSource::Script {
            text,
            name,
            args: script_args,
        },
    }))
}

/// The options in `words`, and with `allow_script` the script path and its
/// arguments (everything after the first word that is not an option);
/// `None` when anything calls for `berth`.
#[allow(clippy::type_complexity)]
fn parse_words(
    words: &[String],
    allow_script: bool,
) -> Option<(FastOptions, Option<(String, Vec<String>)>)> {
    if words.len() > ARGS_MAX {
        return None;
    }
    let mut options = FastOptions::default();
    let mut seen: Vec<&'static str> = Vec::new();
    let mut index = 0;
    while index < words.len() {
        let word = &words[index];
        index += 1;
        let (known, attached) = if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            (KNOWN.iter().find(|k| k.long == name)?, value)
        } else if let Some(short) = word.strip_prefix('-') {
            // Exactly one letter: no bundles, no attached values.
            let mut letters = short.chars();
            let letter = letters.next()?;
            if letters.next().is_some() {
                return None;
            }
            (KNOWN.iter().find(|k| k.short == Some(letter))?, None)
        } else if allow_script && !word.is_empty() {
            let rest = words[index..].to_vec();
            return Some((options, Some((word.clone(), rest))));
        } else {
            return None;
        };
        if seen.contains(&known.long) {
            return None;
        }
        seen.push(known.long);
        if !known.takes_value {
            if attached.is_some() {
                return None;
            }
            match known.long {
                "hold" => options.hold = true,
                "parsable" => options.parsable = true,
                _ => return None,
            }
            continue;
        }
        let value = match attached {
            Some(value) => value,
            None => {
                let value = words.get(index)?.clone();
                index += 1;
                value
            }
        };
        if value.is_empty() || value.starts_with('-') {
            return None;
        }
        let slot = match known.long {
            "wrap" => &mut options.wrap,
            "job-name" => &mut options.job_name,
            "partition" => &mut options.partition,
            "qos" => &mut options.qos,
            "account" => &mut options.account,
            "output" => &mut options.output,
            "error" => &mut options.error,
            "chdir" => &mut options.chdir,
            "comment" => &mut options.comment,
            "time" => &mut options.time,
            "mem" => &mut options.mem,
            _ => return None,
        };
        *slot = Some(value);
    }
    Some((options, None))
}

/// The script's text, when it is a readable UTF-8 file sbatch accepts and
/// not too large.
fn read_script(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() > SCRIPT_BYTES_MAX {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, SCRIPT_BYTES_MAX), &mut bytes)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    check_script(&text).ok()?;
    Some(text)
}

impl FastOptions {
    /// These options (the command line) over `base` (the `#SBATCH`
    /// lines): the command line wins, flags add up.
    fn overlaid_on(self, base: FastOptions) -> FastOptions {
        FastOptions {
            wrap: self.wrap.or(base.wrap),
            job_name: self.job_name.or(base.job_name),
            partition: self.partition.or(base.partition),
            qos: self.qos.or(base.qos),
            account: self.account.or(base.account),
            output: self.output.or(base.output),
            error: self.error.or(base.error),
            chdir: self.chdir.or(base.chdir),
            comment: self.comment.or(base.comment),
            time: self.time.or(base.time),
            mem: self.mem.or(base.mem),
            hold: self.hold || base.hold,
            parsable: self.parsable || base.parsable,
        }
    }
}

impl FastSubmit {
    /// The request for this submit, from the caller's working directory
    /// and user name, with `request_id`. `None` when a value is one
    /// `berth` would refuse: delegate, and let it say why.
    pub fn request(&self, cwd: &Path, user: &str, request_id: String) -> Option<SubmitJobRequest> {
        let o = &self.options;
        let (command, default_name) = match &self.source {
            FastSource::Wrap(command) => (command.clone(), wrap_job_name(command)),
            FastSource::Script { text, name, args } => (script_command(text, args), name.clone()),
        };
        let workdir: PathBuf = match &o.chdir {
            Some(dir) => cwd.join(dir),
            None => cwd.to_path_buf(),
        };
        let spec = JobSpec {
            name: o.job_name.clone().unwrap_or(default_name),
            user: user.to_string(),
            command,
            workdir: workdir.to_str()?.to_string(),
            mem_mb: match &o.mem {
                Some(mem) => parse_mem_mb(mem).ok()?,
                None => 0,
            },
            time_limit_s: match &o.time {
                Some(time) => parse_time_limit(time).ok()?,
                None => 0,
            },
            partitions: comma_list(o.partition.as_deref()),
            qos: o.qos.clone().unwrap_or_default(),
            account: o.account.clone().unwrap_or_default(),
            stdout_path: o.output.clone().unwrap_or_default(),
            stderr_path: o.error.clone().unwrap_or_default(),
            hold: o.hold,
            comment: o.comment.clone().unwrap_or_default(),
            ..Default::default()
        };
        Some(SubmitJobRequest {
            request_id,
            spec: Some(spec),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    fn options(args: &[&str]) -> FastOptions {
        match parse(&words(args)) {
            Parsed::Submit(submit) => submit.options,
            Parsed::Delegate => panic!("{args:?} was delegated"),
        }
    }

    #[test]
    fn known_options_in_every_spelling_are_parsed() {
        let o = options(&[
            "-H",
            "-J",
            "a",
            "--partition",
            "p1,p2",
            "--qos=high",
            "-A",
            "acct",
            "--parsable",
            "--wrap",
            "sleep 1",
        ]);
        assert!(o.hold && o.parsable);
        assert_eq!(o.job_name.as_deref(), Some("a"));
        assert_eq!(o.partition.as_deref(), Some("p1,p2"));
        assert_eq!(o.qos.as_deref(), Some("high"));
        assert_eq!(o.account.as_deref(), Some("acct"));
        assert_eq!(o.wrap.as_deref(), Some("sleep 1"));
    }

    #[test]
    fn anything_in_doubt_is_delegated() {
        for args in [
            &["--wrap", "true", "-N", "2"][..],
            &["-HJ", "x", "--wrap", "true"],
            &["-Jx", "--wrap", "true"],
            &["--job", "x", "--wrap", "true"],
            &["-J", "a", "-J", "b", "--wrap", "true"],
            &["-J", "-x", "--wrap", "true"],
            &["-J", "", "--wrap", "true"],
            &["--hold=yes", "--wrap", "true"],
            &["--wrap", "  "],
            &["--wrap"],
            &["-H"],
            &[],
            &["--", "script.sh"],
            &["--help"],
            &["--wrap", "true", "/no/such/script"],
            &["/no/such/script"],
        ] {
            assert_eq!(parse(&words(args)), Parsed::Delegate, "{args:?}");
        }
    }

    #[test]
    fn a_value_berth_would_refuse_is_delegated() {
        let Parsed::Submit(submit) = parse(&words(&["-t", "soon", "--wrap", "true"])) else {
            panic!("-t soon should parse; its value is checked when building");
        };
        assert_eq!(submit.request(Path::new("/"), "u", "r".into()), None);
    }

    #[test]
    fn a_script_s_directives_apply_under_the_command_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.sh");
        std::fs::write(
            &path,
            "#!/bin/sh\n#SBATCH -J fromfile\n#SBATCH -p p1 --hold\necho hi\n",
        )
        .unwrap();
        let path = path.to_str().unwrap().to_string();
        let Parsed::Submit(submit) = parse(&words(&["-p", "p2", &path, "-x", "y"])) else {
            panic!("delegated");
        };
        assert_eq!(submit.options.job_name.as_deref(), Some("fromfile"));
        assert_eq!(submit.options.partition.as_deref(), Some("p2"));
        assert!(submit.options.hold);
        let FastSource::Script { name, args, .. } = &submit.source else {
            panic!("not a script");
        };
        assert_eq!(name, "job.sh");
        assert_eq!(args, &words(&["-x", "y"]));
        std::fs::write(dir.path().join("odd.sh"), "#SBATCH -N 2\ntrue\n").unwrap();
        let odd = dir.path().join("odd.sh").to_str().unwrap().to_string();
        assert_eq!(parse(&words(&[&odd])), Parsed::Delegate);
    }
}
