//! Batch scripts as sbatch reads them: the `#SBATCH` option lines at the
//! top, and the command that runs the script on the first allocated host.
//!
//! A job's command is run by `/bin/sh -c` (api.proto, `JobSpec.command`).
//! A script for /bin/sh (or without a `#!` line) is submitted as it is. A
//! script for another interpreter (`#!/bin/bash`, `#!/usr/bin/env python3`)
//! is wrapped so that interpreter runs it, reading the text from a here-doc
//! on fd 3, because running a bash script under dash breaks on the first
//! bashism.

use thiserror::Error;

/// A script sbatch would refuse, with Slurm's reasons.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScriptError {
    /// Nothing but blanks.
    #[error("batch script is empty")]
    Empty,
    /// A NUL byte: not a text file.
    #[error("batch script contains a NUL character")]
    Nul,
    /// `\r\n` line ends: /bin/sh would see `\r` at the end of every word.
    #[error("batch script contains DOS line breaks (\\r\\n); convert it with dos2unix")]
    DosLineBreaks,
    /// A `#SBATCH` line whose quoting does not close.
    #[error("#SBATCH line {line}: unterminated {quote} quote")]
    Unterminated {
        /// 1-based line number in the script.
        line: usize,
        /// "single" or "double".
        quote: &'static str,
    },
}

/// Checks the script is something /bin/sh can run, as sbatch does.
pub fn check_script(text: &str) -> Result<(), ScriptError> {
    if text.contains('\0') {
        return Err(ScriptError::Nul);
    }
    if text.contains("\r\n") {
        return Err(ScriptError::DosLineBreaks);
    }
    if text.trim().is_empty() {
        return Err(ScriptError::Empty);
    }
    Ok(())
}

/// The option words of the `#SBATCH` lines at the top of a script, in order,
/// ready to be parsed as if given on the command line.
///
/// Like sbatch, reading stops at the first line that is neither blank nor a
/// comment, so `#SBATCH` lines after the first command are ignored. A
/// directive must start at the beginning of the line with `#SBATCH` followed
/// by a blank; `##SBATCH` is the usual way to disable one and is a comment.
/// Within a line, words are split as a shell would (quotes, backslashes) and
/// a word starting with `#` begins a trailing comment.
pub fn sbatch_directives(text: &str) -> Result<Vec<String>, ScriptError> {
    let mut words = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('#') {
            break;
        }
        if let Some(rest) = line.strip_prefix("#SBATCH") {
            if rest.is_empty() || rest.starts_with([' ', '\t']) {
                words.extend(split_words(rest, index + 1)?);
            }
        }
    }
    Ok(words)
}

/// Splits one directive's text into words, shell style: blanks separate
/// words, '...' is literal, "..." honours \" \\ \$ \`, a backslash outside
/// quotes escapes the next character, and an unquoted `#` at the start of
/// a word ends the line.
fn split_words(text: &str, line: usize) -> Result<Vec<String>, ScriptError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => {
                            return Err(ScriptError::Unterminated {
                                line,
                                quote: "single",
                            })
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => {
                                return Err(ScriptError::Unterminated {
                                    line,
                                    quote: "double",
                                })
                            }
                        },
                        Some(c) => word.push(c),
                        None => {
                            return Err(ScriptError::Unterminated {
                                line,
                                quote: "double",
                            })
                        }
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The interpreter named on a script's `#!` line, with its one optional
/// argument (Linux passes everything after the path as a single argument).
pub fn interpreter(text: &str) -> Option<(String, Option<String>)> {
    let first = text.lines().next()?;
    let rest = first.strip_prefix("#!")?.trim();
    if rest.is_empty() {
        return None;
    }
    Some(match rest.split_once([' ', '\t']) {
        Some((path, arg)) => (path.to_string(), Some(arg.trim().to_string())),
        None => (rest.to_string(), None),
    })
}

/// Whether that interpreter is a POSIX sh, which `/bin/sh -c` already is.
fn is_posix_sh(path: &str, arg: Option<&str>) -> bool {
    match (path, arg) {
        ("/bin/sh" | "/usr/bin/sh", None) => true,
        (env, Some("sh")) => env.rsplit('/').next() == Some("env"),
        _ => false,
    }
}

/// The `JobSpec.command` that runs `text` with `args` as its `$1...`.
///
/// For /bin/sh (or no `#!` line) the script itself, with a `set --` line in
/// front when there are arguments. For any other interpreter:
/// `exec INTERP [ARG] /dev/fd/3 ARGS... 3<<'DELIM'` followed by the script,
/// which keeps the job's stdin untouched and needs no file on the host.
pub fn script_command(text: &str, args: &[String]) -> String {
    let quoted_args: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
    match interpreter(text) {
        Some((path, arg)) if !is_posix_sh(&path, arg.as_deref()) => {
            let delim = heredoc_delimiter(text);
            let mut command = format!("exec {}", shell_quote(&path));
            if let Some(arg) = &arg {
                command.push(' ');
                command.push_str(&shell_quote(arg));
            }
            command.push_str(" /dev/fd/3");
            for arg in &quoted_args {
                command.push(' ');
                command.push_str(arg);
            }
            command.push_str(&format!(" 3<<'{delim}'\n{text}"));
            if !text.ends_with('\n') {
                command.push('\n');
            }
            command.push_str(&delim);
            command.push('\n');
            command
        }
        _ if args.is_empty() => text.to_string(),
        _ => format!("set -- {}\n{text}", quoted_args.join(" ")),
    }
}

/// A here-doc end marker that no line of the script equals.
fn heredoc_delimiter(text: &str) -> String {
    let taken = |d: &str| text.lines().any(|l| l == d);
    let mut delim = "BERTH_SCRIPT_EOF".to_string();
    let mut n = 0u64;
    while taken(&delim) {
        n += 1;
        delim = format!("BERTH_SCRIPT_EOF_{n}");
    }
    delim
}

/// Quotes a word for /bin/sh: bare when it is plainly safe, else in single
/// quotes with embedded single quotes spelled `'\''`.
pub fn shell_quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn directives_at_the_top_are_read_in_order() {
        let script = "#!/bin/bash\n\
                      #SBATCH -J train\n\
                      \n\
                      # a comment\n\
                      #SBATCH --mem=4G -c 2\n\
                      ##SBATCH --qos=disabled\n\
                      #SBATCH\t--time 1:00:00   # one hour\n\
                      echo hi\n\
                      #SBATCH --partition=too-late\n";
        assert_eq!(
            sbatch_directives(script),
            Ok(words(&[
                "-J", "train", "--mem=4G", "-c", "2", "--time", "1:00:00"
            ]))
        );
    }

    #[test]
    fn indented_or_glued_directives_are_comments() {
        let script =
            "#!/bin/sh\n  #SBATCH -J indented\n#SBATCHX -J glued\n#SBATCH\n#sbatch -J lower\n";
        assert_eq!(sbatch_directives(script), Ok(vec![]));
    }

    #[test]
    fn indented_comments_do_not_stop_the_scan() {
        let script = "#!/bin/sh\n   # note\n#SBATCH -J x\n";
        assert_eq!(sbatch_directives(script), Ok(words(&["-J", "x"])));
    }

    #[test]
    fn quoting_follows_the_shell() {
        let script = concat!(
            "#SBATCH --comment='two words' -J \"a \\\"b\\\" \\x\"\n",
            "#SBATCH --export=A=1\\ 2 --comment=x#notacomment\n",
            "#SBATCH -J ''\n",
        );
        assert_eq!(
            sbatch_directives(script),
            Ok(words(&[
                "--comment=two words",
                "-J",
                "a \"b\" \\x",
                "--export=A=1 2",
                "--comment=x#notacomment",
                "-J",
                "",
            ]))
        );
    }

    #[test]
    fn unterminated_quotes_name_the_line() {
        assert_eq!(
            sbatch_directives("#!/bin/sh\n#SBATCH -J 'oops\n"),
            Err(ScriptError::Unterminated {
                line: 2,
                quote: "single"
            })
        );
        assert_eq!(
            sbatch_directives("#SBATCH -J \"oops\n"),
            Err(ScriptError::Unterminated {
                line: 1,
                quote: "double"
            })
        );
    }

    #[test]
    fn scripts_sbatch_refuses_are_refused() {
        assert_eq!(check_script(""), Err(ScriptError::Empty));
        assert_eq!(check_script(" \n\t\n"), Err(ScriptError::Empty));
        assert_eq!(check_script("echo a\0b"), Err(ScriptError::Nul));
        assert_eq!(
            check_script("#!/bin/sh\r\necho hi\r\n"),
            Err(ScriptError::DosLineBreaks)
        );
        assert_eq!(check_script("#!/bin/sh\necho hi\n"), Ok(()));
    }

    #[test]
    fn interpreters_are_read_from_the_shebang() {
        assert_eq!(
            interpreter("#!/bin/bash\n"),
            Some(("/bin/bash".into(), None))
        );
        assert_eq!(
            interpreter("#! /usr/bin/env  python3\nprint(1)"),
            Some(("/usr/bin/env".into(), Some("python3".into())))
        );
        assert_eq!(interpreter("echo hi\n"), None);
        assert_eq!(interpreter("#!\n"), None);
        assert_eq!(interpreter(""), None);
    }

    #[test]
    fn sh_scripts_are_submitted_as_they_are() {
        let script = "#!/bin/sh\necho hi\n";
        assert_eq!(script_command(script, &[]), script);
        assert_eq!(script_command("echo hi\n", &[]), "echo hi\n");
        assert_eq!(
            script_command("#!/usr/bin/env sh\necho\n", &[]),
            "#!/usr/bin/env sh\necho\n"
        );
        assert_eq!(
            script_command(script, &words(&["a b", "c"])),
            "set -- 'a b' c\n#!/bin/sh\necho hi\n"
        );
    }

    #[test]
    fn other_interpreters_get_the_script_on_fd_3() {
        let script = "#!/bin/bash -l\necho hi";
        assert_eq!(
            script_command(script, &words(&["x"])),
            "exec /bin/bash -l /dev/fd/3 x 3<<'BERTH_SCRIPT_EOF'\n#!/bin/bash -l\necho hi\nBERTH_SCRIPT_EOF\n"
        );
    }

    #[test]
    fn the_heredoc_delimiter_never_occurs_in_the_script() {
        let script = "#!/bin/bash\nBERTH_SCRIPT_EOF\nBERTH_SCRIPT_EOF_1\n";
        assert_eq!(heredoc_delimiter(script), "BERTH_SCRIPT_EOF_2");
    }

    #[test]
    fn quoting_is_safe_for_sh() {
        assert_eq!(shell_quote("plain-word_1.sh"), "plain-word_1.sh");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    /// Runs a generated command the way the agent will, through `sh -c`.
    fn run_sh(command: &str) -> String {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(command)
            .output()
            .expect("run /bin/sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn generated_commands_really_run() {
        let args = words(&["one", "two words", "it's"]);
        let sh = "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n";
        assert_eq!(
            run_sh(&script_command(sh, &args)),
            "[one]\n[two words]\n[it's]\n"
        );
        if std::path::Path::new("/bin/bash").exists() {
            // A here-doc inside the script, ended by the default delimiter,
            // must not end the wrapper's here-doc.
            let bash = "#!/bin/bash\nx=(\"$@\")\necho \"${#x[@]} ${x[1]}\"\n\
                        cat <<'BERTH_SCRIPT_EOF'\ninner\nBERTH_SCRIPT_EOF\n";
            assert_eq!(run_sh(&script_command(bash, &args)), "3 two words\ninner\n");
        }
    }
}
