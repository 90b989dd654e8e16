//! Vector stores for ragtune.
//!
//! [`EmbeddedStore`] is the default backend: a directory holding a crash-safe [redb](https://www.redb.org)
//! database (chunks with their payload, sparse vectors and dense vectors), with an in-memory inverted index and
//! dense matrix rebuilt on open. It implements [`VectorStore`](ragtune_core::VectorStore) and passes the contract
//! suite of `ragtune-testkit`.
//!
//! `QdrantStore`, behind the `qdrant` feature, keeps the same data in a collection of a
//! [Qdrant](https://qdrant.tech) server (1.17 or newer, over gRPC), passes the same contract suite, and adds
//! server-side hybrid search (`QdrantStore::hybrid_search`, reciprocal rank fusion inside Qdrant).
//!
//! ```
//! use ragtune_core::{Chunk, Ctx, Record, SearchRequest, SparseSpec, SparseVector, VectorQuery, VectorStore};
//! use ragtune_store::EmbeddedStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = EmbeddedStore::open(dir.path())?;
//! let ctx = Ctx::new();
//! store.ensure_spaces(&ctx, None, Some(&SparseSpec { encoder_id: "terms".into(), idf: true })).await?;
//! let sparse = SparseVector::from_pairs(vec![(7, 1.0)]);
//! store.upsert(&ctx, vec![Record { chunk: Chunk::new("d1#0", "d1", "seven"), dense: None, sparse: Some(sparse.clone()), spans: Vec::new() }]).await?;
//! let hits = store.search(&ctx, &[SearchRequest { vector: VectorQuery::Sparse(sparse), top_k: 5, filter: None }]).await?;
//! assert_eq!(hits[0][0].chunk.id, "d1#0");
//! # Ok(())
//! # }
//! ```
//!
//! With the `qdrant` feature, the same calls against a server:
//!
#![cfg_attr(feature = "qdrant", doc = "```no_run")]
#![cfg_attr(not(feature = "qdrant"), doc = "```ignore")]
//! use ragtune_core::{Ctx, SparseSpec, VectorStore};
//! use ragtune_store::{QdrantConfig, QdrantStore};
//!
//! # async fn run() -> ragtune_core::Result<()> {
//! let config = QdrantConfig {
//!     url: "http://127.0.0.1:6334".into(),
//!     collection: "docs".into(),
//!     api_key: std::env::var("QDRANT_API_KEY").ok().map(Into::into),
//!     ..QdrantConfig::default()
//! };
//! let store = QdrantStore::connect(config).await?;
//! store.ensure_spaces(&Ctx::new(), None, Some(&SparseSpec { encoder_id: "terms".into(), idf: true })).await?;
//! println!("{} on Qdrant {}: {:?}", store.collection(), store.server_version(), store.stats(&Ctx::new()).await?);
//! # Ok(())
//! # }
//! ```

mod ann;
mod codec;
mod embedded;
mod index;
#[cfg(feature = "qdrant")]
mod qdrant;
mod qdrant_config;
mod record;

pub use ann::AnnConfig;
pub use embedded::{EmbeddedStore, OptimizeReport, StoreOptions};
#[cfg(feature = "qdrant")]
pub use qdrant::QdrantStore;
pub use qdrant_config::QdrantConfig;
