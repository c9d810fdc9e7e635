//! Receiving a backup (`berth admin backup FILE`): the `BackupState`
//! stream's chunks are written in order to `FILE.tmp`, checked against the
//! length and CRC-32 the first chunk announces, synced, and renamed onto
//! `FILE`, so `FILE` is either the whole, verified backup or untouched.
//! The file's layout is the server's business (`berth_raft_store::backup`);
//! `berthd store restore` verifies it again.

use std::io::Write;
use std::path::{Path, PathBuf};

use berth_proto::api::{BackupChunk, BackupInfo};
use thiserror::Error;
use tonic::codegen::tokio_stream::{Stream, StreamExt};

/// Why a backup could not be received or written.
#[derive(Debug, Error)]
pub enum BackupFileError {
    /// The stream broke off or the server sent an error mid-way.
    #[error("the backup stream failed after {received} bytes: {status}")]
    Stream {
        received: u64,
        status: Box<tonic::Status>,
    },
    /// The server sent something that does not add up.
    #[error("the server sent a bad backup stream: {0}")]
    Protocol(String),
    /// The bytes received are not what the server said it sent.
    #[error("the backup arrived damaged: {0}")]
    Damaged(String),
    /// Writing the file failed.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What was written.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupWritten {
    pub path: PathBuf,
    pub info: BackupInfo,
    /// Chunks received.
    pub chunks: u64,
}

/// `FILE.tmp`, beside `FILE`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes the backup in `stream` to `path` atomically. On any error the
/// temporary file is removed and `path` is left as it was.
pub async fn write_backup<S>(stream: S, path: &Path) -> Result<BackupWritten, BackupFileError>
where
    S: Stream<Item = Result<BackupChunk, tonic::Status>> + Unpin,
{
    let tmp = temp_path(path);
    let result = receive(stream, path, &tmp).await;
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

async fn receive<S>(
    mut stream: S,
    path: &Path,
    tmp: &Path,
) -> Result<BackupWritten, BackupFileError>
where
    S: Stream<Item = Result<BackupChunk, tonic::Status>> + Unpin,
{
    let write_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source: std::io::Error| BackupFileError::Write { path: p, source }
    };
    let mut file = std::fs::File::create(tmp).map_err(write_err(tmp))?;
    let mut info: Option<BackupInfo> = None;
    let mut received: u64 = 0;
    let mut chunks: u64 = 0;
    let mut crc = flate2::Crc::new();
    while let Some(item) = stream.next().await {
        let chunk = item.map_err(|status| BackupFileError::Stream {
            received,
            status: Box::new(status),
        })?;
        chunks += 1;
        match (&info, chunk.info) {
            (None, Some(first)) => info = Some(first),
            (None, None) => {
                return Err(BackupFileError::Protocol(
                    "the first chunk does not say what the backup holds".into(),
                ))
            }
            (Some(_), Some(_)) => {
                return Err(BackupFileError::Protocol(format!(
                    "chunk {chunks} repeats the backup's description"
                )))
            }
            (Some(_), None) => {}
        }
        let expected_bytes = info.as_ref().map_or(0, |i| i.file_bytes);
        if chunk.offset != received {
            return Err(BackupFileError::Protocol(format!(
                "chunk {chunks} starts at byte {}, expected {received}",
                chunk.offset
            )));
        }
        if chunk.data.len() > berth_proto::BACKUP_CHUNK_BYTES {
            return Err(BackupFileError::Protocol(format!(
                "chunk {chunks} carries {} bytes, over {}",
                chunk.data.len(),
                berth_proto::BACKUP_CHUNK_BYTES
            )));
        }
        received += chunk.data.len() as u64;
        if received > expected_bytes {
            return Err(BackupFileError::Damaged(format!(
                "more than the {expected_bytes} bytes announced arrived"
            )));
        }
        crc.update(&chunk.data);
        file.write_all(&chunk.data).map_err(write_err(tmp))?;
    }
    let info = info.ok_or_else(|| BackupFileError::Protocol("the stream was empty".into()))?;
    if received != info.file_bytes {
        return Err(BackupFileError::Damaged(format!(
            "{received} of the {} bytes announced arrived",
            info.file_bytes
        )));
    }
    if crc.sum() != info.file_crc32 {
        return Err(BackupFileError::Damaged(format!(
            "its CRC-32 is {:#010x}, the server's is {:#010x}",
            crc.sum(),
            info.file_crc32
        )));
    }
    file.sync_all().map_err(write_err(tmp))?;
    drop(file);
    std::fs::rename(tmp, path).map_err(write_err(path))?;
    // The rename is durable once the directory is synced.
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(write_err(dir))?;
    Ok(BackupWritten {
        path: path.to_path_buf(),
        info,
        chunks,
    })
}

#[cfg(test)]
// The items of a fake stream are the generated Result<_, tonic::Status>.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    fn info_for(file: &[u8]) -> BackupInfo {
        let mut crc = flate2::Crc::new();
        crc.update(file);
        BackupInfo {
            format_version: 1,
            last_log_index: 42,
            last_log_term: 3,
            voter_ids: vec![1, 2, 3],
            jobs: 7,
            hosts: 1,
            snapshot_bytes: 10,
            file_bytes: file.len() as u64,
            file_crc32: crc.sum(),
            created_ms: 1,
        }
    }

    fn chunks(file: &[u8], size: usize) -> Vec<Result<BackupChunk, tonic::Status>> {
        let mut out: Vec<Result<BackupChunk, tonic::Status>> = file
            .chunks(size)
            .enumerate()
            .map(|(n, piece)| {
                Ok(BackupChunk {
                    info: None,
                    offset: (n * size) as u64,
                    data: piece.to_vec(),
                })
            })
            .collect();
        if let Some(Ok(first)) = out.first_mut() {
            first.info = Some(info_for(file));
        }
        out
    }

    async fn write(
        items: Vec<Result<BackupChunk, tonic::Status>>,
        path: &Path,
    ) -> Result<BackupWritten, BackupFileError> {
        write_backup(tonic::codegen::tokio_stream::iter(items), path).await
    }

    #[tokio::test]
    async fn chunks_are_written_in_order_and_renamed_into_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.bak");
        let file: Vec<u8> = (0..10_000u32).map(|n| (n % 251) as u8).collect();
        let written = write(chunks(&file, 4096), &path).await.expect("write");
        assert_eq!(written.chunks, 3);
        assert_eq!(written.info.jobs, 7);
        assert_eq!(std::fs::read(&path).expect("read"), file);
        assert!(!temp_path(&path).exists());
    }

    #[tokio::test]
    async fn a_damaged_or_broken_stream_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.bak");
        std::fs::write(&path, b"previous backup").expect("write");
        let file: Vec<u8> = (0..10_000u32).map(|n| (n % 13) as u8).collect();

        let mut flipped = chunks(&file, 4096);
        if let Some(Ok(c)) = flipped.get_mut(1) {
            c.data[5] ^= 1;
        }
        let mut short = chunks(&file, 4096);
        short.pop();
        let mut broken = chunks(&file, 4096);
        broken[2] = Err(tonic::Status::unavailable("leader lost"));
        let mut gap = chunks(&file, 4096);
        let _skipped = gap.remove(1);
        let mut no_info = chunks(&file, 4096);
        if let Some(Ok(c)) = no_info.first_mut() {
            c.info = None;
        }
        for (what, items, says) in [
            ("a flipped bit", flipped, "CRC-32"),
            (
                "a missing last chunk",
                short,
                "of the 10000 bytes announced arrived",
            ),
            ("an error mid-way", broken, "leader lost"),
            ("a gap", gap, "starts at byte 8192, expected 4096"),
            (
                "no description",
                no_info,
                "does not say what the backup holds",
            ),
            ("nothing", Vec::new(), "the stream was empty"),
        ] {
            let err = write(items, &path).await.expect_err(what).to_string();
            assert!(err.contains(says), "{what}: {err}");
            assert_eq!(
                std::fs::read(&path).expect("read"),
                b"previous backup",
                "{what}"
            );
            assert!(!temp_path(&path).exists(), "{what}");
        }
    }
}
