//! srun's tasks on the job's other hosts: each host's agent starts them
//! (`StepService.RunTasks`, at the address in `BERTH_STEP_AGENTS`, with
//! the allocation's `BERTH_STEP_CREDENTIAL`) and streams their output
//! back; srun writes it out line by line per task (as it comes with
//! `--unbuffered`), or into the `-o`/`-e` files, and reports each task's
//! end. Dropping a call's stream makes that agent kill its tasks.

use std::collections::HashMap;
use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use berth_proto::agent::step_service_client::StepServiceClient;
use berth_proto::agent::{EndStepRequest, NextStepIdRequest, RunTasksRequest, TaskOutput};
use tonic::Streaming;

use super::srun::{open_output, Layout, SrunArgs, StepPlace};

/// Limit on connecting to one host's agent and having its tasks started.
pub const STEP_START_TIMEOUT_MS: u64 = 10_000;

/// A host whose agent is running its share of the step.
pub struct RemoteHost {
    host: String,
    stream: Streaming<TaskOutput>,
}

/// `HOST=ADDR,...` as the agent wrote it into the job's environment.
pub fn parse_step_agents(text: &str) -> Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (host, addr) = item
            .split_once('=')
            .with_context(|| format!("BERTH_STEP_AGENTS item {item:?} is not HOST=ADDR"))?;
        map.insert(host.to_string(), addr.to_string());
    }
    Ok(map)
}

/// The allocation a step runs in, as srun reaches its hosts' agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepAlloc {
    pub job_id: u64,
    pub alloc_id: u64,
    /// The step credential ("" on a cluster without a secret).
    pub credential: String,
    /// Host → its agent's step address.
    pub agents: HashMap<String, String>,
}

impl StepAlloc {
    /// From the environment the job's agent (or salloc) set.
    pub fn from_env(place: &StepPlace, env: &dyn Fn(&str) -> Option<String>) -> Result<StepAlloc> {
        let job_id: u64 = place
            .job_id
            .parse()
            .with_context(|| format!("SLURM_JOB_ID={} is not a number", place.job_id))?;
        let agents = parse_step_agents(&env("BERTH_STEP_AGENTS").unwrap_or_default())?;
        // Without agents to reach, the ids are not needed (a job started
        // by hand, or whose agent serves no steps).
        let alloc_id = match env("BERTH_ALLOC_ID") {
            Some(a) => a.parse().context("BERTH_ALLOC_ID is not a number")?,
            None if agents.is_empty() => 0,
            None => bail!("BERTH_ALLOC_ID is not set: this job was not started by a Berth agent"),
        };
        Ok(StepAlloc {
            job_id,
            alloc_id,
            credential: env("BERTH_STEP_CREDENTIAL").unwrap_or_default(),
            agents,
        })
    }

    /// From the cluster's answer to `GetStepAccess`.
    pub fn from_access(access: &berth_proto::api::StepAccess) -> StepAlloc {
        StepAlloc {
            job_id: access.job_id,
            alloc_id: access.alloc_id,
            credential: access.credential.clone(),
            agents: access
                .hosts
                .iter()
                .zip(&access.step_addrs)
                .filter(|(_, a)| !a.is_empty())
                .map(|(h, a)| (h.clone(), a.clone()))
                .collect(),
        }
    }
}

/// Asks every other host of the step to start its tasks; fails, starting
/// nothing more, at the first that cannot (the streams already open are
/// dropped, so their agents kill what they started).
pub async fn start(
    args: &SrunArgs,
    place: &StepPlace,
    layout: &Layout,
    shared: &[(String, String)],
    alloc: &StepAlloc,
) -> Result<Vec<RemoteHost>> {
    let others: Vec<usize> = (0..layout.tasks.len())
        .filter(|&i| Some(i) != place.here)
        .collect();
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let StepAlloc {
        job_id,
        alloc_id,
        credential,
        agents,
    } = alloc;
    let (job_id, alloc_id) = (*job_id, *alloc_id);
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    // srun's environment travels with the tasks, as in Slurm, except the
    // caller's API token: it is the user's, not the job's, and the tasks
    // need none.
    let mut task_env: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| k != berth_client::TOKEN_ENV)
        .collect();
    task_env.extend(shared.iter().cloned());
    let mut started = Vec::with_capacity(others.len());
    for i in others {
        let host = &place.hosts[i];
        let Some(addr) = agents.get(host) else {
            bail!(
                "no step address for host {host}: its agent serves no steps (step_listen) or registered none"
            );
        };
        let request = RunTasksRequest {
            job_id,
            alloc_id,
            credential: credential.clone(),
            step_id: place.step_id,
            argv: args.command.clone(),
            env: task_env.clone(),
            cwd: cwd.clone(),
            tasks: layout.tasks[i].clone(),
            node_id: u32::try_from(i).unwrap_or(u32::MAX),
        };
        let opened = tokio::time::timeout(
            Duration::from_millis(STEP_START_TIMEOUT_MS),
            open(addr, request),
        )
        .await;
        let stream = match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => bail!("{host} ({addr}): {e}"),
            Err(_) => bail!("{host} ({addr}): no answer in {STEP_START_TIMEOUT_MS} ms"),
        };
        started.push(RemoteHost {
            host: host.clone(),
            stream,
        });
    }
    Ok(started)
}

async fn client(addr: &str) -> Result<StepServiceClient<tonic::transport::Channel>> {
    let channel = berth_auth::tls::endpoint_for_url(addr)
        .map_err(|e| anyhow::anyhow!("step address: {e}"))?
        .connect_timeout(Duration::from_millis(STEP_START_TIMEOUT_MS))
        .connect()
        .await
        .context("cannot connect to its agent")?;
    Ok(StepServiceClient::new(channel).max_decoding_message_size(berth_proto::MAX_MESSAGE_BYTES))
}

/// The batch host's agent, when the job's environment names one.
fn batch_agent<'a>(place: &'a StepPlace, alloc: &'a StepAlloc) -> Option<(&'a str, &'a str)> {
    let host = place.hosts.first()?;
    Some((host.as_str(), alloc.agents.get(host)?.as_str()))
}

/// Runs one call to the batch host's agent within the start timeout.
async fn with_batch_agent<T, F, Fut>(host: &str, addr: &str, call: F) -> Result<T>
where
    F: FnOnce(StepServiceClient<tonic::transport::Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    tokio::time::timeout(Duration::from_millis(STEP_START_TIMEOUT_MS), async {
        let c = client(addr).await?;
        call(c)
            .await
            .map_err(|s| anyhow::anyhow!("{}", s.message()))
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer in {STEP_START_TIMEOUT_MS} ms"))
    .and_then(|r| r)
    .with_context(|| format!("{host} ({addr})"))
}

/// The step's id, counted by the batch host's agent, which records the
/// step's start (`name`, the hosts it uses, its task count) for sacct;
/// `None` where the job's environment names no agent for it (a job not
/// started by a Berth agent, or one whose agent serves no steps).
pub async fn next_step_id(
    place: &StepPlace,
    alloc: &StepAlloc,
    name: &str,
    layout: &Layout,
) -> Result<Option<u32>> {
    let Some((host, addr)) = batch_agent(place, alloc) else {
        return Ok(None);
    };
    let request = NextStepIdRequest {
        job_id: alloc.job_id,
        alloc_id: alloc.alloc_id,
        credential: alloc.credential.clone(),
        name: name.to_string(),
        hosts: place.hosts[..layout.tasks.len()].to_vec(),
        ntasks: layout.ntasks(),
    };
    let answer = with_batch_agent(
        host,
        addr,
        |mut c| async move { c.next_step_id(request).await },
    )
    .await?;
    Ok(Some(answer.into_inner().step_id))
}

/// Tells the batch host's agent the step ended with `exit_code`.
pub async fn end_step(place: &StepPlace, alloc: &StepAlloc, exit_code: i32) -> Result<()> {
    let Some((host, addr)) = batch_agent(place, alloc) else {
        return Ok(());
    };
    let request = EndStepRequest {
        job_id: alloc.job_id,
        alloc_id: alloc.alloc_id,
        credential: alloc.credential.clone(),
        step_id: place.step_id,
        exit_code,
    };
    with_batch_agent(host, addr, |mut c| async move { c.end_step(request).await }).await?;
    Ok(())
}

async fn open(addr: &str, request: RunTasksRequest) -> Result<Streaming<TaskOutput>> {
    let response = client(addr)
        .await?
        .run_tasks(request)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    Ok(response.into_inner())
}

/// Where one task's output goes.
pub enum Sink {
    /// srun's own stdout or stderr, whole lines at a time unless
    /// unbuffered (`pending` holds a line not yet ended); with a `label`
    /// (`-l`: "TASK: "), every line starts with it and lines are always
    /// whole.
    Terminal {
        stderr: bool,
        pending: Vec<u8>,
        label: Option<Vec<u8>>,
    },
    File(std::fs::File),
}

impl Sink {
    /// srun's stdout (or stderr), labelled with `task` when asked.
    pub fn terminal(stderr: bool, task: u32, label: bool) -> Sink {
        Sink::Terminal {
            stderr,
            pending: Vec::new(),
            label: label.then(|| format!("{task}: ").into_bytes()),
        }
    }

    pub fn write(&mut self, data: &[u8], unbuffered: bool) {
        match self {
            Sink::File(f) => {
                let _ = f.write_all(data);
            }
            Sink::Terminal {
                stderr,
                pending,
                label,
            } => {
                pending.extend_from_slice(data);
                let upto = if unbuffered && label.is_none() {
                    pending.len()
                } else {
                    pending
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |i| i + 1)
                };
                if upto > 0 {
                    emit_lines(*stderr, label.as_deref(), &pending[..upto]);
                    pending.drain(..upto);
                }
            }
        }
    }

    pub fn flush(&mut self) {
        if let Sink::Terminal {
            stderr,
            pending,
            label,
        } = self
        {
            if !pending.is_empty() {
                emit_lines(*stderr, label.as_deref(), pending);
                pending.clear();
            }
        }
    }
}

/// Feeds a local task's pipe into `sink` until it closes.
pub async fn pump(mut pipe: impl tokio::io::AsyncRead + Unpin, mut sink: Sink, unbuffered: bool) {
    use tokio::io::AsyncReadExt as _;
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        sink.write(&buf[..n], unbuffered);
    }
    sink.flush();
}

/// Writes `bytes`, each line after `label` when there is one.
fn emit_lines(stderr: bool, label: Option<&[u8]>, bytes: &[u8]) {
    let Some(label) = label else {
        emit(stderr, bytes);
        return;
    };
    let mut out = Vec::with_capacity(bytes.len() + label.len());
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(label);
        out.extend_from_slice(line);
    }
    emit(stderr, &out);
}

fn emit(stderr: bool, bytes: &[u8]) {
    if stderr {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(bytes);
        let _ = e.flush();
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(bytes);
        let _ = o.flush();
    }
}

/// Relays the other hosts' output until all their tasks ended; returns
/// the highest exit code among them (1 for a task that could not start
/// or a host that went away).
pub async fn finish(hosts: Vec<RemoteHost>, args: SrunArgs, place: StepPlace) -> i32 {
    let mut joins = tokio::task::JoinSet::new();
    for h in hosts {
        joins.spawn(relay(h, args.clone(), place.clone()));
    }
    let mut worst = 0;
    while let Some(done) = joins.join_next().await {
        worst = worst.max(done.unwrap_or(1));
    }
    worst
}

async fn relay(mut h: RemoteHost, args: SrunArgs, place: StepPlace) -> i32 {
    let mut sinks: HashMap<(u32, u32), Sink> = HashMap::new();
    let mut worst = 0;
    loop {
        let message = match h.stream.message().await {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(s) => {
                eprintln!(
                    "srun: error: {}: lost contact with its tasks: {}",
                    h.host,
                    s.message()
                );
                worst = worst.max(1);
                break;
            }
        };
        if message.exited {
            for ((task, _), sink) in sinks.iter_mut() {
                if *task == message.task {
                    sink.flush();
                }
            }
            if !message.launch_error.is_empty() {
                eprintln!(
                    "srun: error: {}: task {}: {}",
                    h.host, message.task, message.launch_error
                );
            } else if message.exit_code != 0 {
                eprintln!(
                    "srun: error: {}: task {}: Exited with exit code {}",
                    h.host, message.task, message.exit_code
                );
            }
            worst = worst.max(
                message
                    .exit_code
                    .max(i32::from(!message.launch_error.is_empty())),
            );
            continue;
        }
        let stream = message.stream;
        let sink = sinks.entry((message.task, stream)).or_insert_with(|| {
            let pattern = if stream == 2 {
                args.error.as_ref().or(args.output.as_ref())
            } else {
                args.output.as_ref()
            };
            match pattern.map(|p| open_output(p, message.task, &place)) {
                Some(Ok(f)) => Sink::File(f),
                Some(Err(e)) => {
                    eprintln!("srun: error: {e:#}");
                    Sink::terminal(stream == 2, message.task, args.label)
                }
                None => Sink::terminal(stream == 2, message.task, args.label),
            }
        });
        sink.write(&message.data, args.unbuffered);
    }
    for sink in sinks.values_mut() {
        sink.flush();
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_agents_parse() {
        let m = parse_step_agents("n1=127.0.0.1:1,n2=10.0.0.2:6818").expect("ok");
        assert_eq!(m.get("n2").map(String::as_str), Some("10.0.0.2:6818"));
        assert!(parse_step_agents("").expect("empty").is_empty());
        assert!(parse_step_agents("n1").is_err());
    }

    #[test]
    fn labelled_lines_start_with_their_task() {
        let mut sink = Sink::terminal(false, 3, true);
        sink.write(b"a\nb", true);
        match &sink {
            Sink::Terminal { pending, .. } => assert_eq!(pending, b"b", "lines stay whole"),
            Sink::File(_) => unreachable!(),
        }
    }

    #[test]
    fn terminal_output_is_passed_on_in_whole_lines() {
        let mut sink = Sink::terminal(false, 0, false);
        sink.write(b"par", false);
        match &sink {
            Sink::Terminal { pending, .. } => assert_eq!(pending, b"par"),
            Sink::File(_) => unreachable!(),
        }
        sink.write(b"tial\nnext", false);
        match &sink {
            Sink::Terminal { pending, .. } => assert_eq!(pending, b"next"),
            Sink::File(_) => unreachable!(),
        }
        sink.write(b"", true);
        match &sink {
            Sink::Terminal { pending, .. } => assert!(pending.is_empty()),
            Sink::File(_) => unreachable!(),
        }
    }
}
