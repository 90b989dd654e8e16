//! Text analysis for lexical retrieval: tokenise, lowercase, drop stop words, stem.

use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

/// Lucene's default English stop set (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`), the one Pyserini's BEIR
/// baselines use. Kept short on purpose: longer lists (NLTK's 179 words) remove words such as "what" or "not" that
/// carry meaning in questions and claims.
pub const ENGLISH_STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
];

/// Tokens longer than this (in bytes) are dropped: they are base64 blobs, URLs or hashes, not words.
const MAX_TOKEN_BYTES: usize = 64;

/// The English analyzer: Unicode word segmentation (UAX #29, as Lucene's StandardTokenizer), possessive removal,
/// lowercasing, Lucene's stop words, and the Snowball English (Porter2) stemmer.
pub struct Analyzer {
    stemmer: Stemmer,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Analyzer(english)")
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::english()
    }
}

impl Analyzer {
    /// The English analyzer.
    #[must_use]
    pub fn english() -> Self {
        Self { stemmer: Stemmer::create(Algorithm::English) }
    }

    /// Calls `emit` with every analysed term of `text`, in order.
    pub fn for_each_term(&self, text: &str, mut emit: impl FnMut(&str)) {
        let mut lower = String::new();
        for word in text.unicode_words() {
            if word.len() > MAX_TOKEN_BYTES {
                continue;
            }
            lower.clear();
            lower.extend(word.chars().flat_map(char::to_lowercase));
            // Possessives: "patient's" -> "patient" (Lucene's EnglishPossessiveFilter).
            let word = lower.strip_suffix("'s").or_else(|| lower.strip_suffix("\u{2019}s")).unwrap_or(&lower);
            if word.is_empty() || ENGLISH_STOP_WORDS.contains(&word) {
                continue;
            }
            emit(&self.stemmer.stem(word));
        }
    }

    /// The analysed terms of `text`, in order.
    #[must_use]
    pub fn terms(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_term(text, |t| out.push(t.to_owned()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: &str) {
        assert_eq!(Analyzer::english().terms(input).join(" "), expect);
    }

    #[test]
    fn analyses_like_an_english_search_engine() {
        check("The patient's fevers were RISING quickly.", "patient fever were rise quick");
        check("COVID-19 and IL-6 in 1.5 mg/kg doses", "covid 19 il 6 1.5 mg kg dose");
        check("What is not known?", "what known");
        check("", "");
        check("   ...   ", "");
        check("Ünïcödé naïve café", "ünïcödé naïv café");
    }

    #[test]
    fn drops_overlong_tokens() {
        check(&format!("ok {}", "x".repeat(100)), "ok");
    }
}
