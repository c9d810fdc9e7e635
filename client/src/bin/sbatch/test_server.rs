//! Test servers on a loopback port, each on a thread of its own with a
//! current-thread runtime: the blocking client under test runs on the
//! test's thread.

use std::future::Future;
use std::net::SocketAddr;
use std::thread::JoinHandle;

/// Binds a loopback port and runs `serve` with its listener on a new
/// thread; the port's address and the thread, which gives `serve`'s
/// output.
pub fn on_thread<F, Fut, T>(serve: F) -> (SocketAddr, JoinHandle<T>)
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = T>,
    T: Send + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            serve(tokio::net::TcpListener::from_std(listener).unwrap()).await
        })
    });
    (addr, server)
}
