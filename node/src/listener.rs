//! The node's API port: one TCP listener for gRPC (HTTP/2, plain or TLS)
//! and, when TLS is off, the one-shot submit protocol
//! (`one_shot_submit`).
//!
//! Every connection is accepted here. With the one-shot protocol on, its
//! first byte says which it is (`berth_proto::submit_wire`: `B` for a
//! one-shot submit, `P` for HTTP/2's preface); only a connection that is
//! not a one-shot submit goes on to the gRPC server, through a bounded
//! queue that the server reads as its stream of connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::api_service::ApiService;

/// Connections accepted and not yet taken by the gRPC server.
const HANDOFF_QUEUE_MAX: usize = 256;
/// How long a new connection may stay silent before it is closed unread:
/// HTTP/2 and TLS clients speak first, at once.
const FIRST_BYTE_WAIT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors, say), so the
/// loop does not spin on it.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What the gRPC server reads its connections from.
pub type Incoming = ReceiverStream<std::io::Result<TcpStream>>;

/// How long the kernel holds a new connection back until its first bytes
/// arrive (`TCP_DEFER_ACCEPT`, whole seconds).
const DEFER_ACCEPT_S: libc::c_int = 5;

/// Binds `addr`; a node that cannot have its port fails at start.
///
/// Options set on the listener, which every accepted connection inherits
/// (one system call here rather than one per connection):
/// - `TCP_DEFER_ACCEPT`: the listener takes a connection only once the
///   client has sent something. Every client of this port speaks first,
///   so the accept wakes the node once, with the first byte there to
///   route on, rather than once for the handshake and again for the data.
/// - `TCP_NODELAY`: small requests and answers go out at once, not after
///   an ACK.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    set_tcp_option(&listener, libc::TCP_DEFER_ACCEPT, DEFER_ACCEPT_S)?;
    set_tcp_option(&listener, libc::TCP_NODELAY, 1)?;
    Ok(listener)
}

/// Sets the `IPPROTO_TCP` option `name` to `value` on `listener`.
fn set_tcp_option(
    listener: &TcpListener,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt(2) on a socket this listener owns, reading one
    // c_int that lives across the call.
    let done = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Accepts on `listener` until `shutdown` turns true. One-shot submits go
/// to `one_shot` (`None`: the protocol is off, as with TLS); every other
/// connection comes out of the returned stream.
pub fn spawn(
    listener: TcpListener,
    one_shot: Option<Arc<ApiService>>,
    mut shutdown: watch::Receiver<bool>,
) -> Incoming {
    let (tx, rx) = mpsc::channel(HANDOFF_QUEUE_MAX);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            match &one_shot {
                None => {
                    if tx.send(Ok(stream)).await.is_err() {
                        break;
                    }
                }
                Some(api) => {
                    tokio::spawn(route(stream, api.clone(), tx.clone()));
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// Sends a connection where its first byte says it belongs.
async fn route(
    stream: TcpStream,
    api: Arc<ApiService>,
    grpc: mpsc::Sender<std::io::Result<TcpStream>>,
) {
    match tokio::time::timeout(FIRST_BYTE_WAIT, first_byte(&stream)).await {
        Ok(Some(byte)) if byte == berth_proto::submit_wire::REQUEST_MAGIC[0] => {
            crate::one_shot_submit::serve(stream, api).await;
        }
        Ok(Some(_)) => {
            // The gRPC server gone means the node is stopping.
            let _ = grpc.send(Ok(stream)).await;
        }
        // Closed, failed or silent: nothing to serve.
        Ok(None) | Err(_) => {}
    }
}

/// The connection's first byte, left unread; `None` when it closed or
/// failed first.
async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte).await {
        Ok(1) => Some(byte[0]),
        Ok(_) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[tokio::test]
    async fn an_accepted_connection_inherits_no_delay() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut client = std::net::TcpStream::connect(addr).expect("connect");
        // The listener defers the accept until the client has spoken.
        client.write_all(b"P").expect("first byte");
        let (stream, _) = listener.accept().await.expect("accept");
        assert!(stream.nodelay().expect("TCP_NODELAY"));
    }
}
