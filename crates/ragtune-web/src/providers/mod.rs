//! The providers, one module each, every one written to its public API reference (cited in the module's doc).
//!
//! Each implements [`WebSearch`](ragtune_core::WebSearch) for one HTTP request per query, returns at most
//! `max_results` results in the provider's order, and turns every failure into a classified
//! [`Error`](ragtune_core::Error): none retries, waits or keeps state; the decorators in
//! [`resilience`](crate::resilience) do.

pub mod arxiv;
pub mod exa;
pub mod perplexity;
pub mod searxng;
pub mod semantic_scholar;
pub mod tavily;

use ragtune_core::{Cost, CostModel, Ctx, TraceEvent, WebResult};

/// A result with what every provider gives; the metadata (domain, tier) is filled in later.
pub(crate) fn result(provider: &str, url: String, title: String, content: String) -> WebResult {
    WebResult { url, title, content, provider: provider.to_owned(), ..WebResult::default() }
}

/// The declared price of one search call: one call, `max_results` documents, `ms` of expected latency.
pub(crate) fn per_call(ms: f64) -> CostModel {
    CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::ZERO, ms_per_doc: ms }
}

/// Records one provider call in the trace.
pub(crate) fn trace_call(ctx: &Ctx, provider: &str, results: usize, tokens: u64, elapsed: std::time::Duration) {
    ctx.trace(
        TraceEvent::new("web", "search")
            .detail("provider", provider)
            .detail("results", results)
            .cost(Cost::new(tokens, results as u64, 1))
            .elapsed(elapsed),
    );
}

/// Text with whitespace runs collapsed, so snippets spread over lines (Atom, HTML-ish APIs) read as one paragraph.
pub(crate) fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
