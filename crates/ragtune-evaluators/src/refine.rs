//! Knowledge refinement (Corrective RAG, section 3.2 of arXiv:2401.15884): decompose retrieved chunks into
//! knowledge strips, filter the strips by relevance to the query, and recompose what is left per chunk.
//!
//! [`decompose`] cuts a text into sentences and cuts long sentences again at clause boundaries; every strip is a
//! verbatim substring of the input, so what reaches the generator is always the source's own wording.
//! [`Refiner::refine`] scores every strip lexically (IDF-weighted keyword coverage), optionally mixed with an
//! embedding cosine, keeps the strips that pass [`RefineConfig`]'s thresholds and joins them back per chunk in
//! document order, reporting how many tokens this saved ([`estimate_tokens`]).
//! Words, keywords, sentences, the cosine and the token estimate come from [`text`], shared with the
//! other judges.
//! Scoring is deterministic: the same query and candidates always keep the same strips.
//!
//! ```
//! use ragtune_evaluators::refine::decompose;
//! use ragtune_evaluators::text::estimate_tokens;
//!
//! let strips = decompose("Dr. Smith found it, e.g. in Rome. The rest is history.", 25);
//! assert_eq!(strips, ["Dr. Smith found it, e.g. in Rome.", "The rest is history."]);
//! // Four words make six tokens by the 4/3 rule of thumb (rounded up).
//! assert_eq!(estimate_tokens("The rest is history."), 6);
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;

use ragtune_core::text::{MIN_CONTENT_CHARS, keywords, words};
use ragtune_core::{Candidate, Cost, Ctx, Embedder, Error, Result, TextRole, TraceEvent};
use serde::{Deserialize, Serialize};

/// Re-exported from [`text`], where every user of the estimate finds it: refinement reports its savings with it.
pub use crate::text::estimate_tokens;
use crate::text::{self, cosine};

/// How strips are scored and which are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RefineConfig {
    /// Keep strips whose score is at least this (0..=1).
    pub threshold: f32,
    /// Also require a score of at least this share of the best strip's score for the query (0..=1); 0 disables it.
    pub relative_threshold: f32,
    /// When set, keep at most this many of the best strips over all chunks.
    pub top_n: Option<usize>,
    /// Always keep at least this many of the best strips, as long as they scored above zero, so that a strict
    /// threshold never leaves the generator with nothing when something was relevant (the passage filter may
    /// still drop some of them with their passage, but never all).
    pub min_strips: usize,
    /// Sentences of more words than this are cut again at clause boundaries.
    pub max_strip_words: usize,
    /// The weight of the embedding cosine against the lexical score when an embedder is set (0..=1).
    pub embedding_weight: f32,
    /// Drop a whole passage when none of its strips scores at least this (0..=1; 0 disables it), as CRAG filters
    /// documents before strips; the first (best-ranked) candidate is never dropped this way. Passages that
    /// mention the query's subject only in passing go, and the strip threshold can stay low for the rest.
    pub min_passage_score: f32,
}

impl Default for RefineConfig {
    fn default() -> Self {
        // Tuned on half of the measurable CMU QA questions (docs/experiments/2026-11-23-knowledge-refinement.md): on
        // the other half they keep 89 % of the answer-bearing strips of the top 5 passages and cut 31 % of their
        // tokens.
        Self {
            threshold: 0.05,
            relative_threshold: 0.0,
            top_n: None,
            min_strips: 2,
            max_strip_words: 25,
            embedding_weight: 0.6,
            min_passage_score: 0.40,
        }
    }
}

impl RefineConfig {
    /// Checks that the settings make sense together.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a threshold, relative threshold or embedding
    /// weight outside `0..=1`, `top_n` of zero or below `min_strips`, or `max_strip_words` of zero.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("threshold", self.threshold),
            ("relative_threshold", self.relative_threshold),
            ("embedding_weight", self.embedding_weight),
            ("min_passage_score", self.min_passage_score),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(Error::invalid_input(format!("refine.{name} must lie in 0..=1, not {value}")));
            }
        }
        if let Some(n) = self.top_n {
            if n == 0 {
                return Err(Error::invalid_input("refine.top_n must be at least 1 (leave it unset for no limit)"));
            }
            if n < self.min_strips {
                return Err(Error::invalid_input(format!(
                    "refine.top_n ({n}) is below refine.min_strips ({}); raise top_n or lower min_strips",
                    self.min_strips
                )));
            }
        }
        if self.max_strip_words == 0 {
            return Err(Error::invalid_input("refine.max_strip_words must be at least 1"));
        }
        Ok(())
    }
}

/// One knowledge strip of a chunk with its relevance score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Strip {
    /// The chunk the strip comes from.
    pub chunk_id: String,
    /// The document of that chunk.
    pub doc_id: String,
    /// The strip's order within its chunk (0-based).
    pub position: usize,
    /// The strip, verbatim from the chunk's text.
    pub text: String,
    /// Relevance to the query (0..=1).
    pub score: f32,
    /// Whether the strip survived filtering.
    pub kept: bool,
}

/// What is left of one chunk after refinement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefinedPassage {
    /// The chunk.
    pub chunk_id: String,
    /// Its document.
    pub doc_id: String,
    /// The chunk's title, for citations.
    pub title: Option<String>,
    /// The kept strips of this chunk joined by a space, in document order.
    pub text: String,
    /// How many strips were kept.
    pub strips: usize,
}

/// The result of [`Refiner::refine`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refined {
    /// One passage per chunk with a kept strip, in input candidate order.
    pub passages: Vec<RefinedPassage>,
    /// Every strip, kept or not, in candidate order and then position order.
    pub strips: Vec<Strip>,
    /// Estimated tokens of the input chunks ([`estimate_tokens`]).
    pub tokens_before: usize,
    /// Estimated tokens of the passages.
    pub tokens_after: usize,
    /// What scoring cost (the embedder's declared cost when one was used).
    pub cost: Cost,
    /// Anything worth knowing about how the strips were scored (a failed embedder, a query without keywords).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Refined {
    /// The share of tokens that refinement removed: `1 - after / before`, or 0 when there was nothing before.
    #[must_use]
    pub fn token_reduction(&self) -> f32 {
        if self.tokens_before == 0 {
            return 0.0;
        }
        1.0 - self.tokens_after as f32 / self.tokens_before as f32
    }

    /// Whether no strip was kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.passages.is_empty()
    }
}

/// Pieces of fewer words than this are glued to the next sentence: they are headings, numbers or the debris of
/// a missed abbreviation rather than knowledge strips.
const MIN_SENTENCE_WORDS: usize = 3;

/// Clause pieces are at least this many words, so that a split never leaves a fragment without meaning.
const MIN_CLAUSE_WORDS: usize = 5;

/// Splits `text` into knowledge strips: sentences, with sentences of more than `max_strip_words` words cut again
/// at clause boundaries.
///
/// Sentences are the shared ones of [`text::sentences`]: Unicode sentence boundaries (UAX #29), not broken after
/// a common abbreviation (`e.g.`, `i.e.`, `Dr.`, `Mr.`, `St.`, `U.S.`, `vs.`, ...) or a name's initial
/// (`John F.`) unless a line break follows, nor before a lowercase continuation of a line without closing
/// punctuation (a hard wrap). Sentences of fewer than three words are glued to the next one, since a strip must
/// carry meaning (headings, numbers, the debris of a missed abbreviation do not). Long sentences are cut
/// after `;`, `:`, a dash between spaces, and before `and`, `but`, `which`, `while`, `whereas` after a comma,
/// into pieces of at least five words. Every strip is a trimmed, verbatim substring of `text`.
#[must_use]
pub fn decompose(text: &str, max_strip_words: usize) -> Vec<String> {
    strip_spans(text, max_strip_words).into_iter().map(|(s, e)| text[s..e].to_owned()).collect()
}

/// The byte ranges of [`decompose`]'s strips in `text`, in order: `decompose(text, n)[i] == text[r.0..r.1]` for
/// the `i`-th range `r`. Indexing uses them to pool a vector per strip from the passage's own forward pass
/// (`Embedder::embed_spans`), so refinement finds its strips' vectors in the store instead of embedding them.
#[must_use]
pub fn strip_spans(text: &str, max_strip_words: usize) -> Vec<(usize, usize)> {
    sentence_ranges(text)
        .into_iter()
        .flat_map(|(start, end)| {
            let sentence = &text[start..end];
            if sentence.split_whitespace().count() > max_strip_words {
                clause_ranges(sentence).into_iter().map(|(s, e)| (start + s, start + e)).collect()
            } else {
                vec![(start, end)]
            }
        })
        .collect()
}

/// Byte ranges of the trimmed sentences of `text` ([`text::sentence_spans`]), after gluing fragments of fewer than
/// [`MIN_SENTENCE_WORDS`] words to the next sentence (or, at the end, to the one before).
fn sentence_ranges(text: &str) -> Vec<(usize, usize)> {
    let raw = text::sentence_spans(text);
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(raw.len());
    let mut pending: Option<(usize, usize)> = None; // start, words
    for (i, &(start, end)) in raw.iter().enumerate() {
        let words = text[start..end].split_whitespace().count();
        let (p_start, p_words) = pending.unwrap_or((start, 0));
        let words = p_words + words;
        if words < MIN_SENTENCE_WORDS && i + 1 < raw.len() {
            pending = Some((p_start, words));
            continue;
        }
        pending = None;
        match out.last_mut() {
            // A short last piece belongs to the sentence before it.
            Some(last) if words < MIN_SENTENCE_WORDS => last.1 = end,
            _ => out.push((p_start, end)),
        }
    }
    out
}

/// Byte ranges (relative to `sentence`) of its clause pieces, each at least [`MIN_CLAUSE_WORDS`] words.
fn clause_ranges(sentence: &str) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = Vec::new();
    for (i, c) in sentence.char_indices() {
        if matches!(c, ';' | ':') && sentence[i + 1..].starts_with(char::is_whitespace) {
            cuts.push(i + 1);
        }
    }
    for marker in [", and ", ", but ", ", which ", ", while ", ", whereas "] {
        // Cut after the comma, so the conjunction opens the next piece.
        cuts.extend(sentence.match_indices(marker).map(|(i, _)| i + 1));
    }
    for marker in [" – ", " — "] {
        cuts.extend(sentence.match_indices(marker).map(|(i, m)| i + m.len()));
    }
    cuts.sort_unstable();
    cuts.dedup();
    // Word starts, so that word counts between cuts are two binary searches rather than a rescan.
    let mut word_starts = Vec::new();
    let mut in_word = false;
    for (i, c) in sentence.char_indices() {
        let ws = c.is_whitespace();
        if !ws && !in_word {
            word_starts.push(i);
        }
        in_word = !ws;
    }
    let words = |a: usize, b: usize| word_starts.partition_point(|&w| w < b) - word_starts.partition_point(|&w| w < a);
    let mut out = Vec::new();
    let mut last = 0;
    for cut in cuts {
        if words(last, cut) >= MIN_CLAUSE_WORDS && words(cut, sentence.len()) >= MIN_CLAUSE_WORDS {
            out.push(trimmed(sentence, last, cut));
            last = cut;
        }
    }
    out.push(trimmed(sentence, last, sentence.len()));
    out
}

/// The range `start..end` of `text` without surrounding whitespace.
fn trimmed(text: &str, start: usize, end: usize) -> (usize, usize) {
    let piece = &text[start..end];
    let s = start + (piece.len() - piece.trim_start().len());
    (s, start + piece.trim_end().len())
}

/// Whether a strip token matches a keyword: equal, or (for words of five characters and more) differing only in
/// the last one or two characters, which catches plurals and simple inflections (`plant`/`plants`,
/// `caused`/`causes`).
fn token_matches(keyword: &str, token: &str) -> bool {
    if keyword == token {
        return true;
    }
    let (a, b) = (keyword.chars().count(), token.chars().count());
    if a.min(b) < 4 || a.max(b) < 5 || a.abs_diff(b) > 2 {
        return false;
    }
    let common = keyword.chars().zip(token.chars()).take_while(|(x, y)| x == y).count();
    common >= a.max(b) - 2
}

/// Lexical scores of `strips` for `keywords`: the IDF-weighted share of the keywords a strip contains, with IDF
/// over the strips themselves (BM25's formula), so rare keywords count for more than common ones.
fn lexical_scores(keywords: &[String], strips: &[&str]) -> Vec<f32> {
    let strip_tokens: Vec<BTreeSet<String>> =
        strips.iter().map(|s| words(s).filter(|t| t.chars().count() >= MIN_CONTENT_CHARS).collect()).collect();
    let present: Vec<Vec<bool>> = strip_tokens
        .iter()
        .map(|set| keywords.iter().map(|k| set.iter().any(|t| token_matches(k, t))).collect())
        .collect();
    let n = strips.len() as f32;
    let idf: Vec<f32> = (0..keywords.len())
        .map(|k| {
            let df = present.iter().filter(|p| p[k]).count() as f32;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let total: f32 = idf.iter().sum();
    present
        .iter()
        .map(|p| {
            if total <= 0.0 {
                return 0.0;
            }
            let hit: f32 = p.iter().zip(&idf).filter(|(hit, _)| **hit).map(|(_, w)| w).sum();
            (hit / total).clamp(0.0, 1.0)
        })
        .collect()
}

/// Decomposes retrieved chunks into strips, keeps the strips relevant to the query and recomposes them.
///
/// Lexical by default and so free; with [`with_embedder`](Self::with_embedder) it mixes in an embedding cosine at
/// the cost of two embedder calls (the query, then every strip in one batch).
#[derive(Debug, Clone)]
pub struct Refiner {
    config: RefineConfig,
    embedder: Option<Arc<dyn Embedder>>,
}

impl Refiner {
    /// A lexical refiner.
    ///
    /// # Errors
    /// An invalid configuration ([`RefineConfig::validate`]).
    pub fn new(config: RefineConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self { config, embedder: None })
    }

    /// Mixes the embedder's cosine into the score with the configured `embedding_weight`.
    #[must_use]
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RefineConfig {
        &self.config
    }

    /// Refines `candidates` for `query`.
    ///
    /// The lexical score of a strip is the IDF-weighted share of the query's keywords (lowercased alphanumeric
    /// tokens longer than two characters, minus stopwords) found in the strip; a keyword matches a token that is
    /// equal or, for words of five characters and more, differs only in its last one or two characters. IDF is
    /// computed over all strips of this call. With an embedder the score is
    /// `(1 - w) * lexical + w * max(0, cosine)`; when the embedder fails, strips are scored lexically and
    /// [`Refined::notes`] says so. A strip is kept when it passes `threshold` and `relative_threshold`, at most
    /// `top_n` strips are kept, and at least `min_strips` when that many scored above zero; ties go to the
    /// earlier candidate and strip. Then every passage but the first whose best strip scores below
    /// `min_passage_score` is dropped whole, unless that would leave no strip at all.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a blank query; `Cancelled`/`DeadlineExceeded`
    /// from `ctx`.
    pub async fn refine(&self, ctx: &Ctx, query: &str, candidates: &[Candidate]) -> Result<Refined> {
        ctx.check()?;
        if query.trim().is_empty() {
            return Err(Error::invalid_input("cannot refine for an empty query"));
        }
        let mut notes = Vec::new();
        let mut strips: Vec<Strip> = Vec::new();
        for c in candidates {
            for (position, text) in decompose(&c.chunk.text, self.config.max_strip_words).into_iter().enumerate() {
                strips.push(Strip {
                    chunk_id: c.chunk.id.clone(),
                    doc_id: c.chunk.doc_id.clone(),
                    position,
                    text,
                    score: 0.0,
                    kept: false,
                });
            }
        }
        let texts: Vec<&str> = strips.iter().map(|s| s.text.as_str()).collect();
        let mut keys = keywords(query);
        if keys.is_empty() {
            // A query of stopwords only ("what is it?") still says something; use all of its words rather than
            // scoring every strip zero.
            let mut seen = BTreeSet::new();
            keys = words(query).filter(|t| seen.insert(t.clone())).collect();
            notes.push("the query has no keywords beyond stopwords; scored with all of its words".to_owned());
        }
        let mut scores = lexical_scores(&keys, &texts);
        let mut cost = Cost::ZERO;
        let mut action = "lexical";
        if let Some(embedder) = self.embedder.as_ref().filter(|_| !texts.is_empty()) {
            cost += embedder.cost_model().estimate(1) + embedder.cost_model().estimate(texts.len());
            match self.embed(ctx, embedder.as_ref(), query, &texts).await {
                Ok(cosines) => {
                    let w = self.config.embedding_weight;
                    for (score, cos) in scores.iter_mut().zip(cosines) {
                        *score = (1.0 - w) * *score + w * cos.max(0.0);
                    }
                    action = "lexical+embedding";
                }
                Err(e) => {
                    ctx.check()?;
                    notes.push(format!("embedder failed: {}; scored lexically", e.message()));
                }
            }
        }
        for (strip, score) in strips.iter_mut().zip(&scores) {
            strip.score = *score;
        }
        self.select(&mut strips);

        let mut passages: Vec<RefinedPassage> = Vec::new();
        let mut rest = strips.as_slice();
        for c in candidates {
            // Strips are laid out candidate by candidate, so each candidate's strips are the next run.
            let n = rest.iter().take_while(|s| s.chunk_id == c.chunk.id).count();
            let (mine, tail) = rest.split_at(n);
            rest = tail;
            let kept: Vec<&str> = mine.iter().filter(|s| s.kept).map(|s| s.text.as_str()).collect();
            if !kept.is_empty() {
                passages.push(RefinedPassage {
                    chunk_id: c.chunk.id.clone(),
                    doc_id: c.chunk.doc_id.clone(),
                    title: c.chunk.title.clone(),
                    text: kept.join(" "),
                    strips: kept.len(),
                });
            }
        }
        let tokens_before = candidates.iter().map(|c| estimate_tokens(&c.chunk.text)).sum();
        let tokens_after = passages.iter().map(|p| estimate_tokens(&p.text)).sum();
        let kept = strips.iter().filter(|s| s.kept).count();
        ctx.trace(
            TraceEvent::new("refine", action)
                .detail("strips", strips.len())
                .detail("kept", kept)
                .detail("tokens_before", tokens_before)
                .detail("tokens_after", tokens_after)
                .cost(cost),
        );
        Ok(Refined { passages, strips, tokens_before, tokens_after, cost, notes })
    }

    /// Cosines of the strips to the query, clamped to zero from below by the caller.
    async fn embed(&self, ctx: &Ctx, embedder: &dyn Embedder, query: &str, texts: &[&str]) -> Result<Vec<f32>> {
        let q = embedder.embed(ctx, &[query], TextRole::Query).await?;
        let q = q.into_iter().next().ok_or_else(|| Error::permanent("the embedder returned no query vector"))?;
        let vectors = embedder.embed(ctx, texts, TextRole::Passage).await?;
        if vectors.len() != texts.len() {
            return Err(Error::permanent(format!(
                "the embedder returned {} vectors for {} strips",
                vectors.len(),
                texts.len()
            )));
        }
        Ok(vectors.iter().map(|v| cosine(&q, v)).collect())
    }

    /// Marks the strips to keep.
    fn select(&self, strips: &mut [Strip]) {
        let c = &self.config;
        let best = strips.iter().map(|s| s.score).fold(0.0_f32, f32::max);
        if best <= 0.0 {
            return;
        }
        // Strip indices by descending score; the stable sort keeps input order among ties.
        let mut order: Vec<usize> = (0..strips.len()).filter(|&i| strips[i].score > 0.0).collect();
        order.sort_by(|&a, &b| strips[b].score.total_cmp(&strips[a].score));
        let passes = |s: &Strip| s.score >= c.threshold && s.score >= c.relative_threshold * best;
        let limit = c.top_n.unwrap_or(usize::MAX);
        for (rank, &i) in order.iter().enumerate() {
            strips[i].kept = rank < limit && (rank < c.min_strips || passes(&strips[i]));
        }
        if c.min_passage_score > 0.0 {
            let before: Vec<bool> = strips.iter().map(|s| s.kept).collect();
            // Strips are laid out passage by passage; the first passage is the best-ranked candidate.
            let first = strips.first().map(|s| s.chunk_id.clone());
            let mut start = 0;
            while start < strips.len() {
                let id = strips[start].chunk_id.clone();
                let end = start + strips[start..].iter().take_while(|s| s.chunk_id == id).count();
                let passage_best = strips[start..end].iter().map(|s| s.score).fold(0.0_f32, f32::max);
                if Some(&id) != first.as_ref() && passage_best < c.min_passage_score {
                    strips[start..end].iter_mut().for_each(|s| s.kept = false);
                }
                start = end;
            }
            // The filter never empties a context that had something relevant (what `min_strips` promises).
            if !strips.iter().any(|s| s.kept) {
                strips.iter_mut().zip(before).for_each(|(s, kept)| s.kept = kept);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ragtune_core::{Chunk, EmbeddingSpec, ErrorKind, TraceSink};
    use ragtune_testkit::fakes::HashEmbedder;

    use super::*;

    fn check(text: &str, max_words: usize, expect: &[&str]) {
        let got = decompose(text, max_words);
        assert_eq!(got, expect, "input: {text:?}");
        for strip in &got {
            assert!(text.contains(strip.as_str()), "{strip:?} is not a substring of the input");
            assert_eq!(strip.trim(), strip);
        }
        // The spans are the strips' places in the text, in order and without overlap.
        let spans = strip_spans(text, max_words);
        assert_eq!(spans.iter().map(|&(s, e)| &text[s..e]).collect::<Vec<_>>(), got);
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "{spans:?}");
    }

    fn candidate(id: &str, text: &str) -> Candidate {
        let doc = id.split('#').next().unwrap_or(id);
        let mut chunk = Chunk::new(id, doc, text);
        chunk.title = Some(format!("Title of {doc}"));
        Candidate { chunk, score: 1.0, sources: Default::default() }
    }

    fn run(refiner: &Refiner, query: &str, candidates: &[Candidate]) -> Refined {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(refiner.refine(&Ctx::new(), query, candidates))
            .unwrap()
    }

    fn kept(refined: &Refined) -> Vec<&str> {
        refined.strips.iter().filter(|s| s.kept).map(|s| s.text.as_str()).collect()
    }

    fn scurvy() -> Vec<Candidate> {
        vec![
            candidate(
                "med#0",
                "Scurvy was common among sailors on long voyages. Scurvy is caused by a lack of vitamin C in the diet. \
                 The ship's cook served salted pork every day.",
            ),
            candidate(
                "med#1",
                "Citrus fruits such as lemons are rich in vitamin C. Lemons were later issued to British sailors. \
                 The weather in Portsmouth was mild that year.",
            ),
            candidate("other#0", "The stock market fell sharply on Tuesday. Analysts blamed rising interest rates."),
        ]
    }

    #[test]
    fn sentences_respect_abbreviations_and_initials() {
        check(
            "Dr. Smith met Mr. Jones on Main St. in the U.S. capital. They talked, e.g. about vs. cases, i.e. law.",
            25,
            &[
                "Dr. Smith met Mr. Jones on Main St. in the U.S. capital.",
                "They talked, e.g. about vs. cases, i.e. law.",
            ],
        );
        check(
            "John F. Kennedy was born in 1917 in Brookline. He became president.",
            25,
            &["John F. Kennedy was born in 1917 in Brookline.", "He became president."],
        );
        // A capital letter after a lowercase word ends the sentence.
        check(
            "Scurvy comes from a lack of vitamin C. Lemons prevent it well.",
            25,
            &["Scurvy comes from a lack of vitamin C.", "Lemons prevent it well."],
        );
    }

    #[test]
    fn fragments_are_glued_to_their_neighbours() {
        check(
            "Introduction\n\nThe method works well. It is fast.",
            25,
            &["Introduction\n\nThe method works well.", "It is fast."],
        );
        check("The method works well in practice. Yes.", 25, &["The method works well in practice. Yes."]);
        check(
            "A line that is hard\nwrapped in the middle. Next one here.",
            25,
            &["A line that is hard\nwrapped in the middle.", "Next one here."],
        );
    }

    #[test]
    fn long_sentences_split_at_clause_boundaries() {
        let text = "The committee reviewed the proposal in great detail over three long meetings, and it decided \
                    that the budget was far too large for the current year; the chair asked for a smaller plan, \
                    which the team delivered within two weeks.";
        check(
            text,
            25,
            &[
                "The committee reviewed the proposal in great detail over three long meetings,",
                "and it decided that the budget was far too large for the current year;",
                "the chair asked for a smaller plan,",
                "which the team delivered within two weeks.",
            ],
        );
        // Under the limit nothing is split.
        check(text, 100, &[text]);
        // Pieces stay at least five words: a clause marker near the start is not a cut.
        check(
            "Yes, and then the committee reviewed the proposal in great detail over three long meetings before lunch \
             and after dinner every single day.",
            10,
            &["Yes, and then the committee reviewed the proposal in great detail over three long meetings before \
               lunch and after dinner every single day."],
        );
        check(
            "Times: 10:30 is when the long meeting of all the important people starts today.",
            5,
            &["Times: 10:30 is when the long meeting of all the important people starts today."],
        );
        check(
            "The first part of this sentence is long enough – the second part is long enough too.",
            8,
            &["The first part of this sentence is long enough –", "the second part is long enough too."],
        );
    }

    #[test]
    fn empty_odd_and_huge_inputs() {
        check("", 25, &[]);
        check("  \n\t  ", 25, &[]);
        check("word", 25, &["word"]);
        check(
            "Été à Zürich — ça va? 東京は大きい。 Ünïcödé ẞ tëxt here.",
            25,
            &["Été à Zürich — ça va?", "東京は大きい。 Ünïcödé ẞ tëxt here."],
        );
        check(
            "\u{feff}\u{200b} Zero\u{200d}width joiner text here. 🎉🎉 Emoji party time now!",
            25,
            &["\u{feff}\u{200b} Zero\u{200d}width joiner text here.", "🎉🎉 Emoji party time now!"],
        );
        let lossy = String::from_utf8_lossy(b"Broken \xff\xfe bytes in the text. Fine after that.").into_owned();
        let strips = decompose(&lossy, 25);
        assert_eq!(strips.len(), 2);
        let big = "Scurvy is caused by a lack of vitamin C, and sailors suffered from it. ".repeat(15_000);
        assert!(big.len() > 1_000_000);
        let strips = decompose(&big, 25);
        assert_eq!(strips.len(), 15_000);
        let blob = "a".repeat(1_100_000);
        assert_eq!(decompose(&blob, 25).len(), 1);
        let words = "word ".repeat(250_000);
        assert_eq!(decompose(&words, 25).len(), 1);
    }

    #[test]
    fn keywords_and_matching() {
        assert_eq!(keywords("What causes scurvy in the sailors of a ship?"), ["causes", "scurvy", "sailors", "ship"]);
        assert!(token_matches("plants", "plant"));
        assert!(token_matches("caused", "causes"));
        assert!(token_matches("sailor", "sailors"));
        assert!(!token_matches("ship", "shipment"));
        assert!(!token_matches("cat", "cats"));
        assert!(!token_matches("scurvy", "curvy"));
    }

    #[test]
    fn keeps_the_answer_and_drops_the_rest() {
        let refiner = Refiner::new(RefineConfig::default()).unwrap();
        let refined = run(&refiner, "What causes scurvy?", &scurvy());
        assert_eq!(
            kept(&refined),
            [
                "Scurvy was common among sailors on long voyages.",
                "Scurvy is caused by a lack of vitamin C in the diet."
            ]
        );
        assert_eq!(refined.passages.len(), 1);
        assert_eq!(refined.passages[0].chunk_id, "med#0");
        assert_eq!(refined.passages[0].title.as_deref(), Some("Title of med"));
        assert_eq!(refined.strips.len(), 8);
        assert!(refined.tokens_before > refined.tokens_after);
        assert_eq!(refined.tokens_after, estimate_tokens(&refined.passages[0].text));
        assert!(refined.token_reduction() > 0.6, "{}", refined.token_reduction());
        assert!(!refined.is_empty());
        assert!(refined.notes.is_empty());
    }

    #[test]
    fn recomposes_in_document_order_with_source_ids() {
        let refiner = Refiner::new(RefineConfig { min_strips: 0, ..RefineConfig::default() }).unwrap();
        let refined = run(&refiner, "vitamin C lemons sailors", &scurvy());
        let passages: Vec<(&str, &str, &str, usize)> = refined
            .passages
            .iter()
            .map(|p| (p.chunk_id.as_str(), p.doc_id.as_str(), p.text.as_str(), p.strips))
            .collect();
        assert_eq!(
            passages,
            [
                (
                    "med#0",
                    "med",
                    "Scurvy was common among sailors on long voyages. Scurvy is caused by a lack of vitamin C in the diet.",
                    2
                ),
                (
                    "med#1",
                    "med",
                    "Citrus fruits such as lemons are rich in vitamin C. Lemons were later issued to British sailors.",
                    2
                ),
            ]
        );
        let positions: Vec<(&str, usize)> = refined.strips.iter().map(|s| (s.chunk_id.as_str(), s.position)).collect();
        assert_eq!(positions[..4], [("med#0", 0), ("med#0", 1), ("med#0", 2), ("med#1", 0)]);
    }

    #[test]
    fn top_n_min_strips_and_relative_threshold() {
        let base = RefineConfig::default();
        // top_n caps the number of kept strips, best first.
        let refiner = Refiner::new(RefineConfig { top_n: Some(1), min_strips: 1, ..base.clone() }).unwrap();
        let refined = run(&refiner, "vitamin C lemons sailors", &scurvy());
        assert_eq!(kept(&refined), ["Citrus fruits such as lemons are rich in vitamin C."]);
        // min_strips keeps the best strips even when nothing passes an impossible threshold.
        let refiner =
            Refiner::new(RefineConfig { threshold: 1.0, relative_threshold: 0.0, min_strips: 2, ..base.clone() })
                .unwrap();
        let refined = run(&refiner, "What causes scurvy?", &scurvy());
        assert_eq!(kept(&refined).len(), 2);
        // ...but never keeps strips that scored zero.
        let refined = run(&refiner, "quantum chromodynamics", &scurvy());
        assert!(refined.is_empty());
        assert_eq!(refined.tokens_after, 0);
        assert!((refined.token_reduction() - 1.0).abs() < f32::EPSILON);
        // A relative threshold of 1 keeps only strips as good as the best one.
        let refiner = Refiner::new(RefineConfig {
            threshold: 0.0,
            relative_threshold: 1.0,
            min_strips: 0,
            top_n: None,
            ..base.clone()
        })
        .unwrap();
        let refined = run(&refiner, "vitamin C lemons sailors", &scurvy());
        assert_eq!(
            kept(&refined),
            ["Citrus fruits such as lemons are rich in vitamin C.", "Lemons were later issued to British sailors."]
        );
        // Disabling it keeps every strip that passes the absolute threshold.
        let refiner =
            Refiner::new(RefineConfig { threshold: 0.01, relative_threshold: 0.0, min_strips: 0, top_n: None, ..base })
                .unwrap();
        let refined = run(&refiner, "vitamin C lemons sailors", &scurvy());
        assert_eq!(kept(&refined).len(), 4);
    }

    #[test]
    fn passages_without_a_strong_strip_are_dropped_whole_except_the_first() {
        let candidates = [
            candidate("a#0", "Ships carried sailors across the sea for months."),
            candidate("b#0", "Scurvy is caused by a lack of vitamin C. It struck sailors on long voyages."),
            candidate("c#0", "The navy fed its sailors biscuits. Voyages lasted for years."),
        ];
        let query = "What caused scurvy in sailors?";
        let off =
            Refiner::new(RefineConfig { threshold: 0.1, min_strips: 0, min_passage_score: 0.0, ..Default::default() })
                .unwrap();
        let all = run(&off, query, &candidates);
        let best_of = |r: &Refined, id: &str| {
            r.strips.iter().filter(|s| s.chunk_id == id).map(|s| s.score).fold(0.0_f32, f32::max)
        };
        // Every passage has a strip over the strip threshold ("sailors"), but only b's best strip is strong.
        assert_eq!(all.passages.len(), 3, "{all:?}");
        let bar = best_of(&all, "b#0");
        assert!(best_of(&all, "a#0") < bar && best_of(&all, "c#0") < bar, "{all:?}");
        let on = Refiner::new(RefineConfig { min_passage_score: bar, ..off.config().clone() }).unwrap();
        let filtered = run(&on, query, &candidates);
        let ids: Vec<&str> = filtered.passages.iter().map(|p| p.chunk_id.as_str()).collect();
        assert_eq!(ids, ["a#0", "b#0"], "c goes; a stays because it is the best-ranked candidate");
        assert_eq!(filtered.passages[0].text, all.passages[0].text);
        assert!(filtered.tokens_after < all.tokens_after);
        assert!(filtered.strips.iter().filter(|s| s.chunk_id == "c#0").all(|s| !s.kept));
        // When the first passage has nothing relevant and every other one is weak, the filter stands aside
        // rather than leave the generator with nothing.
        let weak_first = [candidate("x#0", "Nothing to see here at all."), candidates[2].clone()];
        let kept_anyway = run(&on, query, &weak_first);
        assert_eq!(kept_anyway.passages.len(), 1, "{kept_anyway:?}");
        assert_eq!(kept_anyway.passages[0].chunk_id, "c#0");
    }

    #[test]
    fn refinement_is_deterministic() {
        let refiner = Refiner::new(RefineConfig::default()).unwrap();
        let a = run(&refiner, "What causes scurvy among sailors?", &scurvy());
        let b = run(&refiner, "What causes scurvy among sailors?", &scurvy());
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
    }

    #[test]
    fn embedder_is_mixed_in_and_its_failure_falls_back() {
        let embedder = Arc::new(HashEmbedder::new(256));
        let refiner = Refiner::new(RefineConfig::default()).unwrap().with_embedder(embedder.clone());
        let sink = TraceSink::new();
        let ctx = Ctx::new().with_trace(sink.clone());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let refined = rt.block_on(refiner.refine(&ctx, "What causes scurvy?", &scurvy())).unwrap();
        assert!(kept(&refined).contains(&"Scurvy is caused by a lack of vitamin C in the diet."));
        assert_eq!(embedder.calls(), 2);
        assert_eq!(refined.cost.calls, 2);
        let events = sink.take();
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].stage.as_str(), events[0].action.as_str()), ("refine", "lexical+embedding"));
        assert_eq!(events[0].detail["strips"], 8);

        let failing = Arc::new(FailingEmbedder(HashEmbedder::new(8).spec().clone()));
        let refiner = Refiner::new(RefineConfig::default()).unwrap().with_embedder(failing);
        let refined = run(&refiner, "What causes scurvy?", &scurvy());
        let lexical = run(&Refiner::new(RefineConfig::default()).unwrap(), "What causes scurvy?", &scurvy());
        assert_eq!(kept(&refined), kept(&lexical));
        assert_eq!(refined.notes, ["embedder failed: the model is not provisioned; scored lexically"]);
    }

    #[test]
    fn invalid_queries_configs_and_cancellation() {
        let refiner = Refiner::new(RefineConfig::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = rt.block_on(refiner.refine(&Ctx::new(), "  ", &scurvy())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        let ctx = Ctx::new();
        ctx.cancel.cancel();
        let err = rt.block_on(refiner.refine(&ctx, "scurvy", &scurvy())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled);
        for bad in [
            RefineConfig { threshold: 1.5, ..RefineConfig::default() },
            RefineConfig { relative_threshold: -0.1, ..RefineConfig::default() },
            RefineConfig { embedding_weight: f32::NAN, ..RefineConfig::default() },
            RefineConfig { top_n: Some(0), ..RefineConfig::default() },
            RefineConfig { top_n: Some(1), min_strips: 2, ..RefineConfig::default() },
            RefineConfig { max_strip_words: 0, ..RefineConfig::default() },
            RefineConfig { min_passage_score: 1.2, ..RefineConfig::default() },
        ] {
            assert_eq!(Refiner::new(bad).unwrap_err().kind(), ErrorKind::InvalidInput);
        }
        let parsed: RefineConfig = serde_json::from_str(r#"{"threshold": 0.4}"#).unwrap();
        assert_eq!(parsed, RefineConfig { threshold: 0.4, ..RefineConfig::default() });
        assert!(serde_json::from_str::<RefineConfig>(r#"{"treshold": 0.4}"#).is_err());
        // No candidates is not an error, and a query of stopwords still scores.
        let refined = run(&refiner, "scurvy", &[]);
        assert!(refined.is_empty() && refined.strips.is_empty());
        assert_eq!(refined.token_reduction(), 0.0);
        let refined = run(&refiner, "what is it?", &scurvy());
        assert_eq!(refined.notes.len(), 1);
    }

    #[derive(Debug)]
    struct FailingEmbedder(EmbeddingSpec);

    #[async_trait::async_trait]
    impl Embedder for FailingEmbedder {
        fn spec(&self) -> &EmbeddingSpec {
            &self.0
        }
        fn cost_model(&self) -> ragtune_core::CostModel {
            ragtune_core::CostModel::FREE
        }
        async fn embed(&self, _ctx: &Ctx, _texts: &[&str], _role: TextRole) -> Result<Vec<Vec<f32>>> {
            Err(Error::unavailable("the model is not provisioned"))
        }
    }
}
