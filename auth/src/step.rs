//! The step credential: what lets a job's srun start tasks on the other
//! hosts of its allocation (as Slurm's job credential does). It is an
//! HMAC-SHA256 of the job and allocation ids under the cluster secret,
//! which every agent holds: the batch host's agent hands it to the job,
//! a member host's agent checks it. It names one allocation, so it is
//! worthless once that allocation ends (the agents then refuse it because
//! the allocation is no longer theirs).

use hmac::Mac;

use crate::{mac, AuthError};

/// Length of a credential in hex characters (a SHA-256 tag).
pub const STEP_CREDENTIAL_HEX_LEN: usize = 64;

fn tag(secret: &[u8], job_id: u64, alloc_id: u64) -> Result<crate::HmacSha256, AuthError> {
    let mut m = mac(secret)?;
    m.update(b"berth step credential\0");
    m.update(&job_id.to_be_bytes());
    m.update(&alloc_id.to_be_bytes());
    Ok(m)
}

/// The credential of `(job_id, alloc_id)`, lower-case hex.
pub fn issue(secret: &[u8], job_id: u64, alloc_id: u64) -> Result<String, AuthError> {
    let bytes = tag(secret, job_id, alloc_id)?.finalize().into_bytes();
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks a presented credential in constant time.
pub fn verify(secret: &[u8], job_id: u64, alloc_id: u64, presented: &str) -> Result<(), AuthError> {
    if presented.len() != STEP_CREDENTIAL_HEX_LEN {
        return Err(AuthError::BadStepCredential);
    }
    let mut bytes = Vec::with_capacity(STEP_CREDENTIAL_HEX_LEN / 2);
    for pair in presented.as_bytes().chunks(2) {
        let text = std::str::from_utf8(pair).map_err(|_| AuthError::BadStepCredential)?;
        let byte = u8::from_str_radix(text, 16).map_err(|_| AuthError::BadStepCredential)?;
        bytes.push(byte);
    }
    tag(secret, job_id, alloc_id)?
        .verify_slice(&bytes)
        .map_err(|_| AuthError::BadStepCredential)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_credential_names_one_allocation() {
        let c = issue(SECRET, 7, 70).expect("issue");
        assert_eq!(c.len(), STEP_CREDENTIAL_HEX_LEN);
        assert!(verify(SECRET, 7, 70, &c).is_ok());
        assert!(matches!(
            verify(SECRET, 7, 71, &c),
            Err(AuthError::BadStepCredential)
        ));
        assert!(matches!(
            verify(SECRET, 8, 70, &c),
            Err(AuthError::BadStepCredential)
        ));
        let other = b"fedcba9876543210fedcba9876543210";
        assert!(verify(other, 7, 70, &c).is_err());
    }

    #[test]
    fn malformed_credentials_are_refused() {
        for bad in [
            "",
            "zz",
            &"g".repeat(64),
            &"a".repeat(63),
            "é".repeat(32).as_str(),
        ] {
            assert!(
                matches!(verify(SECRET, 1, 1, bad), Err(AuthError::BadStepCredential)),
                "{bad:?}"
            );
        }
        assert!(matches!(issue(b"short", 1, 1), Err(AuthError::WeakSecret)));
    }
}
