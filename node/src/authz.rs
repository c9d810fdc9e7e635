//! Who is calling the public API, and what they may do. With auth off
//! every caller is trusted (a local dev cluster). With auth on, a caller
//! is a user with a signed token, or another node forwarding a call it has
//! already authorized (it proves itself with the cluster secret).
//!
//! The rules: any authenticated user reads; users submit, cancel, hold,
//! release and requeue only their own jobs; QOS, accounts, users,
//! partitions, reservations, membership and backups need the admin role.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use berth_auth::{bearer_token, secret_from_file_text, verify, Claims, CLUSTER_SECRET_HEADER};
use tonic::{Request, Status};

use crate::config::AuthConfig;

/// The secrets, read once at start.
#[derive(Debug, Clone, Default)]
pub struct AuthKeys {
    pub token: Option<Vec<u8>>,
    pub cluster: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Secret {
        path: String,
        source: berth_auth::AuthError,
    },
}

fn read_secret(path: &Path) -> Result<Vec<u8>, AuthSetupError> {
    let text = std::fs::read(path).map_err(|source| AuthSetupError::Read {
        path: path.display().to_string(),
        source,
    })?;
    secret_from_file_text(&text).map_err(|source| AuthSetupError::Secret {
        path: path.display().to_string(),
        source,
    })
}

impl AuthKeys {
    pub fn load(config: &AuthConfig) -> Result<AuthKeys, AuthSetupError> {
        if !config.enabled {
            return Ok(AuthKeys::default());
        }
        Ok(AuthKeys {
            token: config
                .token_secret_file
                .as_deref()
                .map(read_secret)
                .transpose()?,
            cluster: config
                .cluster_secret_file
                .as_deref()
                .map(read_secret)
                .transpose()?,
        })
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// Auth is off.
    Trusted,
    /// Another node of the cluster (it authorized the call itself).
    Node,
    User(Claims),
}

impl Caller {
    /// May change policy, membership, and anyone's jobs.
    pub fn is_admin(&self) -> bool {
        match self {
            Caller::Trusted | Caller::Node => true,
            Caller::User(c) => c.is_admin(),
        }
    }

    pub fn require_admin(&self, what: &str) -> Result<(), Status> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "{what} needs the admin role"
            )))
        }
    }

    /// May act on a job of `owner`.
    pub fn require_owner(&self, owner: &str, what: &str) -> Result<(), Status> {
        match self {
            Caller::User(c) if !c.is_admin() && c.user != owner => Err(Status::permission_denied(
                format!("{what}: the job belongs to {owner}, not {}", c.user),
            )),
            _ => Ok(()),
        }
    }

    /// The user a submit is made for: the caller's own name when the spec
    /// names none; refused when it names someone else (unless admin).
    pub fn submit_as(&self, asked: &str) -> Result<Option<String>, Status> {
        match self {
            Caller::User(c) if asked.is_empty() => Ok(Some(c.user.clone())),
            Caller::User(c) if asked != c.user && !c.is_admin() => Err(Status::permission_denied(
                format!("{} may not submit jobs as {asked}", c.user),
            )),
            _ => Ok(None),
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Authenticates the caller of `request`.
pub fn authenticate<T>(keys: &AuthKeys, request: &Request<T>) -> Result<Caller, Status> {
    let Some(token_secret) = &keys.token else {
        return Ok(Caller::Trusted);
    };
    let metadata = request.metadata();
    if let (Some(secret), Some(presented)) = (&keys.cluster, metadata.get(CLUSTER_SECRET_HEADER)) {
        berth_auth::check_cluster_secret(presented.as_bytes(), secret)
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        return Ok(Caller::Node);
    }
    let header = metadata
        .get("authorization")
        .ok_or_else(|| Status::unauthenticated(berth_auth::AuthError::Missing.to_string()))?
        .to_str()
        .map_err(|_| Status::unauthenticated("authorization header is not text"))?;
    let token = bearer_token(header).map_err(|e| Status::unauthenticated(e.to_string()))?;
    verify(token, token_secret, now_s())
        .map(Caller::User)
        .map_err(|e| Status::unauthenticated(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, admin: bool) -> Caller {
        Caller::User(Claims {
            user: name.into(),
            roles: if admin { vec!["admin".into()] } else { vec![] },
            exp_s: u64::MAX,
        })
    }

    #[test]
    fn users_act_on_their_own_jobs_and_admins_on_all() {
        assert!(user("bob", false).require_owner("bob", "cancel").is_ok());
        let refused = user("bob", false)
            .require_owner("alice", "cancel")
            .unwrap_err();
        assert_eq!(
            refused.message(),
            "cancel: the job belongs to alice, not bob"
        );
        assert!(user("root", true).require_owner("alice", "cancel").is_ok());
        assert!(user("bob", false).require_admin("UpsertQos").is_err());
        assert_eq!(
            user("bob", false).submit_as("").ok(),
            Some(Some("bob".into()))
        );
        assert!(user("bob", false).submit_as("alice").is_err());
        assert_eq!(Caller::Trusted.submit_as("alice").ok(), Some(None));
    }

    #[test]
    fn unauthenticated_callers_get_nothing() {
        let keys = AuthKeys {
            token: Some(b"0123456789abcdef0123456789abcdef".to_vec()),
            cluster: Some(b"fedcba9876543210fedcba9876543210".to_vec()),
        };
        let bare = Request::new(());
        assert_eq!(
            authenticate(&keys, &bare).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let mut forged = Request::new(());
        forged.metadata_mut().insert(
            CLUSTER_SECRET_HEADER,
            "not-the-secret-not-the-secret-xx".parse().expect("ascii"),
        );
        assert_eq!(
            authenticate(&keys, &forged).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let token = berth_auth::issue(
            &Claims {
                user: "bob".into(),
                roles: vec![],
                exp_s: u64::MAX,
            },
            keys.token.as_deref().expect("secret"),
        )
        .expect("issue");
        let mut good = Request::new(());
        good.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
        assert_eq!(authenticate(&keys, &good).ok(), Some(user("bob", false)));
        assert_eq!(
            authenticate(&AuthKeys::default(), &bare).ok(),
            Some(Caller::Trusted)
        );
    }
}
