//! The ragtune side of `cargo xtask bench compare` (the Python side is `crates/ragtune-embed/scripts/peer.py`).
//!
//! `compare --dataset DIR [--docs N] [--queries N] [--threads T]` indexes the first `--docs` documents of a BEIR
//! dataset (dense + BM25, one passage per document, as `ragtune eval` does) into a fresh embedded store through
//! [`Engine::index_documents`], then runs the split's test queries one at a time through the public API and
//! prints one JSON line:
//!
//! - `index_docs_per_second`: documents per second to a searchable dense + BM25 index (HNSW included);
//! - `embed_ms`: one query embedded (`Embedder::embed`, one text);
//! - `dense_ms`, `hybrid_ms`, `bm25_ms`: one query end to end (`Engine::search_with`, top 10, tokenising and
//!   embedding included); each query runs the four kinds in turn;
//! - `dense_qps_1`, `dense_qps_2`: dense queries per second with one and two queries in flight, the medians of five
//!   rounds of each, alternated (every round in `dense_qps_rounds`).
//!
//! `--peer PYTHON MODEL_DIR` runs the Python peer (`crates/ragtune-embed/scripts/peer.py --serve`, on the same
//! documents, queries and threads, with `MODEL_DIR`: the same ONNX file) in a process beside this one and sends it
//! every query too, in turn with ragtune (ragtune first on even queries, the peer first on odd ones): both sides
//! are timed under the same load at the same moment, and the JSON line gets a `peer` object with its figures. Each
//! side times its own calls; the pipe between them is outside every timing.
//!
//! `--per-query FILE` also writes each query's milliseconds of every kind, one JSON line per query (the peer takes the
//! same flag), to tell which queries make a tail.
//!
//! `--threads 0` (the default) leaves every setting at ragtune's defaults (a session per core, one intra-op
//! thread each, the int8 model); `--threads T` runs one ONNX Runtime session with `T` intra-op threads. `--fp32` runs
//! the model file as shipped instead of its int8 variant (`embedding.quantized = false`). The query-embedding cache
//! is off so every query is embedded (the queries are distinct anyway).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use ragtune::core::{Ctx, Query, TextRole};
use ragtune::{Chunking, Config, Engine, Strategy};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut dataset, mut docs, mut queries, mut threads) = (None, 1000_usize, 300_usize, 0_usize);
    let (mut fp32, mut per_query, mut peer) = (false, None, None::<(String, String)>);
    while let Some(a) = args.next() {
        if a == "--fp32" {
            fp32 = true;
            continue;
        }
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dataset" => dataset = Some(value()?),
            "--docs" => docs = value()?.parse().context("--docs")?,
            "--queries" => queries = value()?.parse().context("--queries")?,
            "--threads" => threads = value()?.parse().context("--threads")?,
            "--per-query" => per_query = Some(std::path::PathBuf::from(value()?)),
            "--peer" => {
                let python = value()?;
                let model_dir = args.next().context("--peer needs PYTHON and MODEL_DIR")?;
                peer = Some((python, model_dir));
            }
            other => {
                bail!(
                    "unknown argument {other} (use --dataset, --docs, --queries, --threads, --fp32, --per-query, --peer)"
                )
            }
        }
    }
    let dataset = dataset.context("--dataset DIR is required")?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let peer = peer.map(|(python, model_dir)| PeerCommand {
        python,
        model_dir,
        dataset: dataset.clone(),
        docs,
        queries,
        threads,
    });
    rt.block_on(run(&dataset, docs, queries, threads, fp32, per_query.as_deref(), peer))
}

async fn run(
    dataset: &str,
    docs: usize,
    queries: usize,
    threads: usize,
    fp32: bool,
    per_query: Option<&std::path::Path>,
    peer: Option<PeerCommand>,
) -> Result<()> {
    let data = ragtune::ingest::load_beir(std::path::Path::new(dataset), "test")?;
    let corpus: Vec<_> = data.corpus.iter().take(docs).cloned().collect();
    let texts: Vec<String> = data.queries_with_qrels().iter().take(queries).map(|q| q.text.clone()).collect();
    let dir = std::env::temp_dir().join(format!("ragtune-compare-{}-{threads}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The settings the CLI would use (`$RAGTUNE_CONFIG`, `RAGTUNE__SECTION__KEY` overrides: for example
    // `RAGTUNE__EMBEDDING__LONE_THREADS=0` measures the lone-query session), on a fresh store.
    let mut config = Config::load(None)?;
    config.store.path.clone_from(&dir);
    config.embedding.mode = ragtune::EmbeddingMode::On;
    config.embedding.query_cache = 0;
    if fp32 {
        config.embedding.quantized = false;
    }
    let quantized = config.embedding.quantized;
    if threads > 0 {
        (config.embedding.threads, config.embedding.sessions, config.embedding.lone_threads) = (threads, 1, 1);
    }
    let load_started = Instant::now();
    let mut engine = Engine::open(config).await?;
    let load_seconds = load_started.elapsed().as_secs_f64();
    let embedder = engine.embedder().context("the embedding model did not load")?.clone();
    // Warm-up, as the peer does: one batch through the model before timing.
    embedder.embed(&Ctx::new(), &[texts[0].as_str(), corpus[0].text.as_str()], TextRole::Passage).await?;

    let started = Instant::now();
    let report = engine.index_documents(&corpus, Chunking::WholeDocuments, &mut |_, _| {}).await?;
    let index_seconds = started.elapsed().as_secs_f64();
    eprintln!("compare: indexed {} documents in {index_seconds:.1} s", report.documents);

    // Each query runs every kind in turn (embedding, dense, hybrid, BM25), so that a change of load during the run
    // (this host's neighbours, frequency) falls on all kinds alike and hybrid-against-dense is a paired comparison.
    let n = texts.len();
    let (mut embed_ms, mut dense_ms, mut hybrid_ms, mut bm25_ms) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    // With --peer the Python peer runs in a process of its own beside this one, idle while this side runs: each query
    // goes to both, ragtune first on even queries and the peer first on odd ones, so that both sides see the same
    // load at the same moment and every figure is paired.
    let mut peer = peer.map(|p| p.spawn()).transpose()?;
    let mut peer_ms: Vec<[f64; 3]> = Vec::with_capacity(n);
    for (i, q) in texts.iter().enumerate() {
        if let Some(peer) = peer.as_mut().filter(|_| i % 2 == 1) {
            peer_ms.push(peer.ask(q)?);
        }
        let t = Instant::now();
        std::hint::black_box(embedder.embed(&Ctx::new(), &[q.as_str()], TextRole::Query).await?);
        embed_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        for (strategy, ms) in
            [(Strategy::Dense, &mut dense_ms), (Strategy::Hybrid, &mut hybrid_ms), (Strategy::Bm25, &mut bm25_ms)]
        {
            let t = Instant::now();
            std::hint::black_box(engine.search_with(Query::new(q.clone()), strategy).await?);
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        if let Some(peer) = peer.as_mut().filter(|_| i % 2 == 0) {
            peer_ms.push(peer.ask(q)?);
        }
    }
    let peer_report = peer.map(|p| p.finish(&peer_ms)).transpose()?;
    if let Some(path) = per_query {
        write_per_query(
            path,
            &texts,
            [("embed_ms", &embed_ms), ("dense_ms", &dense_ms), ("hybrid_ms", &hybrid_ms), ("bm25_ms", &bm25_ms)],
            &peer_ms,
        )?;
    }
    let engine = Arc::new(engine);
    // One and two in flight alternately, medians of the rounds: a change of load during the run (another
    // process, frequency) falls on both sides instead of on one.
    let (mut qps_1, mut qps_2) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        qps_1.push(throughput(&engine, &texts, 1).await?);
        qps_2.push(throughput(&engine, &texts, 2).await?);
    }
    let (dense_qps_1, dense_qps_2) = (benches::median(&qps_1), benches::median(&qps_2));
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{}",
        serde_json::json!({
            "impl": "ragtune",
            "threads": threads,
            "quantized": quantized,
            "docs": report.documents,
            "queries": texts.len(),
            "model_load_seconds": load_seconds,
            "index_seconds": index_seconds,
            "index_docs_per_second": report.documents as f64 / index_seconds,
            "embed_ms": percentiles(embed_ms),
            "dense_ms": percentiles(dense_ms),
            "hybrid_ms": percentiles(hybrid_ms),
            "bm25_ms": percentiles(bm25_ms),
            "dense_qps_1": dense_qps_1,
            "dense_qps_2": dense_qps_2,
            "dense_qps_rounds": {"1": qps_1, "2": qps_2},
            "peer": peer_report,
        })
    );
    Ok(())
}

/// The peer's kinds, in the order of its answer to each query.
const PEER_KINDS: [&str; 3] = ["embed_ms", "dense_ms", "bm25_ms"];

/// How to start the Python peer (`crates/ragtune-embed/scripts/peer.py --serve`) on the same data and threads.
struct PeerCommand {
    python: String,
    model_dir: String,
    dataset: String,
    docs: usize,
    queries: usize,
    threads: usize,
}

/// The running peer: one query a line in, its milliseconds of each kind a line out.
struct Peer {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    ready: serde_json::Value,
}

impl PeerCommand {
    /// Starts the peer and waits until it has indexed the documents (its first line).
    fn spawn(self) -> Result<Peer> {
        use std::io::BufRead as _;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/ragtune-embed/scripts/peer.py");
        let mut child = std::process::Command::new(&self.python)
            .arg(&script)
            .args(["--model-dir", &self.model_dir, "--dataset", &self.dataset, "--serve"])
            .args(["--docs", &self.docs.to_string(), "--queries", &self.queries.to_string()])
            .args(["--threads", &self.threads.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} {}", self.python, script.display()))?;
        let input = child.stdin.take().context("the peer's stdin")?;
        let mut output = std::io::BufReader::new(child.stdout.take().context("the peer's stdout")?);
        let mut line = String::new();
        output.read_line(&mut line).context("reading the peer's first line")?;
        let ready: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("the peer's first line is not JSON: {line:?}"))?;
        eprintln!("compare: the peer indexed {} documents in {:.1} s", ready["docs"], ready["index_seconds"]);
        Ok(Peer { child, input, output, ready })
    }
}

impl Peer {
    /// Runs `query` through the peer's kinds; their milliseconds as the peer timed them.
    fn ask(&mut self, query: &str) -> Result<[f64; 3]> {
        use std::io::{BufRead as _, Write as _};
        writeln!(self.input, "{}", serde_json::Value::from(query)).context("writing to the peer")?;
        self.input.flush().context("writing to the peer")?;
        let mut line = String::new();
        self.output.read_line(&mut line).context("reading the peer's answer")?;
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("the peer answered {line:?}"))?;
        let ms = |k: &str| v[k].as_f64().with_context(|| format!("the peer's answer has no {k}: {line:?}"));
        Ok([ms(PEER_KINDS[0])?, ms(PEER_KINDS[1])?, ms(PEER_KINDS[2])?])
    }

    /// Stops the peer; its figures beside ragtune's.
    fn finish(mut self, ms: &[[f64; 3]]) -> Result<serde_json::Value> {
        drop(self.input);
        let status = self.child.wait().context("waiting for the peer")?;
        if !status.success() {
            bail!("the peer failed: {status}");
        }
        let mut report = self.ready;
        for (k, name) in PEER_KINDS.iter().enumerate() {
            report[*name] = percentiles(ms.iter().map(|m| m[k]).collect());
        }
        Ok(report)
    }
}

/// Rounds of the concurrency measurement, one and two in flight alternately.
const ROUNDS: usize = 5;

/// Dense queries per second with `concurrency` queries in flight (each a task on the runtime).
async fn throughput(engine: &Arc<Engine>, texts: &[String], concurrency: usize) -> Result<f64> {
    let engine = engine.clone();
    benches::per_second(texts, concurrency, move |q| {
        let engine = engine.clone();
        async move { Ok(engine.search_with(Query::new(q), Strategy::Dense).await.map(drop)?) }
    })
    .await
}

/// One JSON line per query (its index, text and every kind's milliseconds), to find which queries make a tail.
fn write_per_query(
    path: &std::path::Path,
    texts: &[String],
    kinds: [(&str, &Vec<f64>); 4],
    peer: &[[f64; 3]],
) -> Result<()> {
    let mut out = String::new();
    for (i, text) in texts.iter().enumerate() {
        let mut line = serde_json::json!({ "i": i, "query": text });
        for (name, ms) in kinds {
            line[name] = ms[i].into();
        }
        if let Some(p) = peer.get(i) {
            for (name, ms) in PEER_KINDS.iter().zip(p) {
                line[format!("peer_{name}")] = (*ms).into();
            }
        }
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("cannot write {}", path.display()))
}

fn percentiles(mut ms: Vec<f64>) -> serde_json::Value {
    // The same percentile method as the peer's `numpy.percentile` (linear).
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ragtune::evaluators::metrics::percentile(&ms, p);
    serde_json::json!({ "p50": at(50.0), "p99": at(99.0), "mean": ms.iter().sum::<f64>() / ms.len().max(1) as f64 })
}
