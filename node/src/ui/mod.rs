//! The web UI: read-only HTML pages under `/ui/` on the node's HTTP
//! listener (`metrics_listen`), beside the REST API.
//!
//! Every page gets its data from the same service methods the REST API and
//! gRPC call (`BerthApi for ApiService`) with the caller's token, so the
//! same authentication, forwarding to the leader and read barriers apply;
//! a follower serves the leader's answers. The token comes from the
//! `Authorization: Bearer` header or a `berth_token` cookie; with auth off
//! everyone is admin. With `[ui] private_job_details` a user who is not an
//! admin sees the details of their own jobs only. No page changes state.
//!
//! The pages are rendered by pure functions of the data (`queue`, `job`,
//! `hosts`, `cluster`, `fairshare`), tested on fixed data; `layout` is the
//! frame, `fmt` the number and time formats, `track` what this node
//! remembers for the Cluster page (leader changes, its last pass).

pub mod cluster;
pub mod fairshare;
pub mod fmt;
pub mod hosts;
pub mod job;
pub mod layout;
pub mod queue;
pub mod track;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use berth_proto::api::berth_api_server::BerthApi;
use berth_proto::api::{
    ClusterStatusRequest, ExplainJobRequest, GetJobRequest, GetPrioritiesRequest, JobState,
    ListAccountsRequest, ListHostsRequest, ListJobsRequest, ListQosRequest, WatchJobEventsRequest,
};
use futures::StreamExt;
use maud::{html, Markup};
use tonic::{Code, Status};

use crate::api_service::ApiService;
use crate::authz::{authenticate, Caller};
use layout::Page;

/// Most jobs one page lists (the API's answer is cut there and the page
/// says so).
pub const UI_JOBS_MAX: u32 = 5_000;
/// Most events the Job page shows (the state keeps 128 per job).
pub const UI_EVENTS_MAX: usize = 256;
/// The cookie a browser may carry the caller's token in.
pub const TOKEN_COOKIE: &str = "berth_token";

struct UiState {
    api: Arc<ApiService>,
    leaders: track::SharedWatch,
}

type AppState = Arc<UiState>;

/// The UI's routes over berthd's service layer. Starts the task that
/// follows leader changes for the Cluster page (it ends with Raft), so
/// call it inside the runtime, once per node.
pub fn for_node(api: Arc<ApiService>) -> Router {
    let leaders = track::spawn_leader_watch(api.node.raft.metrics());
    Router::new()
        .route("/ui", get(home))
        .route("/ui/", get(home))
        .route("/ui/queue", get(queue_page))
        .route("/ui/jobs/{id}", get(job_page))
        .route("/ui/hosts", get(hosts_page))
        .route("/ui/cluster", get(cluster_page))
        .route("/ui/fairshare", get(fairshare_page))
        .with_state(Arc::new(UiState { api, leaders }))
}

async fn home() -> Redirect {
    Redirect::to("/ui/queue")
}

/// A `tonic::Request` with the caller's token: the `Authorization`
/// header, else the `berth_token` cookie as a bearer token.
pub fn request<T>(headers: &HeaderMap, message: T) -> tonic::Request<T> {
    let mut request = crate::rest::grpc_request(headers, message);
    if request.metadata().get("authorization").is_none() {
        if let Some(token) = cookie_token(headers) {
            if let Ok(value) = format!("Bearer {token}").parse() {
                request.metadata_mut().insert("authorization", value);
            }
        }
    }
    request
}

/// The value of the `berth_token` cookie, if one is sent.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty())
}

/// Who the page is for, in the header's words.
fn viewer_name(caller: &Caller) -> String {
    match caller {
        Caller::Trusted => "anyone (authentication is off)".into(),
        Caller::Node => "a cluster node".into(),
        Caller::User(c) if c.is_admin() => format!("{} (admin)", c.user),
        Caller::User(c) => c.user.clone(),
    }
}

/// A page or an error page, with headers that keep it out of caches (it
/// shows live state, and maybe private details).
fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A failed call or bad input as a page: the HTTP status REST would give
/// and the service's own words.
fn error_page(status: &Status, viewer: &str) -> Response {
    let (http, _) = crate::rest::status_mapping(status.code());
    let body = html! {
        p #error role="alert" { (status.message()) }
        @if status.code() == Code::Unauthenticated {
            p { "Send a token as " code { "Authorization: Bearer TOKEN" } " or in a " code { (TOKEN_COOKIE) } " cookie (" code { "berth admin token issue" } " makes one)." }
        }
        @if status.code() == Code::Unavailable {
            p { "The cluster may be electing a leader; reload in a moment." }
        }
        p { a href="/ui/queue" { "Back to the queue" } }
    };
    let title = match status.code() {
        Code::NotFound => "Not found",
        Code::InvalidArgument => "Bad request",
        Code::Unauthenticated => "Sign-in needed",
        Code::PermissionDenied => "Not allowed",
        _ => "Cannot show this page",
    };
    html_response(http, layout::page(Page::Error, title, viewer, body))
}

impl UiState {
    /// The caller, authenticated as the API does it.
    fn caller(&self, headers: &HeaderMap) -> Result<Caller, Status> {
        authenticate(&self.api.node.auth, &request(headers, ()))
    }

    fn details_visible(&self, caller: &Caller, owner: &str) -> bool {
        details_visible(self.api.node.config.ui.private_job_details, caller, owner)
    }
}

/// May `caller` see the details of a job of `owner`? Everyone may unless
/// the site made them private; then the owner and admins.
pub fn details_visible(private: bool, caller: &Caller, owner: &str) -> bool {
    if !private || caller.is_admin() {
        return true;
    }
    matches!(caller, Caller::User(c) if c.user == owner)
}

/// Authenticates, or answers with the error page.
macro_rules! caller_or_page {
    ($ui:expr, $headers:expr) => {
        match $ui.caller(&$headers) {
            Ok(caller) => caller,
            Err(status) => return error_page(&status, "nobody (no valid token)"),
        }
    };
}

/// The result of a call, or the error page.
macro_rules! or_page {
    ($call:expr, $viewer:expr) => {
        match $call.await {
            Ok(answer) => answer.into_inner(),
            Err(status) => return error_page(&status, &$viewer),
        }
    };
}

async fn queue_page(State(ui): State<AppState>, headers: HeaderMap, uri: Uri) -> Response {
    let caller = caller_or_page!(ui, headers);
    let viewer = viewer_name(&caller);
    let query = match Query::<queue::QueueQuery>::try_from_uri(&uri) {
        Ok(Query(q)) => q,
        Err(e) => return error_page(&Status::invalid_argument(e.body_text()), &viewer),
    };
    let plan = match query.plan() {
        Ok(plan) => plan,
        Err(problem) => return error_page(&Status::invalid_argument(problem), &viewer),
    };
    let list = or_page!(
        ui.api.list_jobs(request(
            &headers,
            ListJobsRequest {
                states: plan.states.iter().map(|s| *s as i32).collect(),
                user: query.user.clone(),
                limit: UI_JOBS_MAX,
                ..Default::default()
            },
        )),
        viewer
    );
    let jobs = queue::select(list.jobs, &query, &plan);
    let body = queue::render(&jobs, &query, &plan, list.truncated, crate::node::now_ms());
    html_response(
        StatusCode::OK,
        layout::page(Page::Queue, "Queue", &viewer, body),
    )
}

async fn job_page(
    State(ui): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = caller_or_page!(ui, headers);
    let viewer = viewer_name(&caller);
    let Ok(job_id) = id.parse::<u64>() else {
        let status = Status::invalid_argument(format!("job id {id:?} is not a number"));
        return error_page(&status, &viewer);
    };
    let job = or_page!(
        ui.api.get_job(request(
            &headers,
            GetJobRequest {
                job_id,
                stale: false
            }
        )),
        viewer
    );
    let owner = job
        .spec
        .as_ref()
        .map(|s| s.user.clone())
        .unwrap_or_default();
    let details_visible = ui.details_visible(&caller, &owner);
    let mut view = job::JobView {
        details_visible,
        ..Default::default()
    };
    if job.state == JobState::Pending as i32 {
        // Without these the page still says the reason; the section says
        // what is missing.
        view.explain = ui
            .api
            .explain_job(request(&headers, ExplainJobRequest { job_id }))
            .await
            .map(|r| r.into_inner())
            .map_err(|e| tracing::debug!(job_id, error = %e, "ui: explain failed"))
            .ok();
        view.priority = ui
            .api
            .get_priorities(request(
                &headers,
                GetPrioritiesRequest {
                    job_ids: vec![job_id],
                    user: String::new(),
                },
            ))
            .await
            .ok()
            .and_then(|r| r.into_inner().jobs.into_iter().next());
    }
    if details_visible {
        let stream = or_page!(
            ui.api.watch_job_events(request(
                &headers,
                WatchJobEventsRequest {
                    job_id,
                    after_seq: 0,
                    no_follow: true,
                }
            )),
            viewer
        );
        view.events = stream
            .take(UI_EVENTS_MAX)
            .filter_map(|e| async move { e.ok() })
            .collect()
            .await;
    }
    view.job = job;
    let title = match view.job.spec.as_ref().map(|s| s.name.as_str()) {
        Some(name) if !name.is_empty() => format!("Job {job_id}: {name}"),
        _ => format!("Job {job_id}"),
    };
    let body = job::render(&view, crate::node::now_ms());
    html_response(
        StatusCode::OK,
        layout::page(Page::Job, &title, &viewer, body),
    )
}

/// The running jobs, for the Hosts and Fair share pages.
async fn running_jobs(
    ui: &UiState,
    headers: &HeaderMap,
) -> Result<Vec<berth_proto::api::Job>, Status> {
    let list = ui
        .api
        .list_jobs(request(
            headers,
            ListJobsRequest {
                states: vec![JobState::Running as i32],
                limit: UI_JOBS_MAX,
                ..Default::default()
            },
        ))
        .await?;
    Ok(list.into_inner().jobs)
}

async fn hosts_page(State(ui): State<AppState>, headers: HeaderMap) -> Response {
    let caller = caller_or_page!(ui, headers);
    let viewer = viewer_name(&caller);
    let hosts = or_page!(
        ui.api.list_hosts(request(&headers, ListHostsRequest {})),
        viewer
    );
    let running = match running_jobs(&ui, &headers).await {
        Ok(jobs) => jobs,
        Err(status) => return error_page(&status, &viewer),
    };
    let body = hosts::render(&hosts.hosts, &running);
    html_response(
        StatusCode::OK,
        layout::page(Page::Hosts, "Hosts", &viewer, body),
    )
}

async fn cluster_page(State(ui): State<AppState>, headers: HeaderMap) -> Response {
    let caller = caller_or_page!(ui, headers);
    let viewer = viewer_name(&caller);
    let status = or_page!(
        ui.api
            .cluster_status(request(&headers, ClusterStatusRequest {})),
        viewer
    );
    let (leader_changes, leaderless_since_ms) = {
        let watch = ui.leaders.lock().unwrap_or_else(|p| p.into_inner());
        (watch.changes(), watch.leaderless_since_ms())
    };
    let last_pass = *ui
        .api
        .node
        .last_pass
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let view = cluster::ClusterView {
        status,
        leader_changes,
        leaderless_since_ms,
        last_pass,
    };
    let body = cluster::render(&view, crate::node::now_ms());
    html_response(
        StatusCode::OK,
        layout::page(Page::Cluster, "Cluster", &viewer, body),
    )
}

async fn fairshare_page(State(ui): State<AppState>, headers: HeaderMap) -> Response {
    let caller = caller_or_page!(ui, headers);
    let viewer = viewer_name(&caller);
    let accounts = or_page!(
        ui.api
            .list_accounts(request(&headers, ListAccountsRequest {})),
        viewer
    );
    let qos = or_page!(
        ui.api.list_qos(request(&headers, ListQosRequest {})),
        viewer
    );
    let running = match running_jobs(&ui, &headers).await {
        Ok(jobs) => jobs,
        Err(status) => return error_page(&status, &viewer),
    };
    // Decayed usage has no API call; every node holds it in its applied
    // state (it is replicated), read here as a stale read.
    let usage_cpu_s = ui.api.node.read(|s| {
        s.data
            .usage
            .usage
            .accounts
            .iter()
            .map(|(name, record)| (name.clone(), record.billing()))
            .collect()
    });
    let view = fairshare::FairShareView {
        accounts: accounts.accounts,
        qos: qos.qos,
        running,
        usage_cpu_s,
    };
    let body = fairshare::render(&view);
    html_response(
        StatusCode::OK,
        layout::page(Page::FairShare, "Fair share and quotas", &viewer, body),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_header_or_the_cookie() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; berth_token=abc.def ; other=1"),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("abc.def"));
        let r = request(&headers, ());
        assert_eq!(
            r.metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer abc.def")
        );
        // The header wins over the cookie.
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer from-header"),
        );
        let r = request(&headers, ());
        assert_eq!(
            r.metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer from-header")
        );
        let mut empty = HeaderMap::new();
        empty.insert(header::COOKIE, HeaderValue::from_static("berth_token="));
        assert_eq!(cookie_token(&empty), None);
        assert!(request(&empty, ())
            .metadata()
            .get("authorization")
            .is_none());
    }

    #[test]
    fn private_details_are_for_the_owner_and_admins() {
        let user = |name: &str, admin: bool| {
            Caller::User(berth_auth::Claims {
                user: name.into(),
                roles: if admin { vec!["admin".into()] } else { vec![] },
                exp_s: u64::MAX,
            })
        };
        assert!(details_visible(false, &user("bob", false), "alice"));
        assert!(details_visible(true, &user("alice", false), "alice"));
        assert!(!details_visible(true, &user("bob", false), "alice"));
        assert!(details_visible(true, &user("root", true), "alice"));
        assert!(details_visible(true, &Caller::Trusted, "alice"));
    }

    #[test]
    fn error_pages_carry_the_rest_status_and_the_words() {
        let response = error_page(&Status::not_found("job 9 does not exist"), "alice");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"text/html; charset=utf-8"[..])
        );
        let response = error_page(&Status::unauthenticated("no token"), "nobody");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn the_frame_marks_the_current_page_and_escapes_the_viewer() {
        let html = layout::page(Page::Hosts, "Hosts", "<eve>", html! { p { "x" } }).into_string();
        assert!(html.starts_with("<!DOCTYPE html><html lang=\"en\">"));
        assert!(html.contains("<a href=\"/ui/hosts\" aria-current=\"page\">Hosts</a>"));
        assert!(html.contains("<a href=\"/ui/queue\">Queue</a>"));
        assert!(html.contains("Signed in as &lt;eve&gt;"));
        assert!(html.contains("<title>Hosts \u{2014} Berth</title>"));
        assert!(html.contains("<main><h1>Hosts</h1><p>x</p></main>"));
        assert!(html.contains("<label><input id=\"auto-refresh\" type=\"checkbox\" data-seconds=\"10\">Auto-refresh every 10 s</label>"));
    }
}
