//! What Rust's runtime start would have done for `sbatch` and it needs:
//! its arguments, standard streams that are open, and SIGPIPE ignored (so
//! a closed stdout is an error the code sees, as in any Rust program). See
//! `main` for what is left out and why.

use std::ffi::{CStr, OsString};
use std::os::unix::ffi::OsStringExt;

/// The arguments the C runtime passed to `main`, first the program name.
///
/// # Safety
/// `argv` must hold `argc` pointers to NUL-terminated strings (what the C
/// runtime passes to `main`).
#[cfg_attr(test, allow(dead_code))]
pub unsafe fn args(argc: libc::c_int, argv: *const *const libc::c_char) -> Vec<OsString> {
    let count = usize::try_from(argc).unwrap_or(0);
    (0..count)
        .filter_map(|i| {
            // SAFETY: `i < argc`, as the caller promised.
            let arg = unsafe { *argv.add(i) };
            // SAFETY: a non-null argument is a NUL-terminated string.
            (!arg.is_null())
                .then(|| OsString::from_vec(unsafe { CStr::from_ptr(arg) }.to_bytes().to_vec()))
        })
        .collect()
}

/// Opens /dev/null on any of fds 0, 1 and 2 that is closed, so that no
/// socket or file this process opens takes one of their numbers (and an
/// answer meant for stdout lands in it), and ignores SIGPIPE.
#[cfg_attr(test, allow(dead_code))]
pub fn guard_standard_streams() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll(2) on a live array of three pollfd, no waiting.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    if polled > 0 {
        for pollfd in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
            // SAFETY: open(2) of a constant NUL-terminated path. The lowest
            // free descriptor is taken, and the closed ones are tried in
            // order, so each lands on the one it replaces.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if fd != pollfd.fd {
                // Nothing safe to write to: stop here, as Rust's start does.
                std::process::abort();
            }
        }
    }
    // SAFETY: setting a signal's disposition to SIG_IGN touches no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_in_order_and_null_ones_skipped() {
        let strings = [c"sbatch", c"-H", c"--wrap", c"true"];
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: four pointers to NUL-terminated strings that outlive the call.
        let got = unsafe { args(4, pointers.as_ptr()) };
        assert_eq!(got, ["sbatch", "-H", "--wrap", "true"].map(OsString::from));
        pointers[1] = std::ptr::null();
        // SAFETY: as above, one pointer null.
        let got = unsafe { args(4, pointers.as_ptr()) };
        assert_eq!(got, ["sbatch", "--wrap", "true"].map(OsString::from));
        // SAFETY: no pointer is read for a count of zero or less.
        assert!(unsafe { args(-1, pointers.as_ptr()) }.is_empty());
    }
}
