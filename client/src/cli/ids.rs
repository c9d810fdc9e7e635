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
    fn lists_are_comma_separated() {
        assert_eq!(parse_job_ids("1,2, 3").ok(), Some(vec![1, 2, 3]));
        assert!(parse_job_ids("1,,2").is_err());
    }
}
