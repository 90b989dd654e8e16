//! The LLM-free (extractive) answer: one to three whole sentences of the context's prose, chosen by their
//! relevance to the question, each with its citation; "Yes" with the sentence that says so for a yes/no question
//! the context decides; an honest "not in the documents" otherwise.
//!
//! **Prose only.** A passage is read as Markdown line by line ([`blocks`]): front matter, headings (the header
//! crumbs), table rows, rules, HTML lines and link definitions are never quoted; fenced code is a block of its
//! own, quoted (fenced) only after the sentence that introduces it and only when the question asks for a command;
//! links keep their text and lose their address. A sentence the passage cut (the first one when the passage starts
//! mid-sentence, the last one when it stops mid-sentence) and a fragment without closing punctuation (a title,
//! list debris) are not quoted either ([`whole_sentences`]), nor is a sentence that asks something (a FAQ's or a
//! notebook's question answers nothing). Emphasis marks (`*`, `_`, `**`, `__`) are dropped.
//!
//! **Relevance** is lexical evidence weighted by rarity: the question's content words (its stop words of three
//! letters or more removed, [`is_long_stop_word`]) analysed like BM25's terms (Porter2 stems), each shared word worth `ln(1 + N / df)` over the `N`
//! candidate sentences, so a word every sentence has counts little. With `[pipeline] sentence_scorer =
//! "cross-encoder"` the trained relevance model scores them instead. The answer is the best sentence and up to two
//! more scoring at least [`SCORE_RATIO`] of it, in context order. Asked for a command, a sentence's code block
//! counts with it (the block's words are the sentence's too), so the introduction of the right command wins. On 400 questions of the CMU QA calibration pool
//! (not the reported ones), stems with rarity weights found the gold answer in 0.566 of the 219 non-yes/no answers
//! against 0.511 for the plain count of shared words (two sentences), at the same 58 words on average
//! (docs/experiments/2026-11-29-answers.md).
//!
//! **Yes/no questions** get "Yes" and the sentence that states the claim when one holds at least [`YES_COVERAGE`]
//! of the claim's content words; otherwise the answer says the documents do not decide it and quotes the closest
//! sentence. The extractive answer never says "No": on the same calibration pool every lexical sign of a denial
//! tried (a negation near the claim's words, a different number, a missing name) was wrong more often than right
//! (precision 1/8 to 8/31 against a base rate of 15 % "no"), so a denial is left to an LLM.

use std::collections::{BTreeMap, BTreeSet};

use ragtune_core::Candidate;
use ragtune_core::text::{self as core_text, MIN_CONTENT_CHARS};
use ragtune_embed::Analyzer;
use ragtune_evaluators::text;

use super::{ContextPassage, NO_DOCUMENTS, NO_INFO};

/// At most this many sentences make an extractive answer.
pub(super) const MAX_SENTENCES: usize = 3;

/// A further sentence joins the best one when it scores at least this share of the best's score (fitted on the CMU
/// QA calibration pool: 0.6 → 0.575 accuracy at 64 words per answer, 0.7 → 0.566 at 58, 0.8 → 0.553 at 51).
pub(super) const SCORE_RATIO: f32 = 0.7;

/// A yes/no question is answered "Yes" when a sentence holds at least this share of the claim's content words
/// (fitted on the calibration pool: 0.5 → 0.85 of 181 yes/no questions right, 0.6 → 0.82, 0.7 → 0.78, with more
/// left undecided).
pub(super) const YES_COVERAGE: f32 = 0.5;

/// The answer when CRAG judged the retrieval INCORRECT, no correction brought web results, and no sentence of the
/// context holds half the question's content terms ([`has_evidence`]).
pub(super) const ABSTAIN: &str = "The documents don't contain this information: the retrieved passages were judged \
                           irrelevant to the question and no correction found better evidence.";

/// A sentence of the context the extractive answer may quote.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AnswerSentence {
    /// Its passage's citation number.
    pub n: usize,
    /// Its passage's chunk.
    pub chunk_id: String,
    /// Its passage's document.
    pub doc_id: String,
    /// Its position among its passage's quotable sentences.
    pub position: usize,
    /// The sentence, whitespace collapsed.
    pub text: String,
    /// Distinct question terms it shares.
    pub overlap: usize,
    /// The rarity-weighted sum of the question terms it shares (module docs).
    pub relevance: f32,
    /// Its terms (stems), for the yes/no coverage.
    terms: BTreeSet<String>,
    /// The fenced code block that follows its paragraph, if any.
    pub code_after: Option<String>,
}

/// A block of a passage's text read as Markdown.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Block {
    /// A paragraph or list item, inline markup removed, its line breaks kept.
    Prose(String),
    /// The inside of a fenced code block.
    Code(String),
}

/// The blocks of `text`: paragraphs and list items as prose, fenced code as code; front matter, headings, table
/// rows, rules, setext underlines (with the heading line above them), HTML lines and link definitions dropped.
/// Plain text is paragraphs.
pub(super) fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut start = 0;
    if lines.first().is_some_and(|l| l.trim_end() == "---")
        && let Some(end) = lines.iter().skip(1).position(|l| matches!(l.trim_end(), "---" | "..."))
    {
        start = end + 2;
    }
    let mut out = Vec::new();
    let mut para: Vec<String> = Vec::new();
    let mut code: Option<(String, Vec<&str>)> = None;
    let flush = |para: &mut Vec<String>, out: &mut Vec<Block>| {
        if !para.is_empty() {
            out.push(Block::Prose(clean_inline(&para.join("\n"))));
            para.clear();
        }
    };
    for line in &lines[start..] {
        let t = line.trim();
        if let Some((fence, body)) = &mut code {
            if t.starts_with(fence.as_str()) && t.trim_start_matches(fence.chars().next().unwrap_or('`')).is_empty() {
                out.push(Block::Code(body.join("\n")));
                code = None;
            } else {
                body.push(line);
            }
            continue;
        }
        if let Some(fence) = fence_open(t) {
            flush(&mut para, &mut out);
            code = Some((fence, Vec::new()));
            continue;
        }
        if is_setext_underline(t) && !para.is_empty() {
            // The line above is a heading.
            para.pop();
            flush(&mut para, &mut out);
            continue;
        }
        if t.is_empty() || is_heading(t) || is_table_row(t) || is_rule(t) || is_html(t) || is_link_definition(t) {
            flush(&mut para, &mut out);
            continue;
        }
        let t = t.strip_prefix('>').map_or(t, str::trim_start);
        let (item, rest) = strip_list_marker(t);
        if item {
            flush(&mut para, &mut out);
        }
        if !rest.is_empty() {
            para.push(rest.to_owned());
        }
    }
    flush(&mut para, &mut out);
    if let Some((_, body)) = code {
        out.push(Block::Code(body.join("\n")));
    }
    out
}

/// The fence a line opens (three or more backticks or tildes), if it opens one.
fn fence_open(t: &str) -> Option<String> {
    let c = t.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let fence: String = t.chars().take_while(|x| *x == c).collect();
    (fence.len() >= 3).then_some(fence)
}

fn is_heading(t: &str) -> bool {
    let hashes = t.chars().take_while(|c| *c == '#').count();
    (1..=6).contains(&hashes) && t[hashes..].chars().next().is_none_or(char::is_whitespace)
}

/// A table row or its delimiter row: it starts with `|`, or it has two ` | ` separators.
fn is_table_row(t: &str) -> bool {
    t.starts_with('|') || t.matches(" | ").count() >= 2 || (t.contains('|') && t.chars().all(|c| "|-: ".contains(c)))
}

fn is_rule(t: &str) -> bool {
    let s: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    s.len() >= 3 && (s.chars().all(|c| c == '-') || s.chars().all(|c| c == '*') || s.chars().all(|c| c == '_'))
}

fn is_setext_underline(t: &str) -> bool {
    t.len() >= 2 && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
}

fn is_html(t: &str) -> bool {
    t.starts_with('<') && t.ends_with('>')
}

/// `[label]: address`.
fn is_link_definition(t: &str) -> bool {
    t.starts_with('[') && t.find("]:").is_some_and(|i| i > 1 && !t[1..i].contains(']'))
}

/// Whether `t` starts a list item (`- `, `* `, `+ `, `1. `, `1) `), and the line without its marker.
fn strip_list_marker(t: &str) -> (bool, &str) {
    for bullet in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = t.strip_prefix(bullet) {
            return (true, rest.trim_start());
        }
    }
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if (1..=3).contains(&digits)
        && let Some(rest) = t[digits..].strip_prefix(". ").or_else(|| t[digits..].strip_prefix(") "))
    {
        return (true, rest.trim_start());
    }
    (false, t)
}

/// `text` without inline markup: images removed, links reduced to their text (`[text](address)`,
/// `[text][label]`), autolinks to their address, `**`/`__` and `*`/`_` emphasis removed (a single `*` or `_` only
/// at a word's edge, so `2 * 3` and `snake_case` stay). Inline code keeps its backticks.
fn clean_inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['[', '!', '<', '*', '_']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let before = out.chars().next_back();
        let after = tail[1..].chars().next();
        if let Some(after) = tail.strip_prefix("![")
            && let Some((_, end)) = link_parts(after)
        {
            rest = &after[end..];
        } else if let Some(after) = tail.strip_prefix('[')
            && let Some((label, end)) = link_parts(after)
        {
            out.push_str(label);
            rest = &after[end..];
        } else if let Some(after) = tail.strip_prefix('<')
            && let Some(close) = after.find('>')
            && (after.starts_with("http://") || after.starts_with("https://"))
        {
            out.push_str(&after[..close]);
            rest = &after[close + 1..];
        } else if tail.starts_with("**") || tail.starts_with("__") {
            rest = &tail[2..];
        } else if (tail.starts_with('*') || tail.starts_with('_')) && emphasis_edge(before, after) {
            rest = &tail[1..];
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Whether a single `*` or `_` between `before` and `after` opens or closes emphasis: a word on one side (or
/// punctuation before it, as in `?*`), and a space, punctuation or the line's edge on the other.
fn emphasis_edge(before: Option<char>, after: Option<char>) -> bool {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let edge = |c: Option<char>| {
        c.is_none_or(|c| c.is_whitespace() || c.is_ascii_punctuation() || "\u{2014}\u{201c}\u{201d}".contains(c))
    };
    let mark = |c: Option<char>| c.is_some_and(|c| c.is_ascii_punctuation());
    (edge(before) && word(after)) || ((word(before) || mark(before)) && edge(after))
}

/// For the text after a link's `[`: its label and the byte length of `label](address)` or `label][ref]`.
fn link_parts(after: &str) -> Option<(&str, usize)> {
    let close = after.find(']')?;
    let label = &after[..close];
    if label.contains('[') || label.contains('\n') {
        return None;
    }
    let tail = &after[close + 1..];
    let (open, shut) = match tail.chars().next() {
        Some('(') => ('(', ')'),
        Some('[') => ('[', ']'),
        _ => return None,
    };
    let _ = open;
    let end = tail.find(shut)?;
    if tail[..end].contains(char::is_whitespace) && shut == ']' {
        return None;
    }
    Some((label, close + 1 + end + 1))
}

/// The sentences of `text` an answer may quote, in order, each with the code block that follows its paragraph:
/// whole sentences of its prose blocks with at least four words, three of them alphabetic, that end in closing
/// punctuation (or run to twelve words or more, the length of a sentence that lost its period rather than a
/// title), and do not ask anything (a question in a FAQ, a quiz or a lab notebook answers nothing). The first sentence is left out when it starts in lowercase (the passage starts mid-sentence) and the
/// last one when it does not end in closing punctuation (the passage stops mid-sentence).
pub(super) fn whole_sentences(text: &str) -> Vec<(String, Option<String>)> {
    let blocks = blocks(text);
    let mut out = Vec::new();
    let last_prose = blocks.iter().rposition(|b| matches!(b, Block::Prose(_)));
    let mut first = true;
    for (b, block) in blocks.iter().enumerate() {
        let Block::Prose(prose) = block else { continue };
        let code_after = match blocks.get(b + 1) {
            Some(Block::Code(code)) if !code.trim().is_empty() => Some(code.clone()),
            _ => None,
        };
        let spans = text::sentence_spans(prose);
        for (i, &(s, e)) in spans.iter().enumerate() {
            let sentence = prose[s..e].split_whitespace().collect::<Vec<_>>().join(" ");
            // A dash left from "*Question?* — answer" or a list's separator is not the sentence's.
            let sentence = sentence.trim_start_matches(['\u{2014}', '\u{2013}', ' ']).to_owned();
            let starts_cut = first && sentence.chars().next().is_some_and(char::is_lowercase);
            first = false;
            // A lead-in ("… is the name of:") is a sentence only before the code block it introduces.
            let lead_in = sentence.ends_with(':') && code_after.is_none();
            let closed = ends_closed(&sentence) && !lead_in;
            let ends_cut = Some(b) == last_prose && i + 1 == spans.len() && !closed;
            let words = sentence.split_whitespace().count();
            let alphabetic = sentence.split_whitespace().filter(|w| w.chars().any(char::is_alphabetic)).count();
            let question = is_question(&sentence);
            if starts_cut || ends_cut || lead_in || question || words < 4 || alphabetic < 3 || (!closed && words < 12) {
                continue;
            }
            out.push((sentence, code_after.clone()));
        }
    }
    out
}

/// Whether `sentence` asks something: a question mark outside inline code (at its end, or inside, as in
/// "*Question?* — notes", which does not split into sentences once the emphasis is gone).
fn is_question(sentence: &str) -> bool {
    sentence.split('`').step_by(2).any(|prose| prose.contains('?'))
}

/// What may close a sentence after its punctuation: quotes, brackets, emphasis and code marks.
const CLOSERS: [char; 8] = ['"', '\'', ')', ']', '\u{201d}', '\u{2019}', '*', '`'];

/// Whether `sentence` ends in closing punctuation, before any closing quotes or brackets.
fn ends_closed(sentence: &str) -> bool {
    sentence.trim_end_matches(CLOSERS).ends_with(['.', '!', '?', '…', ':', ';'])
}

/// The terms of `text` as BM25 analyses them (Porter2 stems), each once.
fn terms(analyzer: &Analyzer, text: &str) -> BTreeSet<String> {
    analyzer.terms(text).into_iter().collect()
}

/// Whether `word` is one of core's stop words of at least [`MIN_CONTENT_CHARS`] characters.
///
/// The extractive answer keeps the question's two-letter words, function words too ("do", "is"): it was measured
/// that way, and the analyser drops the ones Lucene lists anyway.
fn is_long_stop_word(word: &str) -> bool {
    word.chars().count() >= MIN_CONTENT_CHARS && core_text::is_stop_word(word)
}

/// The question's content terms: its words that are not [long stop words](is_long_stop_word) (nor single
/// letters), analysed.
fn question_terms(analyzer: &Analyzer, question: &str) -> BTreeSet<String> {
    core_text::words(question)
        .filter(|w| !is_long_stop_word(w) && (w.chars().count() >= 2 || w.chars().all(|c| c.is_ascii_digit())))
        .flat_map(|w| analyzer.terms(&w))
        .collect()
}

/// Every quotable sentence of the context, in context order, with its relevance to the question (module docs).
pub(super) fn answer_sentences(question: &str, context: &[ContextPassage]) -> Vec<AnswerSentence> {
    let analyzer = Analyzer::english();
    let q = question_terms(&analyzer, question);
    // Asked for a command, a sentence and the code block after it are one answer: the block's words count too.
    let command = asks_for_command(question);
    let mut out = Vec::new();
    for p in context {
        for (position, (sentence, code_after)) in whole_sentences(&p.text).into_iter().enumerate() {
            let mut terms = terms(&analyzer, &sentence);
            if command && let Some(code) = &code_after {
                terms.extend(analyzer.terms(code));
            }
            let overlap = terms.intersection(&q).count();
            out.push(AnswerSentence {
                n: p.n,
                chunk_id: p.chunk_id.clone(),
                doc_id: p.doc_id.clone(),
                position,
                text: sentence,
                overlap,
                relevance: 0.0,
                terms,
                code_after,
            });
        }
    }
    let mut df: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &out {
        for t in s.terms.intersection(&q) {
            *df.entry(t.as_str()).or_default() += 1;
        }
    }
    let n = out.len() as f32;
    let weights: BTreeMap<String, f32> =
        df.into_iter().map(|(t, d)| (t.to_owned(), (1.0 + n / d as f32).ln())).collect();
    for s in &mut out {
        s.relevance = s.terms.iter().filter_map(|t| weights.get(t)).sum();
    }
    out
}

/// Whether some quotable sentence of `context` holds at least half of the question's content terms: evidence the
/// extractive answer can quote even when CRAG judged the retrieval INCORRECT (an evaluator without embeddings
/// judges a two-document corpus harshly), so that only a retrieval judged INCORRECT *and* without such a
/// sentence abstains.
pub(super) fn has_evidence(question: &str, context: &[ContextPassage]) -> bool {
    let analyzer = Analyzer::english();
    let q = question_terms(&analyzer, question);
    !q.is_empty()
        && context.iter().flat_map(|p| whole_sentences(&p.text)).any(|(s, _)| {
            let shared = terms(&analyzer, &s).intersection(&q).count();
            shared as f32 >= EVIDENCE_COVERAGE * q.len() as f32
        })
}

/// The share of the question's content terms a sentence must hold to count as evidence ([`has_evidence`]).
pub(super) const EVIDENCE_COVERAGE: f32 = 0.5;

/// Whether any sentence shares a term with the question: without one the answer is [`NO_INFO`] whatever scores
/// the sentences (an honest "not in the documents", which smart retry accepts), and no model is asked.
pub(super) fn any_overlap(sentences: &[AnswerSentence]) -> bool {
    sentences.iter().any(|s| s.overlap > 0)
}

/// Whether the question asks for a command ("How do I run …", "Which command …"): then the code block after the
/// best sentence is quoted with it.
pub(super) fn asks_for_command(question: &str) -> bool {
    let lower = question.to_lowercase();
    let words: Vec<String> = core_text::words(&lower).collect();
    let has = |w: &str| words.iter().any(|x| x == w);
    has("command")
        || has("commands")
        || has("cli")
        || ((lower.starts_with("how do") || lower.starts_with("how can") || lower.starts_with("how to"))
            && (has("run") || has("install") || has("start") || has("invoke") || has("use")))
}

/// The extractive answer from `sentences`: [`NO_DOCUMENTS`] for an empty context, [`NO_INFO`] when no sentence
/// shares a term with the question; for a yes/no question, "Yes" with the sentence that states the claim or the
/// closest sentence with "the documents don't say"; else the best sentence and up to two more scoring at least
/// [`SCORE_RATIO`] of it, each with its citation, in context order. Best is the highest `scores` (a
/// cross-encoder's logits, one per sentence, compared through their sigmoid: every sentence competes), or without
/// scores the highest relevance (sentences sharing no term are out); ties go to the earlier sentence.
pub(super) fn pick_sentences(
    question: &str,
    sentences: Vec<AnswerSentence>,
    scores: Option<&[f32]>,
    context_empty: bool,
) -> String {
    if context_empty {
        return NO_DOCUMENTS.to_owned();
    }
    if !any_overlap(&sentences) {
        return NO_INFO.to_owned();
    }
    if ragtune_llm::prompts::is_yes_no_question(question)
        && let Some(answer) = yes_no_answer(question, &sentences)
    {
        return answer;
    }
    let mut ranked: Vec<(f32, AnswerSentence)> = match scores {
        Some(scores) => scores.iter().map(|x| 1.0 / (1.0 + (-x).exp())).zip(sentences).collect(),
        None => sentences.into_iter().filter(|s| s.overlap > 0).map(|s| (s.relevance, s)).collect(),
    };
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.n.cmp(&b.1.n)).then(a.1.position.cmp(&b.1.position)));
    let Some(top) = ranked.first().map(|(score, s)| (*score, s.code_after.clone())) else {
        return NO_INFO.to_owned();
    };
    // The same sentence in two overlapping passages is quoted once.
    let mut seen = BTreeSet::new();
    let mut best: Vec<AnswerSentence> = ranked
        .into_iter()
        .filter(|(_, s)| seen.insert(s.text.to_lowercase()))
        .take(MAX_SENTENCES)
        .filter(|(score, _)| *score >= SCORE_RATIO * top.0)
        .map(|(_, s)| s)
        .collect();
    best.sort_by(|a, b| a.n.cmp(&b.n).then(a.position.cmp(&b.position)));
    let mut answer = best.iter().map(cited).collect::<Vec<_>>().join(" ");
    if asks_for_command(question)
        && let Some(code) = top.1
    {
        answer.push_str(&format!("\n\n```\n{}\n```", code.trim_end()));
    }
    answer
}

fn cited(s: &AnswerSentence) -> String {
    format!("{} [{}]", s.text, s.n)
}

/// Words that open or carry a yes/no question without being part of its claim.
const AUXILIARIES: &[&str] = &[
    "is", "are", "was", "were", "am", "be", "do", "does", "did", "has", "have", "had", "can", "could", "would",
    "should", "will", "shall", "may", "might", "must", "it", "true",
];

/// The answer to a yes/no question from the sentence holding most of its claim's content words (module docs);
/// `None` when the question has no content words.
fn yes_no_answer(question: &str, sentences: &[AnswerSentence]) -> Option<String> {
    let analyzer = Analyzer::english();
    let claim: BTreeSet<String> = core_text::words(question)
        .skip(1)
        .filter(|w| !is_long_stop_word(w) && !AUXILIARIES.contains(&w.as_str()) && w.chars().count() >= 2)
        .flat_map(|w| analyzer.terms(&w))
        .collect();
    if claim.is_empty() {
        return None;
    }
    let coverage = |s: &AnswerSentence| s.terms.intersection(&claim).count() as f32 / claim.len() as f32;
    let best = sentences.iter().enumerate().max_by(|(i, a), (j, b)| {
        coverage(a).total_cmp(&coverage(b)).then(a.relevance.total_cmp(&b.relevance)).then(j.cmp(i))
    })?;
    let best = best.1;
    Some(if coverage(best) >= YES_COVERAGE {
        format!("Yes. {}", cited(best))
    } else {
        format!("The documents don't say whether this is so; the closest they come: {}", cited(best))
    })
}

/// The context of `ContextMode::Sentences`: the sentences of `passages` most relevant to `question`
/// ([`answer_sentences`]), best first while their estimated tokens fit `budget` (the first always), each passage
/// keeping its kept sentences in their order; passages with none are left out. When no sentence shares a term
/// with the question the passages stay whole (the assembler's budget cuts them): the generator then sees what
/// retrieval found rather than nothing. The report says how many sentences were kept of how many.
pub(super) fn best_sentences(
    question: &str,
    passages: Vec<ContextPassage>,
    budget: usize,
) -> (Vec<ContextPassage>, super::run::Report) {
    let mut passages = passages;
    // Numbered in order for the sentences to know their passage; the assembler numbers the context again.
    for (i, p) in passages.iter_mut().enumerate() {
        p.n = i + 1;
    }
    let sentences = answer_sentences(question, &passages);
    let report = super::run::Report::new("sentences").detail("sentences", sentences.len()).detail("budget", budget);
    let mut ranked: Vec<usize> = (0..sentences.len()).filter(|&i| sentences[i].overlap > 0).collect();
    if ranked.is_empty() {
        return (passages, report.detail("kept", 0).detail("fallback", "no sentence shares a term: whole passages"));
    }
    ranked.sort_by(|&a, &b| {
        let (a, b) = (&sentences[a], &sentences[b]);
        b.relevance.total_cmp(&a.relevance).then(a.n.cmp(&b.n)).then(a.position.cmp(&b.position))
    });
    let mut used = 0usize;
    let mut kept: BTreeSet<(usize, usize)> = BTreeSet::new();
    for i in ranked {
        // The sentence, then the one after it in its passage: an answer often follows the sentence that names
        // the question's subject (on the calibration pool, a gold answer was in a 300-token context of such pairs
        // 3 points more often than in one of single sentences).
        let next = sentences.get(i + 1).filter(|n| n.n == sentences[i].n);
        for s in std::iter::once(&sentences[i]).chain(next) {
            let tokens = text::estimate_tokens(&s.text);
            if kept.contains(&(s.n, s.position)) || (!kept.is_empty() && used + tokens > budget) {
                continue;
            }
            used += tokens;
            kept.insert((s.n, s.position));
        }
    }
    let out: Vec<ContextPassage> = passages
        .into_iter()
        .filter_map(|mut p| {
            let own: Vec<&str> = sentences
                .iter()
                .filter(|s| s.n == p.n && kept.contains(&(s.n, s.position)))
                .map(|s| s.text.as_str())
                .collect();
            if own.is_empty() {
                return None;
            }
            p.text = own.join(" ");
            Some(p)
        })
        .collect();
    (out, report.detail("kept", kept.len()).detail("tokens", used))
}

/// The sentences as candidates for a [`Reranker`](ragtune_core::Reranker): each its own chunk (id
/// `<chunk>#s<position>`, no title, so the model reads the sentence alone).
pub(super) fn sentence_candidates(sentences: &[AnswerSentence]) -> Vec<Candidate> {
    sentences
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let chunk = ragtune_core::Chunk::new(format!("{}#s{}", s.chunk_id, s.position), &s.doc_id, &s.text);
            let rank = u32::try_from(i + 1).unwrap_or(u32::MAX);
            Candidate::from_hit(ragtune_core::ScoredHit { chunk, score: s.relevance }, "extractive", rank)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::tests::passage;
    use super::*;

    fn answer(question: &str, context: &[ContextPassage]) -> String {
        pick_sentences(question, answer_sentences(question, context), None, context.is_empty())
    }

    #[test]
    fn the_best_sentences_are_cited_in_context_order() {
        let ctx = [
            passage(1, "a", "Ships carried many sailors. Scurvy is caused by a lack of vitamin C."),
            passage(2, "b", "Citrus fruit prevents scurvy in sailors."),
        ];
        // "scurvy" is in two sentences, "causes" (caused) and "sailors" in one or two: the rarer words decide.
        assert_eq!(
            answer("what causes scurvy in sailors?", &ctx),
            "Scurvy is caused by a lack of vitamin C. [1] Citrus fruit prevents scurvy in sailors. [2]"
        );
        assert_eq!(answer("anything", &[]), NO_DOCUMENTS);
        assert_eq!(answer("stock markets", &ctx), NO_INFO);
    }

    #[test]
    fn a_sentence_in_two_overlapping_passages_is_quoted_once_and_a_lead_in_not_at_all() {
        let text = "Avogadro is most noted for his contributions to the theory of molarity. Santiago is the name of:";
        let ctx = [passage(1, "a", text), passage(2, "b", text)];
        assert_eq!(
            answer("Who is noted for the theory of molarity?", &ctx),
            "Avogadro is most noted for his contributions to the theory of molarity. [1]"
        );
        assert!(whole_sentences(text).iter().all(|(s, _)| !s.ends_with(':')));
    }

    #[test]
    fn evidence_is_a_sentence_holding_half_the_questions_terms() {
        let ctx = [passage(1, "a", "Scurvy is a disease caused by a lack of vitamin C. Ships carried many sailors.")];
        assert!(has_evidence("What causes scurvy?", &ctx));
        assert!(!has_evidence("How many goals did the football team score against the ships?", &ctx));
        assert!(!has_evidence("What causes scurvy?", &[]));
    }

    #[test]
    fn a_sentence_far_below_the_best_is_left_out() {
        let ctx = [passage(
            1,
            "a",
            "Abraham Lincoln was the sixteenth president of the United States. Lincoln grew up in Kentucky and \
             Indiana. The United States has fifty states.",
        )];
        assert_eq!(
            answer("Who was the sixteenth president of the United States?", &ctx),
            "Abraham Lincoln was the sixteenth president of the United States. [1]"
        );
    }

    #[test]
    fn scored_sentences_are_picked_by_score_and_the_no_info_gate_stays() {
        let ctx = [
            passage(1, "a", "Ships carried many sailors. Scurvy is caused by a lack of vitamin C."),
            passage(2, "b", "Citrus fruit prevents scurvy in sailors. Lemons are a citrus fruit."),
        ];
        let q = "what causes scurvy in sailors?";
        let sentences = answer_sentences(q, &ctx);
        let ids: Vec<String> = sentence_candidates(&sentences).iter().map(|c| c.chunk.id.clone()).collect();
        assert_eq!(ids, ["a#s0", "a#s1", "b#s0", "b#s1"]);
        assert_eq!(
            sentence_candidates(&sentences)[1].chunk.indexable_text(),
            "Scurvy is caused by a lack of vitamin C."
        );
        let pick = |scores: &[f32]| pick_sentences(q, sentences.clone(), Some(scores), false);
        // The scores choose (through their sigmoid), a sentence sharing no word included, in context order.
        assert_eq!(
            pick(&[-3.0, 2.5, -1.0, 4.0]),
            "Scurvy is caused by a lack of vitamin C. [1] Lemons are a citrus fruit. [2]"
        );
        // Ties go to the earlier sentences, three at most.
        assert_eq!(
            pick(&[1.0, 1.0, 1.0, 1.0]),
            "Ships carried many sailors. [1] Scurvy is caused by a lack of vitamin C. [1] Citrus fruit prevents \
             scurvy in sailors. [2]"
        );
        let none = answer_sentences("stock markets", &ctx);
        assert_eq!(pick_sentences("stock markets", none, Some(&[9.0, 9.0, 9.0, 9.0]), false), NO_INFO);
        assert_eq!(pick_sentences(q, Vec::new(), Some(&[]), true), NO_DOCUMENTS);
    }

    #[test]
    fn yes_no_questions_are_decided_from_the_sentence_that_states_the_claim() {
        let ctx = [passage(
            1,
            "a",
            "Michael Faraday married Sarah Barnard in 1821. Faraday lectured at the Royal Institution for many years.",
        )];
        assert_eq!(
            answer("Did Faraday marry Sarah Barnard?", &ctx),
            "Yes. Michael Faraday married Sarah Barnard in 1821. [1]"
        );
        // Too little of the claim is in the context: the answer says the documents don't decide, and is no "no".
        let undecided = answer("Did Faraday ever visit Japan or China by steamship?", &ctx);
        assert!(undecided.starts_with("The documents don't say whether this is so"), "{undecided}");
        assert_eq!(ragtune_evaluators::metrics::answer::yes_no(&undecided), None);
        assert!(ragtune_evaluators::faithfulness::is_no_info(&undecided));
    }

    #[test]
    fn markdown_structure_is_never_quoted_as_prose() {
        let doc = "---\ntitle: Store\nlayout: page\n---\n# The store\n\n## Crash safety\n\nThe store survives a \
                   crash by writing every batch to a journal first.\n\n| setting | default |\n|---|---|\n| store \
                   journal crash | on |\n\n```sh\nragtune index docs/ --store .ragtune\n```\n\n- [docs/cli.md](docs/cli.md)\n\
                   - See the [reference](https://example.com/ref) for how the journal survives a crash.\n\nStore \
                   crash\n=====\n";
        let quoted: Vec<String> = whole_sentences(doc).into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            quoted,
            [
                "The store survives a crash by writing every batch to a journal first.",
                "See the reference for how the journal survives a crash."
            ]
        );
        let ctx = [passage(1, "a", doc)];
        let a = answer("How does the store survive a crash?", &ctx);
        assert!(!a.contains('|') && !a.contains("```") && !a.contains('#') && !a.contains("title:"), "{a}");
    }

    #[test]
    fn a_question_in_the_text_is_never_the_answer_and_emphasis_is_dropped() {
        // A lab notebook that lists the question it studied, then what it found.
        let doc = "1. *How does the embedded store survive a crash?* — the answer quoted the requirement.\n\nA crash \
                   leaves the store at the last _committed_ batch; redb repairs its file on the next open.\n\nThe \
                   field `max_batch_size` and 2 * 3 stay as written.";
        let quoted: Vec<String> = whole_sentences(doc).into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            quoted,
            [
                "A crash leaves the store at the last committed batch; redb repairs its file on the next open.",
                "The field `max_batch_size` and 2 * 3 stay as written."
            ]
        );
        let a = answer("How does the embedded store survive a crash?", &[passage(1, "a", doc)]);
        assert!(a.starts_with("A crash leaves the store") && !a.contains('?'), "{a}");
    }

    #[test]
    fn a_command_question_quotes_the_code_block_after_the_best_sentence() {
        let doc = "Run an evaluation on SciFact with the eval command of xtask:\n\n```sh\ncargo xtask eval --dataset \
                   ../shared/data/beir/scifact\n```\n\nThe report says nDCG@10 for each retriever.";
        let ctx = [passage(1, "a", doc)];
        assert_eq!(
            answer("How do I run an evaluation on SciFact?", &ctx),
            "Run an evaluation on SciFact with the eval command of xtask: [1]\n\n```\ncargo xtask eval --dataset \
             ../shared/data/beir/scifact\n```"
        );
        // Not asked for a command: prose only.
        let a = answer("What does an evaluation on SciFact report?", &ctx);
        assert!(!a.contains("```"), "{a}");
    }

    #[test]
    fn sentences_the_passage_cut_are_not_quoted() {
        let text = "of the river, which floods every spring. The town was founded in 1820 by settlers. Its mayor is \
                    elected every four years by the";
        let quoted: Vec<String> = whole_sentences(text).into_iter().map(|(s, _)| s).collect();
        assert_eq!(quoted, ["The town was founded in 1820 by settlers."]);
    }

    #[test]
    fn the_sentence_context_keeps_the_best_sentences_under_the_budget_in_context_order() {
        let passages = vec![
            passage(0, "a", "Ships carried many sailors. Scurvy is caused by a lack of vitamin C in the diet."),
            passage(0, "b", "Rickets softens the bones of children. Citrus fruit prevents scurvy in sailors."),
            passage(0, "c", "Stock markets rose on Tuesday as investors bought shares."),
        ];
        let q = "What causes scurvy in sailors?";
        // Room for two sentences: the two best, each in its passage, the passage without one left out.
        let (out, _) = best_sentences(q, passages.clone(), 25);
        let texts: Vec<(&str, &str)> = out.iter().map(|p| (p.chunk_id.as_str(), p.text.as_str())).collect();
        assert_eq!(
            texts,
            [
                ("a", "Scurvy is caused by a lack of vitamin C in the diet."),
                ("b", "Citrus fruit prevents scurvy in sailors.")
            ]
        );
        // The best sentence is kept even when it alone is over the budget.
        let (out, _) = best_sentences(q, passages.clone(), 1);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].text, "Scurvy is caused by a lack of vitamin C in the diet.");
        // Nothing shares a term: the passages stay whole.
        let (out, report) = best_sentences("quantum chromodynamics", passages.clone(), 30);
        assert_eq!(
            out,
            passages.iter().enumerate().map(|(i, p)| ContextPassage { n: i + 1, ..p.clone() }).collect::<Vec<_>>()
        );
        assert!(format!("{report:?}").contains("no sentence shares a term"), "{report:?}");
    }

    /// A Markdown line that is structure, not prose, with a marker word no prose line has.
    fn debris() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}".prop_map(|w| format!("| debris {w} | debris |")),
            Just("|---|---|".to_owned()),
            "[a-z]{1,8}".prop_map(|w| format!("## debris {w}")),
            "[a-z]{1,8}".prop_map(|w| format!("```\ndebris {w} --flag\n```")),
            "[a-z]{1,8}".prop_map(|w| format!("- [debris {w}](https://x.org/{w})")),
            "[a-z]{1,8}".prop_map(|w| format!("<div>debris {w}</div>")),
            "[a-z]{1,8}".prop_map(|w| format!("[debris{w}]: https://x.org/{w}")),
        ]
    }

    /// A prose sentence.
    fn prose() -> impl Strategy<Value = String> {
        proptest::collection::vec("[a-z]{2,9}", 4..12).prop_map(|w| {
            let mut s = w.join(" ");
            if let Some(first) = s.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            format!("{s}.")
        })
    }

    proptest! {
        #[test]
        fn generated_markdown_debris_is_never_quoted(
            parts in proptest::collection::vec(prop_oneof![debris(), prose()], 1..12),
            front_matter in any::<bool>(),
        ) {
            let mut doc = parts.join("\n\n");
            if front_matter {
                doc = format!("---\ntitle: debris page\n---\n{doc}");
            }
            let ctx = [passage(1, "a", &doc)];
            for (sentence, _) in whole_sentences(&doc) {
                prop_assert!(!sentence.contains("debris"), "quoted {sentence:?} from {doc:?}");
            }
            let a = answer("debris flag page", &ctx);
            prop_assert!(!a.contains('|') && !a.contains("```") && !a.contains("## "), "{a}");
            // Every prose sentence survives.
            let prose_count = parts.iter().filter(|p| !p.contains("debris") && !p.starts_with('|')).count();
            prop_assert_eq!(whole_sentences(&doc).len(), prose_count);
        }
    }
}
