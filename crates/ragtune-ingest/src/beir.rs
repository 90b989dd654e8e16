//! BEIR datasets: `corpus.jsonl`, `queries.jsonl` and `qrels/<split>.tsv`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use ragtune_core::{Document, Error, Metadata, Result};
use serde::{Deserialize, Serialize};

use crate::jsonl::{SeenIds, duplicate_message, id_value, parse_object, require_some, take_metadata, take_string};
use crate::lines::{for_each_line, io_error, open, utf8_message};
use crate::{LoadIssue, Loaded};

/// Relevance judgements: query id → corpus id → graded relevance (BEIR uses 0, 1, 2; 0 means judged not relevant).
pub type Qrels = BTreeMap<String, BTreeMap<String, i32>>;

/// One BEIR query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BeirQuery {
    /// The query's `_id`.
    pub id: String,
    /// The query text.
    pub text: String,
    /// The query's `metadata` object (SciFact stores its evidence there), empty when absent.
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
}

/// A BEIR dataset loaded for one split.
#[derive(Debug, Clone, PartialEq)]
pub struct BeirDataset {
    /// The split whose qrels were loaded (`test`, `dev`, `train`).
    pub split: String,
    /// Every document of `corpus.jsonl`, in file order.
    pub corpus: Vec<Document>,
    /// Every query of `queries.jsonl`, in file order, including queries without judgements in this split.
    pub queries: Vec<BeirQuery>,
    /// The judgements of the split.
    pub qrels: Qrels,
    /// Problems stepped over in any of the three files.
    pub issues: Vec<LoadIssue>,
}

impl BeirDataset {
    /// The queries that have at least one judgement in this split, in `queries.jsonl` order: the evaluation set.
    #[must_use]
    pub fn queries_with_qrels(&self) -> Vec<&BeirQuery> {
        self.queries.iter().filter(|q| self.qrels.contains_key(&q.id)).collect()
    }

    /// The number of (query, document) judgements in the split.
    #[must_use]
    pub fn qrels_len(&self) -> usize {
        self.qrels.values().map(BTreeMap::len).sum()
    }
}

/// The splits a BEIR directory has judgements for: the stems of `qrels/*.tsv`, sorted.
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when `dir/qrels` does not exist;
/// [`ErrorKind::Permanent`](ragtune_core::ErrorKind::Permanent) when it cannot be read.
pub fn list_splits(dir: impl AsRef<Path>) -> Result<Vec<String>> {
    let qrels_dir = dir.as_ref().join("qrels");
    let entries = std::fs::read_dir(&qrels_dir).map_err(|e| io_error(&qrels_dir, "cannot list", e))?;
    let mut splits = BTreeSet::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(&qrels_dir, "cannot list", e))?.path();
        if path.extension().is_some_and(|ext| ext == "tsv")
            && path.is_file()
            && let Some(stem) = path.file_stem()
        {
            splits.insert(stem.to_string_lossy().into_owned());
        }
    }
    Ok(splits.into_iter().collect())
}

/// The `_id` of every document line of a BEIR `corpus.jsonl`, with its 1-based line number, read by
/// [`load_beir`]'s rules (blank lines skipped, `\r\n` and a UTF-8 byte order mark accepted, an id is a non-empty
/// string or a number) but strictly: the first line that is not valid is an error, not an issue.
///
/// Only `_id` is checked; the other fields are not. Ids are not checked for duplicates.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("corpus.jsonl");
/// std::fs::write(&path, "\u{feff}{\"_id\": 7, \"text\": \"a\"}\r\n\n{\"_id\": \"d2\", \"text\": \"b\"}\n")?;
/// assert_eq!(ragtune_ingest::corpus_ids(&path)?, [(1, "7".to_owned()), (3, "d2".to_owned())]);
/// std::fs::write(&path, "{\"_id\": null}\n")?;
/// assert!(ragtune_ingest::corpus_ids(&path).unwrap_err().to_string().contains("corpus.jsonl:1: `_id` must be"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when the file is missing;
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming `file:line` for the first line that is
/// not UTF-8, not a JSON object, or has no valid `_id`; [`ErrorKind::Permanent`](ragtune_core::ErrorKind::Permanent)
/// for other IO failures.
pub fn corpus_ids(path: impl AsRef<Path>) -> Result<Vec<(usize, String)>> {
    let path = path.as_ref();
    let mut ids = Vec::new();
    let mut first_error: Option<(usize, String)> = None;
    for_each_line(open(path)?, path, |n, line| {
        if first_error.is_some() {
            return;
        }
        let id = match line {
            Ok(l) if l.trim().is_empty() => return,
            Ok(l) => parse_object(l).and_then(|mut obj| id_value(obj.remove("_id").ok_or("missing `_id`")?, "_id")),
            Err(e) => Err(utf8_message(e)),
        };
        match id {
            Ok(id) => ids.push((n, id)),
            Err(message) => first_error = Some((n, message)),
        }
    })?;
    match first_error {
        Some((n, message)) => Err(Error::invalid_input(format!("{}:{n}: {message}", path.display()))),
        None => Ok(ids),
    }
}

/// Loads a BEIR dataset from `dir` with the judgements of `split`.
///
/// `corpus.jsonl` lines are `{"_id", "title", "text", "metadata"?}`: a blank title becomes `None`, `source` is
/// `None`, and the document's metadata is the `metadata` object. `queries.jsonl` lines are `{"_id", "text",
/// "metadata"?}`. `qrels/<split>.tsv` has an optional `query-id\tcorpus-id\tscore` header and integer scores;
/// `\r\n` line ends are accepted. Malformed lines, lines that are not UTF-8, duplicate ids (the first is kept)
/// and judgements naming unknown queries or documents (kept, since a relevant document that cannot be retrieved
/// still counts against recall) are reported in [`BeirDataset::issues`].
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when `dir` or one of its files is missing, or the
/// split does not exist (the message lists the available splits);
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when the corpus holds no valid document;
/// [`ErrorKind::Permanent`](ragtune_core::ErrorKind::Permanent) for other IO failures. Each names the path.
pub fn load_beir(dir: impl AsRef<Path>, split: &str) -> Result<BeirDataset> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::not_found(format!("BEIR dataset directory {} not found", dir.display())));
    }
    let qrels_path = qrels_path(dir, split)?;

    let corpus_path = dir.join("corpus.jsonl");
    let corpus = read_corpus(open(&corpus_path)?, &corpus_path)?;
    require_some(&corpus, &corpus_path, "documents")?;
    let queries_path = dir.join("queries.jsonl");
    let queries = read_queries(open(&queries_path)?, &queries_path)?;
    let (qrels, qrels_issues) = read_qrels(open(&qrels_path)?, &qrels_path)?;

    let mut issues = corpus.issues;
    issues.extend(queries.issues);
    issues.extend(qrels_issues);
    let doc_ids: BTreeSet<&str> = corpus.items.iter().map(|d| d.id.as_str()).collect();
    let query_ids: BTreeSet<&str> = queries.items.iter().map(|q| q.id.as_str()).collect();
    for (q, docs) in &qrels {
        if !query_ids.contains(q.as_str()) {
            issues.push(LoadIssue::file(&qrels_path, format!("query id {q:?} is not in queries.jsonl")));
        }
        for d in docs.keys().filter(|d| !doc_ids.contains(d.as_str())) {
            issues.push(LoadIssue::file(
                &qrels_path,
                format!("corpus id {d:?} (judged for query {q:?}) is not in corpus.jsonl"),
            ));
        }
    }
    Ok(BeirDataset { split: split.to_owned(), corpus: corpus.items, queries: queries.items, qrels, issues })
}

/// Loads one qrels file (`query-id \t corpus-id \t score`, an optional header), with the lines it stepped over.
/// The ids are not checked against a corpus: passage-level judgements name passages, not documents.
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when the file is missing,
/// [`ErrorKind::Permanent`](ragtune_core::ErrorKind::Permanent) when it cannot be read.
pub fn load_qrels(path: impl AsRef<Path>) -> Result<(Qrels, Vec<LoadIssue>)> {
    let path = path.as_ref();
    read_qrels(open(path)?, path)
}

/// `dir/qrels/<split>.tsv`, or a NotFound error that lists the splits there are.
fn qrels_path(dir: &Path, split: &str) -> Result<PathBuf> {
    let path = dir.join("qrels").join(format!("{split}.tsv"));
    // A split name is a file stem; anything with a separator would reach outside qrels/.
    if !split.is_empty() && !split.contains(['/', '\\']) && path.is_file() {
        return Ok(path);
    }
    let available = match list_splits(dir) {
        Ok(splits) if splits.is_empty() => "none".to_owned(),
        Ok(splits) => splits.join(", "),
        Err(e) => format!("none ({})", e.message()),
    };
    Err(Error::not_found(format!(
        "split {split:?} not found in {}; available splits: {available}",
        dir.join("qrels").display()
    )))
}

/// Reads `corpus.jsonl` lines.
fn read_corpus(reader: impl BufRead, path: &Path) -> Result<Loaded<Document>> {
    read_records(reader, path, |mut obj| {
        let id = id_value(obj.remove("_id").ok_or("missing `_id`")?, "_id")?;
        let text = take_string(&mut obj, "text")?.ok_or("missing `text`")?;
        let title = take_string(&mut obj, "title")?.filter(|t| !t.trim().is_empty());
        let metadata = take_metadata(&mut obj)?;
        Ok((id.clone(), Document { id, title, text, source: None, metadata }))
    })
}

/// Reads `queries.jsonl` lines.
fn read_queries(reader: impl BufRead, path: &Path) -> Result<Loaded<BeirQuery>> {
    read_records(reader, path, |mut obj| {
        let id = id_value(obj.remove("_id").ok_or("missing `_id`")?, "_id")?;
        let text = take_string(&mut obj, "text")?.ok_or("missing `text`")?;
        let metadata = take_metadata(&mut obj)?;
        Ok((id.clone(), BeirQuery { id, text, metadata }))
    })
}

type Record<T> = std::result::Result<(String, T), String>;

/// Reads JSONL records with `parse`, skipping blank lines, reporting bad lines and keeping the first of equal ids.
fn read_records<T>(
    reader: impl BufRead,
    path: &Path,
    parse: impl Fn(serde_json::Map<String, serde_json::Value>) -> Record<T>,
) -> Result<Loaded<T>> {
    let mut out = Loaded::default();
    let mut seen = SeenIds::default();
    for_each_line(reader, path, |n, line| {
        let parsed = match line {
            Ok(l) if l.trim().is_empty() => return,
            Ok(l) => parse_object(l).and_then(&parse),
            Err(e) => Err(utf8_message(e)),
        };
        match parsed {
            Ok((id, item)) => match seen.first_line(&id, n) {
                None => out.items.push(item),
                Some(first) => out.issues.push(LoadIssue::line(path, n, duplicate_message(&id, first))),
            },
            Err(message) => out.issues.push(LoadIssue::line(path, n, message)),
        }
    })?;
    Ok(out)
}

/// Reads a qrels TSV: `query-id \t corpus-id \t score`, an optional header on line 1, blank lines skipped.
pub(crate) fn read_qrels(reader: impl BufRead, path: &Path) -> Result<(Qrels, Vec<LoadIssue>)> {
    let mut qrels = Qrels::new();
    let mut issues = Vec::new();
    let mut first_seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for_each_line(reader, path, |n, line| {
        let row = match line {
            Ok(l) if l.trim().is_empty() => return,
            Ok(l) if n == 1 && l.split('\t').next().is_some_and(|f| f.trim() == "query-id") => return,
            Ok(l) => parse_qrels_row(l),
            Err(e) => Err(utf8_message(e)),
        };
        match row {
            Ok((q, d, score)) => {
                if let Some(first) = first_seen.get(&(q.to_owned(), d.to_owned())) {
                    issues.push(LoadIssue::line(
                        path,
                        n,
                        format!("duplicate judgement for query {q:?} and corpus id {d:?} (first on line {first}); kept the first"),
                    ));
                    return;
                }
                first_seen.insert((q.to_owned(), d.to_owned()), n);
                qrels.entry(q.to_owned()).or_default().insert(d.to_owned(), score);
            }
            Err(message) => issues.push(LoadIssue::line(path, n, message)),
        }
    })?;
    Ok((qrels, issues))
}

fn parse_qrels_row(line: &str) -> std::result::Result<(&str, &str, i32), String> {
    let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
    let [q, d, score] = fields[..] else {
        return Err(format!("expected 3 tab-separated fields (query-id, corpus-id, score), found {}", fields.len()));
    };
    if q.is_empty() || d.is_empty() {
        return Err("empty query-id or corpus-id".to_owned());
    }
    let score = score.parse::<i32>().map_err(|_| format!("score {score:?} is not an integer"))?;
    Ok((q, d, score))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::ErrorKind;

    /// Parses `input` as a qrels file and renders judgements and issues one per line.
    fn check(input: &[u8], expect: &str) {
        let (qrels, issues) = read_qrels(input, Path::new("qrels/test.tsv")).unwrap();
        let mut got = String::new();
        for (q, docs) in &qrels {
            for (d, s) in docs {
                got.push_str(&format!("{q} {d} {s}\n"));
            }
        }
        for issue in &issues {
            got.push_str(&format!("! {issue}\n"));
        }
        assert_eq!(got, expect);
    }

    #[test]
    fn crlf_qrels_with_header() {
        check(
            b"query-id\tcorpus-id\tscore\r\n1\t31715818\t1\r\n3\t14717500\t1\r\n1\t42\t2\r\n",
            "1 31715818 1\n1 42 2\n3 14717500 1\n",
        );
        check(b"1\td\t0\n", "1 d 0\n");
    }

    #[test]
    fn bad_qrels_rows_are_issues() {
        check(
            b"query-id\tcorpus-id\tscore\n1\td1\t1\n1 d2 1\n1\td3\tx\n\n1\td1\t2\n2\td\xff\t1\n\td4\t1\n",
            "1 d1 1\n\
             ! qrels/test.tsv:3: expected 3 tab-separated fields (query-id, corpus-id, score), found 1\n\
             ! qrels/test.tsv:4: score \"x\" is not an integer\n\
             ! qrels/test.tsv:6: duplicate judgement for query \"1\" and corpus id \"d1\" (first on line 2); kept the first\n\
             ! qrels/test.tsv:7: not valid UTF-8 (invalid byte at offset 3)\n\
             ! qrels/test.tsv:8: empty query-id or corpus-id\n",
        );
    }

    fn write(dir: &Path, name: &str, content: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn tiny_dataset() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "corpus.jsonl",
            "{\"_id\": \"d1\", \"title\": \"T1\", \"text\": \"one\", \"metadata\": {\"y\": 1}}\n\
             {\"_id\": \"d2\", \"title\": \"\", \"text\": \"two\"}\n\
             {\"_id\": \"d1\", \"title\": \"dup\", \"text\": \"dup\"}\n",
        );
        write(
            dir.path(),
            "queries.jsonl",
            "{\"_id\": \"q1\", \"text\": \"first?\", \"metadata\": {}}\n{\"_id\": \"q2\", \"text\": \"second?\"}\n{\"_id\": \"q3\", \"text\": \"third?\"}\n",
        );
        write(dir.path(), "qrels/test.tsv", "query-id\tcorpus-id\tscore\r\nq3\td2\t1\r\nq1\td1\t1\r\nq9\td9\t1\r\n");
        write(dir.path(), "qrels/dev.tsv", "q2\td1\t1\n");
        dir
    }

    #[test]
    fn loads_a_small_dataset() {
        let dir = tiny_dataset();
        let ds = load_beir(dir.path(), "test").unwrap();
        assert_eq!(ds.corpus.len(), 2);
        assert_eq!(ds.corpus[0].title.as_deref(), Some("T1"));
        assert_eq!(ds.corpus[0].metadata.get("y"), Some(&serde_json::json!(1)));
        assert_eq!(ds.corpus[1].title, None);
        assert_eq!(ds.corpus[1].source, None);
        assert_eq!(ds.queries.len(), 3);
        let ids: Vec<&str> = ds.queries_with_qrels().iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["q1", "q3"]);
        assert_eq!(ds.qrels_len(), 3);
        let issues: Vec<String> =
            ds.issues.iter().map(|i| i.to_string().replace(&dir.path().display().to_string(), "D")).collect();
        assert_eq!(
            issues,
            [
                "D/corpus.jsonl:3: duplicate id \"d1\" (first seen on line 1); kept the first",
                "D/qrels/test.tsv: query id \"q9\" is not in queries.jsonl",
                "D/qrels/test.tsv: corpus id \"d9\" (judged for query \"q9\") is not in corpus.jsonl",
            ]
        );
        assert_eq!(list_splits(dir.path()).unwrap(), ["dev", "test"]);
    }

    #[test]
    fn unknown_split_lists_the_available_ones() {
        let dir = tiny_dataset();
        let e = load_beir(dir.path(), "train").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("split \"train\" not found"), "{}", e.message());
        assert!(e.message().ends_with("available splits: dev, test"), "{}", e.message());
        assert!(load_beir(dir.path(), "../corpus").is_err());
    }

    #[test]
    fn missing_dir_and_files_are_not_found() {
        let e = load_beir("/nonexistent/scifact", "test").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("/nonexistent/scifact"));

        let dir = tiny_dataset();
        std::fs::remove_file(dir.path().join("queries.jsonl")).unwrap();
        let e = load_beir(dir.path(), "test").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("queries.jsonl"), "{}", e.message());
    }

    #[test]
    fn empty_corpus_is_invalid_input() {
        let dir = tiny_dataset();
        write(dir.path(), "corpus.jsonl", "\n");
        let e = load_beir(dir.path(), "test").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), format!("no documents found in {}", dir.path().join("corpus.jsonl").display()));
    }

    /// The real SciFact data, when this machine has it.
    #[test]
    fn loads_scifact() {
        let dir = Path::new("/work/shared/data/beir/scifact");
        if !dir.is_dir() {
            eprintln!("skipping loads_scifact: {} is absent (SciFact counts were NOT checked)", dir.display());
            return;
        }
        let test = load_beir(dir, "test").unwrap();
        assert_eq!(test.corpus.len(), 5183);
        assert_eq!(test.queries.len(), 1109);
        assert_eq!(test.qrels.len(), 300);
        assert_eq!(test.qrels_len(), 339);
        assert_eq!(test.queries_with_qrels().len(), 300);
        assert!(test.issues.is_empty(), "{:?}", test.issues);
        let train = load_beir(dir, "train").unwrap();
        assert_eq!(train.qrels.len(), 809);
        assert_eq!(train.qrels_len(), 919);
        assert!(train.issues.is_empty(), "{:?}", train.issues);
        assert_eq!(list_splits(dir).unwrap(), ["test", "train"]);
        // Every abstract chunks cleanly with the default sizes.
        for doc in &test.corpus {
            let chunks = crate::chunk_document(doc, &crate::ChunkerConfig::default()).unwrap();
            let has_text = !doc.text.trim().is_empty();
            assert_eq!(chunks.iter().any(|c| c.kind == ragtune_core::ChunkKind::Passage), has_text, "{}", doc.id);
        }
    }

    proptest::proptest! {
        #[test]
        fn qrels_parser_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let (qrels, issues) = read_qrels(&bytes[..], Path::new("fuzz.tsv")).unwrap();
            let lines = bytes.split(|&b| b == b'\n').count();
            let judged: usize = qrels.values().map(BTreeMap::len).sum();
            proptest::prop_assert!(judged + issues.len() <= lines);
        }

        #[test]
        fn qrels_parser_never_panics_on_tsv_like_input(input in "[\t\r\nq0-9 -]{0,200}") {
            read_qrels(input.as_bytes(), Path::new("fuzz.tsv")).unwrap();
        }

        #[test]
        fn corpus_parser_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            read_corpus(&bytes[..], Path::new("fuzz.jsonl")).unwrap();
            read_queries(&bytes[..], Path::new("fuzz.jsonl")).unwrap();
        }
    }
}
