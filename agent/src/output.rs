//! Output path patterns (sbatch -o/-e): `%j` job id, `%x` job name, `%u`
//! user, `%N` first host, `%%` a literal percent. Any other `%c` is kept as
//! written, so a path with a stray percent still works.

use std::path::{Path, PathBuf};

/// Where stdout goes when the job gives no path.
pub const DEFAULT_STDOUT_PATTERN: &str = "berth-%j.out";

/// The values patterns are filled from.
#[derive(Debug, Clone, Copy)]
pub struct PatternVars<'a> {
    pub job_id: u64,
    pub job_name: &'a str,
    pub user: &'a str,
    pub first_host: &'a str,
}

/// Expands the `%` patterns in `pattern`.
pub fn expand(pattern: &str, vars: &PatternVars<'_>) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') => out.push_str(&vars.job_id.to_string()),
            Some('x') => out.push_str(vars.job_name),
            Some('u') => out.push_str(vars.user),
            Some('N') => out.push_str(vars.first_host),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
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
