//! The evaluation harness behind `ragtune eval retrieval` (and `rerank`) and `cargo xtask eval`: index a BEIR
//! dataset (cached), run every query of a split, and report trec_eval metrics, latency and indexing time.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ragtune::core::{Ctx, Error, Query, Result, Retriever, TraceSink};
use ragtune::evaluators::metrics::{Metric, Runs, evaluate, percentile};
use serde::{Deserialize, Serialize};

use ragtune::{
    Bm25Settings, Chunking, Config, EmbeddingMode, EmbeddingSettings, Engine, HybridSettings, LlmSettings,
    QdrantSettings, StoreBackend, StoreConfig, Strategy, Transform, TransformSettings,
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
    /// Where indexes are cached; [`ragtune_home`](ragtune::ragtune_home)`/eval-cache` by default.
    pub cache_dir: PathBuf,
    /// Ignore a cached index and build it again.
    pub reindex: bool,
    /// Where the index is built: the embedded store (cached under `cache_dir`) or a Qdrant server.
    pub store: StoreBackend,
    /// The Qdrant server, for `store = qdrant`; the collection name is derived from the dataset and the index
    /// settings (`ragtune-eval-<dataset>-<key>`), so runs with other settings never share a collection.
    pub qdrant: QdrantSettings,
    /// The query transformation and its settings (`transform.kind`).
    pub transform: TransformSettings,
    /// The LLM for transformations that need one.
    pub llm: LlmSettings,
    /// Evaluate only the first `limit` queries of the split (in id order), for slow transformations.
    pub limit: Option<usize>,
    /// Also measure the budgeted reranking controller on the retrieved candidates.
    pub rerank: Option<crate::rerank::RerankEvalOptions>,
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
            cache_dir: ragtune::ragtune_home().join("eval-cache"),
            reindex: false,
            store: StoreBackend::Embedded,
            qdrant: QdrantSettings::default(),
            transform: TransformSettings::default(),
            llm: LlmSettings::default(),
            limit: None,
            rerank: None,
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
    /// Documents longer than the embedding model's window (`embedding.max_length` tokens), whose dense vector saw
    /// only their beginning; `None` without dense vectors, or for a cached index older than this count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_documents: Option<usize>,
    /// Queries that failed (for example an empty query text); they score 0.
    pub failed_queries: Vec<String>,
    /// Problems met while loading the dataset.
    pub load_issues: Vec<String>,
    /// Where the index is: the embedded store's directory, or the Qdrant URL and collection.
    #[serde(default)]
    pub store_location: String,
    /// What the LLM cost per query (zero without a transformation that calls it).
    #[serde(default)]
    pub cost: EvalCost,
    /// Per-query latency split: time in LLM calls and the rest (retrieval, embedding, fusion).
    #[serde(default)]
    pub latency_split_ms: LatencySplit,
    /// How many queries each route took (`routed` only).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, usize>,
    /// Budget efficiency of the reranking controller (`ragtune eval rerank`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<crate::rerank::RerankEvalReport>,
}

/// LLM spending of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EvalCost {
    /// LLM calls in all (cache hits included: a cached answer counts as the call that produced it; a malformed
    /// answer counts too, it was generated).
    pub llm_calls: u64,
    /// Of which answered from the disk cache.
    pub llm_cache_hits: u64,
    /// Prompt plus completion tokens in all.
    pub llm_tokens: u64,
    /// Mean calls per query.
    pub llm_calls_per_query: f64,
    /// Mean tokens per query.
    pub llm_tokens_per_query: f64,
    /// Transformation steps that fell back to the plain question (LLM down, garbage, no LLM).
    pub transform_fallbacks: u64,
}

/// Mean and median per-query milliseconds spent in LLM calls and in everything else.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct LatencySplit {
    /// In LLM calls.
    pub llm: Latency,
    /// In retrieval (store, embedding, fusion) and the rest.
    pub retrieval: Latency,
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
    if strategy == Strategy::Hybrid {
        opts.hybrid.validate().map_err(|e| e.context("[hybrid]"))?;
    }
    if opts.top_k == 0 {
        return Err(Error::invalid_input("--top-k must be at least 1"));
    }
    let transform = opts.transform.kind;
    if let Some(r) = &opts.rerank
        && r.pool > opts.top_k
    {
        return Err(Error::invalid_input(format!("--rerank-pool {} needs --top-k of at least as much", r.pool)));
    }
    let llm = if transform.needs_llm() || opts.rerank.is_some() {
        let llm = ragtune::load_llm(&opts.llm)?.ok_or_else(|| {
            Error::invalid_input(format!(
                "--transform {transform} and the reranker `llm` need an LLM: pass --llm-url URL or set $RAGTUNE_LLM_URL (`cargo xtask llm start` runs a local one)"
            ))
        })?;
        Some(llm)
    } else {
        None
    };
    let data = ragtune::ingest::load_beir(&opts.dataset, &opts.split)?;
    let name = dataset_name(&opts.dataset);
    let chunking = "whole-documents";
    // Dense and hybrid need the embedding model; BM25 indexes without it (faster, and no model needed).
    let embedder = match strategy {
        Strategy::Bm25 => None,
        _ => {
            let settings = EmbeddingSettings { mode: EmbeddingMode::On, ..opts.embedding.clone() };
            Some(ragtune::load_embedder(&settings)?)
        }
    };
    let mut config = serde_json::json!({
        "retriever": opts.retriever,
        "top_k": opts.top_k,
        "bm25": { "k1": opts.bm25.k1, "b": opts.bm25.b, "avg_doc_len": opts.bm25.avg_doc_len },
        "chunking": chunking,
        "store": opts.store.to_string(),
    });
    if transform != Transform::None {
        let t = &opts.transform;
        config["transform"] = serde_json::json!({
            "kind": transform.to_string(),
            "llm_model": if transform.needs_llm() { opts.llm.model.clone() } else { String::new() },
            "hyde_generations": t.hyde_generations,
            "hyde_include_query": t.hyde_include_query,
            "multi_query_n": t.multi_query_n,
            "multi_query_max_similarity": t.multi_query_max_similarity,
            "max_hops": t.max_hops,
            "router_llm": t.router_llm,
            "synonyms": t.synonyms.as_ref().map(|p| p.display().to_string()),
        });
    }
    if let Some(limit) = opts.limit {
        config["limit"] = limit.into();
    }
    if let Some(e) = &embedder {
        // Threads and batch size change speed, not results: they stay out of the config that baselines compare.
        config["embedder"] = serde_json::json!({ "spec": e.spec(), "max_length": opts.embedding.max_length });
    }
    if strategy == Strategy::Hybrid {
        let h = opts.hybrid;
        config["fusion"] = serde_json::json!({
            "method": h.fusion.name(), "k": h.k, "depth": h.depth, "bm25_weight": h.bm25_weight,
            "dense_weight": h.dense_weight,
        });
        // Only when set, so that reports with fixed weights compare with the baselines made before it existed.
        if h.adaptive > 0.0 {
            config["fusion"]["adaptive"] = h.adaptive.into();
        }
    }

    let (engine, cached, location, index_seconds, truncated_documents) =
        open_beir_index(opts, &name, &data.corpus, embedder.clone(), llm.clone(), log).await?;

    let retriever = engine.transformed_retriever(strategy, transform).await?;
    let mut queries = data.queries_with_qrels();
    if let Some(limit) = opts.limit {
        queries.truncate(limit);
    }
    log(&format!("running {} queries of split `{}`", queries.len(), opts.split));
    let mut runs: Runs = BTreeMap::new();
    let mut latencies = Vec::with_capacity(queries.len());
    let mut failed = Vec::new();
    let (mut llm_ms, mut rest_ms) = (Vec::with_capacity(queries.len()), Vec::with_capacity(queries.len()));
    let mut cost = EvalCost::default();
    let mut routes: BTreeMap<String, usize> = BTreeMap::new();
    let mut pools: Vec<(String, String, Vec<ragtune::core::Candidate>)> = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let query = Query { id: Some(q.id.clone()), ..Query::new(q.text.clone()).with_top_k(opts.top_k) };
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let t = Instant::now();
        let result = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await;
        let total = t.elapsed().as_secs_f64() * 1000.0;
        latencies.push(total);
        let mut in_llm = 0.0;
        for e in sink.take() {
            match (e.stage.as_str(), e.action.as_str()) {
                ("llm", "generate" | "cached" | "failed") => {
                    cost.llm_calls += e.cost.calls;
                    cost.llm_tokens += e.cost.tokens;
                    cost.llm_cache_hits += u64::from(e.action == "cached") * e.cost.calls;
                    in_llm += e.elapsed_us as f64 / 1000.0;
                }
                ("llm", _) => in_llm += e.elapsed_us as f64 / 1000.0,
                ("transform", _) if e.detail.contains_key("fallback") => cost.transform_fallbacks += 1,
                ("route", action) => *routes.entry(action.to_owned()).or_default() += 1,
                _ => {}
            }
        }
        llm_ms.push(in_llm);
        rest_ms.push((total - in_llm).max(0.0));
        if transform.needs_llm() && (i + 1) % 25 == 0 {
            log(&format!("{} of {} queries", i + 1, queries.len()));
        }
        match result {
            Ok(mut lists) => {
                let list = lists.pop().unwrap_or_default();
                if let Some(r) = &opts.rerank {
                    pools.push((q.id.clone(), q.text.clone(), list.iter().take(r.pool).cloned().collect()));
                }
                runs.insert(q.id.clone(), document_run(&list));
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
    // With --limit, only the queries that ran are judged (the others have no run, not an empty one).
    let evaluated: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    let qrels: ragtune::evaluators::metrics::Qrels = data
        .qrels
        .iter()
        .filter(|(id, _)| evaluated.contains(id.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let report = evaluate(&qrels, &runs, &metrics);
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mean = if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
        Latency { p50: percentile(v, 50.0), p99: percentile(v, 99.0), mean }
    };
    let latency_ms = summary(&mut latencies);
    let latency_split_ms = LatencySplit { llm: summary(&mut llm_ms), retrieval: summary(&mut rest_ms) };
    let n = queries.len().max(1) as f64;
    let rerank = match (&opts.rerank, &llm) {
        (Some(r), Some(llm)) => {
            if r.reranker != "llm" {
                return Err(Error::invalid_input(format!("unknown reranker `{}` (available: llm)", r.reranker)));
            }
            let inner = ragtune::rerank::LlmReranker::new(
                llm.clone(),
                ragtune::rerank::LlmRerankerConfig {
                    repair: Some(ragtune::llm::prompts::REPAIR_JSON),
                    ..ragtune::rerank::LlmRerankerConfig::new(ragtune::llm::prompts::RELEVANCE)
                },
            )?;
            let reranker = ragtune::rerank::CachedReranker::new(
                std::sync::Arc::new(inner),
                ragtune::ragtune_home().join("rerank-cache"),
            )?;
            Some(crate::rerank::evaluate_reranking(r, std::sync::Arc::new(reranker), &qrels, &pools, log).await?)
        }
        _ => None,
    };
    cost.llm_calls_per_query = cost.llm_calls as f64 / n;
    cost.llm_tokens_per_query = cost.llm_tokens as f64 / n;
    Ok(EvalReport {
        dataset: name,
        split: opts.split.clone(),
        queries: report.queries,
        config,
        metrics: report.mean,
        latency_ms,
        index_seconds,
        index_cached: cached,
        documents: data.corpus.len(),
        truncated_documents,
        failed_queries: failed,
        load_issues: data.issues.iter().map(ToString::to_string).collect(),
        store_location: location,
        cost,
        latency_split_ms,
        routes,
        rerank,
    })
}

/// Opens the cached index of a BEIR corpus for the options' BM25 and embedding settings, building it when no
/// complete one exists (or `opts.reindex`). Returns the engine, whether the index was cached, where it lives and
/// the seconds indexing took.
pub(crate) async fn open_beir_index(
    opts: &EvalOptions,
    name: &str,
    corpus: &[ragtune::core::Document],
    embedder: Option<std::sync::Arc<dyn ragtune::core::Embedder>>,
    llm: Option<std::sync::Arc<dyn ragtune::core::Llm>>,
    log: &mut dyn FnMut(&str),
) -> Result<(Engine, bool, String, f64, Option<usize>)> {
    let chunking = "whole-documents";
    let data_corpus = corpus;
    // The index depends on the corpus bytes and on everything that changes the stored vectors.
    let corpus_hash = hash_file(&opts.dataset.join("corpus.jsonl"))?;
    let dense_key = embedder.as_ref().map_or_else(
        || "none".to_owned(),
        |e| {
            let (spec, emb) = (e.spec(), &opts.embedding);
            let tails = if emb.strip_vectors_past_window { "+tails" } else { "" };
            format!("{}/{}/max_length={}/strips={}{tails}", spec.model_id, spec.dim, emb.max_length, emb.strip_vectors)
        },
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
            ragtune::stores::drop_collection(&store).await?;
            false
        }
    };
    let location = store.location();
    let cfg = Config {
        store,
        bm25: opts.bm25,
        hybrid: opts.hybrid,
        embedding: opts.embedding.clone(),
        transform: opts.transform.clone(),
        ..Config::default()
    };
    let mut engine = Engine::open_with_embedder(cfg, embedder.clone()).await?.with_llm(llm.clone());
    let started = Instant::now();
    // Documents the model truncated: counted when indexing, kept in the completion marker for later runs (`None`
    // for a cache written before the count existed).
    let dense = embedder.is_some();
    let truncated = if cached {
        log(&format!("using the cached index {location}"));
        std::fs::read(&marker)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["truncated"].as_u64())
            .and_then(|n| usize::try_from(n).ok())
    } else {
        log(&format!("indexing {} documents into {location}", data_corpus.len()));
        let report = engine.index_documents(data_corpus, Chunking::WholeDocuments, &mut |_, _| {}).await?;
        if opts.store == StoreBackend::Embedded {
            let marked = serde_json::json!({ "key": key, "truncated": report.truncated });
            std::fs::write(&marker, serde_json::to_vec_pretty(&marked).unwrap_or_default())
                .map_err(|e| Error::permanent(format!("cannot write {}", marker.display())).with_source(e))?;
        }
        Some(report.truncated)
    }
    .filter(|_| dense);
    let index_seconds = started.elapsed().as_secs_f64();
    if let Some(n) = truncated.filter(|&n| n > 0) {
        log(&format!(
            "warning: {n} of {} documents are longer than the embedding model's {}-token window: their dense vectors \
             see only their beginning (chunk long documents so that every passage fits)",
            data_corpus.len(),
            opts.embedding.max_length
        ));
    }
    Ok((engine, cached, location, index_seconds, truncated))
}

/// A ranked list of chunks as a `trec_eval` run of documents: a document counts once, at its best-ranked chunk,
/// with that chunk's score.
pub(crate) fn document_run(list: &[ragtune::core::Candidate]) -> Vec<(String, f32)> {
    let mut seen = HashSet::new();
    list.iter().filter(|c| seen.insert(c.chunk.doc_id.as_str())).map(|c| (c.chunk.doc_id.clone(), c.score)).collect()
}

/// A dataset's name for reports and cache keys: its directory's name.
pub(crate) fn dataset_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
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
    if r.cost.llm_calls > 0 || r.cost.transform_fallbacks > 0 {
        out.push_str(&format!(
            "llm          {:.2} calls/query ({} cached of {}), {:.0} tokens/query, {} fallbacks to the plain query\n",
            r.cost.llm_calls_per_query,
            r.cost.llm_cache_hits,
            r.cost.llm_calls,
            r.cost.llm_tokens_per_query,
            r.cost.transform_fallbacks
        ));
        out.push_str(&format!(
            "latency ms   llm p50 {:.1} mean {:.1} | retrieval p50 {:.1} mean {:.1}\n",
            r.latency_split_ms.llm.p50,
            r.latency_split_ms.llm.mean,
            r.latency_split_ms.retrieval.p50,
            r.latency_split_ms.retrieval.mean
        ));
    }
    if !r.routes.is_empty() {
        out.push_str(&format!("routes       {:?}\n", r.routes));
    }
    if !r.failed_queries.is_empty() {
        out.push_str(&format!("failed queries: {}\n", r.failed_queries.len()));
    }
    out
}
