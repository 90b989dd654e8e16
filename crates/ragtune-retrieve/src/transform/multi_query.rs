//! Multi-query retrieval (RAG-Fusion): several generated queries plus the original, fused with RRF.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::text::{jaccard, word_set};
use ragtune_core::{Candidate, Ctx, Llm, Prompt, Query, Result, Retriever, TraceEvent};

use super::{fallback_event, llm_json, relabel, usable_query};
use crate::rrf_fuse;
use crate::validate_all;

/// Multi-query settings.
#[derive(Debug, Clone, Copy)]
pub struct MultiQueryConfig {
    /// The generation prompt (`ragtune_llm::prompts::MULTI_QUERY`): placeholders `query` and `n`, output
    /// `{"queries": [...]}`.
    pub prompt: Prompt,
    /// The JSON repair prompt (`ragtune_llm::prompts::REPAIR_JSON`).
    pub repair: Prompt,
    /// Generated queries wanted (4 by default); the original is always searched as well.
    pub n: usize,
    /// A generated query whose word-set Jaccard similarity to the original or to a kept query reaches this is
    /// dropped as a near-duplicate.
    pub max_similarity: f32,
    /// The RRF constant of the fusion.
    pub rrf_k: f32,
    /// The original query's weight in the fusion (generated ones weigh 1).
    pub original_weight: f32,
}

impl MultiQueryConfig {
    /// Four generated queries, near-duplicates (Jaccard ≥ 0.8) dropped, RRF k = 60, all weights 1.
    #[must_use]
    pub fn new(prompt: Prompt, repair: Prompt) -> Self {
        Self { prompt, repair, n: 4, max_similarity: 0.8, rrf_k: 60.0, original_weight: 1.0 }
    }
}

/// RAG-Fusion: the LLM writes `n` diverse reformulations; the inner retriever answers all of them and the original
/// in one batch, and the lists are fused with RRF. Provenance keys are prefixed by the query that found the
/// candidate (`q0:` the original, `q1:`… the generated ones). Near-duplicate generations are dropped (Jaccard
/// diversity filter); the trace lists what was generated, kept and dropped. When the LLM fails, only the original
/// is searched.
#[derive(Debug, Clone)]
pub struct MultiQueryRetriever {
    name: String,
    llm: Arc<dyn Llm>,
    inner: Arc<dyn Retriever>,
    config: MultiQueryConfig,
}

impl MultiQueryRetriever {
    /// A multi-query retriever around `inner`.
    pub fn new(
        name: impl Into<String>,
        llm: Arc<dyn Llm>,
        inner: Arc<dyn Retriever>,
        config: MultiQueryConfig,
    ) -> Self {
        Self { name: name.into(), llm, inner, config }
    }

    /// Keeps the usable, diverse queries among `generated`, at most `n`; returns (kept, dropped with a reason).
    #[must_use]
    pub fn select(&self, original: &str, generated: &[String]) -> (Vec<String>, Vec<String>) {
        let mut kept: Vec<String> = Vec::new();
        let mut dropped = Vec::new();
        for g in generated {
            let Some(q) = usable_query(g) else {
                dropped.push(format!("{g:?}: empty or too long"));
                continue;
            };
            let similar = std::iter::once(original)
                .chain(kept.iter().map(String::as_str))
                .map(|k| (k, jaccard(&word_set(&q), &word_set(k))))
                .find(|(_, j)| *j >= self.config.max_similarity);
            if let Some((k, j)) = similar {
                dropped.push(format!("{q:?}: {j:.2} similar to {k:?}"));
            } else if kept.len() < self.config.n {
                kept.push(q);
            } else {
                dropped.push(format!("{q:?}: beyond n = {}", self.config.n));
            }
        }
        (kept, dropped)
    }
}

#[async_trait]
impl Retriever for MultiQueryRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let mut out = Vec::with_capacity(queries.len());
        for query in queries {
            let started = Instant::now();
            let n = self.config.n.to_string();
            let generated = llm_json(
                &*self.llm,
                ctx,
                &self.config.prompt,
                &self.config.repair,
                &[("query", &query.text), ("n", &n)],
            )
            .await;
            let llm_elapsed = started.elapsed();
            let mut all = vec![query.clone()];
            match generated {
                Ok((value, cost)) => {
                    let texts: Vec<String> = value["queries"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|q| q.as_str().map(str::to_owned)).collect())
                        .unwrap_or_default();
                    let (kept, dropped) = self.select(&query.text, &texts);
                    ctx.trace(
                        TraceEvent::new("transform", self.name.clone())
                            .detail("query", query.text.clone())
                            .detail("generated", texts.clone())
                            .detail("kept", kept.clone())
                            .detail("dropped", dropped)
                            .detail("prompt", self.config.prompt.tag())
                            .cost(cost)
                            .elapsed(llm_elapsed),
                    );
                    all.extend(kept.into_iter().map(|t| query.with_text(t)));
                }
                Err(e) => ctx.trace(fallback_event(&self.name, query, &e).elapsed(llm_elapsed)),
            }
            let lists = self.inner.retrieve(ctx, &all).await?;
            let weighted: Vec<(f32, Vec<Candidate>)> = lists
                .into_iter()
                .enumerate()
                .map(|(i, l)| (if i == 0 { self.config.original_weight } else { 1.0 }, relabel(l, &format!("q{i}"))))
                .collect();
            out.push(rrf_fuse(&weighted, self.config.rrf_k, query.top_k));
        }
        Ok(out)
    }
}
