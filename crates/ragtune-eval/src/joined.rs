//! BEIR datasets whose corpora are joined (`ragtune eval join-sets`): each dataset's queries then search every
//! dataset's documents, a larger corpus with the same judgements.
//!
//! This is how a setting fitted on a corpus of one size is checked on a larger one (BM25's scores follow the
//! corpus's IDFs, which grow with its size; docs/experiments/2026-11-28-level-weights-default.md). For every input
//! dataset the builder writes one BEIR directory:
//!
//! - `corpus.jsonl`: every input's `corpus.jsonl`, byte for byte, in the order the datasets were given (a newline
//!   added between two files when the first does not end with one, and a file's leading UTF-8 byte order mark
//!   dropped, since it would sit mid-file). The same file in every output directory, so
//!   the evaluation's cache (keyed by the corpus's content and the directory's name) indexes it once per name.
//! - `queries.jsonl`: the dataset's own, byte for byte.
//! - `qrels/*.tsv`: the dataset's own document-level qrels, byte for byte. Passage-level qrels (`qrels/passages/`)
//!   and `passages.jsonl` are not copied: they name passages of the dataset's own chunking.
//!
//! Document ids must be distinct across the inputs: a judged document whose id also names another dataset's
//! document would make that one count as relevant, so a clash is an error naming both places. Ids are read by the
//! loader's rules ([`ragtune::ingest::corpus_ids`]). Every input is read and checked before anything is written, and
//! an output directory that is one of the inputs is refused.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use ragtune::core::{Error, Result};
use serde::{Deserialize, Serialize};

/// What to join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOptions {
    /// The BEIR dataset directories and the name of each one's output directory, in the order their corpora are
    /// joined.
    pub datasets: Vec<(PathBuf, String)>,
    /// The directory the output directories are written under (created; files in them are replaced).
    pub out: PathBuf,
}

/// One output directory of a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinedSet {
    /// Its name (the directory's name under [`JoinOptions::out`]).
    pub name: String,
    /// Where it was written.
    pub dir: PathBuf,
    /// The documents its own dataset brought to the joined corpus.
    pub own_documents: usize,
    /// The qrels files copied (`train.tsv`, ...).
    pub qrels: Vec<String>,
}

/// What a join wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinReport {
    /// Documents in the joined corpus.
    pub documents: usize,
    /// One per input dataset, in order.
    pub sets: Vec<JoinedSet>,
}

/// The default name of a dataset's output directory: `joined-` and the dataset directory's own name.
#[must_use]
pub fn default_joined_name(dataset: &Path) -> String {
    let own = dataset.file_name().map_or_else(|| "dataset".to_owned(), |n| n.to_string_lossy().into_owned());
    format!("joined-{own}")
}

/// Joins the corpora of `opts.datasets` (see the module documentation).
///
/// ```
/// use ragtune_eval::joined::{JoinOptions, join_sets};
///
/// let dir = tempfile::tempdir()?;
/// for (name, doc) in [("a", "d1"), ("b", "d2")] {
///     let d = dir.path().join(name);
///     std::fs::create_dir_all(d.join("qrels"))?;
///     std::fs::write(d.join("corpus.jsonl"), format!("{{\"_id\": \"{doc}\", \"text\": \"x\"}}\n"))?;
///     std::fs::write(d.join("queries.jsonl"), format!("{{\"_id\": \"q-{name}\", \"text\": \"y\"}}\n"))?;
///     std::fs::write(d.join("qrels/test.tsv"), format!("query-id\tcorpus-id\tscore\nq-{name}\t{doc}\t1\n"))?;
/// }
/// let opts = JoinOptions {
///     datasets: vec![(dir.path().join("a"), "ja".into()), (dir.path().join("b"), "jb".into())],
///     out: dir.path().join("joined"),
/// };
/// let report = join_sets(&opts, &mut |_| {})?;
/// assert_eq!(report.documents, 2);
/// let corpus = std::fs::read_to_string(dir.path().join("joined/jb/corpus.jsonl"))?;
/// assert_eq!(corpus.lines().count(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) for fewer than two datasets, two outputs of one name, an
/// output directory that is an input, a dataset without `queries.jsonl` or `qrels/`, a corpus line that is not a
/// JSON object with a valid `_id` (named by file and line), or an id two corpora share (both places named);
/// [`NotFound`](ragtune::core::ErrorKind::NotFound) for a missing `corpus.jsonl`; an I/O error reading or writing.
/// Nothing is written when any input is refused.
pub fn join_sets(opts: &JoinOptions, log: &mut dyn FnMut(&str)) -> Result<JoinReport> {
    if opts.datasets.len() < 2 {
        return Err(Error::invalid_input("joining corpora needs at least two datasets"));
    }
    let mut names: HashMap<&str, &Path> = HashMap::new();
    for (dir, name) in &opts.datasets {
        if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
            return Err(Error::invalid_input(format!(
                "`{name}` cannot name an output directory (for {})",
                dir.display()
            )));
        }
        if let Some(first) = names.insert(name.as_str(), dir) {
            return Err(Error::invalid_input(format!(
                "{} and {} would both be written to `{name}`: give them different names",
                first.display(),
                dir.display()
            )));
        }
    }

    // Every input is read and checked before anything is written, so an error leaves nothing half-written.
    let mut inputs = Vec::with_capacity(opts.datasets.len());
    for (dir, name) in &opts.datasets {
        inputs.push(read_input(dir)?);
        refuse_overwriting_an_input(&opts.out.join(name), &opts.datasets)?;
    }
    let mut corpus: Vec<u8> = Vec::new();
    let mut seen: HashMap<&str, (PathBuf, usize)> = HashMap::new();
    for ((dir, _), input) in opts.datasets.iter().zip(&inputs) {
        let path = dir.join("corpus.jsonl");
        for (line_no, id) in &input.ids {
            if let Some((first, first_line)) = seen.get(id.as_str()) {
                return Err(Error::invalid_input(format!(
                    "{}:{line_no}: the document id `{id}` is also at {}:{first_line}; joined corpora need distinct ids",
                    path.display(),
                    first.display()
                )));
            }
            seen.insert(id, (path.clone(), *line_no));
        }
        corpus.extend_from_slice(&input.corpus);
        if !input.corpus.is_empty() && !input.corpus.ends_with(b"\n") {
            corpus.push(b'\n');
        }
    }
    let documents = seen.len();

    let mut sets = Vec::with_capacity(opts.datasets.len());
    for ((_, name), input) in opts.datasets.iter().zip(inputs) {
        let target = opts.out.join(name);
        let qrels_dir = target.join("qrels");
        create_dir(&qrels_dir)?;
        write(&target.join("corpus.jsonl"), &corpus)?;
        write(&target.join("queries.jsonl"), &input.queries)?;
        for (file_name, bytes) in &input.qrels {
            write(&qrels_dir.join(file_name), bytes)?;
        }
        let qrels: Vec<String> = input.qrels.into_iter().map(|(file_name, _)| file_name).collect();
        let own = input.ids.len();
        log(&format!(
            "{}: {own} of its own documents among {documents} joined, its queries and qrels ({})",
            target.display(),
            qrels.join(", ")
        ));
        sets.push(JoinedSet { name: name.clone(), dir: target, own_documents: own, qrels });
    }
    Ok(JoinReport { documents, sets })
}

/// One input dataset, read whole.
struct Input {
    /// Its `corpus.jsonl` without a leading byte order mark (it would sit mid-file in the joined corpus).
    corpus: Vec<u8>,
    /// Its document ids with their line numbers.
    ids: Vec<(usize, String)>,
    queries: Vec<u8>,
    /// Its `qrels/*.tsv` files by name, sorted.
    qrels: Vec<(String, Vec<u8>)>,
}

fn read_input(dir: &Path) -> Result<Input> {
    let corpus_path = dir.join("corpus.jsonl");
    let ids = ragtune::ingest::corpus_ids(&corpus_path)?;
    let mut corpus = read(&corpus_path)?;
    if corpus.starts_with("\u{feff}".as_bytes()) {
        corpus.drain(.."\u{feff}".len());
    }
    let queries = read(&dir.join("queries.jsonl"))?;
    let source = dir.join("qrels");
    let entries = std::fs::read_dir(&source)
        .map_err(|e| Error::invalid_input(format!("cannot read {}", source.display())).with_source(e))?;
    let mut qrels = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::permanent(format!("cannot list {}", source.display())).with_source(e))?;
        let file = entry.path();
        if file.is_file() && file.extension().is_some_and(|e| e == "tsv") {
            qrels.push((entry.file_name().to_string_lossy().into_owned(), read(&file)?));
        }
    }
    qrels.sort();
    Ok(Input { corpus, ids, queries, qrels })
}

/// An error when `target` (an output directory) is one of the input directories: writing it would replace that
/// dataset's own files.
fn refuse_overwriting_an_input(target: &Path, datasets: &[(PathBuf, String)]) -> Result<()> {
    // An output directory that does not exist yet cannot be an input (inputs exist: they were just read).
    let Ok(target_canonical) = target.canonicalize() else { return Ok(()) };
    for (dir, _) in datasets {
        if dir.canonicalize().is_ok_and(|d| d == target_canonical) {
            return Err(Error::invalid_input(format!(
                "the output directory {} is the input dataset {}: writing it would replace that dataset's files; \
                 choose another --out or --name",
                target.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::invalid_input(format!("cannot read {}", path.display())).with_source(e))
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::permanent(format!("cannot create {}", dir.display())).with_source(e))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| Error::permanent(format!("cannot write {}", path.display())).with_source(e))?;
    f.write_all(bytes).map_err(|e| Error::permanent(format!("cannot write {}", path.display())).with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dataset(root: &Path, name: &str, corpus: &str) -> PathBuf {
        let d = root.join(name);
        std::fs::create_dir_all(d.join("qrels/passages")).unwrap();
        std::fs::write(d.join("corpus.jsonl"), corpus).unwrap();
        std::fs::write(d.join("queries.jsonl"), format!("{{\"_id\":\"q-{name}\",\"text\":\"t\"}}\n")).unwrap();
        std::fs::write(d.join("qrels/train.tsv"), format!("query-id\tcorpus-id\tscore\nq-{name}\tx\t1\n")).unwrap();
        std::fs::write(d.join("qrels/passages/train.tsv"), "ignored").unwrap();
        d
    }

    /// Options joining `a` and `b` into `out`, under the names given.
    fn options(a: &Path, a_name: &str, b: &Path, b_name: &str, out: PathBuf) -> JoinOptions {
        JoinOptions { datasets: vec![(a.to_path_buf(), a_name.into()), (b.to_path_buf(), b_name.into())], out }
    }

    #[test]
    fn every_output_holds_the_whole_corpus_byte_for_byte_and_its_own_queries_and_qrels() {
        let root = tempfile::tempdir().unwrap();
        // The first corpus does not end with a newline; numeric and string ids both count.
        let a = dataset(root.path(), "a", "{\"_id\": 1, \"text\": \"one\"}\n\n{\"_id\": \"2\", \"text\": \"two\"}");
        let b = dataset(root.path(), "b", "{\"_id\":\"S08/a1\",\"text\":\"three\"}\n");
        let opts = options(&a, &default_joined_name(&a), &b, "union-b", root.path().join("out"));
        let mut lines = Vec::new();
        let report = join_sets(&opts, &mut |l| lines.push(l.to_owned())).unwrap();
        assert_eq!(report.documents, 3);
        assert_eq!(
            report.sets.iter().map(|s| (s.name.as_str(), s.own_documents)).collect::<Vec<_>>(),
            [("joined-a", 2), ("union-b", 1)]
        );
        let want = "{\"_id\": 1, \"text\": \"one\"}\n\n{\"_id\": \"2\", \"text\": \"two\"}\n{\"_id\":\"S08/a1\",\"text\":\"three\"}\n";
        for s in &report.sets {
            assert_eq!(std::fs::read_to_string(s.dir.join("corpus.jsonl")).unwrap(), want);
            assert_eq!(s.qrels, ["train.tsv"]);
            assert!(!s.dir.join("qrels/passages").exists());
        }
        let own = |name: &str, file: &str| std::fs::read(root.path().join(name).join(file)).unwrap();
        let out = |name: &str, file: &str| std::fs::read(root.path().join("out").join(name).join(file)).unwrap();
        assert_eq!(out("union-b", "queries.jsonl"), own("b", "queries.jsonl"));
        assert_eq!(out("joined-a", "qrels/train.tsv"), own("a", "qrels/train.tsv"));
        assert_eq!(lines.len(), 2);
        assert!(lines[1].contains("1 of its own documents among 3 joined"), "{lines:?}");
    }

    #[test]
    fn clashing_ids_bad_lines_and_bad_names_are_clear_errors() {
        let root = tempfile::tempdir().unwrap();
        let a = dataset(root.path(), "a", "{\"_id\":\"d1\"}\n{\"_id\":\"d2\"}\n");
        let b = dataset(root.path(), "b", "{\"_id\":\"d3\"}\n{\"_id\":\"d2\"}\n");
        let c = dataset(root.path(), "c", "{\"_id\":\"d4\"}\nnot json\n");
        let join = |datasets: Vec<(PathBuf, &str)>| {
            let datasets = datasets.into_iter().map(|(d, n)| (d, n.to_owned())).collect();
            join_sets(&JoinOptions { datasets, out: root.path().join("out") }, &mut |_| {}).unwrap_err().to_string()
        };
        let err = join(vec![(a.clone(), "ja"), (b.clone(), "jb")]);
        assert!(
            err.contains("b/corpus.jsonl:2: the document id `d2` is also at") && err.contains("a/corpus.jsonl:2"),
            "{err}"
        );
        let err = join(vec![(a.clone(), "ja"), (c.clone(), "jc")]);
        assert!(err.contains("c/corpus.jsonl:2: expected"), "{err}");
        assert!(join(vec![(a.clone(), "same"), (c.clone(), "same")]).contains("would both be written to `same`"));
        assert!(join(vec![(a.clone(), "../up"), (c.clone(), "jc")]).contains("cannot name an output directory"));
        assert!(join(vec![(a.clone(), "ja")]).contains("at least two datasets"));
        let err = join(vec![(a.clone(), "ja"), (root.path().join("missing"), "jm")]);
        assert!(err.contains("missing/corpus.jsonl"), "{err}");
        for (id, says) in [("null", "must be a string or a number"), ("{}", "must be a string"), ("\"  \"", "is empty")]
        {
            let d = dataset(root.path(), "bad-id", &format!("{{\"_id\":\"d9\"}}\n{{\"_id\":{id}}}\n"));
            let err = join(vec![(a.clone(), "ja"), (d, "jd")]);
            assert!(err.contains("bad-id/corpus.jsonl:2: `_id`") && err.contains(says), "{id}: {err}");
        }
        // A dataset without queries comes last, after the first output could have been written.
        let no_queries = dataset(root.path(), "nq", "{\"_id\":\"d8\"}\n");
        std::fs::remove_file(no_queries.join("queries.jsonl")).unwrap();
        let err = join(vec![(a.clone(), "ja"), (no_queries, "jn")]);
        assert!(err.contains("nq/queries.jsonl"), "{err}");
        assert!(!root.path().join("out").exists(), "nothing is written before every input is read");
    }

    #[test]
    fn an_output_directory_that_is_an_input_is_refused_and_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let a = dataset(root.path(), "a", "{\"_id\":\"d1\"}\n");
        let b = dataset(root.path(), "b", "{\"_id\":\"d2\"}\n");
        let opts = options(&a, "a", &b, "jb", root.path().join("b/../"));
        let err = join_sets(&opts, &mut |_| {}).unwrap_err().to_string();
        assert!(err.contains("is the input dataset") && err.contains("choose another --out or --name"), "{err}");
        assert_eq!(std::fs::read_to_string(a.join("corpus.jsonl")).unwrap(), "{\"_id\":\"d1\"}\n");
        assert!(!root.path().join("jb").exists());
    }

    #[test]
    fn crlf_lines_and_a_byte_order_mark_are_read_as_the_loader_reads_them() {
        let root = tempfile::tempdir().unwrap();
        let a = dataset(root.path(), "a", "{\"_id\":\"d1\",\"text\":\"x\"}\r\n{\"_id\":\"d2\",\"text\":\"y\"}\r\n");
        let b = dataset(root.path(), "b", "\u{feff}{\"_id\":\"d3\",\"text\":\"z\"}\n");
        let opts = options(&a, "ja", &b, "jb", root.path().join("out"));
        let report = join_sets(&opts, &mut |_| {}).unwrap();
        assert_eq!(report.documents, 3);
        let joined = root.path().join("out/jb");
        let bytes = std::fs::read_to_string(joined.join("corpus.jsonl")).unwrap();
        assert!(!bytes.contains('\u{feff}'), "the second file's byte order mark is dropped: {bytes:?}");
        // The joined directory loads with every document and no issues.
        let loaded = ragtune::ingest::load_beir(&joined, "train").unwrap();
        assert_eq!(loaded.corpus.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["d1", "d2", "d3"]);
        assert!(loaded.issues.iter().all(|i| !i.path.ends_with("corpus.jsonl")), "{:?}", loaded.issues);
    }
}
