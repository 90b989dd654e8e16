//! Prometheus metrics (text exposition format at `GET /metrics`): the CRAG seed's decision, correction, latency and
//! relevance metrics, HTTP requests by route and status, LLM calls and tokens, web provider calls, index size.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};
use ragtune::AskResponse;
use ragtune::core::{Error, Result};

/// Every metric of one server, in its own registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    decisions: IntCounterVec,
    corrections: IntCounterVec,
    retrieval_latency: HistogramVec,
    relevance: Histogram,
    http_requests: IntCounterVec,
    http_latency: HistogramVec,
    llm_calls: IntCounter,
    llm_tokens: IntCounter,
    web_calls: IntCounterVec,
    web_skipped: IntCounterVec,
    web_resilience: IntCounterVec,
    answers: IntCounterVec,
    index_chunks: IntGauge,
    index_documents: IntGauge,
    rejected: IntCounter,
    refused_connections: IntCounter,
}

fn metric_error(e: prometheus::Error) -> Error {
    Error::permanent(format!("cannot register a metric: {e}"))
}

/// Registers a metric just made (a handle shares its state with the registered one).
fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    made: prometheus::Result<M>,
) -> Result<M> {
    let metric = made.map_err(metric_error)?;
    registry.register(Box::new(metric.clone())).map_err(metric_error)?;
    Ok(metric)
}

impl Metrics {
    /// A fresh registry with every metric registered.
    ///
    /// # Errors
    /// Never in practice (names are fixed and distinct).
    pub fn new() -> Result<Self> {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let decisions = counter("crag_decisions_total", "CRAG decisions by category", &["category"])?;
        let corrections = counter("crag_corrections_total", "Corrections applied, by strategy", &["strategy"])?;
        let http_requests = counter("http_requests_total", "HTTP requests by route and status", &["route", "status"])?;
        let web_calls = counter("web_provider_calls_total", "Web providers that answered a search", &["provider"])?;
        let web_skipped =
            counter("web_provider_skipped_total", "Web providers asked that did not answer", &["provider"])?;
        let web_resilience = counter(
            "web_provider_resilience_total",
            "Each web provider's resilience counters (calls, failures, retries, rate_limited, breaker_opened, \
             breaker_half_opened, breaker_closed, rejected, deadline_refusals)",
            &["provider", "event"],
        )?;
        let answers = counter("ragtune_answers_total", "Answers by kind (llm, extractive, none)", &["kind"])?;
        let latency = |name: &str, help: &str, labels: &[&str]| {
            let buckets = vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
            register(&registry, HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels))
        };
        let retrieval_latency = latency(
            "crag_retrieval_latency_seconds",
            "Retrieval, evaluation and correction time per question, by decision and correction strategy",
            &["decision", "correction"],
        )?;
        let http_latency = latency("http_request_duration_seconds", "HTTP request time by route", &["route"])?;
        let relevance = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new("crag_relevance_score", "The CRAG evaluator's relevance score per question")
                    .buckets(vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
            ),
        )?;
        let int_counter = |name: &str, help: &str| register(&registry, IntCounter::new(name, help));
        let llm_calls = int_counter("llm_calls_total", "LLM calls made while answering")?;
        let llm_tokens = int_counter("llm_tokens_total", "LLM tokens (prompt and completion) spent while answering")?;
        let rejected = int_counter("http_rejected_total", "Requests answered 503 because every slot was busy")?;
        let refused_connections = int_counter(
            "http_connections_refused_total",
            "Connections closed on accept because max_connections were open",
        )?;
        let gauge = |name: &str, help: &str| register(&registry, IntGauge::new(name, help));
        let index_chunks = gauge("ragtune_index_chunks", "Chunks in the index")?;
        let index_documents = gauge("ragtune_index_documents", "Documents in the index")?;
        Ok(Self {
            registry,
            decisions,
            corrections,
            retrieval_latency,
            relevance,
            http_requests,
            http_latency,
            llm_calls,
            llm_tokens,
            web_calls,
            web_skipped,
            web_resilience,
            answers,
            index_chunks,
            index_documents,
            rejected,
            refused_connections,
        })
    }

    /// Records one answered question (`ask` or `query`).
    pub fn observe_answer(&self, r: &AskResponse) {
        let c = &r.crag;
        self.decisions.with_label_values(&[&c.category.to_string()]).inc();
        if c.correction_applied {
            self.corrections.with_label_values(&[&c.correction_strategy]).inc();
        }
        let decision = c.decision.map_or_else(|| "none".to_owned(), |d| format!("{d:?}").to_uppercase());
        let ms: f64 =
            ["retrieve", "evaluate", "correct"].iter().filter_map(|s| r.cost.stages.get(*s)).map(|s| s.ms).sum();
        self.retrieval_latency.with_label_values(&[&decision, &c.correction_strategy]).observe(ms / 1e3);
        if c.decision.is_some() {
            self.relevance.observe(f64::from(c.score));
        }
        self.llm_calls.inc_by(r.cost.llm_calls);
        self.llm_tokens.inc_by(r.cost.tokens);
        for p in &c.web_providers {
            self.web_calls.with_label_values(&[p]).inc();
        }
        for s in &c.web_skipped {
            let provider = s.split(':').next().unwrap_or(s).trim();
            self.web_skipped.with_label_values(&[provider]).inc();
        }
        let kind = serde_json::to_value(r.answer_kind).ok().and_then(|v| v.as_str().map(str::to_owned));
        self.answers.with_label_values(&[&kind.unwrap_or_default()]).inc();
    }

    /// Records one HTTP request.
    pub fn observe_http(&self, route: &str, status: u16, seconds: f64) {
        self.http_requests.with_label_values(&[route, &status.to_string()]).inc();
        self.http_latency.with_label_values(&[route]).observe(seconds);
    }

    /// Counts a request refused because every slot was busy.
    pub fn observe_rejected(&self) {
        self.rejected.inc();
    }

    /// Counts a connection closed on accept because every connection slot was taken.
    pub fn observe_refused_connection(&self) {
        self.refused_connections.inc();
    }

    /// Sets the index size.
    pub fn set_index(&self, documents: u64, chunks: u64) {
        self.index_documents.set(i64::try_from(documents).unwrap_or(i64::MAX));
        self.index_chunks.set(i64::try_from(chunks).unwrap_or(i64::MAX));
    }

    /// Brings the web providers' resilience counters up to date from the engines' stacks (each stack counted once,
    /// the same provider of several stacks summed).
    pub fn observe_web(&self, stacks: &[&ragtune::WebStats]) {
        let mut seen = Vec::new();
        let mut totals: std::collections::BTreeMap<(String, &'static str), u64> = std::collections::BTreeMap::new();
        for (name, stats) in stacks.iter().flat_map(|s| s.iter()) {
            let ptr = std::sync::Arc::as_ptr(stats);
            if seen.contains(&ptr) {
                continue;
            }
            seen.push(ptr);
            let s = stats.snapshot();
            for (event, n) in [
                ("calls", s.calls),
                ("failures", s.failures),
                ("retries", s.retries),
                ("rate_limited", s.rate_limited),
                ("breaker_opened", s.opened),
                ("breaker_half_opened", s.half_opened),
                ("breaker_closed", s.closed),
                ("rejected", s.rejected),
                ("deadline_refusals", s.deadline_refusals),
            ] {
                *totals.entry((name.clone(), event)).or_default() += n;
            }
        }
        for ((provider, event), n) in totals {
            let counter = self.web_resilience.with_label_values(&[provider.as_str(), event]);
            let have = counter.get();
            if n > have {
                counter.inc_by(n - have);
            }
        }
    }

    /// The text exposition format.
    #[must_use]
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    }
}
