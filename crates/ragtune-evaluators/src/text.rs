//! The sentence-level text analysis every judge shares: sentences, the cosine of two vectors and the token
//! estimate. Words, stop words, keywords and the LLM-free support check are core's ([`ragtune_core::text`]), shared
//! with the crates that do not depend on this one.
//!
//! The heuristic CRAG evaluator, knowledge refinement, query-focused extraction, the faithfulness judge and the
//! answer pipeline (its extractive answer and its token budget) all read text through this module and core's, so
//! they see the same words and the same sentences: a keyword the evaluator looks for is the keyword refinement
//! scores, and a sentence refinement keeps is a sentence the judge would split the same way.
//!
//! - [`sentence_spans`] and [`sentences`]: Unicode sentence boundaries (UAX #29), not broken after one list of
//!   [`ABBREVIATIONS`] or a name's initial, nor inside a hard-wrapped line.
//! - [`estimate_tokens`]: whitespace-separated words times 4/3, rounded up.
//! - [`cosine`]: the cosine of two vectors, 0 when it is undefined.
//! - [`repeats_itself`]: a generation that loops.
//!
//! Choices made when the users' private copies were merged (each was written for one judge):
//!
//! - One abbreviation list, the union of refinement's and the judge's. A capital letter with a period is a name's
//!   initial after a capitalised word, after another initial or at the start of a sentence ("John F. Kennedy",
//!   "J. Lind"); after a lowercase word it ends the sentence ("a lack of vitamin C. Lemons ..."). The judge used
//!   to read every such letter as an initial.
//! - A line break after an abbreviation or an initial ends the sentence (list items, headings), as the judge had
//!   it; a line that ends without closing punctuation and is continued in lowercase is one sentence (a hard
//!   wrap), as refinement had it.
//! - Tokens are rounded up, as refinement and the pipeline's context budget had them (the heuristic evaluator
//!   rounded to the nearest): an estimate that feeds a budget should not undercount.
//! - The cosine sums in `f64` and is clamped to `[-1, 1]`; vectors of different lengths, a zero vector or a
//!   result that is not finite give 0.
//!
//! What stays elsewhere on purpose: refinement glues fragments of fewer than three words to a neighbour
//! ([`decompose`](crate::refine::decompose)), since a strip must carry meaning while a statement may be short;
//! the pipeline's extractive answer matches all of the question's words of at least two characters, short
//! function words included (matching [`keywords`](ragtune_core::text::keywords) only lowered its accuracy on the
//! CMU QA set, 0.285 to 0.270); SQuAD's answer normalisation
//! ([`normalize_answer`](crate::metrics::answer::normalize_answer)) is a defined metric that deletes punctuation,
//! joining "1,000" into one token where [`words`](ragtune_core::text::words) sees two; and the BM25 analyzer of
//! retrieval (stemming, Lucene's stop words) belongs to `ragtune-embed`.
//!
//! ```
//! use ragtune_evaluators::text::{cosine, estimate_tokens, sentences};
//!
//! assert_eq!(
//!     sentences("Dr. Lind tested citrus, e.g. lemons. John F. Kennedy was not there."),
//!     ["Dr. Lind tested citrus, e.g. lemons.", "John F. Kennedy was not there."]
//! );
//! assert_eq!(estimate_tokens("The rest is history."), 6); // 4 words * 4/3, rounded up
//! assert_eq!(cosine(&[1.0, 0.0], &[1.0, 1.0]), std::f32::consts::FRAC_1_SQRT_2);
//! ```

use ragtune_core::text::words;
use unicode_segmentation::UnicodeSegmentation;

/// Abbreviations after which a period does not end a sentence, lower-cased with their final period. "etc." is
/// left out on purpose: it ends sentences as often as not.
pub const ABBREVIATIONS: &[&str] = &[
    "al.", "approx.", "ca.", "cf.", "co.", "dept.", "dr.", "e.g.", "eq.", "fig.", "figs.", "gen.", "i.e.", "inc.",
    "jr.", "ltd.", "mr.", "mrs.", "ms.", "mt.", "no.", "nos.", "p.", "pp.", "prof.", "rev.", "sec.", "sgt.", "sr.",
    "st.", "u.k.", "u.n.", "u.s.", "u.s.a.", "vol.", "vs.",
];

/// Whether `text` loops: a small model's generation that repeats a phrase until its token limit ("[1]
/// (Copenhagen) Copenhagen [2] (Copenhagen) Copenhagen …"). At least 20 [`words`], fewer than 30 % of them
/// distinct; an answer of one to three sentences, even a list, has well over half its words distinct.
#[must_use]
pub fn repeats_itself(text: &str) -> bool {
    let all: Vec<String> = words(text).collect();
    let distinct: std::collections::HashSet<&str> = all.iter().map(String::as_str).collect();
    all.len() >= 20 && distinct.len() * 10 < all.len() * 3
}

/// Estimates the tokens of `text` as whitespace-separated words times 4/3, rounded up.
///
/// This is the usual rule of thumb for English under BPE tokenisers (about 0.75 words per token). A cheap,
/// deterministic estimate is worth more here than a model's tokeniser: it reports what refinement saved, sizes the
/// context to a budget and judges whether candidates hold enough text.
#[must_use]
pub fn estimate_tokens(text: &str) -> usize {
    text.split_whitespace().count().saturating_mul(4).div_ceil(3)
}

/// The cosine similarity of two vectors, summed in `f64` and clamped to `[-1, 1]`; 0 when the lengths differ,
/// either vector is zero, or the result is not finite.
#[must_use]
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0_f64, 0.0_f64, 0.0_f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    let c = dot / (na.sqrt() * nb.sqrt());
    if c.is_finite() { c.clamp(-1.0, 1.0) as f32 } else { 0.0 }
}

/// The sentences of `text`, trimmed: verbatim substrings, in order ([`sentence_spans`]).
#[must_use]
pub fn sentences(text: &str) -> Vec<&str> {
    sentence_spans(text).into_iter().map(|(start, end)| &text[start..end]).collect()
}

/// Byte ranges of the trimmed sentences of `text`, in order; empty pieces are dropped.
///
/// Sentences start from Unicode sentence boundaries (UAX #29). A piece runs on into the next when it ends in one
/// of the [`ABBREVIATIONS`] (`e.g.`, `Dr.`, `U.S.`, ...; opening brackets and quotes before it are ignored) or in a
/// name's initial (a capital letter and a period after a capitalised word, another initial or nothing), unless a
/// line break follows it; and when it ends without closing punctuation and the next piece starts in lowercase (a
/// hard-wrapped line).
#[must_use]
pub fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let mut raw = Vec::new();
    let mut offset = 0;
    for piece in text.split_sentence_bounds() {
        let start = offset + (piece.len() - piece.trim_start().len());
        let end = offset + piece.trim_end().len();
        offset += piece.len();
        if end > start {
            raw.push((start, end));
        }
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut group_start = None;
    for (i, &(start, end)) in raw.iter().enumerate() {
        let first = *group_start.get_or_insert(start);
        let sentence = &text[first..end];
        let runs_on = raw.get(i + 1).is_some_and(|&(next_start, next_end)| {
            let line_break = text[end..next_start].contains(['\n', '\r']);
            (!line_break && ends_with_abbreviation(sentence))
                || continues_lowercase(sentence, &text[next_start..next_end])
        });
        if !runs_on {
            out.push((first, end));
            group_start = None;
        }
    }
    out
}

/// Whether `sentence` ends in an abbreviation or a name's initial, whose period does not end the sentence.
fn ends_with_abbreviation(sentence: &str) -> bool {
    let mut tokens = sentence.split_whitespace().rev();
    let Some(last) = tokens.next() else { return false };
    let last = last.trim_start_matches(['(', '[', '"', '\'', '“', '‘']);
    if ABBREVIATIONS.iter().any(|a| last.eq_ignore_ascii_case(a)) {
        return true;
    }
    // A single capital ("F.") is an initial after a capitalised word or another initial ("John F. Kennedy",
    // "J. R. Tolkien") or at the start of a sentence ("J. Lind"); after a lowercase word ("vitamin C.") it ends
    // the sentence.
    let mut chars = last.chars();
    let initial = matches!((chars.next(), chars.next(), chars.next()), (Some(c), Some('.'), None) if c.is_uppercase());
    initial && tokens.next().is_none_or(|prev| prev.chars().next().is_some_and(char::is_uppercase))
}

/// Whether `sentence` runs on into `next`: no closing punctuation, and the next piece starts in lowercase.
fn continues_lowercase(sentence: &str, next: &str) -> bool {
    let open = !sentence.ends_with(['.', '!', '?', ':', ';', '…', '"', '”', '\'', '’', ')', ']']);
    open && next.chars().next().is_some_and(char::is_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_looping_generation_repeats_itself_and_an_answer_does_not() {
        let looped = "[1] (Copenhagen) Copenhagen [2] (Copenhagen) Copenhagen ".repeat(6);
        assert!(repeats_itself(&looped));
        for answer in [
            "The Red Kangaroo (Macropus rufus), the Antilopine Kangaroo, the Eastern and Western Grey Kangaroo of the \
             Macropus genus, and the smaller macropods closely related to the kangaroo. [1]",
            "Egypt borders Libya to the west, Sudan to the south, and the Gaza Strip and Israel to the east. [2]",
            "Yes. Yes. Yes. [1]",
            "",
        ] {
            assert!(!repeats_itself(answer), "{answer}");
        }
    }

    /// Runs `analyse` on `input` and compares its rendering with `expect`.
    fn check<'a, T: std::fmt::Debug>(analyse: impl Fn(&'a str) -> T, input: &'a str, expect: &str) {
        assert_eq!(format!("{:?}", analyse(input)), expect, "input: {input:?}");
    }

    #[test]
    fn sentences_respect_abbreviations_and_initials() {
        check(
            sentences,
            "Dr. Smith met Mr. Jones on Main St. in the U.S. capital. They talked, e.g. about vs. cases, i.e. law.",
            r#"["Dr. Smith met Mr. Jones on Main St. in the U.S. capital.", "They talked, e.g. about vs. cases, i.e. law."]"#,
        );
        check(
            sentences,
            "John F. Kennedy was born in 1917. J. Lind wrote (ca. 1753) about it.",
            r#"["John F. Kennedy was born in 1917.", "J. Lind wrote (ca. 1753) about it."]"#,
        );
        // A capital letter after a lowercase word ends the sentence.
        check(
            sentences,
            "Scurvy comes from a lack of vitamin C. Lemons prevent it.",
            r#"["Scurvy comes from a lack of vitamin C.", "Lemons prevent it."]"#,
        );
    }

    #[test]
    fn sentences_end_at_line_breaks_but_not_inside_wrapped_lines() {
        check(sentences, "- Take vitamin C.\n- See Dr.\nSmith.", r#"["- Take vitamin C.", "- See Dr.", "Smith."]"#);
        check(
            sentences,
            "A line that is hard\nwrapped in the middle. Next one.",
            r#"["A line that is hard\nwrapped in the middle.", "Next one."]"#,
        );
        check(sentences, "Heading\n\nThe text.", r#"["Heading", "The text."]"#);
        check(sentences, "  \n ", "[]");
    }

    #[test]
    fn sentence_spans_are_trimmed_verbatim_ranges() {
        let text = "  One sentence here.  Two.\n";
        check(sentence_spans, text, "[(2, 20), (22, 26)]");
        assert_eq!(&text[22..26], "Two.");
    }

    #[test]
    fn tokens_are_four_thirds_of_the_words_rounded_up() {
        check(estimate_tokens, "", "0");
        check(estimate_tokens, "one", "2");
        check(estimate_tokens, "one two three", "4");
        check(estimate_tokens, "  one\ntwo\tthree four ", "6");
        let by_words = [0, 1, 2, 3, 4, 5, 6, 9].map(|w| estimate_tokens(&"w ".repeat(w)));
        assert_eq!(by_words, [0, 2, 3, 4, 6, 7, 8, 12]);
    }

    #[test]
    fn cosine_is_defined_everywhere() {
        let cos = |(a, b): (&[f32], &[f32])| cosine(a, b);
        assert_eq!(cos((&[1.0, 1.0], &[2.0, 2.0])), 1.0);
        assert_eq!(cos((&[1.0, 0.0], &[-1.0, 0.0])), -1.0);
        assert_eq!(cos((&[1.0, 0.0], &[0.0, 3.0])), 0.0);
        // Undefined cases are 0: a zero vector, different lengths, overflow to infinity.
        assert_eq!(cos((&[0.0, 0.0], &[1.0, 0.0])), 0.0);
        assert_eq!(cos((&[1.0], &[1.0, 0.0])), 0.0);
        assert_eq!(cos((&[f32::INFINITY], &[1.0])), 0.0);
        assert_eq!(cos((&[], &[])), 0.0);
    }
}
