//! Passage-level scoring: judgements whose ids are passages of documents rather than documents.
//!
//! A dataset directory may hold, beside its BEIR files, `passages.jsonl` (one `{"_id", "doc_id", "text"}` per
//! judged passage, its text an exact slice of the document's `text` in `corpus.jsonl`) and
//! `qrels/passages/<split>.tsv` (BEIR qrels whose corpus ids are passage ids).
//! The indexed chunks are cut by the chunker, not at the dataset's passages, so a retrieved chunk is credited with
//! a judged passage when it holds at least half of the passage's bytes (a chunk that holds the whole answer
//! paragraph or sentence gets it; one that holds a few of its words does not).
//! The passage-level run lists, in the order of the ranked chunks, the judged passages each chunk is credited with,
//! or the chunk itself when it is credited with none (it takes a rank but is never relevant); each passage counts
//! once, at its best chunk, with that chunk's score.
//! Whole-document indexes are not scored at passage level: a whole document would be credited with all its
//! passages at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::path::Path;

use ragtune::core::{Candidate, Document, Error, Result};
use ragtune::evaluators::metrics::{Metric, Qrels, Runs, evaluate};
use serde::{Deserialize, Serialize};

/// The file of judged passages in a dataset directory.
pub const PASSAGES_FILE: &str = "passages.jsonl";

/// The directory under `qrels/` of passage-level judgements, one `<split>.tsv` each.
pub const PASSAGE_QRELS_DIR: &str = "passages";

/// Passage-level metrics of an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassageLevel {
    /// Queries with at least one relevant passage (those scored).
    pub queries: usize,
    /// Mean metrics over them (the same names as the document-level metrics).
    pub metrics: BTreeMap<String, f64>,
    /// Judged passages that could not be found in their document's text (never creditable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlocated: Vec<String>,
}

/// One judged passage: which document it is in and where.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Gold {
    id: String,
    range: Range<usize>,
}

/// The judged passages of a split and their judgements.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldPassages {
    qrels: Qrels,
    /// Document id → its judged passages, in document order.
    by_doc: HashMap<String, Vec<Gold>>,
    unlocated: Vec<String>,
}

/// Loads `passages.jsonl` and `qrels/passages/<split>.tsv` of `dir`, locating each passage in `corpus`; `None` when
/// the split has no passage qrels.
///
/// # Errors
/// A passage qrels file without `passages.jsonl`, or a file that cannot be read; bad lines are skipped.
pub fn load_passage_qrels(dir: &Path, split: &str) -> Result<Option<GoldPassagesFile>> {
    let qrels_path = dir.join("qrels").join(PASSAGE_QRELS_DIR).join(format!("{split}.tsv"));
    if !qrels_path.is_file() {
        return Ok(None);
    }
    let passages_path = dir.join(PASSAGES_FILE);
    if !passages_path.is_file() {
        return Err(Error::not_found(format!(
            "{} has passage judgements but {} is missing",
            qrels_path.display(),
            passages_path.display()
        )));
    }
    let passages = ragtune::ingest::load_jsonl_documents(&passages_path)?;
    let (qrels, issues) = ragtune::ingest::load_qrels(&qrels_path)?;
    Ok(Some(GoldPassagesFile {
        passages: passages.items,
        qrels,
        issues: passages.issues.iter().chain(&issues).map(ToString::to_string).collect(),
    }))
}

/// Passage judgements as read, before they are located in the corpus ([`GoldPassagesFile::locate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GoldPassagesFile {
    /// The passages (`id`, `text`, and `doc_id` in the metadata).
    pub passages: Vec<Document>,
    /// Query id → passage id → grade.
    pub qrels: Qrels,
    /// Lines stepped over.
    pub issues: Vec<String>,
}

impl GoldPassagesFile {
    /// Finds every passage in its document's text.
    #[must_use]
    pub fn locate(self, corpus: &[Document]) -> GoldPassages {
        let docs: HashMap<&str, &Document> = corpus.iter().map(|d| (d.id.as_str(), d)).collect();
        let mut by_doc: HashMap<String, Vec<Gold>> = HashMap::new();
        let mut unlocated = Vec::new();
        for p in self.passages {
            let doc_id = p.metadata.get("doc_id").and_then(serde_json::Value::as_str).unwrap_or_default();
            let found = docs.get(doc_id).and_then(|d| d.text.find(&p.text)).filter(|_| !p.text.is_empty());
            match found {
                Some(start) => by_doc
                    .entry(doc_id.to_owned())
                    .or_default()
                    .push(Gold { id: p.id, range: start..start + p.text.len() }),
                None => unlocated.push(p.id),
            }
        }
        for golds in by_doc.values_mut() {
            golds.sort_by(|a, b| (a.range.start, &a.id).cmp(&(b.range.start, &b.id)));
        }
        GoldPassages { qrels: self.qrels, by_doc, unlocated }
    }
}

/// Where retrieved chunks lie in their documents, found once per chunk.
#[derive(Debug)]
pub struct Locator<'a> {
    docs: HashMap<&'a str, &'a Document>,
    found: HashMap<String, Option<Range<usize>>>,
}

impl<'a> Locator<'a> {
    /// A locator over `corpus`.
    #[must_use]
    pub fn new(corpus: &'a [Document]) -> Self {
        Self { docs: corpus.iter().map(|d| (d.id.as_str(), d)).collect(), found: HashMap::new() }
    }

    /// The byte range of `chunk`'s text in its document (its first occurrence), `None` when it is not a slice of
    /// it.
    pub fn range(&mut self, chunk: &ragtune::core::Chunk) -> Option<Range<usize>> {
        if let Some(r) = self.found.get(&chunk.id) {
            return r.clone();
        }
        let r = self
            .docs
            .get(chunk.doc_id.as_str())
            .and_then(|d| d.text.find(&chunk.text))
            .map(|start| start..start + chunk.text.len());
        self.found.insert(chunk.id.clone(), r.clone());
        r
    }
}

/// Whether a chunk over `chunk` is credited with a passage over `passage`: it holds at least half of its bytes.
#[must_use]
pub fn credited(chunk: &Range<usize>, passage: &Range<usize>) -> bool {
    let overlap = chunk.end.min(passage.end).saturating_sub(chunk.start.max(passage.start));
    let len = passage.end.saturating_sub(passage.start);
    len > 0 && overlap * 2 >= len
}

impl GoldPassages {
    /// The passage-level run of a ranked chunk list (best first), cut at `top_k` entries.
    pub fn passage_run(&self, list: &[Candidate], locator: &mut Locator<'_>, top_k: usize) -> Vec<(String, f32)> {
        let mut seen = HashSet::new();
        let mut run = Vec::new();
        for c in list {
            let golds = self.by_doc.get(&c.chunk.doc_id);
            let range = golds.and_then(|_| locator.range(&c.chunk));
            let mut any = false;
            if let (Some(golds), Some(range)) = (golds, range) {
                for g in golds.iter().filter(|g| credited(&range, &g.range)) {
                    any = true;
                    if seen.insert(g.id.clone()) {
                        run.push((g.id.clone(), c.score));
                    }
                }
            }
            if !any && seen.insert(c.chunk.id.clone()) {
                run.push((c.chunk.id.clone(), c.score));
            }
            if run.len() >= top_k {
                break;
            }
        }
        run.truncate(top_k);
        run
    }

    /// Whether `query` has passage judgements.
    #[must_use]
    pub fn judges(&self, query: &str) -> bool {
        self.qrels.get(query).is_some_and(|j| j.values().any(|g| *g > 0))
    }

    /// Whether `chunk` holds (is credited with) a passage judged relevant to `query`.
    pub fn credits(&self, query: &str, chunk: &ragtune::core::Chunk, locator: &mut Locator<'_>) -> bool {
        let Some(judged) = self.qrels.get(query) else { return false };
        let Some(golds) = self.by_doc.get(&chunk.doc_id) else { return false };
        let Some(range) = locator.range(chunk) else { return false };
        golds.iter().any(|g| judged.get(&g.id).is_some_and(|grade| *grade > 0) && credited(&range, &g.range))
    }

    /// The text of the first (by document, then position) passage judged relevant to `query`, after its document's
    /// title as a retrieved passage shows it.
    #[must_use]
    pub fn first_text(&self, query: &str, docs: &HashMap<&str, &Document>) -> Option<String> {
        let judged = self.qrels.get(query)?;
        let mut owners: Vec<&String> = self.by_doc.keys().collect();
        owners.sort();
        owners.into_iter().find_map(|doc| {
            let g = self.by_doc[doc].iter().find(|g| judged.get(&g.id).is_some_and(|grade| *grade > 0))?;
            let d = docs.get(doc.as_str())?;
            let text = d.text.get(g.range.clone())?;
            Some(match d.title.as_deref().filter(|t| !t.is_empty()) {
                Some(t) => format!("{t}\n{text}"),
                None => text.to_owned(),
            })
        })
    }

    /// The passage-level metrics of `runs`, over the queries of `evaluated` that have passage judgements.
    #[must_use]
    pub fn evaluate(&self, evaluated: &HashSet<&str>, runs: &Runs, metrics: &[Metric]) -> PassageLevel {
        let qrels: Qrels = self
            .qrels
            .iter()
            .filter(|(q, _)| evaluated.contains(q.as_str()))
            .map(|(q, v)| (q.clone(), v.clone()))
            .collect();
        let report = evaluate(&qrels, runs, metrics);
        PassageLevel { queries: report.queries, metrics: report.mean, unlocated: self.unlocated.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune::core::Chunk;

    fn cand(id: &str, doc: &str, text: &str, score: f32) -> Candidate {
        Candidate { chunk: Chunk::new(id, doc, text), score, sources: BTreeMap::new() }
    }

    fn gold(doc: &Document, passages: &[(&str, &str)], qrels: &[(&str, &str)]) -> GoldPassages {
        let passages = passages
            .iter()
            .map(|(id, text)| {
                let mut p = Document::new(*id, *text);
                p.metadata.insert("doc_id".into(), doc.id.clone().into());
                p
            })
            .collect();
        let mut q = Qrels::new();
        for (query, pid) in qrels {
            q.entry((*query).to_owned()).or_default().insert((*pid).to_owned(), 1);
        }
        GoldPassagesFile { passages, qrels: q, issues: Vec::new() }.locate(std::slice::from_ref(doc))
    }

    #[test]
    fn credit_needs_half_of_the_passage() {
        assert!(credited(&(0..10), &(2..8)));
        assert!(credited(&(0..10), &(5..15)));
        assert!(!credited(&(0..10), &(6..16)));
        assert!(!credited(&(0..10), &(10..20)));
        assert!(!credited(&(0..10), &(3..3)));
    }

    #[test]
    fn chunks_map_to_judged_passages_once_at_their_best_chunk() {
        let text = "Alpha one. Beta two.\n\nGamma three. Delta four.";
        let doc = Document::new("d", text);
        let g = gold(&doc, &[("d#p1", "Gamma three. Delta four."), ("d#p0", "Alpha one. Beta two.")], &[("q", "d#p1")]);
        let list = vec![
            cand("d#0", "d", "Alpha one.", 0.9),
            cand("d#1", "d", "two.\n\nGamma three. Delta four.", 0.8),
            cand("d#2", "d", "Delta four.", 0.7),
            cand("x#0", "x", "elsewhere", 0.6),
        ];
        let mut locator = Locator::new(std::slice::from_ref(&doc));
        let run = g.passage_run(&list, &mut locator, 10);
        // `Alpha one.` holds half of p0; the second chunk holds all of p1; the third holds under half of p1.
        let ids: Vec<&str> = run.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["d#p0", "d#p1", "d#2", "x#0"]);
        assert_eq!(g.passage_run(&list, &mut locator, 2).len(), 2);

        let runs: Runs = [("q".to_owned(), run)].into();
        let evaluated: HashSet<&str> = ["q"].into();
        let level = g.evaluate(&evaluated, &runs, &[Metric::Mrr(10), Metric::Recall(10)]);
        assert_eq!(level.queries, 1);
        assert_eq!(level.metrics["mrr@10"], 0.5);
        assert_eq!(level.metrics["recall@10"], 1.0);
        assert!(level.unlocated.is_empty());
    }

    #[test]
    fn passages_not_in_their_document_are_reported() {
        let doc = Document::new("d", "Some text.");
        let g = gold(&doc, &[("d#p0", "Other text.")], &[("q", "d#p0")]);
        assert_eq!(g.unlocated, ["d#p0"]);
        let mut locator = Locator::new(std::slice::from_ref(&doc));
        let run = g.passage_run(&[cand("d#0", "d", "Some text.", 1.0)], &mut locator, 10);
        assert_eq!(run, [("d#0".to_owned(), 1.0)]);
    }
}
