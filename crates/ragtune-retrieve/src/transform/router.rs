//! The adaptive complexity router: simple, moderate or complex, and the plan each gets.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use ragtune_core::text::{self, is_question_word};
use ragtune_core::{Candidate, Complexity, Ctx, Llm, Prompt, Query, Result, Retriever, TraceEvent};
use serde::Serialize;

use super::llm_json;
use crate::validate_all;

/// The index of a complexity in the route tables (simplest first).
fn index(c: Complexity) -> usize {
    match c {
        Complexity::Simple => 0,
        Complexity::Moderate => 1,
        Complexity::Complex => 2,
    }
}

/// What the heuristic saw in a question.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RouteSignals {
    /// Words in the question.
    pub words: usize,
    /// Capitalised words after the first, acronyms and numbers: a rough count of named things.
    pub entities: usize,
    /// Comparison cues (`compare`, `versus`, `difference between`, `better than`…).
    pub comparison: bool,
    /// Several parts (more than one question mark, `;`, `and` between two questions, enumerations).
    pub multi_part: bool,
    /// Explanation or reasoning cues (`why`, `how does`, `explain`, `effect of`…).
    pub reasoning: bool,
    /// The points these add up to (simple ≤ 1, moderate 2–3, complex ≥ 4).
    pub score: u32,
}

const COMPARISON: &[&str] = &[
    "compare",
    "comparison",
    "versus",
    " vs ",
    " vs.",
    "difference between",
    "differences between",
    "better than",
    "worse than",
    "more than",
    "less than",
    "compared to",
    "compared with",
    "similarities",
    "contrast",
];
const REASONING: &[&str] = &[
    "why ",
    "how does",
    "how do ",
    "how did",
    "explain",
    "effect of",
    "impact of",
    "relationship",
    "cause of",
    "lead to",
];

/// The LLM-free classifier: counts of words and named things and cues of comparison, several parts and reasoning,
/// added into a score (see [`RouteSignals`]). Deterministic; the signals go into the trace.
#[must_use]
pub fn classify_heuristic(text: &str) -> (Complexity, RouteSignals) {
    let lower = format!(" {} ", text.to_lowercase());
    let words: Vec<&str> = text.split_whitespace().collect();
    let entities = words
        .iter()
        .skip(1)
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|w| {
            !w.is_empty() && (w.chars().next().is_some_and(char::is_uppercase) || w.chars().any(|c| c.is_ascii_digit()))
        })
        .count();
    let comparison = COMPARISON.iter().any(|c| lower.contains(c));
    let reasoning = REASONING.iter().any(|c| lower.contains(c));
    let question_words = text::words(text).filter(|w| is_question_word(w)).count();
    let multi_part = text.matches('?').count() > 1
        || text.contains(';')
        || (question_words >= 2 && lower.contains(" and "))
        || lower.contains(" first ") && lower.contains(" then ")
        || lower.contains(" 1.") && lower.contains(" 2.");
    let mut score = 0;
    score += u32::from(words.len() > 12) + u32::from(words.len() > 25);
    score += u32::from(entities >= 2) + u32::from(entities >= 4);
    score += 2 * u32::from(comparison) + 2 * u32::from(multi_part) + u32::from(reasoning);
    let complexity = match score {
        0 | 1 => Complexity::Simple,
        2 | 3 => Complexity::Moderate,
        _ => Complexity::Complex,
    };
    (complexity, RouteSignals { words: words.len(), entities, comparison, multi_part, reasoning, score })
}

/// The budget a route gets: what the later stages may spend on the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RouteBudget {
    /// Retrieval steps (hops, transformations) allowed.
    pub retrieval_steps: u32,
    /// Candidates the reranker may score.
    pub rerank_docs: u32,
    /// Results returned at most (the query's `top_k` is cut to it).
    pub max_results: usize,
}

/// What a route does: the retriever to use and its budget.
#[derive(Debug, Clone)]
pub struct RoutePlan {
    /// The retriever (strategy set) for this complexity.
    pub retriever: Arc<dyn Retriever>,
    /// The budget for this complexity.
    pub budget: RouteBudget,
}

/// A routing decision, as traced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteDecision {
    /// The complexity used.
    pub complexity: Complexity,
    /// The heuristic's verdict and signals.
    pub heuristic: Complexity,
    /// The signals.
    pub signals: RouteSignals,
    /// The LLM's verdict, when the LLM classifier ran and answered.
    pub llm: Option<Complexity>,
    /// Why the LLM's verdict is missing, when it was asked and failed.
    pub llm_error: Option<String>,
    /// The strategy that answered.
    pub strategy: String,
    /// The budget granted.
    pub budget: RouteBudget,
}

/// The adaptive router: classifies each question (the heuristic always; the LLM classifier too when configured,
/// whose verdict then wins), and answers it with the plan of its complexity, cutting `top_k` to the plan's
/// `max_results`. An LLM failure falls back to the heuristic's verdict; the `route` trace event holds the decision.
#[derive(Debug, Clone)]
pub struct RoutedRetriever {
    name: String,
    plans: [RoutePlan; 3],
    llm: Option<(Arc<dyn Llm>, Prompt, Prompt)>,
}

impl RoutedRetriever {
    /// A router with a plan per complexity.
    pub fn new(name: impl Into<String>, simple: RoutePlan, moderate: RoutePlan, complex: RoutePlan) -> Self {
        Self { name: name.into(), plans: [simple, moderate, complex], llm: None }
    }

    /// Adds the LLM classifier: `prompt` is `ragtune_llm::prompts::ROUTE` (placeholder `query`, output
    /// `{"complexity": ...}`), `repair` the JSON repair prompt.
    #[must_use]
    pub fn with_llm(mut self, llm: Arc<dyn Llm>, prompt: Prompt, repair: Prompt) -> Self {
        self.llm = Some((llm, prompt, repair));
        self
    }

    /// Classifies a question and picks its plan.
    pub async fn decide(&self, ctx: &Ctx, query: &Query) -> (RouteDecision, &RoutePlan) {
        let (heuristic, signals) = classify_heuristic(&query.text);
        let (mut llm_verdict, mut llm_error) = (None, None);
        if let Some((llm, prompt, repair)) = &self.llm {
            match llm_json(&**llm, ctx, prompt, repair, &[("query", &query.text)]).await {
                Ok((v, _)) => match v["complexity"].as_str().map(str::parse::<Complexity>) {
                    Some(Ok(c)) => llm_verdict = Some(c),
                    _ => llm_error = Some(format!("no complexity in {v}")),
                },
                Err(e) => llm_error = Some(format!("{}: {}", e.kind(), e.message())),
            }
        }
        let complexity = llm_verdict.unwrap_or(heuristic);
        let plan = &self.plans[index(complexity)];
        let decision = RouteDecision {
            complexity,
            heuristic,
            signals,
            llm: llm_verdict,
            llm_error,
            strategy: plan.retriever.name().to_owned(),
            budget: plan.budget,
        };
        (decision, plan)
    }
}

#[async_trait]
impl Retriever for RoutedRetriever {
    fn name(&self) -> &str {
        &self.name
    }

    async fn retrieve(&self, ctx: &Ctx, queries: &[Query]) -> Result<Vec<Vec<Candidate>>> {
        validate_all(queries)?;
        let mut out = Vec::with_capacity(queries.len());
        for query in queries {
            let started = Instant::now();
            let (decision, plan) = self.decide(ctx, query).await;
            ctx.trace(
                TraceEvent::new("route", decision.complexity.to_string())
                    .detail("decision", serde_json::to_value(&decision).unwrap_or_default())
                    .elapsed(started.elapsed()),
            );
            let q = Query { top_k: query.top_k.min(plan.budget.max_results.max(1)), ..query.clone() };
            out.push(plan.retriever.retrieve(ctx, std::slice::from_ref(&q)).await?.pop().unwrap_or_default());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: Complexity) {
        let (got, signals) = classify_heuristic(text);
        assert_eq!(got, expect, "{text:?}: {signals:?}");
    }

    #[test]
    fn the_heuristic_separates_simple_moderate_and_complex_questions() {
        check("what causes scurvy?", Complexity::Simple);
        check("capital of France", Complexity::Simple);
        check("How does vitamin C deficiency lead to bleeding gums in sailors on long voyages?", Complexity::Moderate);
        check("Why did the Roman Empire fall?", Complexity::Moderate);
        check("Why is the sky blue?", Complexity::Simple);
        check("Compare the causes of scurvy and rickets.", Complexity::Moderate);
        check(
            "Compare the treatment of scurvy in the British Navy and the French Navy during the 18th century, and explain why the outcomes differed.",
            Complexity::Complex,
        );
        check("Who discovered vitamin C? When was it first synthesized?", Complexity::Moderate);
        check("What is the difference between BM25 and TF-IDF, and which one does Lucene use?", Complexity::Complex);
    }
}
