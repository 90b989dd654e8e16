//! ragtune: a self-correcting, budget-aware retrieval engine for RAG.
//!
//! This facade re-exports every layer as a module (`ragtune::core`, `ragtune::ingest`, `ragtune::embed`,
//! `ragtune::store`, `ragtune::retrieve`, `ragtune::evaluators`, and `ragtune::provision` for the model files) and
//! wires them into an [`Engine`] from a [`Config`]. It is the only crate that picks concrete types, reads
//! configuration files and environment variables (`ragtune-provision` reads `$RAGTUNE_HOME` for it, see
//! [`ragtune_home`]).
//! It is the engine only: what measures it (BEIR, QA, CRAG and rerank evaluations) is the `ragtune-eval` crate,
//! which depends on this one and never the other way round.
//!
//! ```
//! use ragtune::{Chunking, Config, Engine, core::{Document, Query}};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune::core::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let mut config = Config::default();
//! config.store.path = dir.path().join("store");
//! let mut engine = Engine::open(config).await?;
//! let docs = vec![
//!     Document::new("scurvy", "Scurvy is caused by a lack of vitamin C."),
//!     Document::new("rickets", "Rickets is caused by a lack of vitamin D."),
//! ];
//! engine.index_documents(&docs, Chunking::WholeDocuments, &mut |_, _| {}).await?;
//! let answer = engine.search(Query::new("what causes scurvy?").with_top_k(1)).await?;
//! assert_eq!(answer.hits[0].chunk.doc_id, "scurvy");
//! # Ok(())
//! # }
//! ```

pub use ragtune_core as core;
pub use ragtune_embed as embed;
pub use ragtune_evaluators as evaluators;
pub use ragtune_ingest as ingest;
pub use ragtune_llm as llm;
pub use ragtune_provision as provision;
pub use ragtune_rerank as rerank;
pub use ragtune_retrieve as retrieve;
pub use ragtune_store as store;
pub use ragtune_web as web;

pub mod commands;
mod config;
mod engine;
mod models;
pub mod pipeline;
pub mod stores;

pub use config::{
    Bm25Settings, CacheSettings, ChunkingSettings, CollectionConfig, Config, ContextMode, CragSettings, EmbeddingMode,
    EmbeddingSettings, EvaluatorKind, FusionMethod, HybridSettings, LlmEndpoint, LlmSettings, MAX_TOP_K,
    MIN_API_KEY_CHARS, PipelineSettings, QdrantSettings, RerankSettings, RerankerKind, RouteSetting, RouteSettings,
    ScorerKind, SearchSettings, SentenceScorer, ServerSettings, StoreBackend, StoreConfig, Strategy, Transform,
    TransformSettings, WebConfig, check_top_k, ragtune_home, valid_collection_name,
};
pub use engine::{Chunking, Engine, IndexReport, SearchResponse, WebStats};
pub use models::{
    QUANTIZED_MODEL_ID, QueryCache, RequestVectors, cross_encoder_fingerprint, cross_encoder_threads,
    load_cross_encoder, load_embedder, load_llm, load_token_counter, local_llm_url,
};
pub use pipeline::{AnswerKind, AskResponse, Citation, ContextMethod, ContextPassage, CragCategory, CragMetadata};
