//! The word-level text analysis every crate shares: word tokens, stop words, question words, keywords, the
//! Jaccard overlap of two sets and the LLM-free check of whether a passage supports a claim.
//!
//! It lives in core so that no crate keeps a private copy: the CRAG evaluator, refinement, the faithfulness judge,
//! the header boost, the query transforms, the web's triangulation and arXiv query, and the answer pipeline all see
//! the same words, so that a keyword one of them looks for is the keyword another scores, and a statement the judge
//! calls supported is supported in the triangulation table of the same answer.
//!
//! - [`words`]: lower-cased runs of alphanumeric characters; everything else separates words.
//! - [`STOP_WORDS`] and [`is_content_word`]: function words carry no topic, and words of fewer than
//!   [`MIN_CONTENT_CHARS`] characters are dropped with them.
//! - [`keywords`]: the distinct content words of a query, also without the [`REQUEST_WORDS`] of a request
//!   ("tell", "explain", "list", ...).
//! - [`QUESTION_WORDS`]: the words that open a question that is not yes/no.
//! - [`jaccard`] and [`word_set`]: the overlap of two sets, shared over all.
//! - [`lexical_support`] and [`supports`]: the share of a claim's [`content_tokens`] that a passage holds.
//!
//! What stays elsewhere on purpose: sentence splitting (Unicode sentence boundaries need a segmentation table,
//! which core does not carry; `ragtune_evaluators::text`), and the BM25 analyzer of retrieval (stemming, Lucene's
//! stop words), a defined scoring function that belongs to `ragtune-embed`.
//!
//! ```
//! use ragtune_core::text::{jaccard, keywords, supports, word_set, words};
//!
//! assert_eq!(words("Vitamin-C, 1,000 mg").collect::<Vec<_>>(), ["vitamin", "c", "1", "000", "mg"]);
//! assert_eq!(keywords("Please explain what causes scurvy in sailors"), ["causes", "scurvy", "sailors"]);
//! assert_eq!(jaccard(&word_set("vitamin C scurvy"), &word_set("scurvy and vitamin C")), 0.75);
//! assert!(supports("A lack of vitamin C causes scurvy.", "Scurvy is caused by a lack of vitamin C."));
//! ```

use std::collections::BTreeSet;

/// Words of fewer characters than this are never content words: they are mostly function words, and the few
/// that are not ("C" of "vitamin C") match too much by accident.
pub const MIN_CONTENT_CHARS: usize = 3;

/// Common English function words, lower-cased: words that carry no evidence of what a text is about.
///
/// The short ones matter only where words of fewer than [`MIN_CONTENT_CHARS`] characters are kept (a search
/// query's terms); [`is_content_word`] drops every short word anyway.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "also", "an", "and", "any", "are", "as", "at", "be",
    "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does",
    "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "her", "here",
    "hers", "herself", "him", "himself", "his", "how", "however", "in", "into", "is", "it", "its", "itself", "just",
    "many", "may", "might", "more", "most", "much", "must", "nor", "not", "now", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "out", "over", "own", "per", "same", "she", "should", "some", "such", "than", "that",
    "the", "their", "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "under", "until", "upon", "very", "via", "was", "were", "what", "when", "where", "which", "while", "who", "whom",
    "whose", "why", "will", "with", "within", "without", "would", "yes", "you", "your", "yours",
];

/// Words that make a question a request ("tell me", "explain", "list the ..."): stop words of a query, content
/// anywhere else ("His name was Lind").
pub const REQUEST_WORDS: &[&str] = &["tell", "explain", "describe", "please", "know", "give", "list", "name"];

/// Words that open a question that is not yes/no ("Who", "When", "How"), lower-cased.
pub const QUESTION_WORDS: &[&str] = &["who", "whom", "whose", "what", "which", "where", "when", "why", "how"];

/// The passing share of [`lexical_support`]: a claim is supported when at least this share of its content
/// tokens is in the passage.
pub const SUPPORT_THRESHOLD: f32 = 0.7;

/// The words of `text`, lower-cased: maximal runs of alphanumeric characters, so punctuation, symbols and
/// whitespace all separate words ("vitamin-C" is two words, "1,000" too).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The distinct [`words`] of `text`.
#[must_use]
pub fn word_set(text: &str) -> BTreeSet<String> {
    words(text).collect()
}

/// Whether `word` (lower-cased, as [`words`] returns it) is one of the [`STOP_WORDS`].
#[must_use]
pub fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.contains(&word)
}

/// Whether `word` (lower-cased) is one of the [`QUESTION_WORDS`].
#[must_use]
pub fn is_question_word(word: &str) -> bool {
    QUESTION_WORDS.contains(&word)
}

/// Whether `word` (lower-cased) carries content: at least [`MIN_CONTENT_CHARS`] characters and not a stop word.
#[must_use]
pub fn is_content_word(word: &str) -> bool {
    word.chars().count() >= MIN_CONTENT_CHARS && !is_stop_word(word)
}

/// The keywords of a query: its content words that are not [`REQUEST_WORDS`], each once, in order of first
/// appearance.
#[must_use]
pub fn keywords(query: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    words(query)
        .filter(|w| is_content_word(w) && !REQUEST_WORDS.contains(&w.as_str()))
        .filter(|w| seen.insert(w.clone()))
        .collect()
}

/// The Jaccard overlap of two sets: shared over all. Two empty sets are the same set (1); one empty set shares
/// nothing with a set that is not (0).
#[must_use]
pub fn jaccard<T: Ord>(a: &BTreeSet<T>, b: &BTreeSet<T>) -> f32 {
    let shared = a.intersection(b).count();
    let all = a.len() + b.len() - shared;
    if all == 0 {
        return 1.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let j = shared as f32 / all as f32;
    j
}

/// The content tokens of `text`, the evidence [`lexical_support`] compares: its content words
/// ([`is_content_word`]), each once, in order of first appearance; numbers are kept whatever their length, since a
/// wrong number is exactly what must not pass.
#[must_use]
pub fn content_tokens(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    words(text).filter(|t| is_number(t) || is_content_word(t)).filter(|t| seen.insert(t.clone())).collect()
}

/// The share of the `claim`'s tokens found among the `passage`'s (both [`content_tokens`]), in `[0, 1]`; 0 for a
/// claim without tokens. A token matches itself, and a word (not a number) of five characters or more matches a
/// word that starts with it and has at most three characters more ("documents"/"document", "caused"/"cause"): a
/// cheap stand-in for stemming.
#[must_use]
pub fn token_overlap(claim: &[String], passage: &[String]) -> f32 {
    if claim.is_empty() {
        return 0.0;
    }
    let found = claim.iter().filter(|t| passage.iter().any(|p| tokens_match(t, p))).count();
    #[allow(clippy::cast_precision_loss)]
    let share = found as f32 / claim.len() as f32;
    share
}

/// The LLM-free support score of `claim` in `passage`: [`token_overlap`] of their [`content_tokens`].
#[must_use]
pub fn lexical_support(claim: &str, passage: &str) -> f32 {
    token_overlap(&content_tokens(claim), &content_tokens(passage))
}

/// The LLM-free support check: a [`lexical_support`] of at least [`SUPPORT_THRESHOLD`].
#[must_use]
pub fn supports(claim: &str, passage: &str) -> bool {
    lexical_support(claim, passage) >= SUPPORT_THRESHOLD
}

fn is_number(token: &str) -> bool {
    token.chars().all(|c| c.is_ascii_digit())
}

fn tokens_match(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    if is_number(a) || is_number(b) {
        return false;
    }
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.chars().count() >= 5 && long.starts_with(short) && long.chars().count() - short.chars().count() <= 3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `analyse` on `input` and compares its rendering with `expect`.
    fn check<'a, T: std::fmt::Debug>(analyse: impl Fn(&'a str) -> T, input: &'a str, expect: &str) {
        assert_eq!(format!("{:?}", analyse(input)), expect, "input: {input:?}");
    }

    fn all_words(text: &str) -> Vec<String> {
        words(text).collect()
    }

    #[test]
    fn words_are_lowercased_alphanumeric_runs() {
        check(all_words, "Vitamin-C, 1,000 mg!", r#"["vitamin", "c", "1", "000", "mg"]"#);
        check(all_words, "Café NAÏVE 3rd", r#"["café", "naïve", "3rd"]"#);
        check(all_words, "  ... ", "[]");
        check(word_set, "the cat, The CAT!", r#"{"cat", "the"}"#);
    }

    #[test]
    fn content_words_drop_stop_words_and_short_words() {
        assert!(is_content_word("scurvy") && is_content_word("name") && is_content_word("100"));
        assert!(!is_content_word("the") && !is_content_word("however") && !is_content_word("of"));
        assert!(!is_content_word("c") && !is_content_word("11"));
        assert!(is_stop_word("of") && is_stop_word("the") && !is_stop_word("scurvy") && !is_stop_word("ai"));
        // The lists are lower-case and have no repeats.
        for list in [STOP_WORDS, REQUEST_WORDS, QUESTION_WORDS] {
            assert!(list.iter().all(|w| w.chars().all(char::is_lowercase)), "{list:?}");
            assert_eq!(list.iter().collect::<BTreeSet<_>>().len(), list.len(), "{list:?}");
        }
        // Every question word is a stop word: it never carries a query's topic.
        assert!(QUESTION_WORDS.iter().all(|w| is_stop_word(w)));
    }

    #[test]
    fn question_words_open_questions() {
        let first = |q: &str| words(q).next().is_some_and(|w| is_question_word(&w));
        assert!(first("Who appointed Stone?") && first("Whose idea was it?") && first("how long"));
        assert!(!first("Did Faraday marry?") && !first("Is it true?") && !first(""));
    }

    #[test]
    fn keywords_are_distinct_content_words_without_requests() {
        check(
            keywords,
            "What vitamin deficiency causes scurvy? Which VITAMIN, and why do we care about it?",
            r#"["vitamin", "deficiency", "causes", "scurvy", "care"]"#,
        );
        check(keywords, "Please tell me the name of the ship", r#"["ship"]"#);
        check(keywords, "what is it?", "[]");
        check(keywords, "", "[]");
    }

    #[test]
    fn jaccard_is_shared_over_all() {
        let set = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<BTreeSet<String>>();
        assert_eq!(jaccard(&set(&["a", "b"]), &set(&["b", "c"])), 1.0 / 3.0);
        assert_eq!(jaccard(&set(&["a"]), &set(&["a"])), 1.0);
        assert_eq!(jaccard(&set(&[]), &set(&["a"])), 0.0);
        assert_eq!(jaccard(&set(&["a"]), &set(&[])), 0.0);
        assert_eq!(jaccard(&set(&[]), &set(&[])), 1.0);
        assert_eq!(jaccard(&word_set("vitamin C scurvy"), &word_set("Scurvy, vitamin c!")), 1.0);
    }

    #[test]
    fn content_tokens_keep_numbers_and_drop_repeats() {
        check(content_tokens, "In 1753 Lind tested 12 sailors; the sailors had scurvy.", {
            r#"["1753", "lind", "tested", "12", "sailors", "scurvy"]"#
        });
        check(content_tokens, "It is of the", "[]");
    }

    #[test]
    fn support_is_the_share_of_the_claims_tokens_in_the_passage() {
        let score = |(claim, passage): (&str, &str)| lexical_support(claim, passage);
        // Exact words, and prefixes of five characters or more with at most three more ("caused"/"cause").
        assert_eq!(score(("Scurvy is caused by a lack of vitamin C.", "A lack of vitamin C can cause scurvy.")), 1.0);
        // "caused" and "causes": neither starts with the other.
        assert_eq!(score(("Scurvy is caused by a lack of vitamin C.", "A lack of vitamin C causes scurvy.")), 0.75);
        // "documents" holds "document" (one more character), "documentation" does not (five more).
        assert_eq!(score(("the documents", "one document")), 1.0);
        assert_eq!(score(("the documentation", "one document")), 0.0);
        // Numbers match only themselves.
        assert_eq!(score(("Lind tested 12 sailors", "Lind tested 120 sailors")), 0.75);
        // A claim without content tokens has no support.
        assert_eq!(score(("It is of the", "anything")), 0.0);
        assert!(supports("Lind tested 12 sailors", "Lind tested 12 sailors in 1753"));
        assert!(supports("Lind tested 12 sailors", "Lind tested 120 sailors"));
        assert!(!supports("Lind tested 12 sailors on a ship", "Lind tested 120 sailors"));
        assert!(!supports("The moon is made of cheese", "Osteomalacia softens the bones of adults"));
    }
}
