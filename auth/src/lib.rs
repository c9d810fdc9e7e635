//! Who is calling, and may they. Users present a signed token
//! (`Authorization: Bearer <token>`): its payload names the user, their
//! roles and an expiry, and an HMAC-SHA256 over it with the cluster's
//! token secret proves the cluster's admin issued it
//! (`berth admin token issue`). Nodes and agents prove they belong to the
//! cluster with a shared cluster secret (`x-berth-cluster-secret`).
//!
//! Pure: time is an argument, secrets are bytes the caller read.

pub mod grpc;
pub mod step;
pub mod tls;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The metadata key carrying the cluster secret between nodes and agents.
pub const CLUSTER_SECRET_HEADER: &str = "x-berth-cluster-secret";
/// Shortest secret accepted, in bytes: a guessable secret is no secret.
pub const SECRET_BYTES_MIN: usize = 32;
/// Longest token accepted, in bytes (a header, not a payload).
pub const TOKEN_BYTES_MAX: usize = 4096;
/// The role that may change QOS, accounts, reservations and membership,
/// and act on anyone's jobs.
pub const ADMIN_ROLE: &str = "admin";

/// A token's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The user the token speaks for.
    pub user: String,
    pub roles: Vec<String>,
    /// Not valid at or after this time (seconds since the Unix epoch).
    pub exp_s: u64,
}

impl Claims {
    pub fn is_admin(&self) -> bool {
        self.roles.iter().any(|r| r == ADMIN_ROLE)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("no credentials: give a token (berth --token, BERTH_TOKEN)")]
    Missing,
    #[error("malformed token: {0}")]
    Malformed(String),
    #[error("token signature does not match: not issued for this cluster")]
    BadSignature,
    #[error("token expired at {exp_s} (now {now_s})")]
    Expired { exp_s: u64, now_s: u64 },
    #[error("the secret is shorter than {SECRET_BYTES_MIN} bytes")]
    WeakSecret,
    #[error("wrong cluster secret")]
    WrongClusterSecret,
    #[error("step credential does not match this job's allocation")]
    BadStepCredential,
}

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8]) -> Result<HmacSha256, AuthError> {
    if secret.len() < SECRET_BYTES_MIN {
        return Err(AuthError::WeakSecret);
    }
    HmacSha256::new_from_slice(secret).map_err(|_| AuthError::WeakSecret)
}

/// `base64url(payload JSON) "." base64url(HMAC-SHA256(secret, payload))`.
pub fn issue(claims: &Claims, secret: &[u8]) -> Result<String, AuthError> {
    let payload = serde_json::to_vec(claims).map_err(|e| AuthError::Malformed(e.to_string()))?;
    let mut m = mac(secret)?;
    m.update(&payload);
    let tag = m.finalize().into_bytes();
    Ok(format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(&payload),
        URL_SAFE_NO_PAD.encode(tag)
    ))
}

/// The claims of `token` if its signature matches `secret` and it has not
/// expired at `now_s`. The signature is checked (in constant time) before
/// the payload is parsed.
pub fn verify(token: &str, secret: &[u8], now_s: u64) -> Result<Claims, AuthError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(AuthError::Malformed(format!(
            "longer than {TOKEN_BYTES_MAX} bytes"
        )));
    }
    let (payload_b64, tag_b64) = token
        .split_once('.')
        .ok_or_else(|| AuthError::Malformed("expected PAYLOAD.SIGNATURE".into()))?;
    let payload = URL_SAFE_NO_PAD
        .decode(payload_b64)
        .map_err(|e| AuthError::Malformed(format!("payload: {e}")))?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag_b64)
        .map_err(|e| AuthError::Malformed(format!("signature: {e}")))?;
    let mut m = mac(secret)?;
    m.update(&payload);
    m.verify_slice(&tag).map_err(|_| AuthError::BadSignature)?;
    let claims: Claims = serde_json::from_slice(&payload)
        .map_err(|e| AuthError::Malformed(format!("payload: {e}")))?;
    if now_s >= claims.exp_s {
        return Err(AuthError::Expired {
            exp_s: claims.exp_s,
            now_s,
        });
    }
    Ok(claims)
}

/// Compares a presented cluster secret with the configured one in
/// constant time: both are turned into an HMAC tag of one fixed message,
/// and `verify_slice` compares tags without an early exit.
pub fn check_cluster_secret(presented: &[u8], secret: &[u8]) -> Result<(), AuthError> {
    const MESSAGE: &[u8] = b"berth cluster secret";
    let mut expected = mac(secret)?;
    expected.update(MESSAGE);
    let expected = expected.finalize().into_bytes();
    let mut got =
        HmacSha256::new_from_slice(presented).map_err(|_| AuthError::WrongClusterSecret)?;
    got.update(MESSAGE);
    got.verify_slice(&expected)
        .map_err(|_| AuthError::WrongClusterSecret)
}

/// A secret from a file's contents: surrounding whitespace is not part of
/// it, it must be long enough, and it must be printable ASCII (it travels
/// in a header; `openssl rand -hex 32` makes a good one).
pub fn secret_from_file_text(text: &[u8]) -> Result<Vec<u8>, AuthError> {
    let trimmed = text.trim_ascii();
    if trimmed.len() < SECRET_BYTES_MIN {
        return Err(AuthError::WeakSecret);
    }
    if !trimmed.iter().all(|b| b.is_ascii_graphic()) {
        return Err(AuthError::Malformed(
            "a secret must be printable ASCII without spaces".into(),
        ));
    }
    Ok(trimmed.to_vec())
}

/// The token in an `authorization` header value (`Bearer <token>`).
pub fn bearer_token(header: &str) -> Result<&str, AuthError> {
    header
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| AuthError::Malformed("expected \"Bearer <token>\"".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn alice(exp_s: u64) -> Claims {
        Claims {
            user: "alice".into(),
            roles: vec![],
            exp_s,
        }
    }

    #[test]
    fn issued_tokens_verify_until_they_expire() {
        let token = issue(&alice(100), SECRET).expect("issue");
        assert_eq!(verify(&token, SECRET, 99), Ok(alice(100)));
        assert_eq!(
            verify(&token, SECRET, 100),
            Err(AuthError::Expired {
                exp_s: 100,
                now_s: 100
            })
        );
    }

    #[test]
    fn tampering_and_other_secrets_are_refused() {
        let token = issue(&alice(100), SECRET).expect("issue");
        let other = b"ffffffffffffffffffffffffffffffff";
        assert_eq!(verify(&token, other, 1), Err(AuthError::BadSignature));
        // Claim admin by editing the payload: the signature no longer fits.
        let (_, tag) = token.split_once('.').expect("dot");
        let forged_payload = URL_SAFE_NO_PAD.encode(
            serde_json::to_vec(&Claims {
                roles: vec![ADMIN_ROLE.into()],
                ..alice(100)
            })
            .expect("json"),
        );
        assert_eq!(
            verify(&format!("{forged_payload}.{tag}"), SECRET, 1),
            Err(AuthError::BadSignature)
        );
        assert!(matches!(
            verify("garbage", SECRET, 1),
            Err(AuthError::Malformed(_))
        ));
        assert_eq!(issue(&alice(1), b"short"), Err(AuthError::WeakSecret));
    }

    #[test]
    fn cluster_secret_must_match() {
        assert_eq!(check_cluster_secret(SECRET, SECRET), Ok(()));
        assert_eq!(
            check_cluster_secret(b"0123456789abcdef0123456789abcdeX", SECRET),
            Err(AuthError::WrongClusterSecret)
        );
        assert_eq!(
            secret_from_file_text(b"  0123456789abcdef0123456789abcdef\n"),
            Ok(SECRET.to_vec())
        );
        assert_eq!(
            secret_from_file_text(b"short\n"),
            Err(AuthError::WeakSecret)
        );
    }
}
