//! The node's listeners, bounded: the gRPC port (API, agents, Raft; HTTP/2,
//! plain or TLS) and the HTTP port (REST, web page, metrics).
//!
//! A port holds at most `max_connections` accepted connections; past it the
//! accept loop waits for one to close, and new ones wait in the kernel's
//! backlog (bounded by `somaxconn`) rather than in the node's memory. A
//! connection must deliver its first request head within `head_timeout_ms`
//! of being accepted (the TLS handshake and HTTP/2 preface included), or it
//! is closed: a client that connects and stays silent, or trickles its
//! handshake, cannot keep a slot for longer than that. Streams per
//! connection and request bytes are bounded by the servers themselves
//! (`server.rs`, `metrics.rs`) from the same [`ListenerLimits`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_stream::wrappers::ReceiverStream;
use tower_layer::Layer;
use tower_service::Service;

pub use crate::config::ListenerLimits;

/// Connections accepted and not yet taken by the server.
const HANDOFF_QUEUE_MAX: usize = 64;
/// Pause after a failed accept (out of file descriptors, say), so the
/// loop does not spin on it.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// How long the kernel holds a new connection back until its first bytes
/// arrive (`TCP_DEFER_ACCEPT`, whole seconds).
const DEFER_ACCEPT_S: libc::c_int = 5;

/// Connections open on a port now (label `port`: `grpc` or `http`).
pub const CONNECTIONS_OPEN: &str = "berth_listener_connections_open";
/// Connections closed because no request head came in time.
pub const HEAD_TIMEOUTS_TOTAL: &str = "berth_listener_head_timeouts_total";

/// What a server reads its connections from.
pub type Incoming = ReceiverStream<io::Result<BoundedConn>>;

/// Binds `addr`; a node that cannot have its port fails at start.
///
/// Options set on the listener, which every accepted connection inherits:
/// - `TCP_DEFER_ACCEPT`: the listener takes a connection only once the
///   client has sent something; every client of these ports speaks first.
/// - `TCP_NODELAY`: small requests and answers go out at once, not after
///   an ACK.
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    set_tcp_option(&listener, libc::TCP_DEFER_ACCEPT, DEFER_ACCEPT_S)?;
    set_tcp_option(&listener, libc::TCP_NODELAY, 1)?;
    Ok(listener)
}

/// Sets the `IPPROTO_TCP` option `name` to `value` on `listener`.
fn set_tcp_option(listener: &TcpListener, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
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
        Err(io::Error::last_os_error())
    }
}

/// Accepts on `listener` until `shutdown` turns true, at most
/// `limits.max_connections` open at once; `port` labels the metrics.
pub fn spawn(
    listener: TcpListener,
    limits: &ListenerLimits,
    port: &'static str,
    mut shutdown: watch::Receiver<bool>,
) -> Incoming {
    let (tx, rx) = mpsc::channel(HANDOFF_QUEUE_MAX);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let head_timeout = Duration::from_millis(limits.head_timeout_ms);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => break,
                accepted = accept_within(&listener, &slots) => accepted,
            };
            let (stream, permit) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, port, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let conn = BoundedConn::new(stream, permit, head_timeout, port);
            // The server gone means the node is stopping.
            if tx.send(Ok(conn)).await.is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The next connection, once a slot is free for it.
async fn accept_within(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> io::Result<(TcpStream, OwnedSemaphorePermit)> {
    let permit = slots
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| io::Error::other("the connection slots were closed"))?;
    let (stream, _) = listener.accept().await?;
    Ok((stream, permit))
}

/// An accepted connection: holds its slot until dropped, and fails its
/// reads once the head deadline passes with no request head seen.
pub struct BoundedConn {
    stream: TcpStream,
    /// `None` once a request head arrived: no deadline after that.
    head_deadline: Option<Pin<Box<Sleep>>>,
    info: ConnInfo,
    port: &'static str,
    _slot: OwnedSemaphorePermit,
}

/// What a request knows of its connection (a request extension): the
/// servers' [`HeadSeenLayer`] marks the head as seen through it.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    head_seen: Arc<AtomicBool>,
}

impl ConnInfo {
    fn mark_head_seen(&self) {
        self.head_seen.store(true, Ordering::Relaxed);
    }
}

impl BoundedConn {
    fn new(
        stream: TcpStream,
        slot: OwnedSemaphorePermit,
        head_timeout: Duration,
        port: &'static str,
    ) -> BoundedConn {
        metrics::gauge!(CONNECTIONS_OPEN, "port" => port).increment(1.0);
        BoundedConn {
            info: ConnInfo {
                remote: stream.peer_addr().ok(),
                head_seen: Arc::default(),
            },
            stream,
            head_deadline: Some(Box::pin(tokio::time::sleep(head_timeout))),
            port,
            _slot: slot,
        }
    }

    pub fn info(&self) -> ConnInfo {
        self.info.clone()
    }

    /// `Err` once the head deadline has passed with no request head.
    fn check_head(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(deadline) = self.head_deadline.as_mut() else {
            return Ok(());
        };
        if self.info.head_seen.load(Ordering::Relaxed) {
            self.head_deadline = None;
            return Ok(());
        }
        if deadline.as_mut().poll(cx).is_pending() {
            return Ok(());
        }
        metrics::counter!(HEAD_TIMEOUTS_TOTAL, "port" => self.port).increment(1);
        tracing::debug!(remote = ?self.info.remote, port = self.port, "no request head in time");
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no request head within the listener's head_timeout_ms",
        ))
    }
}

impl Drop for BoundedConn {
    fn drop(&mut self) {
        metrics::gauge!(CONNECTIONS_OPEN, "port" => self.port).decrement(1.0);
    }
}

impl AsyncRead for BoundedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_head(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for BoundedConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for BoundedConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info()
    }
}

/// A tower layer that tells a request's connection its head has arrived.
/// Over TLS tonic wraps the connection's info in its own.
#[derive(Debug, Clone, Copy, Default)]
pub struct HeadSeenLayer;

impl<S> Layer<S> for HeadSeenLayer {
    type Service = HeadSeen<S>;

    fn layer(&self, inner: S) -> HeadSeen<S> {
        HeadSeen { inner }
    }
}

#[derive(Debug, Clone)]
pub struct HeadSeen<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for HeadSeen<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> S::Future {
        let extensions = request.extensions();
        if let Some(info) = extensions.get::<ConnInfo>() {
            info.mark_head_seen();
        } else if let Some(tls) =
            extensions.get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>()
        {
            tls.get_ref().mark_head_seen();
        } else if let Some(axum::extract::ConnectInfo(info)) =
            extensions.get::<axum::extract::ConnectInfo<ConnInfo>>()
        {
            info.mark_head_seen();
        }
        self.inner.call(request)
    }
}

/// The bounded connections as axum's listener, for the HTTP port.
pub struct AxumIncoming {
    incoming: Incoming,
    local: SocketAddr,
}

impl AxumIncoming {
    pub fn new(incoming: Incoming, local: SocketAddr) -> AxumIncoming {
        AxumIncoming { incoming, local }
    }
}

impl axum::serve::Listener for AxumIncoming {
    type Io = BoundedConn;
    type Addr = Option<SocketAddr>;

    async fn accept(&mut self) -> (BoundedConn, Option<SocketAddr>) {
        use tokio_stream::StreamExt;
        loop {
            match self.incoming.next().await {
                Some(Ok(conn)) => {
                    let remote = conn.info.remote;
                    return (conn, remote);
                }
                Some(Err(_)) => continue,
                // The accept loop ended: the node is stopping, and axum's
                // graceful shutdown ends the server; until then, nothing.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Option<SocketAddr>> {
        Ok(Some(self.local))
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, AxumIncoming>>
    for ConnInfo
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, AxumIncoming>) -> ConnInfo {
        stream.io().info()
    }
}

#[cfg(test)]
mod tests;
