//! Output path patterns (sbatch(1) "filename pattern"): `%j` job id,
//! `%J` job id with the step (`42.batch`: the batch step), `%x` job name,
//! `%u` user, `%N` short host name of the node running the script, `%n`
//! its index in the node list, `%A` the array's job id (the job id for a
//! job that is not an array task), `%a` the array index (4294967294,
//! Slurm's NO_VAL, for a job that is not), `%s` the step (`batch`), `%t`
//! the task id (0), `%%` a literal percent. A number between `%` and the
//! letter zero-pads a numeric value to that width (`%4j` gives `0042`).
//! Any other `%c` is kept as written, so a path with a stray percent
//! still works.

use std::path::{Path, PathBuf};

/// Where stdout goes when the job gives no path.
pub const DEFAULT_STDOUT_PATTERN: &str = "berth-%j.out";
/// Slurm's array index of a job that is not an array task (NO_VAL - 1).
pub const NOT_AN_ARRAY_TASK: u64 = 4_294_967_294;
/// Widest zero padding accepted (`%10j`); wider stays as written.
pub const PAD_WIDTH_MAX: usize = 10;

/// The values patterns are filled from.
#[derive(Debug, Clone, Copy)]
pub struct PatternVars<'a> {
    pub job_id: u64,
    pub job_name: &'a str,
    pub user: &'a str,
    /// The host running the batch script (its short name is used).
    pub first_host: &'a str,
}

/// Expands the `%` patterns in `pattern`.
pub fn expand(pattern: &str, vars: &PatternVars<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '%' {
            out.push(c);
            continue;
        }
        let digits_start = i;
        while i < chars.len() && chars[i].is_ascii_digit() && i - digits_start < 2 {
            i += 1;
        }
        let width: usize = chars[digits_start..i]
            .iter()
            .collect::<String>()
            .parse()
            .unwrap_or(0);
        let num = |n: u64| {
            if width <= PAD_WIDTH_MAX {
                format!("{n:0width$}")
            } else {
                n.to_string()
            }
        };
        let short_host = vars.first_host.split('.').next().unwrap_or(vars.first_host);
        match chars.get(i) {
            Some('j') => out.push_str(&num(vars.job_id)),
            Some('J') => {
                out.push_str(&num(vars.job_id));
                out.push_str(".batch");
            }
            Some('A') => out.push_str(&num(vars.job_id)),
            Some('a') => out.push_str(&num(NOT_AN_ARRAY_TASK)),
            Some('s') => out.push_str("batch"),
            Some('t') | Some('n') => out.push_str(&num(0)),
            Some('x') => out.push_str(vars.job_name),
            Some('u') => out.push_str(vars.user),
            Some('N') => out.push_str(short_host),
            Some('%') if width == 0 => out.push('%'),
            Some(&other) => {
                out.push('%');
                out.extend(&chars[digits_start..i]);
                out.push(other);
            }
            None => {
                out.push('%');
                out.extend(&chars[digits_start..i]);
                break;
            }
        }
        i += 1;
    }
    out
}

/// Expands `pattern` (or the default when empty) and resolves a relative
/// result against the job's working directory.
pub fn resolve(work_dir: &Path, pattern: &str, vars: &PatternVars<'_>) -> PathBuf {
    let pattern = if pattern.is_empty() {
        DEFAULT_STDOUT_PATTERN
    } else {
        pattern
    };
    work_dir.join(expand(pattern, vars))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VARS: PatternVars<'static> = PatternVars {
        job_id: 42,
        job_name: "train",
        user: "ada",
        first_host: "gpu01",
    };

    #[test]
    fn expands_each_pattern() {
        assert_eq!(expand("%j", &VARS), "42");
        assert_eq!(expand("%x", &VARS), "train");
        assert_eq!(expand("%u", &VARS), "ada");
        assert_eq!(expand("%N", &VARS), "gpu01");
        assert_eq!(expand("%%", &VARS), "%");
        assert_eq!(
            expand("/logs/%u/%x-%j.%N.out", &VARS),
            "/logs/ada/train-42.gpu01.out"
        );
    }

    #[test]
    fn slurm_patterns_and_padding() {
        assert_eq!(expand("%J", &VARS), "42.batch");
        assert_eq!(expand("%A_%a", &VARS), "42_4294967294");
        assert_eq!(expand("%5j", &VARS), "00042");
        assert_eq!(expand("%s.%t.%n", &VARS), "batch.0.0");
        let fq = PatternVars {
            first_host: "gpu01.cluster.example",
            ..VARS
        };
        assert_eq!(expand("%N", &fq), "gpu01");
        assert_eq!(expand("%3q", &VARS), "%3q");
        assert_eq!(expand("end%4", &VARS), "end%4");
    }

    #[test]
    fn literal_and_unknown_percent_are_kept() {
        assert_eq!(expand("100%%-%j", &VARS), "100%-42");
        assert_eq!(expand("a%qb", &VARS), "a%qb");
        assert_eq!(expand("trailing%", &VARS), "trailing%");
        assert_eq!(expand("%%j", &VARS), "%j");
        assert_eq!(expand("plain.txt", &VARS), "plain.txt");
        assert_eq!(expand("", &VARS), "");
    }

    #[test]
    fn resolves_relative_against_work_dir() {
        let wd = Path::new("/scratch/ada");
        assert_eq!(
            resolve(wd, "", &VARS),
            PathBuf::from("/scratch/ada/berth-42.out")
        );
        assert_eq!(
            resolve(wd, "out/%j.log", &VARS),
            PathBuf::from("/scratch/ada/out/42.log")
        );
        assert_eq!(
            resolve(wd, "/abs/%x.log", &VARS),
            PathBuf::from("/abs/train.log")
        );
    }
}
