//! The stages of the answer pipeline as steps of a [`Run`]: each body does its work and reports what it decided
//! and spent; the run's wrapper times, charges, traces and checks the deadline around it.

use std::sync::Arc;

use ragtune_core::{Candidate, Cost, Error, Llm, RelevanceJudgement, Verdict};
use ragtune_evaluators::extract::{Extraction, ExtractionMethod, Extractor};
use ragtune_evaluators::faithfulness::Faithfulness;
use ragtune_evaluators::faithfulness::is_no_info;
use ragtune_evaluators::refine::{Refined, Refiner, estimate_tokens};
use ragtune_evaluators::retry::{AttemptOutcome, RetryDecision, RetryStrategy, decide, keep_reread};
use ragtune_llm::prompts;

use super::answer::{
    ABSTAIN, answer_sentences, any_overlap, best_sentences, has_evidence, pick_sentences, sentence_candidates,
};
use super::run::{Env, Report, Run, Stage};
use super::{
    AnswerKind, Attempt, AttemptResult, ContextMethod, ContextPassage, ContextReport, CragCategory, CragMetadata,
    NO_DOCUMENTS, NO_INFO, Note, NoteKind, assemble, fuse_lists, render_context,
};
use crate::config::{ContextMode, EvaluatorKind, SentenceScorer, Transform};
use crate::engine::parts::Retrieved;

/// What one attempt of the retry loop searches for, and how deep.
struct Plan {
    attempt: usize,
    query: String,
    k: usize,
    generate: bool,
    /// This attempt rereads an answer that said the documents lack the information (a [`RetryStrategy::Reread`]):
    /// its context is `pipeline.reread_context` and its prompt has no "not in the documents" way out.
    reread: bool,
}

/// How the context was reduced: the passages, the method's name and the extraction when one ran.
type Reduced = (Vec<ContextPassage>, ContextMethod, Option<Extraction>);

impl Run<'_> {
    /// The retry loop: attempts until the smart-retry policy accepts or gives up, keeping the best attempt.
    pub(super) async fn answer(mut self, generate: bool) -> super::AskResponse {
        let cfg = self.env.engine.config();
        let k = if cfg.pipeline.top_k > 0 { cfg.pipeline.top_k } else { cfg.retry.k_for(0) };
        let mut plan = Plan { attempt: 0, query: self.env.question.clone(), k, generate, reread: false };
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut first_crag: Option<CragMetadata> = None;
        let mut best: Option<AttemptResult> = None;
        loop {
            let result = self.attempt(&plan).await;
            first_crag.get_or_insert_with(|| result.crag.clone());
            let mut record = Attempt {
                attempt: plan.attempt,
                query: plan.query.clone(),
                k: plan.k,
                retrieved: result.retrieved,
                decision: None,
            };
            let mut next: Option<(RetryStrategy, usize)> = None;
            if cfg.pipeline.retry && generate {
                let decision = self.ledger.step(Stage::Retry, async { decide_retry(&cfg.retry, &plan, &result) }).await;
                if let RetryDecision::Retry { strategy, next_k, .. } = &decision {
                    next = Some((*strategy, *next_k));
                }
                record.decision = Some(decision);
            }
            attempts.push(record);
            // Keep the attempt that retrieved something over one that did not, and an honest "not in the documents"
            // over a reread the judge does not support; otherwise the latest.
            best = match best.take() {
                Some(prev) if prev.retrieved > 0 && result.retrieved == 0 => Some(prev),
                Some(prev) if plan.reread => {
                    let (keep, report) = reread_choice(&cfg.retry, &result);
                    self.ledger.step(Stage::Retry, async { ((), report) }).await;
                    Some(if keep { result } else { prev })
                }
                _ => Some(result),
            };
            let Some((strategy, next_k)) = next else { break };
            if self.ledger.late(Stage::Retry) || self.ledger.over_budget(cfg.pipeline.max_llm_tokens, attempts.len()) {
                break;
            }
            plan.reread = strategy == RetryStrategy::Reread;
            match strategy {
                RetryStrategy::ExpandK => plan.k = next_k,
                RetryStrategy::RewriteQuery => plan.query = self.ledger.step(Stage::Rewrite, self.env.rewrite()).await,
                // The same query and k: only the context mode of a retry changes what the generator sees.
                RetryStrategy::Reread => {}
            }
            plan.attempt += 1;
        }
        let Some(mut result) = best else {
            // The loop runs at least once; an empty result keeps this path panic-free all the same.
            return self.finish(AttemptResult::empty("no attempt ran"), attempts).await;
        };
        if let Some(crag) = first_crag {
            // The CRAG metadata describes the first retrieval, the count the final one.
            let final_count = result.crag.final_count;
            result.crag = CragMetadata { final_count, ..crag };
        }
        self.finish(result, attempts).await
    }

    /// Answers without retrieval (the closed-book baseline): the LLM alone, or nothing without one.
    pub(super) async fn closed_book(mut self, generate: bool) -> super::AskResponse {
        let mut result = AttemptResult::empty("retrieval is off (pipeline.retrieve = false)");
        if generate {
            match self.env.engine.llm().cloned() {
                Some(llm) => {
                    let body = self.env.generate_closed_book(llm.as_ref());
                    if let Some(answer) = self.ledger.step(Stage::Generate, body).await {
                        result.answer = Some(answer);
                        result.answer_kind = AnswerKind::ClosedBook;
                    }
                }
                None => self.ledger.note(NoteKind::NoLlm, "closed-book answering needs an LLM; none is configured"),
            }
        }
        self.finish(result, Vec::new()).await
    }

    /// One attempt: retrieve → evaluate → correct → rerank → refine/extract → assemble → generate → judge.
    async fn attempt(&mut self, plan: &Plan) -> AttemptResult {
        let (env, ledger) = (&self.env, &mut self.ledger);
        let cfg = env.engine.config();
        let mut result = AttemptResult::empty("evaluation did not run");
        let retrieved = ledger.step(Stage::Retrieve, env.retrieve(plan)).await;
        let mut candidates = retrieved.candidates;
        result.retrieved = candidates.len();

        let mut crag = CragMetadata::off("Corrective RAG is off (crag.enabled = false)");
        crag.cache_hit = retrieved.cache_hit;
        crag.original_count = candidates.len();
        if cfg.crag.enabled
            && let Some(Some(verdict)) = ledger.stage(Stage::Evaluate, env.evaluate(&candidates, &mut crag)).await
            // A retrieval judged correct needs no correction: past the deadline it is skipped without a note.
            && !(verdict == Verdict::Correct && ledger.out_of_time())
        {
            ledger.stage(Stage::Correct, env.correct(plan.k, verdict, &mut candidates, &mut crag)).await;
        }
        if cfg.rerank.enabled && !candidates.is_empty() {
            candidates = ledger.step(Stage::Rerank, env.rerank(candidates)).await;
        }
        crag.final_count = candidates.len();
        result.crag = crag;

        let tokens_before: usize = candidates.iter().map(|c| estimate_tokens(&c.chunk.text)).sum();
        let mode = match (plan.attempt, plan.reread) {
            (0, _) => cfg.pipeline.context,
            (_, true) => cfg.pipeline.reread_context(),
            (_, false) => cfg.pipeline.retry_context(),
        };
        let (mut passages, method, extraction) = self.reduce(&candidates, mode).await;
        if cfg.pipeline.judge
            && method != ContextMethod::Refine
            && let Some(v) = &self.env.vectors
        {
            // Whole passages: their stored strips, and each passage as their mean, so the judge embeds no passage
            // (refinement seeded its own).
            self.env.engine.seed_strip_vectors(&self.env.ctx, "judge", v, &candidates).await;
        }
        add_pages(&mut passages, &candidates);
        let ledger = &mut self.ledger;
        let budget = cfg.pipeline.max_context_tokens - cfg.pipeline.reserve_tokens;
        let assembled = async { assemble_stage(passages, method, tokens_before, budget) };
        let (context, report) = ledger.step(Stage::Assemble, assembled).await;
        result.report = report;
        result.extraction = extraction;
        result.context = context;
        if !plan.generate {
            return result;
        }
        // CRAG judged the retrieval INCORRECT and no correction brought web evidence: nothing to quote.
        let abstain = result.crag.decision == Some(Verdict::Incorrect) && !result.crag.web_search_used;
        let (answer, kind) = self.generate(&result.context, result.retrieved > 0, plan.reread, abstain).await;
        let (env, ledger) = (&self.env, &mut self.ledger);
        result.answer = Some(answer);
        result.answer_kind = kind;
        if cfg.pipeline.judge {
            let answer = result.answer.clone().unwrap_or_default();
            result.faithfulness = ledger.stage(Stage::Judge, env.judge(&answer, &result.context)).await.flatten();
        }
        result
    }

    /// The context before assembly: whole passages, refinement strips, or the sentences extraction kept.
    ///
    /// Extraction needs no refinement: when it fails it falls back to the whole passages (never less than plain
    /// retrieval gives). Without an LLM, extraction mode gives the whole passages too: the extractive answer
    /// chooses its own sentences from them, and refinement's strips would leave it fewer to choose from (the
    /// sentence that answers "how does the store survive a crash" was not in the strips of docs/).
    async fn reduce(&mut self, candidates: &[Candidate], mode: ContextMode) -> Reduced {
        let (env, ledger) = (&self.env, &mut self.ledger);
        if mode == ContextMode::Full || candidates.is_empty() {
            return (whole_passages(candidates), ContextMethod::Full, None);
        }
        if mode == ContextMode::Sentences {
            let budget = env.engine.config().pipeline.sentence_context_tokens;
            let body = async { best_sentences(&env.question, whole_passages(candidates), budget) };
            let passages = ledger.step(Stage::Refine, body).await;
            return (passages, ContextMethod::Sentences, None);
        }
        if mode == ContextMode::Extract {
            if let Some(llm) = env.engine.llm().cloned() {
                let extracted = ledger.stage(Stage::Extract, env.extract(llm, candidates)).await;
                return extracted
                    .flatten()
                    .unwrap_or_else(|| (whole_passages(candidates), ContextMethod::ExtractFallback, None));
            }
            ledger.note(NoteKind::NoLlm, "query-focused extraction needs an LLM: the whole passages are used");
            return (whole_passages(candidates), ContextMethod::Full, None);
        }
        let Some(refined) = ledger.step(Stage::Refine, env.refine(candidates)).await else {
            return (whole_passages(candidates), ContextMethod::Full, None);
        };
        (strips(&refined), ContextMethod::Refine, None)
    }

    /// The answer: the LLM's from the numbered context when there is an LLM, a context and time; extractive
    /// otherwise, or [`ABSTAIN`] when `abstain` (CRAG found the retrieval INCORRECT and no correction brought web
    /// results) and no sentence of the context holds half the question's terms ([`has_evidence`]): an honest "not
    /// in the documents" rather than the nearest sentence.
    async fn generate(
        &mut self,
        context: &[ContextPassage],
        retrieved: bool,
        reread: bool,
        abstain: bool,
    ) -> (String, AnswerKind) {
        let (env, ledger) = (&self.env, &mut self.ledger);
        if let Some(llm) = env.engine.llm().cloned()
            && !context.is_empty()
            && let Some(answer) =
                ledger.stage(Stage::Generate, env.generate_llm(llm.as_ref(), context, reread, abstain)).await
        {
            return answer;
        }
        // Documents were retrieved but nothing of them survived refinement or extraction: an honest "not in the
        // documents", not a retrieval failure.
        let body = async {
            match (context.is_empty(), retrieved) {
                (true, true) => ((NO_INFO.to_owned(), AnswerKind::Extractive), Report::new("extractive")),
                (true, false) => ((NO_DOCUMENTS.to_owned(), AnswerKind::Extractive), Report::new("extractive")),
                (false, _) if abstain && !has_evidence(&env.question, context) => {
                    let report = Report::new("abstained").detail("reason", "crag_incorrect_without_evidence");
                    ((ABSTAIN.to_owned(), AnswerKind::Extractive), report)
                }
                (false, _) => {
                    let (text, report) = env.extractive(context, Report::new("extractive")).await;
                    ((text, AnswerKind::Extractive), report)
                }
            }
        };
        ledger.step(Stage::Generate, body).await
    }
}

impl Env<'_> {
    /// Retrieval with the configured transformation (routing included) around the strategy.
    async fn retrieve(&self, plan: &Plan) -> (Retrieved, Report) {
        let transform = self.engine.config().transform.kind;
        match self.engine.retrieve_cached(&self.ctx, &plan.query, plan.k, plan.attempt == 0, transform).await {
            Ok(r) => {
                let report = Report::new(r.source.clone()).detail("k", plan.k).detail("results", r.candidates.len());
                (r, report)
            }
            Err(e) => {
                let none = Retrieved { candidates: Vec::new(), source: "failed".into(), cache_hit: false };
                let report = Report::new("failed")
                    .detail("error", e.to_string())
                    .note(NoteKind::RetrievalFailed, format!("retrieval failed: {e}"));
                (none, report)
            }
        }
    }

    /// Judges the retrieval into `crag`; returns the verdict, or `None` when the evaluator failed.
    async fn evaluate(&self, candidates: &[Candidate], crag: &mut CragMetadata) -> (Option<Verdict>, Report) {
        match self.engine.evaluate_cached(&self.ctx, &self.question, candidates).await {
            Ok(j) => {
                crag.judged(&j, self.engine.evaluator_name(), self.engine.config().crag.evaluator);
                let report = Report::new(crag.category.to_string())
                    .detail("score", f64::from(j.score))
                    .detail("evaluator", crag.evaluator.clone())
                    // The evaluator's own explanation (the learned one names the features that pushed it).
                    .detail("reasons", j.reasons.clone())
                    .cost(j.cost);
                (Some(j.verdict), report)
            }
            Err(e) => {
                crag.reasons = vec![format!("evaluation failed: {e}")];
                let report = Report::new("failed").detail("error", e.to_string()).note(
                    NoteKind::EvaluationFailed,
                    format!("evaluation failed, the retrieval is used as it is: {e}"),
                );
                (None, report)
            }
        }
    }

    /// The correction the verdict calls for: AMBIGUOUS → synonym expansion (when configured) and web search;
    /// INCORRECT → a rewrite (synonyms without an LLM) and web search; CORRECT → nothing. Each result is fused into
    /// the candidates; web search runs only when a provider is set (`[web]` or `Engine::with_web`).
    async fn correct(
        &self,
        k: usize,
        verdict: Verdict,
        candidates: &mut Vec<Candidate>,
        crag: &mut CragMetadata,
    ) -> ((), Report) {
        let cfg = &self.engine.config().crag;
        let mut notes: Vec<Note> = Vec::new();
        let mut strategies: Vec<&str> = Vec::new();
        let mut cost = Cost::default();
        match verdict {
            Verdict::Ambiguous => {
                if cfg.expand_on_ambiguous
                    && self.re_retrieve(Transform::Expand, "query expansion", k, candidates, &mut notes).await
                {
                    strategies.push("query_expansion");
                }
                if self.web_search(k, candidates, crag, &mut notes, &mut cost).await {
                    strategies.push("web_search");
                }
            }
            Verdict::Incorrect => {
                if cfg.rewrite_on_incorrect {
                    // The pipeline's one rewrite; the rewritten query's candidates are fused into the question's.
                    let r = self.rewritten().await;
                    cost += r.cost;
                    let name = if r.how == "llm" { "query_rewrite" } else { "query_expansion" };
                    if r.how == "synonyms" && r.problem.is_none() {
                        notes.push(Note::new(
                            NoteKind::CorrectionFallback,
                            "no LLM to rewrite the query: expanded it with synonyms instead",
                        ));
                    }
                    match &r.problem {
                        Some(why) => notes.push(Note::new(NoteKind::CorrectionFailed, format!("{name} failed: {why}"))),
                        None => {
                            if self.re_retrieve_query(&r.query, name, k, candidates, &mut notes).await {
                                strategies.push(name);
                            }
                        }
                    }
                }
                if self.web_search(k, candidates, crag, &mut notes, &mut cost).await {
                    strategies.push("web_search");
                }
            }
            Verdict::Correct => {}
        }
        if !strategies.is_empty() {
            crag.correction_applied = true;
            crag.correction_strategy = strategies.join("+");
        }
        let mut report = Report::new(crag.correction_strategy.clone())
            .detail("verdict", verdict_name(verdict))
            .detail("candidates", candidates.len())
            .notes(notes)
            .cost(cost);
        if let Some(q) = &crag.web_query {
            report = report.detail("web_query", q.as_str());
        }
        ((), report)
    }

    /// Retrieves `query` (plain, no transformation) and fuses the result into `candidates`; whether it did. A
    /// failure is noted as "`what` failed".
    async fn re_retrieve_query(
        &self,
        query: &str,
        what: &str,
        k: usize,
        candidates: &mut Vec<Candidate>,
        notes: &mut Vec<Note>,
    ) -> bool {
        match self.engine.retrieve_cached(&self.ctx, query, k, false, Transform::None).await {
            Ok(r) => {
                *candidates = fuse_lists(candidates, &r.candidates, k * 2);
                true
            }
            Err(e) => {
                notes.push(Note::new(NoteKind::CorrectionFailed, format!("{what} failed: {e}")));
                false
            }
        }
    }

    /// Retrieves again with `transform` and fuses the result into `candidates`; whether it did. A failure is
    /// noted as "`what` failed".
    async fn re_retrieve(
        &self,
        transform: Transform,
        what: &str,
        k: usize,
        candidates: &mut Vec<Candidate>,
        notes: &mut Vec<Note>,
    ) -> bool {
        match self.engine.retrieve_cached(&self.ctx, &self.question, k, false, transform).await {
            Ok(r) => {
                *candidates = fuse_lists(candidates, &r.candidates, k * 2);
                true
            }
            Err(e) => {
                notes.push(Note::new(NoteKind::CorrectionFailed, format!("{what} failed: {e}")));
                false
            }
        }
    }

    /// Budgeted reranking; the candidates unchanged when it cannot run.
    async fn rerank(&self, candidates: Vec<Candidate>) -> (Vec<Candidate>, Report) {
        match self.engine.rerank(&self.ctx, &self.question, candidates.clone()).await {
            Ok((mut reranked, spent, reranker)) => {
                let mut report = Report::new("controller")
                    .detail("candidates", reranked.len())
                    .detail("reranker", reranker)
                    .detail("pairs", spent.docs)
                    .cost(spent);
                // The header boost comes after reranking too, which reorders the boosted retrieval list.
                let weight = self.engine.config().search.header_boost;
                let boosts = ragtune_retrieve::header_boost(&self.question, &mut reranked, weight);
                if !boosts.is_empty() {
                    report = report.detail("header_boost", ragtune_retrieve::boost::boosts_json(&boosts));
                }
                (reranked, report)
            }
            Err(e) => {
                let report = Report::new("skipped")
                    .detail("error", e.to_string())
                    .note(NoteKind::RerankSkipped, format!("rerank skipped: {e}"));
                (candidates, report)
            }
        }
    }

    /// Knowledge refinement; `None` (whole passages are used) when it fails.
    async fn refine(&self, candidates: &[Candidate]) -> (Option<Refined>, Report) {
        let refined = match Refiner::new(self.engine.config().refine.clone()) {
            Ok(r) => {
                let r = match &self.vectors {
                    Some(v) => {
                        // The candidates' strips were pooled at indexing time: refinement embeds only the rest.
                        self.engine.seed_strip_vectors(&self.ctx, "refine", v, candidates).await;
                        r.with_embedder(v.clone())
                    }
                    None => r,
                };
                r.refine(&self.ctx, &self.question, candidates).await
            }
            Err(e) => Err(e),
        };
        match refined {
            Ok(r) => {
                if let Some(v) = &self.vectors {
                    // Each refined passage is its kept strips joined: its vector for the judge is their mean.
                    for p in &r.passages {
                        let parts: Vec<&str> = r
                            .strips
                            .iter()
                            .filter(|s| s.kept && s.chunk_id == p.chunk_id)
                            .map(|s| s.text.as_str())
                            .collect();
                        v.seed_mean(&p.text, &parts);
                    }
                }
                let notes = r.notes.iter().map(|n| Note::new(NoteKind::Refinement, format!("refine: {n}"))).collect();
                let report = Report::new("strips").detail("passages", r.passages.len()).cost(r.cost).notes(notes);
                (Some(r), report)
            }
            Err(e) => {
                let report = Report::new("failed")
                    .detail("error", e.to_string())
                    .note(NoteKind::RefinementFailed, format!("refinement failed, whole passages are used: {e}"));
                (None, report)
            }
        }
    }

    /// Query-focused extraction over the candidates; `None` when it was cut short (whole passages are used).
    async fn extract(&self, llm: Arc<dyn Llm>, candidates: &[Candidate]) -> (Option<Reduced>, Report) {
        let cfg = self.engine.config();
        let extractor = Extractor::new(llm, prompts::EXTRACT, prompts::REPAIR_JSON, cfg.extract.clone());
        let mut notes = Vec::new();
        let extraction = if cfg.pipeline.extraction_per_document {
            self.extract_each(&extractor, candidates, &mut notes).await
        } else {
            extractor.extract(&self.ctx, &self.question, candidates).await
        };
        match extraction {
            Ok(e) => {
                let method = match &e.method {
                    ExtractionMethod::Llm => ContextMethod::Extract,
                    ExtractionMethod::Fallback { reason } => {
                        let text = format!("extraction fell back to the whole passages: {reason}");
                        notes.push(Note::new(NoteKind::ExtractionFallback, text));
                        ContextMethod::ExtractFallback
                    }
                };
                let passages = e
                    .passages
                    .iter()
                    .filter(|p| !p.sentences.is_empty())
                    .map(|p| passage(&p.chunk_id, &p.doc_id, p.title.as_ref(), p.sentences.join(" ")))
                    .collect();
                let report = Report::new(method.to_string())
                    .detail("verified", e.verified)
                    .detail("rejected", e.rejected.len())
                    .cost(e.cost)
                    .notes(notes);
                (Some((passages, method, Some(e))), report)
            }
            Err(e) => {
                let report = Report::new("failed")
                    .detail("error", e.to_string())
                    .notes(notes)
                    .note(NoteKind::ExtractionFallback, format!("extraction failed, whole passages are used: {e}"));
                (None, report)
            }
        }
    }

    /// Extraction one document at a time, merged; stops at the first failure.
    async fn extract_each(
        &self,
        extractor: &Extractor,
        candidates: &[Candidate],
        notes: &mut Vec<Note>,
    ) -> ragtune_core::Result<Extraction> {
        let mut merged: Option<Extraction> = None;
        for c in candidates {
            let one = extractor.extract(&self.ctx, &self.question, std::slice::from_ref(c)).await;
            match (merged.as_mut(), one) {
                (None, Ok(e)) => merged = Some(e),
                (Some(m), Ok(e)) => {
                    m.passages.extend(e.passages);
                    m.rejected.extend(e.rejected);
                    m.verified += e.verified;
                    m.tokens_after += e.tokens_after;
                    m.cost += e.cost;
                    if matches!(e.method, ExtractionMethod::Fallback { .. }) {
                        m.method = e.method;
                    }
                }
                (_, Err(e)) => {
                    notes.push(Note::new(NoteKind::ExtractionFallback, format!("extraction stopped: {e}")));
                    break;
                }
            }
        }
        merged.ok_or_else(|| Error::unavailable("no extraction ran"))
    }

    /// The LLM's answer from the numbered context; the extractive answer when the call fails or says nothing. A
    /// reread asks without the "not in the documents" way out ([`prompts::reread_prompt`]).
    async fn generate_llm(
        &self,
        llm: &dyn Llm,
        context: &[ContextPassage],
        reread: bool,
        abstain: bool,
    ) -> ((String, AnswerKind), Report) {
        let numbered = render_context(context);
        let prompt =
            if reread { prompts::reread_prompt(&self.question) } else { prompts::answer_prompt(&self.question) };
        let request = prompt.render(&[("context", numbered.as_str()), ("query", self.question.as_str())]);
        let (outcome, timing) = self.answer_text(llm, request).await;
        let report = match outcome {
            Ok((text, c)) if !text.trim().is_empty() => {
                let report = timing.report(Report::new("llm").detail("prompt", prompt.tag()).cost(c));
                if !reread
                    && !abstain
                    && self.no_info_falls_back()
                    && is_no_info(&text)
                    && has_evidence(&self.question, context)
                {
                    // The LLM called the answer out of the documents while a sentence of the context holds half the
                    // question's terms: quote it (docs/pipeline.md, "An LLM that finds nothing").
                    let report = report.detail("llm_answer", text.trim()).detail("fallback", "no_info_with_evidence");
                    let (text, report) = self.extractive(context, report).await;
                    return ((text, AnswerKind::Extractive), report);
                }
                return ((text.trim().to_owned(), AnswerKind::Llm), report);
            }
            Ok((_, c)) => timing
                .report(Report::new("empty"))
                .cost(c)
                .note(NoteKind::GenerationFailed, "the LLM returned an empty answer; the answer is extractive"),
            Err(e) => timing
                .report(Report::new("failed"))
                .detail("error", e.to_string())
                .note(NoteKind::GenerationFailed, format!("generation failed; the answer is extractive: {e}")),
        };
        let (text, report) = self.extractive(context, report).await;
        ((text, AnswerKind::Extractive), report)
    }

    /// Whether an LLM's "not in the documents" answer with evidence in the context gives way to the extractive
    /// answer: only without smart retry, whose loop owns no-info answers (it retries them, or rereads them with
    /// `retry.recheck_no_info`).
    fn no_info_falls_back(&self) -> bool {
        !self.engine.config().pipeline.retry
    }

    /// The extractive answer from a non-empty `context`, reported into `report`: its sentences picked by word
    /// overlap, or with `[pipeline] sentence_scorer = "cross-encoder"` by the cross-encoder's scores against the
    /// question, every sentence of the context in one call. The trace says what scored them (`sentence_scorer`,
    /// `sentences`); a cross-encoder that is not loaded (the engine's note says why) or fails (noted) leaves word
    /// overlap to pick. The cross-encoder's tokens are its own `rerank` event's, not the stage's: they are not the
    /// LLM's.
    async fn extractive(&self, context: &[ContextPassage], report: Report) -> (String, Report) {
        let sentences = answer_sentences(&self.question, context);
        let report = report.detail("sentences", sentences.len());
        let overlap = |sentences, report: Report| {
            (
                pick_sentences(&self.question, sentences, None, context.is_empty()),
                report.detail("sentence_scorer", "overlap"),
            )
        };
        // Without a word shared with the question the answer is no-info whatever scores the sentences.
        if self.engine.config().pipeline.sentence_scorer != SentenceScorer::CrossEncoder || !any_overlap(&sentences) {
            return overlap(sentences, report);
        }
        let cross_encoder = match self.engine.cross_encoder() {
            Ok(c) => c,
            Err(e) => return overlap(sentences, report.detail("sentence_scorer_unavailable", e.message())),
        };
        let candidates = sentence_candidates(&sentences);
        match cross_encoder.score(&self.ctx, &self.question, &candidates).await {
            Ok(scores) if scores.len() == sentences.len() => {
                let report = report.detail("sentence_scorer", cross_encoder.name());
                (pick_sentences(&self.question, sentences, Some(&scores), context.is_empty()), report)
            }
            outcome => {
                let why = match outcome {
                    Err(e) => e.to_string(),
                    Ok(scores) => format!("{} scores for {} sentences", scores.len(), sentences.len()),
                };
                let text = format!("sentence scoring fell back to word overlap: the cross-encoder failed: {why}");
                overlap(sentences, report.detail("sentence_scorer_error", why).note(NoteKind::SentenceScoring, text))
            }
        }
    }

    /// The closed-book answer; `None` when the LLM fails.
    async fn generate_closed_book(&self, llm: &dyn Llm) -> (Option<String>, Report) {
        let request = prompts::ANSWER_CLOSED_BOOK.render(&[("query", self.question.as_str())]);
        let (outcome, timing) = self.answer_text(llm, request).await;
        match outcome {
            Ok((text, c)) => (Some(text), timing.report(Report::new("closed_book")).cost(c)),
            Err(e) => {
                let report = timing
                    .report(Report::new("failed"))
                    .detail("error", e.to_string())
                    .note(NoteKind::GenerationFailed, format!("generate failed: {e}"));
                (None, report)
            }
        }
    }

    /// The text of an answer's LLM call and what it cost, streamed to the caller's token sink when there is one
    /// (only the final answer's calls stream: the other stages call [`generate_text`]), with its timing.
    async fn answer_text(
        &self,
        llm: &dyn Llm,
        request: ragtune_core::Result<ragtune_core::LlmRequest>,
    ) -> (ragtune_core::Result<(String, Cost)>, Timing) {
        let started = std::time::Instant::now();
        let streamed = self.stream.is_on();
        let outcome = match request {
            Err(e) => Err(e),
            Ok(request) if streamed => {
                self.stream.begin_generation();
                let mut on_token = |piece: &str| self.stream.token(piece);
                llm.generate_stream(&self.ctx, &request, &mut on_token).await.map(|r| (r.text, r.cost))
            }
            Ok(request) => generate_text(llm, &self.ctx, Ok(request)).await,
        };
        let took = started.elapsed();
        self.stream.generated(took);
        let timing = Timing { streamed, ttft_ms: self.stream.ttft_ms(), generation_ms: took.as_secs_f64() * 1e3 };
        (outcome, timing)
    }

    /// The faithfulness verdict of `answer` against the context; `None` when the judge failed.
    async fn judge(&self, answer: &str, context: &[ContextPassage]) -> (Option<Faithfulness>, Report) {
        let passages: Vec<String> = context.iter().map(|p| p.text.clone()).collect();
        let judge = match &self.vectors {
            // The statements of an extractive answer are refinement strips, whose vectors are known already.
            Some(v) => Arc::new(self.engine.judge().as_ref().clone().with_embedder(v.clone())),
            None => self.engine.judge(),
        };
        match judge.judge(&self.ctx, &self.question, answer, &passages).await {
            Ok(f) => {
                let mut report = Report::new(f.label())
                    .detail("overall", serde_json::to_value(f.overall).unwrap_or_default())
                    .detail("unsupported_share", f64::from(f.unsupported_share))
                    .cost(f.cost);
                // `pipeline.judge_with_llm = false` chose the LLM-free judge: no degradation to note.
                let chosen = !self.engine.config().pipeline.judge_with_llm && self.engine.llm().is_some();
                if let Some(why) = f.fallback_reason.as_ref().filter(|_| !chosen) {
                    let text = format!("faithfulness judged without the LLM ({}): {why}", f.label());
                    report = report.note(NoteKind::JudgeFallback, text);
                }
                (Some(f), report)
            }
            Err(e) => {
                let report = Report::new("failed")
                    .detail("error", e.to_string())
                    .note(NoteKind::JudgeFailed, format!("judge skipped: {e}"));
                (None, report)
            }
        }
    }

    /// The question rewritten for retrieval, the one rewrite of the pipeline (the retry's `rewrite_query` and the
    /// correction of an INCORRECT retrieval): the LLM's rewrite (`rewrite@1`); without an LLM, the question expanded
    /// with the synonym table (`transform.synonyms`, else the built-in one); the question itself when that fails.
    async fn rewritten(&self) -> Rewritten {
        let question = self.question.clone();
        let Some(llm) = self.engine.llm() else {
            return match self.engine.synonym_table() {
                Ok(table) => match table.expand(&question).filter(|(t, _)| t.len() <= ragtune_core::Query::MAX_BYTES) {
                    Some((expanded, _)) => Rewritten::new(expanded, "synonyms"),
                    None => {
                        Rewritten::new(question, "synonyms").problem("no word of the question is in the synonym table")
                    }
                },
                Err(e) => Rewritten::new(question, "failed").problem(format!("the synonym table cannot be read: {e}")),
            };
        };
        let values = [("query", question.as_str()), ("context", "(none)")];
        match query_from_llm(llm.as_ref(), &self.ctx, &prompts::REWRITE, &values).await {
            Ok((Some(text), cost)) => Rewritten { cost, ..Rewritten::new(text, "llm") },
            Ok((None, cost)) => {
                Rewritten { cost, ..Rewritten::new(question, "no_query").problem("it returned no query") }
            }
            Err(e) => Rewritten::new(question, "failed").problem(format!("it failed ({e})")),
        }
    }

    /// The query of a rewrite retry ([`rewritten`](Self::rewritten)) as a trace step.
    async fn rewrite(&self) -> (String, Report) {
        let r = self.rewritten().await;
        let mut report = Report::new(r.how).cost(r.cost);
        match (&r.problem, r.how) {
            (None, "synonyms") => {
                report = report
                    .note(NoteKind::RetryRewrite, "retry rewrite without an LLM: the query was expanded with synonyms");
            }
            (None, _) => {}
            (Some(why), _) => {
                report = report
                    .detail("error", why.as_str())
                    .note(NoteKind::RetryRewrite, format!("retry rewrite: {why}; the question is searched again"));
            }
        }
        (r.query, report)
    }
}

/// Whether a no-info reread's answer replaces the "not in the documents" it rereads ([`keep_reread`]), as a trace
/// step.
fn reread_choice(cfg: &ragtune_evaluators::retry::RetryConfig, reread: &AttemptResult) -> (bool, Report) {
    let (keep, why) = keep_reread(cfg, &outcome(reread, 0, true));
    let action = if keep { "reread_kept" } else { "reread_discarded" };
    (keep, Report::new(action).detail("reason", why))
}

/// What the retry policy reads of an attempt.
fn outcome(result: &AttemptResult, k: usize, reread: bool) -> AttemptOutcome {
    AttemptOutcome {
        retrieved: result.retrieved,
        extracted_chars: result.extraction.as_ref().map(Extraction::text_len),
        unsupported_share: result.faithfulness.as_ref().map(|f| f.unsupported_share),
        answer: result.answer.clone(),
        retrieval_verdict: result.crag.decision,
        k,
        reread,
    }
}

/// The smart-retry policy's decision on one attempt's outcome.
fn decide_retry(
    cfg: &ragtune_evaluators::retry::RetryConfig,
    plan: &Plan,
    result: &AttemptResult,
) -> (RetryDecision, Report) {
    let attempt = plan.attempt;
    let decision = decide(cfg, attempt, &outcome(result, plan.k, plan.reread));
    let report = Report::new(decision_name(&decision))
        .detail("attempt", attempt)
        .detail("decision", serde_json::to_value(&decision).unwrap_or_default());
    (decision, report)
}

/// Assembly under the token budget, with the context report.
fn assemble_stage(
    passages: Vec<ContextPassage>,
    method: ContextMethod,
    tokens_before: usize,
    budget: usize,
) -> ((Vec<ContextPassage>, ContextReport), Report) {
    let (context, cut) = assemble(passages, budget);
    let tokens_after: usize = context.iter().map(|p| estimate_tokens(&p.text)).sum();
    let report = Report::new(method.to_string())
        .detail("passages", context.len())
        .detail("tokens_before", tokens_before)
        .detail("tokens_after", tokens_after)
        .detail("cut_for_budget", cut);
    ((context, ContextReport { method, tokens_before, tokens_after, cut_for_budget: cut }), report)
}

/// A context passage (numbered later, by assembly).
fn passage(chunk_id: &str, doc_id: &str, title: Option<&String>, text: String) -> ContextPassage {
    ContextPassage {
        n: 0,
        chunk_id: chunk_id.to_owned(),
        doc_id: doc_id.to_owned(),
        title: title.cloned(),
        text,
        tier: None,
        page: None,
        last_page: None,
    }
}

/// Gives each passage the pages of its chunk (`page`, `last_page` metadata of paged documents), so citations can
/// show them.
fn add_pages(passages: &mut [ContextPassage], candidates: &[Candidate]) {
    let page = |c: &Candidate, key: &str| {
        c.chunk.metadata.get(key).and_then(serde_json::Value::as_u64).and_then(|p| u32::try_from(p).ok())
    };
    for p in passages.iter_mut() {
        if let Some(c) = candidates.iter().find(|c| c.chunk.id == p.chunk_id) {
            p.page = page(c, "page");
            p.last_page = page(c, "last_page");
        }
    }
}

/// The candidates' whole texts.
fn whole_passages(candidates: &[Candidate]) -> Vec<ContextPassage> {
    candidates
        .iter()
        .map(|c| passage(&c.chunk.id, &c.chunk.doc_id, c.chunk.title.as_ref(), c.chunk.text.clone()))
        .collect()
}

/// The refinement strips, one passage per kept candidate.
fn strips(refined: &Refined) -> Vec<ContextPassage> {
    refined.passages.iter().map(|p| passage(&p.chunk_id, &p.doc_id, p.title.as_ref(), p.text.clone())).collect()
}

/// How an answer's LLM call went in time, for its stage's trace event.
struct Timing {
    /// Whether it streamed to a caller.
    streamed: bool,
    /// The question's time to first token so far (from its arrival), when anything was streamed.
    ttft_ms: Option<f64>,
    /// The call's time.
    generation_ms: f64,
}

impl Timing {
    /// `report` with the timing's details: `streamed`, `generation_ms`, and `ttft_ms` when a token was sent.
    fn report(&self, report: Report) -> Report {
        let report = report.detail("streamed", self.streamed).detail("generation_ms", self.generation_ms);
        match self.ttft_ms {
            Some(ms) => report.detail("ttft_ms", ms),
            None => report,
        }
    }
}

async fn generate_text(
    llm: &dyn Llm,
    ctx: &ragtune_core::Ctx,
    request: ragtune_core::Result<ragtune_core::LlmRequest>,
) -> ragtune_core::Result<(String, Cost)> {
    let request = request?;
    let mut out = llm.generate(ctx, std::slice::from_ref(&request)).await?;
    let r = out.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
    Ok((r.text, r.cost))
}

/// The `query` of an LLM's JSON answer to `prompt` (`None` when it is missing or empty) and what it cost.
pub(super) async fn query_from_llm(
    llm: &dyn Llm,
    ctx: &ragtune_core::Ctx,
    prompt: &ragtune_core::prompt::Prompt,
    values: &[(&str, &str)],
) -> ragtune_core::Result<(Option<String>, Cost)> {
    let request = prompt.render(values)?;
    let answer = ragtune_core::prompt::generate_json(llm, ctx, request, &prompts::REPAIR_JSON).await?;
    let text = answer.value.get("query").and_then(|v| v.as_str()).map(str::trim).filter(|s| !s.is_empty());
    Ok((text.map(str::to_owned), answer.cost))
}

fn decision_name(d: &RetryDecision) -> &'static str {
    match d {
        RetryDecision::Accept { .. } => "accept",
        RetryDecision::Retry { .. } => "retry",
        RetryDecision::GiveUp { .. } => "give_up",
    }
}

pub(super) fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Correct => "CORRECT",
        Verdict::Ambiguous => "AMBIGUOUS",
        Verdict::Incorrect => "INCORRECT",
    }
}

impl CragMetadata {
    /// Fills in an evaluator's judgement (in the evaluator's own category words).
    fn judged(&mut self, j: &RelevanceJudgement, evaluator: String, kind: EvaluatorKind) {
        self.evaluator = evaluator;
        self.decision = Some(j.verdict);
        self.category = match (kind, j.verdict) {
            (EvaluatorKind::Heuristic, Verdict::Correct) => CragCategory::Relevant,
            (EvaluatorKind::Heuristic, Verdict::Ambiguous) => CragCategory::Partial,
            (EvaluatorKind::Heuristic, Verdict::Incorrect) => CragCategory::Irrelevant,
            (EvaluatorKind::Model | EvaluatorKind::Learned, Verdict::Correct) => CragCategory::Correct,
            (EvaluatorKind::Model | EvaluatorKind::Learned, Verdict::Ambiguous) => CragCategory::Ambiguous,
            (EvaluatorKind::Model | EvaluatorKind::Learned, Verdict::Incorrect) => CragCategory::Incorrect,
        };
        self.score = j.score;
        self.criteria = j.criteria.clone();
        self.reasons = j.reasons.clone();
    }
}

/// A rewritten query ([`Env::rewritten`]): the query, how it was made (`llm`, `synonyms`, `no_query`, `failed`),
/// what it cost, and why the question is searched unchanged when it is.
struct Rewritten {
    query: String,
    how: &'static str,
    cost: Cost,
    problem: Option<String>,
}

impl Rewritten {
    fn new(query: String, how: &'static str) -> Self {
        Self { query, how, cost: Cost::default(), problem: None }
    }

    fn problem(mut self, why: impl Into<String>) -> Self {
        self.problem = Some(why.into());
        self
    }
}
