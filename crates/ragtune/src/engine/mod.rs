//! The Engine: wires loaders, chunker, BM25 encoder, dense embedder, embedded store and retrievers from a
//! [`Config`]. Every `impl Engine` lives in this module: opening and configuration here, indexing in [`index`],
//! retrieval in [`retrieve`], the answer pipeline's parts (evaluator, judge, reranking) in [`parts`]; the pipeline
//! itself (`crate::pipeline`) runs on them.

mod index;
pub(crate) mod parts;
mod retrieve;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ragtune_core::{
    Candidate, Ctx, Embedder, Error, ErrorKind, Llm, Reranker, Result, Retriever, StoreStats, TokenCounter, TraceEvent,
    VectorStore, WebSearch,
};
use ragtune_embed::{Bm25Config, Bm25Encoder};
use ragtune_ingest::ChunkerConfig;
use ragtune_store::EmbeddedStore;
use serde::{Deserialize, Serialize};

use crate::Config;
use crate::config::{EmbeddingMode, EvaluatorKind, RerankerKind, ScorerKind, SentenceScorer, Strategy, Transform};
use crate::models::RequestVectors;
use crate::pipeline::{AskResponse, TokenSink};
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
pub(super) const BATCH_CHUNKS: usize = 256;

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

/// Whether two configurations agree on every setting the built parts depend on, so that they share them (a request
/// that only changes `top_k`, the deadline or whether CRAG or the web runs builds nothing).
fn same_parts(a: &Config, b: &Config) -> bool {
    let (x, y) = (&a.crag, &b.crag);
    a.search == b.search
        && a.hybrid == b.hybrid
        && a.transform == b.transform
        && (x.evaluator, &x.heuristic, &x.model, x.scorer, &x.learned)
            == (y.evaluator, &y.heuristic, &y.model, y.scorer, &y.learned)
        && a.judge == b.judge
        && a.pipeline.judge_with_llm == b.pipeline.judge_with_llm
        && a.rerank == b.rerank
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
        if !same_parts(&config, &self.config) {
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
        // The evaluator built with the previous model (its scorer) must not outlive it.
        self.built = Arc::default();
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
        self.seed_strip_vectors(ctx, "refine", &vectors, candidates).await;
        Some(vectors)
    }

    /// Adds the stored strip vectors of `candidates` to `vectors` (see [`request_vectors`](Self::request_vectors)),
    /// traced as a `strip_vectors` event of `stage` (the stage that needs them: `refine`, or `judge` for whole
    /// passages).
    pub async fn seed_strip_vectors(&self, ctx: &Ctx, stage: &str, vectors: &RequestVectors, candidates: &[Candidate]) {
        if candidates.is_empty() {
            return;
        }
        let ids: Vec<String> = candidates.iter().map(|c| c.chunk.id.clone()).collect();
        match self.store.store.span_vectors(ctx, &ids).await {
            Ok(spans) => {
                let added = vectors.seed(candidates, &spans);
                ctx.trace(TraceEvent::new(stage, "strip_vectors").detail("chunks", ids.len()).detail("strips", added));
            }
            Err(e) => ctx.trace(
                TraceEvent::new(stage, "strip_vectors")
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

impl Engine {
    /// Answers a question with the whole pipeline (see the module docs). Without an LLM the answer is
    /// extractive; every degradation is listed in [`AskResponse::notes`].
    ///
    /// # Errors
    /// Only an invalid question (empty, too long); everything else degrades.
    pub async fn ask(&self, question: &str) -> Result<AskResponse> {
        crate::pipeline::run_pipeline(self, question, self.config().pipeline.generate, None).await
    }

    /// [`ask`](Self::ask), sending the answer to `sink` as it is generated: the LLM's answer piece by piece, with a
    /// restart whenever what was sent is not the answer (the contract is [`TokenSink`]'s); an extractive
    /// answer whole at the end. The response is the one `ask` returns, with the time to first token.
    ///
    /// # Errors
    /// As [`ask`](Self::ask).
    pub async fn ask_streaming(&self, question: &str, sink: TokenSink) -> Result<AskResponse> {
        crate::pipeline::run_pipeline(self, question, self.config().pipeline.generate, Some(sink)).await
    }

    /// The context the pipeline would answer from (retrieval, correction, reranking, refinement or extraction,
    /// assembly), without generating or judging an answer.
    ///
    /// # Errors
    /// As [`ask`](Self::ask).
    pub async fn query(&self, question: &str) -> Result<AskResponse> {
        crate::pipeline::run_pipeline(self, question, false, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_shares_the_built_parts_unless_it_changes_what_they_are_built_from() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.store.path = dir.path().join("store");
        cfg.embedding.mode = EmbeddingMode::Off;
        let engine = Engine::open(cfg).await.unwrap();
        let mut top_k = engine.config().clone();
        top_k.pipeline.top_k = 7;
        top_k.crag.enabled = false;
        assert!(Arc::ptr_eq(&engine.built, &engine.for_request(top_k).unwrap().built));
        let mut judge = engine.config().clone();
        judge.pipeline.judge_with_llm = !judge.pipeline.judge_with_llm;
        assert!(!Arc::ptr_eq(&engine.built, &engine.for_request(judge).unwrap().built));
        let before = engine.built.clone();
        let engine = engine.with_cross_encoder(None);
        assert!(!Arc::ptr_eq(&before, &engine.built), "a new cross-encoder rebuilds the evaluator");
    }
}
