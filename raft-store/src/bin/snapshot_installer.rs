//! berth-snapshot-installer: the process that `tests/install_kill.rs` kills
//! with SIGKILL while it installs a snapshot. It opens the store at DIR and
//! installs the state in the backup file FILE through the state machine's
//! `install_snapshot` (what a follower runs when the leader's last chunk
//! arrives), printing `INSTALLING` before and `INSTALLED` after, each
//! flushed. Whatever state the store holds after a kill must be the old one
//! or the new one, never a mixture.
//!
//! Usage: berth-snapshot-installer DIR FILE

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use berth_raft_store::backup::read_file;
use berth_raft_store::open;
use openraft::storage::RaftStateMachine;
use openraft::SnapshotMeta;

async fn install(dir: &Path, file: &Path) -> Result<(), String> {
    let backup = read_file(file).map_err(|e| e.to_string())?;
    let mut store = open(dir).map_err(|e| e.to_string())?;
    let meta = SnapshotMeta {
        last_log_id: backup.header.last_log_id,
        last_membership: backup.header.membership.clone(),
        snapshot_id: "install-kill-test".into(),
    };
    let mut out = std::io::stdout();
    writeln!(out, "INSTALLING")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())?;
    store
        .state_machine
        .install_snapshot(
            &meta,
            Box::new(berth_raft_store::SnapshotData::from_bytes(backup.data)),
        )
        .await
        .map_err(|e| e.to_string())?;
    writeln!(out, "INSTALLED")
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, file] = args.as_slice() else {
        eprintln!("usage: berth-snapshot-installer DIR FILE");
        return ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berth-snapshot-installer: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(install(Path::new(dir), Path::new(file))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth-snapshot-installer: {e}");
            ExitCode::FAILURE
        }
    }
}
