//! `cargo xtask bench server [--seconds N] [--soak N] [--store DIR]`: `ragtune serve` under load on loopback, SciFact indexed,
//! without an LLM, measured by `oha` (a real HTTP load generator, installed from crates.io when missing; every run
//! bounded in time and stopping by itself).
//!
//! For `POST /v1/search` and `POST /v1/query`: throughput, p50 and p99 and the status codes at concurrency 1, 8 and
//! 32 and at saturation (64 connections against `max_concurrency` 16: the designed 503s); a stream of `PUT`s during
//! the concurrency-8 search run, every acknowledged document searched for afterwards; `/metrics` checked against
//! the questions served; resident memory before and after, and after a soak of `--soak` seconds (0: none).
//! `--store DIR` serves a copy of an existing SciFact index (the evaluation cache's) instead of indexing anew.
//!
//! `--hostile` measures healthy clients instead while attackers hold the server (issue 42): `oha` on `/v1/search`
//! at 2 connections, alone and then beside 400 slowloris connections (headers sent a line every second, never
//! finished; each reconnects when the server closes it) and 64 trickle uploads (a body announced as 1 MiB, sent a
//! byte every 100 ms), more than the 16 request slots. It prints both p50/p99 and their ratio, and fails when the
//! healthy p99 under attack is above twice the unloaded p99 or a healthy request got anything but 200.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ragtune_testkit::http::request;

use crate::process::{Guard, Spawned};
use crate::shell::{self, Shell};

pub fn run(args: &[String]) -> Result<()> {
    let (mut seconds, mut soak, mut from) = (10_u64, 0_u64, None::<std::path::PathBuf>);
    let hostile = args.iter().any(|a| a == "--hostile");
    let mut it = args.iter().filter(|a| *a != "--hostile");
    while let Some(a) = it.next() {
        let v = it.next().with_context(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--seconds" => seconds = v.parse().context("--seconds")?,
            "--soak" => soak = v.parse().context("--soak")?,
            "--store" => from = Some(v.into()),
            other => bail!("unknown argument {other} (use --seconds N, --soak N, --store DIR, --hostile)"),
        }
    }
    let sh = Shell::new();
    let dataset = sh.root().join("../shared/data/beir/scifact");
    if !dataset.join("corpus.jsonl").is_file() {
        bail!("the server benchmark serves SciFact: {} is missing", dataset.display());
    }
    if shell::probe(sh.cmd("oha").arg("--version")).is_none() {
        println!("bench server: installing oha from crates.io");
        shell::run(sh.cmd("cargo").args(["install", "oha", "--locked", "-j2"]))?;
    }
    shell::run(&mut sh.cargo(&["build", "--release", "--quiet", "-j2", "-p", "ragtune-cli"]))?;
    let binary = sh.target_dir().join("release").join("ragtune");
    let work = sh.target_dir().join("bench-server");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    // The index: `ragtune index` of the SciFact corpus (BM25 and dense), once per run.
    let store = work.join("store");
    if let Some(from) = from {
        // An index of SciFact built before (e.g. the evaluation cache's), copied so the original stays untouched.
        std::fs::create_dir_all(&store)?;
        for entry in std::fs::read_dir(&from).with_context(|| format!("no store at {}", from.display()))? {
            let entry = entry?;
            std::fs::copy(entry.path(), store.join(entry.file_name()))?;
        }
        println!("bench server: serving a copy of {}", from.display());
    } else {
        let started = Instant::now();
        let mut index = sh.cmd(&binary);
        index.arg("index").arg(dataset.join("corpus.jsonl")).arg("--store").arg(&store);
        if hostile {
            // The attack is on connections, not on retrieval: BM25 only, indexed in seconds.
            index.env("RAGTUNE__EMBEDDING__MODE", "off");
        }
        shell::run(&mut index)?;
        println!("bench server: indexed SciFact in {:.1} s", started.elapsed().as_secs_f64());
    }
    let (server, url) = serve(&binary, &store, &work, hostile)?;
    let pid = server.get().map_or(0, |server| server.child.id());
    let outcome = if hostile { under_attack(&url, seconds) } else { measure(&url, pid, seconds, soak) };
    // Stopping it is the guard's (a failure is a warning: the outcome is what this command reports).
    drop(server);
    outcome
}

/// `ragtune serve` of `store` on a free loopback port, stopped when the guard drops, and its URL (from the line it
/// prints first).
fn serve(binary: &Path, store: &Path, work: &Path, lexical: bool) -> Result<(Guard<Spawned>, String)> {
    use std::io::BufRead;
    let config = work.join("server.toml");
    std::fs::write(&config, "[server]\nmax_concurrency = 16\n[llm]\nurl = \"\"\n")
        .with_context(|| format!("cannot write {}", config.display()))?;
    let mut child = Command::new(binary)
        .args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--store")
        .arg(store)
        .env_remove("RAGTUNE_LLM_URL")
        .env("RAGTUNE__EMBEDDING__MODE", if lexical { "off" } else { "auto" })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start ragtune serve")?;
    let stdout = child.stdout.take();
    let server = Guard::new(Spawned { who: "bench server", child }, "ragtune serve");
    let mut line = String::new();
    std::io::BufReader::new(stdout.context("no stdout")?)
        .read_line(&mut line)
        .context("cannot read the first line of ragtune serve")?;
    let url = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    if !url.starts_with("http://") {
        bail!("ragtune serve did not say where it listens: {line:?}");
    }
    Ok((server, url))
}

/// Resident memory of `pid` in MiB (`VmRSS`).
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "?".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// What one oha run measured: requests/s, p50 and p99 in ms, and the count of each status code.
type Measured = (f64, f64, f64, Vec<(String, u64)>);

/// One bounded oha run.
fn oha(url: &str, path: &str, body: &str, connections: usize, seconds: u64) -> Result<Measured> {
    let out = Command::new("oha")
        .args(["--no-tui", "--output-format", "json", "-z"])
        .arg(format!("{seconds}s"))
        .args(["-c", &connections.to_string(), "-m", "POST", "-H", "content-type: application/json", "-d", body])
        .arg(format!("{url}{path}"))
        .output()
        .context("cannot run oha")?;
    if !out.status.success() {
        bail!("oha failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("oha's JSON")?;
    let rps = v["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0);
    let pct = |p: &str| v["latencyPercentiles"][p].as_f64().unwrap_or(0.0) * 1e3;
    let mut codes: Vec<(String, u64)> = v["statusCodeDistribution"]
        .as_object()
        .map(|m| m.iter().map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    codes.sort();
    if let Some(errors) = v["errorDistribution"].as_object().filter(|m| !m.is_empty()) {
        for (k, n) in errors {
            codes.push((format!("error: {k}"), n.as_u64().unwrap_or(0)));
        }
    }
    Ok((rps, pct("p50"), pct("p99"), codes))
}

fn measure(url: &str, pid: u32, seconds: u64, soak: u64) -> Result<()> {
    let rss_start = rss_mib(pid);
    println!("bench server: {url}, pid {pid}, RSS {rss_start:.0} MiB at start (load {})", load());
    let search = r#"{"query": "vitamin D deficiency and bone density in older adults", "top_k": 10}"#;
    let query = r#"{"question": "Does vitamin D supplementation reduce fractures in older adults?"}"#;
    println!("{:<10} {:>5} {:>9} {:>9} {:>9}  statuses (load average)", "route", "conns", "req/s", "p50 ms", "p99 ms");
    let mut served_questions = 0_u64;
    let mut writes = None;
    for (path, body) in [("/v1/search", search), ("/v1/query", query)] {
        for connections in [1, 8, 32, 64] {
            let during_writes = path == "/v1/search" && connections == 8;
            let writer = during_writes.then(|| spawn_writer(url));
            let (rps, p50, p99, codes) = oha(url, path, body, connections, seconds)?;
            if let Some((stop, handle)) = writer {
                stop.store(true, Ordering::Release);
                writes = Some(handle.join().map_err(|_| anyhow::anyhow!("the writer panicked"))?);
            }
            if path == "/v1/query" {
                served_questions += codes.iter().filter(|(c, _)| c == "200").map(|(_, n)| n).sum::<u64>();
            }
            // oha cancels the requests in flight when its time is up ("aborted due to deadline"): its own doing.
            let designed = |c: &str| c == "200" || c == "503" || c == "error: aborted due to deadline";
            let unexpected: u64 = codes.iter().filter(|(c, _)| !designed(c)).map(|(_, n)| n).sum();
            let label = if connections == 64 { "64 (sat.)".to_owned() } else { connections.to_string() };
            println!(
                "{path:<10} {label:>9} {rps:>9.1} {p50:>9.2} {p99:>9.2}  {codes:?}{} ({})",
                if during_writes { " + PUTs" } else { "" },
                load()
            );
            if unexpected > 0 {
                bail!("{unexpected} responses other than 200 and the designed 503s on {path} at {connections}");
            }
        }
    }
    if let Some(acked) = writes {
        let mut missing = 0;
        for b in &acked {
            let q = format!(r#"{{"query": "benchwrite{b}", "top_k": 1, "strategy": "bm25"}}"#);
            let r = request("POST", url, "/v1/search", &[], Some(&q))?.json();
            if r["hits"][0]["chunk"]["doc_id"] != format!("bench-write-{b}") {
                missing += 1;
            }
        }
        println!(
            "bench server: {} documents PUT during the load, acknowledged and searchable: {} missing",
            acked.len(),
            missing
        );
        if missing > 0 {
            bail!("{missing} acknowledged documents are not searchable");
        }
    }
    let metrics = request("GET", url, "/metrics", &[], None)?.body;
    let decisions: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("crag_decisions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    println!(
        "bench server: /metrics counts {decisions} CRAG decisions; the query runs answered {served_questions} questions"
    );
    if (decisions - served_questions as f64).abs() > 0.5 {
        bail!("the decision count ({decisions}) differs from the questions served ({served_questions})");
    }
    let rss_after = rss_mib(pid);
    println!("bench server: RSS {rss_start:.0} MiB at start, {rss_after:.0} MiB after the runs");
    if soak > 0 {
        println!("bench server: soak of {soak} s at 8 connections on /v1/search");
        let (rps, p50, p99, codes) = oha(url, "/v1/search", search, 8, soak)?;
        println!(
            "soak: {rps:.1} req/s, p50 {p50:.2} ms, p99 {p99:.2} ms, {codes:?}; RSS {:.0} MiB after (load {})",
            rss_mib(pid),
            load()
        );
    }
    Ok(())
}

/// Healthy clients' latency alone and beside slowloris and trickle-upload attackers (see the module docs).
fn under_attack(url: &str, seconds: u64) -> Result<()> {
    let search =
        r#"{"query": "vitamin D deficiency and bone density in older adults", "top_k": 10, "strategy": "bm25"}"#;
    let addr = url.trim_start_matches("http://").to_owned();
    let report = |what: &str, m: &Measured| {
        println!("{what:<34} {:>9.1} {:>9.2} {:>9.2}  {:?} (load {})", m.0, m.1, m.2, m.3, load());
    };
    println!("{:<34} {:>9} {:>9} {:>9}  statuses", "healthy clients (oha, 2 conns)", "req/s", "p50 ms", "p99 ms");
    let alone = oha(url, "/v1/search", search, 2, seconds)?;
    report("alone", &alone);
    let stop = Arc::new(AtomicBool::new(false));
    let mut attackers = Vec::new();
    for i in 0..464 {
        let (stop, addr) = (Arc::clone(&stop), addr.clone());
        let slowloris = i < 400;
        attackers.push(std::thread::spawn(move || attack(&addr, slowloris, &stop)));
    }
    // Let every attacker connect and start holding its connection.
    std::thread::sleep(Duration::from_secs(3));
    let attacked = oha(url, "/v1/search", search, 2, seconds);
    stop.store(true, Ordering::Release);
    let mut closed = 0_u64;
    for a in attackers {
        closed += a.join().unwrap_or(0);
    }
    let attacked = attacked?;
    report("beside 400 slowloris + 64 trickles", &attacked);
    let ratio = attacked.2 / alone.2.max(1e-9);
    println!("p99 under attack / p99 alone: {ratio:.2}; the server closed attacker connections {closed} times");
    let bad: u64 =
        attacked.3.iter().filter(|(c, _)| c != "200" && c != "error: aborted due to deadline").map(|(_, n)| n).sum();
    if bad > 0 {
        bail!("{bad} healthy requests got something other than 200 under attack: {:?}", attacked.3);
    }
    if ratio > 2.0 {
        bail!("healthy p99 under attack is {ratio:.2}x the unloaded p99 (goal: at most 2x)");
    }
    Ok(())
}

/// One attacker until `stop`: a slowloris (headers a line a second, never finished) or a trickle upload (a body
/// of 1 MiB announced, a byte every 100 ms); reconnects whenever the server closes the connection. How many times
/// the server closed it.
fn attack(addr: &str, slowloris: bool, stop: &AtomicBool) -> u64 {
    use std::io::Write;
    let mut closed = 0;
    while !stop.load(Ordering::Acquire) {
        let Ok(mut c) = std::net::TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let head = if slowloris {
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n")
        } else {
            format!(
                "POST /v1/search HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
            )
        };
        if c.write_all(head.as_bytes()).is_err() {
            closed += 1;
            continue;
        }
        let (pause, piece): (u64, &[u8]) = if slowloris { (1000, b"X-a: b\r\n") } else { (100, b" ") };
        loop {
            if stop.load(Ordering::Acquire) {
                return closed;
            }
            std::thread::sleep(Duration::from_millis(pause));
            if c.write_all(piece).is_err() {
                closed += 1;
                break;
            }
        }
    }
    closed
}

/// Streams PUTs of one document each until stopped; the batches acknowledged.
fn spawn_writer(url: &str) -> (Arc<AtomicBool>, std::thread::JoinHandle<Vec<u64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, url) = (Arc::clone(&stop), url.to_owned());
    let handle = std::thread::spawn(move || {
        let mut acked = Vec::new();
        let mut b = 0_u64;
        while !flag.load(Ordering::Acquire) {
            let body = format!(
                r#"{{"documents": [{{"id": "bench-write-{b}", "text": "benchwrite{b} a document written under load"}}]}}"#
            );
            if request("PUT", &url, "/v1/documents", &[], Some(&body)).is_ok_and(|r| r.status == 200) {
                acked.push(b);
            }
            b += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        acked
    });
    (stop, handle)
}
