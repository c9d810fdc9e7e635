//! Which allocator this process uses: mimalloc for `berth sim`, the
//! system's (glibc's) malloc for every other command.
//!
//! Why two: `berth sim` replays traces through tens of thousands of
//! scheduling passes, each making many small, short-lived allocations, and
//! mimalloc runs a KTH-SP2 replay about 10% faster than glibc's malloc.
//! Every other command is one short process (`sbatch`, `squeue` in a
//! script's loop) that makes few allocations, and there mimalloc's own
//! start and exit (reserving and mapping its arena, initialising its
//! bitmaps, purging at exit) cost more than it saves: an `sbatch -H` took
//! 1.8-2.1 ms of CPU with mimalloc and 1.3-1.5 ms with glibc's malloc
//! (`perf stat -r 200`, BENCHMARKS.md "Slurm peer").
//!
//! The choice is made once, before the first allocation, from the
//! arguments glibc hands to `.init_array` functions, and never changes:
//! memory must go back to the allocator it came from. Where the arguments
//! are not handed over (a libc other than glibc) or something allocated
//! first, the process keeps the system's allocator.

use std::alloc::{GlobalAlloc, Layout, System};
#[cfg(all(target_os = "linux", target_env = "gnu"))]
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

/// The allocator chosen; [`UNDECIDED`] until the first allocation or the
/// `.init_array` call, whichever comes first.
static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether these arguments ask for the simulator: any of them is `sim`.
/// An argument that only happens to be `sim` (a job name, say) gets
/// mimalloc too, which only costs that process a little more to start.
pub fn wants_simulator<'a>(mut args: impl Iterator<Item = &'a [u8]>) -> bool {
    args.any(|arg| arg == b"sim")
}

/// The global allocator of the `berth` binary.
pub struct ChosenAllocator;

impl ChosenAllocator {
    fn choice() -> u8 {
        match CHOICE.load(Ordering::Relaxed) {
            UNDECIDED => {
                // Something allocates before the arguments were seen:
                // settle on the system's allocator for good. A racing
                // decision is read back, so both sides agree.
                match CHOICE.compare_exchange(
                    UNDECIDED,
                    SYSTEM,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => SYSTEM,
                    Err(decided) => decided,
                }
            }
            decided => decided,
        }
    }
}

// SAFETY: every call is forwarded to one allocator, the same one for the
// whole life of the process (CHOICE is written at most once, from
// UNDECIDED), so each block is freed or resized by the allocator that
// made it; both forwarded allocators uphold GlobalAlloc's contract.
unsafe impl GlobalAlloc for ChosenAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if Self::choice() == MIMALLOC {
            mimalloc::MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if Self::choice() == MIMALLOC {
            mimalloc::MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::choice() == MIMALLOC {
            mimalloc::MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if Self::choice() == MIMALLOC {
            mimalloc::MiMalloc.realloc(ptr, layout, new_size)
        } else {
            System.realloc(ptr, layout, new_size)
        }
    }
}

/// The allocator this process settled on, by name; settles it if nothing
/// has yet.
#[cfg(test)]
fn chosen() -> &'static str {
    if ChosenAllocator::choice() == MIMALLOC {
        "mimalloc"
    } else {
        "system"
    }
}

/// Called by glibc before `main` with the process's arguments (as it does
/// for every `.init_array` entry of the executable); Rust code has not run
/// yet, so nothing has allocated through [`ChosenAllocator`].
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn choose_from_arguments(argc: c_int, argv: *const *const c_char, _env: *const c_void) {
    let count = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() {
        return;
    }
    // SAFETY: glibc passes main's argc and argv: `argc` pointers to
    // NUL-terminated strings, which live for the whole process.
    let args = (0..count).filter_map(|i| {
        let arg = unsafe { *argv.add(i) };
        (!arg.is_null()).then(|| unsafe { CStr::from_ptr(arg) }.to_bytes())
    });
    let choice = if wants_simulator(args.skip(1)) {
        MIMALLOC
    } else {
        SYSTEM
    };
    // Loses only to an allocation that came first, which fixed SYSTEM.
    let _ = CHOICE.compare_exchange(UNDECIDED, choice, Ordering::Relaxed, Ordering::Relaxed);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[link_section = ".init_array"]
static CHOOSE_FROM_ARGUMENTS: extern "C" fn(c_int, *const *const c_char, *const c_void) =
    choose_from_arguments;

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(list: &'a [&'static str]) -> impl Iterator<Item = &'static [u8]> + 'a {
        list.iter().map(|a| a.as_bytes())
    }

    #[test]
    fn the_simulator_is_asked_for_by_a_sim_argument() {
        assert!(wants_simulator(args(&["sim", "swf", "--trace", "t.swf"])));
        assert!(wants_simulator(args(&[
            "--server",
            "a:1",
            "sim",
            "bench-pass"
        ])));
        assert!(!wants_simulator(args(&["submit", "--wrap", "simulate"])));
        assert!(!wants_simulator(args(&["-H", "--wrap", "true"])));
        assert!(!wants_simulator(args(&[])));
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn the_test_binary_chose_by_its_own_arguments_for_good() {
        // glibc ran the `.init_array` entry before main with this test
        // binary's arguments (a test filter `sim` would choose mimalloc).
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let expected = if wants_simulator(argv.iter().map(|a| a.as_bytes())) {
            "mimalloc"
        } else {
            "system"
        };
        assert_eq!(chosen(), expected);
        let _ = std::hint::black_box(vec![0u8; 1 << 20]);
        assert_eq!(chosen(), expected);
    }
}
