use std::io::{Read, Write};
use std::time::Instant;

use tokio_stream::StreamExt;

use super::*;

/// Long enough for a loaded CI machine to schedule the accept loop.
const WAIT: Duration = Duration::from_secs(10);

fn limits(max_connections: usize, head_timeout_ms: u64) -> ListenerLimits {
    ListenerLimits {
        max_connections,
        head_timeout_ms,
        ..ListenerLimits::default()
    }
}

async fn listening() -> (TcpListener, SocketAddr) {
    let listener = bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

/// A client that has sent one byte (the listener defers the accept until
/// a client has spoken) and then stays silent.
fn silent_client(addr: SocketAddr) -> std::net::TcpStream {
    let mut client = std::net::TcpStream::connect(addr).expect("connect");
    client.write_all(b"P").expect("first byte");
    client
}

async fn next_conn(incoming: &mut Incoming) -> BoundedConn {
    tokio::time::timeout(WAIT, incoming.next())
        .await
        .expect("a connection in time")
        .expect("the accept loop runs")
        .expect("accepted")
}

/// Reads `conn` to its end or first error, as a server would.
async fn read_until_closed(mut conn: BoundedConn) -> io::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 64];
    loop {
        if conn.read(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

#[tokio::test]
async fn an_accepted_connection_inherits_no_delay() {
    let (listener, addr) = listening().await;
    let _client = silent_client(addr);
    let (stream, _) = listener.accept().await.expect("accept");
    assert!(stream.nodelay().expect("TCP_NODELAY"));
}

#[tokio::test]
async fn a_connection_without_a_request_head_is_closed_at_the_deadline() {
    let (listener, addr) = listening().await;
    let (_stop, shutdown) = watch::channel(false);
    let mut incoming = spawn(listener, &limits(4, 200), "test", shutdown);
    let _client = silent_client(addr);
    let conn = next_conn(&mut incoming).await;
    let started = Instant::now();
    let read = tokio::time::timeout(WAIT, read_until_closed(conn))
        .await
        .expect("closed well before the test's deadline");
    let err = read.expect_err("the read fails");
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn a_connection_whose_head_arrived_has_no_deadline() {
    let (listener, addr) = listening().await;
    let (_stop, shutdown) = watch::channel(false);
    let mut incoming = spawn(listener, &limits(4, 100), "test", shutdown);
    let mut client = silent_client(addr);
    let conn = next_conn(&mut incoming).await;
    // What the servers' layer does with the first request.
    let mut layered = HeadSeenLayer.layer(tower_service_fn());
    let mut request = http::Request::new(());
    request.extensions_mut().insert(conn.info());
    layered.call(request).await.expect("answered");
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.write_all(b"more").expect("write");
    drop(client);
    read_until_closed(conn).await.expect("read to the end");
}

/// A service that answers every request at once.
fn tower_service_fn() -> impl Service<http::Request<()>, Response = (), Error = ()> {
    struct Ready;
    impl Service<http::Request<()>> for Ready {
        type Response = ();
        type Error = ();
        type Future = std::future::Ready<Result<(), ()>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(()))
        }
    }
    Ready
}

#[tokio::test]
async fn past_the_bound_a_connection_waits_for_a_slot() {
    let (listener, addr) = listening().await;
    let (_stop, shutdown) = watch::channel(false);
    let mut incoming = spawn(listener, &limits(2, 60_000), "test", shutdown);
    let _clients: Vec<_> = (0..3).map(|_| silent_client(addr)).collect();
    let first = next_conn(&mut incoming).await;
    let _second = next_conn(&mut incoming).await;
    let third = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
    assert!(
        third.is_err(),
        "a third connection was accepted past the bound of 2"
    );
    drop(first);
    let _third = next_conn(&mut incoming).await;
}

#[tokio::test]
async fn a_client_that_closes_frees_its_slot_and_is_read_to_its_end() {
    let (listener, addr) = listening().await;
    let (_stop, shutdown) = watch::channel(false);
    let mut incoming = spawn(listener, &limits(1, 60_000), "test", shutdown);
    let mut client = silent_client(addr);
    let conn = next_conn(&mut incoming).await;
    client
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    read_until_closed(conn)
        .await
        .expect("the end, not an error");
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    // The slot is free again.
    let _next_client = silent_client(addr);
    let _next = next_conn(&mut incoming).await;
}
