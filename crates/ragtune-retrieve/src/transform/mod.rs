//! Query transformations: retrievers that change the question before (or while) retrieving with another
//! retriever, each composable with any [`Retriever`](ragtune_core::Retriever) — the hybrid one included.
//!
//! - [`HydeRetriever`]: a hypothetical answer passage, embedded and searched with (HyDE);
//! - [`MultiQueryRetriever`]: several generated queries plus the original, fused with RRF (RAG-Fusion);
//! - [`RewriteRetriever`]: the question rewritten for search, with the conversation (Rewrite-Retrieve-Read);
//! - [`SynonymExpansionRetriever`]: LLM-free expansion from a synonym table, merged with the original;
//! - [`RoutedRetriever`]: an LLM-free complexity router (optionally confirmed by the LLM) picking a plan;
//! - [`MultiHopRetriever`]: follow-up queries for what is still missing, hop by hop (CoRAG-style).
//!
//! Every transformation records what it did (generated text, queries, cost, time) as a `transform` trace event and
//! degrades to the plain query when the LLM fails, times out or answers garbage; the trace says why. The prompts
//! come from the caller (`ragtune_llm::prompts` has them all), so this crate depends on the `Llm` seam only.

mod expand;
mod hyde;
mod multi_hop;
mod multi_query;
mod rewrite;
mod router;

use ragtune_core::{Candidate, Cost, Ctx, Error, Llm, Prompt, Query, Result, TraceEvent};

pub use expand::{SynonymExpansionRetriever, SynonymTable};
pub use hyde::{HydeConfig, HydeRetriever};
pub use multi_hop::{MultiHopConfig, MultiHopRetriever};
pub use multi_query::{MultiQueryConfig, MultiQueryRetriever};
pub use ragtune_core::Complexity;
pub use rewrite::{RewriteConfig, RewriteRetriever};
pub use router::{RouteBudget, RouteDecision, RoutePlan, RouteSignals, RoutedRetriever, classify_heuristic};

/// A generated query is usable when it is non-blank and within the query size limit.
pub(crate) fn usable_query(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t.len() <= Query::MAX_BYTES).then(|| t.to_owned())
}

/// Renders `prompt` and asks for JSON (with one repair round).
pub(crate) async fn llm_json(
    llm: &dyn Llm,
    ctx: &Ctx,
    prompt: &Prompt,
    repair: &Prompt,
    values: &[(&str, &str)],
) -> Result<(serde_json::Value, Cost)> {
    let request = prompt.render(values)?;
    let answer = ragtune_core::prompt::generate_json(llm, ctx, request, repair).await?;
    Ok((answer.value, answer.cost))
}

/// Prefixes every provenance key of a list (`bm25` → `q1:bm25`), so fused lists keep where each came from.
pub(crate) fn relabel(list: Vec<Candidate>, prefix: &str) -> Vec<Candidate> {
    list.into_iter()
        .map(|mut c| {
            c.sources = std::mem::take(&mut c.sources).into_iter().map(|(k, v)| (format!("{prefix}:{k}"), v)).collect();
            c
        })
        .collect()
}

/// The trace event of a transformation that fell back to the plain query.
pub(crate) fn fallback_event(transform: &str, query: &Query, error: &Error) -> TraceEvent {
    TraceEvent::new("transform", transform.to_owned())
        .detail("query", query.text.clone())
        .detail("fallback", "plain query")
        .detail("reason", format!("{}: {}", error.kind(), error.message()))
}

/// The start of a text for traces.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod scenarios;
