//! Who a job runs as. An agent running as root switches to the job's user
//! (uid, primary gid and supplementary groups from the user database, by
//! the name the job was submitted under); root jobs are refused unless the
//! agent is configured to allow them. An agent that is not root can only
//! run jobs as itself.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// Most supplementary groups taken for one user (Linux's NGROUPS_MAX).
pub const GROUPS_MAX: usize = 65_536;
/// Largest buffer tried for one user database entry, in bytes.
const PASSWD_BUF_BYTES_MAX: usize = 1 << 20;

/// Whose identity jobs take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobUser {
    /// The user the job was submitted as (Slurm's behaviour).
    #[default]
    Submitter,
    /// The agent's own user, whatever the job says (single-user installs,
    /// test and `berthd dev` clusters whose submitters are not local
    /// users).
    Agent,
}

/// The identity to switch to before the job's program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

/// Why a job may not run as the user it names.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserError {
    #[error("the job names no user to run as")]
    NoUser,
    #[error("user {0:?} does not exist on this host")]
    Unknown(String),
    #[error("user name {0:?} contains a NUL byte")]
    BadName(String),
    #[error(
        "job would run as root (user {0:?}); set allow_root_jobs = true in the agent config to allow it"
    )]
    Root(String),
    #[error("cannot look up user {name:?}: {message}")]
    Lookup { name: String, message: String },
}

/// The identity a job of `user` runs as: `None` means "as the agent".
pub fn resolve(
    user: &str,
    policy: JobUser,
    allow_root_jobs: bool,
) -> Result<Option<RunAs>, UserError> {
    // SAFETY: geteuid has no preconditions.
    let agent_is_root = unsafe { libc::geteuid() } == 0;
    if !agent_is_root {
        return Ok(None);
    }
    let run_as = match policy {
        JobUser::Agent => {
            if !allow_root_jobs {
                return Err(UserError::Root("root".into()));
            }
            return Ok(None);
        }
        JobUser::Submitter => {
            if user.is_empty() {
                return Err(UserError::NoUser);
            }
            lookup(user)?
        }
    };
    if run_as.uid == 0 && !allow_root_jobs {
        return Err(UserError::Root(user.to_string()));
    }
    Ok(Some(run_as))
}

/// The user database entry of `name` and its groups.
pub fn lookup(name: &str) -> Result<RunAs, UserError> {
    let cname = CString::new(name).map_err(|_| UserError::BadName(name.to_string()))?;
    let mut buf_len = 4096usize;
    loop {
        let mut buf = vec![0 as libc::c_char; buf_len];
        // SAFETY: zeroed passwd is a valid out-parameter; all pointers
        // point into live buffers of the given lengths.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buf_len < PASSWD_BUF_BYTES_MAX {
            buf_len *= 2;
            continue;
        }
        if rc != 0 {
            return Err(UserError::Lookup {
                name: name.to_string(),
                message: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
        if result.is_null() {
            return Err(UserError::Unknown(name.to_string()));
        }
        // SAFETY: on success pw_dir points to a NUL-terminated string in
        // `buf`, which is still alive.
        let home = unsafe { CStr::from_ptr(pwd.pw_dir) }
            .to_string_lossy()
            .into_owned();
        let groups = group_list(&cname, pwd.pw_gid);
        return Ok(RunAs {
            name: name.to_string(),
            uid: pwd.pw_uid,
            gid: pwd.pw_gid,
            groups,
            home: PathBuf::from(home),
        });
    }
}

/// The supplementary groups of `name` (the primary `gid` included).
fn group_list(name: &CStr, gid: libc::gid_t) -> Vec<u32> {
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: `groups` has room for `count` entries.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        // Too small: `count` says how many there are.
        if count as usize > GROUPS_MAX || count <= n {
            return vec![gid];
        }
        n = count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_root_and_refuses_unknown() {
        let root = lookup("root").expect("root exists");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        assert_eq!(
            lookup("no-such-user-berth-test"),
            Err(UserError::Unknown("no-such-user-berth-test".into()))
        );
        assert!(matches!(lookup("a\0b"), Err(UserError::BadName(_))));
    }

    #[test]
    fn root_jobs_need_permission_when_the_agent_is_root() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // A non-root agent always runs jobs as itself.
            assert_eq!(resolve("root", JobUser::Submitter, false), Ok(None));
            return;
        }
        assert_eq!(
            resolve("root", JobUser::Submitter, false),
            Err(UserError::Root("root".into()))
        );
        assert_eq!(
            resolve("root", JobUser::Submitter, true).map(|r| r.map(|r| r.uid)),
            Ok(Some(0))
        );
        assert_eq!(
            resolve("", JobUser::Submitter, false),
            Err(UserError::NoUser)
        );
        assert_eq!(resolve("x", JobUser::Agent, true), Ok(None));
        assert!(resolve("x", JobUser::Agent, false).is_err());
    }
}
