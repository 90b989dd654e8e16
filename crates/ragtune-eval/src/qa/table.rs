//! The summary table of an answer-level evaluation ([`qa_table`]) and, question by question, an experiment against
//! plain RAG ([`versus`]).

use std::collections::BTreeMap;

use super::{AnswerRecord, ExperimentReport, QaEvalReport, RefinementReport};

/// Renders the summary table printed after an answer-level evaluation.
#[must_use]
pub fn qa_table(r: &QaEvalReport) -> String {
    let mut out = experiment_rows(r);
    for e in &r.experiments {
        out.push_str(&knowledge_split_lines(e));
    }
    for e in r.experiments.iter().filter(|e| e.experiment != "no_retrieval" && e.questions > 0) {
        out.push_str(&context_lines(e));
    }
    if let Some(base) = r.experiments.iter().find(|e| e.experiment == "baseline") {
        for e in r.experiments.iter().filter(|e| e.experiment != "baseline" && e.experiment != "no_retrieval") {
            out.push_str(&versus(base, e));
        }
    }
    if let Some(f) = &r.refinement {
        out.push_str(&refinement_lines(f));
    }
    out
}

/// The table's header and one row per experiment, then the experiments that failed.
fn experiment_rows(r: &QaEvalReport) -> String {
    let mut out = format!(
        "{:<20} {:>4} {:>7} {:>7} {:>7} {:>7} {:>6} {:>6} {:>7} {:>7} {:>9} {:>8} {:>6} {:>8}\n",
        "experiment",
        "n",
        "acc",
        "yes/no",
        "other",
        "abstain",
        "markup",
        "F1",
        "faith",
        "cite-p",
        "p50 ms",
        "tokens",
        "calls",
        "degraded"
    );
    for e in &r.experiments {
        out.push_str(&format!(
            "{:<20} {:>4} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>6} {:>6.3} {:>7.3} {:>7} {:>9.0} {:>8.0} {:>6.1} {:>8}\n",
            e.experiment,
            e.questions,
            e.accuracy,
            e.yes_no_accuracy,
            e.other_accuracy,
            e.abstention_rate,
            e.markup_answers,
            e.token_f1,
            e.faithfulness,
            e.citation_precision.map_or_else(|| "-".to_owned(), |c| format!("{c:.3}")),
            e.latency_ms.p50,
            e.tokens_per_question,
            e.llm_calls_per_question,
            e.degraded
        ));
    }
    for (exp, error) in r.failed_experiments() {
        out.push_str(&format!("{exp:<20} FAILED (its numbers cover only the questions before the error): {error}\n"));
    }
    out
}

/// An experiment's lines on the knowledge split (local and web-only questions) and on triangulation, when it has
/// them.
fn knowledge_split_lines(e: &ExperimentReport) -> String {
    let mut out = String::new();
    if let Some(s) = &e.split {
        out.push_str(&format!(
            "{:<20} local {} questions acc {:.3} ({:.0} ms, {:.0} tokens); web-only {} questions acc {:.3} ({:.0} ms, {:.0} tokens); web searched for {:.1} % of questions ({} local, {} web-only)\n",
            e.experiment,
            s.local_questions,
            s.local_accuracy,
            s.local_latency_ms,
            s.local_tokens,
            s.web_only_questions,
            s.web_only_accuracy,
            s.web_only_latency_ms,
            s.web_only_tokens,
            s.web_trigger_rate * 100.0,
            s.web_used_when_local,
            s.web_used_when_web_only
        ));
    }
    if let Some(t) = &e.triangulation {
        out.push_str(&format!(
            "{:<20} triangulation of {} answers: {} claims, VERIFIED {}, LIKELY {}, UNVERIFIED {}; coverage {:.1} %, tier-1 ratio {:.2}; support check {:?}\n",
            e.experiment, t.answers, t.claims, t.verified, t.likely, t.unverified, t.coverage_pct, t.tier1_ratio, t.support_checks
        ));
    }
    out
}

/// An experiment's lines on its context (article and answer in it, size, how it was made), its time to first token
/// and its tokens by stage.
fn context_lines(e: &ExperimentReport) -> String {
    let mut out = format!(
        "{:<20} context: article in it {:.1} %, gold answer in its text {:.1} % (non-yes/no), {:.0} tokens; made by {:?}; retried {}\n",
        e.experiment,
        e.article_in_context * 100.0,
        e.answer_in_context * 100.0,
        e.context_tokens,
        e.context_methods,
        e.retried
    );
    if let Some(t) = &e.ttft_ms {
        out.push_str(&format!(
            "{:<20} time: p50 {:.0} ms total, first token p50 {:.0} ms (p99 {:.0} ms)\n",
            e.experiment, e.latency_ms.p50, t.p50, t.p99
        ));
    }
    if !e.stage_tokens.is_empty() {
        let stages: Vec<String> = e.stage_tokens.iter().map(|(s, t)| format!("{s} {t:.0}")).collect();
        out.push_str(&format!("{:<20} tokens per question by stage: {}\n", e.experiment, stages.join(", ")));
    }
    out
}

/// The lines on knowledge refinement: answer strips kept and tokens cut, then by how often the answer is mentioned.
fn refinement_lines(f: &RefinementReport) -> String {
    let mut out = format!(
        "refinement: {} questions, answer strips kept {:.1} % ({} of {}), per question {:.1} %, questions with an answer strip kept {:.1} %, tokens cut {:.1} % ({} -> {})\n",
        f.questions,
        f.answer_retention * 100.0,
        f.answer_strips_kept,
        f.answer_strips,
        f.mean_question_retention * 100.0,
        f.question_retention * 100.0,
        f.token_reduction * 100.0,
        f.tokens_before,
        f.tokens_after
    );
    for (bucket, b) in &f.by_mentions {
        out.push_str(&format!(
            "  questions with {bucket} answer strips: {} questions, {} of {} kept ({:.1} %)\n",
            b.questions,
            b.answer_strips_kept,
            b.answer_strips,
            b.answer_strips_kept as f64 / b.answer_strips.max(1) as f64 * 100.0
        ));
    }
    out
}

/// Question by question, `e` against plain RAG (`base`): who got which right, how sure the difference in accuracy
/// is ([`paired::compare`](crate::paired::compare): its 95 % interval and McNemar p-value), and for the questions
/// only plain RAG got right, where `e` lost them — its context lacked the article (retrieval), had the article but
/// not the answer's text (extraction, refinement or the budget cut it), or had the answer and the generator
/// missed it.
#[must_use]
pub fn versus(base: &ExperimentReport, e: &ExperimentReport) -> String {
    let by_id: BTreeMap<&str, &AnswerRecord> = base.answers.iter().map(|a| (a.id.as_str(), a)).collect();
    let (mut both, mut neither, mut only_base, mut only_e) = (0, 0, 0, 0);
    let (mut no_article, mut lost_span, mut generator, mut yes_no, mut fallback, mut retried) = (0, 0, 0, 0, 0, 0);
    for a in &e.answers {
        let Some(b) = by_id.get(a.id.as_str()) else { continue };
        match (b.correct, a.correct) {
            (true, true) => both += 1,
            (false, false) => neither += 1,
            (false, true) => only_e += 1,
            (true, false) => {
                only_base += 1;
                fallback += usize::from(a.context_method == "extract-fallback");
                retried += usize::from(a.attempts > 1);
                if !a.article_in_context {
                    no_article += 1;
                } else {
                    match a.answer_in_context {
                        None => yes_no += 1,
                        Some(false) => lost_span += 1,
                        Some(true) => generator += 1,
                    }
                }
            }
        }
    }
    let paired = crate::paired::compare(both + neither + only_base + only_e, only_base, only_e);
    format!(
        "{:<20} vs baseline: both right {both}, neither {neither}, only baseline {only_base}, only {} {only_e} (difference {}); of the {only_base} lost: article not in the context {no_article}, article but not the answer's text {lost_span}, answer in the context but missed {generator}, yes/no with the article {yes_no} (context by fallback {fallback}, retried {retried})\n",
        e.experiment,
        e.experiment,
        paired.summary()
    )
}
