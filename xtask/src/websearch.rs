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
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use ragtune_testkit::qdrant::{free_port, http_get};
use serde_json::json;

use crate::llm::{is_alive, tail, terminate, write_atomic};
use crate::shell::{self, Shell};

const USAGE: &str = "\
usage: cargo xtask websearch start --corpus DIR [--port N]   (index DIR once, serve it as a SearXNG-compatible endpoint)
       cargo xtask websearch stop
       cargo xtask websearch status";

/// How long `start` waits for the server to answer `/healthz`.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The files under `$RAGTUNE_HOME/websearch`.
fn home() -> PathBuf {
    ragtune_provision::ragtune_home().join("websearch")
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
            match read_record()? {
                Some(r) => println!(
                    "websearch: {} (pid {}, {}), corpus {}",
                    r["searxng_url"].as_str().unwrap_or_default(),
                    r["pid"],
                    if r["pid"].as_u64().is_some_and(|p| is_alive(u32::try_from(p).unwrap_or(0))) {
                        "running"
                    } else {
                        "exited"
                    },
                    r["corpus"].as_str().unwrap_or_default()
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
#[derive(Debug, Clone)]
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The SearXNG base URL: `{url}/searxng`.
    pub searxng_url: String,
    pub pid: u32,
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
    if read_record()?.is_some() {
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
        std::fs::create_dir_all(&dir)?;
        println!("websearch: indexing {} into {}", corpus.display(), store.display());
        shell::run(sh.cmd(&binary).arg("index").arg(&corpus).arg("--store").arg(&store))?;
        std::fs::write(&marker, corpus.display().to_string())?;
    }
    let port = match port {
        Some(p) => p,
        None => free_port()?,
    };
    let url = format!("http://127.0.0.1:{port}");
    let log_path = home().join("serve.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new(&binary)
        .arg("serve")
        .arg("--store")
        .arg(&store)
        .arg("--bind")
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {} serve", binary.display()))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("`ragtune serve` exited during start-up ({status}):\n{}", tail(&text, 20));
        }
        if matches!(http_get(&url, "/healthz", None), Ok((200, _))) {
            break;
        }
        if started.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            bail!("`ragtune serve` did not answer {url}/healthz within {}s", READY_TIMEOUT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let server = Server { searxng_url: format!("{url}/searxng"), url, pid: child.id() };
    let record = json!({
        "url": server.url,
        "searxng_url": server.searxng_url,
        "pid": server.pid,
        "corpus": corpus.display().to_string(),
        "store": store.display().to_string(),
        "started_at": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    });
    write_atomic(&home().join("server.json"), format!("{record:#}\n").as_bytes())?;
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

/// Stops the recorded server, if any.
pub fn stop() -> Result<()> {
    let Some(record) = read_record()? else {
        println!("websearch: nothing to stop");
        return Ok(());
    };
    let pid = record["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).context("the record has no pid")?;
    if is_alive(pid) {
        terminate("websearch", pid, Duration::from_secs(10), &mut || !is_alive(pid))?;
        println!("websearch: stopped pid {pid}");
    }
    let _ = std::fs::remove_file(home().join("server.json"));
    Ok(())
}

fn read_record() -> Result<Option<serde_json::Value>> {
    let path = home().join("server.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
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
    fn usage_errors_name_what_is_wrong() {
        let err = run(&["start".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("--corpus DIR is required"), "{err:#}");
        let err = run(&["start".into(), "--bogus".into(), "x".into()]).unwrap_err();
        assert!(format!("{err:#}").contains("unknown argument `--bogus`"), "{err:#}");
        assert!(run(&["restart".into()]).is_err());
    }
}
