//! Core types and seam traits of ragtune, the self-correcting, budget-aware retrieval engine.
//!
//! Every other ragtune crate depends on this one and on no sibling: they meet through the traits here
//! ([`Embedder`], [`SparseEncoder`], [`VectorStore`], [`Retriever`], [`Reranker`], [`RelevanceEvaluator`],
//! [`Llm`], [`WebSearch`], and [`TokenCounter`], which lets a chunker count an embedding model's tokens).
//! The crate holds no IO, no async runtime and no vendor types, so forks can implement any seam against it alone.
//!
//! ```
//! use ragtune_core::{Chunk, Ctx, Filter, Query};
//!
//! let query = Query::new("what causes scurvy?").with_top_k(5).with_filter(Filter::eq("lang", "en"));
//! query.validate()?;
//! let mut chunk = Chunk::new("doc-1#0", "doc-1", "Scurvy is caused by a lack of vitamin C.");
//! chunk.metadata.insert("lang".into(), "en".into());
//! assert!(query.filter.as_ref().unwrap().matches(&chunk));
//! Ctx::new().check()?;
//! # Ok::<(), ragtune_core::Error>(())
//! ```

mod control;
mod cost;
mod error;
mod filter;
pub mod html;
pub mod http;
pub mod prompt;
mod seams;
pub mod text;
mod tokens;
mod trace;
mod types;

pub use control::{CancellationToken, Ctx, TraceSink};
pub use cost::{Budget, Cost, CostModel};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use filter::Filter;
pub use prompt::Prompt;
pub use seams::{
    Embedder, Llm, LlmRequest, LlmResponse, Message, RelevanceEvaluator, RelevanceJudgement, Reranker, Retriever, Role,
    SearchRequest, Skipped, SpanEmbeddings, SparseEncoder, StoreStats, VectorQuery, VectorStore, Verdict, WebOutcome,
    WebQuery, WebResult, WebSearch, WriteBatch, WriteReport,
};
pub use tokens::TokenCounter;
pub use trace::TraceEvent;
pub use types::{
    Candidate, Chunk, ChunkKind, Complexity, Distance, Document, EmbeddingSpec, Metadata, Query, Record, ScoredHit,
    Secret, SourceScore, SpanVector, SparseSpec, SparseVector, TextRole, sort_ranked,
};
