//! One question's run through the pipeline: the object that owns its context (deadline, cancellation), cost
//! ledger, trace and notes, and the one wrapper every stage goes through.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ragtune_core::{Cost, Ctx, TraceEvent, TraceSink};

use super::stream::{Streaming, TokenSink};
use super::{AskResponse, Attempt, AttemptResult, Citation, Note, NoteKind, PipelineCost};
use crate::engine::Engine;
use crate::models::RequestVectors;

/// The named stages of the pipeline, in the order they run. Each is timed, charged and traced under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    Retrieve,
    Evaluate,
    Correct,
    Rerank,
    Refine,
    Extract,
    Assemble,
    Generate,
    Judge,
    Retry,
    Rewrite,
    Triangulate,
}

impl Stage {
    /// The stage's name in the trace and the cost ledger.
    pub(super) const fn name(self) -> &'static str {
        match self {
            Self::Retrieve => "retrieve",
            Self::Evaluate => "evaluate",
            Self::Correct => "correct",
            Self::Rerank => "rerank",
            Self::Refine => "refine",
            Self::Extract => "extract",
            Self::Assemble => "assemble",
            Self::Generate => "generate",
            Self::Judge => "judge",
            Self::Retry => "retry",
            Self::Rewrite => "rewrite",
            Self::Triangulate => "triangulate",
        }
    }

    /// What the note says when the deadline has passed before the stage starts; `None` for the stages that run
    /// anyway because the answer cannot do without them (retrieval, refinement, assembly) or that bound their own
    /// spending (the reranking controller).
    const fn when_late(self) -> Option<&'static str> {
        match self {
            Self::Evaluate => Some("evaluation skipped: the deadline has passed"),
            Self::Correct => Some("correction skipped: the deadline has passed"),
            Self::Extract => Some("extraction skipped: the deadline has passed; the whole passages are used"),
            Self::Generate => Some("generation skipped: the deadline has passed; the answer is extractive"),
            Self::Judge => Some("judge skipped: the deadline has passed"),
            Self::Retry | Self::Rewrite => Some("retry skipped: the deadline has passed"),
            // Late, triangulation still runs with the lexical check (it costs no call).
            Self::Triangulate => None,
            Self::Retrieve | Self::Rerank | Self::Refine | Self::Assemble => None,
        }
    }
}

/// The stages whose costs are LLM calls, for counting an LLM that does not trace its calls (`rerank` only when the
/// reranker is the LLM: a cross-encoder's tokens are not the LLM's).
const LLM_STAGES: [&str; 6] = ["generate", "extract", "judge", "rewrite", "rerank", "triangulate"];

/// The LLM tokens and calls the LLM stages reported (`docs` left at 0), for an LLM that does not trace its calls;
/// `llm_rerank`: whether the rerank stage's costs are LLM calls.
fn stages_llm_cost(cost: &PipelineCost, llm_rerank: bool) -> Cost {
    LLM_STAGES
        .iter()
        .filter(|s| llm_rerank || **s != "rerank")
        .filter_map(|s| cost.stages.get(*s))
        .fold(Cost::ZERO, |sum, c| sum + Cost::new(c.tokens, 0, c.calls))
}

/// What a stage reports besides its value: what it decided, what it cost, the details worth tracing, and the
/// degradations it noted.
#[derive(Debug)]
pub(super) struct Report {
    action: String,
    cost: Cost,
    detail: BTreeMap<String, serde_json::Value>,
    notes: Vec<Note>,
}

impl Report {
    /// A report of `action` (a verdict, a method, `failed`, …) at no cost.
    pub(super) fn new(action: impl Into<String>) -> Self {
        Self { action: action.into(), cost: Cost::ZERO, detail: BTreeMap::new(), notes: Vec::new() }
    }

    /// Charges `cost` to the stage.
    pub(super) fn cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }

    /// Adds a traced detail.
    pub(super) fn detail(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.detail.insert(key.to_owned(), value.into());
        self
    }

    /// Adds a degradation note.
    pub(super) fn note(mut self, kind: NoteKind, text: impl Into<String>) -> Self {
        self.notes.push(Note::new(kind, text));
        self
    }

    /// Adds degradation notes gathered while the stage ran.
    pub(super) fn notes(mut self, notes: Vec<Note>) -> Self {
        self.notes.extend(notes);
        self
    }
}

/// What the stages of one question read: the engine, the question and its context (deadline, cancellation,
/// trace sink). Stage bodies are methods of `Env` and cannot touch the ledger: they report to it.
pub(super) struct Env<'e> {
    /// The engine (configuration, store, models, caches).
    pub(super) engine: &'e Engine,
    /// Deadline and cancellation of the question; its trace sink collects every event.
    pub(super) ctx: Ctx,
    /// The validated question.
    pub(super) question: String,
    /// Every vector this question has met (stored strip vectors, embedded strips and statements), so refinement
    /// and the judge embed nothing twice; `None` without an embedder.
    pub(super) vectors: Option<Arc<RequestVectors>>,
    /// The caller's token sink (if any) and what the answer's generation sent it and when.
    pub(super) stream: Streaming,
}

/// What one question has spent and suffered so far: the cost ledger, the notes and the trace. Every stage goes
/// through [`Ledger::stage`] or [`Ledger::step`], the one place that times, charges, traces and checks the deadline.
pub(super) struct Ledger {
    ctx: Ctx,
    sink: TraceSink,
    /// Every stage's tokens, documents, calls and time.
    pub(super) cost: PipelineCost,
    /// What was skipped, degraded or fell back, in order.
    pub(super) notes: Vec<Note>,
    started: Instant,
    /// Whether the rerank stage calls the LLM (`[rerank] reranker = "llm"`).
    llm_rerank: bool,
}

/// One question's run: what its stages read and what they spent, kept apart so a stage body (borrowing the
/// environment) can run inside the ledger's wrapper (borrowing the ledger).
pub(super) struct Run<'e> {
    pub(super) env: Env<'e>,
    pub(super) ledger: Ledger,
}

impl<'e> Run<'e> {
    /// A run of `question` (already validated) with the engine's deadline and its capability notes; the answer is
    /// streamed to `tokens` when there is a sink.
    pub(super) fn new(engine: &'e Engine, question: String, tokens: Option<TokenSink>) -> Self {
        let started = Instant::now();
        let sink = TraceSink::new();
        let mut ctx = Ctx::new().with_trace(sink.clone());
        let timeout_ms = engine.config().pipeline.timeout_ms;
        if timeout_ms > 0 {
            ctx = ctx.with_timeout(Duration::from_millis(timeout_ms));
        }
        let notes = engine.notes().iter().map(|n| Note::new(NoteKind::Capability, n.clone())).collect();
        let llm_rerank = engine.config().rerank.reranker == crate::config::RerankerKind::Llm;
        let ledger = Ledger { ctx: ctx.clone(), sink, cost: PipelineCost::default(), notes, started, llm_rerank };
        let vectors = engine.embedder().map(|e| Arc::new(RequestVectors::new(e.clone())));
        let stream = Streaming::new(tokens, started);
        Self { env: Env { engine, ctx, question, vectors, stream }, ledger }
    }
}

impl Ledger {
    /// Notes a degradation outside any stage.
    pub(super) fn note(&mut self, kind: NoteKind, text: impl Into<String>) {
        self.notes.push(Note::new(kind, text));
    }

    /// The deadline has passed (or the question was cancelled).
    pub(super) fn out_of_time(&self) -> bool {
        self.ctx.check().is_err()
    }

    /// Whether `stage` must be skipped for the deadline; notes it when so.
    pub(super) fn late(&mut self, stage: Stage) -> bool {
        match stage.when_late() {
            Some(text) if self.out_of_time() => {
                self.note(NoteKind::Deadline, text);
                true
            }
            _ => false,
        }
    }

    /// LLM tokens spent so far: the traced LLM calls, or, for an LLM that traces none (a fake, a model of your own),
    /// the costs of the stages that call it.
    pub(super) fn llm_tokens(&self) -> u64 {
        let traced = self.sink.cost_where(TraceEvent::is_llm_call);
        if traced == Cost::ZERO { stages_llm_cost(&self.cost, self.llm_rerank).tokens } else { traced.tokens }
    }

    /// Whether another attempt would take the question past `budget` LLM tokens (0: no budget), an attempt costing
    /// the mean of the `made` ones; notes the skip when so.
    pub(super) fn over_budget(&mut self, budget: u64, made: usize) -> bool {
        if budget == 0 {
            return false;
        }
        let spent = self.llm_tokens();
        let per_attempt = spent / (made.max(1) as u64);
        if spent.saturating_add(per_attempt) <= budget {
            return false;
        }
        self.note(NoteKind::Budget, super::note::budget_note(budget, spent, per_attempt));
        true
    }

    /// Runs `body` as `stage` unless the deadline has passed (then notes the skip, drops `body` unpolled and
    /// returns `None`).
    pub(super) async fn stage<T>(&mut self, stage: Stage, body: impl Future<Output = (T, Report)>) -> Option<T> {
        if self.late(stage) {
            return None;
        }
        Some(self.step(stage, body).await)
    }

    /// Runs `body` as `stage` whatever the time: times it, charges its cost to the ledger under the stage's name,
    /// keeps its notes, and records one trace event for it (after the events of the components it called).
    pub(super) async fn step<T>(&mut self, stage: Stage, body: impl Future<Output = (T, Report)>) -> T {
        let started = Instant::now();
        let (value, report) = body.await;
        let elapsed = started.elapsed();
        self.cost.add(stage.name(), report.cost, elapsed);
        self.notes.extend(report.notes);
        let mut event = TraceEvent::new(stage.name(), report.action).cost(report.cost).elapsed(elapsed);
        event.detail = report.detail;
        self.ctx.trace(event);
        value
    }
}

impl Run<'_> {
    /// The response: LLM totals from the trace, citations resolved against the context, notes de-duplicated.
    pub(super) async fn finish(self, mut result: AttemptResult, attempts: Vec<Attempt>) -> AskResponse {
        let Self { env, mut ledger } = self;
        // The caller's stream ends on the answer, whatever was streamed before.
        env.stream.finish(result.answer.as_deref());
        let triangulation = if super::web::tier_web_passages(env.engine, &mut result.context) {
            let body = env.triangulate_claims(&result.context, result.answer.as_deref(), result.faithfulness.as_ref());
            ledger.step(Stage::Triangulate, body).await
        } else {
            None
        };
        let trace = ledger.sink.take();
        let mut cost = std::mem::take(&mut ledger.cost);
        // Every call of an LLM client is traced (query transformations included); an LLM that does not trace
        // its calls (a fake, a model of your own) is counted from the stages instead.
        let llm_events: Vec<&TraceEvent> = trace.iter().filter(|e| e.is_llm_call()).collect();
        if env.engine.llm().is_none() {
            // No LLM: nothing to count (stage costs of embedders are not LLM calls).
        } else if llm_events.is_empty() {
            let c = stages_llm_cost(&cost, ledger.llm_rerank);
            cost.tokens += c.tokens;
            cost.llm_calls += c.calls;
        } else {
            for e in llm_events {
                cost.tokens += e.cost.tokens;
                cost.llm_calls += e.cost.calls.max(1);
            }
        }
        cost.total_ms = ledger.started.elapsed().as_secs_f64() * 1e3;
        let context = result.context;
        let mut citations = Vec::new();
        for n in result.answer.as_deref().map(ragtune_evaluators::metrics::answer::parse_citations).unwrap_or_default()
        {
            match context.iter().find(|p| p.n == n) {
                Some(p) => citations.push(Citation {
                    n,
                    chunk_id: p.chunk_id.clone(),
                    doc_id: p.doc_id.clone(),
                    title: p.title.clone(),
                    tier: p.tier,
                    pages: p.pages(),
                }),
                None => ledger.note(
                    NoteKind::CitationOutOfContext,
                    format!("the answer cites a passage that is not in the context: [{n}]"),
                ),
            }
        }
        ledger.notes.dedup();
        AskResponse {
            question: env.question,
            answer: result.answer,
            answer_kind: result.answer_kind,
            citations,
            context,
            crag: result.crag,
            faithfulness: result.faithfulness,
            triangulation,
            context_report: result.report,
            attempts,
            notes: ledger.notes,
            cost,
            ttft_ms: env.stream.ttft_ms(),
            generation_ms: env.stream.generation_ms(),
            trace,
        }
    }
}
