//! `ragtune serve` as a process, under faults (issue 42): killed with SIGKILL while large `PUT /v1/documents`
//! batches are in flight, and started with an API key that is no key.
//!
//! After each restart, every acknowledged batch must be present whole and every other batch absent whole: a batch
//! is one transaction, never `0 < n < batch` documents.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ragtune_testkit::http::request;
use serde_json::{Value, json};

/// Documents per batch, each about two passages long: a batch is several hundred chunks, more than the 256 the
/// indexer used to commit at a time.
const DOCS: usize = 300;

fn serve(store: &Path, home: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ragtune"))
        .args(["serve", "--bind", "127.0.0.1:0", "--store"])
        .arg(store)
        .env_remove("RAGTUNE_CONFIG")
        .env_remove("RAGTUNE_STORE")
        .env_remove("RAGTUNE_LLM_URL")
        .env("RAGTUNE_HOME", home)
        .env("RAGTUNE__EMBEDDING__MODE", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ragtune serve starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "the ready line: {line:?}");
    (child, url)
}

fn batch(b: usize) -> String {
    let docs: Vec<Value> = (0..DOCS)
        .map(|i| {
            let words = "words that make this document long enough for two passages or more ".repeat(30);
            json!({"id": format!("b{b}-d{i}"), "text": format!("batchmark{b} doc{i} {words} end of batchmark{b}")})
        })
        .collect();
    json!({ "documents": docs }).to_string()
}

/// How many documents of batch `b` the store holds.
fn count(url: &str, b: usize) -> usize {
    let q = json!({"query": format!("batchmark{b}"), "top_k": 1000, "strategy": "bm25"}).to_string();
    let r = request("POST", url, "/v1/search", &[], Some(&q)).expect("search answers");
    assert_eq!(r.status, 200, "{}", r.body);
    let hits = r.json()["hits"].as_array().cloned().unwrap_or_default();
    let docs: std::collections::BTreeSet<String> =
        hits.iter().filter_map(|h| h["chunk"]["doc_id"].as_str().map(str::to_owned)).collect();
    docs.len()
}

#[test]
fn kill_9_during_large_batches_leaves_each_batch_whole_or_absent() {
    let dir = tempfile::tempdir().unwrap();
    let (store, home) = (dir.path().join("store"), dir.path().join("home"));
    let mut acked = Vec::new();
    let mut sent = 0usize;
    for round in 0..4u32 {
        let (mut child, url) = serve(&store, &home);
        // Two batches acknowledged (timed), then one in flight when the process is killed.
        let mut took = Duration::ZERO;
        for _ in 0..2 {
            let started = std::time::Instant::now();
            let r = request("PUT", &url, "/v1/documents", &[], Some(&batch(sent))).expect("PUT answers");
            took = started.elapsed();
            assert_eq!(r.status, 200, "{}", r.body);
            acked.push(sent);
            sent += 1;
        }
        let (in_flight, body) = (sent, batch(sent));
        sent += 1;
        let put_url = url.clone();
        let writer = std::thread::spawn(move || request("PUT", &put_url, "/v1/documents", &[], Some(&body)));
        // Kill at different points of the write (a fifth, two fifths, … of a batch's time): while the server
        // reads, chunks, encodes or commits it.
        std::thread::sleep(took.mul_f64(f64::from(round + 1) / 5.0));
        child.kill().unwrap();
        child.wait().unwrap();
        if let Ok(Ok(r)) = writer.join()
            && r.status == 200
        {
            acked.push(in_flight);
        }
    }
    let (mut child, url) = serve(&store, &home);
    let mut whole_absent = 0;
    for b in 0..sent {
        let n = count(&url, b);
        if acked.contains(&b) {
            assert_eq!(n, DOCS, "acknowledged batch {b} is whole");
        } else {
            assert!(n == 0 || n == DOCS, "batch {b} is whole or absent, not {n} of {DOCS}");
            whole_absent += usize::from(n == 0);
        }
    }
    eprintln!("{} batches sent, {} acknowledged, {whole_absent} killed before commit", sent, acked.len());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn serve_refuses_an_empty_or_short_api_key() {
    let dir = tempfile::tempdir().unwrap();
    for key in ["", "short"] {
        let out = Command::new(env!("CARGO_BIN_EXE_ragtune"))
            .args(["serve", "--bind", "0.0.0.0:0", "--store"])
            .arg(dir.path().join("store"))
            .env_remove("RAGTUNE_CONFIG")
            .env("RAGTUNE_HOME", dir.path().join("home"))
            .env("RAGTUNE__EMBEDDING__MODE", "off")
            .env("RAGTUNE__SERVER__API_KEY", key)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{key:?}: it must not start");
        assert!(stderr.contains("api_key") && stderr.contains("at least 16"), "{key:?}: {stderr}");
    }
}
