//! The library's one error type for talking to a cluster.

use thiserror::Error;

/// Why a call to the cluster failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No server in the list accepted a connection.
    #[error("no Berth server answered (tried {})", tried_list(.tried))]
    NoServer {
        /// Every address tried, in order, each once.
        tried: Vec<String>,
    },
    /// An address that cannot be a `host:port`.
    #[error("invalid server address \"{addr}\": {reason}")]
    InvalidServer {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A server answered with an error status.
    #[error("{} ({:?} from {server})", status_text(.status), .status.code())]
    Rpc {
        /// The server that answered.
        server: String,
        /// Its answer (boxed: a Status is large and errors are rare).
        status: Box<tonic::Status>,
    },
}

impl ClientError {
    /// The gRPC status code when a server answered, e.g. to tell NOT_FOUND
    /// from a transport failure.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            ClientError::Rpc { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    /// The server's status when a server answered.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            ClientError::Rpc { status, .. } => Some(status),
            _ => None,
        }
    }
}

fn tried_list(tried: &[String]) -> String {
    if tried.is_empty() {
        "no server given".to_string()
    } else {
        tried.join(", ")
    }
}

/// The server's message on one line; its code's description when empty.
fn status_text(status: &tonic::Status) -> String {
    let message = status.message().trim();
    if message.is_empty() {
        status.code().description().to_string()
    } else {
        message
            .lines()
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_server_names_every_address_on_one_line() {
        let err = ClientError::NoServer {
            tried: vec!["127.0.0.1:7101".into(), "127.0.0.1:7102".into()],
        };
        assert_eq!(
            err.to_string(),
            "no Berth server answered (tried 127.0.0.1:7101, 127.0.0.1:7102)"
        );
        assert_eq!(
            ClientError::NoServer { tried: vec![] }.to_string(),
            "no Berth server answered (tried no server given)"
        );
    }

    #[test]
    fn rpc_errors_keep_the_servers_words_on_one_line() {
        let err = ClientError::Rpc {
            server: "h:1".into(),
            status: Box::new(tonic::Status::not_found("job 9 not found\nsecond line")),
        };
        assert_eq!(
            err.to_string(),
            "job 9 not found; second line (NotFound from h:1)"
        );
        assert_eq!(err.code(), Some(tonic::Code::NotFound));
        let bare = ClientError::Rpc {
            server: "h:1".into(),
            status: Box::new(tonic::Status::unavailable("")),
        };
        assert_eq!(
            bare.to_string(),
            "The service is currently unavailable (Unavailable from h:1)"
        );
    }
}
