//! `cargo xtask websearch start --corpus DIR [--port N] | stop | status`: a real search engine on 127.0.0.1 for
//! the web layer, offline: a ragtune index of `DIR` served by `ragtune serve`, whose `/searxng/search` endpoint
//! speaks SearXNG's JSON API (`?q=…&format=json`). Corrective RAG's web search then runs end to end against real
//! BM25/dense search over real documents, with nothing leaving the machine.
//!
//! ```text
//! $RAGTUNE_HOME/websearch/server.json        {"url", "searxng_url", "pid", "corpus", "store", "started_at"}
//! $RAGTUNE_HOME/websearch/<hash>/store        the index of the corpus (rebuilt when the corpus path changes)
//! $RAGTUNE_HOME/websearch/serve.log           the server's output
//! ```
//!
//! `start` prints the `[web]` section that points ragtune at it; `cargo xtask eval qa --web-split` uses it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ragtune_testkit::qdrant::{free_port, http_get};
use serde_json::json;

use crate::process::{self, Identity, RecordFile, Waited};
use crate::shell::{self, Shell};

const USAGE: &str = "\
usage: cargo xtask websearch start --corpus DIR [--port N]   (index DIR once, serve it as a SearXNG-compatible endpoint)
       cargo xtask websearch stop
       cargo xtask websearch status";

/// How long `start` waits for the server to answer `/healthz`.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How the server's process is recognised by its command line, so that a recycled pid is never signalled.
const SERVER: Identity<'static> = Identity::Program("ragtune");

/// The files under `$RAGTUNE_HOME/websearch`.
fn home() -> PathBuf {
    ragtune_provision::ragtune_home().join("websearch")
}

/// `server.json`: the recorded server.
fn record_file() -> RecordFile<Recorded> {
    RecordFile::new(home().join("server.json"))
}

pub fn run(args: &[String]) -> Result<()> {
    let Some((command, flags)) = args.split_first() else { bail!("{USAGE}") };
    match command.as_str() {
        "start" => {
            let (mut corpus, mut port) = (None, None);
            let mut it = flags.iter();
            while let Some(flag) = it.next() {
                let value = it.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
                match flag.as_str() {
                    "--corpus" => corpus = Some(PathBuf::from(value)),
                    "--port" => port = Some(value.parse::<u16>().with_context(|| format!("--port: `{value}`"))?),
                    other => bail!("unknown argument `{other}`\n{USAGE}"),
                }
            }
            let corpus = corpus.with_context(|| format!("--corpus DIR is required\n{USAGE}"))?;
            let server = start(&Shell::new(), &corpus, port)?;
            println!("websearch: add this to a ragtune config to search it as the web:\n{}", web_toml(&server));
            Ok(())
        }
        "stop" if flags.is_empty() => stop(),
        "status" if flags.is_empty() => {
            match record_file().read()? {
                Some(r) => println!(
                    "websearch: {} (pid {}, {}), corpus {}",
                    r.server.searxng_url,
                    r.server.pid,
                    if process::is_running_as(r.server.pid, SERVER) { "running" } else { "exited" },
                    r.corpus.display()
                ),
                None => println!("websearch: not running"),
            }
            Ok(())
        }
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// A running search endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The SearXNG base URL: `{url}/searxng`.
    pub searxng_url: String,
    pub pid: u32,
}

/// What `server.json` records.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    server: Server,
    /// The indexed directory.
    corpus: PathBuf,
    /// Its index.
    store: PathBuf,
    /// Unix seconds.
    started_at: u64,
}

impl process::Record for Recorded {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "url": self.server.url,
            "searxng_url": self.server.searxng_url,
            "pid": self.server.pid,
            "corpus": self.corpus.display().to_string(),
            "store": self.store.display().to_string(),
            "started_at": self.started_at,
        })
    }

    fn from_json(value: &serde_json::Value) -> Result<Self> {
        Ok(Self {
            server: Server {
                url: process::string_field(value, "url")?,
                searxng_url: process::string_field(value, "searxng_url")?,
                pid: process::pid_field(value)?,
            },
            corpus: PathBuf::from(process::string_field(value, "corpus")?),
            store: PathBuf::from(process::string_field(value, "store")?),
            started_at: process::number_field(value, "started_at")?,
        })
    }
}

/// The `[web]` section of a ragtune configuration that searches `server` with the SearXNG provider.
pub fn web_toml(server: &Server) -> String {
    format!(
        "[web]\nenabled = true\n[web.providers.searxng]\nbase_url = \"{}\"\n# Loopback: the local search endpoint, \
         not the internet.\n",
        server.searxng_url
    )
}

/// Indexes `corpus` (once per corpus path) with the release `ragtune` binary and serves it on 127.0.0.1,
/// replacing a recorded server. Waits until `/healthz` answers.
pub fn start(sh: &Shell, corpus: &Path, port: Option<u16>) -> Result<Server> {
    let corpus = corpus.canonicalize().with_context(|| format!("no corpus at {}", corpus.display()))?;
    if record_file().read()?.is_some() {
        println!("websearch: replacing the recorded server");
        stop()?;
    }
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "ragtune-cli"]))?;
    let binary = sh.target_dir().join("release").join(format!("ragtune{}", std::env::consts::EXE_SUFFIX));
    let key = format!("{:016x}", fingerprint(&corpus.display().to_string()));
    let dir = home().join(&key);
    let store = dir.join("store");
    let marker = dir.join("COMPLETE");
    if marker.is_file() {
        println!("websearch: using the index {} of {}", store.display(), corpus.display());
    } else {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        println!("websearch: indexing {} into {}", corpus.display(), store.display());
        shell::run(sh.cmd(&binary).arg("index").arg(&corpus).arg("--store").arg(&store))?;
        std::fs::write(&marker, corpus.display().to_string())
            .with_context(|| format!("cannot write {}", marker.display()))?;
    }
    let port = match port {
        Some(p) => p,
        None => free_port()?,
    };
    let url = format!("http://127.0.0.1:{port}");
    let log_path = home().join("serve.log");
    let mut cmd = Command::new(&binary);
    cmd.arg("serve").arg("--store").arg(&store).arg("--bind").arg(format!("127.0.0.1:{port}"));
    let mut child = process::spawn_logged(&mut cmd, &log_path)?;
    let ready = || if matches!(http_get(&url, "/healthz", None), Ok((200, _))) { Ok(()) } else { Err(()) };
    match process::wait_ready(&mut child, READY_TIMEOUT, Duration::from_millis(200), ready, |_, ()| {})? {
        Waited::Ready => {}
        Waited::Exited(status) => {
            bail!("`ragtune serve` exited during start-up ({status}):\n{}", process::log_tail(&log_path, 20))
        }
        Waited::TimedOut(()) => {
            let _ = process::terminate_child("websearch", &mut child);
            bail!("`ragtune serve` did not answer {url}/healthz within {}s", READY_TIMEOUT.as_secs());
        }
    }
    let server = Server { searxng_url: format!("{url}/searxng"), url, pid: child.id() };
    record_file().write(&Recorded {
        server: server.clone(),
        corpus: corpus.clone(),
        store,
        started_at: process::unix_now(),
    })?;
    println!(
        "websearch: {} serves {} (pid {}, log {})",
        server.searxng_url,
        corpus.display(),
        server.pid,
        log_path.display()
    );
    // The server outlives this command; `cargo xtask websearch stop` ends it.
    drop(child);
    Ok(server)
}

/// Stops the recorded server, if any, and removes its record.
pub fn stop() -> Result<()> {
    let file = record_file();
    let Some(recorded) = file.read()? else {
        println!("websearch: nothing to stop");
        return Ok(());
    };
    let pid = recorded.server.pid;
    if process::stop_recorded("websearch", pid, SERVER)? {
        println!("websearch: stopped pid {pid}");
    }
    file.remove_if(|r| r.server.pid == pid);
    Ok(())
}

/// A stable 64-bit FNV-1a hash (the index directory's name).
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_web_section_points_at_the_searxng_path_and_parses_as_toml() {
        let server =
            Server { url: "http://127.0.0.1:9".into(), searxng_url: "http://127.0.0.1:9/searxng".into(), pid: 1 };
        let text = web_toml(&server);
        let value: toml::Value = toml::from_str(&text).expect("valid TOML");
        assert_eq!(value["web"]["enabled"].as_bool(), Some(true));
        assert_eq!(value["web"]["providers"]["searxng"]["base_url"].as_str(), Some("http://127.0.0.1:9/searxng"));
        assert_ne!(fingerprint("/a"), fingerprint("/b"));
        assert_eq!(fingerprint("/a"), fingerprint("/a"));
    }

    #[test]
    fn the_record_round_trips() {
        let recorded = Recorded {
            server: Server {
                url: "http://127.0.0.1:9".into(),
                searxng_url: "http://127.0.0.1:9/searxng".into(),
                pid: 4242,
            },
            corpus: "/data/corpus".into(),
            store: "/home/u/.cache/ragtune/websearch/0123456789abcdef/store".into(),
            started_at: 1_700_000_000,
        };
        let text = process::render_record(&recorded);
        assert_eq!(process::parse_record::<Recorded>(&text).unwrap(), recorded);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["corpus", "pid", "searxng_url", "started_at", "store", "url"]);
    }

    #[test]
    fn usage_errors_name_what_is_wrong() {
        let err = run(&["start".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("--corpus DIR is required"), "{err:#}");
        let err = run(&["start".into(), "--bogus".into(), "x".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("unknown argument `--bogus`"), "{err:#}");
        assert!(run(&["restart".into()]).is_err());
    }
}
