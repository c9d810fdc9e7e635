//! `sbatch`: Berth's batch submit command, small enough to start fast.
//!
//! Sites and workflow engines submit with one `sbatch` process per job, so
//! what a process costs to start bounds how fast they can submit. This
//! binary submits the command lines `berth_client::fast_submit` knows
//! (the common options, `--wrap` or a batch script) with one gRPC call over
//! a bare HTTP/2 connection in blocking I/O (`h2_call`: no runtime, no
//! connection task), and hands every other command line, unchanged,
//! to `berth` (next to this binary, else on `PATH`), which answers as
//! `sbatch` would. It also hands over when the connection needs TLS (a CA
//! from `BERTH_CA` or the client config): this binary speaks plain HTTP/2
//! only.
//!
//! Once a request was sent, it never hands over: `berth` would send the
//! job again under a new request id. Retries stay here, under one request
//! id, as `berth_client::Cluster` does them.

#![cfg_attr(not(test), no_main)]

mod arena;
mod h2_call;
mod hpack;
mod one_shot;
mod start;
#[cfg(test)]
mod test_server;

use berth_client::fast_submit::{self, FastSubmit, Parsed};
use berth_client::{config_file, output};
use berth_client::{
    servers_from, ClientError, RetryPolicy, CA_ENV, CONNECT_TIMEOUT_MS, REQUEST_TIMEOUT_MS,
};
use berth_proto::api::{SubmitJobRequest, SubmitJobResponse};
use berth_proto::{grpc_frame, submit_wire};
use prost::Message;
use std::ffi::OsString;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A bump arena: see `arena` for why.
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena;

/// The gRPC method this binary calls.
const SUBMIT_PATH: &str = "/berth.v1.BerthApi/SubmitJob";

/// The process's entry, called by the C runtime in place of Rust's.
///
/// Rust's runtime start would install a stack-overflow handler: an
/// alternate signal stack (`mmap`, `mprotect`, `sigaltstack`, and at exit
/// `sigaltstack` and `munmap`) and four `sigaction` calls, a tenth of the
/// system calls of a process that makes a dozen of its own. This binary
/// does what the start does that matters to it ([`start`]) and no more; a
/// stack overflow still ends it (SIGSEGV), only without the message.
///
/// # Safety
/// Only the C runtime calls it, with its `argc` and `argv`.
#[cfg(not(test))]
#[no_mangle]
pub unsafe extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: the C runtime passes `argc` pointers to NUL-terminated
    // strings that live as long as the process.
    let argv = unsafe { start::args(argc, argv) };
    start::guard_standard_streams();
    let code = submit_or_hand_over(&argv);
    // Every path ends in SUCCESS or FAILURE, which are 0 and 1.
    if code == ExitCode::SUCCESS {
        libc::EXIT_SUCCESS
    } else {
        libc::EXIT_FAILURE
    }
}

#[cfg_attr(test, allow(dead_code))]
fn submit_or_hand_over(argv: &[OsString]) -> ExitCode {
    match plan(argv) {
        Some(submit) => run(submit, argv),
        None => delegate(argv),
    }
}

/// What this process does itself: a submit the fast path knows, to
/// servers it can reach without TLS.
struct Plan {
    submit: Box<FastSubmit>,
    servers: Vec<String>,
    token: Option<String>,
}

/// The plan for `argv`, or `None` to hand it to `berth`.
fn plan(argv: &[OsString]) -> Option<Plan> {
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| a.clone().into_string().ok())
        .collect::<Option<_>>()?;
    let Parsed::Submit(submit) = fast_submit::parse(&args) else {
        return None;
    };
    // Flag, then environment, then the config file, as `berth` reads
    // them; a config `berth` would refuse is its to report.
    let reach = config_file::fill(config_file::Reach::default()).ok()?;
    if std::env::var_os(CA_ENV).is_some() || reach.ca.is_some() {
        return None;
    }
    let servers = servers_from(reach.server);
    if !servers.iter().all(|s| plain_host_port(s)) {
        return None;
    }
    if reach.token.is_some() {
        berth_client::set_token(reach.token);
    }
    let token = berth_client::connect::token().map(str::to_string);
    // A token `berth` could not put in a header is its to report.
    if token
        .as_deref()
        .is_some_and(|t| !t.bytes().all(is_header_byte))
    {
        return None;
    }
    Some(Plan {
        submit,
        servers,
        token,
    })
}

/// `host:port` with no scheme and a numeric port: anything else is
/// `berth`'s to accept or refuse.
fn plain_host_port(addr: &str) -> bool {
    !addr.contains("://")
        && addr.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && host.bytes().all(is_header_byte) && port.parse::<u16>().is_ok()
        })
}

/// A visible ASCII byte or a space: what an HTTP header value may hold.
fn is_header_byte(byte: u8) -> bool {
    byte == b' ' || byte.is_ascii_graphic()
}

/// Replaces this process with `berth`, answering as `sbatch`.
fn delegate(argv: &[OsString]) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("berth")))
        .filter(|path| path.is_file());
    let program = beside.map_or_else(|| OsString::from("berth"), OsString::from);
    let err = std::process::Command::new(&program)
        .arg0("sbatch")
        .args(argv.iter().skip(1))
        .exec();
    fail(&format!(
        "cannot run {} for this command line: {err}",
        program.to_string_lossy()
    ))
}

/// Prints `sbatch: error: message` on one line, Slurm's style, and fails.
fn fail(message: &str) -> ExitCode {
    eprintln!("sbatch: error: {}", output::one_line(message));
    ExitCode::FAILURE
}

fn run(plan: Plan, argv: &[OsString]) -> ExitCode {
    let Ok(cwd) = std::env::current_dir() else {
        return fail("cannot determine the current directory");
    };
    let user = berth_client::user::current_user();
    let request_id = uuid::Uuid::new_v4().to_string();
    let Some(request) = plan.submit.request(&cwd, &user, request_id) else {
        // A value `berth` would refuse: it says why. Nothing was sent.
        return delegate(argv);
    };
    let answer = submit(&plan.servers, plan.token.as_deref(), &request);
    match answer {
        Ok(answer) => {
            let line = if plan.submit.options.parsable {
                format!("{}\n", answer.job_id)
            } else {
                format!("Submitted batch job {}\n", answer.job_id)
            };
            match output::emit(&line) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(&format!("cannot write the job id: {err}")),
            }
        }
        Err(err) => fail(&err.to_string()),
    }
}

/// Why one attempt did not get an answer.
enum Attempt {
    /// No connection: try the next server.
    Unreachable,
    /// The server answered with this status (boxed: a Status is large).
    Status(Box<tonic::Status>),
}

impl Attempt {
    fn answered(status: tonic::Status) -> Attempt {
        Attempt::Status(Box::new(status))
    }
}

/// Sends the submit until a server answers, as `Cluster::call` does:
/// rounds over the server list, moving on when a server cannot be reached
/// or says UNAVAILABLE, pausing between rounds. The same request (and
/// request id) every time, so a retry after failover makes no second job.
fn submit(
    servers: &[String],
    token: Option<&str>,
    request: &SubmitJobRequest,
) -> Result<SubmitJobResponse, ClientError> {
    let body = Body::new(request, token);
    let policy = RetryPolicy::default();
    let mut backoff_ms = policy.backoff_ms;
    let mut tried: Vec<String> = Vec::new();
    let mut last_unavailable: Option<ClientError> = None;
    for round in 0..policy.rounds.max(1) {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(backoff_ms));
            backoff_ms = backoff_ms.saturating_mul(2).min(policy.max_backoff_ms);
        }
        for server in servers {
            match call(server, token, &body) {
                Ok(answer) => return Ok(answer),
                Err(Attempt::Unreachable) => {
                    if !tried.contains(server) {
                        tried.push(server.clone());
                    }
                }
                Err(Attempt::Status(status)) => {
                    let unavailable = status.code() == tonic::Code::Unavailable;
                    let err = ClientError::Rpc {
                        server: server.clone(),
                        status,
                    };
                    if !unavailable {
                        return Err(err);
                    }
                    last_unavailable = Some(err);
                }
            }
        }
    }
    Err(last_unavailable.unwrap_or(ClientError::NoServer { tried }))
}

/// A connection to the first of `server`'s addresses that accepts one
/// within [`CONNECT_TIMEOUT_MS`].
fn connect(server: &str) -> Option<TcpStream> {
    let timeout = Duration::from_millis(CONNECT_TIMEOUT_MS);
    let tcp = server
        .to_socket_addrs()
        .ok()?
        .find_map(|addr| TcpStream::connect_timeout(&addr, timeout).ok())?;
    // A lone small request: send it now rather than wait for an ACK.
    let _ = tcp.set_nodelay(true);
    Some(tcp)
}

/// The request, encoded once for each protocol it goes out in.
struct Body<'a> {
    request: &'a SubmitJobRequest,
    /// In the one-shot protocol; `None` when the request is over that
    /// protocol's bounds (`submit_wire::BODY_BYTES_MAX`), which HTTP/2
    /// still carries up to the API's own.
    one_shot: Option<Vec<u8>>,
    /// As a gRPC frame, for a server that speaks only HTTP/2 (made when
    /// first needed).
    grpc: std::cell::OnceCell<Vec<u8>>,
}

impl<'a> Body<'a> {
    fn new(request: &'a SubmitJobRequest, token: Option<&str>) -> Body<'a> {
        Body {
            request,
            one_shot: submit_wire::encode_request(token, &request.encode_to_vec()).ok(),
            grpc: std::cell::OnceCell::new(),
        }
    }

    fn grpc(&self) -> &[u8] {
        self.grpc.get_or_init(|| grpc_frame::encode(self.request))
    }
}

/// One SubmitJob call to `server`: the one-shot protocol, or HTTP/2 on a
/// connection of its own when the request is over the one-shot bounds or
/// the server does not speak the protocol (a `berthd` older than it, which
/// read no request).
fn call(server: &str, token: Option<&str>, body: &Body<'_>) -> Result<SubmitJobResponse, Attempt> {
    if let Some(wire) = &body.one_shot {
        match call_one_shot(server, wire) {
            Err(OneShot::NotSpoken) => {}
            Err(OneShot::Failed(attempt)) => return Err(attempt),
            Ok(answer) => return Ok(answer),
        }
    }
    call_h2(server, token, body.grpc())
}

/// How a one-shot call failed.
enum OneShot {
    /// The server speaks only HTTP/2.
    NotSpoken,
    Failed(Attempt),
}

/// One call of `wire` (a request in the one-shot protocol) to `server`.
fn call_one_shot(server: &str, wire: &[u8]) -> Result<SubmitJobResponse, OneShot> {
    let mut tcp = connect(server).ok_or(OneShot::Failed(Attempt::Unreachable))?;
    let deadline = Instant::now() + Duration::from_millis(REQUEST_TIMEOUT_MS);
    let (code, payload) = one_shot::call(&mut tcp, wire, deadline).map_err(|e| match e {
        one_shot::OneShotError::NotSpoken(_) => OneShot::NotSpoken,
        // After the connection was made, a broken exchange is reported
        // the way tonic reports it: UNAVAILABLE, which is retried.
        e => OneShot::Failed(Attempt::answered(tonic::Status::unavailable(format!(
            "one-shot submit: {e}"
        )))),
    })?;
    let code = tonic::Code::from_i32(i32::from(code));
    if code != tonic::Code::Ok {
        let message = String::from_utf8_lossy(&payload).into_owned();
        return Err(OneShot::Failed(Attempt::answered(tonic::Status::new(
            code, message,
        ))));
    }
    SubmitJobResponse::decode(payload.as_slice()).map_err(|e| {
        OneShot::Failed(Attempt::answered(tonic::Status::internal(format!(
            "bad answer from the server: {e}"
        ))))
    })
}

/// One SubmitJob call to `server` over HTTP/2 on a new connection.
fn call_h2(server: &str, token: Option<&str>, body: &[u8]) -> Result<SubmitJobResponse, Attempt> {
    let mut tcp = connect(server).ok_or(Attempt::Unreachable)?;
    let bearer = token.map(|token| format!("Bearer {token}"));
    let mut fields = vec![("content-type", "application/grpc"), ("te", "trailers")];
    if let Some(bearer) = &bearer {
        fields.push(("authorization", bearer));
    }
    let request = h2_call::Request {
        authority: server,
        path: SUBMIT_PATH,
        fields: &fields,
        body,
    };
    let deadline = Instant::now() + Duration::from_millis(REQUEST_TIMEOUT_MS);
    // After the connection was made, a broken exchange is reported the
    // way tonic reports it: UNAVAILABLE, which is retried.
    let answer = h2_call::call(&mut tcp, &request, deadline).map_err(|err| {
        Attempt::answered(match err {
            h2_call::CallError::TooLarge(_) => {
                tonic::Status::out_of_range(format!("the answer is larger than a submit's: {err}"))
            }
            err => tonic::Status::unavailable(format!("HTTP/2 exchange: {err}")),
        })
    })?;
    // A "trailers-only" answer carries the status in its headers.
    if let Some(status) = tonic::Status::from_header_map(&answer.headers) {
        if status.code() != tonic::Code::Ok {
            return Err(Attempt::answered(status));
        }
    }
    if answer.status != 200 {
        return Err(Attempt::answered(tonic::Status::unknown(format!(
            "HTTP status {} from the server",
            answer.status
        ))));
    }
    let status = answer
        .trailers
        .as_ref()
        .and_then(tonic::Status::from_header_map)
        .or_else(|| tonic::Status::from_header_map(&answer.headers))
        .unwrap_or_else(|| tonic::Status::unknown("the answer has no grpc-status"));
    if status.code() != tonic::Code::Ok {
        return Err(Attempt::answered(status));
    }
    decode_answer(&answer.body).map_err(Attempt::answered)
}

/// The one uncompressed gRPC message in `frame`.
#[allow(clippy::result_large_err)] // called once per process
fn decode_answer(frame: &[u8]) -> Result<SubmitJobResponse, tonic::Status> {
    grpc_frame::decode(frame)
        .map_err(|e| tonic::Status::internal(format!("bad answer from the server: {e}")))
}

/// A seeded xorshift64 generator: the same numbers every run, for tests
/// that feed the decoders random input.
#[cfg(test)]
fn seeded_numbers(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed.max(1);
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_host_ports_are_taken() {
        assert!(plain_host_port("127.0.0.1:7101"));
        assert!(plain_host_port("node-1.example:7101"));
        assert!(!plain_host_port("http://a:1"));
        assert!(!plain_host_port("a"));
        assert!(!plain_host_port(":7101"));
        assert!(!plain_host_port("a:port"));
        assert!(!plain_host_port("a:70000"));
    }

    /// What a `berthd` older than the one-shot protocol does: HTTP/2 as
    /// the `h2` crate serves it (hyper's server) on every connection.
    /// Returns how many connections it refused before it answered.
    fn http2_only_server(job_id: u64) -> (String, std::thread::JoinHandle<u32>) {
        let (addr, server) = test_server::on_thread(move |listener| async move {
            let mut refused = 0;
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    refused += 1;
                    continue;
                };
                let (request, mut respond) = conn.accept().await.unwrap().unwrap();
                assert_eq!(request.uri().path(), SUBMIT_PATH);
                let head = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/grpc")
                    .body(())
                    .unwrap();
                let mut stream = respond.send_response(head, false).unwrap();
                let answer = SubmitJobResponse {
                    job_id,
                    duplicate: false,
                };
                stream
                    .send_data(grpc_frame::encode(&answer).into(), false)
                    .unwrap();
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                stream.send_trailers(trailers).unwrap();
                // Until the client closes.
                while let Some(next) = conn.accept().await {
                    if next.is_err() {
                        break;
                    }
                }
                return refused;
            }
        });
        (addr.to_string(), server)
    }

    #[test]
    fn a_server_without_the_one_shot_protocol_is_asked_over_http2() {
        let (addr, server) = http2_only_server(7);
        let request = SubmitJobRequest {
            request_id: "r-1".into(),
            ..Default::default()
        };
        let body = Body::new(&request, None);
        let answer = match call(&addr, None, &body) {
            Ok(answer) => answer,
            Err(Attempt::Unreachable) => panic!("unreachable"),
            Err(Attempt::Status(status)) => panic!("{status}"),
        };
        assert_eq!(answer.job_id, 7);
        assert_eq!(
            server.join().unwrap(),
            1,
            "the one-shot request is refused once, then HTTP/2 answers"
        );
    }

    #[test]
    fn a_request_over_the_one_shot_bounds_goes_over_http2_only() {
        let small = SubmitJobRequest {
            request_id: "r-1".into(),
            ..Default::default()
        };
        let body = Body::new(&small, Some("token"));
        let wire = body
            .one_shot
            .as_deref()
            .expect("a small request goes one-shot");
        assert_eq!(wire[..8], submit_wire::REQUEST_MAGIC);
        // A job larger than the one-shot protocol takes; the gRPC
        // API takes up to `berth_proto::MAX_MESSAGE_BYTES`.
        let large = SubmitJobRequest {
            request_id: "r-2".into(),
            spec: Some(berth_proto::api::JobSpec {
                command: "x".repeat(submit_wire::BODY_BYTES_MAX + 1),
                ..Default::default()
            }),
        };
        let body = Body::new(&large, None);
        assert!(body.one_shot.is_none());
        assert_eq!(body.grpc(), grpc_frame::encode(&large).as_slice());
    }

    #[test]
    fn a_framed_answer_decodes_and_a_bad_one_is_named() {
        let answer = SubmitJobResponse {
            job_id: 42,
            duplicate: true,
        };
        let frame = grpc_frame::encode(&answer);
        assert_eq!(decode_answer(&frame).unwrap(), answer);
        let mut compressed = frame.to_vec();
        compressed[0] = 1;
        assert!(decode_answer(&compressed)
            .unwrap_err()
            .message()
            .contains("compressed"));
        assert!(decode_answer(&frame[..frame.len() - 1])
            .unwrap_err()
            .message()
            .contains("length"));
        assert!(decode_answer(&[0, 0])
            .unwrap_err()
            .message()
            .contains("shorter"));
    }
}
