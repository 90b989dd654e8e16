//! Encoders for ragtune: they turn text into the vectors a [`VectorStore`](ragtune_core::VectorStore) searches.
//!
//! This release holds the BM25 sparse encoder ([`Bm25Encoder`]); ONNX dense embedders and cross-encoders join it
//! with the embeddings issue. Every encoder implements a seam of `ragtune-core`, so retrievers never name it.
//!
//! ```
//! use ragtune_core::{Ctx, SparseEncoder, TextRole};
//! use ragtune_embed::{Bm25Config, Bm25Encoder};
//!
//! # tokio_test_block_on(async {
//! let bm25 = Bm25Encoder::new(Bm25Config::default())?;
//! let docs = bm25.encode(&Ctx::new(), &["Scurvy is caused by vitamin C deficiency."], TextRole::Passage).await?;
//! let query = bm25.encode(&Ctx::new(), &["what causes scurvy"], TextRole::Query).await?;
//! // "what" is kept, "causes" and "caused" share the stem "caus", the query weights every term 1.0.
//! assert!(query[0].indices.iter().any(|i| docs[0].indices.contains(i)));
//! # Ok::<(), ragtune_core::Error>(())
//! # })?;
//! # Ok::<(), ragtune_core::Error>(())
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     // The encoder never awaits anything, so polling once is enough here.
//! #     let mut f = std::pin::pin!(f);
//! #     let waker = std::task::Waker::noop();
//! #     match f.as_mut().poll(&mut std::task::Context::from_waker(&waker)) {
//! #         std::task::Poll::Ready(v) => v,
//! #         std::task::Poll::Pending => unreachable!(),
//! #     }
//! # }
//! ```

mod bm25;
mod text;

pub use bm25::{Bm25Config, Bm25Encoder};
pub use text::{Analyzer, ENGLISH_STOP_WORDS};
