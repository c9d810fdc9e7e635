//! A tower layer on the gRPC server that times every public API call
//! (`berth.v1`), labelled by method and gRPC status code
//! (`berth_api_request_duration_seconds`). Raft and agent traffic are left
//! out: they are internal and would drown the API's figures.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tower_layer::Layer;
use tower_service::Service;

use crate::metrics::API_REQUEST_SECONDS;

/// Only calls under this path prefix are timed.
const PUBLIC_API_PREFIX: &str = "/berth.v1.";

#[derive(Debug, Clone, Copy, Default)]
pub struct ApiMetricsLayer;

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiMetrics { inner }
    }
}

#[derive(Debug, Clone)]
pub struct ApiMetrics<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<http::Request<B>> for ApiMetrics<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let method = path
            .strip_prefix(PUBLIC_API_PREFIX)
            .and_then(|rest| rest.rsplit('/').next())
            .map(str::to_string);
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            if let Some(method) = method {
                let code = match &result {
                    // A unary error comes "trailers-only": the status is in
                    // the headers. No grpc-status header means OK so far.
                    Ok(r) => r
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                        .map_or("OK", code_name),
                    Err(_) => "TRANSPORT_ERROR",
                };
                record(method, code, started);
            }
            result
        })
    }
}

/// Records one public API call that began at `started`.
fn record(method: String, code: &'static str, started: Instant) {
    metrics::histogram!(API_REQUEST_SECONDS, "method" => method, "code" => code)
        .record(started.elapsed().as_secs_f64());
}

/// gRPC's status code names.
pub(crate) fn code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "OTHER",
    }
}
