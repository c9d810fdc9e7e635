//! Job ids as users type them.

use anyhow::{bail, Result};

/// Parses one job id. Slurm's array ("12_3") and step ("12.0") forms are
/// refused by name, since Berth has neither yet.
pub fn parse_job_id(text: &str) -> Result<u64> {
    let trimmed = text.trim();
    if trimmed.contains(['_', '.']) {
        bail!("invalid job id \"{text}\": job arrays and steps are not supported yet");
    }
    match trimmed.parse::<u64>() {
        Ok(id) if id > 0 && trimmed.bytes().all(|b| b.is_ascii_digit()) => Ok(id),
        _ => bail!("invalid job id \"{text}\": expected a positive number"),
    }
}

/// A job as scancel names it: an id (an array's id stands for the whole
/// array), or one task of an array (`12_3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRef {
    Job(u64),
    Task { array: u64, task: u32 },
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobRef::Job(id) => write!(f, "{id}"),
            JobRef::Task { array, task } => write!(f, "{array}_{task}"),
        }
    }
}

/// Parses `12` or `12_3`; steps (`12.0`) and bracketed task lists are
/// refused by name.
pub fn parse_job_ref(text: &str) -> Result<JobRef> {
    let trimmed = text.trim();
    let Some((array, task)) = trimmed.split_once('_') else {
        return parse_job_id(text).map(JobRef::Job);
    };
    let array = parse_job_id(array)?;
    let digits = !task.is_empty() && task.bytes().all(|b| b.is_ascii_digit());
    match task.parse::<u32>() {
        Ok(task) if digits => Ok(JobRef::Task { array, task }),
        _ => {
            bail!("invalid job id \"{text}\": expected ARRAYID_TASK with one task index, e.g. 12_3")
        }
    }
}

/// Parses a comma-separated id list (`squeue -j 1,2,3`).
pub fn parse_job_ids(list: &str) -> Result<Vec<u64>> {
    list.split(',').map(parse_job_id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_positive_numbers() {
        assert_eq!(parse_job_id("42").ok(), Some(42));
        assert_eq!(parse_job_id(" 7 ").ok(), Some(7));
        for bad in ["", "0", "-1", "+1", "x", "1e3"] {
            assert!(parse_job_id(bad).is_err(), "{bad}");
        }
        let err = parse_job_id("12_3").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid job id \"12_3\": job arrays and steps are not supported yet")
        );
    }

    #[test]
    fn array_tasks_are_refs() {
        assert_eq!(parse_job_ref("12").ok(), Some(JobRef::Job(12)));
        assert_eq!(
            parse_job_ref("12_3").ok(),
            Some(JobRef::Task { array: 12, task: 3 })
        );
        for bad in ["12_", "12_x", "12_[1-3]", "_3", "12_+3", "12_3_4", "0_1"] {
            assert!(parse_job_ref(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_are_comma_separated() {
        assert_eq!(parse_job_ids("1,2, 3").ok(), Some(vec![1, 2, 3]));
        assert!(parse_job_ids("1,,2").is_err());
    }
}
