//! Engine configuration: a TOML file, environment overrides, and defaults.

use std::path::{Path, PathBuf};

use ragtune_core::{Error, Result, Secret};
use serde::{Deserialize, Serialize};

mod retrieval;
mod server;
mod web;

pub use retrieval::*;
pub use server::*;
pub use web::*;

/// `FromStr` and `Display` for the closed sets of settings, derived from their serde names, so a value is spelled
/// the same in TOML, in `RAGTUNE__…` variables and on the command line, and written in one place.
macro_rules! names_from_serde {
    ($($ty:ident: $what:literal = [$($variant:ident),+ $(,)?]),+ $(,)?) => {$(
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
        }

        impl std::str::FromStr for $ty {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self> {
                parse_name(s, $what, Self::ALL)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&serde_name(self))
            }
        }
    )+};
}

names_from_serde! {
    ContextMode: "context mode" = [Extract, Refine, Full, Sentences],
    EvaluatorKind: "evaluator" = [Heuristic, Model, Learned],
    ScorerKind: "scorer" = [Retrieval, Dense, Llm, CrossEncoder],
    StoreBackend: "store" = [Embedded, Qdrant],
    Strategy: "retrieval strategy" = [Auto, Bm25, Dense, Hybrid],
    EmbeddingMode: "embedding mode" = [Auto, On, Off],
    Transform: "transform" = [None, Hyde, MultiQuery, Rewrite, Expand, Routed, MultiHop],
    RerankerKind: "reranker" = [Llm, CrossEncoder],
    SentenceScorer: "sentence scorer" = [Overlap, CrossEncoder],
}

/// The serde name of a unit variant.
pub(crate) fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        // Every type given to `names_from_serde!` is an enum of unit variants, which serialise to strings.
        _ => String::new(),
    }
}

/// Parses a value of a closed set by its serde name (or alias); the error names the setting and lists the names.
fn parse_name<T: serde::de::DeserializeOwned + Serialize>(s: &str, what: &str, all: &[T]) -> Result<T> {
    use serde::de::IntoDeserializer;
    let de: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = s.into_deserializer();
    T::deserialize(de).map_err(|_| {
        let names: Vec<String> = all.iter().map(serde_name).collect();
        Error::invalid_input(format!("unknown {what} `{s}`; available: {}", names.join(", ")))
    })
}

/// The whole configuration of an [`Engine`](crate::Engine). Every field has a default; a TOML file may set any
/// subset (`docs/config.md` lists them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the index lives.
    pub store: StoreConfig,
    /// BM25 parameters.
    pub bm25: Bm25Settings,
    /// How documents are cut into chunks.
    pub chunking: ChunkingSettings,
    /// Search defaults.
    pub search: SearchSettings,
    /// The dense embedding model.
    pub embedding: EmbeddingSettings,
    /// How the hybrid strategy fuses BM25 and dense retrieval.
    pub hybrid: HybridSettings,
    /// The language model (any OpenAI-compatible endpoint); off unless a URL is set.
    pub llm: LlmSettings,
    /// The query transformation applied around the retrieval strategy.
    pub transform: TransformSettings,
    /// The answer pipeline (`Engine::ask`): retrieval depth, context budget, deadline, what runs.
    pub pipeline: PipelineSettings,
    /// Corrective RAG: the retrieval evaluator and what each verdict triggers.
    pub crag: CragSettings,
    /// Budgeted reranking inside the answer pipeline.
    pub rerank: RerankSettings,
    /// Knowledge refinement (decompose, filter, recompose).
    pub refine: ragtune_evaluators::refine::RefineConfig,
    /// Query-focused extraction with the LLM (used when `pipeline.context = "extract"`).
    pub extract: ragtune_evaluators::extract::ExtractConfig,
    /// The faithfulness judge (runs when `pipeline.judge`).
    pub judge: ragtune_evaluators::faithfulness::JudgeConfig,
    /// Smart retry (runs when `pipeline.retry`).
    pub retry: ragtune_evaluators::retry::RetryConfig,
    /// Retrieval and evaluation caches.
    pub cache: CacheSettings,
    /// Web search inside Corrective RAG (off unless `enabled` and a provider is configured).
    pub web: WebConfig,
    /// The HTTP service (`ragtune serve`).
    pub server: ServerSettings,
    /// Named stores served beside the main one (`ragtune serve`, `/v1/collections/{name}/…`), each a
    /// `[collections.NAME.store]` section: the engine of a collection is this configuration with its store
    /// replaced.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub collections: std::collections::BTreeMap<String, CollectionConfig>,
}

/// A `[collections.NAME]` section: a store served beside the main one, under the main configuration otherwise.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectionConfig {
    /// Where the collection's index lives (as `[store]`); it must differ from the main store and every other
    /// collection's.
    pub store: StoreConfig,
}

/// Whether `name` can name a collection: 1 to 64 of `a-z`, `0-9`, `_` and `-`.
#[must_use]
pub fn valid_collection_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl Config {
    /// The configuration of the collection `name`: this one with the collection's store, and no collections.
    ///
    /// # Errors
    /// [`NotFound`](ragtune_core::ErrorKind::NotFound) when no such collection is configured.
    pub fn collection(&self, name: &str) -> Result<Self> {
        let c = self
            .collections
            .get(name)
            .ok_or_else(|| Error::not_found(format!("no collection `{name}` is configured")))?;
        let mut cfg = self.clone();
        cfg.store = c.store.clone();
        cfg.collections.clear();
        Ok(cfg)
    }

    fn validate_collections(&self) -> Result<()> {
        let mut seen = vec![("the main store".to_owned(), self.store.location())];
        for (name, c) in &self.collections {
            if !valid_collection_name(name) {
                return Err(Error::invalid_input(format!(
                    "[collections.{name}]: a collection name is 1 to 64 characters of a-z, 0-9, `_` and `-`"
                )));
            }
            let location = c.store.location();
            if let Some((other, _)) = seen.iter().find(|(_, l)| *l == location) {
                return Err(Error::invalid_input(format!(
                    "[collections.{name}.store] names the same store as {other} ({location}): give it a path (or a \
                     Qdrant collection) of its own"
                )));
            }
            seen.push((format!("collection `{name}`"), location));
        }
        Ok(())
    }
}

/// The answer pipeline's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineSettings {
    /// Candidates retrieved on the first attempt (smart retry's `expand_k` raises it along `retry.k_schedule`);
    /// `0` uses `retry.k_schedule[0]`.
    pub top_k: usize,
    /// The whole prompt window the context shares with instructions and the answer, in tokens.
    pub max_context_tokens: usize,
    /// Tokens of `max_context_tokens` kept for the prompt and the answer.
    pub reserve_tokens: usize,
    /// What the generator sees: `extract` (query-focused extraction, refinement strips when it fails),
    /// `refine` (refinement strips), `full` (whole passages), or `sentences` (the most relevant sentences under
    /// `sentence_context_tokens`).
    pub context: ContextMode,
    /// The context's size with `context = "sentences"`, in estimated tokens.
    pub sentence_context_tokens: usize,
    /// What the generator sees on a retry (smart retry's second and third attempts); unset: `context`. With
    /// `context = "full"` and `retry_context = "extract"` the first attempt costs what plain RAG does, and only an
    /// answer the retry policy doubts pays for extraction ("answer first", docs/pipeline.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_context: Option<ContextMode>,
    /// What the generator sees when it rereads an answer that said the documents lack the information
    /// (`retry.recheck_no_info`); unset: `retry_context`. A reread is asked without the prompt's "not in the
    /// documents" way out, and kept only when the judge finds it supported (docs/pipeline.md, "Retry").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reread_context: Option<ContextMode>,
    /// Generate an answer (with the LLM when configured, else extractively); `false` returns context only.
    pub generate: bool,
    /// How the extractive answer picks its sentences: `overlap` (the question's words shared, weighted by rarity,
    /// the default) or `cross-encoder` (the `[rerank]` cross-encoder's scores against the question).
    #[serde(skip_serializing_if = "SentenceScorer::is_overlap")]
    pub sentence_scorer: SentenceScorer,
    /// Retrieve at all; `false` answers closed-book (the "no retrieval" baseline of evaluations).
    pub retrieve: bool,
    /// Extract with one LLM call per passage (the `extraction` experiment of docs/eval.md) instead of one batched
    /// call (the default, `batched_extraction`).
    pub extraction_per_document: bool,
    /// Judge the answer's faithfulness.
    pub judge: bool,
    /// Let the LLM judge when one is configured (`false`: always the LLM-free judge).
    pub judge_with_llm: bool,
    /// Retry when the smart-retry policy says so.
    pub retry: bool,
    /// Deadline of one question in milliseconds (`0`: none). Stages that would start after it are skipped and the
    /// answer is built from what exists.
    pub timeout_ms: u64,
    /// LLM tokens of one question (`0`: no limit). A retry whose attempt (costed as the mean of those made) would
    /// take the question past it is skipped with a note, and the best attempt so far answers.
    pub max_llm_tokens: u64,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            top_k: 0,
            max_context_tokens: 2048,
            reserve_tokens: 512,
            context: ContextMode::Extract,
            sentence_context_tokens: SENTENCE_CONTEXT_TOKENS,
            retry_context: None,
            reread_context: None,
            generate: true,
            sentence_scorer: SentenceScorer::Overlap,
            retrieve: true,
            extraction_per_document: false,
            judge: true,
            judge_with_llm: true,
            retry: true,
            timeout_ms: 0,
            max_llm_tokens: 0,
        }
    }
}

impl PipelineSettings {
    /// The context mode of a retry: `retry_context`, else `context`.
    #[must_use]
    pub fn retry_context(&self) -> ContextMode {
        self.retry_context.unwrap_or(self.context)
    }

    /// The context mode of a no-info reread: `reread_context`, else [`retry_context`](Self::retry_context).
    #[must_use]
    pub fn reread_context(&self) -> ContextMode {
        self.reread_context.unwrap_or_else(|| self.retry_context())
    }
}

/// The default `[pipeline] sentence_context_tokens`.
pub const SENTENCE_CONTEXT_TOKENS: usize = 300;

/// What the generator sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextMode {
    /// Query-focused extraction by the LLM (refinement strips without an LLM or when extraction fails).
    Extract,
    /// Knowledge-refinement strips.
    Refine,
    /// Whole retrieved passages.
    Full,
    /// The passages' sentences most relevant to the question (the extractive answer's scoring), best first until
    /// `[pipeline] sentence_context_tokens`, shown in context order: a short prompt for a fast LLM answer.
    Sentences,
}

/// Which retrieval evaluator judges the retrieval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvaluatorKind {
    /// LLM-free heuristics: keyword overlap, coherence, length, diversity (docs/pipeline.md, "Evaluate").
    Heuristic,
    /// A scorer per document, aggregated, read with two calibrated thresholds (docs/pipeline.md, "Calibration").
    Model,
    /// A logistic regression over retrieval features, fitted on a training split (`[crag.learned]`, written by
    /// `ragtune calibrate --evaluator learned`; docs/pipeline.md, "The learned evaluator").
    Learned,
}

/// The scorer of the model-based evaluator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScorerKind {
    /// The dense cosine the retrieval already computed (free; hybrid and dense retrieval carry it).
    Retrieval,
    /// Cosine between the query and each passage with the embedding model.
    Dense,
    /// The LLM relevance judge (0–10, pointwise).
    Llm,
    /// The cross-encoder of `[rerank]` (`reranker = "cross-encoder"` and its `model`), loaded once by the engine;
    /// its logits are read through a sigmoid ([`ScoreScale::Sigmoid`](ragtune_evaluators::crag::ScoreScale)).
    /// Also spelled `cross-encoder`.
    #[serde(alias = "cross-encoder")]
    CrossEncoder,
}

impl ScorerKind {
    /// How the scorer's raw scores map to `[0, 1]`, where the model-based evaluator's thresholds live: cosines
    /// as they are, the LLM judge's 0–10 as a range, a cross-encoder's logits through a sigmoid.
    #[must_use]
    pub fn scale(self) -> ragtune_evaluators::crag::ScoreScale {
        use ragtune_evaluators::crag::ScoreScale;
        match self {
            Self::Retrieval | Self::Dense => ScoreScale::Unit,
            Self::Llm => ScoreScale::Range { min: 0.0, max: 10.0 },
            Self::CrossEncoder => ScoreScale::Sigmoid,
        }
    }
}

/// How the extractive answer (the answer without an LLM) picks its sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SentenceScorer {
    /// The sentences sharing most words with the question (the default).
    #[default]
    Overlap,
    /// The sentences the cross-encoder of `[rerank]` (`reranker = "cross-encoder"` and its `model`) scores
    /// highest against the question, all of a context's sentences in one call; word overlap when it is not loaded
    /// or fails (noted).
    CrossEncoder,
}

impl SentenceScorer {
    fn is_overlap(&self) -> bool {
        *self == Self::Overlap
    }
}

/// Corrective RAG settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CragSettings {
    /// Evaluate and correct at all.
    pub enabled: bool,
    /// The evaluator.
    pub evaluator: EvaluatorKind,
    /// The heuristic evaluator's weights and thresholds.
    pub heuristic: ragtune_evaluators::crag::HeuristicConfig,
    /// The model-based evaluator's thresholds and aggregation (`cargo xtask calibrate` writes them).
    pub model: ragtune_evaluators::crag::ModelConfig,
    /// The model-based evaluator's scorer.
    pub scorer: ScorerKind,
    /// The learned evaluator's fitted model (`ragtune calibrate --evaluator learned` writes it); needed when
    /// `evaluator = "learned"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<ragtune_evaluators::crag::LearnedModel>,
    /// AMBIGUOUS / PARTIAL: expand the query with synonyms, retrieve again and merge.
    pub expand_on_ambiguous: bool,
    /// INCORRECT / IRRELEVANT: rewrite the query with the LLM (synonym expansion without one) and retrieve again;
    /// web search too when a provider is configured.
    pub rewrite_on_incorrect: bool,
}

impl Default for CragSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            evaluator: EvaluatorKind::Heuristic,
            heuristic: ragtune_evaluators::crag::HeuristicConfig::default(),
            model: ragtune_evaluators::crag::ModelConfig::default(),
            scorer: ScorerKind::Retrieval,
            learned: None,
            expand_on_ambiguous: true,
            rewrite_on_incorrect: true,
        }
    }
}

/// The most ONNX Runtime threads or sessions a setting may ask for: each is an OS thread, and a typo of a few zeros
/// must be an error, not a machine brought to its knees.
pub const MAX_THREADS: usize = 256;

/// Budgeted reranking in the answer pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RerankSettings {
    /// Rerank at all (off by default). With `reranker = "llm"` it needs the LLM; the cross-encoder needs none.
    pub enabled: bool,
    /// The reranker: `llm` (the LLM relevance judge, the default) or `cross-encoder` (an ONNX cross-encoder, `model`).
    pub reranker: RerankerKind,
    /// The cross-encoder: a local model directory (`model.onnx` with `logits [batch, 1]` and the tokenizer files);
    /// with the `online` feature also a model fastembed knows by name (`BAAI/bge-reranker-base`), downloaded from
    /// the Hugging Face hub into `$RAGTUNE_HOME/hub`. Needed when `reranker = "cross-encoder"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokens per query–passage pair of the cross-encoder; longer pairs are truncated and the truncation traced.
    pub max_length: usize,
    /// Pairs per inference call of the cross-encoder.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads of the cross-encoder; 0 (the default): one per core. The model is one session
    /// that every request shares in turn, so its own threads are how it uses more than one core (onnxruntime's
    /// default too); the embedding model's `[embedding] threads` are per session of a pool instead.
    pub threads: usize,
    /// The most documents reranked per question (the controller's document budget).
    pub max_docs: u64,
    /// The scheduling policy: `greedy`, `dynamic` or `uncertainty`.
    pub policy: ragtune_rerank::RerankPolicy,
    /// The weight of retrieval's score in the order of the reranked passages: `(1 − w)·z(reranker) + w·z(retrieval)`
    /// over them (`ragtune_rerank::blend`); 0 (the default) orders them by the reranker alone.
    pub retrieval_weight: f32,
}

impl Default for RerankSettings {
    fn default() -> Self {
        // The cross-encoder's own batch size; 256 tokens per pair (a question and a 100–200-word passage) rather
        // than the model's 512, which would double the work of long passages for the tail of their text.
        let model = ragtune_embed::CrossEncoderConfig::new(PathBuf::new(), PathBuf::new(), "");
        Self {
            enabled: false,
            reranker: RerankerKind::Llm,
            model: None,
            max_length: 256,
            batch_size: model.batch_size,
            threads: 0,
            max_docs: 3,
            policy: ragtune_rerank::RerankPolicy::Uncertainty,
            retrieval_weight: 0.0,
        }
    }
}

impl RerankSettings {
    /// Checks that the cross-encoder has a model and sizes of at least 1.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming `[rerank]` and the setting.
    pub fn validate(&self) -> Result<()> {
        if self.reranker == RerankerKind::CrossEncoder && self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(Error::invalid_input(
                "[rerank] reranker = \"cross-encoder\" needs `model`: the directory of an ONNX cross-encoder \
                 (model.onnx and its tokenizer files)",
            ));
        }
        if self.max_length == 0 || self.batch_size == 0 {
            return Err(Error::invalid_input("[rerank] max_length and batch_size must be at least 1"));
        }
        let w = self.retrieval_weight;
        if !(w.is_finite() && (0.0..=1.0).contains(&w)) {
            return Err(Error::invalid_input(format!("[rerank] retrieval_weight must be between 0 and 1, got {w}")));
        }
        Ok(())
    }
}

/// Which reranker the `[rerank]` stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RerankerKind {
    /// The LLM relevance judge (pointwise 0–10, `relevance@1`); needs the LLM.
    #[default]
    Llm,
    /// An ONNX cross-encoder (`[rerank] model`), on the embedding model's ONNX Runtime and `[rerank] threads`; needs
    /// no LLM.
    CrossEncoder,
}

/// Retrieval and evaluation caches (in memory, bounded, with a time to live).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSettings {
    /// Cache at all.
    pub enabled: bool,
    /// The most entries of each cache.
    pub capacity: u64,
    /// Seconds an entry lives.
    pub ttl_secs: u64,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self { enabled: true, capacity: 1024, ttl_secs: 3600 }
    }
}

impl Config {
    /// Parses a TOML document.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) with the line and column of the problem.
    pub fn from_toml(text: &str) -> Result<Self> {
        let cfg: Self =
            toml::from_str(text).map_err(|e| Error::invalid_input(format!("invalid configuration: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses a TOML document with `RAGTUNE__SECTION__KEY=value` overrides applied before validation (the value
    /// is read as a TOML value, else as a string: `RAGTUNE__RETRY__MAX_RETRIES=1`,
    /// `RAGTUNE__CRAG__EVALUATOR=model`).
    ///
    /// # Errors
    /// As [`from_toml`](Self::from_toml), naming the variable whose value does not fit.
    pub fn from_toml_with_overrides(text: &str, overrides: &[(String, String)]) -> Result<Self> {
        if !overrides.iter().any(|(k, _)| k.starts_with("RAGTUNE__")) {
            // Without overrides, parse directly so errors keep their line and column.
            return Self::from_toml(text);
        }
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| Error::invalid_input(format!("invalid configuration: {e}")))?;
        for (name, value) in overrides {
            let Some(path) = name.strip_prefix("RAGTUNE__") else { continue };
            let keys: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
            if keys.iter().any(String::is_empty) {
                return Err(Error::invalid_input(format!("environment override {name}: empty key")));
            }
            let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.clone()));
            let mut at = &mut table;
            for key in &keys[..keys.len() - 1] {
                let entry = at.entry(key.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                at = entry.as_table_mut().ok_or_else(|| {
                    Error::invalid_input(format!("environment override {name}: `{key}` is not a section"))
                })?;
            }
            at.insert(keys[keys.len() - 1].clone(), parsed);
        }
        let cfg: Self = toml::Value::Table(table)
            .try_into()
            .map_err(|e| Error::invalid_input(format!("invalid configuration (with environment overrides): {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every threshold, weight and budget.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the setting.
    pub fn validate(&self) -> Result<()> {
        let section = |name: &'static str| move |e: Error| e.context(format!("[{name}]"));
        self.crag.heuristic.validate().map_err(section("crag.heuristic"))?;
        self.crag.model.validate().map_err(section("crag.model"))?;
        if let Some(learned) = &self.crag.learned {
            learned.validate().map_err(section("crag.learned"))?;
        } else if self.crag.evaluator == EvaluatorKind::Learned {
            return Err(Error::invalid_input(
                "[crag] evaluator = \"learned\" needs a [crag.learned] section with the fitted model; write one with \
                 `ragtune calibrate --evaluator learned --dataset DIR --split train`",
            ));
        }
        self.refine.validate().map_err(section("refine"))?;
        self.judge.validate().map_err(section("judge"))?;
        self.retry.validate().map_err(section("retry"))?;
        self.hybrid.validate().map_err(section("hybrid"))?;
        self.rerank.validate()?;
        let e = &self.embedding;
        for (name, n) in [
            ("[embedding] threads", e.threads),
            ("[embedding] lone_threads", e.lone_threads),
            ("[embedding] sessions", e.sessions),
            ("[rerank] threads", self.rerank.threads),
        ] {
            if n > MAX_THREADS {
                return Err(Error::invalid_input(format!("{name} must be at most {MAX_THREADS}, got {n}")));
            }
        }
        let boost = self.search.header_boost;
        if !boost.is_finite() || !(0.0..=1.0).contains(&boost) {
            return Err(Error::invalid_input(format!("[search] header_boost must be between 0 and 1, got {boost}")));
        }
        let p = &self.pipeline;
        if p.top_k != 0 {
            check_top_k("[pipeline] top_k", p.top_k)?;
        }
        check_top_k("[search] top_k", self.search.top_k)?;
        for &k in &self.retry.k_schedule {
            check_top_k("[retry] k_schedule", k)?;
        }
        if p.reserve_tokens >= p.max_context_tokens {
            return Err(Error::invalid_input(format!(
                "[pipeline] reserve_tokens ({}) must be less than max_context_tokens ({})",
                p.reserve_tokens, p.max_context_tokens
            )));
        }
        if self.cache.enabled && self.cache.capacity == 0 {
            return Err(Error::invalid_input("[cache] capacity must be at least 1 when the cache is enabled"));
        }
        self.server.validate()?;
        self.validate_collections()?;
        Ok(())
    }

    /// Reads a TOML file.
    ///
    /// # Errors
    /// A missing file ([`NotFound`](ragtune_core::ErrorKind::NotFound)) or invalid TOML, naming the file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::not_found(format!("cannot read the configuration file {}", path.display())).with_source(e)
        })?;
        Self::from_toml(&text).map_err(|e| e.context(path.display()))
    }

    /// Loads the configuration the CLI and server use: the file named by `path`, else `$RAGTUNE_CONFIG` when set,
    /// else defaults; then `$RAGTUNE_STORE` overrides the store path, `$RAGTUNE_QDRANT_URL` the Qdrant URL, and
    /// `$QDRANT_API_KEY` supplies the Qdrant API key when the file has none; `$RAGTUNE_LLM_URL` overrides the LLM
    /// URL and `$RAGTUNE_LLM_API_KEY` (else `$OPENAI_API_KEY`) supplies its key. Any setting can be overridden
    /// with `RAGTUNE__SECTION__KEY=value` (see [`from_toml_with_overrides`](Self::from_toml_with_overrides)).
    ///
    /// # Errors
    /// As [`from_file`](Self::from_file).
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let from_env = std::env::var_os("RAGTUNE_CONFIG").map(PathBuf::from);
        let overrides: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("RAGTUNE__")).collect();
        let mut cfg = match path.map(Path::to_path_buf).or(from_env) {
            Some(p) => {
                let text = std::fs::read_to_string(&p).map_err(|e| {
                    Error::not_found(format!("cannot read the configuration file {}", p.display())).with_source(e)
                })?;
                Self::from_toml_with_overrides(&text, &overrides).map_err(|e| e.context(p.display()))?
            }
            None => Self::from_toml_with_overrides("", &overrides)?,
        };
        if let Some(store) = std::env::var_os("RAGTUNE_STORE") {
            cfg.store.path = PathBuf::from(store);
        }
        if let Some(url) = std::env::var("RAGTUNE_QDRANT_URL").ok().filter(|u| !u.is_empty()) {
            cfg.store.qdrant.url = url;
        }
        if cfg.store.qdrant.api_key.is_none() {
            cfg.store.qdrant.api_key = std::env::var("QDRANT_API_KEY").ok().filter(|k| !k.is_empty()).map(Into::into);
        }
        if let Some(url) = std::env::var("RAGTUNE_LLM_URL").ok().filter(|u| !u.is_empty()) {
            cfg.llm.url = url;
        }
        if cfg.server.api_key.is_none() {
            cfg.server.api_key =
                std::env::var("RAGTUNE_SERVER_API_KEY").ok().filter(|k| !k.is_empty()).map(Secret::from);
        }
        if cfg.llm.api_key.is_none() {
            cfg.llm.api_key = ["RAGTUNE_LLM_API_KEY", "OPENAI_API_KEY"]
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
                .map(Into::into);
        }
        // The server's key may come from the environment only now: check it again.
        cfg.server.validate()?;
        Ok(cfg)
    }
}

/// The directory for caches and provisioned files: `$RAGTUNE_HOME`, else the user's cache directory + `ragtune`,
/// else `.ragtune-home` in the working directory. The task runner shares it through `ragtune-provision`, which
/// holds the one definition.
#[must_use]
pub fn ragtune_home() -> PathBuf {
    ragtune_provision::ragtune_home()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_web_section_is_off_by_default_parses_its_keys_and_never_writes_a_key() {
        assert!(!Config::default().web.active());
        let cfg = Config::from_toml(
            "[web]\nenabled = true\nconcurrency = 2\n[web.providers.tavily]\napi_key = \"tvly-secret\"\n",
        )
        .unwrap();
        assert!(cfg.web.active());
        assert_eq!(cfg.web.settings.concurrency, 2);
        let resolved = cfg.web.resolved();
        assert_eq!(resolved.providers["tavily"].api_key.as_ref().map(Secret::expose), Some("tvly-secret"));
        assert_eq!(cfg.web.build().unwrap().map(|s| s.stats.len()), Some(1));
        let written = toml::to_string(&cfg).unwrap();
        assert!(!written.contains("tvly-secret") && !format!("{cfg:?}").contains("tvly-secret"), "{written}");
        let back = Config::from_toml(&written).unwrap();
        assert!(back.web.enabled && back.web.settings.providers.contains_key("tavily"), "{written}");
        assert!(Config::from_toml("[web]\nenabled = \"yes\"\n").is_err());
        assert!(Config::from_toml(&toml::to_string(&Config::default()).unwrap()).unwrap().web == WebConfig::default());
    }

    /// Every value of a closed set parses from the name serde writes, prints as it, and round-trips through TOML.
    fn check_names<T>(all: &[T], expect: &[&str])
    where
        T: std::str::FromStr<Err = Error> + std::fmt::Display + Serialize + serde::de::DeserializeOwned + PartialEq,
        T: std::fmt::Debug,
    {
        let names: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert_eq!(names, expect);
        for (value, name) in all.iter().zip(expect) {
            assert_eq!(&name.parse::<T>().unwrap(), value);
            assert_eq!(serde_json::to_value(value).unwrap(), serde_json::Value::String((*name).to_owned()));
        }
        let err = "no-such-value".parse::<T>().unwrap_err();
        assert_eq!(err.kind(), ragtune_core::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(&format!("available: {}", expect.join(", "))), "{err}");
    }

    #[test]
    fn thread_counts_are_bounded_and_the_cross_encoder_takes_every_core_by_default() {
        for (toml, name) in [
            ("[rerank]\nthreads = 100000\n", "[rerank] threads"),
            ("[embedding]\nthreads = 257\n", "[embedding] threads"),
            ("[embedding]\nlone_threads = 9999\n", "[embedding] lone_threads"),
            ("[embedding]\nsessions = 1000\n", "[embedding] sessions"),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.to_string().contains(&format!("{name} must be at most 256")), "{err}");
        }
        let cfg = Config::from_toml("[rerank]\nthreads = 256\n").unwrap();
        assert_eq!(crate::models::cross_encoder_threads(&cfg.rerank), 256);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(crate::models::cross_encoder_threads(&RerankSettings::default()), cores);
    }

    #[test]
    fn closed_sets_are_spelled_once_by_their_serde_names() {
        check_names(ContextMode::ALL, &["extract", "refine", "full", "sentences"]);
        check_names(EvaluatorKind::ALL, &["heuristic", "model", "learned"]);
        check_names(ScorerKind::ALL, &["retrieval", "dense", "llm", "cross_encoder"]);
        assert_eq!("cross-encoder".parse::<ScorerKind>().unwrap(), ScorerKind::CrossEncoder);
        check_names(SentenceScorer::ALL, &["overlap", "cross-encoder"]);
        check_names(StoreBackend::ALL, &["embedded", "qdrant"]);
        check_names(Strategy::ALL, &["auto", "bm25", "dense", "hybrid"]);
        check_names(EmbeddingMode::ALL, &["auto", "on", "off"]);
        check_names(Transform::ALL, &["none", "hyde", "multi-query", "rewrite", "expand", "routed", "multi-hop"]);
        check_names(RerankerKind::ALL, &["llm", "cross-encoder"]);
        // The old snake_case spellings of two transforms still parse.
        assert_eq!("multi_query".parse::<Transform>().unwrap(), Transform::MultiQuery);
        assert_eq!("multi_hop".parse::<Transform>().unwrap(), Transform::MultiHop);
        let cfg = Config::from_toml("[llm]\nendpoint = \"completions\"\n[transform]\nkind = \"multi_hop\"\n").unwrap();
        assert_eq!((cfg.llm.endpoint, cfg.transform.kind), (LlmEndpoint::Completions, Transform::MultiHop));
    }

    #[test]
    fn defaults_come_from_the_components_that_own_them() {
        let cfg = Config::default();
        let embedder = ragtune_embed::FastEmbedderConfig::new(PathBuf::new(), PathBuf::new());
        assert_eq!(
            (cfg.embedding.batch_size, cfg.embedding.threads, cfg.embedding.max_length),
            (embedder.batch_size, embedder.intra_threads, embedder.max_length)
        );
        let client = ragtune_llm::LlmConfig::default();
        assert_eq!((cfg.llm.max_retries, cfg.llm.endpoint), (client.max_retries, client.endpoint));
        let hybrid = ragtune_retrieve::HybridConfig::default();
        assert_eq!((cfg.hybrid.k, cfg.hybrid.depth), (hybrid.fusion.k, hybrid.depth));
        assert_eq!(cfg.bm25.k1, ragtune_embed::Bm25Config::default().k1);
    }

    #[test]
    fn the_default_fusion_is_the_one_fitted_on_train() {
        // ADR 0022: convex, BM25 0.4 / dense 0.6, level weights 2 / 0.55 / 10, no adaptive, fitted on the SciFact and
        // CMU QA train splits, alone and joined, and their stressed variants (configs/fusion-default.toml; the
        // integration tests check that the file and the default agree).
        let h = Config::default().hybrid;
        assert_eq!((h.fusion, h.bm25_weight, h.dense_weight, h.adaptive), (FusionMethod::Convex, 0.4, 0.6, 0.0));
        assert_eq!((h.bm25_level, h.dense_level, h.level_slope), (2.0, 0.55, 10.0));
        // RRF stays selectable, and a file that names it alone keeps the other fields' defaults.
        let rrf = Config::from_toml("[hybrid]\nfusion = \"rrf\"\n").unwrap().hybrid;
        assert_eq!((rrf.fusion, rrf.k, rrf.bm25_weight, rrf.level_slope), (FusionMethod::Rrf, 60.0, 0.4, 10.0));
    }

    #[test]
    fn the_hybrid_fusion_is_read_from_the_file_and_the_environment() {
        let cfg =
            Config::from_toml("[hybrid]\nfusion = \"convex\"\nbm25_weight = 0.3\ndense_weight = 0.7\nadaptive = 1.0\n")
                .unwrap();
        let h = cfg.hybrid.hybrid_config();
        assert_eq!((h.fusion.method, h.fusion.adaptive, h.depth), (FusionMethod::Convex, 1.0, 100));
        assert_eq!((cfg.hybrid.bm25_weight, cfg.hybrid.dense_weight), (0.3, 0.7));
        let env = [("RAGTUNE__HYBRID__FUSION".to_owned(), "dbsf".to_owned())];
        assert_eq!(Config::from_toml_with_overrides("", &env).unwrap().hybrid.fusion, FusionMethod::Dbsf);
        let err = Config::from_toml("[hybrid]\nfusion = \"mean\"\n").unwrap_err();
        assert!(err.to_string().contains("rrf, convex") || err.to_string().contains("`rrf`"), "{err}");
    }

    #[test]
    fn level_weights_are_on_by_default_and_read_from_the_file() {
        let h = Config::default().hybrid;
        assert_eq!(
            h.list_level(h.bm25_level, true),
            Some(ragtune_retrieve::ListLevel { center: 2.0, slope: 10.0, per_term: true })
        );
        assert_eq!(
            h.list_level(h.dense_level, false),
            Some(ragtune_retrieve::ListLevel { center: 0.55, slope: 10.0, per_term: false })
        );
        let off = Config::from_toml("[hybrid]\nlevel_slope = 0.0\n").unwrap().hybrid;
        assert_eq!(off.list_level(off.bm25_level, true), None, "slope 0: off");
        let cfg = Config::from_toml("[hybrid]\nbm25_level = 1.5\ndense_level = 0.5\nlevel_slope = 5.0\n").unwrap();
        let h = cfg.hybrid;
        assert_eq!(
            h.list_level(h.bm25_level, true),
            Some(ragtune_retrieve::ListLevel { center: 1.5, slope: 5.0, per_term: true })
        );
        assert_eq!(h.list_level(0.0, false), None, "a centre of 0 leaves that list alone");
        let err = Config::from_toml("[hybrid]\nlevel_slope = -1.0\n").unwrap_err();
        assert!(err.to_string().contains("level_slope must be a finite number >= 0"), "{err}");
    }

    #[test]
    fn partial_toml_keeps_defaults() {
        let cfg = Config::from_toml("[bm25]\nk1 = 2.0\n[store]\npath = \"/tmp/x\"\n").unwrap();
        assert_eq!(cfg.bm25.k1, 2.0);
        assert_eq!(cfg.bm25.b, 0.75);
        assert_eq!(cfg.store.path, PathBuf::from("/tmp/x"));
        assert_eq!(cfg.search.top_k, 10);
    }

    #[test]
    fn environment_overrides_reach_any_setting_and_are_validated() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let cfg = Config::from_toml_with_overrides(
            "[retry]\nmax_retries = 3\n",
            &env(&[
                ("RAGTUNE__RETRY__MAX_RETRIES", "1"),
                ("RAGTUNE__CRAG__EVALUATOR", "model"),
                ("RAGTUNE__CRAG__MODEL__UPPER", "0.8"),
                ("RAGTUNE__PIPELINE__CONTEXT", "refine"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.retry.max_retries, 1, "the environment wins over the file");
        assert_eq!(cfg.crag.evaluator, EvaluatorKind::Model);
        assert_eq!(cfg.crag.model.upper, 0.8);
        assert_eq!(cfg.pipeline.context, ContextMode::Refine);
        let err = Config::from_toml_with_overrides("", &env(&[("RAGTUNE__CRAG__MODEL__LOWER", "0.9")])).unwrap_err();
        assert!(err.to_string().contains("crag.model"), "{err}");
        let err = Config::from_toml_with_overrides("", &env(&[("RAGTUNE__RETRY__NOPE", "1")])).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn a_learned_model_round_trips_and_is_validated_by_field() {
        let text = "[crag]\nevaluator = \"learned\"\n\n[crag.learned]\nfeatures = [\"dense_top\", \"top_agree\"]\n\
                    means = [0.6, 0.5]\nscales = [0.1, 0.5]\nweights = [1.5, 0.25]\nbias = 1.0\nlower = 0.5\nupper = 0.9\n";
        let cfg = Config::from_toml(text).unwrap();
        assert_eq!(cfg.crag.evaluator, EvaluatorKind::Learned);
        let model = cfg.crag.learned.clone().expect("the section is read");
        assert_eq!(model.features, ["dense_top", "top_agree"]);
        assert_eq!((model.weights.clone(), model.bias, model.lower, model.upper), (vec![1.5, 0.25], 1.0, 0.5, 0.9));
        // Written out and read back, the same configuration.
        let again = Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(again, cfg);
        // Without the section, nothing is written for it.
        assert!(!toml::to_string(&Config::default()).unwrap().contains("learned"));
        for (from, to, needle) in [
            ("weights = [1.5, 0.25]", "weights = [1.5]", "weights has 1 values for 2 features"),
            ("lower = 0.5", "lower = 0.95", "lower (0.95) must be below upper (0.9)"),
            ("scales = [0.1, 0.5]", "scales = [0.1, 0.0]", "scales[1] (top_agree) must be above 0"),
            ("\"top_agree\"]", "\"top_agreement\"]", "`top_agreement`, which is not a feature"),
        ] {
            let err = Config::from_toml(&text.replace(from, to)).unwrap_err().to_string();
            assert!(err.starts_with("[crag.learned]: learned evaluator: "), "{err}");
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let err = Config::from_toml(&text.replace("bias = 1.0\n", "")).unwrap_err();
        assert!(err.to_string().contains("bias"), "{err}");
        let err = Config::from_toml("[crag]\nevaluator = \"learned\"\n").unwrap_err();
        assert!(err.to_string().contains("needs a [crag.learned] section"), "{err}");
    }

    #[test]
    fn a_first_version_learned_file_reads_as_a_logistic_model_and_a_stumps_section_reads_too() {
        // A file written before `model` and the appended features existed: 17 features, no `model` key (the
        // first `configs/crag-learned-scifact-whole.toml`, kept as it was).
        let old = include_str!("../testdata/crag-learned-first-version.toml");
        assert!(!old.contains("model = \"") && !old.contains("stumps"), "the fixture is a first-version file");
        let cfg = Config::from_toml(old).unwrap();
        let model = cfg.crag.learned.clone().expect("the section is read");
        assert_eq!(model.model, ragtune_evaluators::crag::ModelKind::Logistic);
        assert_eq!(model.features.len(), ragtune_evaluators::crag::FIRST_VERSION_FEATURES);
        assert_eq!(model.features, ragtune_evaluators::crag::FEATURE_NAMES[..model.features.len()]);
        assert!(model.stumps.is_empty());
        let again = Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(again, cfg);

        let stumps = "[crag]\nevaluator = \"learned\"\n\n[crag.learned]\nmodel = \"stumps\"\n\
                      features = [\"dense_top\", \"bm25_nqc\"]\nbias = 1.0\nlower = 0.5\nupper = 0.9\n\n\
                      [[crag.learned.stumps]]\nfeature = \"bm25_nqc\"\nthreshold = 0.4\nbelow = -0.5\nabove = 0.25\n";
        let cfg = Config::from_toml(stumps).unwrap();
        let model = cfg.crag.learned.clone().unwrap();
        assert_eq!(model.model, ragtune_evaluators::crag::ModelKind::Stumps);
        assert_eq!((model.stumps.len(), model.stumps[0].threshold), (1, 0.4));
        assert_eq!(Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap(), cfg);
        let err = Config::from_toml(&stumps.replace("feature = \"bm25_nqc\"", "feature = \"top_agree\""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("stumps[0] splits on `top_agree`, which features does not name"), "{err}");
        let err = Config::from_toml(&stumps.replace("\"stumps\"", "\"forest\"")).unwrap_err().to_string();
        assert!(err.contains("forest"), "{err}");
    }

    #[test]
    fn invalid_thresholds_weights_and_budgets_are_refused_by_name() {
        for (toml, expect) in [
            ("[crag.heuristic]\nrelevant_threshold = 0.4\n", "crag.heuristic"),
            ("[crag.heuristic.weights]\ndiversity = 0.9\n", "crag.heuristic"),
            ("[pipeline]\nmax_context_tokens = 100\nreserve_tokens = 200\n", "reserve_tokens"),
            ("[rerank]\npolicy = \"random\"\n", "policy"),
            ("[rerank]\nreranker = \"colbert\"\n", "reranker"),
            ("[rerank]\nreranker = \"cross-encoder\"\n", "[rerank] reranker = \"cross-encoder\" needs `model`"),
            ("[rerank]\nreranker = \"cross-encoder\"\nmodel = \" \"\n", "needs `model`"),
            ("[rerank]\nmax_length = 0\n", "[rerank] max_length and batch_size must be at least 1"),
            ("[rerank]\nbatch_size = 0\n", "[rerank] max_length and batch_size"),
            ("[retry]\nunsupported_share = 1.5\n", "retry"),
            ("[refine]\nthreshold = 2.0\n", "refine"),
            ("[hybrid]\ndense_weight = -1.0\n", "[hybrid]: dense_weight must be a finite number >= 0, got -1"),
            ("[hybrid]\nbm25_weight = 0.0\ndense_weight = 0.0\n", "[hybrid]: bm25_weight and dense_weight are both 0"),
            ("[hybrid]\nadaptive = 100.0\n", "[hybrid]: adaptive must be between 0 and 8"),
            ("[hybrid]\nk = -1.0\n", "[hybrid]: k must"),
            ("[hybrid]\ndepth = 0\n", "[hybrid]: depth must"),
            ("[hybrid]\nfusion = \"mean\"\n", "fusion"),
            ("[search]\nheader_boost = 1.5\n", "[search] header_boost must be between 0 and 1, got 1.5"),
            ("[search]\nheader_boost = -0.1\n", "[search] header_boost"),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.to_string().contains(expect), "{toml}: {err}");
        }
    }

    #[test]
    fn the_cross_encoder_reranker_is_configured_by_file_or_environment() {
        // The defaults keep today's behaviour: reranking off, and the LLM judge when it is turned on.
        let d = RerankSettings::default();
        assert_eq!((d.enabled, d.reranker, d.model.as_deref()), (false, RerankerKind::Llm, None));
        assert_eq!((d.max_length, d.batch_size), (256, ragtune_embed::CrossEncoderConfig::new("", "", "").batch_size));
        let toml = "[rerank]\nenabled = true\nreranker = \"cross-encoder\"\nmodel = \"/models/ce\"\n\
                    max_length = 128\nbatch_size = 4\n";
        let cfg = Config::from_toml(toml).unwrap();
        let r = &cfg.rerank;
        assert_eq!((r.enabled, r.reranker, r.model.as_deref()), (true, RerankerKind::CrossEncoder, Some("/models/ce")));
        assert_eq!((r.max_length, r.batch_size, r.max_docs), (128, 4, 3));
        assert_eq!(Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap(), cfg, "round-trips");
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let cfg = Config::from_toml_with_overrides(
            "",
            &env(&[
                ("RAGTUNE__RERANK__ENABLED", "true"),
                ("RAGTUNE__RERANK__RERANKER", "cross-encoder"),
                ("RAGTUNE__RERANK__MODEL", "/models/ce"),
                ("RAGTUNE__RERANK__MAX_LENGTH", "64"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.rerank.reranker, RerankerKind::CrossEncoder);
        assert_eq!((cfg.rerank.model.as_deref(), cfg.rerank.max_length), (Some("/models/ce"), 64));
        // The model is required by the reranker that uses it, even while reranking is off.
        let err =
            Config::from_toml_with_overrides("", &env(&[("RAGTUNE__RERANK__RERANKER", "cross-encoder")])).unwrap_err();
        assert!(err.to_string().contains("[rerank] reranker = \"cross-encoder\" needs `model`"), "{err}");
        // The LLM judge needs no model.
        assert!(Config::from_toml("[rerank]\nenabled = true\nreranker = \"llm\"\n").is_ok());
    }

    #[test]
    fn the_cross_encoder_scores_crag_and_extractive_sentences_when_configured() {
        // The defaults keep today's behaviour, and a default pipeline section is written without the new key.
        let d = Config::default();
        assert_eq!((d.crag.scorer, d.pipeline.sentence_scorer), (ScorerKind::Retrieval, SentenceScorer::Overlap));
        assert!(!toml::to_string(&d.pipeline).unwrap().contains("sentence_scorer"));
        let toml = "[crag]\nevaluator = \"model\"\nscorer = \"cross_encoder\"\n[pipeline]\n\
                    sentence_scorer = \"cross-encoder\"\n[rerank]\nreranker = \"cross-encoder\"\nmodel = \"/m\"\n";
        let cfg = Config::from_toml(toml).unwrap();
        assert_eq!(
            (cfg.crag.scorer, cfg.pipeline.sentence_scorer),
            (ScorerKind::CrossEncoder, SentenceScorer::CrossEncoder)
        );
        assert_eq!(Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap(), cfg, "round-trips");
        // The scorer is also spelled as the reranker is.
        let cfg = Config::from_toml("[crag]\nscorer = \"cross-encoder\"\n").unwrap();
        assert_eq!(cfg.crag.scorer, ScorerKind::CrossEncoder);
        let env = [
            ("RAGTUNE__CRAG__SCORER".to_owned(), "cross-encoder".to_owned()),
            ("RAGTUNE__PIPELINE__SENTENCE_SCORER".to_owned(), "cross-encoder".to_owned()),
        ];
        let cfg = Config::from_toml_with_overrides("", &env).unwrap();
        assert_eq!(
            (cfg.crag.scorer, cfg.pipeline.sentence_scorer),
            (ScorerKind::CrossEncoder, SentenceScorer::CrossEncoder)
        );
        let err = Config::from_toml("[pipeline]\nsentence_scorer = \"bm25\"\n").unwrap_err();
        assert!(err.to_string().contains("sentence_scorer"), "{err}");
        // Logits are read through a sigmoid, so the model evaluator's thresholds stay in [0, 1].
        assert_eq!(ScorerKind::CrossEncoder.scale(), ragtune_evaluators::crag::ScoreScale::Sigmoid);
        assert_eq!(ScorerKind::Retrieval.scale(), ragtune_evaluators::crag::ScoreScale::Unit);
    }

    #[test]
    fn unknown_keys_are_errors_with_a_position() {
        let err = Config::from_toml("[bm25]\nk2 = 1.0\n").unwrap_err();
        assert!(err.to_string().contains("k2"), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn the_header_boost_round_trips_and_is_off_by_default() {
        assert_eq!(Config::default().search.header_boost, 0.0);
        let cfg = Config::from_toml("[search]\nheader_boost = 0.1\n").unwrap();
        assert_eq!(cfg.search.header_boost, 0.1);
        let back = Config::from_toml(&toml::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
    }
}
