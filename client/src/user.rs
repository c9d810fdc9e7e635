//! Who is submitting. The API trusts the client's word for now (api.proto:
//! "Filled from the caller's identity"); authentication comes with the
//! node issue.

/// The current user's name: $USER, else $LOGNAME, else the name of the
/// process's uid in the password database, else the uid as a number (as
/// Slurm shows a uid it cannot resolve).
pub fn current_user() -> String {
    user_from(std::env::var("USER").ok(), std::env::var("LOGNAME").ok())
        .or_else(passwd_name)
        .unwrap_or_else(|| {
            // SAFETY: getuid(2) cannot fail and touches no memory.
            unsafe { libc::getuid() }.to_string()
        })
}

fn user_from(user: Option<String>, logname: Option<String>) -> Option<String> {
    [user, logname]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_string())
        .find(|name| !name.is_empty())
}

/// Longest passwd record getpwuid_r may need, in bytes.
const PASSWD_BUFFER_BYTES: usize = 16 * 1024;

fn passwd_name() -> Option<String> {
    let mut record = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buffer = vec![0 as libc::c_char; PASSWD_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to memory owned here and sized as
    // passed; on success `found` points at `record`, whose strings live in
    // `buffer`, both alive until the end of this function.
    unsafe {
        let rc = libc::getpwuid_r(
            libc::getuid(),
            record.as_mut_ptr(),
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if rc != 0 || found.is_null() || (*found).pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr((*found).pw_name)
            .to_string_lossy()
            .into_owned();
        (!name.is_empty()).then_some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_then_logname() {
        assert_eq!(
            user_from(Some("alice".into()), Some("bob".into())).as_deref(),
            Some("alice")
        );
        assert_eq!(user_from(None, Some("bob".into())).as_deref(), Some("bob"));
        assert_eq!(
            user_from(Some(" ".into()), Some("bob".into())).as_deref(),
            Some("bob")
        );
        assert_eq!(user_from(None, None), None);
    }

    #[test]
    fn passwd_knows_this_process() {
        // Every test machine has a passwd entry for the uid running tests
        // (root on CI).
        assert!(passwd_name().is_some_and(|n| !n.is_empty()));
    }
}
