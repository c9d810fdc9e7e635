//! Slurm memory sizes (`sbatch --mem`): a whole number with an optional
//! K, M, G or T suffix, megabytes when there is none, all binary units.

use thiserror::Error;

/// A memory size that is not a whole number with a K/M/G/T suffix.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid memory size \"{value}\": {why}")]
pub struct MemError {
    /// The text as the user gave it.
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

const EXPECTED: &str = "expected a whole number with an optional K, M, G or T suffix (default M)";
const KIB_PER_MIB: u64 = 1024;

/// Parses `--mem` into MiB. "K" rounds up to whole MiB (as Slurm does, so a
/// job never gets less than it asked for). "0" stays 0, which on the wire
/// means the site default (Slurm's "all the node's memory" is not offered).
pub fn parse_mem_mb(input: &str) -> Result<u64, MemError> {
    let err = |why: &str| MemError {
        value: input.to_string(),
        why: why.to_string(),
    };
    let text = input.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() {
        return Err(err(EXPECTED));
    }
    let number: u64 = digits.parse().map_err(|_| err("too large"))?;
    let mib = match suffix.to_ascii_uppercase().as_str() {
        "K" => Some(number.div_ceil(KIB_PER_MIB)),
        "" | "M" => Some(number),
        "G" => number.checked_mul(1024),
        "T" => number.checked_mul(1024 * 1024),
        _ => return Err(err(EXPECTED)),
    };
    mib.ok_or_else(|| err("too large"))
}

/// Formats MiB the way scontrol does: "4G" when it is whole GiB, "500M"
/// otherwise.
pub fn format_mem_mb(mib: u64) -> String {
    if mib > 0 && mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_binary_and_default_to_megabytes() {
        let cases = [
            ("0", 0),
            ("100", 100),
            ("100M", 100),
            ("100m", 100),
            ("4G", 4096),
            ("4g", 4096),
            ("1T", 1024 * 1024),
            ("2048K", 2),
            ("1K", 1),
            ("1025K", 2),
            ("0K", 0),
            (" 8G ", 8192),
        ];
        for (text, want) in cases {
            assert_eq!(parse_mem_mb(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn malformed_sizes_are_errors_naming_the_value() {
        for text in ["", "G", "4X", "4GB", "1.5G", "-4G", "4 G", "four", "4G4"] {
            let err = parse_mem_mb(text).unwrap_err();
            assert!(err
                .to_string()
                .starts_with(&format!("invalid memory size \"{text}\"")));
            assert_eq!(err.why, EXPECTED, "{text}");
        }
    }

    #[test]
    fn overflow_is_an_error() {
        assert_eq!(
            parse_mem_mb("99999999999999999999").unwrap_err().why,
            "too large"
        );
        assert_eq!(
            parse_mem_mb("18014398509481984T").unwrap_err().why,
            "too large"
        );
    }

    #[test]
    fn formatting_prefers_whole_gigabytes() {
        assert_eq!(format_mem_mb(0), "0M");
        assert_eq!(format_mem_mb(500), "500M");
        assert_eq!(format_mem_mb(4096), "4G");
        assert_eq!(format_mem_mb(1536), "1536M");
    }
}
