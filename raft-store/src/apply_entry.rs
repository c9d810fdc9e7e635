//! One committed log entry applied to the state: what every openraft state
//! machine over `SmState` does per entry (the RocksDB store, and the Raft
//! simulation's in-memory one, under their own type configurations).

use berth_state::{Dirty, Request, Response, SmState, COMMAND_VERSION};
use openraft::{BasicNode, EntryPayload, LogId, RaftTypeConfig, StoredMembership};

use crate::NodeId;

/// Where the state machine stands in the Raft log: what openraft asks of
/// it, and what a snapshot of it says in its metadata. The state itself
/// knows only the applied index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedMeta {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
}

/// A log entry whose command is newer than this build understands.
#[derive(Debug, thiserror::Error)]
#[error(
    "log entry {log_id} has command version {version}, newer than this berthd understands \
     ({COMMAND_VERSION}); upgrade this node"
)]
pub struct NewerCommand {
    pub log_id: LogId<NodeId>,
    pub version: u32,
}

/// Applies the committed entry `log_id` with `payload`: a command through
/// [`SmState::apply`], a membership recorded, a blank entry nothing; then
/// it is the last applied. A command of a newer version is refused and
/// changes nothing: the node stops rather than misapply it, and must be
/// upgraded before it can go on.
pub fn apply_entry<C>(
    state: &mut SmState,
    meta: &mut AppliedMeta,
    log_id: LogId<NodeId>,
    payload: &EntryPayload<C>,
    dirty: &mut Dirty,
) -> Result<Response, NewerCommand>
where
    C: RaftTypeConfig<D = Request, NodeId = NodeId, Node = BasicNode>,
{
    let response = match payload {
        EntryPayload::Blank => Response::None,
        EntryPayload::Normal(request) => {
            if request.version > COMMAND_VERSION {
                return Err(NewerCommand {
                    log_id,
                    version: request.version,
                });
            }
            state.apply(&request.command, dirty)
        }
        EntryPayload::Membership(membership) => {
            meta.membership = StoredMembership::new(Some(log_id), membership.clone());
            Response::None
        }
    };
    meta.last_applied = Some(log_id);
    state.set_applied_index(log_id.index);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use berth_scheduler::JobSpec;
    use berth_state::{Command, Dirty, Request, Response, SmState, COMMAND_VERSION};
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::{apply_entry, AppliedMeta};
    use crate::TypeConfig;

    fn log_id(index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    fn submit(version: u32) -> EntryPayload<TypeConfig> {
        EntryPayload::Normal(Request {
            version,
            command: std::sync::Arc::new(Command::SubmitJob {
                request_id: "r".into(),
                spec: JobSpec {
                    user: "u".into(),
                    command: "true".into(),
                    cpus: 1,
                    ..JobSpec::default()
                },
                now_ms: 1,
            }),
        })
    }

    #[test]
    fn an_entry_is_applied_and_a_newer_command_changes_nothing() {
        let mut s = SmState::default();
        let mut meta = AppliedMeta::default();
        let mut apply = |s: &mut SmState, index, payload: &EntryPayload<TypeConfig>| {
            apply_entry(s, &mut meta, log_id(index), payload, &mut Dirty::default())
        };
        let blank = EntryPayload::<TypeConfig>::Blank;
        assert_eq!(apply(&mut s, 1, &blank).ok(), Some(Response::None));
        assert_eq!(s.applied_index(), 1);
        let err =
            apply(&mut s, 2, &submit(COMMAND_VERSION + 1)).expect_err("a newer command is refused");
        assert!(err.to_string().contains("upgrade this node"), "{err}");
        assert_eq!(s.applied_index(), 1);
        assert_eq!(s.jobs().count(), 0);
        let done = apply(&mut s, 2, &submit(COMMAND_VERSION));
        assert!(
            matches!(done, Ok(Response::Submitted { job_id: 1, .. })),
            "{done:?}"
        );
        assert_eq!(s.applied_index(), 2);
        assert_eq!(meta.last_applied, Some(log_id(2)));
    }
}
