//! Test support for ragtune: fakes for unit tests of logic, a reference in-memory store, and the contract suites
//! every implementation of a seam runs.
//!
//! - [`fakes`]: deterministic stand-ins for model-backed seams ([`HashEmbedder`](fakes::HashEmbedder),
//!   [`HashSparseEncoder`](fakes::HashSparseEncoder), [`ScriptedReranker`](fakes::ScriptedReranker),
//!   [`StaticRetriever`](fakes::StaticRetriever)), so retrieval, fusion and control logic is tested without
//!   provisioning a model.
//! - [`fixtures`]: small datasets written to disk (a tiny BEIR dataset), a SearXNG-compatible endpoint.
//! - [`http`]: a small blocking HTTP client, and the one scripted HTTP server every test uses
//!   ([`ScriptedServer`](http::ScriptedServer), [`serve`](http::serve)).
//! - [`qdrant`]: real Qdrant servers (one node or a loopback cluster) started, killed and restarted for tests and
//!   for `cargo xtask qdrant`.
//! - [`MemoryStore`]: a brute-force [`VectorStore`](ragtune_core::VectorStore) that passes the whole contract; a
//!   reference for tests, not a production store.
//! - [`contract`]: the contract suites of the `VectorStore`, `WebSearch` and `Embedder` seams. Every
//!   implementation, in this workspace or in a fork, runs its seam's suite from its tests; one that passes it can
//!   replace any other.
//!
//! This is a test-support crate: its checks panic on purpose, and it belongs in `[dev-dependencies]`.
//!
//! ```
//! use ragtune_core::{Ctx, Record, SearchRequest, TextRole, VectorQuery, VectorStore, Embedder};
//! use ragtune_testkit::{MemoryStore, contract, fakes::HashEmbedder};
//!
//! # fn main() -> ragtune_core::Result<()> {
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # rt.block_on(async {
//! let ctx = Ctx::new();
//! let embedder = HashEmbedder::new(32);
//! let store = MemoryStore::new();
//! store.ensure_spaces(&ctx, Some(embedder.spec()), None).await?;
//! let texts = ["scurvy is caused by a lack of vitamin c", "the stock market fell"];
//! let vectors = embedder.embed(&ctx, &texts, TextRole::Passage).await?;
//! let records = vectors.into_iter().enumerate().map(|(i, v)| Record {
//!     chunk: ragtune_core::Chunk::new(format!("d{i}#0"), format!("d{i}"), texts[i]),
//!     dense: Some(v),
//!     sparse: None,
//!     spans: Vec::new(),
//! });
//! store.upsert(&ctx, records.collect()).await?;
//! let query = embedder.embed(&ctx, &["what causes scurvy"], TextRole::Query).await?.remove(0);
//! let hits = store.search(&ctx, &[SearchRequest { vector: VectorQuery::Dense(query), top_k: 1, filter: None }]).await?;
//! assert_eq!(hits[0][0].chunk.id, "d0#0");
//!
//! // The whole contract, as a store crate runs it from a `#[tokio::test]`:
//! contract::vector_store_contract(|| async { MemoryStore::new() }).await;
//! # Ok(())
//! # })
//! # }
//! ```

pub mod contract;
pub mod fakes;
pub mod fixtures;
pub mod http;
mod memory;
pub mod qdrant;

pub use memory::MemoryStore;
