//! The faithfulness judge: is each statement of a generated answer supported by the passages it was generated from?
//!
//! An answer is split into statements ([`split_statements`]), and each statement gets a [`Support`] verdict.
//! With an LLM configured, one call judges every statement at once with the judge prompt
//! (`ragtune_llm::prompts::JUDGE`, passed in by whoever wires the judge), following the rules of docs/pipeline.md
//! ("Judge"): only the context counts, no outside knowledge, and when unsure the verdict is `UNSUPPORTED`. Without an
//! LLM, or when the LLM fails or answers nonsense even after one JSON repair, an LLM-free judge scores lexical overlap
//! between each statement and its best passage, optionally blended with embedding similarity. Every result says which
//! judge produced it ([`Faithfulness::label`]) and why the LLM was not used, so an LLM-free verdict is never mistaken
//! for an LLM one.
//!
//! Honest admissions such as "the documents don't contain this information" ([`is_no_info`]) are supported by
//! definition and never sent to the LLM: saying that the context lacks something is faithful to it.
//!
//! ```
//! use ragtune_evaluators::faithfulness::{is_no_info, split_statements};
//!
//! let statements = split_statements("Scurvy is caused by a lack of vitamin C [1]. Dr. Lind tested citrus [2, 3].");
//! assert_eq!(statements, ["Scurvy is caused by a lack of vitamin C.", "Dr. Lind tested citrus."]);
//! assert!(is_no_info("The documents do not contain information about Python."));
//! assert!(!is_no_info("Python does not contain a switch statement."));
//! ```
//!
//! Over 1,000 lines with its unit tests (about 500 lines of them): the code itself is about 850 lines.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use ragtune_core::prompt::{JsonAnswer, generate_json, raw_output};
use ragtune_core::text::{SUPPORT_THRESHOLD, content_tokens, token_overlap};
use ragtune_core::{
    Cost, Ctx, Embedder, Error, ErrorKind, Llm, LlmRequest, LlmResponse, Prompt, Result, TextRole, TraceEvent,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::text::{self, cosine};

/// How far the context supports a statement (or a whole answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Support {
    /// The statement is stated in the context.
    Supported,
    /// Only part of the statement is in the context.
    PartiallySupported,
    /// The statement is not in the context (a hallucination, as far as the context goes).
    Unsupported,
}

impl Support {
    /// The verdict as the judge prompt writes it (`SUPPORTED`, `PARTIALLY_SUPPORTED`, `UNSUPPORTED`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Supported => "SUPPORTED",
            Self::PartiallySupported => "PARTIALLY_SUPPORTED",
            Self::Unsupported => "UNSUPPORTED",
        }
    }

    /// How much support this is, for keeping the most conservative of conflicting verdicts.
    fn strength(self) -> u8 {
        match self {
            Self::Supported => 2,
            Self::PartiallySupported => 1,
            Self::Unsupported => 0,
        }
    }

    /// Reads a verdict the way small models write it: any case, with spaces or hyphens for underscores.
    fn parse(text: &str) -> Option<Self> {
        let norm: String =
            text.trim().chars().map(|c| if c == ' ' || c == '-' { '_' } else { c.to_ascii_uppercase() }).collect();
        match norm.as_str() {
            "SUPPORTED" => Some(Self::Supported),
            "PARTIALLY_SUPPORTED" | "PARTIAL" | "PARTIALLY" => Some(Self::PartiallySupported),
            "UNSUPPORTED" | "NOT_SUPPORTED" => Some(Self::Unsupported),
            _ => None,
        }
    }
}

/// Which judge produced a [`Faithfulness`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JudgeMethod {
    /// The LLM judge.
    Llm,
    /// The LLM-free fallback: lexical overlap only.
    Lexical,
    /// The LLM-free fallback: lexical overlap blended with embedding similarity.
    LexicalEmbedding,
}

impl JudgeMethod {
    /// A label that says plainly whether an LLM judged: `llm`, `llm-free (lexical)` or
    /// `llm-free (lexical+embedding)`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Llm => "llm",
            Self::Lexical => "llm-free (lexical)",
            Self::LexicalEmbedding => "llm-free (lexical+embedding)",
        }
    }
}

/// The verdict on one statement of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatementVerdict {
    /// The statement, citation markers removed.
    pub text: String,
    /// The verdict.
    pub support: Support,
    /// The LLM-free judge's support score (0..=1); `None` when the LLM judged or the statement is an honest
    /// no-info admission.
    pub score: Option<f32>,
    /// The 1-based index of the passage that supports the statement best, for the LLM-free judge.
    pub evidence: Option<usize>,
}

/// The faithfulness of an answer to its passages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Faithfulness {
    /// One verdict per statement, in answer order.
    pub statements: Vec<StatementVerdict>,
    /// `Supported` when every statement is supported (or there are none), `Unsupported` when no statement is
    /// supported or partially supported, else `PartiallySupported`.
    pub overall: Support,
    /// The share of statements that are supported (0 when there are none).
    pub supported_share: f32,
    /// The share of statements that are unsupported (0 when there are none); partial support counts in neither
    /// share.
    pub unsupported_share: f32,
    /// Which judge produced the verdicts.
    pub method: JudgeMethod,
    /// Why the LLM was not used (`not configured`, `failed: ...`, `invalid output: ...`); `None` when it was, or
    /// when it did not need to be.
    pub fallback_reason: Option<String>,
    /// The judge prompt's `id@version` when the LLM judged.
    pub prompt: Option<String>,
    /// What judging cost: the LLM's tokens and calls (repair included), or the embedder's estimated cost.
    pub cost: Cost,
    /// Things worth knowing about how the verdicts came about (statements the LLM left out, truncated context,
    /// an embedder failure).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Faithfulness {
    /// A label that says plainly whether an LLM judged: `llm`, `llm-free (lexical)` or
    /// `llm-free (lexical+embedding)`.
    #[must_use]
    pub fn label(&self) -> &'static str {
        self.method.label()
    }
}

/// Settings of the [`FaithfulnessJudge`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JudgeConfig {
    /// LLM-free judge: a support score at or above this is `Supported`.
    pub supported_threshold: f32,
    /// LLM-free judge: a support score at or above this (and below `supported_threshold`) is `PartiallySupported`.
    pub partial_threshold: f32,
    /// LLM-free judge with an embedder: the weight of embedding similarity against lexical overlap (0..=1).
    pub embedding_weight: f32,
    /// The most characters of context put in the judge prompt; longer contexts are cut.
    pub max_context_chars: usize,
    /// With an LLM configured: judge without it first, and keep that verdict when it finds every statement
    /// `Supported`; the LLM is asked only when the LLM-free judge is unsure. `false` asks the LLM every time.
    pub llm_only_when_unsure: bool,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        Self {
            supported_threshold: SUPPORT_THRESHOLD,
            partial_threshold: 0.4,
            embedding_weight: 0.5,
            max_context_chars: 6000,
            llm_only_when_unsure: true,
        }
    }
}

impl JudgeConfig {
    /// Checks that thresholds and the weight lie in `0..=1`, that the partial threshold is at most the supported
    /// one, and that some context fits in the prompt.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the offending field.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("supported_threshold", self.supported_threshold),
            ("partial_threshold", self.partial_threshold),
            ("embedding_weight", self.embedding_weight),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(Error::invalid_input(format!("judge config: {name} must lie in 0..=1, not {value}")));
            }
        }
        if self.partial_threshold > self.supported_threshold {
            return Err(Error::invalid_input(format!(
                "judge config: partial_threshold ({}) must not exceed supported_threshold ({})",
                self.partial_threshold, self.supported_threshold
            )));
        }
        if self.max_context_chars == 0 {
            return Err(Error::invalid_input("judge config: max_context_chars must be at least 1"));
        }
        Ok(())
    }
}

/// Splits an answer into statements: its sentences ([`text::sentences`]: Unicode sentence boundaries, not broken
/// after common abbreviations or initials), with citation markers like `[1]`, `[1, 2]` or `[Doc 3]` removed from
/// the text, list bullets and whitespace trimmed, and pieces without a letter (empty, pure citations, list
/// numbers) dropped.
#[must_use]
pub fn split_statements(answer: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sentence in text::sentences(answer) {
        push_statement(&mut out, sentence);
    }
    out
}

fn push_statement(out: &mut Vec<String>, piece: &str) {
    let cleaned = remove_citations(piece);
    let mut text = normalize_spaces(&cleaned);
    for bullet in ["- ", "* ", "• ", "– "] {
        if let Some(rest) = text.strip_prefix(bullet) {
            text = rest.trim_start().to_owned();
        }
    }
    if text.chars().any(char::is_alphabetic) {
        out.push(text);
    }
}

/// Whether `statement` is a bare yes or no ("Yes.", "no", "Yes!"), which says nothing checkable by itself.
fn is_polarity(statement: &str) -> bool {
    let word = polarity_word(statement);
    word.eq_ignore_ascii_case("yes") || word.eq_ignore_ascii_case("no")
}

/// The statement without surrounding spaces and trailing punctuation.
fn polarity_word(statement: &str) -> &str {
    statement.trim().trim_end_matches(|c: char| c.is_ascii_punctuation()).trim()
}

/// The claim a bare yes or no makes: the statement with the question it answers ("Yes (the answer to: Is Ottawa
/// the capital of Canada?)"), so that both judges check what the question asks about instead of scoring a lone
/// "Yes" as sharing nothing with the context. `None` for any other statement, or without a question.
fn polarity_claim(statement: &str, question: &str) -> Option<String> {
    let question = question.trim();
    (is_polarity(statement) && !question.is_empty())
        .then(|| format!("{} (the answer to: {question})", polarity_word(statement)))
}

/// Removes `[1]`, `[1, 2]`, `[1-3]`, `[Doc 2]`, `[Source 1]` and `[Passage 4]` markers.
fn remove_citations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find(']') {
            Some(close) if is_citation(&after[..close]) => rest = &after[close + 1..],
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_citation(inner: &str) -> bool {
    let lower = inner.trim().to_lowercase();
    let mut body = lower.as_str();
    for prefix in ["document", "doc", "source", "passage"] {
        if let Some(r) = body.strip_prefix(prefix) {
            body = r.trim_start_matches(['.', ' ']);
            break;
        }
    }
    body.chars().any(|c| c.is_ascii_digit())
        && body.chars().all(|c| c.is_ascii_digit() || matches!(c, ',' | ' ' | '-' | '–' | ';'))
}

/// Collapses whitespace runs to one space and removes the space a removed citation leaves before punctuation.
fn normalize_spaces(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::with_capacity(joined.len());
    for c in joined.chars() {
        if matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | ')') && out.ends_with(' ') {
            out.pop();
        }
        out.push(c);
    }
    out
}

/// What an honest admission says about the documents, after "the documents ..." and the like.
const NO_INFO_VERBS: &[&str] = &["contain", "mention", "include", "provide", "cover", "discuss", "address", "say"];

/// Negations that precede [`NO_INFO_VERBS`].
const NEGATIONS: &[&str] = &["don't", "do not", "doesn't", "does not", "didn't", "did not"];

/// Words that show a negation is about the context rather than about the world.
const CONTEXT_WORDS: &[&str] =
    &["document", "context", "source", "passage", "provided text", "provided information", "retrieved", "given text"];

/// Phrases that admit missing information on their own.
const NO_INFO_PHRASES: &[&str] = &[
    "not covered in the",
    "not covered by the",
    "no relevant information",
    "no information about",
    "no information on",
    "there is no information",
    "outside the scope",
    "beyond the scope",
    "i couldn't find",
    "i could not find",
    "i can't find",
    "i cannot find",
    "i was unable to find",
    "i was not able to find",
    "not enough information",
    "insufficient information",
];

/// Whether `text` honestly admits that the documents lack the information ("the documents don't contain this
/// information", "not covered in the documents", "no relevant information found", "outside the scope",
/// "I couldn't find"), in any case, with straight or curly apostrophes and with "do not"/"does not".
///
/// A negation counts only when the text is about the documents or context, so a factual statement such as
/// "water does not contain carbon" is not an admission.
#[must_use]
pub fn is_no_info(text: &str) -> bool {
    let lower = text.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'");
    if NO_INFO_PHRASES.iter().any(|p| lower.contains(p)) {
        return true;
    }
    let about_context = CONTEXT_WORDS.iter().any(|w| lower.contains(w));
    about_context && NEGATIONS.iter().any(|n| NO_INFO_VERBS.iter().any(|v| lower.contains(&format!("{n} {v}"))))
}

/// Judges the faithfulness of answers to their passages, with an LLM when one is configured and an LLM-free
/// lexical (optionally embedding-assisted) judge otherwise or as its fallback.
#[derive(Debug, Clone)]
pub struct FaithfulnessJudge {
    config: JudgeConfig,
    llm: Option<LlmJudge>,
    embedder: Option<Arc<dyn Embedder>>,
}

#[derive(Debug, Clone)]
struct LlmJudge {
    llm: Arc<dyn Llm>,
    prompt: Prompt,
    repair: Prompt,
}

/// One judged statement's support, LLM-free score and evidence passage; `None` when the judge left it out.
type Judged = Option<(Support, Option<f32>, Option<usize>)>;

/// What one judging path produced, before shares and the overall verdict are computed.
struct Verdicts {
    supports: Vec<Judged>,
    method: JudgeMethod,
    prompt: Option<String>,
    cost: Cost,
}

impl FaithfulnessJudge {
    /// An LLM-free judge (lexical overlap) with `config`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when the config is invalid ([`JudgeConfig::validate`]).
    pub fn new(config: JudgeConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config, llm: None, embedder: None })
    }

    /// Judges with `llm` and the judge `prompt` (placeholders `context` and `statements`, output
    /// `{"verdicts": [{"statement": n, "verdict": "SUPPORTED"}]}`), repairing malformed JSON once with `repair`.
    #[must_use]
    pub fn with_llm(mut self, llm: Arc<dyn Llm>, prompt: Prompt, repair: Prompt) -> Self {
        self.llm = Some(LlmJudge { llm, prompt, repair });
        self
    }

    /// Blends embedding similarity into the LLM-free judge.
    #[must_use]
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &JudgeConfig {
        &self.config
    }

    /// Judges `answer` against `passages`, the context passages given to the generator in citation order (so that
    /// evidence index `1` is the passage the answer cites as `[1]`).
    ///
    /// Honest no-info statements are supported without judging. When the LLM fails or its output stays invalid
    /// after one repair, the LLM-free judge answers instead and `fallback_reason` says why. Statements the LLM
    /// leaves out count as unsupported, with a note. An answer without statements is supported, with shares of 0,
    /// and costs nothing.
    ///
    /// # Errors
    /// Only [`ErrorKind::Cancelled`] or [`ErrorKind::DeadlineExceeded`] from `ctx`; every other failure degrades.
    pub async fn judge(&self, ctx: &Ctx, question: &str, answer: &str, passages: &[String]) -> Result<Faithfulness> {
        ctx.check()?;
        let texts = split_statements(answer);
        let mut notes = Vec::new();
        let no_info: Vec<bool> = texts.iter().map(|t| is_no_info(t)).collect();
        let to_judge: Vec<usize> = (0..texts.len()).filter(|&i| !no_info[i]).collect();
        let admissions = texts.len() - to_judge.len();
        if admissions > 0 {
            notes.push(format!("{admissions} honest no-info statement(s) supported without judging"));
        }
        let configured = if self.llm.is_some() {
            JudgeMethod::Llm
        } else if self.embedder.is_some() {
            JudgeMethod::LexicalEmbedding
        } else {
            JudgeMethod::Lexical
        };

        let mut fallback_reason = self.llm.is_none().then(|| "not configured".to_owned());
        let verdicts = if to_judge.is_empty() {
            if texts.is_empty() {
                notes.push("the answer has no statements to judge".to_owned());
            }
            Verdicts { supports: Vec::new(), method: configured, prompt: None, cost: Cost::ZERO }
        } else {
            let statements: Vec<&str> = to_judge.iter().map(|&i| texts[i].as_str()).collect();
            self.judge_statements(ctx, question, &statements, passages, &mut notes, &mut fallback_reason).await?
        };

        let mut judged = verdicts.supports.into_iter();
        let mut statements = Vec::with_capacity(texts.len());
        for (i, text) in texts.into_iter().enumerate() {
            let (support, score, evidence) = if no_info[i] {
                (Support::Supported, None, None)
            } else {
                judged.next().flatten().unwrap_or((Support::Unsupported, None, None))
            };
            statements.push(StatementVerdict { text, support, score, evidence });
        }
        let result = summarise(statements, verdicts.method, fallback_reason, verdicts.prompt, verdicts.cost, notes);
        let mut event = TraceEvent::new("judge", result.label())
            .detail("overall", result.overall.as_str())
            .detail("statements", result.statements.len())
            .detail("unsupported_share", f64::from(result.unsupported_share))
            .cost(result.cost);
        if let Some(reason) = &result.fallback_reason {
            event = event.detail("fallback_reason", reason.clone());
        }
        ctx.trace(event);
        Ok(result)
    }

    /// The verdicts of `texts` (the answer's statements that are not honest no-info admissions): the LLM's when
    /// it is configured and answers, the LLM-free judge's otherwise (or first, when the LLM is asked only where that
    /// judge is unsure); `fallback_reason` says why the LLM's verdicts are not the ones returned.
    async fn judge_statements(
        &self,
        ctx: &Ctx,
        question: &str,
        texts: &[&str],
        passages: &[String],
        notes: &mut Vec<String>,
        fallback_reason: &mut Option<String>,
    ) -> Result<Verdicts> {
        // A bare "Yes." or "No." claims what the question asks: it is judged as that claim. The LLM reads it as
        // "Yes (the answer to: …)"; the LLM-free judge matches the question's own words, since the wrapper's
        // "answer" is in no passage and would count against every bare yes or no.
        let (claims, lexical_claims): (Vec<String>, Vec<String>) = texts
            .iter()
            .map(|&t| match polarity_claim(t, question) {
                Some(claim) => (claim, question.trim().to_owned()),
                None => (t.to_owned(), t.to_owned()),
            })
            .unzip();
        let lexical_statements: Vec<&str> = lexical_claims.iter().map(String::as_str).collect();
        let polar = texts.iter().filter(|t| is_polarity(t)).count();
        if polar > 0 && !question.trim().is_empty() {
            notes.push(format!("{polar} bare yes/no statement(s) judged as the question's claim"));
        }
        let statements: Vec<&str> = claims.iter().map(String::as_str).collect();
        // The cheap judge first when the LLM is asked only where it is unsure.
        let mut cheap = None;
        if self.llm.is_some() && self.config.llm_only_when_unsure {
            let mut cheap_notes = Vec::new();
            let v = self.judge_without_llm(ctx, &lexical_statements, passages, &mut cheap_notes).await?;
            let all_supported = v.supports.iter().all(|s| matches!(s, Some((Support::Supported, _, _))));
            if all_supported {
                notes.append(&mut cheap_notes);
                notes
                    .push("the LLM judge was not asked: the LLM-free judge found every statement supported".to_owned());
            }
            cheap = Some((v, cheap_notes, all_supported));
        }
        // The verdicts once settled: the cheap judge's when it is sure or the LLM fails, else the LLM's.
        let mut settled = None;
        let mut spent = Cost::ZERO;
        match (&self.llm, cheap) {
            (Some(_), Some((v, _, true))) => settled = Some(v),
            (Some(judge), cheap) => {
                match self.judge_with_llm(ctx, judge, question, &statements, passages, notes).await {
                    Ok(mut v) => {
                        v.cost += cheap.map_or(Cost::ZERO, |(c, _, _)| c.cost);
                        settled = Some(v);
                    }
                    Err((reason, cost)) => {
                        // A cancelled request stops here; any other failure degrades to the LLM-free judge.
                        ctx.check()?;
                        *fallback_reason = Some(reason);
                        spent = cost;
                        if let Some((mut v, cheap_notes, _)) = cheap {
                            notes.extend(cheap_notes);
                            v.cost += spent;
                            settled = Some(v);
                        }
                    }
                }
            }
            (None, _) => {}
        }
        Ok(match settled {
            Some(v) => v,
            None => {
                let mut v = self.judge_without_llm(ctx, &lexical_statements, passages, notes).await?;
                v.cost += spent;
                v
            }
        })
    }

    /// Which of `claims` each named group of passages supports, asked of the LLM one group at a time (the judge
    /// prompt with the group as its context): triangulation's LLM support check, where a group is one independent
    /// source (named by its domain).
    ///
    /// Returns `None` when no LLM is configured. A group whose judging fails (or whose output stays invalid after
    /// one repair) is `None` in [`SourceSupport::supported`], with the reason in the notes: the caller decides how
    /// to check it instead. Only `SUPPORTED` counts as support.
    ///
    /// # Errors
    /// Only [`ErrorKind::Cancelled`] or [`ErrorKind::DeadlineExceeded`] from `ctx`.
    pub async fn support_by_source(
        &self,
        ctx: &Ctx,
        claims: &[String],
        groups: &[(String, Vec<String>)],
    ) -> Result<Option<SourceSupport>> {
        let Some(judge) = &self.llm else { return Ok(None) };
        let statements: Vec<&str> = claims.iter().map(String::as_str).collect();
        let mut out =
            SourceSupport { supported: Vec::with_capacity(groups.len()), cost: Cost::ZERO, notes: Vec::new() };
        for (name, passages) in groups {
            ctx.check()?;
            let mut notes = Vec::new();
            match self.judge_with_llm(ctx, judge, "", &statements, passages, &mut notes).await {
                Ok(v) => {
                    out.cost += v.cost;
                    let row = v.supports.iter().map(|s| matches!(s, Some((Support::Supported, _, _)))).collect();
                    out.supported.push(Some(row));
                }
                Err((reason, cost)) => {
                    ctx.check()?;
                    out.cost += cost;
                    out.notes.push(format!("{name}: the LLM support check {reason}"));
                    out.supported.push(None);
                }
            }
            out.notes.extend(notes.into_iter().map(|n| format!("{name}: {n}")));
        }
        Ok(Some(out))
    }

    /// Asks the LLM for verdicts on `statements`; on failure returns the fallback reason and what was spent.
    async fn judge_with_llm(
        &self,
        ctx: &Ctx,
        judge: &LlmJudge,
        question: &str,
        statements: &[&str],
        passages: &[String],
        notes: &mut Vec<String>,
    ) -> std::result::Result<Verdicts, (String, Cost)> {
        let (context, truncated) = render_context(passages, self.config.max_context_chars);
        if truncated {
            notes.push(format!("the context was cut to {} characters for the judge", self.config.max_context_chars));
        }
        let numbered: String = statements.iter().enumerate().map(|(i, s)| format!("{}. {s}\n", i + 1)).collect();
        // Rendering inserts the texts verbatim (braces in code or templates included).
        let request = judge
            .prompt
            .render(&[("context", &context), ("statements", numbered.trim_end()), ("question", question)])
            .map_err(|e| (format!("failed: {}", e.chain()), Cost::ZERO))?;
        // `generate_json` reports no cost when it fails, so the calls are metered here to charge every token spent.
        let metered = Metered { inner: judge.llm.as_ref(), spent: Mutex::new(Cost::ZERO) };
        let result = generate_json(&metered, ctx, request, &judge.repair).await;
        let spent = metered.spent();
        let answer: JsonAnswer = match result {
            Ok(a) => a,
            Err(e) => {
                let reason = if e.kind() == ErrorKind::MalformedOutput {
                    format!("invalid output: {}", e.chain())
                } else {
                    format!("failed: {}", e.chain())
                };
                return Err((reason, spent));
            }
        };
        if answer.repaired {
            notes.push("the judge's output needed one JSON repair".to_owned());
        }
        let supports = parse_verdicts(&answer.value, statements.len(), notes)
            .map_err(|e| (format!("invalid output: {e}"), spent))?;
        let missing = supports.iter().filter(|s| s.is_none()).count();
        if missing > 0 {
            notes.push(format!("the LLM left out {missing} statement(s); they count as unsupported"));
        }
        let supports = supports.into_iter().map(|s| s.map(|s| (s, None, None))).collect();
        Ok(Verdicts { supports, method: JudgeMethod::Llm, prompt: Some(judge.prompt.tag()), cost: spent })
    }

    /// Scores `statements` by lexical overlap with their best passage, blended with embedding similarity when an
    /// embedder is configured and works.
    async fn judge_without_llm(
        &self,
        ctx: &Ctx,
        statements: &[&str],
        passages: &[String],
        notes: &mut Vec<String>,
    ) -> Result<Verdicts> {
        let mut method = JudgeMethod::Lexical;
        let mut cost = Cost::ZERO;
        let mut similarities: Option<Vec<Vec<f32>>> = None;
        if let Some(embedder) = &self.embedder
            && !passages.is_empty()
        {
            match embed_similarities(ctx, embedder.as_ref(), statements, passages).await {
                Ok(s) => {
                    similarities = Some(s);
                    method = JudgeMethod::LexicalEmbedding;
                    let model = embedder.cost_model();
                    cost = model.estimate(statements.len()) + model.estimate(passages.len());
                }
                Err(e) => {
                    ctx.check()?;
                    notes.push(format!("the embedder failed ({}); lexical overlap only", e.chain()));
                }
            }
        }
        let passage_tokens: Vec<Vec<String>> = passages.iter().map(|p| content_tokens(p)).collect();
        let weight = if similarities.is_some() { self.config.embedding_weight } else { 0.0 };
        let mut no_content = 0;
        let supports = statements
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let tokens = content_tokens(s);
                if tokens.is_empty() {
                    no_content += 1;
                }
                let mut best: Option<(f32, usize)> = None;
                for (j, pt) in passage_tokens.iter().enumerate() {
                    let lexical = token_overlap(&tokens, pt);
                    let cosine = similarities.as_ref().map_or(0.0, |sim| sim[i][j].max(0.0));
                    let score = (1.0 - weight) * lexical + weight * cosine;
                    // Strictly greater keeps the earliest passage on ties, so the evidence is deterministic.
                    if best.is_none_or(|(b, _)| score > b) {
                        best = Some((score, j));
                    }
                }
                // A statement that shares nothing with any passage has no evidence, rather than the first passage.
                let (score, evidence) = best.map_or((0.0, None), |(s, j)| (s, (s > 0.0).then_some(j + 1)));
                Some((self.support_of(score), Some(score), evidence))
            })
            .collect();
        if no_content > 0 {
            notes.push(format!("{no_content} statement(s) have no content words to check; they score 0"));
        }
        Ok(Verdicts { supports, method, prompt: None, cost })
    }

    fn support_of(&self, score: f32) -> Support {
        if score >= self.config.supported_threshold {
            Support::Supported
        } else if score >= self.config.partial_threshold {
            Support::PartiallySupported
        } else {
            Support::Unsupported
        }
    }
}

/// What [`FaithfulnessJudge::support_by_source`] found: per group of passages, which claims it supports (in the
/// claims' order), or `None` when the LLM could not say.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSupport {
    /// `supported[group][claim]`.
    pub supported: Vec<Option<Vec<bool>>>,
    /// What the LLM calls cost, failed ones included.
    pub cost: Cost,
    /// Failures and repairs, naming the group.
    pub notes: Vec<String>,
}

/// An [`Llm`] that adds up what its calls cost, failed structured outputs included.
#[derive(Debug)]
struct Metered<'a> {
    inner: &'a dyn Llm,
    spent: Mutex<Cost>,
}

impl Metered<'_> {
    fn spent(&self) -> Cost {
        *self.spent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Llm for Metered<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn generate(&self, ctx: &Ctx, requests: &[LlmRequest]) -> Result<Vec<LlmResponse>> {
        let result = self.inner.generate(ctx, requests).await;
        let cost = match &result {
            Ok(responses) => responses.iter().fold(Cost::ZERO, |acc, r| acc + r.cost),
            // A malformed answer that the client refused still cost its tokens; the raw output carries them.
            Err(e) => raw_output(e).map_or(Cost::ZERO, |r| r.cost),
        };
        *self.spent.lock().unwrap_or_else(PoisonError::into_inner) += cost;
        result
    }
}

/// Shares, overall verdict and the final value.
fn summarise(
    statements: Vec<StatementVerdict>,
    method: JudgeMethod,
    fallback_reason: Option<String>,
    prompt: Option<String>,
    cost: Cost,
    notes: Vec<String>,
) -> Faithfulness {
    let n = statements.len();
    let count = |s: Support| statements.iter().filter(|v| v.support == s).count();
    let (supported, partial, unsupported) =
        (count(Support::Supported), count(Support::PartiallySupported), count(Support::Unsupported));
    let share = |k: usize| if n == 0 { 0.0 } else { k as f32 / n as f32 };
    let overall = if supported == n {
        Support::Supported
    } else if supported + partial == 0 {
        Support::Unsupported
    } else {
        Support::PartiallySupported
    };
    Faithfulness {
        supported_share: share(supported),
        unsupported_share: share(unsupported),
        statements,
        overall,
        method,
        fallback_reason,
        prompt,
        cost,
        notes,
    }
}

/// The passages as the judge sees them (`[1] text`, blank line between), cut to `max_chars` characters.
fn render_context(passages: &[String], max_chars: usize) -> (String, bool) {
    let full = if passages.is_empty() {
        "(no passages)".to_owned()
    } else {
        // Passages are untrusted: a `[n]` in one cannot pass for another numbered passage.
        passages
            .iter()
            .enumerate()
            .map(|(i, p)| format!("[{}] {}", i + 1, ragtune_core::prompt::neutralise(p.trim())))
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    match full.char_indices().nth(max_chars) {
        Some((cut, _)) => (full[..cut].to_owned(), true),
        None => (full, false),
    }
}

/// Reads `{"verdicts": [{"statement": n, "verdict": "..."}]}` into one optional verdict per statement.
///
/// Items with a number out of range or an unknown verdict are skipped with a note; when several items name the
/// same statement, the least supportive wins (the judge's rule: when unsure, unsupported).
fn parse_verdicts(
    value: &Value,
    n: usize,
    notes: &mut Vec<String>,
) -> std::result::Result<Vec<Option<Support>>, String> {
    let items = value.get("verdicts").and_then(Value::as_array).ok_or("no `verdicts` list in the judge's output")?;
    let mut out: Vec<Option<Support>> = vec![None; n];
    let mut skipped = 0;
    for item in items {
        let number = match item.get("statement") {
            Some(Value::Number(x)) => x.as_u64(),
            Some(Value::String(s)) => s.trim().trim_end_matches('.').parse::<u64>().ok(),
            _ => None,
        };
        let support = item.get("verdict").and_then(Value::as_str).and_then(Support::parse);
        let slot = number.and_then(|k| usize::try_from(k).ok()).filter(|&k| (1..=n).contains(&k));
        match (slot, support) {
            (Some(k), Some(s)) => {
                let cur = &mut out[k - 1];
                if cur.is_none_or(|c| s.strength() < c.strength()) {
                    *cur = Some(s);
                }
            }
            _ => skipped += 1,
        }
    }
    if out.iter().all(Option::is_none) {
        return Err(format!("no usable verdict among {} item(s)", items.len()));
    }
    if skipped > 0 {
        notes.push(format!("{skipped} verdict item(s) from the LLM were unusable and ignored"));
    }
    Ok(out)
}

/// Cosine similarity of every statement with every passage, embedding each side in one call.
async fn embed_similarities(
    ctx: &Ctx,
    embedder: &dyn Embedder,
    statements: &[&str],
    passages: &[String],
) -> Result<Vec<Vec<f32>>> {
    let passage_refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let s = embedder.embed(ctx, statements, TextRole::Query).await?;
    let p = embedder.embed(ctx, &passage_refs, TextRole::Passage).await?;
    if s.len() != statements.len() || p.len() != passages.len() {
        return Err(Error::permanent(format!(
            "the embedder returned {} + {} vectors for {} + {} texts",
            s.len(),
            p.len(),
            statements.len(),
            passages.len()
        )));
    }
    Ok(s.iter().map(|a| p.iter().map(|b| cosine(a, b)).collect()).collect())
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use ragtune_testkit::fakes::{HashEmbedder, ScriptedLlm};
    use serde_json::json;

    use super::*;

    fn judge_schema() -> Value {
        json!({"type": "object", "properties": {"verdicts": {"type": "array"}}, "required": ["verdicts"]})
    }

    /// The same placeholders and output schema as `ragtune_llm::prompts::JUDGE`.
    const JUDGE: Prompt = Prompt {
        id: "judge",
        version: 1,
        system: "You check statements. JSON only.",
        user: "Context:\n{{context}}\n\nStatements:\n{{statements}}\n\nJUDGE-REQUEST",
        schema: Some(judge_schema),
        temperature: 0.0,
        max_tokens: 256,
    };

    /// The same placeholders as `ragtune_llm::prompts::REPAIR_JSON`.
    const REPAIR: Prompt = Prompt {
        id: "repair_json",
        version: 1,
        system: "You fix JSON.",
        user: "REPAIR-REQUEST Schema: {{schema}}\n\nOutput:\n{{output}}",
        schema: None,
        temperature: 0.0,
        max_tokens: 256,
    };

    fn passages() -> Vec<String> {
        vec![
            "The Eiffel Tower is in Paris and was completed in 1889.".to_owned(),
            "Scurvy is caused by a lack of vitamin C in the diet.".to_owned(),
        ]
    }

    /// A judge that asks the LLM about every answer (the tests of the LLM path).
    fn llm_judge(llm: &Arc<ScriptedLlm>) -> FaithfulnessJudge {
        let llm: Arc<dyn Llm> = llm.clone();
        let config = JudgeConfig { llm_only_when_unsure: false, ..JudgeConfig::default() };
        FaithfulnessJudge::new(config).unwrap().with_llm(llm, JUDGE, REPAIR)
    }

    /// A judge with the default configuration: the LLM is asked only where the LLM-free judge is unsure.
    fn cascade_judge(llm: &Arc<ScriptedLlm>) -> FaithfulnessJudge {
        let llm: Arc<dyn Llm> = llm.clone();
        FaithfulnessJudge::new(JudgeConfig::default()).unwrap().with_llm(llm, JUDGE, REPAIR)
    }

    /// Renders a judgement as text, one line per statement, so that a whole result compares at once.
    fn render(f: &Faithfulness) -> String {
        let mut out = format!(
            "{} {} supported={:.2} unsupported={:.2}",
            f.label(),
            f.overall.as_str(),
            f.supported_share,
            f.unsupported_share
        );
        if let Some(p) = &f.prompt {
            let _ = write!(out, " prompt={p}");
        }
        if let Some(r) = &f.fallback_reason {
            let _ = write!(out, "\nfallback: {r}");
        }
        for (i, s) in f.statements.iter().enumerate() {
            let _ = write!(out, "\n{}. {}", i + 1, s.support.as_str());
            if let Some(score) = s.score {
                let _ = write!(out, " {score:.3}");
            }
            if let Some(e) = s.evidence {
                let _ = write!(out, " [{e}]");
            }
            let _ = write!(out, " {}", s.text);
        }
        for n in &f.notes {
            let _ = write!(out, "\nnote: {n}");
        }
        out
    }

    async fn check(judge: &FaithfulnessJudge, answer: &str, passages: &[String], expect: &str) -> Faithfulness {
        let f = judge.judge(&Ctx::new(), "question?", answer, passages).await.unwrap();
        assert_eq!(render(&f), expect, "answer: {answer:?}");
        f
    }

    fn last_user(request: &LlmRequest) -> &str {
        request.messages.last().map(|m| m.content.as_str()).unwrap_or_default()
    }

    #[test]
    fn statements_are_sentences_without_citations() {
        assert_eq!(
            split_statements("Scurvy is caused by a lack of vitamin C [1]. It was common on ships [1, 2]!"),
            ["Scurvy is caused by a lack of vitamin C.", "It was common on ships!"]
        );
        assert_eq!(
            split_statements(
                "Dr. Lind ran a trial in 1747. Citrus, e.g. lemons, cured it. J. Lind wrote it up [Doc 3]."
            ),
            ["Dr. Lind ran a trial in 1747.", "Citrus, e.g. lemons, cured it.", "J. Lind wrote it up."]
        );
        assert_eq!(
            split_statements("Version 2.0 shipped. [2]\n\n- It is fast.\n- It is small [3-4]"),
            ["Version 2.0 shipped.", "It is fast.", "It is small"]
        );
        assert_eq!(split_statements("1. Use let.\n2. Use const."), ["Use let.", "Use const."]);
        assert_eq!(split_statements("An array [like this] stays."), ["An array [like this] stays."]);
        assert!(split_statements("").is_empty());
        assert!(split_statements("  [1] [2, 3]. \n ").is_empty());
    }

    #[test]
    fn honest_admissions_are_recognised() {
        for text in [
            "The documents don't contain this information.",
            "The documents do not contain information about Python.",
            "The provided context doesn’t mention the release date.",
            "The document does not contain any figures.",
            "This is not covered in the documents.",
            "No relevant information found.",
            "That question is outside the scope of these sources.",
            "I couldn't find anything about it.",
            "I COULD NOT FIND an answer.",
        ] {
            assert!(is_no_info(text), "{text}");
        }
        for text in ["Water does not contain carbon.", "The documents describe scurvy.", "", "Outside, it rained."] {
            assert!(!is_no_info(text), "{text}");
        }
    }

    #[test]
    fn config_is_validated() {
        assert!(JudgeConfig::default().validate().is_ok());
        for bad in [
            JudgeConfig { supported_threshold: 1.5, ..JudgeConfig::default() },
            JudgeConfig { partial_threshold: f32::NAN, ..JudgeConfig::default() },
            JudgeConfig { partial_threshold: 0.8, ..JudgeConfig::default() },
            JudgeConfig { embedding_weight: -0.1, ..JudgeConfig::default() },
            JudgeConfig { max_context_chars: 0, ..JudgeConfig::default() },
        ] {
            let err = FaithfulnessJudge::new(bad.clone()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
        let parsed: JudgeConfig = serde_json::from_str(r#"{"supported_threshold": 0.8}"#).unwrap();
        assert_eq!(parsed.partial_threshold, 0.4);
        assert!(serde_json::from_str::<JudgeConfig>(r#"{"treshold": 0.8}"#).is_err());
    }

    #[tokio::test]
    async fn llm_verdicts_are_mapped_and_costed() {
        let reply = r#"{"verdicts": [{"statement": 1, "verdict": "SUPPORTED"}, {"statement": 2, "verdict": "PARTIALLY_SUPPORTED"}, {"statement": 3, "verdict": "UNSUPPORTED"}]}"#;
        let llm = Arc::new(ScriptedLlm::new(reply));
        let f = check(
            &llm_judge(&llm),
            "The Eiffel Tower is in Paris [1]. It was completed in 1900. Scurvy is caused by sugar [2].",
            &passages(),
            "llm PARTIALLY_SUPPORTED supported=0.33 unsupported=0.33 prompt=judge@1\n\
             1. SUPPORTED The Eiffel Tower is in Paris.\n\
             2. PARTIALLY_SUPPORTED It was completed in 1900.\n\
             3. UNSUPPORTED Scurvy is caused by sugar.",
        )
        .await;
        let requests = llm.requests();
        assert_eq!(requests.len(), 1);
        let user = last_user(&requests[0]);
        assert!(user.contains("[1] The Eiffel Tower is in Paris and was completed in 1889.\n\n[2] Scurvy"), "{user}");
        assert!(user.contains("1. The Eiffel Tower is in Paris.\n2. It was completed in 1900.\n3. Scurvy"), "{user}");
        assert_eq!(f.cost.calls, 1);
        assert!(f.cost.tokens > 0);
        assert!(f.fallback_reason.is_none());
        assert_eq!(serde_json::to_value(f.method).unwrap(), json!("llm"));
    }

    #[tokio::test]
    async fn by_default_the_llm_is_asked_only_where_the_llm_free_judge_is_unsure() {
        // Every statement stated in the context: the LLM-free verdict stands and the LLM is not called.
        let llm = Arc::new(ScriptedLlm::new(r#"{"verdicts": [{"statement": 1, "verdict": "UNSUPPORTED"}]}"#));
        let f = check(
            &cascade_judge(&llm),
            "The Eiffel Tower is in Paris [1]. Scurvy is caused by a lack of vitamin C [2].",
            &passages(),
            "llm-free (lexical) SUPPORTED supported=1.00 unsupported=0.00\n\
             1. SUPPORTED 1.000 [1] The Eiffel Tower is in Paris.\n\
             2. SUPPORTED 1.000 [2] Scurvy is caused by a lack of vitamin C.\n\
             note: the LLM judge was not asked: the LLM-free judge found every statement supported",
        )
        .await;
        assert_eq!((llm.calls(), f.cost.calls), (0, 0));
        assert!(f.fallback_reason.is_none(), "the LLM did not fail; it was not needed");

        // One statement the LLM-free judge cannot place: the LLM judges them all.
        let reply =
            r#"{"verdicts": [{"statement": 1, "verdict": "SUPPORTED"}, {"statement": 2, "verdict": "UNSUPPORTED"}]}"#;
        let llm = Arc::new(ScriptedLlm::new(reply));
        let f = check(
            &cascade_judge(&llm),
            "The Eiffel Tower is in Paris [1]. Scurvy is caused by sugar [2].",
            &passages(),
            "llm PARTIALLY_SUPPORTED supported=0.50 unsupported=0.50 prompt=judge@1\n\
             1. SUPPORTED The Eiffel Tower is in Paris.\n\
             2. UNSUPPORTED Scurvy is caused by sugar.",
        )
        .await;
        assert_eq!((llm.calls(), f.cost.calls), (1, 1));

        // The LLM asked and down: the LLM-free verdict already computed is the answer, with the reason.
        let llm = Arc::new(ScriptedLlm::down());
        let f = check(
            &cascade_judge(&llm),
            "Scurvy is caused by sugar.",
            &passages(),
            "llm-free (lexical) PARTIALLY_SUPPORTED supported=0.00 unsupported=0.00\n\
             fallback: failed: scripted LLM failed call 1 on purpose\n\
             1. PARTIALLY_SUPPORTED 0.667 [2] Scurvy is caused by sugar.",
        )
        .await;
        assert_eq!(llm.calls(), 1);
        assert_eq!(f.method, JudgeMethod::Lexical);
    }

    #[tokio::test]
    async fn statements_the_llm_left_out_are_unsupported() {
        let reply =
            r#"{"verdicts": [{"statement": "2", "verdict": "supported"}, {"statement": 9, "verdict": "SUPPORTED"}]}"#;
        let llm = Arc::new(ScriptedLlm::new(reply));
        check(
            &llm_judge(&llm),
            "The Eiffel Tower is in Paris. Scurvy is caused by a lack of vitamin C.",
            &passages(),
            "llm PARTIALLY_SUPPORTED supported=0.50 unsupported=0.50 prompt=judge@1\n\
             1. UNSUPPORTED The Eiffel Tower is in Paris.\n\
             2. SUPPORTED Scurvy is caused by a lack of vitamin C.\n\
             note: 1 verdict item(s) from the LLM were unusable and ignored\n\
             note: the LLM left out 1 statement(s); they count as unsupported",
        )
        .await;
    }

    #[tokio::test]
    async fn an_llm_that_is_down_falls_back_to_the_lexical_judge() {
        let llm = Arc::new(ScriptedLlm::down());
        let f = check(
            &llm_judge(&llm),
            "The Eiffel Tower is in Paris.",
            &passages(),
            "llm-free (lexical) SUPPORTED supported=1.00 unsupported=0.00\n\
             fallback: failed: scripted LLM failed call 1 on purpose\n\
             1. SUPPORTED 1.000 [1] The Eiffel Tower is in Paris.",
        )
        .await;
        assert!(f.label().starts_with("llm-free"));
        assert_eq!(llm.calls(), 1);
    }

    #[tokio::test]
    async fn invalid_json_is_repaired_once_then_falls_back() {
        let llm = Arc::new(ScriptedLlm::new("not json at all"));
        let f = check(
            &llm_judge(&llm),
            "Scurvy is caused by a lack of vitamin C.",
            &passages(),
            "llm-free (lexical) SUPPORTED supported=1.00 unsupported=0.00\n\
             fallback: invalid output: the repaired output is still not valid JSON (no JSON \
             object or array in the output)\n\
             1. SUPPORTED 1.000 [2] Scurvy is caused by a lack of vitamin C.",
        )
        .await;
        assert_eq!(llm.calls(), 2);
        assert!(last_user(&llm.requests()[1]).starts_with("REPAIR-REQUEST"));
        assert_eq!(f.cost.calls, 2, "both calls are charged although neither gave JSON");

        let repaired = Arc::new(
            ScriptedLlm::new("garbage")
                .with_reply("REPAIR-REQUEST", r#"{"verdicts": [{"statement": 1, "verdict": "SUPPORTED"}]}"#),
        );
        let f = check(
            &llm_judge(&repaired),
            "Scurvy is caused by a lack of vitamin C.",
            &passages(),
            "llm SUPPORTED supported=1.00 unsupported=0.00 prompt=judge@1\n\
             1. SUPPORTED Scurvy is caused by a lack of vitamin C.\n\
             note: the judge's output needed one JSON repair",
        )
        .await;
        assert_eq!(f.cost.calls, 2);

        let empty = Arc::new(ScriptedLlm::new(r#"{"verdicts": []}"#));
        check(
            &llm_judge(&empty),
            "Scurvy is caused by a lack of vitamin C.",
            &passages(),
            "llm-free (lexical) SUPPORTED supported=1.00 unsupported=0.00\n\
             fallback: invalid output: no usable verdict among 0 item(s)\n\
             1. SUPPORTED 1.000 [2] Scurvy is caused by a lack of vitamin C.",
        )
        .await;
    }

    #[tokio::test]
    async fn honest_admissions_are_supported_without_the_llm() {
        let llm = Arc::new(ScriptedLlm::down());
        check(
            &llm_judge(&llm),
            "The documents don't contain information about Python.",
            &passages(),
            "llm SUPPORTED supported=1.00 unsupported=0.00\n\
             1. SUPPORTED The documents don't contain information about Python.\n\
             note: 1 honest no-info statement(s) supported without judging",
        )
        .await;
        assert_eq!(llm.calls(), 0);

        let llm = Arc::new(ScriptedLlm::new(r#"{"verdicts": [{"statement": 1, "verdict": "UNSUPPORTED"}]}"#));
        check(
            &llm_judge(&llm),
            "The documents do not cover Python. Python was released in 1991.",
            &passages(),
            "llm PARTIALLY_SUPPORTED supported=0.50 unsupported=0.50 prompt=judge@1\n\
             1. SUPPORTED The documents do not cover Python.\n\
             2. UNSUPPORTED Python was released in 1991.\n\
             note: 1 honest no-info statement(s) supported without judging",
        )
        .await;
        let user = last_user(&llm.requests()[0]).to_owned();
        assert!(user.contains("Statements:\n1. Python was released in 1991.\n\n"), "{user}");
    }

    #[tokio::test]
    async fn a_bare_yes_or_no_is_judged_as_the_claim_of_the_question() {
        let judge = FaithfulnessJudge::new(JudgeConfig::default()).unwrap();
        let question = "Was the Eiffel Tower completed in 1889?";
        let f = judge.judge(&Ctx::new(), question, "Yes. [1]", &passages()).await.unwrap();
        // The statement keeps the answer's words; its score is the question's claim against the passages.
        assert_eq!(f.statements.len(), 1);
        assert_eq!(f.statements[0].text, "Yes.");
        assert_eq!(f.statements[0].support, Support::Supported, "{f:?}");
        assert_eq!(f.statements[0].evidence, Some(1));
        assert!(f.notes.iter().any(|n| n == "1 bare yes/no statement(s) judged as the question's claim"), "{f:?}");
        // The lexical judge matches the question's words, not the wrapper the LLM reads: a passage holding every
        // content word of the question supports a bare "Yes" fully.
        let f = judge
            .judge(
                &Ctx::new(),
                "Does the production of chemical weapons raise an ethical issue?",
                "Yes. [1]",
                &["Faraday refused to raise production of chemical weapons, citing an ethical issue.".to_owned()],
            )
            .await
            .unwrap();
        assert_eq!(f.statements[0].score, Some(1.0), "{f:?}");
        // A question the passages do not touch leaves the "No" unsupported.
        let f = judge.judge(&Ctx::new(), "Is Lima in Peru?", "No.", &passages()).await.unwrap();
        assert_eq!(f.statements[0].support, Support::Unsupported, "{f:?}");
        // Without a question, a lone "Yes" has no content words, as before.
        let f = judge.judge(&Ctx::new(), " ", "Yes.", &passages()).await.unwrap();
        assert_eq!(f.statements[0].score, Some(0.0));
        // The LLM judge sees the claim too.
        let llm = Arc::new(ScriptedLlm::new(r#"{"verdicts": [{"statement": 1, "verdict": "SUPPORTED"}]}"#));
        llm_judge(&llm).judge(&Ctx::new(), question, "No!", &passages()).await.unwrap();
        let user = last_user(&llm.requests()[0]).to_owned();
        assert!(user.contains("1. No (the answer to: Was the Eiffel Tower completed in 1889?)"), "{user}");
        for (text, polar) in
            [("Yes.", true), ("no", true), (" YES! ", true), ("Yes, in 1889.", false), ("Noon.", false)]
        {
            assert_eq!(is_polarity(text), polar, "{text}");
        }
    }

    #[tokio::test]
    async fn an_answer_without_statements_is_supported_for_free() {
        let llm = Arc::new(ScriptedLlm::down());
        let f = check(
            &llm_judge(&llm),
            " [1] ",
            &passages(),
            "llm SUPPORTED supported=0.00 unsupported=0.00\nnote: the answer has no statements to judge",
        )
        .await;
        assert_eq!((llm.calls(), f.cost), (0, Cost::ZERO));
    }

    #[tokio::test]
    async fn lexical_judge_scores_overlap_with_the_best_passage() {
        let judge = FaithfulnessJudge::new(JudgeConfig::default()).unwrap();
        // Content tokens: "eiffel", "tower", "completed", "1889" (all in passage 1) / "scurvy", "caused", "lack",
        // "vitamins" (prefix of "vitamin"), "sugar" → 4 of 5 / "tower", "london", "built", "1900" → 1 of 4.
        check(
            &judge,
            "The Eiffel Tower was completed in 1889. Scurvy is caused by a lack of vitamins and sugar. \
             The tower in London was built in 1900. It is so.",
            &passages(),
            "llm-free (lexical) PARTIALLY_SUPPORTED supported=0.50 unsupported=0.50\n\
             fallback: not configured\n\
             1. SUPPORTED 1.000 [1] The Eiffel Tower was completed in 1889.\n\
             2. SUPPORTED 0.800 [2] Scurvy is caused by a lack of vitamins and sugar.\n\
             3. UNSUPPORTED 0.250 [1] The tower in London was built in 1900.\n\
             4. UNSUPPORTED 0.000 It is so.\n\
             note: 1 statement(s) have no content words to check; they score 0",
        )
        .await;
        // "scurvy", "caused", "vitamin" of "scurvy", "caused", "vitamin", "loss", "1747" (a number must match
        // exactly) → 3 of 5 = 0.6: partial support.
        check(
            &judge,
            "Scurvy is caused by vitamin loss in 1747.",
            &passages(),
            "llm-free (lexical) PARTIALLY_SUPPORTED supported=0.00 unsupported=0.00\n\
             fallback: not configured\n\
             1. PARTIALLY_SUPPORTED 0.600 [2] Scurvy is caused by vitamin loss in 1747.",
        )
        .await;
        check(
            &judge,
            "Scurvy is caused by sugar.",
            &[],
            "llm-free (lexical) UNSUPPORTED supported=0.00 unsupported=1.00\n\
             fallback: not configured\n\
             1. UNSUPPORTED 0.000 Scurvy is caused by sugar.",
        )
        .await;
    }

    #[tokio::test]
    async fn embeddings_blend_into_the_lexical_score() {
        let embedder = Arc::new(HashEmbedder::new(256));
        let judge = FaithfulnessJudge::new(JudgeConfig::default()).unwrap().with_embedder(embedder.clone());
        let statement = "Scurvy is caused by a lack of vitamin C in the diet.";
        let f = judge.judge(&Ctx::new(), "q", statement, &passages()).await.unwrap();
        // The statement is the second passage word for word: lexical 1 and cosine 1.
        assert_eq!(f.label(), "llm-free (lexical+embedding)");
        assert_eq!(f.statements[0].evidence, Some(2));
        assert!((f.statements[0].score.unwrap() - 1.0).abs() < 1e-5, "{f:?}");
        assert_eq!(embedder.calls(), 2, "statements and passages are embedded in one call each");
        assert_eq!(f.cost, Cost::new(0, 3, 2));

        // Lexical 0.25 ("tower" of tower, london, built, 1900) blended half and half with the cosine.
        let f = judge.judge(&Ctx::new(), "q", "The tower in London was built in 1900.", &passages()).await.unwrap();
        let s = embedder.embed_one("The tower in London was built in 1900.");
        let best = passages()
            .iter()
            .map(|p| {
                let lexical =
                    token_overlap(&content_tokens("The tower in London was built in 1900."), &content_tokens(p));
                0.5 * lexical + 0.5 * cosine(&s, &embedder.embed_one(p)).max(0.0)
            })
            .fold(0.0_f32, f32::max);
        assert!((f.statements[0].score.unwrap() - best).abs() < 1e-6, "{f:?} vs {best}");
    }

    /// An embedder that is always down.
    #[derive(Debug)]
    struct DownEmbedder(ragtune_core::EmbeddingSpec);

    #[async_trait]
    impl Embedder for DownEmbedder {
        fn spec(&self) -> &ragtune_core::EmbeddingSpec {
            &self.0
        }
        fn cost_model(&self) -> ragtune_core::CostModel {
            ragtune_core::CostModel::FREE
        }
        async fn embed(&self, _ctx: &Ctx, _texts: &[&str], _role: TextRole) -> Result<Vec<Vec<f32>>> {
            Err(Error::unavailable("no model provisioned"))
        }
    }

    #[tokio::test]
    async fn a_failing_embedder_leaves_the_lexical_score() {
        let spec = HashEmbedder::new(4).spec().clone();
        let judge = FaithfulnessJudge::new(JudgeConfig::default()).unwrap().with_embedder(Arc::new(DownEmbedder(spec)));
        check(
            &judge,
            "The Eiffel Tower is in Paris.",
            &passages(),
            "llm-free (lexical) SUPPORTED supported=1.00 unsupported=0.00\n\
             fallback: not configured\n\
             1. SUPPORTED 1.000 [1] The Eiffel Tower is in Paris.\n\
             note: the embedder failed (no model provisioned); lexical overlap only",
        )
        .await;
    }

    #[tokio::test]
    async fn cancellation_is_the_only_error() {
        let llm = Arc::new(ScriptedLlm::down());
        let ctx = Ctx::new();
        ctx.cancel.cancel();
        let err = llm_judge(&llm).judge(&ctx, "q", "Scurvy is bad.", &passages()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
    }

    #[tokio::test]
    async fn context_is_cut_and_braces_do_not_break_the_prompt() {
        let llm = Arc::new(ScriptedLlm::new(r#"{"verdicts": [{"statement": 1, "verdict": "SUPPORTED"}]}"#));
        let judge = FaithfulnessJudge::new(JudgeConfig { max_context_chars: 20, ..JudgeConfig::default() })
            .unwrap()
            .with_llm(llm.clone() as Arc<dyn Llm>, JUDGE, REPAIR);
        let f = judge
            .judge(&Ctx::new(), "q", "Templates use {{ name }} syntax.", &["Jinja uses {{ name }} for values.".into()])
            .await
            .unwrap();
        assert_eq!(f.method, JudgeMethod::Llm, "{f:?}");
        assert_eq!(f.notes, ["the context was cut to 20 characters for the judge"]);
        let requests = llm.requests();
        let user = last_user(&requests[0]);
        assert!(user.contains("Context:\n[1] Jinja uses {{ na\n"), "cut, and sent verbatim: {user}");
        assert!(user.contains("1. Templates use {{ name }} syntax."), "sent verbatim: {user}");
    }
}
