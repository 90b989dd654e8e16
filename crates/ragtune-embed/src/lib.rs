//! Encoders for ragtune: they turn text into the vectors a [`VectorStore`](ragtune_core::VectorStore) searches.
//!
//! - [`Bm25Encoder`]: the BM25 sparse encoder (a [`SparseEncoder`](ragtune_core::SparseEncoder)), pure Rust.
//! - [`FastEmbedder`]: dense embeddings (an [`Embedder`](ragtune_core::Embedder)) from an ONNX model through
//!   fastembed and ONNX Runtime; by default all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised).
//! - [`CrossEncoderReranker`]: a cross-encoder (a [`Reranker`](ragtune_core::Reranker)) on the same runtime.
//! - [`ModelTokenCounter`]: the embedding model's tokenizer as a [`TokenCounter`](ragtune_core::TokenCounter), so
//!   that chunkers cut passages the model sees whole.
//!
//! ONNX Runtime is a shared library loaded at run time ([`init_onnx_runtime`], once per process); without it the
//! ONNX types return [`Unavailable`](ragtune_core::ErrorKind::Unavailable) errors, never panics. Named models from
//! the Hugging Face hub ([`ModelSource`]`::Named`) need the `online` feature.
//! Every encoder implements a seam of `ragtune-core`, so retrievers never name it.
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
//!
//! Dense embeddings need the files `cargo xtask models` provisions (`ragtune-provision` fetches them; this crate only
//! takes their paths). Doc tests have none, so this one only compiles:
//!
//! ```no_run
//! use ragtune_core::{Ctx, Embedder, TextRole};
//! use ragtune_embed::{FastEmbedder, FastEmbedderConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let home = std::path::Path::new("/home/me/.cache/ragtune");
//! let config = FastEmbedderConfig::new(
//!     home.join("models/all-MiniLM-L6-v2"),
//!     home.join("onnxruntime/1.31.1/libonnxruntime.so.1.31.1"),
//! );
//! let embedder = FastEmbedder::new(config)?;
//! let v = embedder.embed(&Ctx::new(), &["A man is eating food."], TextRole::Passage).await?;
//! assert_eq!(v[0].len(), embedder.spec().dim); // 384, L2-normalised
//! # Ok(())
//! # }
//! ```

mod bm25;
mod cache;
mod text;

pub use bm25::{Bm25Config, Bm25Encoder};
pub use cache::{QueryCache, RequestVectors};
pub use text::{Analyzer, ENGLISH_STOP_WORDS};

mod fast;
mod tokens;

pub use tokens::ModelTokenCounter;

pub use fast::{
    CrossEncoderConfig, CrossEncoderReranker, FastEmbedder, FastEmbedderConfig, ModelSource, init_onnx_runtime,
    onnx_runtime_loaded,
};
