//! The parts of a job spec that decide *when* a job may start rather than
//! *where*: dependencies (`--dependency`), begin time (`--begin`), and the
//! names it carries (`--constraint` features, `--reservation`). Checked at
//! submit, turned into the pass's `dependency` reason for pending jobs, and
//! checked again by `apply` before a placement starts (invariant 3).

use std::collections::BTreeMap;

use berth_scheduler::deps::{self, DepKind, DepStatus};
use berth_scheduler::{JobId, JobSpec, JobState, Reason};

use super::{JobRecord, SmState};

/// Most features a job may require.
pub const FEATURES_PER_JOB_MAX: usize = 32;
/// Longest feature or reservation name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Longest `--dependency` text, in bytes.
pub const DEPENDENCY_BYTES_MAX: usize = 1024;

/// Checks what can be checked without the state: the dependency text
/// parses, feature and reservation names are names.
pub(super) fn validate(spec: &JobSpec) -> Result<(), String> {
    if spec.dependency.len() > DEPENDENCY_BYTES_MAX {
        return Err(format!(
            "dependency is longer than {DEPENDENCY_BYTES_MAX} bytes"
        ));
    }
    if !spec.dependency.is_empty() {
        deps::parse(&spec.dependency).map_err(|e| e.to_string())?;
    }
    if spec.features.len() > FEATURES_PER_JOB_MAX {
        return Err(format!(
            "{} features asked for; at most {FEATURES_PER_JOB_MAX}",
            spec.features.len()
        ));
    }
    for feature in &spec.features {
        check_name("feature", feature)?;
    }
    if !spec.reservation.is_empty() {
        check_name("reservation", &spec.reservation)?;
    }
    Ok(())
}

/// Most features one host may declare.
pub const FEATURES_PER_HOST_MAX: usize = 64;

/// A host's declared features, as its registration carries them: at most
/// [`FEATURES_PER_HOST_MAX`], each a name.
pub(super) fn validate_host_features(features: &[String]) -> Result<(), String> {
    if features.len() > FEATURES_PER_HOST_MAX {
        return Err(format!(
            "{} host features declared; at most {FEATURES_PER_HOST_MAX}",
            features.len()
        ));
    }
    for feature in features {
        check_name("feature", feature)?;
    }
    Ok(())
}

/// A feature or reservation name: 1 to [`NAME_BYTES_MAX`] bytes of ASCII
/// letters, digits, `_`, `-` and `.`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{what} name {name:?} is not valid: 1 to {NAME_BYTES_MAX} letters, digits, '_', '-' or '.'"
        ))
    }
}

/// Jobs of one (user, name) that hold back a `singleton` job: whether one
/// runs, and the lowest pending id.
#[derive(Default, Clone, Copy)]
struct SingletonPeers {
    running: bool,
    first_pending: Option<JobId>,
}

/// What the dependency checks need of the state: job states, and for
/// `singleton` the running and pending jobs by user and name (built only
/// when some pending job asks for it).
pub(super) struct DependencyView<'a> {
    state: &'a SmState,
    singleton: BTreeMap<(&'a str, &'a str), SingletonPeers>,
}

impl<'a> DependencyView<'a> {
    pub(super) fn new(state: &'a SmState) -> DependencyView<'a> {
        let wants_singleton = state
            .pending
            .iter()
            .filter_map(|id| state.data.jobs.get(id))
            .any(|r| has_singleton(&r.job.spec));
        DependencyView::with_singleton(state, wants_singleton)
    }

    /// As [`DependencyView::new`], told whether some pending job has a
    /// `singleton` dependency (the pass's pending views know).
    pub(super) fn with_singleton(state: &'a SmState, wants_singleton: bool) -> DependencyView<'a> {
        let mut singleton: BTreeMap<(&str, &str), SingletonPeers> = BTreeMap::new();
        if wants_singleton {
            for id in state.pending.iter().chain(&state.running) {
                let Some(r) = state.data.jobs.get(id) else {
                    continue;
                };
                let key = (r.job.spec.user.as_str(), r.job.spec.name.as_str());
                let peers = singleton.entry(key).or_default();
                if r.job.state == JobState::Running {
                    peers.running = true;
                } else if peers.first_pending.is_none_or(|first| *id < first) {
                    peers.first_pending = Some(*id);
                }
            }
        }
        DependencyView { state, singleton }
    }

    /// What `record`'s dependencies say now. A stored dependency always
    /// parses (it was checked at submit); one that did not would never be
    /// satisfied.
    pub(super) fn status(&self, record: &JobRecord) -> DepStatus {
        let spec = &record.job.spec;
        if spec.dependency.is_empty() {
            return DepStatus::Satisfied;
        }
        let Ok(parsed) = deps::parse(&spec.dependency) else {
            return DepStatus::Never;
        };
        // Slurm's singleton: no other job of the same user and name is
        // running, or pending ahead of it (submitted earlier).
        let blocked = self
            .singleton
            .get(&(spec.user.as_str(), spec.name.as_str()))
            .is_some_and(|p| p.running || p.first_pending.is_some_and(|f| f < record.job.id));
        deps::evaluate(
            &parsed,
            |id| self.state.data.jobs.get(&id).map(|r| r.job.state),
            blocked,
        )
    }
}

pub(super) fn has_singleton(spec: &JobSpec) -> bool {
    !spec.dependency.is_empty()
        && deps::parse(&spec.dependency)
            .is_ok_and(|d| d.deps.iter().any(|d| d.kind == DepKind::Singleton))
}

impl SmState {
    /// Every job id a submitted dependency names must exist (Slurm refuses
    /// a dependency on an unknown job).
    pub(super) fn check_dependency_jobs(&self, spec: &JobSpec) -> Result<(), String> {
        if spec.dependency.is_empty() {
            return Ok(());
        }
        let parsed = deps::parse(&spec.dependency).map_err(|e| e.to_string())?;
        for dep in &parsed.deps {
            if let Some(missing) = dep.jobs.iter().find(|id| !self.data.jobs.contains_key(id)) {
                return Err(format!(
                    "dependency {}:{missing}: job {missing} does not exist",
                    dep.kind.name()
                ));
            }
        }
        Ok(())
    }

    /// Why a pending job may not start at `now_ms` for its own spec's sake
    /// (begin time, dependencies); `None` when it may. `apply` asks this
    /// of every placement.
    pub(super) fn start_blocker(
        &self,
        view: &DependencyView<'_>,
        record: &JobRecord,
        now_ms: u64,
    ) -> Option<Reason> {
        if let Some(reason) = view.status(record).reason() {
            return Some(reason);
        }
        (record.job.spec.begin_ms > now_ms).then_some(Reason::BeginTime)
    }
}
