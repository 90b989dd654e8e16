//! The evaluation harness behind `ragtune eval retrieval` (and `rerank`) and `cargo xtask eval`: index a BEIR
//! dataset (cached), run every query of a split, and report trec_eval metrics, latency and indexing time.
//!
//! Over 1,000 lines with its unit tests (about 140 lines of them): the code itself is under 900 lines; each query's
//! run is in `queries.rs`.

mod queries;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use ragtune::core::{Error, Result};
use ragtune::evaluators::metrics::{Metric, evaluate};
use serde::{Deserialize, Serialize};

use ragtune::{
    Bm25Settings, Chunking, ChunkingSettings, Config, EmbeddingMode, EmbeddingSettings, Engine, HybridSettings,
    LlmSettings, QdrantSettings, RerankerKind, SearchSettings, StoreBackend, StoreConfig, Strategy, Transform,
    TransformSettings,
};

use queries::QueryRunner;

/// The retrievers `eval` knows.
pub const RETRIEVERS: [&str; 3] = ["bm25", "dense", "hybrid"];

/// How a retrieval evaluation cuts the corpus into indexed passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvalChunking {
    /// The default: a document longer than one passage is chunked by the facade's chunker (`Chunking::Auto`:
    /// header-aware sections and passages for Markdown, windows of `chunk_size` words with `chunk_overlap` words of
    /// overlap, cut at paragraph or sentence ends, for plain text); shorter documents stay whole. Documents are
    /// scored from their passages ([`DocScore`]).
    #[default]
    Passages,
    /// One passage per document (title and text), as BEIR baselines index: the dense model sees only the first
    /// `embedding.max_length` tokens of a long document.
    Whole,
}

impl std::str::FromStr for EvalChunking {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "passages" | "chunked" => Ok(Self::Passages),
            "whole" | "whole-documents" => Ok(Self::Whole),
            _ => Err(Error::invalid_input(format!("unknown chunking `{s}`; available: passages, whole"))),
        }
    }
}

impl std::fmt::Display for EvalChunking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Passages => "passages",
            Self::Whole => "whole",
        })
    }
}

/// How a document's score is made from the scores of its retrieved passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DocScore {
    /// The best passage's score (MaxP), the default: a document ranks where its best passage ranks.
    #[default]
    Max,
    /// The sum of its best `n` retrieved passages' scores: documents with several good passages rise.
    Sum(usize),
    /// The mean of its best `n` retrieved passages' scores (over the passages retrieved, at most `n`).
    Mean(usize),
}

impl std::str::FromStr for DocScore {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad =
            || Error::invalid_input(format!("unknown document score `{s}`; available: max, sum:N, mean:N (N >= 1)"));
        if s == "max" {
            return Ok(Self::Max);
        }
        let (kind, n) = s.split_once(':').ok_or_else(bad)?;
        let n: usize = n.parse().ok().filter(|&n| n >= 1).ok_or_else(bad)?;
        match kind {
            "sum" => Ok(Self::Sum(n)),
            "mean" => Ok(Self::Mean(n)),
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for DocScore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Max => f.write_str("max"),
            Self::Sum(n) => write!(f, "sum:{n}"),
            Self::Mean(n) => write!(f, "mean:{n}"),
        }
    }
}

/// Words per passage of the evaluation's chunking: 100-word passages (as DPR cut Wikipedia) fit the default
/// model's 256-token window for all but about 1 % of passages on SciFact and CMU QA (checked with the model's
/// tokenizer: 200-word passages, the `[chunking]` default, overflow it for 54 % and 64 %; docs/eval.md).
pub const EVAL_CHUNK_WORDS: usize = 100;

/// Words shared by consecutive passages of the evaluation's chunking.
pub const EVAL_CHUNK_OVERLAP: usize = 20;

/// With [`EvalChunking::Passages`], each query asks for this many passages per document wanted (`top_k`), so that
/// `top_k` documents remain after passages of the same document are merged.
pub const PASSAGES_PER_DOCUMENT: usize = 3;

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
    /// Rerank the first passages of every query fully and report the metrics of the reranked run
    /// (`eval retrieval --rerank`).
    pub full_rerank: Option<crate::rerank::FullRerank>,
    /// Whole documents or passages (the default).
    pub chunking: EvalChunking,
    /// The chunker's sizes for [`EvalChunking::Passages`] (the facade's `[chunking]` settings; by default
    /// [`EVAL_CHUNK_WORDS`] and [`EVAL_CHUNK_OVERLAP`], not the configuration's, so that reports compare with
    /// baselines).
    pub chunker: ChunkingSettings,
    /// How documents are scored from their passages.
    pub doc_score: DocScore,
    /// The weight of the header boost (`[search] header_boost`; 0 is off).
    pub header_boost: f32,
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
            full_rerank: None,
            chunking: EvalChunking::default(),
            chunker: ChunkingSettings {
                chunk_size: EVAL_CHUNK_WORDS,
                chunk_overlap: EVAL_CHUNK_OVERLAP,
                ..ChunkingSettings::default()
            },
            doc_score: DocScore::default(),
            header_boost: 0.0,
        }
    }

    /// How the index cuts documents, as the facade's [`Chunking`].
    #[must_use]
    pub fn index_chunking(&self) -> Chunking {
        match self.chunking {
            EvalChunking::Whole => Chunking::WholeDocuments,
            EvalChunking::Passages => Chunking::Auto(self.chunker),
        }
    }

    /// The chunking as it enters cache keys and reports: `whole-documents`, or `passages` with the sizes.
    #[must_use]
    pub fn chunking_key(&self) -> String {
        match self.chunking {
            EvalChunking::Whole => "whole-documents".to_owned(),
            EvalChunking::Passages => {
                let c = &self.chunker;
                format!("passages/size={}/overlap={}/section={}", c.chunk_size, c.chunk_overlap, c.max_section_size)
            }
        }
    }

    /// Passages asked for per query: `top_k`, times [`PASSAGES_PER_DOCUMENT`] when documents are chunked.
    #[must_use]
    pub fn passage_depth(&self) -> usize {
        match self.chunking {
            EvalChunking::Whole => self.top_k,
            EvalChunking::Passages => self.top_k.saturating_mul(PASSAGES_PER_DOCUMENT),
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
    /// Per-query retrieval latency (with `--rerank`, reranking included).
    pub latency_ms: Latency,
    /// Seconds spent indexing in this run (close to 0 when the cached index was used).
    pub index_seconds: f64,
    /// Whether a cached index was used.
    pub index_cached: bool,
    /// Documents in the corpus.
    pub documents: usize,
    /// Documents longer than the embedding model's window (`embedding.max_length` tokens), whose dense vector saw
    /// only their beginning; `None` without dense vectors, for a cached index older than this count, or when
    /// documents were chunked (see `truncated_passages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_documents: Option<usize>,
    /// With chunking: passages still longer than the model's window; `None` as for `truncated_documents`, or
    /// with whole documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_passages: Option<usize>,
    /// Searchable passages in the index (`None` for a cached index older than this count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passages: Option<usize>,
    /// Passage-level metrics, when the dataset has passage qrels (`qrels/passages/<split>.tsv`) and documents were
    /// chunked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passage_level: Option<crate::passages::PassageLevel>,
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
    let strategy = check_options(opts)?;
    let transform = opts.transform.kind;
    let models = load_models(opts)?;
    let data = ragtune::ingest::load_beir(&opts.dataset, &opts.split)?;
    let gold_passages = crate::passages::load_passage_qrels(&opts.dataset, &opts.split)?;
    let name = dataset_name(&opts.dataset);
    // Dense and hybrid need the embedding model; BM25 indexes without it (faster, and no model needed).
    let embedder = match strategy {
        Strategy::Bm25 => None,
        _ => {
            let settings = EmbeddingSettings { mode: EmbeddingMode::On, ..opts.embedding.clone() };
            Some(ragtune::load_embedder(&settings)?)
        }
    };
    let config = report_config(opts, strategy, &models, embedder.as_ref());

    let IndexOpened { engine, cached, location, seconds: index_seconds, truncated, passages } =
        open_index(opts, &name, &data.corpus, embedder.clone(), models.llm.clone(), log).await?;
    if gold_passages.is_some() && opts.chunking == EvalChunking::Whole {
        log("passage qrels are not scored with whole documents (every passage of a retrieved document would count)");
    }
    let (truncated_documents, truncated_passages) = match opts.chunking {
        EvalChunking::Whole => (truncated, None),
        EvalChunking::Passages => (None, truncated),
    };
    let mut locator = crate::passages::Locator::new(&data.corpus);
    let passage_issues = gold_passages.as_ref().map(|g| g.issues.clone()).unwrap_or_default();
    let gold = gold_passages.filter(|_| opts.chunking == EvalChunking::Passages).map(|g| g.locate(&data.corpus));
    let gold = gold.as_ref();

    let retriever = engine.transformed_retriever(strategy, transform).await?;
    let mut queries = data.queries_with_qrels();
    if let Some(limit) = opts.limit {
        queries.truncate(limit);
    }
    log(&format!("running {} queries of split `{}`", queries.len(), opts.split));
    let runner = QueryRunner {
        opts,
        retriever: retriever.as_ref(),
        full_reranker: models.full_reranker.as_ref(),
        retrieval_weight: models.retrieval_weight,
        gold,
    };
    let mut gathered = runner.run_all(&queries, &mut locator, log).await?;
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
    let report = evaluate(&qrels, &gathered.runs, &metrics);
    let passage_level = gold.map(|g| g.evaluate(&evaluated, &gathered.passage_runs, &metrics));
    let (latency_ms, latency_split_ms) = gathered.latency();
    let rerank = match (&opts.rerank, models.budget_reranker) {
        (Some(r), Some((reranker, _))) => {
            Some(crate::rerank::evaluate_reranking(r, reranker, &qrels, &gathered.pools, log).await?)
        }
        _ => None,
    };
    let cost = gathered.cost(queries.len());
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
        truncated_passages,
        passages,
        passage_level,
        failed_queries: gathered.failed,
        load_issues: data.issues.iter().map(ToString::to_string).chain(passage_issues).collect(),
        store_location: location,
        cost,
        latency_split_ms,
        routes: gathered.routes,
        rerank,
    })
}

/// Checks the options before anything is loaded, indexed or retrieved (the retriever, the fusion, `top_k`, the
/// reranking settings and the full rerank's reranker and depth): the retrieval strategy.
fn check_options(opts: &EvalOptions) -> Result<Strategy> {
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
    // The reranking settings are checked before anything is indexed or retrieved, not after every query ran.
    if let Some(r) = &opts.rerank {
        r.validate()?;
        if r.pool > opts.top_k {
            return Err(Error::invalid_input(format!("--rerank-pool {} needs --top-k of at least as much", r.pool)));
        }
    }
    if let Some(f) = &opts.full_rerank {
        if let Some(problem) = f.reranker.problem() {
            return Err(Error::invalid_input(problem));
        }
        if f.depth == 0 || f.depth > opts.passage_depth() {
            return Err(Error::invalid_input(format!(
                "--rerank-depth must be between 1 and the {} passages retrieved per query (--top-k {}{}), got {}",
                opts.passage_depth(),
                opts.top_k,
                if opts.chunking == EvalChunking::Passages { " × 3 passages per document" } else { "" },
                f.depth
            )));
        }
    }
    Ok(strategy)
}

/// A reranker built for an evaluation, with its description for the report's config.
type BuiltReranker = (std::sync::Arc<dyn ragtune::core::Reranker>, serde_json::Value);

/// The models an evaluation loads before anything is indexed, besides the embedder.
struct Models {
    /// For a transformation that needs one, or the reranker `llm`.
    llm: Option<std::sync::Arc<dyn ragtune::core::Llm>>,
    /// The reranker of the budget-efficiency evaluation (`opts.rerank`).
    budget_reranker: Option<BuiltReranker>,
    /// The full rerank's reranker and depth (`opts.full_rerank`).
    full_reranker: Option<(BuiltReranker, usize)>,
    /// The full rerank's weight of retrieval's score (0 without one).
    retrieval_weight: f32,
}

/// Loads the LLM and the rerankers the options ask for, and checks the full rerank's retrieval weight: a model that
/// does not load ends the run before anything is indexed.
fn load_models(opts: &EvalOptions) -> Result<Models> {
    let transform = opts.transform.kind;
    let rerankers = [opts.rerank.as_ref().map(|r| &r.reranker), opts.full_rerank.as_ref().map(|f| &f.reranker)];
    let llm_reranker = rerankers.iter().flatten().any(|r| r.kind() == RerankerKind::Llm);
    let llm = if transform.needs_llm() || llm_reranker {
        let llm = ragtune::load_llm(&opts.llm)?.ok_or_else(|| {
            Error::invalid_input(format!(
                "--transform {transform} and the reranker `llm` need an LLM: pass --llm-url URL or set $RAGTUNE_LLM_URL (`cargo xtask llm start` runs a local one)"
            ))
        })?;
        Some(llm)
    } else {
        None
    };
    // The rerankers are loaded before anything is indexed: a model that does not load ends the run at once.
    let build = |r: &crate::rerank::EvalReranker| r.build(llm.as_ref(), &opts.llm, &opts.embedding);
    let budget_reranker = opts.rerank.as_ref().map(|r| build(&r.reranker)).transpose()?;
    let full_reranker = opts.full_rerank.as_ref().map(|f| build(&f.reranker).map(|b| (b, f.depth))).transpose()?;
    let retrieval_weight = opts.full_rerank.as_ref().map_or(0.0, |f| f.retrieval_weight);
    if !(0.0..=1.0).contains(&retrieval_weight) {
        return Err(Error::invalid_input(format!("--rerank-retrieval-weight {retrieval_weight} is outside [0, 1]")));
    }
    Ok(Models { llm, budget_reranker, full_reranker, retrieval_weight })
}

/// The report's `config`: everything that determined the numbers (most settings only when they are on, so that
/// reports compare with the baselines made before they existed).
fn report_config(
    opts: &EvalOptions,
    strategy: Strategy,
    models: &Models,
    embedder: Option<&std::sync::Arc<dyn ragtune::core::Embedder>>,
) -> serde_json::Value {
    let transform = opts.transform.kind;
    let mut config = serde_json::json!({
        "retriever": opts.retriever,
        "top_k": opts.top_k,
        "bm25": { "k1": opts.bm25.k1, "b": opts.bm25.b, "avg_doc_len": opts.bm25.avg_doc_len },
        "chunking": opts.chunking_key(),
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
    // Only beside chunking, so that whole-document reports compare with the baselines made before they existed.
    if opts.chunking == EvalChunking::Passages {
        config["doc_score"] = opts.doc_score.to_string().into();
        config["passage_depth"] = opts.passage_depth().into();
    }
    if opts.header_boost > 0.0 {
        config["header_boost"] = opts.header_boost.into();
    }
    // Only with a full rerank, so that reports without one compare with the baselines made before it existed.
    if let Some(((_, described), depth)) = &models.full_reranker {
        config["rerank"] = described.clone();
        config["rerank"]["depth"] = (*depth).into();
        // Only when set, so that reports of the reranker alone compare with those made before it existed.
        if models.retrieval_weight > 0.0 {
            config["rerank"]["retrieval_weight"] = models.retrieval_weight.into();
        }
    }
    if let Some(e) = embedder {
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
        // Level weights likewise: a report made with them never compares with a baseline made without.
        if h.level_slope > 0.0 {
            config["fusion"]["levels"] =
                serde_json::json!({ "bm25": h.bm25_level, "dense": h.dense_level, "slope": h.level_slope });
        }
    }
    config
}

/// What [`open_index`] opened.
pub(crate) struct IndexOpened {
    pub(crate) engine: Engine,
    cached: bool,
    pub(crate) location: String,
    seconds: f64,
    /// Passages longer than the model's window (with dense vectors).
    truncated: Option<usize>,
    /// Searchable passages.
    passages: Option<usize>,
}

/// Opens the cached index of a BEIR corpus for the options' BM25, embedding and chunking settings, building it when
/// no complete one exists (or `opts.reindex`): the engine, whether the index was cached, where it lives, the seconds
/// indexing took and the passages the model truncated.
pub(crate) async fn open_index(
    opts: &EvalOptions,
    name: &str,
    corpus: &[ragtune::core::Document],
    embedder: Option<std::sync::Arc<dyn ragtune::core::Embedder>>,
    llm: Option<std::sync::Arc<dyn ragtune::core::Llm>>,
    log: &mut dyn FnMut(&str),
) -> Result<IndexOpened> {
    let chunking = opts.chunking_key();
    let data_corpus = corpus;
    // The index depends on the corpus bytes and on everything that changes the stored vectors.
    let key = index_key(opts, embedder.as_ref())?;
    let key_hash = xxhash_rust::xxh3::xxh3_64(key.as_bytes());
    let store_dir = opts.cache_dir.join(format!("{name}-{key_hash:016x}"));
    let marker = store_dir.join(COMPLETE_MARKER);
    // Each backend reads its own field: a directory in the cache, or a collection of its own on the server.
    let store = StoreConfig {
        backend: opts.store,
        path: store_dir.join("store"),
        qdrant: QdrantSettings { collection: format!("ragtune-eval-{name}-{key_hash:016x}"), ..opts.qdrant.clone() },
        ..StoreConfig::default()
    };
    let local = ragtune::stores::kind(opts.store).local;
    let cached = reuse_or_clear(local, opts.reindex, &store, &store_dir, &marker).await?;
    let location = store.location();
    let cfg = Config {
        store,
        bm25: opts.bm25,
        hybrid: opts.hybrid,
        embedding: opts.embedding.clone(),
        transform: opts.transform.clone(),
        chunking: opts.chunker,
        search: SearchSettings { header_boost: opts.header_boost, ..SearchSettings::default() },
        ..Config::default()
    };
    let mut engine = Engine::open_with_embedder(cfg, embedder.clone()).await?.with_llm(llm.clone());
    let started = Instant::now();
    // Documents the model truncated: counted when indexing, kept in the completion marker for later runs (`None`
    // for a cache written before the count existed).
    let dense = embedder.is_some();
    let (truncated, passages) = if cached {
        log(&format!("using the cached index {location}"));
        let marked = std::fs::read(&marker)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .unwrap_or_default();
        let count = |field: &str| marked[field].as_u64().and_then(|n| usize::try_from(n).ok());
        (count("truncated"), count("passages"))
    } else {
        log(&format!("indexing {} documents into {location} ({chunking})", data_corpus.len()));
        let report = engine.index_documents(data_corpus, opts.index_chunking(), &mut |_, _| {}).await?;
        if local {
            let marked = serde_json::json!({ "key": key, "truncated": report.truncated, "passages": report.passages });
            std::fs::write(&marker, serde_json::to_vec_pretty(&marked).unwrap_or_default())
                .map_err(|e| Error::permanent(format!("cannot write {}", marker.display())).with_source(e))?;
        }
        (Some(report.truncated), Some(report.passages))
    };
    let truncated = truncated.filter(|_| dense);
    let seconds = started.elapsed().as_secs_f64();
    if let Some(n) = truncated.filter(|&n| n > 0) {
        log(&truncation_warning(opts, n, data_corpus.len(), passages));
    }
    Ok(IndexOpened { engine, cached, location, seconds, truncated, passages })
}

/// The cache key of an index: the corpus bytes and everything that changes the stored vectors.
fn index_key(opts: &EvalOptions, embedder: Option<&std::sync::Arc<dyn ragtune::core::Embedder>>) -> Result<String> {
    let chunking = opts.chunking_key();
    let corpus_hash = hash_file(&opts.dataset.join("corpus.jsonl"))?;
    let dense_key = embedder.map_or_else(
        || "none".to_owned(),
        |e| {
            let (spec, emb) = (e.spec(), &opts.embedding);
            let tails = if emb.strip_vectors_past_window { "+tails" } else { "" };
            format!("{}/{}/max_length={}/strips={}{tails}", spec.model_id, spec.dim, emb.max_length, emb.strip_vectors)
        },
    );
    Ok(format!(
        "{corpus_hash:016x}-bm25-k1={}-b={}-avgdl={:?}-dense={dense_key}-{chunking}",
        opts.bm25.k1, opts.bm25.b, opts.bm25.avg_doc_len
    ))
}

/// Whether the index in `store` can be used as it is: a `local` store's complete index (its `marker` written) unless
/// `reindex`, an incomplete or unwanted one removed; a remote store is emptied and never counts as cached.
async fn reuse_or_clear(
    local: bool,
    reindex: bool,
    store: &StoreConfig,
    store_dir: &Path,
    marker: &Path,
) -> Result<bool> {
    if local {
        let cached = marker.is_file() && !reindex;
        if !cached && store_dir.exists() {
            // An incomplete or unwanted index: start over rather than evaluate a partial one.
            std::fs::remove_dir_all(store_dir).map_err(|e| {
                Error::permanent(format!("cannot clear the cached index {}", store_dir.display())).with_source(e)
            })?;
        }
        Ok(cached)
    } else {
        // A remote store has no completion marker beside it: it is rebuilt on every run, from empty.
        ragtune::stores::clear_store(store).await?;
        Ok(false)
    }
}

/// The warning logged when `n` documents (or passages, with chunking) are longer than the embedding model's window.
fn truncation_warning(opts: &EvalOptions, n: usize, documents: usize, passages: Option<usize>) -> String {
    match opts.chunking {
        EvalChunking::Whole => format!(
            "warning: {n} of {} documents are longer than the embedding model's {}-token window: their dense \
             vectors see only their beginning (`--chunking passages` chunks long documents)",
            documents, opts.embedding.max_length
        ),
        EvalChunking::Passages => format!(
            "warning: {n} of {} passages are longer than the embedding model's {}-token window: their dense \
             vectors see only their beginning (a smaller `[chunking] chunk_size` makes every passage fit)",
            passages.map_or_else(|| "the".to_owned(), |p| p.to_string()),
            opts.embedding.max_length
        ),
    }
}

/// A ranked list of chunks as a `trec_eval` run of documents: a document counts once, at its best-ranked chunk,
/// with that chunk's score (`DocScore::Max`).
pub(crate) fn document_run(list: &[ragtune::core::Candidate]) -> Vec<(String, f32)> {
    let mut seen = HashSet::new();
    list.iter().filter(|c| seen.insert(c.chunk.doc_id.as_str())).map(|c| (c.chunk.doc_id.clone(), c.score)).collect()
}

/// The document run of a list whose first passages were reranked (`head`, in the reranker's order, with its
/// scores) above the passages below the rerank depth (`tail`, in retrieval order with retrieval scores): the
/// documents with a reranked passage, scored by `how` from their reranked passages only (the two kinds of score
/// do not mix), then the documents found only below the depth, in the order `how` gives them from their retrieval
/// scores, scored below every reranked one.
#[must_use]
pub fn reranked_document_run(
    head: &[ragtune::core::Candidate],
    tail: &[ragtune::core::Candidate],
    how: DocScore,
) -> Vec<(String, f32)> {
    let mut run = document_run_with(head, how);
    let reranked: HashSet<String> = run.iter().map(|(d, _)| d.clone()).collect();
    let rest: Vec<ragtune::core::Candidate> =
        tail.iter().filter(|c| !reranked.contains(&c.chunk.doc_id)).cloned().collect();
    let floor = run.iter().map(|(_, s)| *s).fold(f32::INFINITY, f32::min);
    let floor = if floor.is_finite() { floor } else { 0.0 };
    for (i, (doc, _)) in document_run_with(&rest, how).into_iter().enumerate() {
        run.push((doc, floor - 1.0 - i as f32));
    }
    run
}

/// The reranked head and the tail as one list whose scores follow its order (the passage-level run reads scores):
/// the head keeps the reranker's scores, the tail scores below the head's lowest, one apart.
fn reranked_list(
    mut head: Vec<ragtune::core::Candidate>,
    tail: Vec<ragtune::core::Candidate>,
) -> Vec<ragtune::core::Candidate> {
    let floor = head.last().map_or(0.0, |c| c.score);
    head.extend(tail.into_iter().enumerate().map(|(i, mut c)| {
        c.score = floor - 1.0 - i as f32;
        c
    }));
    head
}

/// A ranked list of chunks (best first) as a `trec_eval` run of documents scored by `how`: each document once,
/// ordered by its score, ties by the rank of its best chunk. `Max` is [`document_run`]; `Sum(n)` and `Mean(n)`
/// aggregate a document's first `n` chunks of the list (its best `n` retrieved passages).
#[must_use]
pub fn document_run_with(list: &[ragtune::core::Candidate], how: DocScore) -> Vec<(String, f32)> {
    let n = match how {
        DocScore::Max => return document_run(list),
        DocScore::Sum(n) | DocScore::Mean(n) => n,
    };
    // Per document, in order of its best chunk: the scores of its first `n` chunks.
    let mut order: Vec<(&str, Vec<f32>)> = Vec::new();
    let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for c in list {
        let i = *at.entry(c.chunk.doc_id.as_str()).or_insert_with(|| {
            order.push((c.chunk.doc_id.as_str(), Vec::new()));
            order.len() - 1
        });
        if order[i].1.len() < n {
            order[i].1.push(c.score);
        }
    }
    let mut run: Vec<(usize, String, f32)> = order
        .into_iter()
        .enumerate()
        .map(|(rank, (doc, scores))| {
            let sum: f32 = scores.iter().sum();
            let score = if matches!(how, DocScore::Mean(_)) { sum / scores.len().max(1) as f32 } else { sum };
            (rank, doc.to_owned(), score)
        })
        .collect();
    run.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    run.into_iter().map(|(_, doc, score)| (doc, score)).collect()
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
    if let Some(p) = &r.passage_level {
        out.push_str(&format!("passage level ({} queries)\n", p.queries));
        for (k, v) in &p.metrics {
            out.push_str(&format!("{k:<12} {v:>8.4}\n"));
        }
    }
    if let Some(n) = r.truncated_documents.filter(|&n| n > 0) {
        out.push_str(&format!("truncated    {n} documents longer than the model's window\n"));
    }
    if let Some(n) = r.truncated_passages.filter(|&n| n > 0) {
        out.push_str(&format!(
            "truncated    {n} of {} passages longer than the model's window\n",
            r.passages.map_or_else(|| "?".to_owned(), |p| p.to_string())
        ));
    }
    if let Some(rr) = r.config.get("rerank") {
        let model = rr["model"].as_str().map(|m| format!(" ({m})")).unwrap_or_default();
        out.push_str(&format!(
            "reranked     the top {} passages by {}{model}; the metrics are the reranked run's\n",
            rr["depth"],
            rr["reranker"].as_str().unwrap_or("?")
        ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune::core::{Candidate, Chunk};

    /// Renders the document run of a chunk list (`(chunk id, doc id, score)`, best first) scored by `how`.
    fn check(list: &[(&str, &str, f32)], how: &str, expect: &str) {
        let list: Vec<Candidate> = list
            .iter()
            .map(|&(id, doc, score)| Candidate { chunk: Chunk::new(id, doc, "t"), score, sources: BTreeMap::new() })
            .collect();
        let run = document_run_with(&list, how.parse().unwrap());
        let got: Vec<String> = run.iter().map(|(d, s)| format!("{d} {s:.2}")).collect();
        assert_eq!(got.join(", "), expect);
    }

    const LIST: [(&str, &str, f32); 6] = [
        ("a#0", "a", 0.9),
        ("b#0", "b", 0.8),
        ("b#1", "b", 0.7),
        ("c#0", "c", 0.6),
        ("b#2", "b", 0.5),
        ("a#1", "a", 0.1),
    ];

    #[tokio::test]
    async fn rerank_settings_are_checked_before_anything_is_indexed() {
        let dir = tempfile::tempdir().unwrap();
        ragtune_testkit::fixtures::tiny_beir(&dir.path().join("tiny"));
        let mut opts = EvalOptions::new(dir.path().join("tiny"));
        opts.cache_dir = dir.path().join("cache");
        // An LLM is configured (nothing listens there), so only the reranking settings are wrong.
        opts.llm.url = "http://127.0.0.1:9".into();
        opts.llm.cache = false;
        let cross_encoder = crate::rerank::EvalReranker::new(RerankerKind::CrossEncoder, None);
        let rerank = crate::rerank::RerankEvalOptions {
            reranker: cross_encoder.clone(),
            budgets: vec![0.5, 2.0],
            ..Default::default()
        };
        opts.rerank = Some(rerank);
        let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the reranker `cross-encoder` needs a model: pass --rerank-model DIR; rerank budgets are fractions in \
             (0, 1], got 2"
        );
        // A full rerank likewise: its model, then its depth.
        opts.rerank = None;
        opts.top_k = 10;
        opts.full_rerank = Some(crate::rerank::FullRerank { reranker: cross_encoder, depth: 5, retrieval_weight: 0.0 });
        let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("--rerank-model DIR"), "{err}");
        let model = Some("/nonexistent/cross-encoder".to_owned());
        let reranker = crate::rerank::EvalReranker::new(RerankerKind::CrossEncoder, model);
        opts.full_rerank =
            Some(crate::rerank::FullRerank { reranker: reranker.clone(), depth: 31, retrieval_weight: 0.0 });
        let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "--rerank-depth must be between 1 and the 30 passages retrieved per query (--top-k 10 × 3 passages per \
             document), got 31"
        );
        // A model that does not load ends the run before anything is indexed, and no LLM was asked for.
        opts.llm.url = String::new();
        opts.full_rerank = Some(crate::rerank::FullRerank { reranker, depth: 30, retrieval_weight: 0.0 });
        let err = run_eval(&opts, &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("/nonexistent/cross-encoder"), "{err}");
        assert!(!opts.cache_dir.exists(), "nothing was indexed or retrieved");
    }

    #[test]
    fn documents_are_scored_from_their_passages() {
        check(&LIST, "max", "a 0.90, b 0.80, c 0.60");
        check(&LIST, "sum:2", "b 1.50, a 1.00, c 0.60");
        check(&LIST, "sum:3", "b 2.00, a 1.00, c 0.60");
        check(&LIST, "sum:1", "a 0.90, b 0.80, c 0.60");
        // The mean is over the passages retrieved (at most N): c's one passage is its mean.
        check(&LIST, "mean:2", "b 0.75, c 0.60, a 0.50");
        check(&LIST, "mean:3", "b 0.67, c 0.60, a 0.50");
        check(&[], "sum:2", "");
    }

    /// Renders the document run of a reranked head over a tail (`(chunk id, doc id, score)`) scored by `how`.
    fn check_reranked(head: &[(&str, &str, f32)], tail: &[(&str, &str, f32)], how: &str, expect: &str) {
        let list = |l: &[(&str, &str, f32)]| -> Vec<Candidate> {
            l.iter()
                .map(|&(id, doc, score)| Candidate { chunk: Chunk::new(id, doc, "t"), score, sources: BTreeMap::new() })
                .collect()
        };
        let run = reranked_document_run(&list(head), &list(tail), how.parse().unwrap());
        let got: Vec<String> = run.iter().map(|(d, s)| format!("{d} {s:.2}")).collect();
        assert_eq!(got.join(", "), expect);
    }

    #[test]
    fn reranked_documents_come_first_and_the_rest_keep_their_order_below() {
        // Logits may be negative; the documents only below the depth score under the lowest reranked one.
        let head = [("b#0", "b", 2.0), ("a#0", "a", -1.0)];
        let tail = [("c#0", "c", 9.0), ("b#1", "b", 8.0), ("d#0", "d", 7.0)];
        check_reranked(&head, &tail, "max", "b 2.00, a -1.00, c -2.00, d -3.00");
        // With sum:N a document is scored from its reranked passages only: b's passage below the depth (a
        // retrieval score) is not added to its logit.
        check_reranked(&head, &tail, "sum:2", "b 2.00, a -1.00, c -2.00, d -3.00");
        check_reranked(&[], &tail, "max", "c -1.00, b -2.00, d -3.00");
    }

    #[test]
    fn equal_aggregates_keep_the_order_of_the_best_passage() {
        check(&[("x#0", "x", 0.5), ("y#0", "y", 0.5), ("x#1", "x", 0.5), ("y#1", "y", 0.5)], "sum:2", "x 1.00, y 1.00");
    }

    #[test]
    fn doc_score_and_chunking_parse_and_print() {
        for s in ["max", "sum:3", "mean:1"] {
            assert_eq!(s.parse::<DocScore>().unwrap().to_string(), s);
        }
        for bad in ["", "min", "sum", "sum:0", "mean:x", "sum:-1"] {
            let e = bad.parse::<DocScore>().unwrap_err();
            assert!(e.message().contains("max, sum:N, mean:N"), "{bad}: {e}");
        }
        assert_eq!("passages".parse::<EvalChunking>().unwrap(), EvalChunking::Passages);
        assert_eq!("whole".parse::<EvalChunking>().unwrap().to_string(), "whole");
        assert!("sections".parse::<EvalChunking>().is_err());
        assert_eq!(EvalChunking::default(), EvalChunking::Passages);
    }

    #[test]
    fn the_cache_key_and_depth_follow_the_chunking() {
        let mut opts = EvalOptions::new("d");
        assert_eq!(opts.chunking_key(), "passages/size=100/overlap=20/section=1000");
        assert_eq!(opts.passage_depth(), 300);
        assert!(matches!(opts.index_chunking(), Chunking::Auto(_)));
        opts.chunking = EvalChunking::Whole;
        // The key of whole documents is the one caches had before chunking existed.
        assert_eq!(opts.chunking_key(), "whole-documents");
        assert_eq!(opts.passage_depth(), 100);
        assert_eq!(opts.index_chunking(), Chunking::WholeDocuments);
    }
}
