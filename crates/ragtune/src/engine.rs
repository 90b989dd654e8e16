//! The Engine: wires loaders, chunker, BM25 encoder, dense embedder, embedded store and retrievers from a
//! [`Config`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ragtune_core::{
    Candidate, Chunk, ChunkKind, Ctx, Document, Embedder, Error, ErrorKind, Llm, Query, Record, Reranker, Result,
    Retriever, SpanVector, SparseEncoder, StoreStats, TextRole, TokenCounter, TraceEvent, TraceSink, VectorStore,
    WebSearch, WriteBatch,
};
use ragtune_embed::{Bm25Config, Bm25Encoder};
use ragtune_ingest::{ChunkerConfig, LoadIssue, Loaded};
use ragtune_retrieve::{DenseRetriever, HybridRetriever, SparseRetriever};
use ragtune_store::EmbeddedStore;
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::config::{EmbeddingMode, EvaluatorKind, RerankerKind, ScorerKind, SentenceScorer, Strategy, Transform};
use crate::models::RequestVectors;
use crate::stores::{OpenStore, open_store};

/// How documents become chunks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Chunking {
    /// One passage per document (BEIR-style corpora of abstracts or passages).
    WholeDocuments,
    /// Header-aware sections with child passages for every document.
    Sections(ChunkerConfig),
    /// Sections and passages for Markdown (so header paths are kept); for other documents, one passage when they
    /// fit in one chunk, sections and passages otherwise.
    Auto(ChunkerConfig),
    /// As `Auto`, except that Markdown documents are cut to fit the embedding model's window
    /// ([`ragtune_ingest::chunk_markdown`]): heading sections, then passages of whole blocks (paragraphs, lists,
    /// code blocks, tables) of at most `chunk_size` words whose indexed text fits the window, counted with the
    /// loaded model's tokenizer ([`Engine::token_counter`]), else estimated ([`ragtune_ingest::EstimatedTokens`]
    /// over `embedding.max_length`); `chunk_overlap` is not used for them. What [`Engine::index_path`] uses; the
    /// evaluations keep `Auto` or `WholeDocuments`, so their numbers do not move.
    Window(ChunkerConfig),
}

/// What an indexing run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IndexReport {
    /// Documents indexed.
    pub documents: usize,
    /// Searchable passages written.
    pub passages: usize,
    /// Parent sections written (stored for context, not searched).
    pub sections: usize,
    /// Problems that skipped a line or a file; everything else was indexed.
    pub issues: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Passages longer than the embedding model's window (`embedding.max_length` tokens): their dense vector was
    /// computed from their beginning only. Chunk long documents so that every passage fits.
    #[serde(default)]
    pub truncated: usize,
    /// The store after indexing.
    pub store: StoreStats,
}

/// A search answer with its trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SearchResponse {
    /// Ranked candidates.
    pub hits: Vec<Candidate>,
    /// What the engine did.
    pub trace: Vec<TraceEvent>,
}

/// Documents are written in batches of about this many chunks: large enough to amortise a commit and an embedding
/// call, small enough to keep progress moving and memory flat.
const BATCH_CHUNKS: usize = 256;

/// The ragtune engine on the configured store (the embedded store by default, or Qdrant).
///
/// It indexes documents with BM25 and, when the embedding model is available, dense vectors; it answers queries
/// with BM25, dense or hybrid retrieval (fused as `[hybrid]` says), with query transformations and routing around them; and it answers
/// questions with the whole corrective pipeline ([`ask`](Self::ask), [`query`](Self::query)).
#[derive(Debug, Clone)]
pub struct Engine {
    config: Config,
    store: OpenStore,
    encoder: Option<Arc<Bm25Encoder>>,
    embedder: Option<Arc<dyn Embedder>>,
    /// The embedding model's tokenizer, which [`Chunking::Window`] counts with; `None` without a loaded model.
    tokens: Option<Arc<dyn TokenCounter>>,
    /// The language model for query transformations; `None` when no URL is configured.
    llm: Option<Arc<dyn Llm>>,
    /// The cross-encoder of `[rerank]`, loaded once when reranking is enabled with `reranker = "cross-encoder"`
    /// (`None` otherwise), or the engine's note saying why it did not load.
    cross_encoder: Option<CrossEncoderSlot>,
    /// Why a capability is off (for example "dense retrieval is off: models are not provisioned"), shown in traces.
    notes: Vec<String>,
    /// The web search provider Corrective RAG falls back to on INCORRECT; none unless set.
    web: Option<Arc<dyn WebSearch>>,
    /// The resilience counters of each provider of the `[web]` stack (calls, retries, breaker trips), by name,
    /// for `/metrics`; empty when `with_web` set another provider.
    web_stats: WebStats,
    /// The page fetcher of `[web.fetch]` (when `enabled`): reads the pages of web results whose snippets are too
    /// short to answer from, with its address guards.
    fetcher: Option<Fetcher>,
    /// Retrieval and evaluation caches of the answer pipeline.
    caches: Option<crate::pipeline::PipelineCaches>,
    /// Set once the store has been seen holding dense vectors, after which [`resolve`](Self::resolve) no longer
    /// asks the store for its counts on every query (Qdrant answers them with four calls, one a facet over every
    /// document). Dense vectors, once there, are not expected to vanish; if every one is deleted, dense retrieval
    /// returns no hits instead of the explanation.
    dense_seen: Arc<AtomicBool>,
    /// The parts built once per configuration and reused by every question (retrievers, the CRAG evaluator, the
    /// faithfulness judge); a new configuration, LLM or BM25 encoder starts an empty set.
    built: Arc<Built>,
}

/// The parts an engine builds on first use and keeps: no question builds its retriever, evaluator or judge again
/// (nor reads the synonym file again).
#[derive(Default)]
pub(crate) struct Built {
    /// By resolved strategy and transformation: the retriever with its transformation and header boost around it.
    retrievers: std::sync::Mutex<std::collections::HashMap<(Strategy, Transform), Arc<dyn Retriever>>>,
    /// The Corrective-RAG evaluator (a failure to build is not kept: the next question tries again).
    pub(crate) evaluator: std::sync::OnceLock<Arc<dyn ragtune_core::RelevanceEvaluator>>,
    /// The faithfulness judge.
    pub(crate) judge: std::sync::OnceLock<Arc<ragtune_evaluators::faithfulness::FaithfulnessJudge>>,
    /// The synonym table (`transform.synonyms`, else the built-in one), read once.
    synonyms: std::sync::OnceLock<Arc<ragtune_retrieve::transform::SynonymTable>>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let retrievers = self.retrievers.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("Built").field("retrievers", &retrievers).finish_non_exhaustive()
    }
}

/// The settings the built parts depend on: two configurations with the same key share them (a request that only
/// changes `top_k`, the deadline or whether CRAG or the web runs builds nothing).
fn built_key(config: &Config) -> String {
    let c = &config.crag;
    serde_json::json!({
        "search": config.search, "hybrid": config.hybrid, "transform": config.transform,
        "crag": [&c.evaluator, &c.heuristic, &c.model, &c.scorer, &c.learned],
        "judge": config.judge, "judge_with_llm": config.pipeline.judge_with_llm, "rerank": config.rerank,
    })
    .to_string()
}

/// The page fetcher of `[web.fetch]`, shared by the engine's clones.
type Fetcher = Arc<ragtune_web::PageFetcher>;

/// Each web provider's resilience counters, by name, in registration order.
pub type WebStats = Vec<(String, Arc<ragtune_web::resilience::ResilienceStats>)>;

/// The one web stack of an engine: the search, its providers' counters and the page fetcher.
type WebParts = (Option<Arc<dyn WebSearch>>, WebStats, Option<Fetcher>);

/// A loaded cross-encoder, or why it is not (`the cross-encoder did not load: …`); the engine opens without it.
type CrossEncoderSlot = std::result::Result<Arc<dyn Reranker>, String>;

/// What loading the cross-encoder depends on (so that a new configuration reloads it only when one changes).
#[derive(PartialEq)]
struct CrossEncoderKey<'c> {
    model: &'c Option<String>,
    max_length: usize,
    batch_size: usize,
    ort_library: &'c Option<PathBuf>,
    threads: usize,
}

/// What uses the `[rerank]` cross-encoder under `config`, as the engine's notes name them: reranking (when
/// enabled), the model-based CRAG evaluator's scorer (`[crag] evaluator = "model"`, `scorer = "cross_encoder"`,
/// whether or not CRAG is on, since a request may turn it on) and the extractive answer's sentence scorer.
fn cross_encoder_users(config: &Config) -> Vec<&'static str> {
    let mut users = Vec::new();
    if config.rerank.enabled && config.rerank.reranker == RerankerKind::CrossEncoder {
        users.push("reranking");
    }
    if config.crag.evaluator == EvaluatorKind::Model && config.crag.scorer == ScorerKind::CrossEncoder {
        users.push("the CRAG evaluator's cross-encoder scorer");
    }
    if config.pipeline.sentence_scorer == SentenceScorer::CrossEncoder {
        users.push("cross-encoder sentence scoring of extractive answers");
    }
    users
}

/// What loading the cross-encoder of `config` depends on: `None` when nothing uses it or `[rerank] reranker` is
/// not the cross-encoder (the model is `[rerank]`'s).
fn cross_encoder_key(config: &Config) -> Option<CrossEncoderKey<'_>> {
    let (r, e) = (&config.rerank, &config.embedding);
    (r.reranker == RerankerKind::CrossEncoder && !cross_encoder_users(config).is_empty()).then_some(CrossEncoderKey {
        model: &r.model,
        max_length: r.max_length,
        batch_size: r.batch_size,
        ort_library: &e.ort_library,
        threads: e.threads,
    })
}

/// Loads the cross-encoder `config` asks for; a model that does not load leaves the engine without it (degrade,
/// don't fail), and [`cross_encoder_notes`] say so.
fn load_cross_encoder(config: &Config) -> Option<CrossEncoderSlot> {
    cross_encoder_key(config)?;
    Some(
        crate::models::load_cross_encoder(&config.rerank, &config.embedding)
            .map_err(|e| format!("the cross-encoder did not load: {}", e.message())),
    )
}

/// The engine's notes about the cross-encoder under `config` with `slot` loaded: what is off because it did not
/// load, or because a scorer asks for it while `[rerank] reranker` is not the cross-encoder.
fn cross_encoder_notes(config: &Config, slot: Option<&CrossEncoderSlot>) -> Vec<String> {
    let users = cross_encoder_users(config);
    let list = |users: &[&str]| match users {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    let off = |users: &[&str]| if users.len() == 1 { "is off" } else { "are off" };
    match slot {
        Some(Err(why)) => vec![format!("{} {}: {why}", list(&users), off(&users))],
        Some(Ok(_)) => Vec::new(),
        None if config.rerank.reranker == RerankerKind::CrossEncoder && !users.is_empty() => {
            vec![format!("{} {}: no cross-encoder is loaded", list(&users), off(&users))]
        }
        None => {
            // Reranking asks for the reranker it names; the scorers ask for the cross-encoder whatever it names.
            let scorers: Vec<&str> = users.into_iter().filter(|u| *u != "reranking").collect();
            if scorers.is_empty() {
                return Vec::new();
            }
            vec![format!(
                "{} {}: it scores with the [rerank] cross-encoder, and [rerank] reranker is not \"cross-encoder\" \
                 (set reranker = \"cross-encoder\" and model)",
                list(&scorers),
                off(&scorers)
            )]
        }
    }
}

/// The one web stack of an engine, built from `[web]`: the multi-provider search, its providers' counters and the
/// page fetcher (when `[web.fetch] enabled`); none of them when the section is off.
fn web_stack(config: &Config) -> Result<WebParts> {
    Ok(match config.web.build()? {
        Some(stack) => (Some(stack.search as Arc<dyn WebSearch>), stack.stats, stack.fetcher.map(Arc::new)),
        None => (None, Vec::new(), None),
    })
}

impl Engine {
    /// Opens (or creates) the store named by the configuration and loads the embedding model when configured and
    /// available. An existing store dictates the BM25 parameters it was built with; the configuration's apply to a
    /// new store.
    ///
    /// # Errors
    /// Store errors (locked, corrupt); a store built by another sparse encoder or embedding model; a missing model
    /// when `embedding.mode = "on"`.
    pub async fn open(config: Config) -> Result<Self> {
        let mut notes = Vec::new();
        let (embedder, tokens) = match config.embedding.mode {
            EmbeddingMode::Off => (None, None),
            mode => match crate::models::load_embedder_and_tokens(&config.embedding) {
                Ok((e, t)) => (Some(e), Some(t)),
                Err(e) if mode == EmbeddingMode::Auto && e.kind() == ErrorKind::Unavailable => {
                    notes.push(format!("dense retrieval is off: {}", e.message()));
                    (None, None)
                }
                Err(e) => return Err(e),
            },
        };
        let llm = crate::models::load_llm(&config.llm)?;
        let mut engine = Self::open_with_embedder(config, embedder).await?.with_llm(llm).with_token_counter(tokens);
        engine.notes.extend(notes);
        Ok(engine)
    }

    /// Opens the store with the given embedder (or none) instead of the configured model; for tests and for
    /// embedders of your own.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub async fn open_with_embedder(config: Config, embedder: Option<Arc<dyn Embedder>>) -> Result<Self> {
        let store = open_store(&config.store).await?;
        let stats = store.store.stats(&Ctx::new()).await?;
        let encoder = match &stats.sparse_spec {
            Some(spec) => Some(Arc::new(Bm25Encoder::new(Bm25Config::from_spec_id(&spec.encoder_id)?)?)),
            None => None,
        };
        if let (Some(have), Some(e)) = (&stats.dense_spec, &embedder)
            && have != e.spec()
        {
            return Err(Error::mismatch(format!(
                "the store at {} was built with the embedding model `{}` ({} dimensions); the configured model is `{}` ({} dimensions): use the same model, another store, or embedding.mode = \"off\"",
                config.store.location(),
                have.model_id,
                have.dim,
                e.spec().model_id,
                e.spec().dim
            )));
        }
        let caches = crate::pipeline::PipelineCaches::new(&config);
        let (web, web_stats, fetcher) = web_stack(&config)?;
        let mut notes = Vec::new();
        if config.web.enabled && config.web.settings.providers.is_empty() {
            notes.push(
                "web search is enabled ([web] enabled = true) but no provider is configured: nothing is searched \
                 (add a [web.providers.NAME] section, docs/web.md)"
                    .to_owned(),
            );
        }
        let cross_encoder = load_cross_encoder(&config);
        notes.extend(cross_encoder_notes(&config, cross_encoder.as_ref()));
        Ok(Self {
            config,
            store,
            encoder,
            embedder,
            tokens: None,
            llm: None,
            cross_encoder,
            notes,
            web,
            web_stats,
            fetcher,
            caches,
            dense_seen: Arc::default(),
            built: Arc::default(),
        })
    }

    /// Uses `web` as the web search provider Corrective RAG falls back to when the retrieval is judged INCORRECT
    /// or AMBIGUOUS, instead of the one `[web]` configures (`None` turns web search off).
    #[must_use]
    pub fn with_web(mut self, web: Option<Arc<dyn WebSearch>>) -> Self {
        self.web = web;
        self.web_stats = Vec::new();
        self
    }

    /// The same store, models and LLM under another configuration (for evaluations that vary pipeline settings
    /// on one index). The store settings must not change.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when the new configuration names another store or
    /// is invalid.
    pub fn reconfigure(mut self, config: Config) -> Result<Self> {
        if config.store != self.config.store {
            return Err(Error::invalid_input("reconfigure cannot change the store"));
        }
        config.validate()?;
        self.caches = crate::pipeline::PipelineCaches::new(&config);
        if config.web != self.config.web {
            (self.web, self.web_stats, self.fetcher) = web_stack(&config)?;
        }
        let old = cross_encoder_notes(&self.config, self.cross_encoder.as_ref());
        self.notes.retain(|n| !old.contains(n));
        if cross_encoder_key(&config) != cross_encoder_key(&self.config) {
            self.cross_encoder = load_cross_encoder(&config);
        }
        self.notes.extend(cross_encoder_notes(&config, self.cross_encoder.as_ref()));
        self.built = Arc::default();
        self.config = config;
        Ok(self)
    }

    /// This engine under a per-request variant of its configuration (`commands::AskOptions`): the caches are
    /// shared (their keys carry a fingerprint of the configuration), and so is the one web stack of the process
    /// with its rate limits and circuit breakers. A request can turn web search off, never on where the
    /// configuration has it off (no request builds a stack of its own).
    pub(crate) fn for_request(&self, config: Config) -> Result<Self> {
        if config.store != self.config.store {
            return Err(Error::invalid_input("a request cannot change the store"));
        }
        if config.web.settings != self.config.web.settings || (config.web.enabled && !self.config.web.enabled) {
            return Err(Error::invalid_input("a request cannot turn on or change web search"));
        }
        config.validate()?;
        let mut engine = self.clone();
        if !config.web.enabled {
            engine.web = None;
        }
        if built_key(&config) != built_key(&self.config) {
            engine.built = Arc::default();
        }
        engine.config = config;
        Ok(engine)
    }

    /// The web search provider, if one is set.
    #[must_use]
    pub fn web(&self) -> Option<&Arc<dyn WebSearch>> {
        self.web.as_ref()
    }

    /// The resilience counters of the `[web]` stack's providers (empty without one, or after `with_web`).
    #[must_use]
    pub fn web_stats(&self) -> &WebStats {
        &self.web_stats
    }

    /// The page fetcher of `[web.fetch]`, when it is enabled.
    pub(crate) fn page_fetcher(&self) -> Option<&Fetcher> {
        self.fetcher.as_ref()
    }

    pub(crate) fn caches(&self) -> Option<&crate::pipeline::PipelineCaches> {
        self.caches.as_ref()
    }

    /// Uses `llm` (or none) for query transformations instead of the configured one; for tests and for models of
    /// your own.
    #[must_use]
    pub fn with_llm(mut self, llm: Option<Arc<dyn Llm>>) -> Self {
        self.llm = llm;
        self.built = Arc::default();
        self
    }

    /// The parts built once for this configuration.
    pub(crate) fn built(&self) -> &Built {
        &self.built
    }

    /// Uses `tokens` (or none) as the embedding model's tokenizer that [`Chunking::Window`] counts with, instead of
    /// the one [`open`](Self::open) takes from the loaded model; for tests and for embedders of your own (without
    /// one, Markdown is cut by an estimate of the tokens).
    #[must_use]
    pub fn with_token_counter(mut self, tokens: Option<Arc<dyn TokenCounter>>) -> Self {
        self.tokens = tokens;
        self
    }

    /// The embedding model's tokenizer as a token counter, when the model is loaded (or one was set).
    #[must_use]
    pub fn token_counter(&self) -> Option<&Arc<dyn TokenCounter>> {
        self.tokens.as_ref()
    }

    /// The language model, when one is configured.
    #[must_use]
    pub fn llm(&self) -> Option<&Arc<dyn Llm>> {
        self.llm.as_ref()
    }

    /// Uses `reranker` (or none) as the engine's cross-encoder, the one `[rerank] reranker = "cross-encoder"`
    /// would load: for reranking, the CRAG evaluator's `cross_encoder` scorer and the extractive answer's
    /// `cross-encoder` sentence scorer, when the configuration asks for them; for tests and for models of your
    /// own. The engine's notes about the cross-encoder are those of a model that loaded (or, with `None`, of
    /// none configured).
    #[must_use]
    pub fn with_cross_encoder(mut self, reranker: Option<Arc<dyn Reranker>>) -> Self {
        let old = cross_encoder_notes(&self.config, self.cross_encoder.as_ref());
        self.notes.retain(|n| !old.contains(n));
        self.cross_encoder = reranker.map(Ok);
        self.notes.extend(cross_encoder_notes(&self.config, self.cross_encoder.as_ref()));
        self
    }

    /// The cross-encoder of `[rerank]`, loaded once when something uses it (reranking, the CRAG evaluator's
    /// scorer, the extractive answer's sentence scorer).
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) saying why there is none: `[rerank] reranker` is not
    /// the cross-encoder, or the model did not load (the engine's note says so too).
    pub(crate) fn cross_encoder(&self) -> Result<Arc<dyn Reranker>> {
        match &self.cross_encoder {
            Some(Ok(reranker)) => Ok(reranker.clone()),
            Some(Err(why)) => Err(Error::unavailable(why.clone())),
            None if self.config.rerank.reranker != RerankerKind::CrossEncoder => Err(Error::unavailable(
                "the cross-encoder is the [rerank] model: set [rerank] reranker = \"cross-encoder\" and model",
            )),
            None => Err(Error::unavailable("the cross-encoder is not loaded")),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn VectorStore> {
        &self.store.store
    }

    /// The store's write generation (see [`crate::stores::OpenStore::generation`]).
    pub(crate) fn store_generation(&self) -> u64 {
        self.store.generation()
    }

    /// Whether the store can serve and take writes now, cheaply (a readiness probe).
    ///
    /// # Errors
    /// Why it cannot.
    pub async fn ready(&self) -> Result<()> {
        self.store.store.ready(&Ctx::new()).await
    }

    /// The embedded store, when that is the backend.
    #[must_use]
    pub fn embedded_store(&self) -> Option<&Arc<EmbeddedStore>> {
        self.store.embedded.as_ref()
    }

    /// The BM25 encoder, once the store has a sparse space.
    #[must_use]
    pub fn encoder(&self) -> Option<&Arc<Bm25Encoder>> {
        self.encoder.as_ref()
    }

    /// The dense embedder, when one is loaded.
    #[must_use]
    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The question-scoped vector memory of [`RequestVectors`] over the engine's embedder, seeded with the strip
    /// vectors the store keeps for `candidates`; `None` without an embedder. A store that cannot be read leaves the
    /// memory unseeded (the strips are embedded when asked for) and says so in a `refine`/`strip_vectors` trace
    /// event.
    pub async fn request_vectors(&self, ctx: &Ctx, candidates: &[Candidate]) -> Option<Arc<RequestVectors>> {
        let vectors = Arc::new(RequestVectors::new(self.embedder.clone()?));
        self.seed_strip_vectors(ctx, &vectors, candidates).await;
        Some(vectors)
    }

    /// Adds the stored strip vectors of `candidates` to `vectors` (see [`request_vectors`](Self::request_vectors)).
    pub async fn seed_strip_vectors(&self, ctx: &Ctx, vectors: &RequestVectors, candidates: &[Candidate]) {
        if candidates.is_empty() {
            return;
        }
        let ids: Vec<String> = candidates.iter().map(|c| c.chunk.id.clone()).collect();
        match self.store.store.span_vectors(ctx, &ids).await {
            Ok(spans) => {
                let added = vectors.seed(candidates, &spans);
                ctx.trace(
                    TraceEvent::new("refine", "strip_vectors").detail("chunks", ids.len()).detail("strips", added),
                );
            }
            Err(e) => ctx.trace(
                TraceEvent::new("refine", "strip_vectors")
                    .detail("error", e.to_string())
                    .detail("chunks", ids.len())
                    .detail("strips", 0),
            ),
        }
    }

    /// Why capabilities are off, if any are.
    #[must_use]
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Loads documents from `path`: a BEIR directory (with `corpus.jsonl`), a `.jsonl` file, a folder of Markdown
    /// and text files, or one such file. In a folder, files and folders that an `exclude` glob matches are skipped
    /// ([`ragtune_ingest::load_folder_excluding`]).
    ///
    /// # Errors
    /// A missing path or a source with no documents; [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for
    /// an `exclude` pattern that is not a glob, or any `exclude` pattern with a JSONL file or a BEIR directory (whose
    /// documents are lines, not files); per-line and per-file problems are returned as issues.
    pub fn load(path: &Path, exclude: &[String]) -> Result<Loaded<Document>> {
        let corpus = path.join("corpus.jsonl");
        let jsonl = if path.is_dir() && corpus.is_file() {
            Some(corpus)
        } else {
            path.extension().is_some_and(|e| e == "jsonl").then(|| path.to_path_buf())
        };
        match jsonl {
            Some(_) if !exclude.is_empty() => Err(Error::invalid_input(format!(
                "{}: exclude patterns apply to the files of a folder, not to the lines of a JSONL corpus",
                path.display()
            ))),
            Some(file) => ragtune_ingest::load_jsonl_documents(&file),
            None => ragtune_ingest::load_folder_excluding(path, exclude),
        }
    }

    /// Loads and indexes `path` (see [`load`](Self::load)) with [`Chunking::Window`]: Markdown is cut into passages
    /// that fit the embedding model's window, other documents as [`Chunking::Auto`] does.
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`index_documents`](Self::index_documents).
    pub async fn index_path(
        &mut self,
        path: &Path,
        exclude: &[String],
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<IndexReport> {
        let started = Instant::now();
        let loaded = Self::load(path, exclude)?;
        let chunking = Chunking::Window(self.config.chunking);
        let mut report = self.index_documents(&loaded.items, chunking, progress).await?;
        report.issues = loaded.issues.iter().map(LoadIssue::to_string).chain(report.issues).collect();
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Chunks, encodes (BM25 and, with an embedder, dense) and stores documents. Re-indexing a document replaces all
    /// of its chunks atomically. Afterwards the store's approximate dense index is brought up to date.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an empty document list or bad chunking settings;
    /// embedding and store errors. Documents written before a failing batch stay indexed.
    pub async fn index_documents(
        &mut self,
        docs: &[Document],
        chunking: Chunking,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<IndexReport> {
        let started = Instant::now();
        if docs.is_empty() {
            return Err(Error::invalid_input("there are no documents to index"));
        }
        let ctx = Ctx::new();
        let mut report = IndexReport::default();
        let mut per_doc: Vec<(String, Vec<Chunk>)> = Vec::with_capacity(docs.len());
        for (doc, chunks) in docs.iter().zip(self.chunk_all(docs, chunking).await?) {
            match chunks {
                Ok(chunks) => per_doc.push((doc.id.clone(), chunks)),
                Err(e) => report.issues.push(format!("document `{}`: {e}", doc.id)),
            }
        }
        let encoder = self.encoder_for(&per_doc).await?;
        if let Some(e) = &self.embedder {
            self.store.store.ensure_spaces(&ctx, Some(e.spec()), None).await?;
        }
        let total = per_doc.len();
        let mut done = 0;
        progress(0, total);
        let mut pending: Vec<(String, Vec<Chunk>)> = Vec::new();
        let mut pending_chunks = 0;
        for (doc_id, chunks) in per_doc {
            pending_chunks += chunks.len();
            pending.push((doc_id, chunks));
            if pending_chunks >= BATCH_CHUNKS {
                done += pending.len();
                self.write_batch(&ctx, &encoder, std::mem::take(&mut pending), &mut report).await?;
                pending_chunks = 0;
                progress(done, total);
            }
        }
        if !pending.is_empty() {
            done += pending.len();
            self.write_batch(&ctx, &encoder, pending, &mut report).await?;
        }
        progress(done, total);
        if self.embedder.is_some()
            && let Some(embedded) = &self.store.embedded
        {
            embedded.optimize().await?;
        }
        report.store = self.store.store.stats(&ctx).await?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Indexes one batch of documents whole, with the configured chunking: the batch is one atomic store write, so
    /// after an error or a crash either every document of it is indexed (replacing documents with the same ids) or
    /// none is. A document that cannot be chunked refuses the whole batch. Creates the store's sparse space on
    /// the first batch (which is why it takes `&mut self`; later batches can use
    /// [`index_batch_shared`](Self::index_batch_shared) beside readers). The approximate dense index is not
    /// rebuilt: see [`refresh_dense_index`](Self::refresh_dense_index).
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for an empty batch or a document that cannot be
    /// chunked; embedding and store errors (nothing of the batch is written then).
    pub async fn index_batch(&mut self, docs: &[Document]) -> Result<IndexReport> {
        let per_doc = self.chunk_whole(docs)?;
        let encoder = self.encoder_for(&per_doc).await?;
        self.write_whole(&encoder, per_doc).await
    }

    /// [`index_batch`](Self::index_batch) for a store that already has its sparse space (any batch after the
    /// first), through a shared reference: the embedding runs while readers go on.
    ///
    /// # Errors
    /// As [`index_batch`](Self::index_batch), and [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when
    /// nothing was indexed yet (the first batch must go through `index_batch`).
    pub async fn index_batch_shared(&self, docs: &[Document]) -> Result<IndexReport> {
        let per_doc = self.chunk_whole(docs)?;
        let encoder = self.encoder.clone().ok_or_else(|| {
            Error::unavailable("the store has no sparse space yet: index the first batch with `index_batch`")
        })?;
        self.write_whole(&encoder, per_doc).await
    }

    /// Brings the embedded store's approximate dense index up to date when at least `min_dirty_fraction` of its
    /// dense vectors changed since it was built (a full rebuild: readers go on with the old index meanwhile,
    /// writers wait). Whether it rebuilt.
    ///
    /// # Errors
    /// IO failures (the previous index stays in use).
    pub async fn refresh_dense_index(&self, min_dirty_fraction: f64) -> Result<bool> {
        let Some(embedded) = &self.store.embedded else { return Ok(false) };
        if self.embedder.is_none() {
            return Ok(false);
        }
        let (vectors, dirty) = embedded.dense_index_state();
        let stale = match dirty {
            // No index yet: build one once the store is large enough (optimize decides).
            None => true,
            Some(d) => d > 0 && d as f64 >= min_dirty_fraction * vectors as f64,
        };
        if !stale {
            return Ok(false);
        }
        Ok(embedded.optimize().await?.rebuilt)
    }

    /// Each document's chunks (or why it cannot be chunked), in order. [`Chunking::Window`] counts tokens, which
    /// is CPU work over the whole text, so it runs on the blocking pool; the other chunkings are cheap and run here.
    async fn chunk_all(&self, docs: &[Document], chunking: Chunking) -> Result<Vec<Result<Vec<Chunk>>>> {
        if !matches!(chunking, Chunking::Window(_)) {
            return Ok(docs.iter().map(|doc| chunk(doc, chunking, None)).collect());
        }
        let tokens: Arc<dyn TokenCounter> = match &self.tokens {
            Some(t) => t.clone(),
            None => Arc::new(ragtune_ingest::EstimatedTokens::new(self.config.embedding.max_length)),
        };
        let docs = docs.to_vec();
        tokio::task::spawn_blocking(move || {
            docs.iter().map(|doc| chunk(doc, chunking, Some(tokens.as_ref()))).collect()
        })
        .await
        .map_err(|e| Error::permanent("the chunking task failed").with_source(e))
    }

    fn chunk_whole(&self, docs: &[Document]) -> Result<Vec<(String, Vec<Chunk>)>> {
        if docs.is_empty() {
            return Err(Error::invalid_input("there are no documents to index"));
        }
        let chunking = Chunking::Auto(self.config.chunking);
        docs.iter()
            .map(|doc| {
                chunk(doc, chunking, None)
                    .map(|chunks| (doc.id.clone(), chunks))
                    .map_err(|e| e.context(format!("document `{}`; nothing of the batch was written", doc.id)))
            })
            .collect()
    }

    async fn write_whole(&self, encoder: &Bm25Encoder, per_doc: Vec<(String, Vec<Chunk>)>) -> Result<IndexReport> {
        let started = Instant::now();
        let ctx = Ctx::new();
        if let Some(e) = &self.embedder {
            self.store.store.ensure_spaces(&ctx, Some(e.spec()), None).await?;
        }
        let mut report = IndexReport::default();
        self.write_batch(&ctx, encoder, per_doc, &mut report).await?;
        report.store = self.store.store.stats(&ctx).await?;
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Encodes the passages of some documents and writes the documents in one atomic batch.
    async fn write_batch(
        &self,
        ctx: &Ctx,
        encoder: &Bm25Encoder,
        docs: Vec<(String, Vec<Chunk>)>,
        report: &mut IndexReport,
    ) -> Result<()> {
        let texts: Vec<String> = docs
            .iter()
            .flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage))
            .map(Chunk::indexable_text)
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let mut sparse = encoder.encode(ctx, &refs, TextRole::Passage).await?.into_iter();
        // The passages' own embedding call is traced into a sink of its own, to count what the model truncated.
        let sink = TraceSink::new();
        let counting = ctx.clone().with_trace(sink.clone());
        let (mut dense, mut strips) = match &self.embedder {
            Some(e) if self.config.embedding.strip_vectors => {
                // Each passage's strips (the refinement's own decomposition of the chunk's text) get a vector
                // pooled from the passage's forward pass, so answering embeds no strip of a stored passage.
                let (strips, spans) = strip_plan(&docs, &texts, self.config.refine.max_strip_words);
                let out = e.embed_spans(&counting, &refs, &spans).await?;
                let mut pooled = out.spans;
                if self.config.embedding.strip_vectors_past_window {
                    tail_windows(ctx, e.as_ref(), &refs, &spans, &mut pooled).await?;
                }
                let strips: Vec<Vec<SpanVector>> = strips
                    .iter()
                    .zip(pooled)
                    .map(|(strips, vectors)| {
                        strips
                            .iter()
                            .zip(vectors)
                            .filter_map(|(&(s, e), v)| {
                                Some(SpanVector {
                                    start: u32::try_from(s).ok()?,
                                    end: u32::try_from(e).ok()?,
                                    vector: v?,
                                })
                            })
                            .collect()
                    })
                    .collect();
                (Some(out.texts.into_iter()), Some(strips.into_iter()))
            }
            Some(e) => (Some(e.embed(&counting, &refs, TextRole::Passage).await?.into_iter()), None),
            None => (None, None),
        };
        // The embedder reports the passages it had to cut in an `embed`/`truncated` trace event.
        report.truncated += sink
            .take()
            .iter()
            .filter(|e| e.stage == "embed" && e.action == "truncated")
            .filter_map(|e| e.detail.get("texts").and_then(serde_json::Value::as_u64))
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .sum::<usize>();
        let mut batch = WriteBatch::default();
        for (doc_id, chunks) in docs {
            report.documents += 1;
            batch.delete_docs.push(doc_id);
            for chunk in chunks {
                let passage = chunk.kind == ChunkKind::Passage;
                if passage {
                    report.passages += 1;
                } else {
                    report.sections += 1;
                }
                let (s, d, spans) = if passage {
                    (sparse.next(), dense.as_mut().and_then(Iterator::next), strips.as_mut().and_then(Iterator::next))
                } else {
                    (None, None, None)
                };
                batch.upsert.push(Record { chunk, dense: d, sparse: s, spans: spans.unwrap_or_default() });
            }
        }
        self.store.store.write(ctx, batch).await?;
        Ok(())
    }

    /// The encoder for this store, creating the store's sparse space on first use with the average passage length
    /// of the documents about to be indexed (unless the configuration fixes it).
    async fn encoder_for(&mut self, per_doc: &[(String, Vec<Chunk>)]) -> Result<Arc<Bm25Encoder>> {
        if let Some(e) = &self.encoder {
            return Ok(e.clone());
        }
        let s = self.config.bm25;
        let mut cfg = Bm25Config { k1: s.k1, b: s.b, ..Bm25Config::default() };
        cfg.avg_doc_len = match s.avg_doc_len {
            Some(v) => v,
            None => {
                let probe = Bm25Encoder::new(cfg)?;
                let texts: Vec<String> = per_doc
                    .iter()
                    .flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage))
                    .map(Chunk::indexable_text)
                    .collect();
                // One decimal is plenty and keeps the space id readable.
                probe
                    .average_length(texts.iter().map(String::as_str))
                    .map_or(cfg.avg_doc_len, |a| (a * 10.0).round() / 10.0)
            }
        };
        let encoder = Arc::new(Bm25Encoder::new(cfg)?);
        self.store.store.ensure_spaces(&Ctx::new(), None, Some(encoder.spec())).await?;
        self.encoder = Some(encoder.clone());
        self.built = Arc::default();
        Ok(encoder)
    }

    /// The strategy `requested` resolves to on this store, with the reason when `auto` could not use dense vectors.
    ///
    /// # Errors
    /// [`NotFound`](ragtune_core::ErrorKind::NotFound) when nothing was indexed yet;
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when `dense` or `hybrid` is requested without an
    /// embedder or without dense vectors in the store.
    pub async fn resolve(&self, requested: Strategy) -> Result<(Strategy, Option<String>)> {
        if self.encoder.is_none() {
            return Err(Error::not_found(format!(
                "the store at {} has no index yet: run `ragtune index <path>` with this store first",
                self.config.store.location()
            )));
        }
        let why_not = match &self.embedder {
            None => Some(self.notes.first().cloned().unwrap_or_else(|| "no embedding model is loaded".into())),
            Some(_) if self.dense_seen.load(Ordering::Relaxed) => None,
            Some(_) => {
                if self.store.store.stats(&Ctx::new()).await?.dense_vectors == 0 {
                    Some("the store holds no dense vectors (re-index with the embedding model)".to_owned())
                } else {
                    self.dense_seen.store(true, Ordering::Relaxed);
                    None
                }
            }
        };
        match (requested, why_not) {
            (Strategy::Bm25, _) => Ok((Strategy::Bm25, None)),
            (Strategy::Auto, None) => Ok((Strategy::Hybrid, None)),
            (Strategy::Auto, Some(why)) => Ok((Strategy::Bm25, Some(why))),
            (s, None) => Ok((s, None)),
            (s, Some(why)) => Err(Error::unavailable(format!("`{s}` retrieval is not possible: {why}"))),
        }
    }

    /// The retriever for a resolved strategy (see [`resolve`](Self::resolve)).
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve); invalid hybrid settings.
    pub async fn retriever(&self, requested: Strategy) -> Result<Arc<dyn Retriever>> {
        let (strategy, _) = self.resolve(requested).await?;
        let store: Arc<dyn VectorStore> = self.store.store.clone();
        let bm25 = |s: &Self| -> Result<Arc<dyn Retriever>> {
            let encoder = s.encoder.clone().ok_or_else(|| Error::not_found("nothing indexed yet"))?;
            Ok(Arc::new(SparseRetriever::new("bm25", encoder, store.clone())))
        };
        let dense = |s: &Self| -> Result<Arc<dyn Retriever>> {
            let embedder = s.embedder.clone().ok_or_else(|| Error::unavailable("no embedding model is loaded"))?;
            Ok(Arc::new(DenseRetriever::new("dense", embedder, store.clone())))
        };
        match strategy {
            Strategy::Bm25 | Strategy::Auto => bm25(self),
            Strategy::Dense => dense(self),
            Strategy::Hybrid => {
                let h = self.config.hybrid;
                let encoder = self.encoder.clone().map(|e| e as Arc<dyn SparseEncoder>);
                let inputs = h.fused(bm25(self)?, dense(self)?, encoder);
                Ok(Arc::new(HybridRetriever::new("hybrid", inputs, h.hybrid_config())?))
            }
        }
    }

    /// The retriever for a strategy with a query transformation around it (see [`Transform`]).
    ///
    /// LLM-driven transformations use the configured LLM; without one they are still built, and every query
    /// degrades to the plain question with a trace event saying that no LLM is configured. HyDE searches dense
    /// vectors: alone for `dense`, fused with BM25 for `hybrid` (and `auto` when it resolves to hybrid).
    ///
    /// # Errors
    /// As [`retriever`](Self::retriever); HyDE on a store without dense vectors or without an embedder
    /// ([`Unavailable`](ragtune_core::ErrorKind::Unavailable)); a synonym table that cannot be read; `routed` as a
    /// route's own transformation.
    pub async fn transformed_retriever(&self, requested: Strategy, transform: Transform) -> Result<Arc<dyn Retriever>> {
        let (strategy, _) = self.resolve(requested).await?;
        let key = (strategy, transform);
        if let Some(r) = self.built.retrievers.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(r);
        }
        let mut retriever = self.transformed(strategy, transform, self.config.transform.max_hops).await?;
        // The header boost comes after fusion and transformation, on the list the caller receives.
        let boost = self.config.search.header_boost;
        if boost > 0.0 {
            retriever = Arc::new(ragtune_retrieve::HeaderBoostRetriever::new(retriever, boost)?);
        }
        if let Ok(mut m) = self.built.retrievers.lock() {
            m.insert(key, retriever.clone());
        }
        Ok(retriever)
    }

    /// The synonym table of `transform.synonyms` (the built-in one when unset), read on first use.
    ///
    /// # Errors
    /// A table file that cannot be read or parsed (not kept: the next use reads it again).
    pub(crate) fn synonym_table(&self) -> Result<Arc<ragtune_retrieve::transform::SynonymTable>> {
        use ragtune_retrieve::transform::SynonymTable;
        if let Some(t) = self.built.synonyms.get() {
            return Ok(t.clone());
        }
        let table = match &self.config.transform.synonyms {
            Some(path) => SynonymTable::from_file(path)?,
            None => SynonymTable::builtin(),
        };
        Ok(self.built.synonyms.get_or_init(|| Arc::new(table)).clone())
    }

    fn llm_or_none(&self) -> Arc<dyn Llm> {
        self.llm.clone().unwrap_or_else(|| Arc::new(crate::models::NoLlm))
    }

    async fn transformed(
        &self,
        requested: Strategy,
        transform: Transform,
        max_hops: usize,
    ) -> Result<Arc<dyn Retriever>> {
        use ragtune_llm::prompts;
        use ragtune_retrieve::transform::{
            HydeConfig, HydeRetriever, MultiHopConfig, MultiHopRetriever, MultiQueryConfig, MultiQueryRetriever,
            RewriteConfig, RewriteRetriever, RouteBudget, RoutePlan, RoutedRetriever, SynonymExpansionRetriever,
        };
        let t = &self.config.transform;
        let llm = self.llm_or_none();
        let (strategy, _) = self.resolve(requested).await?;
        match transform {
            Transform::None => self.retriever(strategy).await,
            Transform::Hyde => {
                let embedder = self.embedder.clone().ok_or_else(|| {
                    Error::unavailable(
                        "HyDE needs the embedding model and dense vectors (`cargo xtask models`, then index)",
                    )
                })?;
                if strategy == Strategy::Bm25 {
                    return Err(Error::unavailable("HyDE searches dense vectors: use the dense or hybrid strategy"));
                }
                let config = HydeConfig {
                    generations: t.hyde_generations.max(1),
                    include_query: t.hyde_include_query,
                    ..HydeConfig::new(prompts::HYDE)
                };
                let hyde: Arc<dyn Retriever> =
                    Arc::new(HydeRetriever::new("hyde", llm, embedder, self.store.store.clone(), config));
                if strategy == Strategy::Dense {
                    return Ok(hyde);
                }
                let h = self.config.hybrid;
                let bm25 = self.retriever(Strategy::Bm25).await?;
                let encoder = self.encoder.clone().map(|e| e as Arc<dyn SparseEncoder>);
                let inputs = h.fused(bm25, hyde, encoder);
                Ok(Arc::new(HybridRetriever::new("hybrid+hyde", inputs, h.hybrid_config())?))
            }
            Transform::MultiQuery => {
                let config = MultiQueryConfig {
                    n: t.multi_query_n.max(1),
                    max_similarity: t.multi_query_max_similarity,
                    ..MultiQueryConfig::new(prompts::MULTI_QUERY, prompts::REPAIR_JSON)
                };
                Ok(Arc::new(MultiQueryRetriever::new("multi_query", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Rewrite => {
                let config = RewriteConfig::new(prompts::REWRITE, prompts::REPAIR_JSON);
                Ok(Arc::new(RewriteRetriever::new("rewrite", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Expand => {
                let table = self.synonym_table()?;
                Ok(Arc::new(SynonymExpansionRetriever::new("expand", self.retriever(strategy).await?, table)))
            }
            Transform::MultiHop => {
                let config = MultiHopConfig {
                    max_hops: max_hops.max(1),
                    ..MultiHopConfig::new(prompts::FOLLOW_UP, prompts::REPAIR_JSON)
                };
                Ok(Arc::new(MultiHopRetriever::new("multi_hop", llm, self.retriever(strategy).await?, config)))
            }
            Transform::Routed => {
                let mut plans = Vec::with_capacity(3);
                for route in [t.routes.simple, t.routes.moderate, t.routes.complex] {
                    if route.transform == Transform::Routed {
                        return Err(Error::invalid_input("a route's transform cannot be `routed` itself"));
                    }
                    let retriever =
                        Box::pin(self.transformed(strategy, route.transform, route.retrieval_steps as usize)).await?;
                    let budget = RouteBudget {
                        retrieval_steps: route.retrieval_steps,
                        rerank_docs: route.rerank_docs,
                        max_results: route.max_results,
                    };
                    plans.push(RoutePlan { retriever, budget });
                }
                let [simple, moderate, complex]: [RoutePlan; 3] =
                    plans.try_into().map_err(|_| Error::permanent("invariant: three routes"))?;
                let mut router = RoutedRetriever::new("routed", simple, moderate, complex);
                if t.router_llm {
                    router = router.with_llm(llm, prompts::ROUTE, prompts::REPAIR_JSON);
                }
                Ok(Arc::new(router))
            }
        }
    }

    /// Answers one query with the configured strategy: ranked candidates and the trace of what was done.
    ///
    /// # Errors
    /// Invalid queries (empty, too long), an empty store, an unavailable strategy, store or model failures.
    pub async fn search(&self, query: Query) -> Result<SearchResponse> {
        self.search_with(query, self.config.search.strategy).await
    }

    /// Answers one query with the given strategy.
    ///
    /// # Errors
    /// As [`search`](Self::search).
    pub async fn search_with(&self, query: Query, strategy: Strategy) -> Result<SearchResponse> {
        query.validate()?;
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let (resolved, why) = self.resolve(strategy).await?;
        let mut route = TraceEvent::new("route", resolved.to_string()).detail("requested", strategy.to_string());
        if let Some(why) = why {
            route = route.detail("fallback", why);
        }
        ctx.trace(route);
        let transform = self.config.transform.kind;
        if transform.needs_llm() && self.llm.is_none() {
            ctx.trace(
                TraceEvent::new("transform", transform.to_string())
                    .detail("note", "no LLM is configured: the transformation will fall back to the plain query"),
            );
        }
        let retriever = self.transformed_retriever(resolved, transform).await?;
        let mut lists = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await?;
        let hits = lists.pop().unwrap_or_default();
        Ok(SearchResponse { hits, trace: sink.take() })
    }

    /// The embedded store's directory (the configured path, also when another backend is in use).
    #[must_use]
    pub fn store_path(&self) -> PathBuf {
        self.store.embedded.as_ref().map_or_else(|| self.config.store.path.clone(), |s| s.dir().to_path_buf())
    }

    /// Where the index lives, for messages: the directory, or the Qdrant URL and collection.
    #[must_use]
    pub fn store_location(&self) -> String {
        self.config.store.location()
    }
}

/// Cuts one document according to the chunking mode.
/// One document's chunks; `tokens` counts for [`Chunking::Window`] (an estimate over `embedding.max_length` when the
/// caller has no tokenizer).
fn chunk(doc: &Document, chunking: Chunking, tokens: Option<&dyn TokenCounter>) -> Result<Vec<Chunk>> {
    let markdown = doc.metadata.get("format").and_then(|f| f.as_str()) == Some(ragtune_ingest::FORMAT_MARKDOWN);
    match chunking {
        Chunking::WholeDocuments => Ok(vec![ragtune_ingest::whole_document_chunk(doc)]),
        Chunking::Sections(cfg) => ragtune_ingest::chunk_document(doc, &cfg),
        Chunking::Window(cfg) if markdown => match tokens {
            Some(tokens) => ragtune_ingest::chunk_markdown(doc, &cfg, tokens),
            // `chunk_all` always gives one (the model's, else the estimate).
            None => Err(Error::invalid_input("window chunking was given no token counter")),
        },
        Chunking::Auto(cfg) | Chunking::Window(cfg) => {
            if !markdown && doc.text.split_whitespace().count() <= cfg.chunk_size {
                Ok(vec![ragtune_ingest::whole_document_chunk(doc)])
            } else {
                ragtune_ingest::chunk_document(doc, &cfg)
            }
        }
    }
}

/// Byte ranges of one text.
type Spans = Vec<(usize, usize)>;

/// The strips of every passage of `docs` as byte ranges of the chunk's text, and the same ranges in the passage's
/// indexed text (`texts`, in the same order), which the chunk's text ends (after its title and headers).
fn strip_plan(docs: &[(String, Vec<Chunk>)], texts: &[String], max_words: usize) -> (Vec<Spans>, Vec<Spans>) {
    let passages = docs.iter().flat_map(|(_, cs)| cs.iter().filter(|c| c.kind == ChunkKind::Passage));
    passages
        .zip(texts)
        .map(|(c, indexed)| {
            let strips = ragtune_evaluators::refine::strip_spans(&c.text, max_words);
            let offset = indexed.len() - c.text.len();
            let spans = strips.iter().map(|&(s, e)| (s + offset, e + offset)).collect();
            (strips, spans)
        })
        .unzip()
}

/// Pools the strips that the first pass could not (they reach past the model's window): runs the model on the rest of
/// each such text, from its first strip without a vector, and repeats while windows still give new vectors (a strip
/// longer than the window never gets one, and stops the loop).
async fn tail_windows(
    ctx: &Ctx,
    embedder: &dyn Embedder,
    texts: &[&str],
    spans: &[Spans],
    pooled: &mut [Vec<Option<Vec<f32>>>],
) -> Result<()> {
    // Texts whose first missing strip a window did not fill (it is longer than the window): not run again.
    let mut stuck = vec![false; pooled.len()];
    loop {
        let mut owners: Vec<(usize, usize)> = Vec::new();
        let mut tails: Vec<&str> = Vec::new();
        let mut tail_spans: Vec<Spans> = Vec::new();
        for (i, vectors) in pooled.iter().enumerate() {
            if stuck[i] {
                continue;
            }
            let Some(first) = vectors.iter().position(Option::is_none) else { continue };
            let start = spans[i][first].0;
            let Some(tail) = texts[i].get(start..) else { continue };
            owners.push((i, first));
            tails.push(tail);
            tail_spans.push(spans[i][first..].iter().map(|&(s, e)| (s - start, e - start)).collect());
        }
        if tails.is_empty() {
            return Ok(());
        }
        let more = embedder.embed_spans(ctx, &tails, &tail_spans).await?;
        for ((i, first), vectors) in owners.into_iter().zip(more.spans) {
            for (k, v) in vectors.into_iter().enumerate() {
                if let (Some(v), Some(slot)) = (v, pooled[i].get_mut(first + k))
                    && slot.is_none()
                {
                    *slot = Some(v);
                }
            }
            stuck[i] = pooled[i].get(first).is_none_or(Option::is_none);
        }
    }
}
