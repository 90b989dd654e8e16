//! Degradation notes: what a question skipped, lost or fell back on, each with a kind to match on and the sentence a
//! person reads.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What kind of degradation a [`Note`] reports. Match on kinds, never on the wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NoteKind {
    /// The engine runs without a capability (no embedding model, say); copied from [`Engine::notes`].
    ///
    /// [`Engine::notes`]: crate::Engine::notes
    Capability,
    /// A stage was skipped because the request's deadline had passed.
    Deadline,
    /// Retrieval failed; the answer is built from nothing.
    RetrievalFailed,
    /// The Corrective-RAG evaluator failed; the retrieval is used as it is.
    EvaluationFailed,
    /// A correction ran in a weaker form than configured (synonym expansion instead of an LLM rewrite).
    CorrectionFallback,
    /// A correction's re-retrieval failed.
    CorrectionFailed,
    /// Web search returned nothing or failed.
    WebSearch,
    /// The budgeted reranking stage could not run.
    RerankSkipped,
    /// A remark of knowledge refinement itself.
    Refinement,
    /// Knowledge refinement failed; whole passages are used.
    RefinementFailed,
    /// A stage needs an LLM and none is configured.
    NoLlm,
    /// Query-focused extraction fell back to refinement strips, failed or stopped early.
    ExtractionFallback,
    /// Generation failed or returned nothing; the answer is extractive (or missing, closed-book).
    GenerationFailed,
    /// Faithfulness was judged without the LLM.
    JudgeFallback,
    /// The faithfulness judge failed.
    JudgeFailed,
    /// The retry rewrite fell back (no LLM, a failed call, no query in the answer).
    RetryRewrite,
    /// The answer cites a passage number that is not in the context; it is not cited.
    CitationOutOfContext,
    /// Triangulation's LLM support check fell back to the lexical one (for some sources or all).
    Triangulation,
    /// A stage was skipped because it would take the question past its LLM token budget
    /// (`pipeline.max_llm_tokens`).
    Budget,
    /// The extractive answer's cross-encoder sentence scorer failed; word overlap picked the sentences.
    SentenceScoring,
}

/// The note of a retry skipped for the LLM token budget: `spent` so far, about `per_attempt` for another attempt.
pub(super) fn budget_note(budget: u64, spent: u64, per_attempt: u64) -> String {
    format!(
        "retry skipped: another attempt (about {per_attempt} LLM tokens, the mean of those made) would take the \
         answer past the question's LLM token budget of {budget} (spent {spent})"
    )
}

/// One degradation of an answer: its kind and the sentence that explains it.
///
/// A note serialises to its sentence alone (the form `AskResponse::notes` has always had); reading one back
/// recovers the kind from the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    kind: NoteKind,
    text: String,
}

impl Note {
    /// A note of `kind` saying `text`.
    #[must_use]
    pub fn new(kind: NoteKind, text: impl Into<String>) -> Self {
        Self { kind, text: text.into() }
    }

    /// What kind of degradation this is.
    #[must_use]
    pub fn kind(&self) -> NoteKind {
        self.kind
    }

    /// The sentence.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The note a sentence written by the pipeline stands for: the kind is read from the sentence's opening
    /// words (each kind's sentences open in their own way; anything else is a capability note of the engine).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        Self::new(classify(text), text)
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Note {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Note {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(Self::parse(&text))
    }
}

/// A note is its sentence in JSON, so its schema is a string.
impl schemars::JsonSchema for Note {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Note".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "What the question skipped, lost or fell back on, as one sentence."
        })
    }
}

/// The kind of a note from its sentence; [`Note::parse`] explains the rule.
fn classify(text: &str) -> NoteKind {
    const OPENINGS: &[(&str, NoteKind)] = &[
        ("retrieval failed", NoteKind::RetrievalFailed),
        ("evaluation failed", NoteKind::EvaluationFailed),
        ("no LLM to rewrite", NoteKind::CorrectionFallback),
        ("query expansion failed", NoteKind::CorrectionFailed),
        ("query_expansion failed", NoteKind::CorrectionFailed),
        ("query_rewrite failed", NoteKind::CorrectionFailed),
        ("web search", NoteKind::WebSearch),
        ("rerank skipped", NoteKind::RerankSkipped),
        ("refine:", NoteKind::Refinement),
        ("refinement failed", NoteKind::RefinementFailed),
        ("closed-book answering needs an LLM", NoteKind::NoLlm),
        ("query-focused extraction needs an LLM", NoteKind::NoLlm),
        ("extraction", NoteKind::ExtractionFallback),
        ("generate failed", NoteKind::GenerationFailed),
        ("generation failed", NoteKind::GenerationFailed),
        ("the LLM returned an empty answer", NoteKind::GenerationFailed),
        ("faithfulness judged without the LLM", NoteKind::JudgeFallback),
        ("judge skipped", NoteKind::JudgeFailed),
        ("retry rewrite", NoteKind::RetryRewrite),
        ("the answer cites a passage", NoteKind::CitationOutOfContext),
        ("triangulation", NoteKind::Triangulation),
        ("sentence scoring fell back", NoteKind::SentenceScoring),
    ];
    if text.contains(": the deadline has passed") {
        return NoteKind::Deadline;
    }
    if text.contains("past the question's LLM token budget") {
        return NoteKind::Budget;
    }
    OPENINGS.iter().find(|(opening, _)| text.starts_with(opening)).map_or(NoteKind::Capability, |(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: NoteKind) {
        let note = Note::parse(text);
        assert_eq!(note.kind(), expect, "{text}");
        let json = serde_json::to_string(&note).unwrap();
        assert_eq!(json, serde_json::to_string(text).unwrap(), "a note serialises to its sentence");
        assert_eq!(serde_json::from_str::<Note>(&json).unwrap(), note);
    }

    #[test]
    fn every_sentence_the_pipeline_writes_reads_back_as_its_kind() {
        check("dense retrieval is off: models are not provisioned", NoteKind::Capability);
        check("judge skipped: the deadline has passed", NoteKind::Deadline);
        check(&budget_note(5000, 4100, 2050), NoteKind::Budget);
        check("generation skipped: the deadline has passed; the answer is extractive", NoteKind::Deadline);
        check("retrieval failed: no index yet", NoteKind::RetrievalFailed);
        check("evaluation failed, the retrieval is used as it is: boom", NoteKind::EvaluationFailed);
        check("no LLM to rewrite the query: expanded it with synonyms instead", NoteKind::CorrectionFallback);
        check("query_rewrite failed: timeout", NoteKind::CorrectionFailed);
        check("web search (searx) returned nothing", NoteKind::WebSearch);
        check("rerank skipped: reranking needs the LLM (llm.url)", NoteKind::RerankSkipped);
        check("refine: no strip scored above zero", NoteKind::Refinement);
        check("refinement failed, whole passages are used: x", NoteKind::RefinementFailed);
        check("query-focused extraction needs an LLM: the whole passages are used", NoteKind::NoLlm);
        check("extraction fell back to refinement strips: failed", NoteKind::ExtractionFallback);
        check("generation failed; the answer is extractive: down", NoteKind::GenerationFailed);
        check("faithfulness judged without the LLM (llm-free (lexical)): not configured", NoteKind::JudgeFallback);
        check("judge skipped: boom", NoteKind::JudgeFailed);
        check("retry rewrite failed (x); the question is searched again", NoteKind::RetryRewrite);
        check("the answer cites a passage that is not in the context: [7]", NoteKind::CitationOutOfContext);
        check("triangulation: example.org: the LLM support check failed: down", NoteKind::Triangulation);
        check(
            "sentence scoring fell back to word overlap: the cross-encoder failed: transient: down",
            NoteKind::SentenceScoring,
        );
    }
}
