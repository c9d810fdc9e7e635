//! Job states in Slurm's words: squeue's two-letter codes and the names and
//! codes `squeue -t` accepts.

use berth_proto::api::{Job, JobState};
use thiserror::Error;

/// Every state a job can be in, in the enum's order; what `-t all` asks for.
pub const ALL_STATES: [JobState; 9] = [
    JobState::Pending,
    JobState::Running,
    JobState::Completed,
    JobState::Failed,
    JobState::Cancelled,
    JobState::Timeout,
    JobState::NodeFail,
    JobState::Preempted,
    JobState::Suspended,
];

/// A job's state, decoding prost's i32. A value this client does not know
/// (a newer server) reads as `Unspecified` rather than failing the listing.
pub fn job_state(job: &Job) -> JobState {
    JobState::try_from(job.state).unwrap_or(JobState::Unspecified)
}

/// Decodes a raw enum value from any message (e.g. `previous_state`).
pub fn state_from_i32(raw: i32) -> JobState {
    JobState::try_from(raw).unwrap_or(JobState::Unspecified)
}

/// squeue's compact state code (`%t`). Slurm's CG (completing) never shows:
/// Berth has no completing state, a job is final once its exit is committed.
pub fn state_code(state: JobState) -> &'static str {
    match state {
        JobState::Pending => "PD",
        JobState::Running => "R",
        JobState::Completed => "CD",
        JobState::Failed => "F",
        JobState::Cancelled => "CA",
        JobState::Timeout => "TO",
        JobState::NodeFail => "NF",
        JobState::Preempted => "PR",
        JobState::Suspended => "S",
        JobState::Unspecified => "??",
    }
}

/// The full state name (`%T`), Slurm's spelling ("NODE_FAIL", "CANCELLED").
pub fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Unspecified => "UNKNOWN",
        other => other.as_str_name(),
    }
}

/// Which states `squeue -t` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateFilter {
    /// No `-t`: the server's default, PENDING and RUNNING.
    Default,
    /// Exactly these states, deduplicated, in the order given. Empty when
    /// only states Berth never has were named (`-t CG`): nothing matches.
    Only(Vec<JobState>),
}

impl StateFilter {
    /// Whether a job in `state` passes the filter.
    pub fn matches(&self, state: JobState) -> bool {
        match self {
            StateFilter::Default => matches!(state, JobState::Pending | JobState::Running),
            StateFilter::Only(states) => states.contains(&state),
        }
    }
}

/// A `-t` entry that names no job state.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid job state \"{0}\": expected a comma list of state names or codes (PD, R, CD, F, CA, TO, NF, PR, S) or \"all\"")]
pub struct StateError(pub String);

/// Parses `squeue -t`: a comma list of names ("pending") or codes ("PD"),
/// any case, or "all". "CG"/"completing" are accepted so Slurm scripts that
/// ask for `R,CG` keep working, and match nothing.
pub fn parse_state_filter(input: &str) -> Result<StateFilter, StateError> {
    let mut states = Vec::new();
    for item in input.split(',').map(str::trim) {
        let upper = item.to_ascii_uppercase();
        let named: &[JobState] = match upper.as_str() {
            "ALL" => &ALL_STATES,
            "CG" | "COMPLETING" => &[],
            "PD" | "PENDING" => &[JobState::Pending],
            "R" | "RUNNING" => &[JobState::Running],
            "CD" | "COMPLETED" => &[JobState::Completed],
            "F" | "FAILED" => &[JobState::Failed],
            "CA" | "CANCELLED" | "CANCELED" => &[JobState::Cancelled],
            "TO" | "TIMEOUT" => &[JobState::Timeout],
            "NF" | "NODE_FAIL" => &[JobState::NodeFail],
            "PR" | "PREEMPTED" => &[JobState::Preempted],
            "S" | "SUSPENDED" => &[JobState::Suspended],
            _ => return Err(StateError(item.to_string())),
        };
        for state in named {
            if !states.contains(state) {
                states.push(*state);
            }
        }
    }
    Ok(StateFilter::Only(states))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_cover_every_state() {
        let codes: Vec<&str> = ALL_STATES.iter().map(|s| state_code(*s)).collect();
        assert_eq!(codes, ["PD", "R", "CD", "F", "CA", "TO", "NF", "PR", "S"]);
        assert_eq!(state_name(JobState::NodeFail), "NODE_FAIL");
        assert_eq!(state_name(JobState::Unspecified), "UNKNOWN");
    }

    #[test]
    fn unknown_enum_values_do_not_fail() {
        assert_eq!(state_from_i32(42), JobState::Unspecified);
        assert_eq!(state_from_i32(2), JobState::Running);
    }

    #[test]
    fn names_and_codes_parse_in_any_case() {
        assert_eq!(
            parse_state_filter("pd,R,completed,ca,Canceled"),
            Ok(StateFilter::Only(vec![
                JobState::Pending,
                JobState::Running,
                JobState::Completed,
                JobState::Cancelled,
            ]))
        );
        assert_eq!(
            parse_state_filter("node_fail, TO"),
            Ok(StateFilter::Only(vec![
                JobState::NodeFail,
                JobState::Timeout
            ]))
        );
        for state in ALL_STATES {
            assert_eq!(
                parse_state_filter(state_code(state)),
                Ok(StateFilter::Only(vec![state]))
            );
            assert_eq!(
                parse_state_filter(state_name(state)),
                Ok(StateFilter::Only(vec![state]))
            );
        }
    }

    #[test]
    fn all_means_every_state_and_completing_means_none() {
        assert_eq!(
            parse_state_filter("all"),
            Ok(StateFilter::Only(ALL_STATES.to_vec()))
        );
        assert_eq!(
            parse_state_filter("ALL,R"),
            Ok(StateFilter::Only(ALL_STATES.to_vec()))
        );
        assert_eq!(parse_state_filter("CG"), Ok(StateFilter::Only(vec![])));
        assert_eq!(
            parse_state_filter("R,CG"),
            Ok(StateFilter::Only(vec![JobState::Running]))
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let err = parse_state_filter("R,bogus").unwrap_err();
        assert_eq!(err, StateError("bogus".into()));
        assert!(err.to_string().starts_with("invalid job state \"bogus\""));
        assert!(parse_state_filter("").is_err());
        assert!(parse_state_filter("R,").is_err());
    }

    #[test]
    fn filters_match() {
        assert!(StateFilter::Default.matches(JobState::Pending));
        assert!(!StateFilter::Default.matches(JobState::Completed));
        assert!(!StateFilter::Only(vec![]).matches(JobState::Running));
    }
}
