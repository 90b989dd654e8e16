//! Multi-hop retrieval (CoRAG-style): follow-up queries for what is still missing.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Llm, Prompt, Query, Result, Retriever, TraceEvent};

use super::{clip, llm_json, relabel, usable_query};
use crate::{rrf_fuse, validate_all};

/// Multi-hop settings.
#[derive(Debug, Clone, Copy)]
pub struct MultiHopConfig {
    /// The follow-up prompt (`ragtune_llm::prompts::FOLLOW_UP`): placeholders `query` and `passages`, output
    /// `{"done": bool, "follow_up": "..."}`.
    pub prompt: Prompt,
    /// The JSON repair prompt.
    pub repair: Prompt,
    /// Retrievals at most, the first included (3 by default).
    pub max_hops: usize,
    /// Passages shown to the LLM (the best of everything found so far).
    pub passages_in_prompt: usize,
    /// Characters of each passage shown.
    pub passage_chars: usize,
    /// The RRF constant fusing the hops' lists.
    pub rrf_k: f32,
}

impl MultiHopConfig {
    /// Up to 3 hops, 5 passages of 400 characters in the prompt, RRF k = 60.
    #[must_use]
    pub fn new(prompt: Prompt, repair: Prompt) -> Self {
        Self { prompt, repair, max_hops: 3, passages_in_prompt: 5, passage_chars: 400, rrf_k: 60.0 }
    }
}

/// Multi-hop retrieval in the manner of CoRAG (Wang et al., 2025) and IRCoT: retrieve; show the LLM the question and
/// the best passages so far and ask what is missing, as a follow-up query; retrieve again; repeat until the LLM
/// says the passages suffice, the follow-up repeats an earlier query, a hop finds nothing new, or `max_hops` is
/// reached. The hops' lists are fused with RRF (provenance prefixed `hop0:`, `hop1:`…). Every hop and the reason
/// for stopping are traced; an LLM failure stops the hops with what was found so far.
#[derive(Debug, Clone)]
pub struct MultiHopRetriever {
    name: String,
    llm: Arc<dyn Llm>,
    inner: Arc<dyn Retriever>,
    config: MultiHopConfig,
}

impl MultiHopRetriever {
    /// A multi-hop retriever around `inner`.
    pub fn new(name: impl Into<String>, llm: Arc<dyn Llm>, inner: Arc<dyn Retriever>, config: MultiHopConfig) -> Self {
        Self { name: name.into(), llm, inner, config }
    }

    async fn one(&self, ctx: &Ctx, query: &Query) -> Result<Vec<Candidate>> {
        let mut lists: Vec<(f32, Vec<Candidate>)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut asked: Vec<String> = vec![query.text.to_lowercase()];
        let mut current = query.clone();
        let mut stop = format!("reached max_hops = {}", self.config.max_hops);
        for hop in 0..self.config.max_hops.max(1) {
            let started = Instant::now();
            let list = self.inner.retrieve(ctx, std::slice::from_ref(&current)).await?.pop().unwrap_or_default();
            let new = list.iter().filter(|c| seen.insert(c.chunk.id.clone())).count();
            ctx.trace(
                TraceEvent::new("transform", self.name.clone())
                    .detail("hop", hop)
                    .detail("query", current.text.clone())
                    .detail("hits", list.len())
                    .detail("new", new)
                    .elapsed(started.elapsed()),
            );
            if hop > 0 && new == 0 {
                stop = "the follow-up found nothing new".into();
                break;
            }
            lists.push((1.0, relabel(list, &format!("hop{hop}"))));
            if hop + 1 >= self.config.max_hops {
                break;
            }
            // The best passages of everything found so far.
            let so_far = rrf_fuse(&lists, self.config.rrf_k, self.config.passages_in_prompt);
            let passages: String = so_far
                .iter()
                .enumerate()
                .map(|(i, c)| format!("[{}] {}\n", i + 1, clip(&c.chunk.text, self.config.passage_chars)))
                .collect();
            let started = Instant::now();
            let answer = llm_json(
                &*self.llm,
                ctx,
                &self.config.prompt,
                &self.config.repair,
                &[("query", &query.text), ("passages", if passages.is_empty() { "(none)" } else { &passages })],
            )
            .await;
            let (value, cost) = match answer {
                Ok(a) => a,
                Err(e) => {
                    stop = format!("the LLM failed ({}: {}); keeping what was found", e.kind(), e.message());
                    break;
                }
            };
            let done = value["done"].as_bool().unwrap_or(false);
            let follow = value["follow_up"].as_str().and_then(usable_query);
            ctx.trace(
                TraceEvent::new("transform", self.name.clone())
                    .detail("hop", hop)
                    .detail("done", done)
                    .detail("follow_up", follow.clone().unwrap_or_default())
                    .detail("prompt", self.config.prompt.tag())
                    .cost(cost)
                    .elapsed(started.elapsed()),
            );
            match follow {
                _ if done => {
                    stop = "the LLM found the passages sufficient".into();
                    break;
                }
                None => {
                    stop = "the LLM gave no follow-up query".into();
                    break;
                }
                Some(f) if asked.contains(&f.to_lowercase()) => {
                    stop = format!("the follow-up {f:?} repeats an earlier query");
                    break;
                }
                Some(f) => {
                    asked.push(f.to_lowercase());
                    current = query.with_text(f);
                }
            }
        }
        ctx.trace(TraceEvent::new("transform", self.name.clone()).detail("hops", lists.len()).detail("stopped", stop));
        Ok(rrf_fuse(&lists, self.config.rrf_k, query.top_k))
    }
}

#[async_trait]
impl Retriever for MultiHopRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let mut out = Vec::with_capacity(queries.len());
        for q in queries {
            out.push(self.one(ctx, q).await?);
        }
        Ok(out)
    }
}
