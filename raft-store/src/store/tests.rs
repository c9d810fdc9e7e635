//! openraft's storage conformance suite against the RocksDB store, and the
//! store's own open/recovery checks.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use tempfile::TempDir;

use super::*;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(&e))?;
        let handles = open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, handles.log, handles.state_machine))
    }
}

#[test]
fn openraft_storage_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(Builder)?;
    Ok(())
}

#[test]
fn foreign_directory_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "hello").expect("write");
    match open(dir.path()) {
        Err(StoreError::Foreign { .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a foreign directory was opened"),
    }
}

#[test]
fn newer_format_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    {
        let handles = open(dir.path()).expect("open");
        let db = handles.log.db.clone();
        db.put_cf(cf(&db, CF_META), KEY_FORMAT, encode(&(FORMAT_VERSION + 1)).expect("enc"))
            .expect("put");
    }
    match open(dir.path()) {
        Err(StoreError::NewerFormat { found, .. }) => assert_eq!(found, FORMAT_VERSION + 1),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a newer store was opened"),
    }
}
