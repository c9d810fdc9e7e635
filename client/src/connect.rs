//! Opening a gRPC channel to one Berth server, with the timeouts that keep
//! a CLI call from hanging on a dead or black-holed node.

use crate::error::ClientError;
use berth_auth::grpc::{AttachCredentials, CredentialedChannel};
use berth_proto::api::berth_api_client::BerthApiClient;
use std::sync::OnceLock;
use std::time::Duration;
use tonic::transport::Endpoint;

/// The environment variable naming the cluster's CA file (PEM): with it,
/// connections use TLS and verify the servers.
pub const CA_ENV: &str = "BERTH_CA";

/// Turns TLS on for this process's connections when a CA is given
/// (`--ca`, else `BERTH_CA`).
pub fn set_ca_file(path: Option<&std::path::Path>) -> Result<(), ClientError> {
    let from_env = std::env::var_os(CA_ENV).map(std::path::PathBuf::from);
    let Some(path) = path.map(std::path::Path::to_path_buf).or(from_env) else {
        return Ok(());
    };
    let pem = std::fs::read(&path).map_err(|e| ClientError::InvalidServer {
        addr: path.display().to_string(),
        reason: format!("cannot read the CA file: {e}"),
    })?;
    berth_auth::tls::set_client_ca(Some(&pem));
    Ok(())
}

/// How long to wait for one server to accept a connection before trying
/// the next. Short: a live node on a LAN answers in well under this.
pub const CONNECT_TIMEOUT_MS: u64 = 1_000;

/// How long one request may take. Writes wait for a majority commit and
/// an fsync, so this is generous; it only bounds a server that went silent.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// The generated client over a tonic channel whose calls carry the user's
/// token (when one is set).
pub type ApiClient = BerthApiClient<CredentialedChannel>;

/// The environment variable holding the user's token.
pub const TOKEN_ENV: &str = "BERTH_TOKEN";

static TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// Sets the token every call of this process carries (`--token`); without
/// it, `BERTH_TOKEN` is used. The first call wins.
pub fn set_token(token: Option<String>) {
    let _ = TOKEN.set(token.filter(|t| !t.trim().is_empty()));
}

/// The token this process's calls carry: `set_token`'s, else
/// `BERTH_TOKEN`'s, trimmed; none when neither is set or blank.
pub fn token() -> Option<&'static str> {
    TOKEN
        .get_or_init(|| {
            std::env::var(TOKEN_ENV)
                .ok()
                .filter(|t| !t.trim().is_empty())
        })
        .as_deref()
        .map(str::trim)
}

fn credentials() -> AttachCredentials {
    AttachCredentials::bearer(token())
}

/// Why one server could not be connected to.
pub(crate) enum ConnectFailure {
    /// The address itself is wrong: trying others would hide the mistake.
    Invalid(ClientError),
    /// Nobody answered there in time.
    Unreachable,
}

/// Connects to the first server in `servers` that answers, trying each
/// "host:port" once, in order, [`CONNECT_TIMEOUT_MS`] each. Requests on the
/// returned client time out after [`REQUEST_TIMEOUT_MS`].
pub async fn connect(servers: &[String]) -> Result<ApiClient, ClientError> {
    let mut tried = Vec::new();
    for addr in servers {
        match connect_one(addr).await {
            Ok(client) => return Ok(client),
            Err(ConnectFailure::Invalid(err)) => return Err(err),
            Err(ConnectFailure::Unreachable) => tried.push(addr.clone()),
        }
    }
    Err(ClientError::NoServer { tried })
}

/// Connects to one server.
pub(crate) async fn connect_one(addr: &str) -> Result<ApiClient, ConnectFailure> {
    let endpoint = endpoint(addr).map_err(ConnectFailure::Invalid)?;
    let connect_timeout = Duration::from_millis(CONNECT_TIMEOUT_MS);
    // The endpoint's own timeout covers the TCP connect; this one also
    // covers a peer that accepts but never completes the HTTP/2 handshake.
    match tokio::time::timeout(connect_timeout * 2, endpoint.connect()).await {
        Ok(Ok(channel)) => Ok(BerthApiClient::with_interceptor(channel, credentials())
            .max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_proto::MAX_MESSAGE_BYTES)),
        Ok(Err(_)) | Err(_) => Err(ConnectFailure::Unreachable),
    }
}

/// The endpoint for a "host:port", refusing what cannot be one.
fn endpoint(addr: &str) -> Result<Endpoint, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidServer {
        addr: addr.to_string(),
        reason: reason.to_string(),
    };
    if addr.contains("://") {
        return Err(invalid(
            "expected host:port (only plain http:// is supported)",
        ));
    }
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(invalid("expected host:port"));
    }
    berth_auth::tls::endpoint(addr)
        .map_err(|e| invalid(&e.to_string()))
        .map(|e| {
            e.connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
                .timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_need_a_host_and_a_port() {
        for good in [
            "127.0.0.1:7101",
            "localhost:1",
            "[::1]:7101",
            "node-1.example:65535",
        ] {
            assert!(endpoint(good).is_ok(), "{good}");
        }
        for bad in [
            "localhost",
            ":7101",
            "h:port",
            "h:70000",
            "https://h:1",
            "h:1/x y",
        ] {
            assert!(
                matches!(endpoint(bad), Err(ClientError::InvalidServer { .. })),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn nothing_listening_is_no_server_naming_every_address() {
        // Port 1 on loopback: refused at once, no timeout needed.
        let servers = vec!["127.0.0.1:1".to_string(), "127.0.0.1:2".to_string()];
        let err = connect(&servers).await.expect_err("no server");
        assert_eq!(
            err.to_string(),
            "no Berth server answered (tried 127.0.0.1:1, 127.0.0.1:2)"
        );
    }
}
