//! The store and retrieval sections: `[store]`, `[bm25]`, `[chunking]`, `[search]`, `[embedding]`, `[hybrid]`,
//! `[llm]`, `[transform]` and its routes.

use super::*;

/// Store settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Which store holds the index: the embedded store (default) or a Qdrant server.
    pub backend: StoreBackend,
    /// The embedded store's directory (created on first use).
    pub path: PathBuf,
    /// Dense search switches from exact to an HNSW index at this many vectors (embedded store).
    pub ann_min_vectors: usize,
    /// The free space the embedded store keeps on its disk, in bytes: a write that would leave less is refused with
    /// a clear error before it starts, and the store reports not ready below it (8 MiB; 0 lets the disk fill).
    pub min_free_bytes: u64,
    /// The Qdrant server and collection, when `backend = "qdrant"`.
    pub qdrant: QdrantSettings,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: StoreBackend::Embedded,
            path: PathBuf::from(".ragtune"),
            ann_min_vectors: ragtune_store::AnnConfig::default().min_vectors,
            min_free_bytes: ragtune_store::StoreOptions::default().min_free_bytes,
            qdrant: QdrantSettings::default(),
        }
    }
}

impl StoreConfig {
    /// Where the index lives, for messages: the directory, or the Qdrant URL and collection.
    #[must_use]
    pub fn location(&self) -> String {
        crate::stores::kind(self.backend).location(self)
    }
}

/// The store backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreBackend {
    /// The embedded store in `store.path` (crash-safe, one machine).
    #[default]
    Embedded,
    /// A Qdrant server or cluster (needs a ragtune built with the `qdrant` feature).
    Qdrant,
}

/// Connection and collection settings for a Qdrant server or cluster (`[store.qdrant]`): the store layer's own
/// settings type, so its fields, names and defaults live in one place. The API key is read from `$QDRANT_API_KEY`
/// when the file does not set one, is never written back out, and is never shown in `Debug` output.
pub use ragtune_store::QdrantConfig as QdrantSettings;

/// BM25 settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bm25Settings {
    /// Term-frequency saturation (1.2 by default; Pyserini's BEIR runs use 0.9).
    pub k1: f32,
    /// Length normalisation (0.75 by default; Pyserini's BEIR runs use 0.4).
    pub b: f32,
    /// Average passage length in terms; estimated from the first indexed corpus when unset.
    pub avg_doc_len: Option<f32>,
}

impl Default for Bm25Settings {
    fn default() -> Self {
        let d = ragtune_embed::Bm25Config::default();
        Self { k1: d.k1, b: d.b, avg_doc_len: None }
    }
}

/// Chunking settings, in whitespace-separated words: the ingest layer's configuration as is.
pub use ragtune_ingest::ChunkerConfig as ChunkingSettings;

/// Which retrieval strategy answers queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Hybrid when the store has dense vectors and the embedder is available, else BM25.
    #[default]
    Auto,
    /// BM25 only.
    Bm25,
    /// Dense only.
    Dense,
    /// BM25 and dense fused as `[hybrid]` says.
    Hybrid,
}

/// Search defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// Results per query.
    pub top_k: usize,
    /// The retrieval strategy.
    pub strategy: Strategy,
    /// The weight of the header boost (`ragtune_retrieve::boost`): after retrieval and fusion, a hit whose header
    /// path shares keywords with the query gains `header_boost × Jaccard × the list's score spread`. 0 is off;
    /// hits without headers (whole documents, plain text) are never moved.
    pub header_boost: f32,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self { top_k: 10, strategy: Strategy::Auto, header_boost: 0.0 }
    }
}

/// Whether to use the dense embedding model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbeddingMode {
    /// Use it when its files are provisioned; otherwise work lexically and say why in traces.
    #[default]
    Auto,
    /// Require it: a missing model is an error.
    On,
    /// Never load it.
    Off,
}

/// The dense embedding model (all-MiniLM-L6-v2 on ONNX Runtime, provisioned by `cargo xtask models`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddingSettings {
    /// Whether to use it.
    pub mode: EmbeddingMode,
    /// The model directory (default: the provisioned one under `$RAGTUNE_HOME`).
    pub model_dir: Option<PathBuf>,
    /// Use the int8 variant of the provisioned model (the default; built by `cargo xtask models`): int8 matrix
    /// products instead of fp32, about twice as fast on a CPU, vectors within cosine 0.98 of the fp32 model's and the
    /// same quality on SciFact (docs/performance.md). `false` runs the provisioned file as shipped (int8 weights,
    /// fp32 compute). The two are different models to the store: an index built with one is not searched with the
    /// other.
    pub quantized: bool,
    /// The ONNX Runtime library (default: the provisioned one under `$RAGTUNE_HOME`).
    pub ort_library: Option<PathBuf>,
    /// Texts per inference call.
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads per session (1 is fastest on a busy 2-core machine).
    pub threads: usize,
    /// ONNX Runtime sessions of the model (0: one per core): concurrent queries run on different sessions, and
    /// indexing spreads its batches over all of them.
    pub sessions: usize,
    /// Intra-op threads of one more session that serves a query arriving alone: no other call in flight and none
    /// overlapping another for the last 100 ms (0, the default: one per core; 1: no such session). A lone query
    /// then uses every core; overlapping queries (a busy server) run side by side on the one-thread `sessions`
    /// (measured in docs/performance.md).
    pub lone_threads: usize,
    /// Let the intra-op threads of multi-thread sessions (`threads` > 1, or the lone-query session) busy-wait
    /// between the model's parallel sections while a run lasts, as ONNX Runtime does by default, and stop when it
    /// ends, so that they take no core from the queries that follow (default `true`; `false` makes them sleep,
    /// which costs a lone query about a third of its speed, docs/performance.md).
    pub spinning: bool,
    /// Query embeddings kept in memory by text (0: no cache); passages are never cached.
    pub query_cache: u64,
    /// Tokens per text; longer texts are truncated and the truncation is traced.
    pub max_length: usize,
    /// Store a vector per knowledge strip of every passage (`refine.max_strip_words`' decomposition), pooled from
    /// the passage's own forward pass at indexing time (no extra inference), so that refinement and the LLM-free
    /// judge embed no strip of a stored passage at query time (docs/pipeline.md). Stores without room for them
    /// (Qdrant) ignore them.
    pub strip_vectors: bool,
    /// With `strip_vectors`: also pool the strips that lie past the model's window (`max_length` tokens) of a long
    /// passage, by running the model again on the rest of the passage from its first such strip (its own window,
    /// and so on). Costs the inference of those tails at indexing time; without it, those strips are embedded when a
    /// question needs them (docs/performance.md).
    pub strip_vectors_past_window: bool,
}

impl Default for EmbeddingSettings {
    fn default() -> Self {
        // The embedder's own defaults; the paths are resolved from `$RAGTUNE_HOME` when the model is loaded.
        let model = ragtune_embed::FastEmbedderConfig::new(PathBuf::new(), PathBuf::new());
        Self {
            mode: EmbeddingMode::Auto,
            model_dir: None,
            quantized: true,
            ort_library: None,
            batch_size: model.batch_size,
            threads: model.intra_threads,
            sessions: model.sessions,
            lone_threads: model.lone_threads,
            spinning: model.spinning,
            query_cache: 10_000,
            max_length: model.max_length,
            strip_vectors: true,
            strip_vectors_past_window: false,
        }
    }
}

/// Fusion settings of the hybrid strategy (BM25 and dense lists; docs/config.md, `[hybrid]`).
///
/// The default is convex fusion of min-max normalised scores, BM25 0.4 / dense 0.6, with level weights (BM25's
/// best score per query term centred on 2, dense's best cosine on 0.55, slope 10) and no `adaptive`: the setting
/// `ragtune calibrate --fusion --levels` chose jointly on the SciFact and CMU QA train splits, on the same queries
/// searching both corpora joined (a corpus up to four times larger), and on the stressed variants of each (each
/// retriever in turn made weaker by typos in its queries), as the one whose smallest gain over the better of BM25
/// alone and dense alone is largest (ADR 0014, ADR 0019, ADR 0021, ADR 0022). `rrf` stays selectable; only the
/// fields a file sets change, so `fusion = "rrf"` alone keeps these weights and the level weights
/// (`level_slope = 0` turns them off).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HybridSettings {
    /// How the lists are fused: `rrf` (ranks), `convex` (min-max normalised scores) or `dbsf` (scores normalised by
    /// mean and three standard deviations).
    pub fusion: FusionMethod,
    /// The RRF constant `k` (`rrf` only).
    pub k: f32,
    /// Candidates taken from each strategy before fusing.
    pub depth: usize,
    /// Weight of the BM25 list.
    pub bm25_weight: f32,
    /// Weight of the dense list.
    pub dense_weight: f32,
    /// Strength of the query-time weights: 0 keeps the weights fixed; above 0 a list whose best score hardly stands
    /// out from the rest of its list (a list that is guessing) counts less for that query (see
    /// [`ragtune_retrieve::fusion_weights`]).
    pub adaptive: f32,
    /// With `level_slope > 0`: the BM25 list's weight is scaled per query by
    /// `sigmoid(level_slope × (level − bm25_level) / bm25_level)`, its level being its best score per query term
    /// ([`ragtune_retrieve::ListLevel`]); 0 leaves BM25's weight alone.
    pub bm25_level: f32,
    /// With `level_slope > 0`: the dense list's weight is scaled the same way by its best cosine; 0 leaves it alone.
    pub dense_level: f32,
    /// How steeply the level weights rise around their centres (10 by default); 0 turns them off.
    pub level_slope: f32,
}

impl Default for HybridSettings {
    fn default() -> Self {
        // The RRF constant and the depth are the retrieval layer's; the method, weights and strength are the
        // engine's own choice for its two lists (ADR 0021, ADR 0022), not the retrieval layer's generic RRF default.
        let hybrid = ragtune_retrieve::HybridConfig::default();
        Self {
            fusion: FusionMethod::Convex,
            k: hybrid.fusion.k,
            depth: hybrid.depth,
            bm25_weight: 0.4,
            dense_weight: 0.6,
            adaptive: 0.0,
            bm25_level: 2.0,
            dense_level: 0.55,
            level_slope: 10.0,
        }
    }
}

impl HybridSettings {
    /// The retrieval layer's settings of a hybrid retriever built from these.
    #[must_use]
    pub fn hybrid_config(&self) -> ragtune_retrieve::HybridConfig {
        ragtune_retrieve::HybridConfig { fusion: self.fusion_config(), depth: self.depth }
    }

    /// The retrieval layer's fusion settings (method, `k`, `adaptive`): what [`ragtune_retrieve::fuse`] is given.
    #[must_use]
    pub fn fusion_config(&self) -> ragtune_retrieve::FusionConfig {
        ragtune_retrieve::FusionConfig { method: self.fusion, k: self.k, adaptive: self.adaptive }
    }

    /// Checks the weights, `k`, `adaptive` and `depth`.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the setting: a weight negative or not finite,
    /// both weights 0, `k` negative, `adaptive` outside its range, `depth` 0.
    pub fn validate(&self) -> Result<()> {
        for (name, w) in [("bm25_weight", self.bm25_weight), ("dense_weight", self.dense_weight)] {
            if !(w.is_finite() && w >= 0.0) {
                return Err(Error::invalid_input(format!("{name} must be a finite number >= 0, got {w}")));
            }
        }
        if self.bm25_weight == 0.0 && self.dense_weight == 0.0 {
            return Err(Error::invalid_input("bm25_weight and dense_weight are both 0: nothing would be fused"));
        }
        if self.depth == 0 {
            return Err(Error::invalid_input("depth must be at least 1"));
        }
        for (name, v) in
            [("bm25_level", self.bm25_level), ("dense_level", self.dense_level), ("level_slope", self.level_slope)]
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::invalid_input(format!("{name} must be a finite number >= 0, got {v}")));
            }
        }
        self.fusion_config().validate()
    }

    /// The level of one list (`center` > 0 and `level_slope` > 0), else `None`.
    #[must_use]
    pub fn list_level(&self, center: f32, per_term: bool) -> Option<ragtune_retrieve::ListLevel> {
        (self.level_slope > 0.0 && center > 0.0).then_some(ragtune_retrieve::ListLevel {
            center,
            slope: self.level_slope,
            per_term,
        })
    }

    /// The hybrid retriever's two inputs, BM25 and dense (or HyDE), with their weights and, when set, their levels;
    /// `encoder` counts a query's BM25 terms.
    #[must_use]
    pub fn fused(
        &self,
        bm25: std::sync::Arc<dyn ragtune_core::Retriever>,
        dense: std::sync::Arc<dyn ragtune_core::Retriever>,
        encoder: Option<std::sync::Arc<dyn ragtune_core::SparseEncoder>>,
    ) -> Vec<ragtune_retrieve::Fused> {
        let mut b = ragtune_retrieve::Fused::new(bm25, self.bm25_weight);
        b.level =
            self.list_level(self.bm25_level, true).map(|level| ragtune_retrieve::FusedLevel { level, terms: encoder });
        let mut d = ragtune_retrieve::Fused::new(dense, self.dense_weight);
        d.level =
            self.list_level(self.dense_level, false).map(|level| ragtune_retrieve::FusedLevel { level, terms: None });
        vec![b, d]
    }
}

/// How the hybrid strategy fuses its lists. The retrieval layer's own type, so the names live there; the engine's
/// default method is [`HybridSettings::default`]'s.
pub use ragtune_retrieve::FusionMethod;

/// The language model behind query transformations (and, later, evaluation and answers).
///
/// Any OpenAI-compatible endpoint: OpenAI, vLLM, Ollama, llama.cpp, or the local server of `cargo xtask llm start`.
/// The API key comes from `$RAGTUNE_LLM_API_KEY` (or `$OPENAI_API_KEY`) when the file sets none; it is never written
/// back out, printed or traced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// The server's base URL (`http://127.0.0.1:8080`, `https://api.openai.com/v1`); empty: no LLM.
    /// `$RAGTUNE_LLM_URL` overrides it.
    pub url: String,
    /// The model name sent with requests.
    pub model: String,
    /// The API key (prefer the environment variables).
    #[serde(skip_serializing)]
    pub api_key: Option<Secret>,
    /// `chat` (`/v1/chat/completions`, default) or `completions` (`/v1/completions`).
    pub endpoint: LlmEndpoint,
    /// Seconds allowed per request.
    pub timeout_secs: f64,
    /// Retries of transient failures.
    pub max_retries: u32,
    /// Keep answers on disk under `$RAGTUNE_HOME/llm-cache`, so repeated runs are fast and reproducible.
    pub cache: bool,
}

impl Default for LlmSettings {
    fn default() -> Self {
        let client = ragtune_llm::LlmConfig::default();
        Self {
            url: String::new(),
            model: client.model,
            api_key: None,
            endpoint: client.endpoint,
            timeout_secs: client.timeout.as_secs_f64(),
            max_retries: client.max_retries,
            cache: true,
        }
    }
}

/// Which OpenAI-compatible API the LLM client calls: `chat` (`/v1/chat/completions`, the default) or
/// `completions` (`/v1/completions`). The LLM layer's own type, so the names and the default live there.
pub use ragtune_llm::Endpoint as LlmEndpoint;

/// A query transformation around the retrieval strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transform {
    /// The question as asked.
    #[default]
    None,
    /// HyDE: search with the embedding of a generated answer passage (fused with BM25 for `hybrid`).
    Hyde,
    /// RAG-Fusion: generated queries plus the original, fused with RRF.
    #[serde(alias = "multi_query")]
    MultiQuery,
    /// Rewrite-Retrieve-Read: search with the question rewritten for search.
    Rewrite,
    /// LLM-free synonym expansion, merged with the original.
    Expand,
    /// The complexity router: each question gets the plan of its complexity (`transform.routes`).
    Routed,
    /// Multi-hop: follow-up queries for what is still missing.
    #[serde(alias = "multi_hop")]
    MultiHop,
}

impl Transform {
    /// Whether it calls the LLM.
    #[must_use]
    pub fn needs_llm(self) -> bool {
        !matches!(self, Self::None | Self::Expand)
    }
}

/// Settings of the query transformations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransformSettings {
    /// The transformation applied to every query.
    pub kind: Transform,
    /// HyDE: passages generated per query (embeddings averaged).
    pub hyde_generations: usize,
    /// HyDE: average the question's own embedding in.
    pub hyde_include_query: bool,
    /// Multi-query: generated queries per question.
    pub multi_query_n: usize,
    /// Multi-query: generated queries this similar (word Jaccard) to the original or a kept one are dropped.
    pub multi_query_max_similarity: f32,
    /// Synonym expansion: a table file (one group of synonyms per line, comma-separated); the built-in table
    /// otherwise.
    pub synonyms: Option<PathBuf>,
    /// Multi-hop: retrievals at most.
    pub max_hops: usize,
    /// Router: ask the LLM to classify too (its verdict wins; the heuristic is the fallback).
    pub router_llm: bool,
    /// Router: the plan of each complexity.
    pub routes: RouteSettings,
}

impl Default for TransformSettings {
    fn default() -> Self {
        use ragtune_llm::prompts;
        use ragtune_retrieve::transform::{HydeConfig, MultiHopConfig, MultiQueryConfig};
        // The transformations' own defaults (the prompts only select which constructor; no prompt is stored here).
        let hyde = HydeConfig::new(prompts::HYDE);
        let multi_query = MultiQueryConfig::new(prompts::MULTI_QUERY, prompts::REPAIR_JSON);
        let multi_hop = MultiHopConfig::new(prompts::FOLLOW_UP, prompts::REPAIR_JSON);
        Self {
            kind: Transform::None,
            hyde_generations: hyde.generations,
            hyde_include_query: hyde.include_query,
            multi_query_n: multi_query.n,
            multi_query_max_similarity: multi_query.max_similarity,
            synonyms: None,
            max_hops: multi_hop.max_hops,
            router_llm: false,
            routes: RouteSettings::default(),
        }
    }
}

/// The router's plans.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteSettings {
    /// One fact from one passage.
    pub simple: RouteSetting,
    /// A few passages or some explanation.
    pub moderate: RouteSetting,
    /// Comparisons, several parts, facts leading to facts.
    pub complex: RouteSetting,
}

impl RouteSettings {
    /// The setting of a complexity's route.
    #[must_use]
    pub fn plan(&self, complexity: ragtune_core::Complexity) -> &RouteSetting {
        match complexity {
            ragtune_core::Complexity::Simple => &self.simple,
            ragtune_core::Complexity::Moderate => &self.moderate,
            ragtune_core::Complexity::Complex => &self.complex,
        }
    }
}

impl Default for RouteSettings {
    fn default() -> Self {
        Self {
            simple: RouteSetting { transform: Transform::None, retrieval_steps: 1, rerank_docs: 10, max_results: 10 },
            moderate: RouteSetting {
                transform: Transform::MultiQuery,
                retrieval_steps: 2,
                rerank_docs: 20,
                max_results: 20,
            },
            complex: RouteSetting {
                transform: Transform::MultiHop,
                retrieval_steps: 3,
                rerank_docs: 40,
                max_results: 40,
            },
        }
    }
}

/// What one route does and may spend.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouteSetting {
    /// The transformation (`routed` is not allowed here).
    pub transform: Transform,
    /// Retrieval steps allowed (hops for multi-hop).
    pub retrieval_steps: u32,
    /// Candidates the reranker may score: caps `[rerank] max_docs` for the questions of this route (the
    /// router's heuristic decides the route at the rerank stage).
    pub rerank_docs: u32,
    /// Results at most.
    pub max_results: usize,
}

impl Default for RouteSetting {
    fn default() -> Self {
        Self { transform: Transform::None, retrieval_steps: 1, rerank_docs: 10, max_results: 10 }
    }
}
