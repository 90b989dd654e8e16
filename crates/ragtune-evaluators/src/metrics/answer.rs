//! Answer-level metrics in the style of SQuAD: normalised token F1, answer containment, yes/no agreement, and
//! citation checks.
//!
//! Every comparison is made on [`normalize_answer`]'s form (lowercase, no punctuation, no articles, single
//! spaces), so `"The Eiffel Tower."` and `"eiffel tower"` are the same answer.
//! [`score_answer`] scores one prediction against every gold answer of a question and keeps the best; questions
//! whose gold answers are all "yes"/"no" are scored on polarity instead, since a fluent "Yes, it was." shares few
//! tokens with a gold "yes".
//!
//! ```
//! use ragtune_evaluators::metrics::answer::{normalize_answer, parse_citations, score_answer, token_f1};
//!
//! assert_eq!(normalize_answer("The  Eiffel Tower!"), "eiffel tower");
//! assert_eq!(token_f1("in the year 1889", "1889"), 0.5);
//!
//! let golds = vec!["Gustave Eiffel".to_owned(), "Eiffel".to_owned()];
//! let score = score_answer("It was designed by Gustave Eiffel [2].", &golds);
//! assert!(score.correct && !score.yes_no);
//!
//! let yes = score_answer("Yes, it was.", &["yes".to_owned(), "Yes.".to_owned()]);
//! assert!(yes.correct && yes.yes_no && yes.f1 == 1.0);
//!
//! assert_eq!(parse_citations("Paris [1][3], France [3, 2]."), [1, 3, 2]);
//! ```

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// SQuAD's `normalize_answer`: lowercase, remove punctuation, remove the articles "a", "an" and "the", and
/// collapse whitespace into single spaces (trimmed).
///
/// Punctuation here is every character that is neither alphanumeric nor whitespace.
/// On ASCII that is exactly Python's `string.punctuation`, as in SQuAD; beyond ASCII it also removes curly
/// quotes, dashes and symbols (`“`, `–`, `©`), which SQuAD's script keeps, while accented letters and other
/// scripts stay. As in SQuAD, removing punctuation joins what it separated: `"1,000"` becomes `"1000"`.
#[must_use]
pub fn normalize_answer(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower.chars().filter(|c| c.is_alphanumeric() || c.is_whitespace()).collect();
    let tokens: Vec<&str> = no_punct.split_whitespace().filter(|t| !matches!(*t, "a" | "an" | "the")).collect();
    tokens.join(" ")
}

/// The whitespace tokens of the normalised text.
fn tokens(s: &str) -> Vec<String> {
    normalize_answer(s).split(' ').filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// SQuAD's token F1 between a prediction and one gold answer: the harmonic mean of precision and recall of the
/// multiset of normalised tokens they share.
///
/// When either side normalises to nothing the score is 0.0, as in the SQuAD v1.1 script (SQuAD v2.0 gives 1.0
/// when both are empty; a gold answer that is empty cannot be scored meaningfully, so 0.0 is kept here).
#[must_use]
pub fn token_f1(prediction: &str, gold: &str) -> f32 {
    let predicted = tokens(prediction);
    let expected = tokens(gold);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in &expected {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &predicted {
        if let Some(n) = counts.get_mut(t.as_str())
            && *n > 0
        {
            *n -= 1;
            same += 1;
        }
    }
    if same == 0 {
        return 0.0;
    }
    // 2PR / (P + R) with P = same / |prediction| and R = same / |gold| simplifies to this, exactly.
    (2 * same) as f32 / (predicted.len() + expected.len()) as f32
}

/// Whether the normalised gold answer occurs in the normalised prediction as a contiguous run of whole tokens
/// (`"Paris"` is in `"It is Paris."`, `"par"` is not). A gold answer that normalises to nothing is never
/// contained.
#[must_use]
pub fn contains_answer(prediction: &str, gold: &str) -> bool {
    let expected = tokens(gold);
    if expected.is_empty() {
        return false;
    }
    tokens(prediction).windows(expected.len()).any(|w| w == expected.as_slice())
}

/// Words a model may put before its answer (`"Answer: Yes"`, `"Final answer: no"`); "a" needs no entry, since
/// normalisation already removed it (`"A: yes"`).
const FILLER: [&str; 6] = ["answer", "final", "short", "reply", "response", "well"];

/// The polarity of a yes/no answer: `Some(true)` when its first normalised word is "yes", `Some(false)` when it
/// is "no", after skipping leading filler such as `"Answer:"`; `None` otherwise.
///
/// `"Yes."`, `"yes, it is"`, `"**No**"` and `"Answer: No."` all count; `"Nobody"`, `"No one knows"` and
/// `"Yesterday"` do not.
#[must_use]
pub fn yes_no(text: &str) -> Option<bool> {
    let normalized = normalize_answer(text);
    let mut words = normalized.split(' ').skip_while(|w| FILLER.contains(w));
    match (words.next(), words.next()) {
        (Some("yes"), _) => Some(true),
        (Some("no"), Some("one")) => None,
        (Some("no"), _) => Some(false),
        _ => None,
    }
}

/// How one prediction scored against the gold answers of a question.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AnswerScore {
    /// Yes/no questions: the polarity agrees. Others: some gold answer is contained in the prediction.
    pub correct: bool,
    /// Yes/no questions: 1.0 when correct, else 0.0. Others: the best token F1 over the gold answers.
    pub f1: f32,
    /// Whether the question was scored as a yes/no question.
    pub yes_no: bool,
}

/// Scores a prediction against all gold answers of a question, keeping the best over the golds.
///
/// A question is a yes/no question when every gold answer has a polarity ([`yes_no`] is `Some`).
/// Then the prediction is correct when its polarity equals the majority polarity of the golds; when the golds
/// are split evenly either polarity is correct (a prediction without polarity never is), and `f1` is 1.0 when
/// correct, else 0.0.
/// Otherwise `correct` is whether any gold answer is contained in the prediction ([`contains_answer`]) and `f1`
/// is the best [`token_f1`].
/// Without gold answers nothing is correct: `correct` is false, `f1` 0.0 and `yes_no` false.
#[must_use]
pub fn score_answer(prediction: &str, golds: &[String]) -> AnswerScore {
    if golds.is_empty() {
        return AnswerScore { correct: false, f1: 0.0, yes_no: false };
    }
    let polarities: Option<Vec<bool>> = golds.iter().map(|g| yes_no(g)).collect();
    if let Some(polarities) = polarities {
        let yes = polarities.iter().filter(|p| **p).count();
        let no = polarities.len() - yes;
        let correct = match yes_no(prediction) {
            None => false,
            Some(_) if yes == no => true,
            Some(p) => p == (yes > no),
        };
        return AnswerScore { correct, f1: if correct { 1.0 } else { 0.0 }, yes_no: true };
    }
    let correct = golds.iter().any(|g| contains_answer(prediction, g));
    let f1 = golds.iter().map(|g| token_f1(prediction, g)).fold(0.0, f32::max);
    AnswerScore { correct, f1, yes_no: false }
}

/// Citation precision: the share of cited passage indices (1-based) for which `relevant` holds; `None` when
/// nothing was cited, since precision over no citations is undefined rather than perfect.
///
/// Indices are counted as given: pass [`parse_citations`]'s deduplicated list to count each passage once.
#[must_use]
pub fn citation_precision(cited: &[usize], relevant: impl Fn(usize) -> bool) -> Option<f32> {
    if cited.is_empty() {
        return None;
    }
    let hits = cited.iter().filter(|&&i| relevant(i)).count();
    Some(hits as f32 / cited.len() as f32)
}

/// The passage numbers cited in an answer with markers like `[1]`, `[2, 3]` or `[1][4]`: 1-based, deduplicated,
/// in order of first appearance.
///
/// A marker holds numbers separated by commas, semicolons or spaces, and nothing else; `[0]`, `[a]`, `[1-3]`,
/// `[]` and numbers too large for `usize` are not citations and are ignored.
#[must_use]
pub fn parse_citations(answer: &str) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        let inside = &rest[..close];
        if inside.contains('[') {
            // An inner `[` starts the marker that may be a citation (`[[1]]`); look again from there.
            continue;
        }
        if let Some(numbers) = marker_numbers(inside) {
            for n in numbers {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        rest = &rest[close + 1..];
    }
    out
}

/// The numbers of one citation marker's inside, or `None` when it is not a citation marker.
fn marker_numbers(inside: &str) -> Option<Vec<usize>> {
    let numbers: Vec<usize> = inside
        .split([',', ';', ' '])
        .filter(|part| !part.is_empty())
        .map(|part| match part.parse::<usize>() {
            Ok(n) if n >= 1 && part.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (!numbers.is_empty()).then_some(numbers)
}

/// Whether `sentence` contains the gold answer (normalised, whole tokens, contiguous): the check that knowledge
/// refinement kept the sentences that carry the answer.
///
/// The same test as [`contains_answer`]. A yes/no gold answer ("yes") is almost never in the evidence, so callers
/// should leave yes/no questions out of this check.
#[must_use]
pub fn sentence_has_answer(sentence: &str, gold: &str) -> bool {
    contains_answer(sentence, gold)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `score_answer(prediction, golds)` as `correct f1 yes_no` text.
    fn check(prediction: &str, golds: &[&str], expect: &str) {
        let golds: Vec<String> = golds.iter().map(|g| (*g).to_owned()).collect();
        let s = score_answer(prediction, &golds);
        let got = format!("correct={} f1={:.4} yes_no={}", s.correct, s.f1, s.yes_no);
        assert_eq!(got, expect, "prediction {prediction:?}, golds {golds:?}");
    }

    #[test]
    fn normalisation_follows_squad() {
        assert_eq!(normalize_answer("The Denver Broncos"), "denver broncos");
        assert_eq!(normalize_answer("  An apple, a pear & THE plum! "), "apple pear plum");
        assert_eq!(normalize_answer("Theory of the atom"), "theory of atom");
        assert_eq!(normalize_answer("U.S. $1,000"), "us 1000");
        assert_eq!(normalize_answer("the_end"), "theend");
        assert_eq!(normalize_answer("Saint-Étienne “basso” – 1915"), "saintétienne basso 1915");
        assert_eq!(normalize_answer("Zürich\tCAFÉ\n"), "zürich café");
        assert_eq!(normalize_answer(""), "");
        assert_eq!(normalize_answer("The."), "");
    }

    #[test]
    fn token_f1_is_squads() {
        // SQuAD dev examples (question 56be4db0acb8001400a502ec, "Which NFL team represented the AFC?").
        assert_eq!(token_f1("Denver Broncos", "Denver Broncos"), 1.0);
        assert_eq!(token_f1("the Denver Broncos", "Denver Broncos"), 1.0);
        // 1 shared token, precision 1/1, recall 1/2.
        assert_eq!(token_f1("Broncos", "Denver Broncos"), 2.0 / 3.0);
        // "cat sat" against "cat sat down": P = 1, R = 2/3, F1 = 0.8.
        assert_eq!(token_f1("The cat sat.", "a cat sat down"), 0.8);
        // Multiset overlap: "no no no" against "no" shares one token, not three.
        assert_eq!(token_f1("no no no", "no"), 0.5);
        assert_eq!(token_f1("Paris", "London"), 0.0);
        assert_eq!(token_f1("", ""), 0.0);
        assert_eq!(token_f1("", "Paris"), 0.0);
        assert_eq!(token_f1("Paris", "the"), 0.0);
        assert_eq!(token_f1("Zürich", "zürich!"), 1.0);
    }

    #[test]
    fn containment_is_by_whole_tokens() {
        assert!(contains_answer("It is Paris, France.", "paris"));
        assert!(contains_answer("It is Paris, France.", "Paris France"));
        assert!(!contains_answer("It is Paris, France.", "France Paris"));
        assert!(!contains_answer("Comparison", "par"));
        assert!(contains_answer("He was born in 1809.", "the 1809"));
        assert!(!contains_answer("anything", ""));
        assert!(!contains_answer("the end", "the"));
        assert!(!contains_answer("", "x"));
        assert!(sentence_has_answer("Lincoln was born on February 12, 1809.", "February 12, 1809"));
        assert!(!sentence_has_answer("Lincoln was born in Kentucky.", "1809"));
    }

    #[test]
    fn yes_no_variants() {
        for yes in ["yes", "Yes.", "YES!", "yes, it is", "**Yes**", "Answer: Yes", "Final answer: yes", "A: yes"] {
            assert_eq!(yes_no(yes), Some(true), "{yes:?}");
        }
        for no in ["No", "no.", "No, he did not.", "Answer: no", "  \"No\"", "Well, no."] {
            assert_eq!(yes_no(no), Some(false), "{no:?}");
        }
        for neither in ["", "Nobody", "Yesterday", "No one knows", "Maybe", "I think yes", "Totally."] {
            assert_eq!(yes_no(neither), None, "{neither:?}");
        }
    }

    #[test]
    fn scores_yes_no_questions_by_majority_polarity() {
        check("Yes, he was.", &["yes", "Yes."], "correct=true f1=1.0000 yes_no=true");
        check("No.", &["yes", "Yes."], "correct=false f1=0.0000 yes_no=true");
        check("No.", &["no", "yes", "No, never"], "correct=true f1=1.0000 yes_no=true");
        check("Yes", &["no", "yes", "No, never"], "correct=false f1=0.0000 yes_no=true");
        // An even split accepts either polarity, but not an answer without one.
        check("yes", &["yes", "no"], "correct=true f1=1.0000 yes_no=true");
        check("no", &["yes", "no"], "correct=true f1=1.0000 yes_no=true");
        check("It depends.", &["yes", "no"], "correct=false f1=0.0000 yes_no=true");
    }

    #[test]
    fn scores_other_questions_by_containment_and_best_f1() {
        check("Denver Broncos", &["Denver Broncos", "Broncos"], "correct=true f1=1.0000 yes_no=false");
        check("The Broncos won.", &["Denver Broncos"], "correct=false f1=0.5000 yes_no=false");
        check(
            "He was born in 1809 in Kentucky.",
            &["February 12, 1809", "1809"],
            "correct=true f1=0.2500 yes_no=false",
        );
        // One gold answer without polarity makes it an ordinary question.
        check("Yes.", &["Yes.", "Totally."], "correct=true f1=1.0000 yes_no=false");
        check("", &["Paris"], "correct=false f1=0.0000 yes_no=false");
        check("Paris", &[], "correct=false f1=0.0000 yes_no=false");
    }

    #[test]
    fn citations() {
        assert_eq!(parse_citations("A [1]. B [2, 3]. C [1][4]."), [1, 2, 3, 4]);
        assert_eq!(parse_citations("[3] then [1;2] and [2 3]"), [3, 1, 2]);
        assert_eq!(
            parse_citations("no markers, [0], [a], [1-3], [], [ ], [99999999999999999999999]"),
            Vec::<usize>::new()
        );
        assert_eq!(parse_citations("nested [[2]] and unclosed [5"), [2]);
        assert_eq!(parse_citations("[１] full-width digits are not citations"), Vec::<usize>::new());
        assert_eq!(parse_citations(""), Vec::<usize>::new());

        let relevant = |i: usize| i == 1 || i == 3;
        assert_eq!(citation_precision(&[1, 2, 3, 4], relevant), Some(0.5));
        assert_eq!(citation_precision(&[1], relevant), Some(1.0));
        assert_eq!(citation_precision(&[2], relevant), Some(0.0));
        assert_eq!(citation_precision(&[], relevant), None);
        assert_eq!(citation_precision(&parse_citations("[1][1][2]"), relevant), Some(0.5));
    }

    #[test]
    fn score_round_trips_through_json() {
        let score = AnswerScore { correct: true, f1: 0.5, yes_no: false };
        let json = serde_json::to_string(&score).unwrap();
        assert_eq!(json, r#"{"correct":true,"f1":0.5,"yes_no":false}"#);
        assert_eq!(serde_json::from_str::<AnswerScore>(&json).unwrap(), score);
    }
}
