//! TLS (rustls) for every gRPC connection of a process: the listener
//! presents the node's certificate; every client (node to node, agent to
//! node, CLI to node) verifies the server against the cluster's CA. One
//! setting per process, made once at start, so every place that opens a
//! channel asks [`endpoint`] and gets `https` when TLS is on.

use std::sync::OnceLock;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

static CLIENT_TLS: OnceLock<Option<ClientTlsConfig>> = OnceLock::new();

/// Makes every channel this process opens use TLS, trusting `ca_pem`.
/// The first call wins; later ones change nothing.
pub fn set_client_ca(ca_pem: Option<&[u8]>) {
    let config =
        ca_pem.map(|pem| ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)));
    let _ = CLIENT_TLS.set(config);
}

/// True when channels of this process use TLS.
pub fn client_tls_on() -> bool {
    CLIENT_TLS.get().is_some_and(Option::is_some)
}

/// An endpoint for "host:port": `https` with the CA when TLS is on, else
/// plain `http`.
pub fn endpoint(addr: &str) -> Result<Endpoint, tonic::transport::Error> {
    match CLIENT_TLS.get().and_then(Option::as_ref) {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))?.tls_config(tls.clone()),
        None => Endpoint::from_shared(format!("http://{addr}")),
    }
}

/// The listener's TLS: the node's certificate chain and key (PEM).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> ServerTlsConfig {
    ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem))
}
