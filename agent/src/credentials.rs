//! What the agent attaches to every call to the cluster: the cluster
//! secret when the cluster runs with auth. Set once at start, read by the
//! session and the outbox.

use std::sync::OnceLock;

use berth_auth::grpc::AttachCredentials;

static CREDENTIALS: OnceLock<AttachCredentials> = OnceLock::new();

/// Sets the credentials for the process; later calls change nothing.
pub fn set(secret: Option<&[u8]>) {
    let _ = CREDENTIALS.set(AttachCredentials::cluster_secret(secret));
}

/// The credentials to attach (none before `set`).
pub fn get() -> AttachCredentials {
    CREDENTIALS.get().cloned().unwrap_or_default()
}
