//! The live WAL file kept longer than what RocksDB has written to it.
//!
//! Every acknowledged log append waits for an `fdatasync` of RocksDB's WAL,
//! on the leader and then on a follower. When the append made the file
//! longer, that fdatasync must also write the inode (its new size) and, on
//! ext4 without a journal, the block allocation's metadata: three I/Os one
//! after the other instead of one. etcd avoids this by giving each WAL
//! segment its full size up front; RocksDB's own preallocation keeps the
//! size as it is (`FALLOC_FL_KEEP_SIZE`), so its appends still grow the
//! file. This thread does what etcd does for RocksDB's live WAL: it
//! allocates 64 MiB past the written end with `fallocate`, size included,
//! before the writes get there, and syncs that once.
//!
//! Why RocksDB is content with a WAL longer than its writes:
//! - it writes a WAL at its own file offset (no `O_APPEND`), so its writes
//!   land inside the extended size;
//! - when it closes a WAL it truncates the file to what it wrote;
//! - after a crash, the reader takes the unwritten tail (read as zeros) for
//!   zero-type records, which it skips as preallocated space without
//!   reporting corruption, in every recovery mode; the same holds for an
//!   older WAL this thread extended just as RocksDB moved to a new one.
//!
//! Measured on the benchmark machine (BENCHMARKS.md, twentieth session):
//! an fdatasync after a 1 KB write inside the file's size took 121 µs
//! median against 179 µs for an append; in a storm of `sbatch` processes
//! the leader's fsync and a submit's latency both fell, the rate rose 4%.
//!
//! A failure (a filesystem without `fallocate`, say) is logged once and
//! ends the thread: the WAL then grows by appends, as before.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How much room the thread keeps ahead of RocksDB's writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    /// The live WAL is extended once fewer bytes than this are left
    /// between what RocksDB wrote and the file's size.
    pub(crate) ahead_min_bytes: u64,
    /// How far past the written end it is then extended.
    pub(crate) extend_bytes: u64,
}

/// At 2,000 submits/s (about 2 MB/s of WAL) 16 MiB is 8 s of writes, many
/// checks; 64 MiB is etcd's segment size.
pub(crate) const ROOM: Room = Room {
    ahead_min_bytes: 16 << 20,
    extend_bytes: 64 << 20,
};
/// The probe file that tells whether the filesystem's extent map marks
/// allocated but unwritten space; removed after the probe.
const PROBE_FILE: &str = "berth-wal-prealloc.probe";
/// How often the thread looks at the live WAL.
const CHECK_INTERVAL_MS: u64 = 200;
/// Directory entries one scan reads at most: a store holds a few dozen
/// files (RocksDB's tables, manifests, a few WALs).
const DIR_ENTRIES_MAX: usize = 100_000;

/// What one look at the store directory did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Extension {
    /// No WAL file in the directory.
    NoWal,
    /// The live WAL has room enough ahead of its writes.
    Enough,
    /// The live WAL's size was set to this many bytes.
    Extended { size_bytes: u64 },
}

/// The newest WAL file in `dir`: RocksDB names them `NNNNNN.log` with
/// increasing numbers, and writes only to the newest.
pub(crate) fn newest_wal(dir: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut newest: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(dir)?.take(DIR_ENTRIES_MAX) {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if newest.as_ref().is_none_or(|(n, _)| number > *n) {
            newest = Some((number, entry.path()));
        }
    }
    Ok(newest.map(|(_, path)| path))
}

/// Extends the live WAL in `dir` if its written end is within
/// `room.ahead_min_bytes` of its size.
pub(crate) fn extend_live_wal(dir: &Path, room: Room) -> std::io::Result<Extension> {
    let Some(path) = newest_wal(dir)? else {
        return Ok(Extension::NoWal);
    };
    // Never created here: a WAL RocksDB deleted since the scan stays gone,
    // and the next check looks again.
    let file = match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Extension::NoWal),
        Err(e) => return Err(e),
    };
    let size_bytes = file.metadata()?.len();
    let written_end = written_end(&file)?;
    if size_bytes.saturating_sub(written_end) >= room.ahead_min_bytes {
        return Ok(Extension::Enough);
    }
    let target = written_end + room.extend_bytes;
    allocate(&file, target)?;
    // The new size durable now, so the appends' fdatasyncs need not.
    file.sync_data()?;
    Ok(Extension::Extended { size_bytes: target })
}

/// Allocates `[0, size_bytes)` of `file` where unallocated and sets its
/// size to `size_bytes` if it was smaller; written data stays as it is.
fn allocate(file: &std::fs::File, size_bytes: u64) -> std::io::Result<()> {
    let len = libc::off_t::try_from(size_bytes).map_err(std::io::Error::other)?;
    // SAFETY: fallocate takes a descriptor `file` owns and integers.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `dir`'s filesystem tells written data from space allocated past
/// it in its extent map. One that does not would make the written end look
/// like the file's size, and every check extend it again.
fn reports_unwritten_space(dir: &Path) -> std::io::Result<bool> {
    let path = dir.join(PROBE_FILE);
    let probe = (|| {
        let mut file = std::fs::File::create(&path)?;
        std::io::Write::write_all(&mut file, &[0u8; 4_096])?;
        file.sync_data()?;
        allocate(&file, 1 << 20)?;
        written_end(&file)
    })();
    let removed = std::fs::remove_file(&path);
    let end = probe?;
    removed?;
    Ok(end < 1 << 20)
}

/// `FS_IOC_FIEMAP`: `_IOWR('f', 11, struct fiemap)`, whose fixed part is
/// 32 bytes.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// The last extent of the file.
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Space allocated and never written: it reads as zeros.
const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
/// Extents asked for in one call.
const EXTENTS_PER_CALL: usize = 32;
/// Calls for one file at most: a WAL of a few hundred MiB has a few
/// extents, and a bound this large is never reached.
const FIEMAP_CALLS_MAX: usize = 4_096;

/// `struct fiemap_extent` (linux/fiemap.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// `struct fiemap` with room for `EXTENTS_PER_CALL` extents.
#[repr(C)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; EXTENTS_PER_CALL],
}

/// Where the written data of `file` ends: the end of its last extent that
/// is not unwritten (block-rounded), as the filesystem's extent map says.
/// Not `SEEK_HOLE`, which counts unwritten space that something read (a
/// copy of the directory, a read-only open replaying the WAL) as data, so
/// each read would bring an extension more. Data RocksDB wrote and has not
/// synced yet may still show as unwritten: that errs towards extending
/// early, never late.
fn written_end(file: &std::fs::File) -> std::io::Result<u64> {
    let mut end = 0;
    let mut start = 0;
    for _ in 0..FIEMAP_CALLS_MAX {
        let mut map = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped_extents: 0,
            extent_count: EXTENTS_PER_CALL as u32,
            reserved: 0,
            extents: [FiemapExtent::default(); EXTENTS_PER_CALL],
        };
        // SAFETY: `map` is a `struct fiemap` with room for the
        // `extent_count` extents it declares, which is all the kernel
        // writes; the descriptor is `file`'s.
        if unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map as *mut Fiemap) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mapped = (map.mapped_extents as usize).min(EXTENTS_PER_CALL);
        let extents = &map.extents[..mapped];
        for extent in extents {
            if extent.flags & FIEMAP_EXTENT_UNWRITTEN == 0 {
                end = end.max(extent.logical + extent.length);
            }
        }
        match extents.last() {
            Some(last) if last.flags & FIEMAP_EXTENT_LAST == 0 => {
                start = last.logical + last.length;
            }
            _ => return Ok(end),
        }
    }
    Ok(end)
}

/// The thread of one store. Dropping it ends the thread and waits for it.
pub(crate) struct WalPreallocator {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl WalPreallocator {
    pub(crate) fn start(dir: PathBuf) -> std::io::Result<WalPreallocator> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("berth-wal-prealloc".into())
            .spawn(move || {
                match reports_unwritten_space(&dir) {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(
                            dir = %dir.display(),
                            "the filesystem does not report unwritten space; \
                             the WAL grows by appends"
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot probe the filesystem for WAL preallocation; the WAL grows by appends");
                        return;
                    }
                }
                extend_until_stopped(&dir, &stopped);
            })?;
        Ok(WalPreallocator {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Extends the live WAL as it fills, until `stopped` says so or an
/// extension fails.
fn extend_until_stopped(dir: &Path, stopped: &mpsc::Receiver<()>) {
    loop {
        match extend_live_wal(dir, ROOM) {
            Ok(Extension::Extended { size_bytes }) => {
                tracing::debug!(dir = %dir.display(), size_bytes, "live WAL extended");
            }
            Ok(Extension::NoWal | Extension::Enough) => {}
            Err(e) => {
                tracing::warn!(
                    dir = %dir.display(), error = %e,
                    "cannot extend the live WAL ahead of its writes; \
                     it grows by appends, each fsync a little slower"
                );
                return;
            }
        }
        match stopped.recv_timeout(Duration::from_millis(CHECK_INTERVAL_MS)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

impl Drop for WalPreallocator {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the WAL preallocation thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Small, so the tests write little.
    const TEST_ROOM: Room = Room {
        ahead_min_bytes: 64 << 10,
        extend_bytes: 256 << 10,
    };

    fn write_file(path: &Path, bytes: usize) {
        std::fs::write(path, vec![7u8; bytes]).expect("write");
    }

    fn len(path: &Path) -> u64 {
        std::fs::metadata(path).expect("stat").len()
    }

    #[test]
    fn only_the_newest_wal_is_extended_and_only_when_its_room_runs_low() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !reports_unwritten_space(dir.path()).expect("probe") {
            eprintln!("skipped: this filesystem does not report unwritten space");
            return;
        }
        let old = dir.path().join("000003.log");
        let live = dir.path().join("000012.log");
        write_file(&old, 1_000);
        write_file(&live, 10_000);
        // Not WALs, whatever their names suggest.
        write_file(&dir.path().join("LOG"), 100);
        write_file(&dir.path().join("999999.log.old"), 100);

        // The written end is block-rounded.
        let size_bytes = 12_288 + TEST_ROOM.extend_bytes;
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("extend"),
            Extension::Extended { size_bytes }
        );
        assert_eq!(len(&live), size_bytes);
        assert_eq!(len(&old), 1_000, "an older WAL is left alone");
        assert_eq!(len(&dir.path().join("999999.log.old")), 100);
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("again"),
            Extension::Enough
        );

        // Writes inside the size from where the data ends, as RocksDB's
        // (a block-aligned end, as after the first extension), until less
        // than the minimum room is left: then it is extended again.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(&live)
            .expect("open");
        let written_to = size_bytes - TEST_ROOM.ahead_min_bytes + 4_096;
        let fill = usize::try_from(written_to - 10_000).expect("fits");
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(10_000)).expect("seek");
        file.write_all(&vec![1u8; fill]).expect("write");
        file.sync_data().expect("sync");
        assert_eq!(len(&live), size_bytes, "writes inside the size keep it");
        let end = written_end(&file).expect("end");
        assert!((written_to..written_to + 4_096).contains(&end), "{end}");
        let size_bytes = end + TEST_ROOM.extend_bytes;
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("low"),
            Extension::Extended { size_bytes }
        );

        // What was written is still there; the rest reads as zeros. And
        // reading it all (into the page cache) does not make the unwritten
        // room look written.
        let bytes = std::fs::read(&live).expect("read");
        assert_eq!(bytes.len() as u64, size_bytes);
        assert!(bytes[..10_000].iter().all(|b| *b == 7));
        assert!(bytes[10_000..fill + 10_000].iter().all(|b| *b == 1));
        assert!(bytes[fill + 10_000..].iter().all(|b| *b == 0));
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("after the read"),
            Extension::Enough
        );
    }

    #[test]
    fn a_new_empty_wal_is_extended_and_a_directory_without_one_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("none"),
            Extension::NoWal
        );
        let live = dir.path().join("000005.log");
        write_file(&live, 0);
        assert_eq!(
            extend_live_wal(dir.path(), TEST_ROOM).expect("empty"),
            Extension::Extended {
                size_bytes: TEST_ROOM.extend_bytes
            }
        );
        assert_eq!(len(&live), TEST_ROOM.extend_bytes);
    }

    #[test]
    fn the_probe_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        reports_unwritten_space(dir.path()).expect("probe");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
