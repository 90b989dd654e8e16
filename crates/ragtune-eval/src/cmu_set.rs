//! A retrieval set of long documents built from the CMU Wikipedia QA dataset (`ragtune eval build-cmu-set`).
//!
//! The articles are Wikipedia pages of 300 to 12,000 words (median 4,500), far past the embedding model's window, so
//! the set measures long-document retrieval on real text. The builder writes a BEIR directory that
//! `ragtune eval retrieval` and `ragtune eval crag` read unchanged:
//!
//! - `corpus.jsonl`: one document per distinct article text, `_id` the article id (`S08/set1/a1`), `title` the
//!   article title, `text` the cleaned article (`.txt.clean`). With [`CmuSetOptions::markdown`] the text starts
//!   with `# {title}` and the document is marked `"format": "markdown"`, so the chunker gives every passage the
//!   header path `[title]` (the articles keep no section headings; see docs/eval.md); without it the document is
//!   marked `"format": "text"` and is cut into fixed-size windows with overlap.
//! - `queries.jsonl`: one query per question with at least one usable answer, `_id` the question id, `text` the
//!   question, `metadata` its answers, article, yes/no flag and split.
//! - `qrels/train.tsv`, `qrels/test.tsv`: document level, a question → every kept article with its article's
//!   title (grade 1).
//! - `passages.jsonl` and `qrels/passages/{train,test}.tsv`: passage level, a question → the paragraphs of its
//!   relevant articles that hold a gold answer (see [`answer_paragraphs`]); yes/no questions have none.
//! - `build.json`: what was built and what was stepped over.
//!
//! Rules, written down because numbers depend on them:
//! - Articles with the same text (the `set4` articles of S08 and S09 are byte-identical) are one document, the
//!   first in load order (S08); the duplicate's questions point to it. A duplicate in the corpus would be an
//!   equally good but unjudged document, so retrieval would be penalised for finding it.
//! - Articles of different text with the same title (one topic written in both semesters) are all relevant to the
//!   questions of that title.
//! - The split of a question is the split of its article's title: `test` when the xxh3 hash of the lower-cased
//!   title is even, `train` when odd. Train and test therefore share no article (nor any article's topic), and a
//!   question's split never changes when other articles are added.
//! - Lines and article files that are not valid UTF-8 are decoded as Windows-1252 by the loader and reported
//!   (`recoded` in `build.json`); a file that cannot be read is reported and its questions are skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use ragtune::core::text::keywords;
use ragtune::core::{Document, Error, Result};
use ragtune::evaluators::metrics::answer::contains_answer;
use serde::{Deserialize, Serialize};

use crate::cmu_qa::{ArticleText, QaQuestion, load_cmu_qa};
use crate::passages::{PASSAGE_QRELS_DIR, PASSAGES_FILE};

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmuSetOptions {
    /// The CMU QA dataset root (`S08/`, `S09/`, ...).
    pub dataset: PathBuf,
    /// The directory to write (created; files in it are replaced).
    pub out: PathBuf,
    /// Write the articles as Markdown under a `# {title}` heading.
    pub markdown: bool,
}

/// What was built (also written as `build.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CmuSetReport {
    /// Documents in the corpus.
    pub documents: usize,
    /// Articles dropped as exact copies of an earlier one: `(dropped, kept)`.
    pub duplicate_articles: Vec<(String, String)>,
    /// Queries written (questions with a usable answer).
    pub queries: usize,
    /// Queries per split (document level).
    pub split_queries: BTreeMap<String, usize>,
    /// Queries with passage-level judgements, per split.
    pub passage_queries: BTreeMap<String, usize>,
    /// Judged paragraphs (the size of `passages.jsonl`).
    pub passages: usize,
    /// Yes/no questions (left out at passage level: the answer is not a span of the text).
    pub yes_no_questions: usize,
    /// Other questions without a paragraph that holds a gold answer (left out at passage level).
    pub unmatched_questions: usize,
    /// Lines and files decoded as Windows-1252 because they were not valid UTF-8.
    pub recoded: Vec<String>,
    /// Everything else the loader stepped over (skipped lines and questions, unreadable articles, warnings).
    pub issues: Vec<String>,
}

/// The split of an article title: `test` when the xxh3 hash of its lower-cased form is even, else `train`.
#[must_use]
pub fn split_of(title: &str) -> &'static str {
    if xxhash_rust::xxh3::xxh3_64(title.trim().to_lowercase().as_bytes()).is_multiple_of(2) { "test" } else { "train" }
}

/// The paragraphs of a text (runs of text between blank lines), trimmed, as byte ranges, empty ones left out.
#[must_use]
pub fn paragraphs(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            if let Some(s) = start.take() {
                out.push((s, end));
            }
        } else {
            let lead = line.len() - line.trim_start().len();
            start.get_or_insert(offset + lead);
            end = offset + line.trim_end().len();
        }
        offset += line.len();
    }
    if let Some(s) = start {
        out.push((s, end));
    }
    out
}

/// The paragraphs (indices into `paras`) that hold the answer to `question`: those that contain a gold answer
/// (SQuAD-normalised, whole tokens, contiguous) and, among them, share the most keywords with the question (ties
/// all kept), since a short answer ("1809", "Australia") may also occur in paragraphs about something else.
/// Empty for yes/no questions (their answer is not a span of the text).
#[must_use]
pub fn answer_paragraphs(question: &QaQuestion, paras: &[&str]) -> Vec<usize> {
    if question.is_yes_no() {
        return Vec::new();
    }
    let wanted: BTreeSet<String> = keywords(&question.question).into_iter().collect();
    let holding: Vec<(usize, usize)> = paras
        .iter()
        .enumerate()
        .filter(|(_, p)| question.answers.iter().any(|a| contains_answer(p, a)))
        .map(|(i, p)| (i, keywords(p).iter().filter(|w| wanted.contains(*w)).count()))
        .collect();
    let best = holding.iter().map(|&(_, n)| n).max().unwrap_or(0);
    holding.into_iter().filter(|&(_, n)| n == best).map(|(i, _)| i).collect()
}

/// Builds the set (see the module documentation).
///
/// # Errors
/// A missing dataset (as [`load_cmu_qa`]), no article or question loaded, or an output file that cannot be
/// written. Bad lines and files are reported, not errors.
pub fn build_cmu_set(opts: &CmuSetOptions, log: &mut dyn FnMut(&str)) -> Result<CmuSetReport> {
    let qa = load_cmu_qa(&opts.dataset, ArticleText::Clean)?;
    if qa.articles.is_empty() || qa.questions.is_empty() {
        return Err(Error::invalid_input(format!(
            "no article with answered questions could be loaded from {}",
            opts.dataset.display()
        )));
    }
    let mut report = CmuSetReport {
        recoded: qa.report.recoded.iter().map(ToString::to_string).collect(),
        issues: qa
            .report
            .skipped_lines
            .iter()
            .chain(&qa.report.skipped_questions)
            .chain(&qa.report.missing_articles)
            .chain(&qa.report.warnings)
            .map(ToString::to_string)
            .collect(),
        ..CmuSetReport::default()
    };
    for r in &report.recoded {
        log(&format!("recoded: {r}"));
    }
    let articles = Articles::distinct(&qa.articles, opts.markdown, &mut report);
    let mut files = SetFiles::default();
    for q in &qa.questions {
        files.add_question(q, &articles, &mut report);
    }
    files.write(opts, &articles, &mut report)?;
    Ok(report)
}

/// The key articles are grouped by title on: the title trimmed and lower-cased.
fn title_key(title: &str) -> String {
    title.trim().to_lowercase()
}

/// The articles of the set: one per distinct text.
struct Articles<'a> {
    /// The first article of each text, in load order.
    kept: Vec<&'a Document>,
    /// Every loaded article's id → the id of the kept article with its text.
    canonical: HashMap<&'a str, &'a str>,
    /// The kept articles by [`title_key`].
    by_title: BTreeMap<String, Vec<&'a Document>>,
    /// The kept articles' texts as written.
    texts: HashMap<&'a str, String>,
}

impl<'a> Articles<'a> {
    /// One document per distinct text of `loaded`, a duplicate mapped to the first (and reported); with `markdown`,
    /// the texts start with the title as a level-1 heading.
    fn distinct(loaded: &'a [Document], markdown: bool, report: &mut CmuSetReport) -> Self {
        // One document per distinct text; a duplicate maps to the first.
        let mut kept: Vec<&Document> = Vec::new();
        let mut by_text: HashMap<&str, &str> = HashMap::new();
        let mut canonical: HashMap<&str, &str> = HashMap::new();
        for d in loaded {
            match by_text.get(d.text.as_str()) {
                Some(first) => {
                    report.duplicate_articles.push((d.id.clone(), (*first).to_owned()));
                    canonical.insert(d.id.as_str(), first);
                }
                None => {
                    by_text.insert(d.text.as_str(), d.id.as_str());
                    canonical.insert(d.id.as_str(), d.id.as_str());
                    kept.push(d);
                }
            }
        }
        let mut by_title: BTreeMap<String, Vec<&Document>> = BTreeMap::new();
        for d in &kept {
            by_title.entry(title_key(d.title.as_deref().unwrap_or_default())).or_default().push(d);
        }

        // The texts as written: Markdown puts the title on top as a level-1 heading.
        let body = |d: &Document| -> String {
            match (&d.title, markdown) {
                (Some(t), true) => format!("# {t}\n\n{}", d.text),
                _ => d.text.clone(),
            }
        };
        let texts: HashMap<&str, String> = kept.iter().map(|d| (d.id.as_str(), body(d))).collect();
        Self { kept, canonical, by_title, texts }
    }
}

/// The set's queries, qrels and judged paragraphs as they are gathered, question by question.
#[derive(Default)]
struct SetFiles {
    /// `queries.jsonl`.
    queries: String,
    /// The rows of `qrels/{split}.tsv`, per split.
    qrels: BTreeMap<&'static str, String>,
    /// The rows of `qrels/passages/{split}.tsv`, per split.
    passage_qrels: BTreeMap<&'static str, String>,
    /// Passage id → (document id, text) of every judged paragraph.
    judged: BTreeMap<String, (String, String)>,
}

impl SetFiles {
    /// Adds a question: its query, its document-level judgements (every kept article with its title), and its
    /// passage-level judgements (the paragraphs holding its answer) unless it is a yes/no question.
    fn add_question(&mut self, q: &QaQuestion, articles: &Articles<'_>, report: &mut CmuSetReport) {
        let key = title_key(&q.article_title);
        let Some(relevant) = articles.by_title.get(&key) else {
            // Its article is a copy of an article with another title: no kept article has its title.
            let first = articles.canonical.get(q.article_id.as_str()).copied().unwrap_or_default();
            report
                .issues
                .push(format!("question {} skipped: its article is a copy of {first}, titled otherwise", q.id));
            return;
        };
        let split = split_of(&key);
        let meta = serde_json::json!({
            "answers": q.answers, "article": q.article_id, "yes_no": q.is_yes_no(), "split": split,
        });
        self.queries.push_str(&serde_json::json!({ "_id": q.id, "text": q.question, "metadata": meta }).to_string());
        self.queries.push('\n');
        report.queries += 1;
        *report.split_queries.entry(split.to_owned()).or_default() += 1;
        let rows = self.qrels.entry(split).or_default();
        for d in relevant {
            rows.push_str(&format!("{}\t{}\t1\n", q.id, d.id));
        }
        if q.is_yes_no() {
            report.yes_no_questions += 1;
            return;
        }
        let mut any = false;
        for d in relevant {
            let text = &articles.texts[d.id.as_str()];
            let spans = paragraphs(text);
            let paras: Vec<&str> = spans.iter().map(|&(s, e)| &text[s..e]).collect();
            for i in answer_paragraphs(q, &paras) {
                let pid = format!("{}#p{i}", d.id);
                self.passage_qrels.entry(split).or_default().push_str(&format!("{}\t{pid}\t1\n", q.id));
                self.judged.entry(pid).or_insert_with(|| (d.id.clone(), paras[i].to_owned()));
                any = true;
            }
        }
        if any {
            *report.passage_queries.entry(split.to_owned()).or_default() += 1;
        } else {
            report.unmatched_questions += 1;
        }
    }

    /// Writes the set under `opts.out`: the corpus of the kept articles, the queries, the judged paragraphs, the
    /// qrels of both splits at both levels, and the report (its document and passage counts filled in first).
    fn write(self, opts: &CmuSetOptions, articles: &Articles<'_>, report: &mut CmuSetReport) -> Result<()> {
        let mut corpus = String::new();
        for d in &articles.kept {
            // Plain text is marked so that the chunker does not read headings into it.
            let format = if opts.markdown { ragtune::ingest::FORMAT_MARKDOWN } else { ragtune::ingest::FORMAT_TEXT };
            let line = serde_json::json!({
                "_id": d.id, "title": d.title, "text": articles.texts[d.id.as_str()], "metadata": { "format": format },
            });
            corpus.push_str(&line.to_string());
            corpus.push('\n');
        }
        let mut passages = String::new();
        for (pid, (doc, text)) in &self.judged {
            passages.push_str(&serde_json::json!({ "_id": pid, "doc_id": doc, "text": text }).to_string());
            passages.push('\n');
        }
        report.documents = articles.kept.len();
        report.passages = self.judged.len();

        let header = "query-id\tcorpus-id\tscore\n";
        let mut files: Vec<(PathBuf, String)> = vec![
            (opts.out.join("corpus.jsonl"), corpus),
            (opts.out.join("queries.jsonl"), self.queries),
            (opts.out.join(PASSAGES_FILE), passages),
        ];
        for split in ["train", "test"] {
            let rows = self.qrels.get(split).cloned().unwrap_or_default();
            files.push((opts.out.join("qrels").join(format!("{split}.tsv")), format!("{header}{rows}")));
            let rows = self.passage_qrels.get(split).cloned().unwrap_or_default();
            let path = opts.out.join("qrels").join(PASSAGE_QRELS_DIR).join(format!("{split}.tsv"));
            files.push((path, format!("{header}{rows}")));
        }
        let summary = serde_json::to_string_pretty(&*report).unwrap_or_default();
        files.push((opts.out.join("build.json"), summary));
        for (path, content) in files {
            write_file(&path, &content)?;
        }
        Ok(())
    }
}

/// Writes a file, creating its directory.
fn write_file(path: &Path, content: &str) -> Result<()> {
    let fail = |e: std::io::Error| Error::permanent(format!("cannot write {}", path.display())).with_source(e);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut f = std::fs::File::create(path).map_err(fail)?;
    f.write_all(content.as_bytes()).map_err(fail)
}

/// The summary printed after a build.
#[must_use]
pub fn cmu_set_table(r: &CmuSetReport, out: &Path) -> String {
    let mut s = format!(
        "wrote {}: {} documents ({} duplicate articles merged), {} queries\n",
        out.display(),
        r.documents,
        r.duplicate_articles.len(),
        r.queries
    );
    for (split, n) in &r.split_queries {
        let p = r.passage_queries.get(split).copied().unwrap_or(0);
        s.push_str(&format!("{split:<6} {n} queries, {p} with passage judgements\n"));
    }
    s.push_str(&format!(
        "passage level: {} judged paragraphs; left out: {} yes/no questions, {} without a paragraph holding the answer\n",
        r.passages, r.yes_no_questions, r.unmatched_questions
    ));
    if !r.recoded.is_empty() || !r.issues.is_empty() {
        s.push_str(&format!(
            "{} lines or files decoded as Windows-1252, {} other issues (see build.json)\n",
            r.recoded.len(),
            r.issues.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmu_qa::tests::{HEADER, write};

    #[test]
    fn paragraphs_are_runs_between_blank_lines() {
        let text = "Title\n\n  First para\nline two.  \n\n\n\nSecond.\n";
        let spans = paragraphs(text);
        let got: Vec<&str> = spans.iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(got, ["Title", "First para\nline two.", "Second."]);
        assert!(paragraphs(" \n\n").is_empty());
    }

    #[test]
    fn answer_paragraphs_prefer_the_question_keywords() {
        let q = |question: &str, answers: &[&str]| QaQuestion {
            id: "q".into(),
            question: question.into(),
            answers: answers.iter().map(|a| (*a).to_owned()).collect(),
            article_id: "a".into(),
            article_title: "T".into(),
            difficulty: None,
        };
        let paras = ["Lincoln was born in 1809 in Kentucky.", "Darwin was also born in 1809.", "No year here."];
        assert_eq!(answer_paragraphs(&q("When was Lincoln born?", &["1809"]), &paras), [0]);
        assert_eq!(answer_paragraphs(&q("Which year?", &["1809"]), &paras), [0, 1]);
        assert!(answer_paragraphs(&q("Was Lincoln born in 1809?", &["Yes."]), &paras).is_empty());
        assert!(answer_paragraphs(&q("Where?", &["Ohio"]), &paras).is_empty());
    }

    #[test]
    fn builds_a_beir_set_from_a_fixture() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let lincoln = "Abraham Lincoln\n\nLincoln was born on February 12, 1809, in Kentucky.\n\n\
                       He was the 16th president of the United States.\n";
        let pairs = format!(
            "{HEADER}\
             Abraham_Lincoln\tWhen was Lincoln born?\t1809\teasy\teasy\tdata/set1/a1\n\
             Abraham_Lincoln\tWas Lincoln president?\tyes\teasy\teasy\tdata/set1/a1\n\
             Abraham_Lincoln\tWho was his dog?\tFido\teasy\teasy\tdata/set1/a1\n\
             Cello\tWhat is a cello?\tAn instrument\thard\thard\tdata/set4/a1\n"
        );
        write(r, "S08/question_answer_pairs.txt", pairs.as_bytes());
        write(r, "S08/data/set1/a1.txt.clean", lincoln.as_bytes());
        // Not valid UTF-8 (Windows-1252 quotes): decoded, reported, kept.
        write(r, "S08/data/set4/a1.txt.clean", b"Cello\n\nThe cello is an instrument called \x93violoncello\x94.\n");
        // S09's set4 article is the same text: merged into S08's.
        let s09 = format!("{HEADER}Cello\tWho plays the cello?\tA cellist\thard\thard\tdata/set4/a1\n");
        write(r, "S09/question_answer_pairs.txt", s09.as_bytes());
        write(r, "S09/data/set4/a1.txt.clean", b"Cello\n\nThe cello is an instrument called \x93violoncello\x94.\n");

        let out = r.join("out");
        let opts = CmuSetOptions { dataset: r.to_path_buf(), out: out.clone(), markdown: true };
        let mut lines = Vec::new();
        let report = build_cmu_set(&opts, &mut |l| lines.push(l.to_owned())).unwrap();
        assert_eq!(report.documents, 2);
        assert_eq!(report.duplicate_articles, [("S09/set4/a1".to_owned(), "S08/set4/a1".to_owned())]);
        assert_eq!(report.queries, 5);
        assert_eq!(report.yes_no_questions, 1);
        // "Fido" and "A cellist" are in no paragraph.
        assert_eq!(report.unmatched_questions, 2);
        assert_eq!(report.passages, 2);
        assert_eq!(report.recoded.len(), 2, "{:?}", report.recoded);
        assert!(report.recoded.iter().all(|r| r.contains("Windows-1252")) && lines.len() == 2);

        // The directory loads as a BEIR set, every query in exactly one split, an article's questions together.
        let mut split_of_doc: BTreeMap<String, String> = BTreeMap::new();
        let mut total = 0;
        for split in ["train", "test"] {
            let ds = ragtune::ingest::load_beir(&out, split).unwrap();
            assert!(ds.issues.is_empty(), "{:?}", ds.issues);
            assert_eq!(ds.corpus.len(), 2);
            assert!(ds.corpus.iter().all(|d| d.text.starts_with("# ") && d.metadata["format"] == "markdown"));
            assert!(ds.corpus[1].text.contains("“violoncello”"));
            total += ds.qrels.len();
            for docs in ds.qrels.values() {
                for d in docs.keys() {
                    let before = split_of_doc.insert(d.clone(), split.to_owned());
                    assert!(before.is_none_or(|s| s == split), "{d} in two splits");
                }
            }
        }
        assert_eq!(total, 5);
        // Passage level: the birth paragraph and the cello paragraph, located in the written corpus.
        let corpus = ragtune::ingest::load_beir(&out, "test").unwrap().corpus;
        let mut found = 0;
        for split in ["train", "test"] {
            if let Some(g) = crate::passages::load_passage_qrels(&out, split).unwrap() {
                assert!(g.issues.is_empty(), "{:?}", g.issues);
                found += g.qrels.len();
                let texts: Vec<String> = g.passages.iter().map(|p| p.text.clone()).collect();
                assert!(texts.iter().any(|t| t.contains("February 12, 1809")));
                let located = g.locate(&corpus);
                let evaluated: std::collections::HashSet<&str> = std::collections::HashSet::new();
                assert_eq!(located.evaluate(&evaluated, &Default::default(), &[]).unlocated, Vec::<String>::new());
            }
        }
        assert_eq!(found, 2);
        assert!(out.join("build.json").is_file());
        assert_eq!(split_of("Abraham Lincoln"), split_of(" abraham lincoln"));
    }

    /// The real dataset, when this machine has it: the set builds and its splits are of useful size.
    #[test]
    fn builds_the_real_set() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/qa/cmu-wiki-qa");
        if !root.is_dir() {
            println!("SKIPPED: {} not found (the CMU retrieval set was NOT built)", root.display());
            return;
        }
        let out = tempfile::tempdir().unwrap();
        let opts = CmuSetOptions { dataset: root, out: out.path().to_path_buf(), markdown: false };
        let report = build_cmu_set(&opts, &mut |_| {}).unwrap();
        println!("{}", cmu_set_table(&report, out.path()));
        // S09's set4 articles are S08's, byte for byte (and S09/set1/a9 repeats S09/set1/a4, both "Turtle").
        let set4 = report.duplicate_articles.iter().filter(|(d, _)| d.starts_with("S09/set4/")).collect::<Vec<_>>();
        assert!(
            set4.len() >= 7 && set4.iter().all(|(d, k)| k.strip_prefix("S08/") == d.strip_prefix("S09/")),
            "{set4:?}"
        );
        assert!(report.split_queries.values().all(|&n| n > 300), "{:?}", report.split_queries);
        assert!(report.passage_queries.values().all(|&n| n > 100), "{:?}", report.passage_queries);
    }
}
