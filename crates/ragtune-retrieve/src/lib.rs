//! Retrieval strategies for ragtune, each a [`Retriever`](ragtune_core::Retriever) built from core seams only.
//!
//! This release holds [`SparseRetriever`] (BM25 or any sparse encoder over any store). Dense, hybrid (RRF),
//! parent/child and the LLM-driven query transformations join it in later issues, all composable as retrievers.
//!
//! ```
//! use std::sync::Arc;
//! use ragtune_core::{Chunk, Ctx, Query, Record, Retriever, SparseEncoder, TextRole, VectorStore};
//! use ragtune_retrieve::SparseRetriever;
//! use ragtune_testkit::MemoryStore;
//! use ragtune_testkit::fakes::HashSparseEncoder;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let ctx = Ctx::new();
//! let encoder = Arc::new(HashSparseEncoder::default());
//! let store = Arc::new(MemoryStore::default());
//! store.ensure_spaces(&ctx, None, Some(encoder.spec())).await?;
//! let text = "vitamin C prevents scurvy";
//! let sparse = encoder.encode(&ctx, &[text], TextRole::Passage).await?.pop();
//! store.upsert(&ctx, vec![Record { chunk: Chunk::new("d1", "d1", text), dense: None, sparse }]).await?;
//!
//! let bm25 = SparseRetriever::new("bm25", encoder, store);
//! let hits = bm25.retrieve(&ctx, &[Query::new("what prevents scurvy?")]).await?;
//! assert_eq!(hits[0][0].chunk.id, "d1");
//! assert!(hits[0][0].sources.contains_key("bm25"));
//! # Ok(())
//! # }
//! ```

mod sparse;

pub use sparse::SparseRetriever;
