//! Wires a node together: store, Raft, gRPC services, bootstrap and the
//! leader loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::agent::agent_service_server::AgentServiceServer;
use berth_proto::api::berth_api_server::BerthApiServer;
use berth_proto::raft::raft_transport_server::RaftTransportServer;
use berth_proto::MAX_MESSAGE_BYTES;
use berth_raft_store::store::store_path;
use berth_raft_store::{Raft, StoreError};
use openraft::{BasicNode, Config, SnapshotPolicy};
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;

use berth_auth::grpc::{AttachCredentials, RequireClusterSecret};

use crate::agent_service::AgentServiceImpl;
use crate::api_service::ApiService;
use crate::authz::AuthKeys;
use crate::config::NodeConfig;
use crate::leader::scheduling_loop;
use crate::network::Network;
use crate::node::Node;
use crate::raft_service::RaftService;

/// Snapshot chunks are at most this many bytes on the wire.
const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;
/// How long one snapshot chunk may take to be answered. openraft's default
/// (200 ms) is far too short here: a 1 MiB chunk travels as MessagePack
/// (up to 2 MB: each byte an integer of its own) and is decoded on
/// arrival, and the reply to the last chunk comes only after the receiver
/// has installed the whole state, which takes seconds for a large one
/// (BENCHMARKS.md: about 1M jobs). A chunk that times out restarts the
/// whole transfer, so too short a bound means a large snapshot never
/// arrives. A dead peer is still noticed at once (connect fails); only a
/// peer that accepts and then stalls holds a transfer this long.
const SNAPSHOT_CHUNK_TIMEOUT_MS: u64 = 120_000;
/// Entries per AppendEntries request at most: 48 batch entries of at most
/// `node::BATCH_BYTES_MAX` (192 KiB of MessagePack) stay within the 16 MiB
/// gRPC message bound with room to spare (9 MiB, checked below). A
/// follower catching up on small entries takes more calls.
const APPEND_ENTRIES_MAX: u64 = 48;
const _: () =
    assert!(APPEND_ENTRIES_MAX as usize * crate::node::BATCH_BYTES_MAX <= 9 * 1024 * 1024);

/// A request's headers at most, in bytes: a gRPC call's are a few hundred.
const HEADER_LIST_BYTES_MAX: u32 = 16 * 1024;
/// An idle connection is pinged this often, and closed when a ping goes
/// unanswered this long: a peer that vanished frees its slot.
const KEEPALIVE_INTERVAL_MS: u64 = 30_000;
const KEEPALIVE_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid raft config: {0}")]
    RaftConfig(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("auth: {0}")]
    Auth(String),
    #[error("tls: {0}")]
    Tls(String),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve on {addr}: {source}")]
    Serve {
        addr: std::net::SocketAddr,
        #[source]
        source: tonic::transport::Error,
    },
}

fn raft_config(config: &NodeConfig) -> Result<Config, ServerError> {
    let t = &config.raft;
    let c = Config {
        cluster_name: "berth".into(),
        heartbeat_interval: t.heartbeat_interval_ms,
        election_timeout_min: t.election_timeout_min_ms,
        election_timeout_max: t.election_timeout_max_ms,
        max_payload_entries: APPEND_ENTRIES_MAX,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT_MS,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_every_entries),
        max_in_snapshot_log_to_keep: t.log_entries_kept_behind_snapshot,
        ..Default::default()
    };
    c.validate()
        .map_err(|e| ServerError::RaftConfig(e.to_string()))
}

/// Reads the TLS files: the listener's config, and the CA every channel
/// this process opens will trust. `None` when TLS is off.
fn load_tls(
    tls: &crate::config::TlsConfig,
) -> Result<Option<tonic::transport::ServerTlsConfig>, ServerError> {
    let (Some(cert), Some(key), Some(ca)) = (&tls.cert_file, &tls.key_file, &tls.ca_file) else {
        return Ok(None);
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| ServerError::Tls(format!("{}: {e}", path.display())))
    };
    let (cert, key, ca) = (read(cert)?, read(key)?, read(ca)?);
    berth_auth::tls::set_client_ca(Some(&ca));
    Ok(Some(berth_auth::tls::server_config(&cert, &key)))
}

/// Runs a node until `shutdown` turns true.
pub async fn run(config: NodeConfig, shutdown: watch::Receiver<bool>) -> Result<(), ServerError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    // The HTTP listener (metrics, health, REST) is bound first: a start
    // that cannot have it fails here, before the node joins anything.
    let http_listener = match config.metrics_listen {
        Some(addr) => Some(
            crate::metrics::bind(addr)
                .await
                .map_err(|e| ServerError::Metrics(e.to_string()))?,
        ),
        None => None,
    };

    let store = berth_raft_store::open(&store_path(&config.data_dir))?;
    store.log.set_local_node(config.node_id);
    // Backups read the state machine's RocksDB (a cheap handle clone).
    let backup_source = store.state_machine.clone();
    let raft_cfg = Arc::new(raft_config(&config)?);
    let auth = AuthKeys::load(&config.auth).map_err(|e| ServerError::Auth(e.to_string()))?;
    let server_tls = load_tls(&config.tls)?;
    let network = Network::new(AttachCredentials::cluster_secret(auth.cluster.as_deref()));
    let require_secret = RequireClusterSecret::new(auth.cluster.clone());
    let raft = Raft::new(
        config.node_id,
        raft_cfg,
        network,
        store.log,
        store.state_machine,
    )
    .await
    .map_err(|e| ServerError::Raft(e.to_string()))?;
    let listen = config.listen;
    let node = Arc::new(Node::new(config, raft, store.state, store.applied, auth));

    // One service object behind both APIs: gRPC and REST (`rest`), and
    // behind the web UI (`ui`).
    let api_service = Arc::new(ApiService::new(node.clone(), backup_source));
    // Bound only now, when it is accepted from at once: a port bound
    // while the store opens would hold clients in its backlog instead of
    // refusing them, so they could not move on to another node.
    let api_listener =
        crate::listener::bind(listen)
            .await
            .map_err(|source| ServerError::Listen {
                addr: listen,
                source,
            })?;
    let limits = node.config.listener.clone();
    let incoming = crate::listener::spawn(api_listener, &limits, "grpc", shutdown.clone());
    let rest =
        crate::rest::for_node(api_service.clone()).merge(crate::ui::for_node(api_service.clone()));
    let api = BerthApiServer::from_arc(api_service)
        .max_decoding_message_size(limits.max_request_bytes)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Agents and other nodes prove they belong with the cluster secret.
    let agents = InterceptedService::new(
        AgentServiceServer::new(AgentServiceImpl { node: node.clone() })
            .max_decoding_message_size(limits.max_request_bytes)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        require_secret.clone(),
    );
    let raft_transport = InterceptedService::new(
        RaftTransportServer::new(RaftService {
            node: node.clone(),
            shutdown: shutdown.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES),
        require_secret,
    );

    let mut serve_shutdown = shutdown.clone();
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_streams_per_connection)
        .http2_max_header_list_size(HEADER_LIST_BYTES_MAX)
        .http2_keepalive_interval(Some(Duration::from_millis(KEEPALIVE_INTERVAL_MS)))
        .http2_keepalive_timeout(Some(Duration::from_millis(KEEPALIVE_TIMEOUT_MS)));
    if let Some(tls) = server_tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| ServerError::Tls(e.to_string()))?;
    }
    let serve = builder
        .layer(crate::listener::HeadSeenLayer)
        .layer(crate::api_metrics::ApiMetricsLayer)
        .add_service(api)
        .add_service(agents)
        .add_service(raft_transport)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = serve_shutdown.wait_for(|stop| *stop).await;
        });
    let server_task = tokio::spawn(serve);

    let metrics_task = match http_listener {
        Some(listener) => {
            let handle =
                crate::metrics::install().map_err(|e| ServerError::Metrics(e.to_string()))?;
            let task = crate::metrics::serve(
                listener,
                limits,
                node.clone(),
                handle,
                rest,
                shutdown.clone(),
            );
            Some(tokio::spawn(async move {
                if let Err(e) = task.await {
                    tracing::error!(error = %e, "metrics endpoint stopped");
                }
            }))
        }
        None => None,
    };

    bootstrap(&node).await?;
    let loop_task = tokio::spawn(scheduling_loop(node.clone(), shutdown.clone()));
    tracing::info!(node = node.id, %listen, "berthd serving");
    // A `Type=notify` unit (deploy/systemd/berthd.service) counts the node
    // started only now, so dependent units wait for a serving node.
    if let Err(e) = crate::sd_notify::ready(&format!("node {} serving on {listen}", node.id)) {
        tracing::warn!(error = %e, "could not tell systemd the node is ready");
    }

    let served = server_task.await;
    let _ = loop_task.await;
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    if let Err(e) = node.raft.shutdown().await {
        tracing::warn!(error = %e, "raft shutdown");
    }
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(ServerError::Serve {
            addr: listen,
            source,
        }),
        Err(e) => Err(ServerError::Raft(format!("server task: {e}"))),
    }
}

/// Initialises the cluster once: only on the node configured to bootstrap,
/// and only if its store has never been part of a cluster. A restart finds
/// the store initialised and does nothing.
async fn bootstrap(node: &Node) -> Result<(), ServerError> {
    if !node.config.bootstrap {
        return Ok(());
    }
    let initialized = node
        .raft
        .is_initialized()
        .await
        .map_err(|e| ServerError::Raft(e.to_string()))?;
    if initialized {
        tracing::info!("store already initialised; bootstrap skipped");
        return Ok(());
    }
    let members: BTreeMap<u64, BasicNode> = node
        .config
        .members
        .iter()
        .map(|m| {
            (
                m.id,
                BasicNode {
                    addr: m.addr.clone(),
                },
            )
        })
        .collect();
    match node.raft.initialize(members).await {
        Ok(()) => tracing::info!("cluster initialised"),
        // Another start of this node got there first: nothing to do.
        Err(e) => tracing::info!(error = %e, "initialise skipped"),
    }
    Ok(())
}
