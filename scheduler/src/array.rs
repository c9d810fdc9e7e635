//! Job arrays as Slurm's `--array` writes them: task indexes `0-15`,
//! `1,3,5`, `0-15:4` (a step), combined with `,`, and an optional `%max`
//! (at most that many tasks run at once).

use thiserror::Error;

/// Highest task index (Slurm's default `MaxArraySize` of 1001 allows
/// indexes 0 to 1000), which also bounds the tasks of one array.
pub const ARRAY_INDEX_MAX: u32 = 1000;

/// A parsed `--array`: the task indexes, ascending without repeats, and
/// the `%max` (0 = no limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    pub indexes: Vec<u32>,
    pub max_running: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ArrayError {
    #[error("--array {text:?}: {problem} (expected e.g. 0-15%4, 1,3,5 or 0-15:4)")]
    Invalid { text: String, problem: String },
}

/// Parses `--array` text.
pub fn parse(text: &str) -> Result<ArraySpec, ArrayError> {
    let bad = |problem: String| ArrayError::Invalid {
        text: text.to_string(),
        problem,
    };
    let trimmed = text.trim();
    let (list, max_running) = match trimmed.split_once('%') {
        Some((list, max)) => {
            let max = max
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| bad(format!("{max:?} after '%' is not a count above 0")))?;
            (list, max)
        }
        None => (trimmed, 0),
    };
    if list.trim().is_empty() {
        return Err(bad("no task indexes".into()));
    }
    let index = |s: &str| -> Result<u32, ArrayError> {
        let n = s
            .trim()
            .parse::<u32>()
            .map_err(|_| bad(format!("{s:?} is not a task index")))?;
        if n > ARRAY_INDEX_MAX {
            return Err(bad(format!(
                "index {n} is above the highest allowed, {ARRAY_INDEX_MAX}"
            )));
        }
        Ok(n)
    };
    // Every index is at most ARRAY_INDEX_MAX, so a bitmap bounds the work
    // and removes repeats.
    let mut seen = vec![false; ARRAY_INDEX_MAX as usize + 1];
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => {
                let step = step
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| bad(format!("step {step:?} is not a count above 0")))?;
                (range, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (index(lo)?, index(hi)?),
            None if step == 1 => {
                let n = index(range)?;
                (n, n)
            }
            None => return Err(bad(format!("a step needs a range, not {range:?}"))),
        };
        if hi < lo {
            return Err(bad(format!("range {} goes down", range.trim())));
        }
        for n in (lo..=hi).step_by(step as usize) {
            seen[n as usize] = true;
        }
    }
    let indexes = (0..=ARRAY_INDEX_MAX)
        .filter(|&n| seen[n as usize])
        .collect();
    Ok(ArraySpec {
        indexes,
        max_running,
    })
}

/// Slurm's compact form of ascending indexes: `1-3,7,9-10`.
pub fn ranges(indexes: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            i += 1;
            end = indexes[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (Vec<u32>, u32) {
        let a = parse(text).unwrap_or_else(|e| panic!("{e}"));
        (a.indexes, a.max_running)
    }

    #[test]
    fn every_form() {
        assert_eq!(ok("0-3"), (vec![0, 1, 2, 3], 0));
        assert_eq!(ok("1,3,5"), (vec![1, 3, 5], 0));
        assert_eq!(ok("0-15:4"), (vec![0, 4, 8, 12], 0));
        assert_eq!(ok("0-15%4"), ((0..=15).collect(), 4));
        assert_eq!(ok(" 5, 1-2 ,2%1"), (vec![1, 2, 5], 1));
        assert_eq!(ok("7"), (vec![7], 0));
        assert_eq!(ok("0-1000").0.len(), 1001);
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        let err = |t: &str| parse(t).unwrap_err().to_string();
        assert_eq!(
            err("3-1"),
            "--array \"3-1\": range 3-1 goes down (expected e.g. 0-15%4, 1,3,5 or 0-15:4)"
        );
        assert!(err("").contains("no task indexes"));
        assert!(err("%2").contains("no task indexes"));
        assert!(err("1-4%0").contains("\"0\" after '%' is not a count above 0"));
        assert!(err("1-4%x").contains("\"x\" after '%'"));
        assert!(err("a-4").contains("\"a\" is not a task index"));
        assert!(err("1,,2").contains("\"\" is not a task index"));
        assert!(err("0-4:0").contains("step \"0\" is not a count above 0"));
        assert!(err("4:2").contains("a step needs a range"));
        assert!(err("0-1001").contains("index 1001 is above the highest allowed, 1000"));
        assert!(err("-1").contains("\"\" is not a task index"));
    }

    #[test]
    fn ranges_compress() {
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), "1-3,7,9-10");
        assert_eq!(ranges(&[4]), "4");
        assert_eq!(ranges(&[]), "");
    }
}
