//! Job dependencies, as Slurm's `--dependency`: `afterok`, `afterany`,
//! `afternotok` and `singleton`, joined by `,` (all must hold) or `?` (any
//! one suffices).
//!
//! As in Slurm, every listed job id is a dependency of its own: with `,`
//! `afterok:1:2` waits for both, with `?` `afterok:1:2?afterany:3` is
//! satisfied by any one of the three.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::model::{JobId, JobState};
use crate::reason::Reason;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepKind {
    /// The job ended COMPLETED.
    AfterOk,
    /// The job ended, whatever its final state.
    AfterAny,
    /// The job ended in a final state other than COMPLETED.
    AfterNotOk,
    /// No other job of the same name and user is running or ahead of it.
    Singleton,
}

impl DepKind {
    /// Slurm's spelling.
    pub fn name(self) -> &'static str {
        match self {
            DepKind::AfterOk => "afterok",
            DepKind::AfterAny => "afterany",
            DepKind::AfterNotOk => "afternotok",
            DepKind::Singleton => "singleton",
        }
    }

    fn from_name(name: &str) -> Option<DepKind> {
        [
            DepKind::AfterOk,
            DepKind::AfterAny,
            DepKind::AfterNotOk,
            DepKind::Singleton,
        ]
        .into_iter()
        .find(|k| k.name().eq_ignore_ascii_case(name))
    }
}

/// One kind with the jobs it names (none for [`DepKind::Singleton`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub kind: DepKind,
    pub jobs: Vec<JobId>,
}

/// A job's whole `--dependency`: `all` when joined by `,`, any one when
/// joined by `?`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencySpec {
    pub all: bool,
    pub deps: Vec<Dependency>,
}

impl fmt::Display for DependencySpec {
    /// Slurm's form, which [`parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.all { "," } else { "?" };
        for (i, dep) in self.deps.iter().enumerate() {
            if i > 0 {
                f.write_str(sep)?;
            }
            f.write_str(dep.kind.name())?;
            for job in &dep.jobs {
                write!(f, ":{job}")?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DepError {
    #[error("empty dependency: expected e.g. afterok:12 or singleton")]
    Empty,
    #[error("dependency {text:?} mixes ',' (all must hold) and '?' (any one): use one of them")]
    MixedSeparators { text: String },
    #[error("dependency {text:?} has an empty part (number {number})")]
    EmptyPart { text: String, number: usize },
    #[error(
        "dependency {part:?}: unknown kind {kind:?} (afterok, afterany, afternotok or singleton)"
    )]
    UnknownKind { part: String, kind: String },
    #[error(
        "dependency {part:?}: {kind} needs at least one job id ({kind}:<job id>[:<job id>...])"
    )]
    MissingJobs { part: String, kind: &'static str },
    #[error("dependency {part:?}: {id:?} is not a job id (a whole number)")]
    BadJobId { part: String, id: String },
    #[error("dependency {part:?}: singleton takes no job ids")]
    SingletonWithJobs { part: String },
}

/// Parses Slurm's `--dependency` text: `afterok:12:13,afterany:14`,
/// `singleton`, `afternotok:5`, or parts joined by `?` for any one. Kind
/// names are matched without regard to case; spaces around parts are
/// ignored. Slurm's `after`, `aftercorr`, `+time` and array-task ids are
/// not supported and are refused by name.
pub fn parse(text: &str) -> Result<DependencySpec, DepError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(DepError::Empty);
    }
    let any = text.contains('?');
    if any && text.contains(',') {
        return Err(DepError::MixedSeparators { text: text.into() });
    }
    let sep = if any { '?' } else { ',' };
    let mut deps = Vec::new();
    for (i, part) in text.split(sep).enumerate() {
        let part = part.trim();
        if part.is_empty() {
            return Err(DepError::EmptyPart {
                text: text.into(),
                number: i + 1,
            });
        }
        deps.push(parse_part(part)?);
    }
    Ok(DependencySpec { all: !any, deps })
}

fn parse_part(part: &str) -> Result<Dependency, DepError> {
    let mut fields = part.split(':');
    let name = fields.next().unwrap_or_default().trim();
    let kind = DepKind::from_name(name).ok_or_else(|| DepError::UnknownKind {
        part: part.into(),
        kind: name.into(),
    })?;
    let jobs = fields
        .map(|id| {
            id.trim().parse::<JobId>().map_err(|_| DepError::BadJobId {
                part: part.into(),
                id: id.into(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    match (kind, jobs.is_empty()) {
        (DepKind::Singleton, false) => Err(DepError::SingletonWithJobs { part: part.into() }),
        (DepKind::Singleton, true) | (_, false) => Ok(Dependency { kind, jobs }),
        (_, true) => Err(DepError::MissingJobs {
            part: part.into(),
            kind: kind.name(),
        }),
    }
}

/// What a job's dependencies say now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepStatus {
    Satisfied,
    /// They may still hold: a job it depends on has not ended.
    Waiting,
    /// They can never hold (a job ended the wrong way, or is unknown).
    Never,
}

impl DepStatus {
    /// The reason a job held by it waits with; `None` when satisfied.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            DepStatus::Satisfied => None,
            DepStatus::Waiting => Some(Reason::Dependency),
            DepStatus::Never => Some(Reason::DependencyNeverSatisfied),
        }
    }
}

/// One dependency on one job, from that job's state.
fn on_job(kind: DepKind, state: Option<JobState>, singleton_blocked: bool) -> DepStatus {
    let Some(state) = state else {
        // An unknown id can never end, so nothing waiting on it can hold;
        // singleton names no job and never gets here with one.
        return if kind == DepKind::Singleton {
            singleton_status(singleton_blocked)
        } else {
            DepStatus::Never
        };
    };
    if !state.is_final() {
        return DepStatus::Waiting;
    }
    let completed = state == JobState::Completed;
    let holds = match kind {
        DepKind::AfterOk => completed,
        DepKind::AfterNotOk => !completed,
        DepKind::AfterAny => true,
        DepKind::Singleton => return singleton_status(singleton_blocked),
    };
    if holds {
        DepStatus::Satisfied
    } else {
        DepStatus::Never
    }
}

fn singleton_status(blocked: bool) -> DepStatus {
    if blocked {
        DepStatus::Waiting
    } else {
        DepStatus::Satisfied
    }
}

/// Evaluates `spec` given each referenced job's state (`None`: no such job,
/// never satisfied) and, for `singleton`, whether another job of the same
/// name and user is running or pending ahead of it.
///
/// With `all`, any dependency that can never hold makes the whole spec
/// never hold (Slurm's default, without waiting for the others); otherwise
/// it waits while any waits. With any-one (`?`), one satisfied dependency is
/// enough; it is never satisfied only when every one can never hold. No
/// dependencies at all is satisfied.
pub fn evaluate(
    spec: &DependencySpec,
    state_of: impl Fn(JobId) -> Option<JobState>,
    singleton_blocked: bool,
) -> DepStatus {
    let statuses = spec.deps.iter().flat_map(|dep| {
        let singleton =
            (dep.kind == DepKind::Singleton).then(|| singleton_status(singleton_blocked));
        let state_of = &state_of;
        singleton.into_iter().chain(
            dep.jobs
                .iter()
                .map(move |&job| on_job(dep.kind, state_of(job), singleton_blocked)),
        )
    });
    let (decisive, fallback) = if spec.all {
        (DepStatus::Never, DepStatus::Satisfied)
    } else {
        (DepStatus::Satisfied, DepStatus::Never)
    };
    let mut seen_any = false;
    let mut waiting = false;
    for status in statuses {
        seen_any = true;
        if status == decisive {
            return decisive;
        }
        waiting |= status == DepStatus::Waiting;
    }
    if !seen_any {
        DepStatus::Satisfied
    } else if waiting {
        DepStatus::Waiting
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(kind: DepKind, jobs: &[JobId]) -> Dependency {
        Dependency {
            kind,
            jobs: jobs.to_vec(),
        }
    }

    #[test]
    fn parses_every_kind_and_both_joins() {
        assert_eq!(
            parse("afterok:12:13,afterany:14").unwrap(),
            DependencySpec {
                all: true,
                deps: vec![
                    dep(DepKind::AfterOk, &[12, 13]),
                    dep(DepKind::AfterAny, &[14])
                ],
            }
        );
        assert_eq!(
            parse("singleton").unwrap(),
            DependencySpec {
                all: true,
                deps: vec![dep(DepKind::Singleton, &[])],
            }
        );
        assert_eq!(
            parse(" afternotok:5 ").unwrap(),
            DependencySpec {
                all: true,
                deps: vec![dep(DepKind::AfterNotOk, &[5])],
            }
        );
        assert_eq!(
            parse("afterok:1?AfterNotOk:2?singleton").unwrap(),
            DependencySpec {
                all: false,
                deps: vec![
                    dep(DepKind::AfterOk, &[1]),
                    dep(DepKind::AfterNotOk, &[2]),
                    dep(DepKind::Singleton, &[]),
                ],
            }
        );
    }

    #[test]
    fn display_reads_back() {
        for text in [
            "afterok:12:13,afterany:14",
            "singleton",
            "afternotok:5?afterany:6:7",
            "singleton,afterok:1",
        ] {
            let spec = parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(parse(&spec.to_string()).unwrap(), spec);
        }
    }

    #[test]
    fn parse_errors_name_the_bad_part() {
        assert_eq!(parse("  "), Err(DepError::Empty));
        assert_eq!(
            parse("afterok:1,afterany:2?singleton"),
            Err(DepError::MixedSeparators {
                text: "afterok:1,afterany:2?singleton".into()
            })
        );
        assert_eq!(
            parse("afterok:1,,afterany:2"),
            Err(DepError::EmptyPart {
                text: "afterok:1,,afterany:2".into(),
                number: 2
            })
        );
        assert_eq!(
            parse("afterok:1,after:2"),
            Err(DepError::UnknownKind {
                part: "after:2".into(),
                kind: "after".into()
            })
        );
        assert_eq!(
            parse("afterany"),
            Err(DepError::MissingJobs {
                part: "afterany".into(),
                kind: "afterany"
            })
        );
        assert_eq!(
            parse("afterok:12:x3"),
            Err(DepError::BadJobId {
                part: "afterok:12:x3".into(),
                id: "x3".into()
            })
        );
        assert_eq!(
            parse("afterok:"),
            Err(DepError::BadJobId {
                part: "afterok:".into(),
                id: "".into()
            })
        );
        assert_eq!(
            parse("afterok:12_3"),
            Err(DepError::BadJobId {
                part: "afterok:12_3".into(),
                id: "12_3".into()
            })
        );
        assert_eq!(
            parse("afterok:-1"),
            Err(DepError::BadJobId {
                part: "afterok:-1".into(),
                id: "-1".into()
            })
        );
        assert_eq!(
            parse("singleton:4"),
            Err(DepError::SingletonWithJobs {
                part: "singleton:4".into()
            })
        );
        assert_eq!(
            parse("afterok:1,after:2").unwrap_err().to_string(),
            "dependency \"after:2\": unknown kind \"after\" (afterok, afterany, afternotok or singleton)"
        );
        assert_eq!(
            parse("afterok").unwrap_err().to_string(),
            "dependency \"afterok\": afterok needs at least one job id (afterok:<job id>[:<job id>...])"
        );
    }

    const FINAL_NOT_OK: [JobState; 4] = [
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
    ];

    /// Evaluates `text` with job 1 in `state` (other ids unknown).
    fn one(text: &str, state: JobState) -> DepStatus {
        let spec = parse(text).unwrap();
        evaluate(&spec, |j| (j == 1).then_some(state), false)
    }

    #[test]
    fn afterok_needs_completed() {
        assert_eq!(one("afterok:1", JobState::Pending), DepStatus::Waiting);
        assert_eq!(one("afterok:1", JobState::Running), DepStatus::Waiting);
        assert_eq!(one("afterok:1", JobState::Completed), DepStatus::Satisfied);
        for s in FINAL_NOT_OK {
            assert_eq!(one("afterok:1", s), DepStatus::Never, "{s:?}");
        }
    }

    #[test]
    fn afternotok_needs_any_other_end() {
        assert_eq!(one("afternotok:1", JobState::Pending), DepStatus::Waiting);
        assert_eq!(one("afternotok:1", JobState::Running), DepStatus::Waiting);
        assert_eq!(one("afternotok:1", JobState::Completed), DepStatus::Never);
        for s in FINAL_NOT_OK {
            assert_eq!(one("afternotok:1", s), DepStatus::Satisfied, "{s:?}");
        }
    }

    #[test]
    fn afterany_needs_any_end() {
        assert_eq!(one("afterany:1", JobState::Pending), DepStatus::Waiting);
        assert_eq!(one("afterany:1", JobState::Running), DepStatus::Waiting);
        assert_eq!(one("afterany:1", JobState::Completed), DepStatus::Satisfied);
        for s in FINAL_NOT_OK {
            assert_eq!(one("afterany:1", s), DepStatus::Satisfied, "{s:?}");
        }
    }

    #[test]
    fn unknown_job_is_never() {
        for kind in ["afterok", "afterany", "afternotok"] {
            assert_eq!(
                one(&format!("{kind}:2"), JobState::Completed),
                DepStatus::Never
            );
        }
    }

    #[test]
    fn singleton_waits_while_blocked() {
        let spec = parse("singleton").unwrap();
        assert_eq!(evaluate(&spec, |_| None, true), DepStatus::Waiting);
        assert_eq!(evaluate(&spec, |_| None, false), DepStatus::Satisfied);
    }

    /// Jobs 1 completed, 2 running, 3 failed; others unknown.
    fn states(j: JobId) -> Option<JobState> {
        match j {
            1 => Some(JobState::Completed),
            2 => Some(JobState::Running),
            3 => Some(JobState::Failed),
            _ => None,
        }
    }

    #[test]
    fn all_joined_waits_for_every_one_and_fails_on_any() {
        let eval = |t: &str| evaluate(&parse(t).unwrap(), states, false);
        assert_eq!(eval("afterok:1,afternotok:3"), DepStatus::Satisfied);
        assert_eq!(eval("afterok:1:3"), DepStatus::Never);
        assert_eq!(eval("afterok:1:2"), DepStatus::Waiting);
        // Never wins over waiting: the running job cannot rescue it.
        assert_eq!(eval("afterok:2,afterok:3"), DepStatus::Never);
        assert_eq!(eval("afterany:1:3,afterok:9"), DepStatus::Never);
        let spec = parse("afterok:1,singleton").unwrap();
        assert_eq!(evaluate(&spec, states, true), DepStatus::Waiting);
        assert_eq!(evaluate(&spec, states, false), DepStatus::Satisfied);
    }

    #[test]
    fn any_joined_needs_one_and_fails_only_when_all_fail() {
        let eval = |t: &str| evaluate(&parse(t).unwrap(), states, false);
        assert_eq!(eval("afterok:3?afterok:1"), DepStatus::Satisfied);
        assert_eq!(eval("afterok:3?afterok:2"), DepStatus::Waiting);
        assert_eq!(eval("afterok:3?afternotok:1?afterany:9"), DepStatus::Never);
        // Within one kind the ids are alternatives too, as in Slurm (job 3
        // failed, job 1 completed).
        assert_eq!(eval("afterok:3:1?afterok:9"), DepStatus::Satisfied);
        assert_eq!(eval("afterok:3:9?afterok:3"), DepStatus::Never);
        let spec = parse("afterok:3?singleton").unwrap();
        assert_eq!(evaluate(&spec, states, true), DepStatus::Waiting);
        assert_eq!(evaluate(&spec, states, false), DepStatus::Satisfied);
    }

    #[test]
    fn no_dependencies_is_satisfied() {
        for all in [true, false] {
            let spec = DependencySpec {
                all,
                deps: Vec::new(),
            };
            assert_eq!(evaluate(&spec, |_| None, true), DepStatus::Satisfied);
        }
    }

    #[test]
    fn reasons() {
        assert_eq!(DepStatus::Satisfied.reason(), None);
        assert_eq!(DepStatus::Waiting.reason(), Some(Reason::Dependency));
        assert_eq!(
            DepStatus::Never.reason(),
            Some(Reason::DependencyNeverSatisfied)
        );
    }
}
