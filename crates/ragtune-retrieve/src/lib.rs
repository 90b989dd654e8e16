//! Retrieval strategies for ragtune, each a [`Retriever`](ragtune_core::Retriever) built from core seams only.
//!
//! - [`SparseRetriever`]: BM25 (or any sparse encoder) over any store;
//! - [`DenseRetriever`]: any embedder over any store;
//! - [`HybridRetriever`]: fusion of any retrievers by weighted Reciprocal Rank Fusion, a convex combination of
//!   normalised scores or distribution-based score fusion, with fixed or query-time weights ([`fuse`] is the pure
//!   function, in [`fusion`]);
//! - [`ParentRetriever`]: "snippet then parent" — search passages, return their parent sections;
//! - [`HeaderBoostRetriever`]: the header boost ([`boost`]) after any retriever's ranking.
//!
//! - [`transform`]: query transformations around any retriever — HyDE, multi-query fusion, rewrite, synonym
//!   expansion, the complexity router and multi-hop retrieval (LLM-driven ones through the `Llm` seam, degrading
//!   to the plain query when the LLM fails).
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
//! store.upsert(&ctx, vec![Record { chunk: Chunk::new("d1", "d1", text), dense: None, sparse, spans: Vec::new() }]).await?;
//!
//! let bm25 = SparseRetriever::new("bm25", encoder, store);
//! let hits = bm25.retrieve(&ctx, &[Query::new("what prevents scurvy?")]).await?;
//! assert_eq!(hits[0][0].chunk.id, "d1");
//! assert!(hits[0][0].sources.contains_key("bm25"));
//! # Ok(())
//! # }
//! ```

pub mod boost;
mod dense;
pub mod fusion;
mod hybrid;
mod parent;
mod sparse;
pub mod transform;

pub use boost::{HeaderBoostRetriever, header_boost};
pub use dense::DenseRetriever;
pub use fusion::{FusionConfig, FusionMethod, fuse, fuse_weighted, fusion_weights, rrf_fuse};
pub use hybrid::{Fused, FusedLevel, HybridConfig, HybridRetriever, ListLevel, scale_by_levels};
pub use parent::ParentRetriever;
pub use sparse::SparseRetriever;

use ragtune_core::{Candidate, Ctx, Query, Result, ScoredHit, VectorStore};

/// Validates every query, naming the failing one in a batch.
fn validate_all(queries: &[Query]) -> Result<()> {
    for (i, q) in queries.iter().enumerate() {
        q.validate().map_err(|e| if queries.len() > 1 { e.context(format!("query {}", i + 1)) } else { e })?;
    }
    Ok(())
}

/// Store hits to candidates of `strategy`, with 1-based ranks.
fn to_candidates(results: Vec<Vec<ScoredHit>>, strategy: &str) -> Vec<Vec<Candidate>> {
    results
        .into_iter()
        .map(|hits| hits.into_iter().zip(1u32..).map(|(hit, rank)| Candidate::from_hit(hit, strategy, rank)).collect())
        .collect()
}

/// Fills in, from `store`, the chunks of the candidates of `strategy` that came without their text
/// ([`Retriever::retrieve_without_text`](ragtune_core::Retriever::retrieve_without_text)), in one read for the
/// whole batch; a candidate whose chunk was deleted meanwhile is dropped.
async fn fill_text_from(
    store: &dyn VectorStore,
    ctx: &Ctx,
    strategy: &str,
    lists: &mut [Vec<Candidate>],
) -> Result<()> {
    let lacks = |c: &Candidate| c.chunk.text.is_empty() && c.sources.contains_key(strategy);
    let mut wanted: Vec<&str> = lists.iter().flatten().filter(|c| lacks(c)).map(|c| c.chunk.id.as_str()).collect();
    if wanted.is_empty() {
        return Ok(());
    }
    wanted.sort_unstable();
    // How many candidates want each chunk: the last one takes it, the others get a copy.
    let mut ids: Vec<String> = Vec::with_capacity(wanted.len());
    let mut uses: Vec<usize> = Vec::with_capacity(wanted.len());
    for group in wanted.chunk_by(|a, b| a == b) {
        ids.push(group[0].to_owned());
        uses.push(group.len());
    }
    let mut found = store.get(ctx, &ids).await?;
    for list in lists {
        list.retain_mut(|c| {
            if !lacks(c) {
                return true;
            }
            let Ok(at) = ids.binary_search_by(|id| id.as_str().cmp(&c.chunk.id)) else { return false };
            let Some(slot) = found.get_mut(at) else { return false };
            uses[at] = uses[at].saturating_sub(1);
            let chunk = if uses[at] == 0 { slot.take() } else { slot.clone() };
            match chunk {
                Some(chunk) => {
                    c.chunk = chunk;
                    true
                }
                None => false,
            }
        });
    }
    Ok(())
}
/// Returns `Pending` once, waking itself, then `Ready`: the executor polls whatever else is ready first. No
/// runtime needed (the crate stays runtime-agnostic).
pub(crate) async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}
