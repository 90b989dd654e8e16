//! Encoders for ragtune: they turn text into the vectors a [`VectorStore`](ragtune_core::VectorStore) searches.
//!
//! This release holds the BM25 sparse encoder ([`Bm25Encoder`]); ONNX dense embedders and cross-encoders join it
//! with the embeddings issue. Every encoder implements a seam of `ragtune-core`, so retrievers never name it.
//!
//! ```
//! use ragtune_core::{Ctx, SparseEncoder, TextRole};
//! use ragtune_embed::{Bm25Config, Bm25Encoder};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let bm25 = Bm25Encoder::new(Bm25Config::default())?;
//! let docs = bm25.encode(&Ctx::new(), &["Scurvy is caused by vitamin C deficiency."], TextRole::Passage).await?;
//! let query = bm25.encode(&Ctx::new(), &["what causes scurvy"], TextRole::Query).await?;
//! // "causes" and "caused" share a stem; the query weights every distinct term 1.0.
//! assert!(query[0].indices.iter().any(|i| docs[0].indices.contains(i)));
//! assert!(query[0].values.iter().all(|&w| w == 1.0));
//! # Ok(())
//! # }
//! ```

mod bm25;
mod text;

pub use bm25::{Bm25Config, Bm25Encoder};
pub use text::{Analyzer, ENGLISH_STOP_WORDS};

mod fast;
pub mod provisioning;

pub use fast::{
    CrossEncoderConfig, CrossEncoderReranker, FastEmbedder, FastEmbedderConfig, init_onnx_runtime, onnx_runtime_loaded,
};
