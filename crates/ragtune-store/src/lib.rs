//! Vector stores for ragtune.
//!
//! [`EmbeddedStore`] is the default backend: a directory holding a crash-safe [redb](https://www.redb.org)
//! database (chunks with their payload, sparse vectors and dense vectors), with an in-memory inverted index and
//! dense matrix rebuilt on open. It implements [`VectorStore`](ragtune_core::VectorStore) and passes the contract
//! suite of `ragtune-testkit`. A Qdrant adapter joins it behind a feature with the Qdrant issue.
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
//! store.upsert(&ctx, vec![Record { chunk: Chunk::new("d1#0", "d1", "seven"), dense: None, sparse: Some(sparse.clone()) }]).await?;
//! let hits = store.search(&ctx, &[SearchRequest { vector: VectorQuery::Sparse(sparse), top_k: 5, filter: None }]).await?;
//! assert_eq!(hits[0][0].chunk.id, "d1#0");
//! # Ok(())
//! # }
//! ```

mod ann;
mod codec;
mod embedded;
mod index;

pub use ann::AnnConfig;
pub use embedded::{EmbeddedStore, OptimizeReport, StoreOptions};
