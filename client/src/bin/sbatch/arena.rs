//! The `sbatch` binary's allocator: a bump arena in a fixed static region,
//! the system's allocator past it.
//!
//! Why: a submit lives a few milliseconds and allocates a few hundred KiB
//! in all. musl's malloc (the static build) maps and unmaps memory as
//! blocks come and go, and in a storm of submits those `mmap`/`munmap`
//! calls were about a fifth of each process's CPU (`perf record`, BENCHMARKS
//! "Slurm peer"). Here an allocation is an add, a free only gives back the
//! most recent block, and the region's untouched pages cost nothing: they
//! are `.bss`, mapped only when first written.
//!
//! The bound: [`ARENA_BYTES`] of address space; once it is used up, every
//! further allocation goes to the system's allocator, so a larger
//! allocation pattern is still served, only slower.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of the region. A submit uses a small part of it.
pub const ARENA_BYTES: usize = 4 * 1024 * 1024;

/// The region, aligned for any ordinary allocation.
#[repr(C, align(4096))]
struct Region(UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: bytes of the region are handed out by `Arena` under the atomic
// bump offset below, each range to one owner at a time.
unsafe impl Sync for Region {}

static REGION: Region = Region(UnsafeCell::new([0; ARENA_BYTES]));

/// Offset of the first free byte of the region.
static USED: AtomicUsize = AtomicUsize::new(0);

/// The highest offset ever handed out: bytes past it were never written,
/// so they are still the zeroes the region started with.
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// The global allocator of the `sbatch` binary.
pub struct Arena;

impl Arena {
    fn base() -> usize {
        REGION.0.get() as usize
    }

    /// Whether `ptr` lies in the region (then it came from the arena).
    fn owns(ptr: *mut u8) -> bool {
        let at = ptr as usize;
        at >= Self::base() && at < Self::base() + ARENA_BYTES
    }

    /// A block of `layout` from the region, and whether its bytes were
    /// never handed out before (so are still zero); `None` when it does
    /// not fit.
    fn bump(layout: Layout) -> Option<(*mut u8, bool)> {
        let base = Self::base();
        let mut used = USED.load(Ordering::Relaxed);
        loop {
            let start = (base + used).checked_next_multiple_of(layout.align())? - base;
            let end = start.checked_add(layout.size())?;
            if end > ARENA_BYTES {
                return None;
            }
            match USED.compare_exchange_weak(used, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    let high_before = HIGH.fetch_max(end, Ordering::Relaxed);
                    return Some(((base + start) as *mut u8, high_before <= start));
                }
                Err(now) => used = now,
            }
        }
    }
}

// SAFETY: a block from the region is a range no other live block overlaps
// (the offset only moves past it, or back over the most recent block when
// that one is freed), suitably aligned and of the requested size; blocks
// outside the region go to and come from `System`, which upholds the
// contract itself. `owns` tells the two apart, since the region is one
// fixed range of addresses.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::bump(layout) {
            Some((ptr, _)) => ptr,
            // SAFETY: the caller's layout, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::owns(ptr) {
            // The most recent block gives its bytes back; any other stays
            // used until the process ends.
            let start = ptr as usize - Self::base();
            let _ = USED.compare_exchange(
                start + layout.size(),
                start,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else {
            // SAFETY: not from the region, so from `System`, with this
            // layout (the caller's contract).
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let Some((ptr, fresh)) = Self::bump(layout) else {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        };
        // Bytes given back by `dealloc` may be handed out again and must
        // be zeroed; bytes past every earlier block are zero already, and
        // not writing them spares the page faults.
        if !fresh {
            // SAFETY: the block is ours, `layout.size()` bytes long.
            unsafe { std::ptr::write_bytes(ptr, 0, layout.size()) };
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::owns(ptr) {
            // The most recent block grows or shrinks in place.
            let start = ptr as usize - Self::base();
            let end = start + layout.size();
            if let Some(new_end) = start.checked_add(new_size).filter(|e| *e <= ARENA_BYTES) {
                if USED
                    .compare_exchange(end, new_end, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    HIGH.fetch_max(new_end, Ordering::Relaxed);
                    return ptr;
                }
            }
            if new_size <= layout.size() {
                return ptr;
            }
            // SAFETY: `new_size` with the old alignment is a valid layout
            // (the caller's contract for realloc).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            // SAFETY: as `alloc`.
            let moved = unsafe { self.alloc(new_layout) };
            if !moved.is_null() {
                // SAFETY: both blocks are at least `layout.size()` long and
                // distinct (the old one is still held).
                unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size()) };
                // SAFETY: the old block, with its layout.
                unsafe { self.dealloc(ptr, layout) };
            }
            moved
        } else {
            // SAFETY: a `System` block, passed on with the caller's contract.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_disjoint_and_keep_their_bytes_when_grown() {
        let arena = Arena;
        let small = Layout::from_size_align(24, 8).unwrap();
        let page = Layout::from_size_align(100, 4096).unwrap();
        // SAFETY: valid layouts; each block is freed with its own layout.
        unsafe {
            let a = arena.alloc(small);
            let b = arena.alloc(page);
            assert_eq!(b as usize % 4096, 0);
            assert!(b as usize >= a as usize + 24);
            a.write_bytes(1, 24);
            b.write_bytes(2, 100);
            // In place when `b` is still the most recent block, else
            // moved; the test harness's threads allocate from the same
            // arena meanwhile, so either may happen here.
            let grown = arena.realloc(b, page, 300);
            assert_eq!(grown as usize % 4096, 0);
            assert!(std::slice::from_raw_parts(grown, 100)
                .iter()
                .all(|x| *x == 2));
            let c = arena.alloc_zeroed(small);
            assert!(std::slice::from_raw_parts(c, 24).iter().all(|x| *x == 0));
            assert_eq!(*a.add(23), 1, "an earlier block is untouched");
            arena.dealloc(c, small);
            arena.dealloc(grown, Layout::from_size_align(300, 4096).unwrap());
            arena.dealloc(a, small);
        }
    }

    #[test]
    fn past_the_region_the_system_serves() {
        let arena = Arena;
        let huge = Layout::from_size_align(ARENA_BYTES + 1, 8).unwrap();
        // SAFETY: a valid layout, freed with itself.
        unsafe {
            let ptr = arena.alloc(huge);
            assert!(!ptr.is_null());
            assert!(!Arena::owns(ptr));
            ptr.add(ARENA_BYTES).write(7);
            arena.dealloc(ptr, huge);
        }
    }
}
