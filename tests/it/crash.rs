//! The embedded store survives `kill -9` at any moment: a writer process is killed many times at random points
//! and the store is reopened and checked after every kill.
//!
//! What is checked after each kill (see `tests::crash` for the workload):
//! - the store opens (recovered by redb to its last commit) — a refusal would have to be a clear `Corrupt` error,
//!   and counts as a failure here because nothing in the workload should need one;
//! - every document holds exactly the chunks of one version (no torn batch), and the counts of `stats` agree;
//! - every batch the writer acknowledged before the kill is there (or was superseded by a later one);
//! - every stored chunk is found first by a sparse search for its own term and by a dense search for its vector;
//! - while a writer holds the store, a second open gets a clear `Locked` error.
//!
//! `RAGTUNE_CRASH_KILLS` (default 60) and `RAGTUNE_CRASH_SEED` change the number of kills and their timing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ragtune::core::{Ctx, ErrorKind, SearchRequest, SparseVector, VectorQuery, VectorStore};
use ragtune::store::EmbeddedStore;
use tests::crash;

const WRITER: &str = env!("CARGO_BIN_EXE_crash_writer");

/// A running writer, the last round it acknowledged (-1: none yet), and the thread reading its output.
struct Writer {
    child: Child,
    acked: Arc<AtomicI64>,
    ready: std::sync::mpsc::Receiver<()>,
    reader: JoinHandle<()>,
}

fn spawn_writer(dir: &Path, first_round: u64) -> Writer {
    let mut child = Command::new(WRITER)
        .arg(dir)
        .arg(first_round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the crash writer starts");
    let stdout = child.stdout.take().expect("invariant: stdout is piped");
    let acked = Arc::new(AtomicI64::new(-1));
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let acked_in = Arc::clone(&acked);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line == "ready" {
                let _ = ready_tx.send(());
            } else if let Some(r) = line.strip_prefix("committed ") {
                acked_in.store(r.parse().expect("the writer prints round numbers"), Ordering::SeqCst);
            }
        }
    });
    Writer { child, acked, ready, reader }
}

/// What one check of a reopened store found.
#[derive(Debug, Default)]
struct Found {
    documents: u64,
    chunks: u64,
    /// The version each present document holds.
    versions: BTreeMap<u64, u64>,
}

/// Reopens the store and checks everything the module doc lists; `Err` says what is wrong.
async fn check_store(dir: &Path, acked: Option<u64>) -> Result<Found, String> {
    let store = EmbeddedStore::open(dir).map_err(|e| format!("the store does not open: {e} ({:?})", e.kind()))?;
    let ctx = Ctx::new();
    let stats = store.stats(&ctx).await.map_err(|e| format!("stats failed: {e}"))?;
    let ids: Vec<String> =
        (0..crash::DOCS).flat_map(|d| (0..crash::MAX_CHUNKS).map(move |j| crash::chunk_id(d, j))).collect();
    let got = store.get(&ctx, &ids).await.map_err(|e| format!("get failed: {e}"))?;

    let mut found = Found::default();
    let mut present: Vec<(u64, u64)> = Vec::new();
    for d in 0..crash::DOCS {
        let mut versions = BTreeSet::new();
        let mut js = Vec::new();
        for j in 0..crash::MAX_CHUNKS {
            let Some(chunk) = &got[usize::try_from(d * crash::MAX_CHUNKS + j).expect("small")] else { continue };
            let v = chunk
                .metadata
                .get("version")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("chunk {} has no version", chunk.id))?;
            let want_text = format!("chunk {j} of {} v{v}", crash::doc_id(d));
            if chunk.doc_id != crash::doc_id(d) || chunk.text != want_text {
                return Err(format!("chunk {} reads back wrong: doc {} text {:?}", chunk.id, chunk.doc_id, chunk.text));
            }
            versions.insert(v);
            js.push(j);
        }
        if js.is_empty() {
            continue;
        }
        if versions.len() != 1 {
            return Err(format!("torn write: {} holds chunks of versions {versions:?}", crash::doc_id(d)));
        }
        let v = *versions.first().expect("invariant: one version");
        let n = crash::chunk_count(d, v);
        if js != (0..n).collect::<Vec<_>>() {
            return Err(format!("torn write: {} v{v} should have chunks 0..{n}, has {js:?}", crash::doc_id(d)));
        }
        found.documents += 1;
        found.chunks += n;
        found.versions.insert(d, v);
        present.extend(js.iter().map(|&j| (d, j)));
    }
    if (stats.chunks, stats.documents, stats.dense_vectors, stats.sparse_vectors)
        != (found.chunks, found.documents, found.chunks, found.chunks)
    {
        return Err(format!(
            "counts disagree: stats say {} chunks / {} documents / {} dense / {} sparse, the records are {} chunks of {} documents",
            stats.chunks, stats.documents, stats.dense_vectors, stats.sparse_vectors, found.chunks, found.documents
        ));
    }

    // Every acknowledged batch is there, or was superseded by a later round that rewrote or deleted the document.
    if let Some(round) = acked {
        for (i, d) in crash::batch_docs(round).into_iter().enumerate() {
            let deleted_only = round % 7 == 0 && i == 0;
            match found.versions.get(&d) {
                Some(&v) if v >= round && !(deleted_only && v == round) => {}
                None if deleted_only || rewritten_later(d, round) => {}
                other => {
                    return Err(format!("acknowledged round {round} is lost: {} holds {other:?}", crash::doc_id(d)));
                }
            }
        }
    }

    // Every stored chunk is searchable, sparse and dense.
    let mut requests = Vec::with_capacity(present.len() * 2);
    for &(d, j) in &present {
        let term = SparseVector { indices: vec![crash::unique_term(d, j)], values: vec![1.0] };
        requests.push(SearchRequest { vector: VectorQuery::Sparse(term), top_k: 1, filter: None });
        requests.push(SearchRequest { vector: VectorQuery::Dense(crash::dense_vector(d, j)), top_k: 1, filter: None });
    }
    let results = store.search(&ctx, &requests).await.map_err(|e| format!("search failed: {e}"))?;
    for (k, hits) in results.iter().enumerate() {
        let (d, j) = present[k / 2];
        let want = crash::chunk_id(d, j);
        if hits.first().map(|h| h.chunk.id.as_str()) != Some(want.as_str()) {
            let kind = if k % 2 == 0 { "sparse" } else { "dense" };
            return Err(format!(
                "{want} is stored but a {kind} search for it returns {:?}",
                hits.first().map(|h| &h.chunk.id)
            ));
        }
    }
    Ok(found)
}

/// Whether a round after `round` of the same writer run touched document `d` (its commit may have landed after the
/// last acknowledgement was printed, which is allowed: the kill can fall between commit and print).
fn rewritten_later(d: u64, round: u64) -> bool {
    (round + 1..round + 200).any(|r| crash::batch_docs(r).contains(&d))
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn the_embedded_store_survives_sigkill_at_random_points() {
    let kills = env_u64("RAGTUNE_CRASH_KILLS", 60);
    let seed = env_u64("RAGTUNE_CRASH_SEED", 0x5EED_C0DE);
    eprintln!("crash test: {kills} kills, seed {seed} (RAGTUNE_CRASH_KILLS / RAGTUNE_CRASH_SEED change them)");
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store_dir = dir.path().join("store");

    let (mut early_kills, mut locked_checks, mut max_chunks, mut failures) = (0, 0, 0, Vec::new());
    for i in 0..kills {
        let r = crash::mix(seed ^ i);
        let first_round = i * 1_000_000;
        let mut writer = spawn_writer(&store_dir, first_round);
        let early = r.is_multiple_of(5);
        if early {
            // Killed while opening or recovering the store, before or around its first write.
            early_kills += 1;
            std::thread::sleep(Duration::from_millis(r % 40));
        } else {
            writer.ready.recv_timeout(Duration::from_secs(60)).expect("the writer opens the store within a minute");
            if i % 6 == 1 {
                locked_checks += 1;
                let err = EmbeddedStore::open(&store_dir).expect_err("a second writer must be refused");
                assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
                assert!(err.to_string().contains("is locked"), "the message says so: {err}");
            }
            std::thread::sleep(Duration::from_millis(5 + (r >> 8) % 300));
        }
        writer.child.kill().expect("SIGKILL is delivered");
        let status = writer.child.wait().expect("the killed writer is reaped");
        writer.reader.join().expect("the output reader ends with the writer");
        let acked = u64::try_from(writer.acked.load(Ordering::SeqCst)).ok();
        assert!(!status.success(), "the writer was killed, not finished: {status}");

        match runtime.block_on(check_store(&store_dir, acked)) {
            Ok(found) => {
                max_chunks = max_chunks.max(found.chunks);
                eprintln!(
                    "kill {i:>3}: after {} acknowledged batches: {} documents, {} chunks — consistent",
                    acked.map_or(0, |a| a - first_round + 1),
                    found.documents,
                    found.chunks
                );
            }
            Err(e) => {
                eprintln!("kill {i:>3}: FAILED: {e}");
                failures.push(format!("kill {i}: {e}"));
            }
        }
    }
    eprintln!(
        "crash test: {kills} kills ({early_kills} while opening), {locked_checks} second-writer checks, {} corrupt or \
         inconsistent stores, up to {max_chunks} chunks",
        failures.len()
    );
    assert!(failures.is_empty(), "the store did not survive every kill:\n{}", failures.join("\n"));
    assert!(max_chunks > 0, "the writer never committed anything: the test tested nothing");
}
