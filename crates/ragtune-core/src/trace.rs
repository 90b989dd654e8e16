//! Trace events: every decision, score and cost a request produced.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Cost;

/// One recorded step of a request.
///
/// Events are deterministic for the same inputs except `elapsed_us`, which is measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceEvent {
    /// Pipeline stage (`route`, `retrieve`, `evaluate`, `correct`, `rerank`, `assemble`, `generate`, `judge`).
    pub stage: String,
    /// What happened within the stage (`bm25`, `hybrid`, `skipped`, a verdict).
    pub action: String,
    /// Structured details: scores, counts, reasons, parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<String, serde_json::Value>,
    /// What the step cost.
    #[serde(default)]
    pub cost: Cost,
    /// Wall time of the step in microseconds.
    #[serde(default)]
    pub elapsed_us: u64,
}

impl TraceEvent {
    /// An event for `stage` / `action` with no details.
    pub fn new(stage: impl Into<String>, action: impl Into<String>) -> Self {
        Self { stage: stage.into(), action: action.into(), detail: BTreeMap::new(), cost: Cost::ZERO, elapsed_us: 0 }
    }

    /// Adds a detail.
    #[must_use]
    pub fn detail(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.detail.insert(key.into(), value.into());
        self
    }

    /// Sets the cost.
    #[must_use]
    pub fn cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }

    /// Whether this event records one LLM request: the `llm` stage's `generate`, `cached` or `failed` (what an
    /// LLM client traces per request). Other `llm` events, such as the `repair` that announces a structured
    /// output's repair request, are not requests of their own.
    #[must_use]
    pub fn is_llm_call(&self) -> bool {
        self.stage == "llm" && matches!(self.action.as_str(), "generate" | "cached" | "failed")
    }

    /// Sets the elapsed time.
    #[must_use]
    pub fn elapsed(mut self, elapsed: std::time::Duration) -> Self {
        self.elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_events_of_a_request_are_llm_calls() {
        for action in ["generate", "cached", "failed"] {
            assert!(TraceEvent::new("llm", action).is_llm_call(), "{action}");
        }
        assert!(!TraceEvent::new("llm", "repair").is_llm_call());
        assert!(!TraceEvent::new("generate", "llm").is_llm_call());
    }
}
