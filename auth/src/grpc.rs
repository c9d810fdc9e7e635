//! Credentials on gRPC calls: an interceptor that attaches them to every
//! outgoing request, and one that requires the cluster secret on every
//! incoming request (Raft transport and agent protocol).

use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::{check_cluster_secret, CLUSTER_SECRET_HEADER};

/// Attaches a credential header to every request (none when empty).
#[derive(Debug, Clone, Default)]
pub struct AttachCredentials {
    header: Option<(&'static str, AsciiMetadataValue)>,
}

impl AttachCredentials {
    /// The cluster secret, for node-to-node and agent-to-node calls.
    pub fn cluster_secret(secret: Option<&[u8]>) -> AttachCredentials {
        AttachCredentials {
            header: secret
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| s.parse().ok())
                .map(|v| (CLUSTER_SECRET_HEADER, v)),
        }
    }

    /// A user's token, as `authorization: Bearer <token>`.
    pub fn bearer(token: Option<&str>) -> AttachCredentials {
        AttachCredentials {
            header: token
                .and_then(|t| format!("Bearer {t}").parse().ok())
                .map(|v| ("authorization", v)),
        }
    }

    /// Adds the credential to `metadata` (for requests built by hand).
    pub fn apply(&self, metadata: &mut MetadataMap) {
        if let Some((key, value)) = &self.header {
            metadata.insert(*key, value.clone());
        }
    }
}

impl Interceptor for AttachCredentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.apply(request.metadata_mut());
        Ok(request)
    }
}

/// A channel whose requests carry credentials.
pub type CredentialedChannel = InterceptedService<Channel, AttachCredentials>;

/// Refuses every request without the cluster secret (when one is set).
#[derive(Debug, Clone, Default)]
pub struct RequireClusterSecret {
    secret: Option<Vec<u8>>,
}

impl RequireClusterSecret {
    pub fn new(secret: Option<Vec<u8>>) -> RequireClusterSecret {
        RequireClusterSecret { secret }
    }
}

impl Interceptor for RequireClusterSecret {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(secret) = &self.secret else {
            return Ok(request);
        };
        let presented = request
            .metadata()
            .get(CLUSTER_SECRET_HEADER)
            .ok_or_else(|| Status::unauthenticated("cluster secret required"))?;
        check_cluster_secret(presented.as_bytes(), secret)
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        Ok(request)
    }
}
