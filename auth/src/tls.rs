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

/// An endpoint for an address that names its scheme: `https://host:port`
/// needs this process's CA (an error names it when none is set);
/// `http://host:port` and a bare `host:port` are plain.
pub fn endpoint_for_url(addr: &str) -> Result<Endpoint, String> {
    if let Some(rest) = addr.strip_prefix("https://") {
        let Some(tls) = CLIENT_TLS.get().and_then(Option::as_ref) else {
            return Err(format!(
                "{addr} speaks TLS, and no CA is set to verify it with (--ca or BERTH_CA)"
            ));
        };
        return Endpoint::from_shared(format!("https://{rest}"))
            .and_then(|e| e.tls_config(tls.clone()))
            .map_err(|e| format!("{addr}: {e}"));
    }
    let rest = addr.strip_prefix("http://").unwrap_or(addr);
    Endpoint::from_shared(format!("http://{rest}")).map_err(|e| format!("{addr}: {e}"))
}

/// The listener's TLS: the node's certificate chain and key (PEM).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> ServerTlsConfig {
    ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    // This test binary never sets a CA.
    #[test]
    fn a_tls_address_needs_a_ca_and_a_plain_one_does_not() {
        let err = endpoint_for_url("https://10.0.0.1:6818").expect_err("no CA");
        assert!(err.contains("no CA is set"), "{err}");
        for plain in ["http://10.0.0.1:6818", "10.0.0.1:6818"] {
            let e = endpoint_for_url(plain).expect("plain");
            assert_eq!(e.uri().to_string(), "http://10.0.0.1:6818/");
        }
    }
}
