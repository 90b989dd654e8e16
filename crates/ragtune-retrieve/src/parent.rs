//! "Snippet then parent": search small child passages, return their parent sections.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Query, Result, Retriever, TraceEvent, VectorStore, sort_ranked};

use crate::validate_all;

/// Retrieves child passages with an inner retriever and returns the parent sections they belong to.
///
/// Small passages match precisely; whole sections give the reader context. Each parent scores as its best child,
/// keeps that child's provenance, and appears once; passages without a parent are returned as they are. The inner
/// retriever is asked for `fan_out` times `top_k` passages so that enough distinct parents remain after merging.
#[derive(Debug, Clone)]
pub struct ParentRetriever {
    inner: Arc<dyn Retriever>,
    store: Arc<dyn VectorStore>,
    fan_out: usize,
    name: String,
}

impl ParentRetriever {
    /// Wraps `inner`, fetching parents from `store`; `fan_out` is clamped to at least 1.
    pub fn new(inner: Arc<dyn Retriever>, store: Arc<dyn VectorStore>, fan_out: usize) -> Self {
        let name = format!("{}+parent", inner.name());
        Self { inner, store, fan_out: fan_out.max(1), name }
    }
}

#[async_trait]
impl Retriever for ParentRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        let started = Instant::now();
        validate_all(queries)?;
        let wide: Vec<Query> =
            queries.iter().map(|q| Query { top_k: q.top_k.saturating_mul(self.fan_out), ..q.clone() }).collect();
        let children = self.inner.retrieve(ctx, &wide).await?;
        let mut out = Vec::with_capacity(queries.len());
        let mut fetched = 0usize;
        for (q, kids) in queries.iter().zip(children) {
            // Best child per parent (the inner list is already in rank order).
            let mut best: BTreeMap<String, Candidate> = BTreeMap::new();
            let mut order: Vec<String> = Vec::new();
            for c in kids {
                let key = c.chunk.parent_id.clone().unwrap_or_else(|| c.chunk.id.clone());
                if let std::collections::btree_map::Entry::Vacant(slot) = best.entry(key.clone()) {
                    order.push(key);
                    slot.insert(c);
                }
            }
            let wanted: Vec<String> = order.iter().filter(|k| best[*k].chunk.parent_id.is_some()).cloned().collect();
            let parents = self.store.get(ctx, &wanted).await?;
            fetched += wanted.len();
            let parents: BTreeMap<String, ragtune_core::Chunk> =
                wanted.into_iter().zip(parents).filter_map(|(id, p)| p.map(|p| (id, p))).collect();
            let mut list: Vec<Candidate> = order
                .into_iter()
                .filter_map(|key| {
                    let child = best.remove(&key)?;
                    match (&child.chunk.parent_id, parents.get(&key)) {
                        (Some(_), Some(parent)) => Some(Candidate { chunk: parent.clone(), ..child }),
                        // A parent that is gone (deleted concurrently) leaves the passage itself.
                        _ => Some(child),
                    }
                })
                .collect();
            sort_ranked(&mut list, |c| (c.score, c.chunk.id.as_str()));
            list.truncate(q.top_k);
            out.push(list);
        }
        ctx.trace(
            TraceEvent::new("retrieve", self.name.clone())
                .detail("fan_out", self.fan_out)
                .detail("parents_fetched", fetched)
                .elapsed(started.elapsed()),
        );
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::{Chunk, ChunkKind, Record};
    use ragtune_testkit::MemoryStore;
    use ragtune_testkit::fakes::StaticRetriever;

    fn child(id: &str, parent: Option<&str>, score: f32) -> Candidate {
        let mut chunk = Chunk::new(id, "doc", id);
        chunk.parent_id = parent.map(str::to_owned);
        Candidate::from_hit(ragtune_core::ScoredHit { chunk, score }, "bm25", 1)
    }

    #[tokio::test]
    async fn returns_each_parent_once_at_its_best_child() {
        let ctx = Ctx::new();
        let store = Arc::new(MemoryStore::default());
        let mut s1 = Chunk::new("doc#s0", "doc", "whole first section");
        s1.kind = ChunkKind::Section;
        let mut s2 = Chunk::new("doc#s1", "doc", "whole second section");
        s2.kind = ChunkKind::Section;
        store
            .upsert(
                &ctx,
                vec![
                    Record { chunk: s1, dense: None, sparse: None, spans: Vec::new() },
                    Record { chunk: s2, dense: None, sparse: None, spans: Vec::new() },
                ],
            )
            .await
            .unwrap();
        let inner = StaticRetriever::new("bm25").with_candidates(
            "q",
            vec![
                child("doc#0", Some("doc#s0"), 0.9),
                child("doc#1", Some("doc#s0"), 0.8),
                child("doc#2", Some("doc#s1"), 0.7),
                child("loose", None, 0.6),
            ],
        );
        let r = ParentRetriever::new(Arc::new(inner), store, 3);
        let out = r.retrieve(&ctx, &[Query::new("q").with_top_k(3)]).await.unwrap();
        let got: Vec<(String, f32)> = out[0].iter().map(|c| (c.chunk.id.clone(), c.score)).collect();
        assert_eq!(got, vec![("doc#s0".into(), 0.9), ("doc#s1".into(), 0.7), ("loose".into(), 0.6)]);
        assert_eq!(out[0][0].chunk.text, "whole first section");
        assert!(out[0][0].sources.contains_key("bm25"));
    }
}
