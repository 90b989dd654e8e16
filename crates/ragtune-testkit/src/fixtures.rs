//! Small datasets written to disk for tests of the loaders, the evaluations and the command-line tool.

use std::path::Path;

/// Writes a BEIR dataset of three documents and three queries into `dir` (created): `q1` and `q2` are judged (one
/// relevant document each, which BM25 ranks first), `q3` is not; the qrels file has a header and CRLF line ends.
///
/// # Panics
/// When the files cannot be written: this is test support.
pub fn tiny_beir(dir: &Path) {
    std::fs::create_dir_all(dir.join("qrels")).expect("write the tiny BEIR dataset");
    std::fs::write(
        dir.join("corpus.jsonl"),
        [
            r#"{"_id": "d1", "title": "Scurvy", "text": "Scurvy is caused by a lack of vitamin C."}"#,
            r#"{"_id": "d2", "title": "Rickets", "text": "Rickets is caused by a lack of vitamin D."}"#,
            r#"{"_id": "d3", "title": "Goitre", "text": "Goitre is linked to iodine deficiency."}"#,
        ]
        .join("\n"),
    )
    .expect("write the tiny BEIR dataset");
    std::fs::write(
        dir.join("queries.jsonl"),
        "{\"_id\": \"q1\", \"text\": \"scurvy vitamin C\"}\n{\"_id\": \"q2\", \"text\": \"iodine\"}\n{\"_id\": \"q3\", \"text\": \"unjudged\"}\n",
    )
    .expect("write the tiny BEIR dataset");
    std::fs::write(dir.join("qrels/test.tsv"), "query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq2\td3\t1\r\n")
        .expect("write the tiny BEIR dataset");
}
