//! Rewrite-Retrieve-Read: retrieve with the question rewritten for search.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::{Candidate, Ctx, Error, Llm, Prompt, Query, Result, Retriever, TraceEvent};

use super::{fallback_event, llm_json, usable_query};
use crate::validate_all;

/// Rewrite settings.
#[derive(Debug, Clone, Copy)]
pub struct RewriteConfig {
    /// The rewrite prompt (`ragtune_llm::prompts::REWRITE`): placeholders `query` and `context`, output
    /// `{"query": "..."}`.
    pub prompt: Prompt,
    /// The JSON repair prompt.
    pub repair: Prompt,
    /// Conversation turns (the latest ones) shown to the LLM.
    pub max_context_turns: usize,
}

impl RewriteConfig {
    /// The last 6 turns of conversation as context.
    #[must_use]
    pub fn new(prompt: Prompt, repair: Prompt) -> Self {
        Self { prompt, repair, max_context_turns: 6 }
    }
}

/// Rewrite-Retrieve-Read (Ma et al., 2023): the LLM rewrites the question into a search query, resolving references
/// from the conversation ([`Query::context`]), and the inner retriever searches with the rewrite. An empty or
/// unusable rewrite, or an LLM failure, searches with the original question; the trace shows the rewrite or why
/// there is none.
#[derive(Debug, Clone)]
pub struct RewriteRetriever {
    name: String,
    llm: Arc<dyn Llm>,
    inner: Arc<dyn Retriever>,
    config: RewriteConfig,
}

impl RewriteRetriever {
    /// A rewriting retriever around `inner`.
    pub fn new(name: impl Into<String>, llm: Arc<dyn Llm>, inner: Arc<dyn Retriever>, config: RewriteConfig) -> Self {
        Self { name: name.into(), llm, inner, config }
    }
}

#[async_trait]
impl Retriever for RewriteRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let mut rewritten = Vec::with_capacity(queries.len());
        for query in queries {
            let started = Instant::now();
            let turns = &query.context[query.context.len().saturating_sub(self.config.max_context_turns)..];
            let context = if turns.is_empty() { "(none)".to_owned() } else { turns.join("\n") };
            let answer = llm_json(
                &*self.llm,
                ctx,
                &self.config.prompt,
                &self.config.repair,
                &[("query", &query.text), ("context", &context)],
            )
            .await;
            let elapsed = started.elapsed();
            let rewrite = answer.and_then(|(v, cost)| {
                let text = v["query"].as_str().and_then(usable_query);
                text.map(|t| (t, cost)).ok_or_else(|| Error::malformed_output(format!("no usable rewrite in {v}")))
            });
            match rewrite {
                Ok((text, cost)) => {
                    ctx.trace(
                        TraceEvent::new("transform", self.name.clone())
                            .detail("query", query.text.clone())
                            .detail("rewrite", text.clone())
                            .detail("context_turns", turns.len())
                            .detail("prompt", self.config.prompt.tag())
                            .cost(cost)
                            .elapsed(elapsed),
                    );
                    rewritten.push(query.with_text(text));
                }
                Err(e) => {
                    ctx.trace(fallback_event(&self.name, query, &e).elapsed(elapsed));
                    rewritten.push(query.clone());
                }
            }
        }
        self.inner.retrieve(ctx, &rewritten).await
    }
}
