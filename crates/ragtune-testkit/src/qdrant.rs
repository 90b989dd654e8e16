//! Real Qdrant servers for tests and tooling: starting nodes (one, or a loopback cluster), waiting for them, killing
//! and restarting them.
//!
//! The one place that knows how a Qdrant node is started here: `cargo xtask qdrant start` (and `cargo xtask ci`)
//! and the fault tests (`tests/it/qdrant_faults.rs`) use it. Every node binds 127.0.0.1 only, has telemetry off, is
//! protected by an API key, runs from its own directory (Qdrant writes `.qdrant-initialized` into its working
//! directory) and keeps its storage and log (`qdrant.log`) there. Node `i` of a group starting at `base` listens on
//! HTTP `base + 10·i`, gRPC one above it and, in a cluster, peer-to-peer two above it.
//!
//! Everything here is synchronous and blocking (std processes and sockets), so it works from build tooling and from
//! tests alike; errors are [`std::io::Error`]s whose messages say what and where.

use std::fs::File;
use std::io;
use std::net::TcpListener;

pub use crate::http::parse_http_url;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a node may take to answer `/readyz` (one starts in about a second when idle; recovering storage after a
/// kill takes longer).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The ports of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    /// The REST API (and `/readyz`).
    pub http: u16,
    /// The gRPC API, what ragtune talks to.
    pub grpc: u16,
    /// The peer-to-peer port, in a cluster.
    pub p2p: Option<u16>,
}

impl NodePorts {
    /// Node `i`'s ports in a group starting at `base`.
    #[must_use]
    pub fn of(base: u16, i: usize, cluster: bool) -> Self {
        let http = base + 10 * u16::try_from(i).unwrap_or(0);
        Self { http, grpc: http + 1, p2p: cluster.then_some(http + 2) }
    }

    /// `http://127.0.0.1:PORT` of the REST API.
    #[must_use]
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// `http://127.0.0.1:PORT` of the gRPC API.
    #[must_use]
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    fn all(&self) -> Vec<u16> {
        [Some(self.http), Some(self.grpc), self.p2p].into_iter().flatten().collect()
    }
}

/// How one node is started.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub ports: NodePorts,
    /// The node's working directory: storage, snapshots and `qdrant.log`.
    pub dir: PathBuf,
    pub api_key: String,
    /// In a cluster, the peer-to-peer URL of the node to join through (none for the first node, and none when a
    /// node restarts on storage that already knows its peers).
    pub bootstrap: Option<String>,
}

/// Starts one node (not waiting for it), its output appended to `dir/qdrant.log`.
///
/// # Errors
/// When the directory or log cannot be created or the binary cannot be run.
pub fn spawn_node(bin: &Path, spec: &NodeSpec) -> io::Result<Child> {
    let dir = &spec.dir;
    std::fs::create_dir_all(dir).map_err(|e| annotate(e, &format!("cannot create {}", dir.display())))?;
    let log_path = dir.join("qdrant.log");
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| annotate(e, &format!("cannot open {}", log_path.display())))?;
    let log_err = log.try_clone()?;
    let mut cmd = Command::new(bin);
    cmd.current_dir(dir)
        .env("QDRANT__SERVICE__HOST", "127.0.0.1")
        .env("QDRANT__SERVICE__HTTP_PORT", spec.ports.http.to_string())
        .env("QDRANT__SERVICE__GRPC_PORT", spec.ports.grpc.to_string())
        .env("QDRANT__SERVICE__API_KEY", &spec.api_key)
        .env("QDRANT__STORAGE__STORAGE_PATH", dir.join("storage"))
        .env("QDRANT__STORAGE__SNAPSHOTS_PATH", dir.join("snapshots"))
        .env("QDRANT__TELEMETRY_DISABLED", "true")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Its own process group, so that a Ctrl-C in the terminal that started it does not reach a server meant to
        // outlive the command that started it.
        .process_group(0);
    if let Some(p2p) = spec.ports.p2p {
        cmd.env("QDRANT__CLUSTER__ENABLED", "true").env("QDRANT__CLUSTER__P2P__PORT", p2p.to_string());
        if let Some(bootstrap) = &spec.bootstrap {
            cmd.arg("--bootstrap").arg(bootstrap);
        }
        cmd.arg("--uri").arg(format!("http://127.0.0.1:{p2p}"));
    }
    cmd.spawn().map_err(|e| annotate(e, &format!("cannot start the Qdrant binary {}", bin.display())))
}

/// Waits until the node answers `/readyz` with 200 on its REST port and accepts connections on its gRPC port, or
/// fails when the process exits or `timeout` passes. Qdrant serves REST and gRPC from separate listeners, and on a
/// loaded machine `/readyz` can answer before the gRPC port (the one ragtune talks to) is bound.
///
/// # Errors
/// The process exited, or not ready within `timeout` (with the last answer seen).
pub fn wait_ready(child: &mut Child, ports: &NodePorts, timeout: Duration) -> io::Result<()> {
    let started = Instant::now();
    let http_url = ports.http_url();
    let grpc = std::net::SocketAddr::from(([127, 0, 0, 1], ports.grpc));
    loop {
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!("Qdrant exited during start-up ({status})")));
        }
        let last = match http_get(&http_url, "/readyz", None) {
            Ok((200, _)) => match std::net::TcpStream::connect_timeout(&grpc, Duration::from_secs(1)) {
                Ok(_) => return Ok(()),
                Err(error) => {
                    format!("/readyz answered 200 but the gRPC port {} refuses connections: {error}", ports.grpc)
                }
            },
            Ok((code, body)) => format!("/readyz: {code} {}", body.trim()),
            Err(error) => error.to_string(),
        };
        if started.elapsed() >= timeout {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{http_url} not ready within {}s (last: {last})", timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the node at `http_url` sees `peers` peers in the cluster's consensus.
///
/// # Errors
/// Not within `timeout` (with the last `/cluster` answer), or the node cannot be asked.
pub fn wait_peers(http_url: &str, api_key: &str, peers: usize, timeout: Duration) -> io::Result<()> {
    let started = Instant::now();
    loop {
        let (code, body) = http_get(http_url, "/cluster", Some(api_key))?;
        let seen = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["result"]["peers"].as_object().map(serde_json::Map::len));
        if code == 200 && seen == Some(peers) {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the cluster did not reach {peers} peers within {}s (last /cluster: {code} {body})",
                    timeout.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// A base port whose `nodes` nodes' ports were all free a moment ago, outside the kernel's ephemeral range.
///
/// The ports must stay free for the group's whole life: a killed node is restarted on the same ports. A port the
/// kernel hands out as the local end of outgoing connections (`ip_local_port_range`, 32768–60999 by default) can be
/// taken by any connection between a kill and the restart (the peers reconnecting, a client), and the restarted
/// node then cannot bind it. So the bases are drawn at random below that range (or above it, if there is no room
/// below), never from it.
///
/// # Errors
/// When no such range is found in 200 tries.
pub fn free_base_port(nodes: usize) -> io::Result<u16> {
    let span = u16::try_from(10 * nodes).unwrap_or(u16::MAX);
    let cluster = nodes > 1;
    let (lo, hi) = base_port_window(ephemeral_port_range(), span);
    if lo >= hi {
        return Err(io::Error::other(format!(
            "no room outside the ephemeral port range for {nodes} Qdrant node(s) on 127.0.0.1"
        )));
    }
    let mut draw = random_u64();
    for _ in 0..200 {
        let base = lo + u16::try_from(draw % u64::from(hi - lo)).unwrap_or(0);
        draw = draw.rotate_left(17).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
        let free = (0..nodes)
            .flat_map(|i| NodePorts::of(base, i, cluster).all())
            .all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return Ok(base);
        }
    }
    Err(io::Error::other(format!("cannot find free ports on 127.0.0.1 for {nodes} Qdrant node(s)")))
}

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`), or Linux's default when it
/// cannot be read.
fn ephemeral_port_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(str::parse::<u16>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .unwrap_or((32768, 60999))
}

/// The half-open window `[lo, hi)` bases are drawn from so that `base .. base + span` avoids the ephemeral range
/// `(first, last)` and the privileged and well-known ports below 10000: below the range when there is room for
/// a thousand bases there, above it otherwise.
fn base_port_window((first, last): (u16, u16), span: u16) -> (u16, u16) {
    const LOWEST: u16 = 10_000;
    let below = (LOWEST, first.saturating_sub(span));
    if below.1 >= below.0.saturating_add(1000) {
        return below;
    }
    (last.saturating_add(1).max(LOWEST), u16::MAX.saturating_sub(span))
}

/// 64 unpredictable bits: std's per-process random hash keys (advanced on every call), mixed with the time and pid.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Whether every port of these nodes can be bound now; the first one that cannot, as an error.
///
/// # Errors
/// A port in use, named.
pub fn check_ports_free(ports: &[NodePorts]) -> io::Result<()> {
    for port in ports.iter().flat_map(NodePorts::all) {
        TcpListener::bind(("127.0.0.1", port))
            .map_err(|e| annotate(e, &format!("port {port} on 127.0.0.1 is in use")))?;
    }
    Ok(())
}

/// A key no one can guess from outside this machine's user: two draws of [`random_u64`] (std's random hash keys,
/// the clock and the process id).
#[must_use]
pub fn fresh_api_key() -> String {
    format!("ragtune-{:016x}{:016x}", random_u64(), random_u64())
}

/// `GET path` on `url` (`http://HOST:PORT`) with an optional Qdrant API key: the status code and the body.
///
/// # Errors
/// As [`crate::http::request`].
pub fn http_get(url: &str, path: &str, api_key: Option<&str>) -> io::Result<(u16, String)> {
    http_request("GET", url, path, api_key, None)
}

/// `method path` on `url` with an optional Qdrant API key (`api-key` header) and JSON body.
///
/// # Errors
/// As [`crate::http::request`].
pub fn http_request(
    method: &str,
    url: &str,
    path: &str,
    api_key: Option<&str>,
    json_body: Option<&str>,
) -> io::Result<(u16, String)> {
    let headers: Vec<(&str, &str)> = api_key.map(|k| ("api-key", k)).into_iter().collect();
    crate::http::request(method, url, path, &headers, json_body).map(|r| (r.status, r.body))
}

fn annotate(error: io::Error, what: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{what}: {error}"))
}

/// The Qdrant binary of the shared test assets: `$RAGTUNE_QDRANT_BIN`, else `shared/qdrant/qdrant` beside the
/// repository (`root/../shared`).
///
/// # Errors
/// When neither is a file, naming both places.
pub fn find_binary(root: &Path) -> io::Result<PathBuf> {
    find_binary_in(std::env::var_os("RAGTUNE_QDRANT_BIN").filter(|b| !b.is_empty()).map(PathBuf::from), root)
}

/// [`find_binary`] with the value of `$RAGTUNE_QDRANT_BIN` given.
///
/// # Errors
/// As [`find_binary`].
pub fn find_binary_in(from_env: Option<PathBuf>, root: &Path) -> io::Result<PathBuf> {
    if let Some(bin) = from_env {
        if !bin.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("$RAGTUNE_QDRANT_BIN is {}, which is not a file", bin.display()),
            ));
        }
        return Ok(bin);
    }
    let shared = root.join("..").join("shared").join("qdrant").join("qdrant");
    if shared.is_file() {
        return Ok(shared.canonicalize().unwrap_or(shared));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no Qdrant server binary: $RAGTUNE_QDRANT_BIN is not set and {} does not exist", shared.display()),
    ))
}

/// A group of nodes this process started (one node, or a cluster), for tests that kill and restart them. Dropping
/// it kills every node it still runs.
#[derive(Debug)]
pub struct Nodes {
    bin: PathBuf,
    api_key: String,
    specs: Vec<NodeSpec>,
    children: Vec<Option<Child>>,
}

impl Nodes {
    /// Starts `count` nodes (a cluster when more than one) under `dir` (`dir/node-<i>`, emptied first) on free
    /// ports, each waited for, and the cluster's consensus waited for.
    ///
    /// # Errors
    /// A node that does not start or become ready (with the end of its log), or a cluster that does not form.
    pub fn start(bin: &Path, dir: &Path, count: usize) -> io::Result<Self> {
        let base = free_base_port(count)?;
        let cluster = count > 1;
        let api_key = fresh_api_key();
        let mut nodes = Self { bin: bin.to_owned(), api_key, specs: Vec::new(), children: Vec::new() };
        for i in 0..count {
            let ports = NodePorts::of(base, i, cluster);
            let node_dir = dir.join(format!("node-{i}"));
            if node_dir.exists() {
                std::fs::remove_dir_all(&node_dir)?;
            }
            let bootstrap = (cluster && i > 0).then(|| format!("http://127.0.0.1:{}", base + 2));
            nodes.specs.push(NodeSpec { ports, dir: node_dir, api_key: nodes.api_key.clone(), bootstrap });
            nodes.children.push(None);
            // A peer joins through node 0, which must be up first; the others start one after another for the same
            // reason (each registers with the consensus before the next).
            nodes.restart(i)?;
        }
        if cluster {
            wait_peers(&nodes.specs[0].ports.http_url(), &nodes.api_key, count, READY_TIMEOUT)?;
        }
        Ok(nodes)
    }

    /// The API key every node requires.
    #[must_use]
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// How many nodes the group has (running or not).
    #[must_use]
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether the group has no node.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Node `i`'s ports.
    #[must_use]
    pub fn ports(&self, i: usize) -> NodePorts {
        self.specs[i].ports
    }

    /// Node `i`'s log so far (its last `lines` lines).
    #[must_use]
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let text = std::fs::read_to_string(self.specs[i].dir.join("qdrant.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills node `i` with SIGKILL (no chance to flush or say goodbye) and reaps it.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub fn kill(&mut self, i: usize) -> io::Result<()> {
        if let Some(mut child) = self.children[i].take() {
            // `Child::kill` is SIGKILL on Unix.
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// (Re)starts node `i` on its storage and ports and waits until it is ready. A node that ran before rejoins
    /// its cluster from the peers its storage records.
    ///
    /// # Errors
    /// As [`Nodes::start`].
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i)?;
        let mut spec = self.specs[i].clone();
        if spec.dir.join("storage").exists() {
            spec.bootstrap = None;
        }
        let mut child = spawn_node(&self.bin, &spec)?;
        if let Err(error) = wait_ready(&mut child, &spec.ports, READY_TIMEOUT) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                error.kind(),
                format!("Qdrant node {i} did not become ready: {error}; the end of its log:\n{}", self.log_tail(i, 20)),
            ));
        }
        self.children[i] = Some(child);
        Ok(())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            let _ = self.kill(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ports_are_laid_out_per_node() {
        assert_eq!(NodePorts::of(7000, 2, true), NodePorts { http: 7020, grpc: 7021, p2p: Some(7022) });
        assert_eq!(NodePorts::of(7000, 0, false).p2p, None);
    }

    #[test]
    fn node_ports_leave_room_per_node() {
        let ports = |base, nodes: usize| -> Vec<u16> {
            (0..nodes).flat_map(|i| NodePorts::of(base, i, nodes > 1).all()).collect()
        };
        assert_eq!(ports(6333, 1), [6333, 6334]);
        assert_eq!(ports(6333, 3), [6333, 6334, 6335, 6343, 6344, 6345, 6353, 6354, 6355]);
    }

    #[test]
    fn base_ports_avoid_the_ephemeral_range() {
        // The default Linux range: bases below it, the whole group too.
        assert_eq!(base_port_window((32768, 60999), 30), (10_000, 32738));
        // No room below: above it.
        assert_eq!(base_port_window((10_500, 60999), 30), (61000, 65505));
        let base = free_base_port(3).unwrap();
        let (first, last) = ephemeral_port_range();
        for port in (0..3).flat_map(|i| NodePorts::of(base, i, true).all()) {
            assert!(!(first..=last).contains(&port), "port {port} is in the ephemeral range {first}-{last}");
            assert!(port >= 10_000, "{port}");
        }
    }

    #[test]
    fn api_keys_differ() {
        let (a, b) = (fresh_api_key(), fresh_api_key());
        assert_ne!(a, b);
        assert!(a.starts_with("ragtune-") && a.len() == 40, "{a}");
    }

    #[test]
    fn a_missing_binary_is_named() {
        let err = find_binary_in(None, Path::new("/nonexistent/repo")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("/nonexistent/repo/../shared/qdrant/qdrant"), "{err}");
    }
}
