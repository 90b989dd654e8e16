//! The evaluation harness behind `ragtune eval` and `cargo xtask eval`: index a BEIR dataset (cached), run every
//! query of a split, and report trec_eval metrics, latency and indexing time.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ragtune_core::{Ctx, Error, Query, Result, Retriever};
use ragtune_evaluators::metrics::{Metric, Runs, evaluate, percentile};
use serde::{Deserialize, Serialize};

use crate::{
    Bm25Settings, Chunking, Config, EmbeddingMode, EmbeddingSettings, Engine, HybridSettings, QdrantSettings,
    StoreBackend, StoreConfig, Strategy,
};

/// The retrievers `eval` knows.
pub const RETRIEVERS: [&str; 3] = ["bm25", "dense", "hybrid"];

/// What to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalOptions {
    /// A BEIR dataset directory.
    pub dataset: PathBuf,
    /// The qrels split (`test`, `train`, `dev`).
    pub split: String,
    /// The retriever (`bm25`, `dense`, `hybrid`).
    pub retriever: String,
    /// Results per query (recall and MAP are cut here).
    pub top_k: usize,
    /// BM25 parameters.
    pub bm25: Bm25Settings,
    /// The embedding model (for `dense` and `hybrid`).
    pub embedding: EmbeddingSettings,
    /// Fusion settings (for `hybrid`).
    pub hybrid: HybridSettings,
    /// Where indexes are cached; [`ragtune_home`](crate::ragtune_home)`/eval-cache` by default.
    pub cache_dir: PathBuf,
    /// Ignore a cached index and build it again.
    pub reindex: bool,
    /// Where the index is built: the embedded store (cached under `cache_dir`) or a Qdrant server.
    pub store: StoreBackend,
    /// The Qdrant server, for `store = qdrant`; the collection name is derived from the dataset and the index
    /// settings (`ragtune-eval-<dataset>-<key>`), so runs with other settings never share a collection.
    pub qdrant: QdrantSettings,
}

impl EvalOptions {
    /// Options for `dataset` with the defaults of `cargo xtask eval` (test split, BM25, top 100).
    pub fn new(dataset: impl Into<PathBuf>) -> Self {
        Self {
            dataset: dataset.into(),
            split: "test".into(),
            retriever: "bm25".into(),
            top_k: 100,
            bm25: Bm25Settings::default(),
            embedding: EmbeddingSettings::default(),
            hybrid: HybridSettings::default(),
            cache_dir: crate::ragtune_home().join("eval-cache"),
            reindex: false,
            store: StoreBackend::Embedded,
            qdrant: QdrantSettings::default(),
        }
    }
}

/// Latency summary in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

/// The JSON report of an evaluation. The first fields are a stable shape: later versions add fields, never
/// rename these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Dataset name (directory name).
    pub dataset: String,
    /// Split.
    pub split: String,
    /// Queries evaluated.
    pub queries: usize,
    /// Everything that determined the numbers.
    pub config: serde_json::Value,
    /// Mean metrics over the split (`ndcg@10`, `recall@100`, `mrr@10`, `map@100`, and more).
    pub metrics: BTreeMap<String, f64>,
    /// Per-query retrieval latency.
    pub latency_ms: Latency,
    /// Seconds spent indexing in this run (close to 0 when the cached index was used).
    pub index_seconds: f64,
    /// Whether a cached index was used.
    pub index_cached: bool,
    /// Documents in the corpus.
    pub documents: usize,
    /// Queries that failed (for example an empty query text); they score 0.
    pub failed_queries: Vec<String>,
    /// Problems met while loading the dataset.
    pub load_issues: Vec<String>,
    /// Where the index is: the embedded store's directory, or the Qdrant URL and collection.
    #[serde(default)]
    pub store_location: String,
}

const COMPLETE_MARKER: &str = "complete.json";

/// Runs an evaluation; `log` receives progress lines.
///
/// # Errors
/// Unknown retriever, missing dataset or split, store failures. Individual failing queries do not fail the run.
pub async fn run_eval(opts: &EvalOptions, log: &mut dyn FnMut(&str)) -> Result<EvalReport> {
    if !RETRIEVERS.contains(&opts.retriever.as_str()) {
        return Err(Error::invalid_input(format!(
            "unknown retriever `{}`; available: {}",
            opts.retriever,
            RETRIEVERS.join(", ")
        )));
    }
    let strategy: Strategy = opts.retriever.parse()?;
    if opts.top_k == 0 {
        return Err(Error::invalid_input("--top-k must be at least 1"));
    }
    let data = ragtune_ingest::load_beir(&opts.dataset, &opts.split)?;
    let name = opts
        .dataset
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| opts.dataset.display().to_string());
    let chunking = "whole-documents";
    // Dense and hybrid need the embedding model; BM25 indexes without it (faster, and no model needed).
    let embedder = match strategy {
        Strategy::Bm25 => None,
        _ => {
            let settings = EmbeddingSettings { mode: EmbeddingMode::On, ..opts.embedding.clone() };
            Some(crate::models::load_embedder(&settings)?)
        }
    };
    let mut config = serde_json::json!({
        "retriever": opts.retriever,
        "top_k": opts.top_k,
        "bm25": { "k1": opts.bm25.k1, "b": opts.bm25.b, "avg_doc_len": opts.bm25.avg_doc_len },
        "chunking": chunking,
        "store": opts.store.to_string(),
    });
    if let Some(e) = &embedder {
        // Threads and batch size change speed, not results: they stay out of the config that baselines compare.
        config["embedder"] = serde_json::json!({ "spec": e.spec(), "max_length": opts.embedding.max_length });
    }
    if strategy == Strategy::Hybrid {
        let h = opts.hybrid;
        config["fusion"] = serde_json::json!({
            "method": "rrf", "k": h.k, "depth": h.depth, "bm25_weight": h.bm25_weight, "dense_weight": h.dense_weight,
        });
    }

    // The index depends on the corpus bytes and on everything that changes the stored vectors.
    let corpus_hash = hash_file(&opts.dataset.join("corpus.jsonl"))?;
    let dense_key = embedder.as_ref().map_or_else(
        || "none".to_owned(),
        |e| format!("{}/{}/max_length={}", e.spec().model_id, e.spec().dim, opts.embedding.max_length),
    );
    let key = format!(
        "{corpus_hash:016x}-bm25-k1={}-b={}-avgdl={:?}-dense={dense_key}-{chunking}",
        opts.bm25.k1, opts.bm25.b, opts.bm25.avg_doc_len
    );
    let key_hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    let store_dir = opts.cache_dir.join(format!("{name}-{key_hash:016x}"));
    let marker = store_dir.join(COMPLETE_MARKER);
    let mut store = StoreConfig { path: store_dir.join("store"), ..StoreConfig::default() };
    let cached = match opts.store {
        StoreBackend::Embedded => {
            let cached = marker.is_file() && !opts.reindex;
            if !cached && store_dir.exists() {
                // An incomplete or unwanted index: start over rather than evaluate a partial one.
                std::fs::remove_dir_all(&store_dir).map_err(|e| {
                    Error::permanent(format!("cannot clear the cached index {}", store_dir.display())).with_source(e)
                })?;
            }
            cached
        }
        StoreBackend::Qdrant => {
            store.backend = StoreBackend::Qdrant;
            store.qdrant =
                QdrantSettings { collection: format!("ragtune-eval-{name}-{key_hash:016x}"), ..opts.qdrant.clone() };
            // A remote collection has no completion marker: it is rebuilt on every run, from empty.
            crate::stores::drop_collection(&store).await?;
            false
        }
    };
    let location = store.location();
    let cfg =
        Config { store, bm25: opts.bm25, hybrid: opts.hybrid, embedding: opts.embedding.clone(), ..Config::default() };
    let mut engine = Engine::open_with_embedder(cfg, embedder).await?;
    let started = Instant::now();
    if cached {
        log(&format!("using the cached index {location}"));
    } else {
        log(&format!("indexing {} documents into {location}", data.corpus.len()));
        engine.index_documents(&data.corpus, Chunking::WholeDocuments, &mut |_, _| {}).await?;
        if opts.store == StoreBackend::Embedded {
            std::fs::write(&marker, serde_json::to_vec_pretty(&serde_json::json!({ "key": key })).unwrap_or_default())
                .map_err(|e| Error::permanent(format!("cannot write {}", marker.display())).with_source(e))?;
        }
    }
    let index_seconds = started.elapsed().as_secs_f64();

    let retriever = engine.retriever(strategy).await?;
    let ctx = Ctx::new();
    let queries = data.queries_with_qrels();
    log(&format!("running {} queries of split `{}`", queries.len(), opts.split));
    let mut runs: Runs = BTreeMap::new();
    let mut latencies = Vec::with_capacity(queries.len());
    let mut failed = Vec::new();
    for q in &queries {
        let query = Query { id: Some(q.id.clone()), ..Query::new(q.text.clone()).with_top_k(opts.top_k) };
        let t = Instant::now();
        let result = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        match result {
            Ok(mut lists) => {
                // Chunks map to documents; a document counts once, at its best-ranked chunk.
                let mut seen = HashSet::new();
                let run = lists
                    .pop()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| seen.insert(c.chunk.doc_id.clone()))
                    .map(|c| (c.chunk.doc_id, c.score))
                    .collect();
                runs.insert(q.id.clone(), run);
            }
            Err(e) => failed.push(format!("{}: {e}", q.id)),
        }
    }
    let k = opts.top_k;
    let metrics = [
        Metric::Ndcg(10),
        Metric::Recall(k),
        Metric::Mrr(10),
        Metric::Map(k),
        Metric::Precision(10),
        Metric::Recall(10),
        Metric::Ndcg(k),
    ];
    let report = evaluate(&data.qrels, &runs, &metrics);
    latencies.sort_by(f64::total_cmp);
    let mean = if latencies.is_empty() { 0.0 } else { latencies.iter().sum::<f64>() / latencies.len() as f64 };
    Ok(EvalReport {
        dataset: name,
        split: opts.split.clone(),
        queries: report.queries,
        config,
        metrics: report.mean,
        latency_ms: Latency { p50: percentile(&latencies, 50.0), p99: percentile(&latencies, 99.0), mean },
        index_seconds,
        index_cached: cached,
        documents: data.corpus.len(),
        failed_queries: failed,
        load_issues: data.issues.iter().map(ToString::to_string).collect(),
        store_location: location,
    })
}

/// A fast content hash of a file, for cache keys.
fn hash_file(path: &Path) -> Result<u64> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::not_found(format!("cannot read {}", path.display())).with_source(e))?;
    Ok(xxhash_rust::xxh3::xxh3_64(&bytes))
}

/// Renders the summary table printed after an evaluation.
#[must_use]
pub fn summary_table(r: &EvalReport) -> String {
    let mut out =
        format!("dataset {}  split {}  queries {}  documents {}\n", r.dataset, r.split, r.queries, r.documents);
    out.push_str(&format!("{:<12} {:>8}\n", "metric", "value"));
    for (k, v) in &r.metrics {
        out.push_str(&format!("{k:<12} {v:>8.4}\n"));
    }
    out.push_str(&format!(
        "latency ms   p50 {:.3}  p99 {:.3}  mean {:.3}\nindex        {:.2} s{}\n",
        r.latency_ms.p50,
        r.latency_ms.p99,
        r.latency_ms.mean,
        r.index_seconds,
        if r.index_cached { " (cached index)" } else { "" }
    ));
    if !r.failed_queries.is_empty() {
        out.push_str(&format!("failed queries: {}\n", r.failed_queries.len()));
    }
    out
}
