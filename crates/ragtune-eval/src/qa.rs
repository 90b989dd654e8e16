//! Answer-level evaluation on a question-answering dataset (the CMU Wikipedia QA set): index the articles, ask
//! the questions through [`Engine::ask`] under a named experiment, and score the answers.
//!
//! Metrics per experiment: accuracy (the gold answer contained in the answer after normalisation; yes/no
//! questions scored by polarity), token F1, faithfulness (the share of the answer's statements the LLM-free judge
//! finds supported by the context — the same judge for every experiment, so they compare), citation precision (the
//! share of cited passages that come from the question's article or its identical copy in the other semester), latency and LLM tokens. Knowledge refinement
//! is measured on its own ([`refinement_check`]): how many answer-bearing strips it keeps and how many tokens it
//! cuts.
//!
//! Over 1,000 lines (about 180 of them tests): loading, asking, scoring and the report of one evaluation, which
//! share the per-question record; the report table is in `table.rs` (issue 45).

mod table;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::cmu_qa::{ArticleText, QaQuestion, load_cmu_qa};
use ragtune::core::{Ctx, Embedder, Error, Query, Result};
use ragtune::evaluators::faithfulness::{FaithfulnessJudge, JudgeConfig, is_no_info};
use ragtune::evaluators::metrics::answer::{AnswerScore, contains_answer, score_answer, sentence_has_answer};
use ragtune::evaluators::metrics::percentile;
use ragtune::evaluators::refine::Refiner;
use ragtune::evaluators::retry::NoInfoRecheck;
use serde::{Deserialize, Serialize};

use crate::retrieval::Latency;
use ragtune::{Chunking, Config, Engine, StoreConfig};
use ragtune::{ContextMode, EmbeddingMode, Transform};
pub use table::{qa_table, versus};

/// The named experiments (docs/eval.md, "The experiments"): a ladder from plain RAG to batched extraction, plus
/// the closed-book and full corrective pipelines.
pub const EXPERIMENTS: [&str; 12] = [
    "no_retrieval",
    "baseline",
    "sentences",
    "forced_search",
    "refined",
    "extraction",
    "judge",
    "smart_retry",
    "multi_query",
    "batched_extraction",
    "corrective",
    "answer_first",
];

/// Applies a named experiment to a configuration.
///
/// - `no_retrieval`: the LLM answers from what it knows (closed book).
/// - `baseline`: plain RAG — retrieve the top 5, whole passages, answer; no evaluation, judge or retry.
/// - `sentences`: the baseline with only the top-5 passages' sentences most relevant to the question, under
///   `pipeline.sentence_context_tokens` (a short prompt for a fast answer).
/// - `forced_search`: the baseline searching with an LLM rewrite of the question (the question is always searched).
/// - `refined`: the baseline with knowledge-refinement strips instead of whole passages.
/// - `extraction`: the baseline with query-focused extraction, one LLM call per passage.
/// - `judge`: extraction plus the faithfulness judge.
/// - `smart_retry`: judge plus smart retry.
/// - `multi_query`: smart retry searching with multi-query fusion.
/// - `batched_extraction`: multi_query with one batched extraction call.
/// - `corrective`: the full pipeline — Corrective RAG (evaluate, correct), batched extraction, judge, smart retry.
/// - `answer_first`: the full pipeline answering first from plain RAG's five whole passages (no synonym expansion
///   on AMBIGUOUS, so the first attempt is plain RAG's call); only a retry (one at most) extracts
///   (`pipeline.retry_context = "extract"`), and an answer that says the documents lack the information is reread
///   unless the evaluator judged the retrieval INCORRECT, from refinement's strips and without the prompt's way
///   out, and kept when the judge supports it (`retry.recheck_no_info = "unless_incorrect"`,
///   `pipeline.reread_context = "refine"`); the LLM-free judge decides (`pipeline.judge_with_llm = false`).
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for an unknown name.
pub fn apply_experiment(name: &str, cfg: &mut Config) -> Result<()> {
    let plain = |cfg: &mut Config| {
        cfg.pipeline.top_k = 5;
        cfg.pipeline.context = ContextMode::Full;
        cfg.pipeline.retry_context = None;
        cfg.pipeline.reread_context = None;
        cfg.pipeline.judge = false;
        cfg.pipeline.retry = false;
        cfg.pipeline.retrieve = true;
        cfg.pipeline.extraction_per_document = false;
        cfg.crag.enabled = false;
        cfg.transform.kind = Transform::None;
    };
    match name {
        "no_retrieval" => {
            plain(cfg);
            cfg.pipeline.retrieve = false;
        }
        "baseline" => plain(cfg),
        "sentences" => {
            plain(cfg);
            cfg.pipeline.context = ContextMode::Sentences;
        }
        "forced_search" => {
            plain(cfg);
            cfg.transform.kind = Transform::Rewrite;
        }
        "refined" => {
            plain(cfg);
            cfg.pipeline.context = ContextMode::Refine;
        }
        "extraction" | "judge" | "smart_retry" | "multi_query" | "batched_extraction" => {
            plain(cfg);
            cfg.pipeline.context = ContextMode::Extract;
            cfg.pipeline.extraction_per_document = name != "batched_extraction";
            cfg.pipeline.judge = name != "extraction";
            cfg.pipeline.retry = matches!(name, "smart_retry" | "multi_query" | "batched_extraction");
            if matches!(name, "multi_query" | "batched_extraction") {
                cfg.transform.kind = Transform::MultiQuery;
            }
        }
        "corrective" => {
            plain(cfg);
            cfg.crag.enabled = true;
            cfg.pipeline.context = ContextMode::Extract;
            cfg.pipeline.judge = true;
            cfg.pipeline.retry = true;
            cfg.pipeline.top_k = 0;
        }
        "answer_first" => {
            apply_experiment("corrective", cfg)?;
            cfg.pipeline.context = ContextMode::Full;
            cfg.pipeline.retry_context = Some(ContextMode::Extract);
            // The first attempt is plain RAG's: the same five passages. Synonym expansion on AMBIGUOUS would fuse
            // a second list into up to twice as many passages (more tokens on every question), and it does not
            // repair what it flags (docs/experiments/2026-11-25-learned-evaluator.md); a retry changes the query
            // instead.
            cfg.crag.expand_on_ambiguous = false;
            // A no-info answer is reread unless the evaluator judged the retrieval INCORRECT, from refinement's strips
            // (the sentences closest to the question, no LLM call) and without the prompt's "not in the documents"
            // way out; the judge decides whether the reread replaces it (docs/experiments/2026-11-27-answer-first.md,
            // "No-info rereads without the way out").
            cfg.retry.recheck_no_info = NoInfoRecheck::UnlessIncorrect;
            cfg.pipeline.reread_context = Some(ContextMode::Refine);
            cfg.retry.max_retries = 1;
            // The LLM judge reads the whole context: after an answer from the whole passages it would cost as much
            // as the answer itself, so the LLM-free judge decides the retry.
            cfg.pipeline.judge_with_llm = false;
        }
        other => {
            return Err(Error::invalid_input(format!(
                "unknown experiment `{other}`; available: {}",
                EXPERIMENTS.join(", ")
            )));
        }
    }
    Ok(())
}

/// What to evaluate.
#[derive(Debug, Clone)]
pub struct QaEvalOptions {
    /// The dataset root (with `S08/`, `S09/`).
    pub dataset: PathBuf,
    /// Experiments to run, in order.
    pub experiments: Vec<String>,
    /// The configuration the experiments start from (LLM, embedding model, thresholds).
    pub config: Config,
    /// Ask only this many questions (a deterministic spread over the dataset); all when `None`.
    pub limit: Option<usize>,
    /// Start this many questions into the hash order (0: the usual questions), so that a policy designed on the
    /// first questions can be checked on others.
    pub skip: usize,
    /// Where the article index is cached.
    pub cache_dir: PathBuf,
    /// Rebuild the index.
    pub reindex: bool,
    /// Also measure knowledge refinement on every question with a non-yes/no answer.
    pub refinement_check: bool,
    /// A knowledge split: index only this semester's articles (`S08`); the rest are the web's, served by the
    /// search endpoint the configuration's `[web]` section names (`cargo xtask websearch start --corpus DIR`).
    /// Questions are then scored separately by whether a local article has their article's title.
    pub local_semester: Option<String>,
}

/// The scores of one experiment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ExperimentReport {
    /// The experiment's name.
    pub experiment: String,
    /// Questions asked.
    pub questions: usize,
    /// Questions that returned an error (invalid question) — listed in `failed`.
    pub failed: Vec<String>,
    /// Share of answers containing a gold answer (yes/no questions: the right polarity).
    pub accuracy: f64,
    /// Accuracy on yes/no questions only, and their count.
    pub yes_no_accuracy: f64,
    /// Yes/no questions asked.
    pub yes_no_questions: usize,
    /// Accuracy on the other questions.
    pub other_accuracy: f64,
    /// Share of answers that abstain: they say the documents do not hold or do not decide the answer
    /// ([`is_no_info`](ragtune::evaluators::faithfulness::is_no_info)), so `accuracy` over the rest is the
    /// precision of what was answered.
    #[serde(default)]
    pub abstention_rate: f64,
    /// Answers quoting Markdown structure a person should not read as an answer: a table row (a line starting
    /// with `|`) or a code fence.
    #[serde(default)]
    pub markup_answers: usize,
    /// Mean token F1 (best over golds).
    pub token_f1: f64,
    /// Mean share of statements the LLM-free judge finds supported by the context (answers with statements and
    /// a context; closed-book answers have no context and count as 0).
    pub faithfulness: f64,
    /// Mean share of statements the pipeline's own judge found supported, where it ran.
    pub pipeline_judge_supported: Option<f64>,
    /// Mean citation precision over answers that cite something.
    pub citation_precision: Option<f64>,
    /// Share of answers that cite at least one source.
    pub cited_share: f64,
    /// CRAG decisions (category → count).
    pub decisions: BTreeMap<String, usize>,
    /// Questions that retried at least once.
    pub retried: usize,
    /// Answer kinds (llm, extractive, closed_book).
    pub answer_kinds: BTreeMap<String, usize>,
    /// Latency per question in milliseconds.
    pub latency_ms: Latency,
    /// Time to the LLM answer's first token in milliseconds, over the answers the LLM streamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Latency>,
    /// Mean LLM tokens per question.
    pub tokens_per_question: f64,
    /// Mean LLM calls per question.
    pub llm_calls_per_question: f64,
    /// Mean context tokens given to the generator.
    pub context_tokens: f64,
    /// Answers that carry at least one note: a stage skipped, failed, timed out or fell back
    /// ([`AskResponse::notes`](ragtune::AskResponse)).
    #[serde(default)]
    pub degraded: usize,
    /// Those notes by kind (the text before the first `:`), with how many answers carried each.
    #[serde(default)]
    pub notes: BTreeMap<String, usize>,
    /// How the contexts were made (`full`, `extract`, `extract-fallback`, ...), with how many answers each.
    #[serde(default)]
    pub context_methods: BTreeMap<String, usize>,
    /// Share of questions whose article was in the context.
    #[serde(default)]
    pub article_in_context: f64,
    /// Share of the non-yes/no questions whose gold answer occurs in the context's text.
    #[serde(default)]
    pub answer_in_context: f64,
    /// Mean LLM tokens per question by pipeline stage (`extract`, `generate`, `judge`, `rewrite`, `correct`, ...),
    /// over every question of the experiment: where the tokens go.
    #[serde(default)]
    pub stage_tokens: BTreeMap<String, f64>,
    /// With a knowledge split: the questions whose article is local and those only on the web, scored apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitScores>,
    /// The triangulation tables of the answers that had web passages, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triangulation: Option<TriangulationCounts>,
    /// Every answer, in question order, for reading the failures behind the averages.
    #[serde(default)]
    pub answers: Vec<AnswerRecord>,
    /// Why the experiment stopped before its last question, when it did: its numbers then cover only the questions
    /// it answered ([`run_qa_eval`] keeps them and runs the next experiment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A knowledge split's scores ([`QaEvalOptions::local_semester`]): local questions (a local article has their
/// article's title) and web-only questions apart, and how often the web was searched.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SplitScores {
    /// Questions whose article is in the local index, and the share answered right.
    pub local_questions: usize,
    pub local_accuracy: f64,
    /// Questions whose article is only on the web, and the share answered right.
    pub web_only_questions: usize,
    pub web_only_accuracy: f64,
    /// Share of all questions for which web results were added (the web trigger rate).
    pub web_trigger_rate: f64,
    /// Local questions for which the web was searched anyway (the corpus had the answer's article).
    pub web_used_when_local: usize,
    /// Web-only questions for which the web was searched.
    pub web_used_when_web_only: usize,
    /// Mean latency (ms) and LLM tokens per question, for local and web-only questions.
    pub local_latency_ms: f64,
    pub web_only_latency_ms: f64,
    pub local_tokens: f64,
    pub web_only_tokens: f64,
}

impl SplitScores {
    /// The scores of the answers that carry a split label (`local`); `None` when none does.
    #[must_use]
    pub fn from_answers(answers: &[AnswerRecord]) -> Option<Self> {
        let labelled: Vec<(&AnswerRecord, bool)> = answers.iter().filter_map(|a| a.local.map(|l| (a, l))).collect();
        if labelled.is_empty() {
            return None;
        }
        let group = |local: bool| labelled.iter().filter(move |(_, l)| *l == local).map(|(a, _)| *a);
        let mean = |xs: Vec<f64>| if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 };
        let acc = |local: bool| mean(group(local).map(|a| f64::from(u8::from(a.correct))).collect());
        Some(Self {
            local_questions: group(true).count(),
            local_accuracy: acc(true),
            web_only_questions: group(false).count(),
            web_only_accuracy: acc(false),
            web_trigger_rate: labelled.iter().filter(|(a, _)| a.web_used).count() as f64 / labelled.len() as f64,
            web_used_when_local: group(true).filter(|a| a.web_used).count(),
            web_used_when_web_only: group(false).filter(|a| a.web_used).count(),
            local_latency_ms: mean(group(true).map(|a| a.latency_ms).collect()),
            web_only_latency_ms: mean(group(false).map(|a| a.latency_ms).collect()),
            local_tokens: mean(group(true).map(|a| a.tokens as f64).collect()),
            web_only_tokens: mean(group(false).map(|a| a.tokens as f64).collect()),
        })
    }
}

/// One question's answer in an experiment ([`ExperimentReport::answers`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AnswerRecord {
    /// The question's id in the dataset.
    pub id: String,
    /// The question.
    pub question: String,
    /// The gold answers.
    pub gold: Vec<String>,
    /// The answer given (empty when there was none).
    pub answer: String,
    /// Whether it counts as correct (contains a gold answer; yes/no: the right polarity).
    pub correct: bool,
    /// Token F1 against the best gold answer.
    pub f1: f64,
    /// Whether the question was scored as yes/no.
    pub yes_no: bool,
    /// The CRAG decision.
    pub decision: String,
    /// The ids of the cited documents, in citation order.
    pub cited: Vec<String>,
    /// LLM calls and tokens spent.
    pub llm_calls: u64,
    /// LLM tokens.
    pub tokens: u64,
    /// Context tokens given to the generator.
    pub context_tokens: usize,
    /// Wall-clock milliseconds.
    pub latency_ms: f64,
    /// Milliseconds to the LLM answer's first token, when the LLM streamed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// The answer's notes (skipped, failed or degraded stages).
    pub notes: Vec<String>,
    /// How the context was made (`full`, `refine`, `extract`, `extract-fallback`, `none`).
    #[serde(default)]
    pub context_method: String,
    /// Attempts of the retry loop (1 when the first answer was accepted).
    #[serde(default)]
    pub attempts: usize,
    /// Whether the question's article (or its copy in the other semester) is among the context's documents.
    #[serde(default)]
    pub article_in_context: bool,
    /// Whether a gold answer occurs in the context's text (as [`score_answer`] finds it in an answer); `None` for
    /// yes/no questions, whose gold answer is not a span. With `correct`, this tells a context that lost the
    /// answer from a generator that missed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_in_context: Option<bool>,
    /// With a knowledge split: whether the question's article is local (`false`: only on the web).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
    /// Whether web results were added to the context.
    #[serde(default)]
    pub web_used: bool,
    /// LLM tokens by pipeline stage, summed over attempts (stages that spent none are left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stage_tokens: BTreeMap<String, u64>,
    /// The answer's triangulation table in numbers, when web passages were in its context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triangulation: Option<TriangulationCounts>,
}

/// One answer's triangulation (or, summed, an experiment's): claims by status, coverage and tier-1 ratio.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TriangulationCounts {
    /// Answers triangulated (1 for one answer).
    pub answers: usize,
    /// Claims checked, and how many were VERIFIED (≥ 3 independent sources), LIKELY (2), UNVERIFIED (≤ 1).
    pub claims: usize,
    pub verified: usize,
    pub likely: usize,
    pub unverified: usize,
    /// Coverage: VERIFIED claims in percent of all claims.
    pub coverage_pct: f64,
    /// Mean of the answers' tier-1 ratios (tier-1 sources among the supporting sources).
    pub tier1_ratio: f64,
    /// The support checks used, with how many answers each decided.
    #[serde(default)]
    pub support_checks: BTreeMap<String, usize>,
}

impl TriangulationCounts {
    fn of(t: &ragtune::web::triangulation::Triangulation) -> Self {
        use ragtune::web::triangulation::Consensus;
        let count = |c: Consensus| t.rows.iter().filter(|r| r.status == c).count();
        Self {
            answers: 1,
            claims: t.rows.len(),
            verified: count(Consensus::Verified),
            likely: count(Consensus::Likely),
            unverified: count(Consensus::Unverified),
            coverage_pct: t.coverage_pct,
            tier1_ratio: t.tier1_ratio,
            support_checks: BTreeMap::from([(t.support_check.clone(), 1)]),
        }
    }

    /// The sum over answers (coverage over all claims, tier-1 ratio averaged over answers); `None` without any.
    fn total<'a>(all: impl Iterator<Item = &'a Self>) -> Option<Self> {
        let mut sum = Self::default();
        let mut ratios = 0.0;
        for t in all {
            sum.answers += t.answers;
            sum.claims += t.claims;
            sum.verified += t.verified;
            sum.likely += t.likely;
            sum.unverified += t.unverified;
            ratios += t.tier1_ratio * t.answers as f64;
            for (k, v) in &t.support_checks {
                *sum.support_checks.entry(k.clone()).or_default() += v;
            }
        }
        if sum.answers == 0 {
            return None;
        }
        sum.coverage_pct = if sum.claims == 0 { 0.0 } else { 100.0 * sum.verified as f64 / sum.claims as f64 };
        sum.tier1_ratio = ratios / sum.answers as f64;
        Some(sum)
    }
}

/// Knowledge refinement on the retrieved passages of every question with a non-yes/no gold answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RefinementReport {
    /// Questions measured (non-yes/no, with a gold answer in some retrieved strip).
    pub questions: usize,
    /// Strips containing a gold answer before refinement.
    pub answer_strips: usize,
    /// Of those, kept by refinement.
    pub answer_strips_kept: usize,
    /// `answer_strips_kept / answer_strips`.
    pub answer_retention: f64,
    /// Questions for which at least one answer-bearing strip was kept, as a share.
    pub question_retention: f64,
    /// The share of answer-bearing strips kept, averaged over questions (each question counts once, however often
    /// its answer is mentioned).
    #[serde(default)]
    pub mean_question_retention: f64,
    /// Retention by how many answer-bearing strips a question has (`1`, `2`, `3-5`, `6+`): questions whose answer
    /// is the article's subject are mentioned in many strips that do not answer the question.
    #[serde(default)]
    pub by_mentions: BTreeMap<String, RetentionBucket>,
    /// Token reduction over all questions: 1 - tokens after / tokens before.
    pub token_reduction: f64,
    /// Tokens before and after, summed.
    pub tokens_before: usize,
    /// Tokens after.
    pub tokens_after: usize,
}

/// The whole answer-level evaluation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct QaEvalReport {
    /// The dataset name.
    pub dataset: String,
    /// Always `qa`.
    pub split: String,
    /// Articles indexed.
    pub articles: usize,
    /// Questions in the dataset.
    pub dataset_questions: usize,
    /// The settings that change results (baselines compare it).
    pub config: serde_json::Value,
    /// Headline metrics of the last experiment that finished (baseline comparison in `cargo xtask eval`).
    pub metrics: BTreeMap<String, f64>,
    /// Per experiment.
    pub experiments: Vec<ExperimentReport>,
    /// Knowledge refinement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refinement: Option<RefinementReport>,
    /// Index build time in seconds (0 when cached).
    pub index_seconds: f64,
    /// Whether the index came from the cache.
    pub index_cached: bool,
    /// Problems the loader reported.
    pub load_issues: Vec<String>,
}

impl QaEvalReport {
    /// The experiments that stopped with an error, with it.
    pub fn failed_experiments(&self) -> impl Iterator<Item = (&str, &str)> {
        self.experiments.iter().filter_map(|e| e.error.as_deref().map(|err| (e.experiment.as_str(), err)))
    }
}

/// Is `dir` a CMU-QA-style dataset (semester directories with `question_answer_pairs.txt`)?
#[must_use]
pub fn is_qa_dataset(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .is_ok_and(|entries| entries.flatten().any(|e| e.path().join("question_answer_pairs.txt").is_file()))
}

/// A deterministic spread of `limit` questions: ordered by a hash of their id, so every article and question
/// type is represented and the same limit always picks the same questions.
fn sample(questions: &[QaQuestion], skip: usize, limit: Option<usize>) -> Vec<&QaQuestion> {
    let mut all: Vec<&QaQuestion> = questions.iter().collect();
    all.sort_by_key(|q| (xxhash_rust::xxh3::xxh3_64(q.id.as_bytes()), q.id.clone()));
    all.drain(..skip.min(all.len()));
    if let Some(n) = limit {
        all.truncate(n);
    }
    all
}

/// A QA dataset with its (cached) index: what an evaluation and a calibration both start from.
struct Prepared {
    data: crate::cmu_qa::QaDataset,
    /// The local semester's article titles, with a knowledge split.
    local_titles: Option<std::collections::BTreeSet<String>>,
    name: String,
    embedder: Option<Arc<dyn Embedder>>,
    store: StoreConfig,
    index_seconds: f64,
    cached: bool,
}

/// Loads the dataset (only the local semester's articles with a knowledge split) and opens its cached index,
/// building it first when needed.
async fn prepare(opts: &QaEvalOptions, log: &mut dyn FnMut(&str)) -> Result<Prepared> {
    let mut data = load_cmu_qa(&opts.dataset, ArticleText::Clean)?;
    // With a knowledge split only the local semester is indexed; the questions of every semester are asked.
    let local_titles: Option<std::collections::BTreeSet<String>> = match &opts.local_semester {
        Some(semester) => {
            let prefix = format!("{semester}/");
            data.articles.retain(|d| d.id.starts_with(&prefix));
            if data.articles.is_empty() {
                return Err(Error::invalid_input(format!("no article of semester `{semester}` in the dataset")));
            }
            Some(data.articles.iter().filter_map(|d| d.title.clone()).collect())
        }
        None => None,
    };
    let name = opts
        .dataset
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "qa".into());
    let embedder: Option<Arc<dyn Embedder>> = match opts.config.embedding.mode {
        EmbeddingMode::Off => None,
        _ => match ragtune::load_embedder(&opts.config.embedding) {
            Ok(e) => Some(e),
            Err(e) if opts.config.embedding.mode == EmbeddingMode::Auto => {
                log(&format!("dense retrieval is off: {}", e.message()));
                None
            }
            Err(e) => return Err(e),
        },
    };
    // Strip vectors are stored with the passages when on, for the strips of `refine.max_strip_words`.
    let emb = &opts.config.embedding;
    let strips = emb.strip_vectors.then_some((opts.config.refine.max_strip_words, emb.strip_vectors_past_window));
    let dense_key =
        embedder.as_ref().map_or_else(|| "none".to_owned(), |e| format!("{}/strips={strips:?}", e.spec().model_id));
    let mut corpus_hash = 0u64;
    for d in &data.articles {
        corpus_hash ^= xxhash_rust::xxh3::xxh3_64(format!("{}\u{0}{}", d.id, d.text).as_bytes());
    }
    let chunker = opts.config.chunking;
    let key = format!(
        "{corpus_hash:016x}-{dense_key}-{}-{}-{}-k1={}-b={}",
        chunker.chunk_size, chunker.chunk_overlap, chunker.max_section_size, opts.config.bm25.k1, opts.config.bm25.b
    );
    let dir = opts.cache_dir.join(format!("{name}-{:016x}", xxhash_rust::xxh3::xxh3_64(key.as_bytes())));
    let marker = dir.join("COMPLETE");
    let cached = marker.is_file() && !opts.reindex;
    if !cached && dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| Error::permanent(format!("cannot clear the cached index {}", dir.display())).with_source(e))?;
    }
    let store = StoreConfig { path: dir.join("store"), ..StoreConfig::default() };
    let started = Instant::now();
    let mut index_seconds = 0.0;
    {
        let cfg = Config { store: store.clone(), ..opts.config.clone() };
        let mut engine = Engine::open_with_embedder(cfg, embedder.clone()).await?;
        if cached {
            log(&format!("using the cached index {}", dir.display()));
        } else {
            log(&format!("indexing {} articles into {}", data.articles.len(), dir.display()));
            engine.index_documents(&data.articles, Chunking::Auto(chunker), &mut |_, _| {}).await?;
            std::fs::write(&marker, key.as_bytes())
                .map_err(|e| Error::permanent(format!("cannot write {}", marker.display())).with_source(e))?;
            index_seconds = started.elapsed().as_secs_f64();
        }
    }
    Ok(Prepared { data, local_titles, name, embedder, store, index_seconds, cached })
}

/// Where the calibration pool of a QA dataset starts in the hash order of its questions: evaluations sample from
/// the front of that order (`--limit`, at most this many), calibration uses only what comes after, so thresholds are
/// never fitted on a question an evaluation reports.
pub const QA_CALIBRATION_FROM: usize = 1000;

/// Fits `evaluator`'s two thresholds on the calibration pool of a QA dataset (the questions beyond the first
/// [`QA_CALIBRATION_FROM`] of the hash order; `opts.limit` caps how many): "retrieval succeeded" means a passage of
/// the question's article (by title) among the top `k` of the configured strategy. With a knowledge split
/// (`opts.local_semester`), questions whose article is only "on the web" can never succeed, which is what the
/// evaluator must learn to flag. Returns the calibration and the number of questions it used.
///
/// # Errors
/// Dataset, index or model failures; a pool where every retrieval succeeded or every one failed.
pub async fn run_qa_calibration(
    opts: &QaEvalOptions,
    evaluator: ragtune::EvaluatorKind,
    k: usize,
    target_precision: f32,
    log: &mut dyn FnMut(&str),
) -> Result<ragtune::evaluators::crag::Calibration> {
    let Prepared { data, store, embedder, .. } = prepare(opts, log).await?;
    let titles: BTreeMap<&str, &str> =
        data.articles.iter().filter_map(|d| d.title.as_deref().map(|t| (d.id.as_str(), t))).collect();
    let cfg = Config { store, ..opts.config.clone() };
    let strategy = cfg.search.strategy;
    let engine = Engine::open_with_embedder(cfg, embedder).await?;
    let retriever = engine.retriever(strategy).await?;
    let pool = sample(&data.questions, QA_CALIBRATION_FROM, opts.limit);
    log(&format!("calibrating on {} questions (hash order from {QA_CALIBRATION_FROM})", pool.len()));
    let mut judged = Vec::with_capacity(pool.len());
    for q in pool {
        let query = Query::new(q.question.clone()).with_top_k(k);
        let candidates = retriever.retrieve(&Ctx::new(), std::slice::from_ref(&query)).await?.pop().unwrap_or_default();
        let succeeded = candidates
            .iter()
            .take(k)
            .any(|c| titles.get(c.chunk.doc_id.as_str()).is_some_and(|t| *t == q.article_title));
        judged.push((q.question.clone(), candidates, succeeded));
    }
    crate::crag::calibrate_evaluator(
        &opts.config,
        evaluator,
        &judged,
        target_precision,
        &crate::crag::score_cache(&opts.cache_dir),
    )
    .await
}

/// Runs the experiments one after another with `run` and keeps what each measured: an experiment whose run fails
/// keeps the answers it had (`run` fills the report as it goes) and is marked with its error, and the experiments
/// after it still run, so a failure late in a long evaluation does not throw away the ones that finished.
async fn run_experiments(
    names: &[String],
    log: &mut dyn FnMut(&str),
    mut run: impl AsyncFnMut(&str, &mut ExperimentReport, &mut dyn FnMut(&str)) -> Result<()>,
) -> Vec<ExperimentReport> {
    let mut out = Vec::with_capacity(names.len());
    for exp in names {
        let mut r = ExperimentReport { experiment: exp.clone(), ..ExperimentReport::default() };
        if let Err(e) = run(exp, &mut r, log).await {
            log(&format!("experiment {exp} failed after {} questions: {e}", r.questions));
            r.error = Some(e.to_string());
        }
        out.push(r);
    }
    out
}

/// What every experiment of an evaluation shares: the configuration they start from, the index, the models, the
/// questions and the LLM-free judge that scores every answer alike.
struct Asker<'a> {
    base: &'a Config,
    store: &'a StoreConfig,
    embedder: &'a Option<Arc<dyn Embedder>>,
    llm: &'a Option<Arc<dyn ragtune::core::Llm>>,
    questions: &'a [&'a QaQuestion],
    judge: &'a FaithfulnessJudge,
    local_titles: Option<&'a std::collections::BTreeSet<String>>,
}

/// The sums an experiment's averages are computed from ([`Tally::finish`]), kept outside the question loop so that
/// an experiment that fails part-way still reports what it measured.
#[derive(Default)]
struct Tally {
    correct: usize,
    yes_no_correct: usize,
    other_correct: usize,
    f1: f64,
    faithfulness: f64,
    judge_sum: f64,
    judged: usize,
    cite_sum: f64,
    cite_n: usize,
    cited: usize,
    tokens: u64,
    calls: u64,
    context_tokens: usize,
    latencies: Vec<f64>,
}

impl Tally {
    /// The averages of the report, over the questions answered so far.
    fn finish(mut self, r: &mut ExperimentReport) {
        let n = r.questions.max(1) as f64;
        r.accuracy = self.correct as f64 / n;
        r.yes_no_accuracy = self.yes_no_correct as f64 / r.yes_no_questions.max(1) as f64;
        r.other_accuracy = self.other_correct as f64 / (r.questions - r.yes_no_questions).max(1) as f64;
        r.abstention_rate = r.answers.iter().filter(|a| is_no_info(&a.answer)).count() as f64 / n;
        r.markup_answers = r.answers.iter().filter(|a| quotes_markup(&a.answer)).count();
        r.token_f1 = self.f1 / n;
        r.faithfulness = self.faithfulness / n;
        r.pipeline_judge_supported = (self.judged > 0).then(|| self.judge_sum / self.judged as f64);
        r.citation_precision = (self.cite_n > 0).then(|| self.cite_sum / self.cite_n as f64);
        r.cited_share = self.cited as f64 / n;
        let latencies = &mut self.latencies;
        latencies.sort_by(f64::total_cmp);
        let mean = if latencies.is_empty() { 0.0 } else { latencies.iter().sum::<f64>() / latencies.len() as f64 };
        r.latency_ms = Latency { p50: percentile(latencies, 50.0), p99: percentile(latencies, 99.0), mean };
        let mut ttft: Vec<f64> = r.answers.iter().filter_map(|a| a.ttft_ms).collect();
        ttft.sort_by(f64::total_cmp);
        r.ttft_ms = (!ttft.is_empty()).then(|| Latency {
            p50: percentile(&ttft, 50.0),
            p99: percentile(&ttft, 99.0),
            mean: ttft.iter().sum::<f64>() / ttft.len() as f64,
        });
        r.tokens_per_question = self.tokens as f64 / n;
        r.llm_calls_per_question = self.calls as f64 / n;
        r.context_tokens = self.context_tokens as f64 / n;
        r.article_in_context = r.answers.iter().filter(|a| a.article_in_context).count() as f64 / n;
        r.stage_tokens = mean_stage_tokens(&r.answers);
        let spans: Vec<bool> = r.answers.iter().filter_map(|a| a.answer_in_context).collect();
        r.answer_in_context = spans.iter().filter(|x| **x).count() as f64 / spans.len().max(1) as f64;
        r.split = SplitScores::from_answers(&r.answers);
        r.triangulation = TriangulationCounts::total(r.answers.iter().filter_map(|a| a.triangulation.as_ref()));
    }
}

/// Whether `answer` quotes Markdown structure: a line starting with `|` (a table row) or a code fence.
fn quotes_markup(answer: &str) -> bool {
    answer.lines().any(|l| l.trim_start().starts_with('|') || l.trim_start().starts_with("```"))
}

impl Asker<'_> {
    /// One experiment: every question asked through an engine configured for it, each answer scored into `r`.
    async fn run(&self, exp: &str, r: &mut ExperimentReport, log: &mut dyn FnMut(&str)) -> Result<()> {
        let mut cfg = Config { store: self.store.clone(), ..self.base.clone() };
        apply_experiment(exp, &mut cfg)?;
        let engine = Engine::open_with_embedder(cfg, self.embedder.clone()).await?.with_llm(self.llm.clone());
        log(&format!("experiment {exp}: {} questions", self.questions.len()));
        let mut tally = Tally::default();
        let outcome = self.ask_all(&engine, exp, r, &mut tally, log).await;
        tally.finish(r);
        outcome
    }

    /// Asks every question through `engine` and scores each answer into `r` and `tally`; a question the engine
    /// fails on is recorded as failed.
    async fn ask_all(
        &self,
        engine: &Engine,
        exp: &str,
        r: &mut ExperimentReport,
        tally: &mut Tally,
        log: &mut dyn FnMut(&str),
    ) -> Result<()> {
        let questions = self.questions;
        for (i, q) in questions.iter().enumerate() {
            let t = Instant::now();
            // Streamed to nowhere, so that an LLM answer's time to first token is measured.
            let sink = ragtune::pipeline::TokenSink::new(|_| {});
            let response = match engine.ask_streaming(&q.question, sink).await {
                Ok(r) => r,
                Err(e) => {
                    r.failed.push(format!("{}: {e}", q.id));
                    continue;
                }
            };
            let latency_ms = t.elapsed().as_secs_f64() * 1e3;
            self.tally_answer(q, &response, latency_ms, r, tally).await?;
            if (i + 1) % 10 == 0 {
                log(&format!(
                    "  {exp}: {} of {} questions, accuracy so far {:.3}",
                    i + 1,
                    questions.len(),
                    tally.correct as f64 / r.questions as f64
                ));
            }
        }
        Ok(())
    }

    /// Scores one question's answer into the report and the tally: its notes, correctness and F1, faithfulness by
    /// the shared judge, citation precision, decision, costs and context, and its record.
    async fn tally_answer(
        &self,
        q: &QaQuestion,
        response: &ragtune::AskResponse,
        latency_ms: f64,
        r: &mut ExperimentReport,
        tally: &mut Tally,
    ) -> Result<()> {
        tally.latencies.push(latency_ms);
        r.questions += 1;
        r.degraded += usize::from(!response.notes.is_empty());
        let kinds: std::collections::BTreeSet<&str> =
            response.notes.iter().map(|n| n.as_str().split(':').next().unwrap_or(n.as_str()).trim()).collect();
        for kind in kinds {
            *r.notes.entry(kind.to_owned()).or_default() += 1;
        }
        let answer = response.answer.clone().unwrap_or_default();
        let score = score_answer(&answer, &q.answers);
        tally.correct += usize::from(score.correct);
        tally.f1 += f64::from(score.f1);
        if score.yes_no {
            r.yes_no_questions += 1;
            tally.yes_no_correct += usize::from(score.correct);
        } else {
            tally.other_correct += usize::from(score.correct);
        }
        let passages: Vec<String> = response.context.iter().map(|p| p.text.clone()).collect();
        if !passages.is_empty() {
            let f = self.judge.judge(&Ctx::new(), &q.question, &answer, &passages).await?;
            tally.faithfulness += f64::from(f.supported_share);
        }
        if let Some(f) = &response.faithfulness {
            tally.judged += 1;
            tally.judge_sum += f64::from(f.supported_share);
        }
        if !response.citations.is_empty() {
            tally.cited += 1;
            // The question's article, or an identical copy of it in the other semester (same title).
            let relevant = response
                .citations
                .iter()
                .filter(|c| c.doc_id == q.article_id || c.title.as_deref() == Some(q.article_title.as_str()))
                .count();
            tally.cite_sum += relevant as f64 / response.citations.len() as f64;
            tally.cite_n += 1;
        }
        *r.decisions.entry(response.crag.category.to_string()).or_default() += 1;
        let kind = serde_json::to_value(response.answer_kind).ok().and_then(|v| v.as_str().map(str::to_owned));
        *r.answer_kinds.entry(kind.unwrap_or_default()).or_default() += 1;
        r.retried += usize::from(response.attempts.len() > 1);
        tally.tokens += response.cost.tokens;
        tally.calls += response.cost.llm_calls;
        tally.context_tokens += response.context_report.tokens_after;
        let record = self.answer_record(q, answer, &score, response, latency_ms);
        *r.context_methods.entry(record.context_method.clone()).or_default() += 1;
        r.answers.push(record);
        Ok(())
    }

    /// The record of one question's answer, scored as `score`.
    fn answer_record(
        &self,
        q: &QaQuestion,
        answer: String,
        score: &AnswerScore,
        response: &ragtune::AskResponse,
        latency_ms: f64,
    ) -> AnswerRecord {
        let article_in_context = response
            .context
            .iter()
            .any(|p| p.doc_id == q.article_id || p.title.as_deref() == Some(q.article_title.as_str()));
        let answer_in_context = (!score.yes_no).then(|| {
            let text = response.context.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n");
            q.answers.iter().any(|g| contains_answer(&text, g))
        });
        AnswerRecord {
            id: q.id.clone(),
            question: q.question.clone(),
            gold: q.answers.clone(),
            answer,
            correct: score.correct,
            f1: f64::from(score.f1),
            yes_no: score.yes_no,
            decision: response.crag.category.to_string(),
            cited: response.citations.iter().map(|c| c.doc_id.clone()).collect(),
            llm_calls: response.cost.llm_calls,
            tokens: response.cost.tokens,
            context_tokens: response.context_report.tokens_after,
            latency_ms,
            ttft_ms: response.ttft_ms,
            notes: response.notes.iter().map(ToString::to_string).collect(),
            context_method: response.context_report.method.to_string(),
            attempts: response.attempts.len(),
            article_in_context,
            answer_in_context,
            local: self.local_titles.map(|titles| titles.contains(&q.article_title)),
            web_used: response.crag.web_search_used,
            stage_tokens: response
                .cost
                .stages
                .iter()
                .filter(|(_, c)| c.tokens > 0)
                .map(|(stage, c)| (stage.clone(), c.tokens))
                .collect(),
            triangulation: response.triangulation.as_ref().map(TriangulationCounts::of),
        }
    }
}

/// The experiments that answer without an LLM (extractively, with the LLM-free judge); every other one needs one.
pub const ANSWER_WITHOUT_LLM: [&str; 4] = ["baseline", "sentences", "refined", "corrective"];

/// Checks every requested experiment against what the run has, before any of them runs (and before the index is
/// built): a known name, a configuration the engine accepts once the experiment is applied, an LLM when the
/// experiment needs one (`has_llm`), and with a knowledge split a web search for the experiments that fall back to
/// the web. A long evaluation must not spend minutes on its first experiments and then fail on a later one.
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) naming every experiment that cannot run here and why.
pub fn check_experiments(opts: &QaEvalOptions, has_llm: bool) -> Result<()> {
    let mut problems = Vec::new();
    let mut llm_missing = false;
    for exp in &opts.experiments {
        let mut cfg = opts.config.clone();
        if let Err(e) = apply_experiment(exp, &mut cfg) {
            problems.push(format!("{exp}: {}", e.message()));
            continue;
        }
        if let Err(e) = cfg.validate() {
            problems.push(format!("{exp}: its configuration is invalid: {e}"));
        }
        if !has_llm && !ANSWER_WITHOUT_LLM.contains(&exp.as_str()) {
            llm_missing = true;
            problems.push(format!("{exp}: needs an LLM, and this run has none"));
        }
        if opts.local_semester.is_some() && cfg.crag.enabled && !cfg.web.enabled {
            problems.push(format!(
                "{exp}: falls back to the web search for the questions of the other semesters, and the configuration \
                 has no [web] section enabled (`cargo xtask eval qa --web-corpus DIR` adds one)"
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut text = format!(
        "{} of the {} experiments requested cannot run, so none was started:\n  {}",
        problems.len(),
        opts.experiments.len(),
        problems.join("\n  ")
    );
    if llm_missing {
        text.push_str(&format!(
            "\nPass --llm-url URL or set $RAGTUNE_LLM_URL (`cargo xtask llm start` runs a local one), or ask only for \
             the experiments that answer without an LLM: {}",
            ANSWER_WITHOUT_LLM.join(", ")
        ));
    }
    Err(Error::invalid_input(text))
}

/// Runs the evaluation.
///
/// Every experiment is checked first ([`check_experiments`]). An experiment that then fails part-way (its engine
/// cannot open, the judge fails) keeps what it measured, with the error in [`ExperimentReport::error`], and the
/// ones after it still run: the report holds every experiment ([`QaEvalReport::failed_experiments`]).
///
/// # Errors
/// A missing dataset, an experiment that cannot run here (before any runs), index failures.
pub async fn run_qa_eval(opts: &QaEvalOptions, log: &mut dyn FnMut(&str)) -> Result<QaEvalReport> {
    let llm = ragtune::load_llm(&opts.config.llm)?;
    check_experiments(opts, llm.is_some())?;
    let Prepared { data, local_titles, name, embedder, store, index_seconds, cached } = prepare(opts, log).await?;
    let questions = sample(&data.questions, opts.skip, opts.limit);
    let lexical_judge = match &embedder {
        Some(e) => FaithfulnessJudge::new(JudgeConfig::default())?.with_embedder(e.clone()),
        None => FaithfulnessJudge::new(JudgeConfig::default())?,
    };
    let asker = Asker {
        base: &opts.config,
        store: &store,
        embedder: &embedder,
        llm: &llm,
        questions: &questions,
        judge: &lexical_judge,
        local_titles: local_titles.as_ref(),
    };
    let experiments = run_experiments(&opts.experiments, log, async |exp, r, log| asker.run(exp, r, log).await).await;

    let refinement = if opts.refinement_check {
        Some(refinement_check(&opts.config, &store, embedder.clone(), &questions, log).await?)
    } else {
        None
    };
    let mut metrics = BTreeMap::new();
    if let Some(last) = experiments.iter().rfind(|e| e.error.is_none()) {
        metrics.insert("accuracy".to_owned(), last.accuracy);
        metrics.insert("token_f1".to_owned(), last.token_f1);
        metrics.insert("faithfulness".to_owned(), last.faithfulness);
    }
    if let Some(r) = &refinement {
        metrics.insert("refine_retention".to_owned(), r.answer_retention);
        metrics.insert("refine_reduction".to_owned(), r.token_reduction);
    }
    let mut config = serde_json::json!({
        "retriever": format!("qa-{}", opts.experiments.join("+")),
        "experiments": opts.experiments,
        "limit": opts.limit,
        "skip": opts.skip,
        "local_semester": opts.local_semester,
        "web": opts.config.web.enabled.then(|| opts.config.web.settings.providers.keys().cloned().collect::<Vec<_>>()),
        "llm_model": llm.as_ref().map(|_| opts.config.llm.model.clone()),
        "embedder": embedder.as_ref().map(|e| e.spec().model_id.clone()),
        "pipeline": opts.config.pipeline,
        "crag": opts.config.crag,
        "refine": opts.config.refine,
    });
    // The extractive answer's cross-encoder: its scores change the answers, so its weights are part of the setting
    // (absent otherwise, so reports without it keep their baselines' config).
    if opts.config.pipeline.sentence_scorer == ragtune::SentenceScorer::CrossEncoder {
        config["sentence_scorer_model"] = ragtune::cross_encoder_fingerprint(&opts.config.rerank)
            .unwrap_or_else(|e| format!("unavailable: {}", e.message()))
            .into();
    }
    Ok(QaEvalReport {
        dataset: name,
        split: "qa".into(),
        articles: data.articles.len(),
        dataset_questions: data.questions.len(),
        config,
        metrics,
        experiments,
        refinement,
        index_seconds,
        index_cached: cached,
        load_issues: data.report.issues().map(ToString::to_string).collect(),
    })
}

/// Answer-bearing strips kept, for the questions of one [`RefinementReport::by_mentions`] bucket.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct RetentionBucket {
    /// Questions in the bucket.
    pub questions: usize,
    /// Their answer-bearing strips.
    pub answer_strips: usize,
    /// Of those, kept.
    pub answer_strips_kept: usize,
}

/// The [`RefinementReport::by_mentions`] bucket of a question with `n` answer-bearing strips.
fn mentions_bucket(n: usize) -> &'static str {
    match n {
        0 | 1 => "1",
        2 => "2",
        3..=5 => "3-5",
        _ => "6+",
    }
}

/// Knowledge refinement on the top-5 retrieved passages of every question whose gold answer is not yes/no:
/// answer-bearing strips kept, and the token reduction.
///
/// # Errors
/// Store and model failures.
pub async fn refinement_check(
    base: &Config,
    store: &StoreConfig,
    embedder: Option<Arc<dyn Embedder>>,
    questions: &[&QaQuestion],
    log: &mut dyn FnMut(&str),
) -> Result<RefinementReport> {
    let cfg = Config { store: store.clone(), ..base.clone() };
    let engine = Engine::open_with_embedder(cfg, embedder).await?;
    let retriever = engine.retriever(base.search.strategy).await?;
    // Validates the settings once; each question gets its own refiner over its own vector memory.
    Refiner::new(base.refine.clone())?;
    let mut r = RefinementReport::default();
    let mut with_kept = 0usize;
    let mut share_sum = 0.0f64;
    for q in questions.iter().filter(|q| !q.is_yes_no()) {
        let query = Query::new(q.question.clone()).with_top_k(5);
        let ctx = Ctx::new();
        let candidates = retriever.retrieve(&ctx, std::slice::from_ref(&query)).await?.pop().unwrap_or_default();
        // As the pipeline refines: with the strip vectors the store keeps for these passages (the rest embedded).
        let refiner = match engine.request_vectors(&ctx, &candidates).await {
            Some(v) => Refiner::new(base.refine.clone())?.with_embedder(v),
            None => Refiner::new(base.refine.clone())?,
        };
        let refined = refiner.refine(&ctx, &q.question, &candidates).await?;
        let bearing: Vec<bool> =
            refined.strips.iter().map(|s| q.answers.iter().any(|g| sentence_has_answer(&s.text, g))).collect();
        let total = bearing.iter().filter(|b| **b).count();
        if total == 0 {
            continue;
        }
        let kept = refined.strips.iter().zip(&bearing).filter(|(s, b)| **b && s.kept).count();
        r.questions += 1;
        r.answer_strips += total;
        r.answer_strips_kept += kept;
        with_kept += usize::from(kept > 0);
        share_sum += kept as f64 / total as f64;
        let bucket = r.by_mentions.entry(mentions_bucket(total).to_owned()).or_default();
        bucket.questions += 1;
        bucket.answer_strips += total;
        bucket.answer_strips_kept += kept;
        r.tokens_before += refined.tokens_before;
        r.tokens_after += refined.tokens_after;
    }
    r.answer_retention = r.answer_strips_kept as f64 / r.answer_strips.max(1) as f64;
    r.question_retention = with_kept as f64 / r.questions.max(1) as f64;
    r.mean_question_retention = share_sum / r.questions.max(1) as f64;
    r.token_reduction = 1.0 - r.tokens_after as f64 / r.tokens_before.max(1) as f64;
    log(&format!(
        "refinement: {} questions, {} of {} answer-bearing strips kept ({:.1} %), tokens {} -> {} ({:.1} % fewer)",
        r.questions,
        r.answer_strips_kept,
        r.answer_strips,
        r.answer_retention * 100.0,
        r.tokens_before,
        r.tokens_after,
        r.token_reduction * 100.0
    ));
    Ok(r)
}

/// Mean LLM tokens per answer by stage, over every answer (an answer that spent nothing in a stage counts 0 there).
fn mean_stage_tokens(answers: &[AnswerRecord]) -> BTreeMap<String, f64> {
    let n = answers.len().max(1) as f64;
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for a in answers {
        for (stage, t) in &a.stage_tokens {
            *out.entry(stage.clone()).or_default() += *t as f64 / n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_bucketed_by_how_often_their_answer_is_mentioned() {
        let buckets: Vec<&str> = (1..=8).map(mentions_bucket).collect();
        assert_eq!(buckets, ["1", "2", "3-5", "3-5", "3-5", "6+", "6+", "6+"]);
    }

    #[test]
    fn stage_tokens_are_averaged_over_every_answer() {
        let answer = |stages: &[(&str, u64)]| AnswerRecord {
            stage_tokens: stages.iter().map(|(s, t)| ((*s).to_owned(), *t)).collect(),
            ..AnswerRecord::default()
        };
        let answers = [
            answer(&[("extract", 1200), ("generate", 300)]),
            answer(&[("extract", 800), ("generate", 200), ("judge", 400)]),
        ];
        let mean = mean_stage_tokens(&answers);
        let expect: BTreeMap<String, f64> =
            [("extract", 1000.0), ("generate", 250.0), ("judge", 200.0)].map(|(s, t)| (s.to_owned(), t)).into();
        assert_eq!(mean, expect, "a stage an answer skipped counts 0 for it");
        assert!(mean_stage_tokens(&[]).is_empty());

        let mut report = QaEvalReport::default();
        report.experiments.push(ExperimentReport {
            experiment: "corrective".into(),
            questions: 2,
            stage_tokens: mean,
            ..ExperimentReport::default()
        });
        let table = qa_table(&report);
        assert!(
            table.contains("corrective           tokens per question by stage: extract 1000, generate 250, judge 200"),
            "{table}"
        );
    }

    #[test]
    fn versus_counts_the_pairs_and_says_how_sure_the_difference_is() {
        let report = |name: &str, right: &[bool]| ExperimentReport {
            experiment: name.into(),
            questions: right.len(),
            answers: right
                .iter()
                .enumerate()
                .map(|(i, &correct)| AnswerRecord {
                    id: format!("q{i}"),
                    correct,
                    article_in_context: true,
                    answer_in_context: Some(true),
                    ..AnswerRecord::default()
                })
                .collect(),
            ..ExperimentReport::default()
        };
        // 10 questions: both right on 5, neither on 1, only the new one on 4.
        let base = report("baseline", &[true, true, true, true, true, false, false, false, false, false]);
        let new = report("answer_first", &[true, true, true, true, true, false, true, true, true, true]);
        let line = versus(&base, &new);
        let paired = crate::paired::compare(10, 0, 4);
        assert!(
            line.contains("both right 5, neither 1, only baseline 0, only answer_first 4 (difference +0.400, 95 % CI")
                && line.contains(&paired.summary())
                && line.contains("McNemar p 0.125"),
            "{line}"
        );
        // A question the other experiment did not answer is not paired.
        let mut short = new.clone();
        short.answers.truncate(6);
        assert!(versus(&base, &short).contains("only answer_first 0 (difference +0.000"), "{}", versus(&base, &short));
    }

    fn options(experiments: &[&str]) -> QaEvalOptions {
        QaEvalOptions {
            dataset: PathBuf::from("qa"),
            experiments: experiments.iter().map(|e| (*e).to_owned()).collect(),
            config: Config::default(),
            limit: None,
            skip: 0,
            cache_dir: PathBuf::from("cache"),
            reindex: false,
            refinement_check: false,
            local_semester: None,
        }
    }

    #[test]
    fn every_experiment_is_checked_before_any_runs() {
        let opts = options(&["baseline", "corrective", "answer_first", "nope", "no_retrieval"]);
        let err = check_experiments(&opts, false).unwrap_err();
        assert_eq!(err.kind(), ragtune::core::ErrorKind::InvalidInput);
        let text = err.to_string();
        assert!(text.starts_with("3 of the 5 experiments requested cannot run, so none was started:\n"), "{text}");
        for line in [
            "\n  answer_first: needs an LLM, and this run has none",
            "\n  nope: unknown experiment `nope`; available: no_retrieval, baseline, sentences",
            "\n  no_retrieval: needs an LLM, and this run has none",
            "ask only for the experiments that answer without an LLM: baseline, sentences, refined, corrective",
        ] {
            assert!(text.contains(line), "{line:?} in {text}");
        }
        assert!(!text.contains("  baseline:") && !text.contains("  corrective:"), "{text}");
        // With an LLM only the unknown name is left, and no LLM hint.
        let text = check_experiments(&opts, true).unwrap_err().to_string();
        assert!(text.starts_with("1 of the 5") && text.contains("nope") && !text.contains("--llm-url"), "{text}");
        check_experiments(&options(&["baseline", "refined", "corrective"]), false).unwrap();
        // A knowledge split needs the web for the experiments that fall back to it.
        let mut split = options(&["baseline", "corrective", "answer_first"]);
        split.local_semester = Some("S08".into());
        let text = check_experiments(&split, true).unwrap_err().to_string();
        assert!(text.starts_with("2 of the 3"), "{text}");
        assert!(
            text.contains("\n  corrective: falls back to the web search") && text.contains("--web-corpus"),
            "{text}"
        );
        split.config.web.enabled = true;
        check_experiments(&split, true).unwrap();
    }

    #[tokio::test]
    async fn a_failed_experiment_keeps_what_it_measured_and_the_others_still_run() {
        let names: Vec<String> = ["baseline", "judge", "refined"].map(String::from).to_vec();
        let mut log = Vec::new();
        let reports = run_experiments(&names, &mut |line| log.push(line.to_owned()), async |exp, r, _| {
            // Two questions answered, then the judge experiment's third fails.
            for id in ["q1", "q2"] {
                r.questions += 1;
                r.answers.push(AnswerRecord { id: id.into(), correct: true, ..AnswerRecord::default() });
            }
            if exp == "judge" {
                return Err(Error::unavailable("the judge's model went away"));
            }
            Ok(())
        })
        .await;
        let summary: Vec<(&str, usize, Option<&str>)> =
            reports.iter().map(|r| (r.experiment.as_str(), r.answers.len(), r.error.as_deref())).collect();
        assert_eq!(
            summary,
            [("baseline", 2, None), ("judge", 2, Some("the judge's model went away")), ("refined", 2, None)]
        );
        assert!(log.contains(&"experiment judge failed after 2 questions: the judge's model went away".to_owned()));
        let report = QaEvalReport { experiments: reports, ..QaEvalReport::default() };
        assert_eq!(report.failed_experiments().collect::<Vec<_>>(), [("judge", "the judge's model went away")]);
        let table = qa_table(&report);
        assert!(table.contains("judge                FAILED (its numbers cover only the questions before the error): the judge's model went away"), "{table}");
        // The error is in the JSON report; a finished experiment has none.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["experiments"][1]["error"], "the judge's model went away");
        assert!(json["experiments"][0].get("error").is_none());
    }

    #[test]
    fn every_experiment_applies_and_unknown_ones_are_refused() {
        for e in EXPERIMENTS {
            let mut cfg = Config::default();
            apply_experiment(e, &mut cfg).unwrap();
            cfg.validate().unwrap();
        }
        let mut cfg = Config::default();
        apply_experiment("corrective", &mut cfg).unwrap();
        assert!(cfg.crag.enabled && cfg.pipeline.judge && cfg.pipeline.retry);
        apply_experiment("baseline", &mut cfg).unwrap();
        assert!(!cfg.crag.enabled && !cfg.pipeline.judge && !cfg.pipeline.retry);
        assert_eq!(cfg.pipeline.context, ContextMode::Full);
        apply_experiment("answer_first", &mut cfg).unwrap();
        assert!(
            cfg.crag.enabled
                && cfg.pipeline.judge
                && cfg.pipeline.retry
                && cfg.retry.recheck_no_info == NoInfoRecheck::UnlessIncorrect
        );
        assert_eq!(cfg.pipeline.reread_context(), ContextMode::Refine);
        assert!(!cfg.crag.expand_on_ambiguous);
        assert_eq!(cfg.pipeline.context, ContextMode::Full);
        assert_eq!(cfg.pipeline.retry_context(), ContextMode::Extract);
        assert_eq!(cfg.retry.max_retries, 1);
        let err = apply_experiment("nope", &mut cfg).unwrap_err();
        assert!(err.to_string().contains("baseline"), "{err}");
    }
}
