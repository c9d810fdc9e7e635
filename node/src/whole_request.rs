//! Raft calls through tonic's channel (a cluster with TLS) in two HTTP/2
//! writes instead of three.
//!
//! tonic streams a request body: hyper writes the HEADERS frame, then the
//! DATA frame, then an empty DATA frame that ends the stream once the body
//! has said it has nothing more, each as its own `writev` on a loopback or
//! LAN socket, and each may wake the peer. A Raft message is one encoded
//! value that is whole before the call starts, so [`WholeRequest`]
//! collects it and hands hyper a body that ends with its data: the end of
//! the stream rides on the DATA frame. hyper still writes HEADERS on its
//! own and DATA after it, from the body's task, once the new stream has
//! send capacity (`strace`); in plain text [`crate::peer_call`] writes both
//! at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::{BodyExt, Full};
use tonic::body::Body;
use tower_service::Service;

/// Boxed error, as tonic's client takes it (`Into<StdError>`).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A service (a tonic `Channel`) whose requests arrive with their bodies
/// collected into one buffer.
#[derive(Clone, Debug)]
pub struct WholeRequest<S> {
    inner: S,
}

impl<S> WholeRequest<S> {
    pub fn new(inner: S) -> WholeRequest<S> {
        WholeRequest { inner }
    }
}

impl<S> Service<http::Request<Body>> for WholeRequest<S>
where
    S: Service<http::Request<Body>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The service made ready is the one that must take the call; a
        // clone takes its place for the next.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // A unary call's body is one encoded message, ready at once.
            let bytes = body.collect().await?.to_bytes();
            let request = http::Request::from_parts(parts, Body::new(Full::new(bytes)));
            ready.call(request).await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// Records the body it was handed: whole, and ended with its data.
    #[derive(Clone)]
    struct Recorder;

    impl Service<http::Request<Body>> for Recorder {
        type Response = (Vec<u8>, bool, Option<u64>);
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            Box::pin(async move {
                let mut body = request.into_body();
                let exact = http_body::Body::size_hint(&body).exact();
                let first = body.frame().await.transpose()?;
                let data = first
                    .and_then(|f| f.into_data().ok())
                    .map(|d| d.to_vec())
                    .unwrap_or_default();
                Ok((data, http_body::Body::is_end_stream(&body), exact))
            })
        }
    }

    #[tokio::test]
    async fn the_body_reaches_the_channel_whole_and_ends_with_its_data() {
        // A streamed body of two chunks, as an encoder might yield.
        let chunks = futures::stream::iter([
            Ok::<_, tonic::Status>(http_body::Frame::data(bytes::Bytes::from_static(b"\0\0\0"))),
            Ok(http_body::Frame::data(bytes::Bytes::from_static(
                b"\0\x02hi",
            ))),
        ]);
        let body = Body::new(http_body_util::StreamBody::new(chunks));
        let request = http::Request::builder()
            .uri("http://peer/berth.raft.v1.RaftTransport/AppendEntries")
            .body(body)
            .expect("request");
        let mut service = WholeRequest::new(Recorder);
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .expect("ready");
        let (data, ended, exact) = service.call(request).await.expect("call");
        assert_eq!(
            data, b"\0\0\0\0\x02hi",
            "both chunks, in order, in one frame"
        );
        assert!(ended, "the body says it ended with its data frame");
        assert_eq!(exact, Some(7), "its length is known up front");
    }
}
