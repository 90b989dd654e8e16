//! `cargo xtask qdrant start|stop|status [--nodes N] [--port N]`: a Qdrant server (or a loopback cluster) for
//! tests, evaluation and benchmarks.
//!
//! The binary is `$RAGTUNE_QDRANT_BIN`, else `../shared/qdrant/qdrant` next to the repository. Every node binds
//! 127.0.0.1 only, has telemetry off, runs from its own directory (Qdrant writes `.qdrant-initialized` into its
//! working directory) and keeps its storage there. `start` begins from empty storage: the server is scratch space
//! for tests and evaluations, which create their own collections. Every start protects the server with a fresh API
//! key, so that other users of the machine cannot write into it and so that every test run exercises the
//! authenticated path; `start` prints the `export` lines for `QDRANT_URL` and `QDRANT_API_KEY`.
//!
//! ```text
//! $RAGTUNE_HOME/qdrant/server.json          {"url", "api_key", "bin", "started_at", "nodes": [{"http", "grpc", "p2p", "pid", "dir"}]}
//! $RAGTUNE_HOME/qdrant/node-<i>/            node i's working directory: storage/, snapshots/, qdrant.log
//! ```
//!
//! Node `i` listens on HTTP `port + 10·i`, gRPC one above it and (in a cluster) peer-to-peer two above it; the
//! default `port` is Qdrant's own 6333, so a single node answers gRPC on 6334, where ragtune looks by default.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use ragtune_testkit::qdrant::{self as tq, NodePorts, NodeSpec, http_get};

use crate::process::{self, Guard, Identity, RecordFile, Stop};
use crate::shell::Shell;

/// The server version the adapter is tested against (qdrant-client 1.20 accepts servers 1.19–1.21).
pub const VERSION: &str = "v1.19.0";

/// What users without the binary run instead (the REST and gRPC ports of the official image).
pub const DOCKER: &str = "docker run -p 6333:6333 -p 6334:6334 qdrant/qdrant:v1.19.0";

/// The nextest filter of the tests that need a Qdrant server (all `#[ignore]`d, run by `cargo xtask ci` with one).
/// Besides the store's server tests, the integration tests named `qdrant_*` (faults on clusters the tests start
/// themselves, parity with the embedded store).
pub const TESTS: &str = "binary_id(ragtune-store::qdrant) | (binary_id(tests::it) & test(/^qdrant_/))";

/// The most nodes `--nodes` accepts: each is a full server, and the machine is small.
const MAX_NODES: usize = 5;

const USAGE: &str = "\
usage: cargo xtask qdrant start [--nodes N] [--port N]   (N nodes form a cluster; --port is node 0's HTTP port)
       cargo xtask qdrant stop
       cargo xtask qdrant status";

#[derive(Debug, PartialEq, Eq)]
enum Action {
    Start { nodes: usize, port: u16 },
    Stop,
    Status,
    Help,
}

fn parse_args(args: &[String]) -> Result<Action> {
    let Some((command, flags)) = args.split_first() else { bail!("{USAGE}") };
    let (mut nodes, mut port) = (None, None);
    let mut rest = flags.iter();
    while let Some(flag) = rest.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag.as_str(), None),
        };
        if name != "--nodes" && name != "--port" {
            bail!("unknown argument `{flag}`\n{USAGE}");
        }
        let Some(value) = inline.or_else(|| rest.next().cloned()) else { bail!("{name} needs a value\n{USAGE}") };
        if name == "--nodes" {
            let parsed = value.parse::<usize>().ok().filter(|n| (1..=MAX_NODES).contains(n));
            nodes = Some(parsed.with_context(|| format!("--nodes takes 1 to {MAX_NODES}, got `{value}`"))?);
        } else {
            // Node i uses up to three ports from `port + 10·i`.
            let parsed = value.parse::<u16>().ok().filter(|p| *p != 0 && *p <= 65535 - 10 * MAX_NODES as u16);
            port = Some(parsed.with_context(|| format!("--port takes a port number from 1 to 65485, got `{value}`"))?);
        }
    }
    match command.as_str() {
        "start" => Ok(Action::Start { nodes: nodes.unwrap_or(1), port: port.unwrap_or(6333) }),
        "stop" | "status" if nodes.is_some() || port.is_some() => {
            bail!("--nodes and --port apply to `start` only\n{USAGE}")
        }
        "stop" => Ok(Action::Stop),
        "status" => Ok(Action::Status),
        "help" | "-h" | "--help" => Ok(Action::Help),
        other => bail!("unknown qdrant command `{other}`\n{USAGE}"),
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let shell = Shell::new();
    let layout = Layout::from_env();
    match parse_args(args)? {
        Action::Start { nodes, port } => {
            let bin = binary(&shell)?;
            let running = start(&layout, &bin, nodes, port)?;
            println!("export QDRANT_URL={}", running.record.url);
            println!("export QDRANT_API_KEY={}", running.record.api_key);
            // The servers outlive this command; `cargo xtask qdrant stop` ends them.
            drop(running.children);
            Ok(())
        }
        Action::Stop => stop(&layout),
        Action::Status => {
            status(&layout);
            Ok(())
        }
        Action::Help => {
            println!("{USAGE}");
            Ok(())
        }
    }
}

/// The files under `$RAGTUNE_HOME/qdrant`.
#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    pub fn from_env() -> Self {
        Self::named("qdrant")
    }

    /// A layout of its own under `$RAGTUNE_HOME` (`name/`), for servers that must not replace the recorded one.
    pub fn named(name: &str) -> Self {
        Self { dir: ragtune_provision::ragtune_home().join(name) }
    }

    fn record(&self) -> RecordFile<Record> {
        RecordFile::new(self.dir.join("server.json"))
    }

    fn node_dir(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}"))
    }
}

/// The server binary: `$RAGTUNE_QDRANT_BIN`, else `../shared/qdrant/qdrant` relative to the repository root.
///
/// # Errors
///
/// When neither exists, naming both places and the Docker alternative.
pub fn binary(shell: &Shell) -> Result<PathBuf> {
    find_binary(std::env::var_os("RAGTUNE_QDRANT_BIN").filter(|b| !b.is_empty()).map(PathBuf::from), shell.root())
}

fn find_binary(from_env: Option<PathBuf>, root: &Path) -> Result<PathBuf> {
    tq::find_binary_in(from_env, root).map_err(|error| {
        anyhow::anyhow!(
            "{error}. Point $RAGTUNE_QDRANT_BIN at a Qdrant {VERSION} server binary, or run one with Docker \
             (`{DOCKER}`, add `-e QDRANT__SERVICE__API_KEY=KEY` for the API-key tests) and set \
             QDRANT_URL=http://127.0.0.1:6334 (and QDRANT_API_KEY=KEY) yourself"
        )
    })
}

/// One node of the recorded server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `http://127.0.0.1:PORT`: the REST API (and `/readyz`).
    pub http: String,
    /// `http://127.0.0.1:PORT`: the gRPC API, what ragtune talks to.
    pub grpc: String,
    /// The peer-to-peer port, in a cluster.
    pub p2p: Option<u16>,
    pub pid: u32,
    /// The node's working directory (storage, snapshots, log).
    pub dir: PathBuf,
}

/// What `server.json` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The gRPC URL of node 0, for `QDRANT_URL`.
    pub url: String,
    pub api_key: String,
    pub bin: PathBuf,
    /// Unix seconds.
    pub started_at: u64,
    pub nodes: Vec<Node>,
}

impl process::Record for Record {
    fn to_json(&self) -> serde_json::Value {
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                json!({"http": n.http, "grpc": n.grpc, "p2p": n.p2p, "pid": n.pid, "dir": n.dir.display().to_string()})
            })
            .collect();
        json!({
            "url": self.url,
            "api_key": self.api_key,
            "bin": self.bin.display().to_string(),
            "started_at": self.started_at,
            "nodes": nodes,
        })
    }

    fn from_json(value: &serde_json::Value) -> Result<Self> {
        let nodes = value
            .get("nodes")
            .and_then(|n| n.as_array())
            .context("no array `nodes`")?
            .iter()
            .map(|n| {
                let pid = process::pid_field(n)?;
                let p2p = match n.get("p2p") {
                    None | Some(serde_json::Value::Null) => None,
                    Some(p) => Some(p.as_u64().and_then(|p| u16::try_from(p).ok()).context("`p2p` is not a port")?),
                };
                Ok(Node {
                    http: process::string_field(n, "http")?,
                    grpc: process::string_field(n, "grpc")?,
                    p2p,
                    pid,
                    dir: PathBuf::from(process::string_field(n, "dir")?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if nodes.is_empty() {
            bail!("`nodes` is empty");
        }
        Ok(Self {
            url: process::string_field(value, "url")?,
            api_key: process::string_field(value, "api_key")?,
            bin: PathBuf::from(process::string_field(value, "bin")?),
            started_at: process::number_field(value, "started_at")?,
            nodes,
        })
    }
}

/// A server started by [`start`]; `children` are the node processes this process spawned.
#[derive(Debug)]
pub struct Running {
    pub record: Record,
    children: Vec<Child>,
    file: RecordFile<Record>,
}

impl Stop for Running {
    /// Stops every node and removes the record.
    fn stop(mut self) -> Result<()> {
        for child in self.children.iter_mut().rev() {
            process::terminate_child("qdrant", child)?;
        }
        self.file.remove_if(|recorded| same_server(recorded, &self.record));
        println!("qdrant: stopped {} node(s) at {}", self.record.nodes.len(), self.record.url);
        Ok(())
    }
}

/// Keeps the server of `cargo xtask ci` running while the tests run and stops it when dropped, so that a failing
/// step does not leave it behind.
pub type ServerGuard = Guard<Running>;

impl ServerGuard {
    /// The gRPC URL of node 0, for `QDRANT_URL`.
    pub fn url(&self) -> &str {
        self.get().map_or("", |r| r.record.url.as_str())
    }

    /// The server's API key, for `QDRANT_API_KEY`.
    pub fn api_key(&self) -> &str {
        self.get().map_or("", |r| r.record.api_key.as_str())
    }
}

/// Starts a single node on free ports for `cargo xtask ci`, or says why there is none (`Ok(None)`: no binary).
///
/// A server recorded by an earlier `cargo xtask qdrant start` is stopped first: its storage is reused.
pub fn start_guarded(shell: &Shell) -> Result<Option<ServerGuard>> {
    start_guarded_at(shell, Layout::from_env(), 1)
}

/// Starts `nodes` nodes on free ports with their record and storage under `layout`, stopped when the guard drops;
/// `Ok(None)` (with a note) when there is no binary.
pub fn start_guarded_at(shell: &Shell, layout: Layout, nodes: usize) -> Result<Option<ServerGuard>> {
    let bin = match binary(shell) {
        Ok(bin) => bin,
        Err(why) => {
            println!("note: no Qdrant server binary, so Qdrant is left out: {why:#}");
            return Ok(None);
        }
    };
    let running = start(&layout, &bin, nodes, tq::free_base_port(nodes)?)?;
    Ok(Some(Guard::new(running, "the Qdrant server")))
}

/// Starts `nodes` nodes from empty storage and waits until each answers `/readyz`, replacing a recorded server.
pub fn start(layout: &Layout, bin: &Path, nodes: usize, base: u16) -> Result<Running> {
    let file = layout.record();
    if file.read()?.is_some() {
        println!("qdrant: replacing the recorded server");
        stop(layout)?;
    }
    let cluster = nodes > 1;
    let ports: Vec<NodePorts> = (0..nodes).map(|i| NodePorts::of(base, i, cluster)).collect();
    // Something else answering on these ports would be taken for our server.
    tq::check_ports_free(&ports).context("choose another --port (node i uses port + 10·i .. +2)")?;
    let api_key = tq::fresh_api_key();
    let started = Instant::now();
    let mut running = Running {
        record: Record {
            url: String::new(),
            api_key,
            bin: bin.to_owned(),
            started_at: process::unix_now(),
            nodes: Vec::new(),
        },
        children: Vec::new(),
        file,
    };
    for (i, node_ports) in ports.iter().enumerate() {
        let dir = layout.node_dir(i);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        let bootstrap = (cluster && i > 0).then(|| format!("http://127.0.0.1:{}", base + 2));
        let spec =
            NodeSpec { ports: *node_ports, dir: dir.clone(), api_key: running.record.api_key.clone(), bootstrap };
        let mut child = tq::spawn_node(bin, &spec)?;
        let node = Node {
            http: node_ports.http_url(),
            grpc: node_ports.grpc_url(),
            p2p: node_ports.p2p,
            pid: child.id(),
            dir: dir.clone(),
        };
        let log_path = dir.join("qdrant.log");
        println!(
            "qdrant: node {i} starting: REST {}, gRPC {} (pid {}), log {}",
            node.http,
            node.grpc,
            node.pid,
            log_path.display()
        );
        // A peer joins through node 0, which must be up first; the others start one after another for the same
        // reason (each registers with the consensus before the next).
        let ready = tq::wait_ready(&mut child, &ports[i], tq::READY_TIMEOUT);
        running.children.push(child);
        running.record.nodes.push(node);
        if let Err(error) = ready {
            let log_tail = process::log_tail(&log_path, 20);
            for child in &mut running.children {
                let _ = process::terminate_child("qdrant", child);
            }
            return Err(anyhow::Error::from(error).context(format!(
                "Qdrant node {i} did not become ready; the last lines of {}:\n{log_tail}",
                log_path.display(),
            )));
        }
    }
    if cluster {
        tq::wait_peers(&running.record.nodes[0].http, &running.record.api_key, nodes, tq::READY_TIMEOUT)?;
    }
    running.record.url = running.record.nodes[0].grpc.clone();
    running.file.write(&running.record)?;
    println!(
        "qdrant: {} node(s) ready at {} after {:.1}s (record: {})",
        nodes,
        running.record.url,
        started.elapsed().as_secs_f64(),
        running.file.path().display()
    );
    Ok(running)
}

/// Stops every recorded node, if any, and removes `server.json`. Storage stays until the next `start`.
pub fn stop(layout: &Layout) -> Result<()> {
    let file = layout.record();
    let Some(record) = file.read()? else {
        println!("qdrant: no server is recorded in {}; nothing to stop", file.path().display());
        return Ok(());
    };
    let program = program_name(&record.bin);
    for (i, node) in record.nodes.iter().enumerate().rev() {
        if process::stop_recorded("qdrant", node.pid, Identity::Program(&program))? {
            println!("qdrant: stopped node {i} at {} (pid {})", node.grpc, node.pid);
        } else {
            println!("qdrant: node {i} (pid {}) was no longer running", node.pid);
        }
    }
    file.remove_if(|recorded| same_server(recorded, &record));
    Ok(())
}

fn status(layout: &Layout) {
    let record = match layout.record().read() {
        Ok(Some(record)) => record,
        Ok(None) => {
            println!("qdrant: not running");
            return;
        }
        Err(error) => {
            println!("qdrant: not running ({error:#})");
            return;
        }
    };
    let uptime = process::unix_now().saturating_sub(record.started_at);
    println!("qdrant: url      {} (QDRANT_URL)", record.url);
    println!("qdrant: api key  {} (QDRANT_API_KEY)", record.api_key);
    println!("qdrant: binary   {}", record.bin.display());
    println!("qdrant: up       {uptime}s");
    let program = program_name(&record.bin);
    for (i, node) in record.nodes.iter().enumerate() {
        let state = if !process::is_running_as(node.pid, Identity::Program(&program)) {
            "exited".to_owned()
        } else {
            match http_get(&node.http, "/readyz", None) {
                Ok((200, _)) => "ready".to_owned(),
                Ok((code, body)) => format!("not ready (/readyz: {code} {})", body.trim()),
                Err(error) => format!("unreachable ({error:#})"),
            }
        };
        let p2p = node.p2p.map(|p| format!(", p2p {p}")).unwrap_or_default();
        println!(
            "qdrant: node {i}   {state}: gRPC {}, REST {}{p2p}, pid {}, dir {}",
            node.grpc,
            node.http,
            node.pid,
            node.dir.display()
        );
    }
}

/// Gives `cmd` the URL and API key of the server `cargo xtask qdrant start` recorded, as `RAGTUNE_QDRANT_URL` and
/// `QDRANT_API_KEY`, unless the environment sets either already (then the user's choice stands).
pub fn export_recorded(cmd: &mut Command) {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set("RAGTUNE_QDRANT_URL") || set("QDRANT_API_KEY") {
        return;
    }
    if let Ok(Some(record)) = Layout::from_env().record().read() {
        cmd.env("RAGTUNE_QDRANT_URL", &record.url).env("QDRANT_API_KEY", &record.api_key);
    }
}

/// Whether two records are of the same server (the same pid for node 0).
fn same_server(a: &Record, b: &Record) -> bool {
    a.nodes.first().map(|n| n.pid) == b.nodes.first().map(|n| n.pid)
}

/// The file name of the recorded binary, which the program of each of its nodes ends with: a recorded pid that runs
/// anything else is not signalled (see [`process::is_running_as`]).
fn program_name(bin: &Path) -> String {
    bin.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[track_caller]
    fn check_args(line: &str, expect: &str) {
        let actual = match parse_args(&args(line)) {
            Ok(action) => format!("{action:?}"),
            Err(error) => format!("error: {}", format!("{error:#}").lines().next().unwrap_or_default()),
        };
        assert_eq!(actual, expect, "{line}");
    }

    #[test]
    fn args_parse() {
        check_args("start", "Start { nodes: 1, port: 6333 }");
        check_args("start --nodes 3", "Start { nodes: 3, port: 6333 }");
        check_args("start --nodes=3 --port 7000", "Start { nodes: 3, port: 7000 }");
        check_args("start --nodes 0", "error: --nodes takes 1 to 5, got `0`");
        check_args("start --nodes 9", "error: --nodes takes 1 to 5, got `9`");
        check_args("start --port 0", "error: --port takes a port number from 1 to 65485, got `0`");
        check_args("start --nodes", "error: --nodes needs a value");
        check_args("start --api-key x", "error: unknown argument `--api-key`");
        check_args("stop", "Stop");
        check_args("status", "Status");
        check_args("stop --nodes 3", "error: --nodes and --port apply to `start` only");
        check_args("restart", "error: unknown qdrant command `restart`");
    }

    #[test]
    fn records_round_trip() {
        let record = Record {
            url: "http://127.0.0.1:6334".into(),
            api_key: "k".into(),
            bin: "/bin/qdrant".into(),
            started_at: 5,
            nodes: vec![
                Node {
                    http: "http://127.0.0.1:6333".into(),
                    grpc: "http://127.0.0.1:6334".into(),
                    p2p: Some(6335),
                    pid: 42,
                    dir: "/tmp/n0".into(),
                },
                Node {
                    http: "http://127.0.0.1:6343".into(),
                    grpc: "http://127.0.0.1:6344".into(),
                    p2p: None,
                    pid: 43,
                    dir: "/tmp/n1".into(),
                },
            ],
        };
        let parse = process::parse_record::<Record>;
        assert_eq!(parse(&process::render_record(&record)).unwrap(), record);
        let error =
            parse(r#"{"url": "u", "api_key": "k", "bin": "b", "started_at": 1, "nodes": []}"#).expect_err("no nodes");
        assert_eq!(format!("{error:#}"), "`nodes` is empty");
        let error = parse(r#"{"nodes": [{"http": "h"}]}"#).expect_err("a node without a pid");
        assert_eq!(format!("{error:#}"), "no number `pid`");
    }

    #[test]
    fn a_missing_binary_names_both_places_and_docker() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        let error = find_binary(None, &root).expect_err("no binary there");
        let message = format!("{error:#}");
        assert!(message.contains("$RAGTUNE_QDRANT_BIN") && message.contains("shared/qdrant/qdrant"), "{message}");
        assert!(message.contains(DOCKER), "{message}");
        let error = find_binary(Some(root.join("nope")), &root).expect_err("not a file");
        assert!(format!("{error:#}").contains("which is not a file"), "{error:#}");
        // The shared place, relative to the repository root.
        std::fs::create_dir_all(dir.path().join("shared/qdrant")).unwrap();
        std::fs::write(dir.path().join("shared/qdrant/qdrant"), b"").unwrap();
        let found = find_binary(None, &root).unwrap();
        assert!(found.ends_with("shared/qdrant/qdrant"), "{}", found.display());
    }
}
