//! What the store examples submit (shared through `mod common;`; a folder,
//! so cargo does not take it for an example of its own).

use berth_raft_store::TypeConfig;
use berth_scheduler::JobSpec;
use berth_state::{Command, Request};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

/// The log entry at `index` (term 1, node 1) carrying `command`.
pub fn entry(index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request::new(command)),
    }
}

/// Job number `n`'s `SubmitJob` command, sent with `request_id`.
pub fn submit(n: u64, request_id: String) -> Command {
    Command::SubmitJob {
        spec: JobSpec {
            name: format!("job-{n}"),
            user: "alice".into(),
            command: "/home/alice/bin/simulate --steps 1000 --out /scratch/alice/run".into(),
            cpus: 4,
            mem_mb: 8192,
            ..JobSpec::default()
        },
        request_id,
        now_ms: 1_700_000_000_000 + n,
    }
}
