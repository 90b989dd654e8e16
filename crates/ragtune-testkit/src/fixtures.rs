//! Small datasets written to disk for tests of the loaders, the evaluations and the command-line tool.

use std::path::Path;

use ragtune_core::{Candidate, Chunk, ScoredHit};

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

/// A SearXNG-compatible search endpoint on 127.0.0.1 (`GET /search?format=json`) that answers every request with
/// one result and counts the requests, for tests of web search through the engine and the command-line tool: a
/// [`ScriptedServer`](crate::http::ScriptedServer) with one reply.
#[derive(Debug)]
pub struct SearxServer {
    /// The base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    server: crate::http::ScriptedServer,
}

impl SearxServer {
    /// Starts the server on a free port; it answers each request with `result` (a SearXNG result object:
    /// `url`, `title`, `content`, …) for as long as it lives.
    ///
    /// # Panics
    /// When no loopback port can be bound: this is test support.
    #[must_use]
    pub fn start(result: serde_json::Value) -> Self {
        let body = serde_json::json!({ "results": [result] });
        let server = crate::http::serve(move |_, _| crate::http::Reply::json_value(200, &body));
        Self { url: server.url().to_owned(), server }
    }

    /// Requests answered so far.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.server.count()
    }
}

/// A ranked list of `strategy` from `(document id, score)` pairs in rank order: one chunk per document, whose id
/// and document id are the id and whose text is `the text of <id>`.
#[must_use]
pub fn ranked_list(strategy: &str, items: &[(&str, f32)]) -> Vec<Candidate> {
    items
        .iter()
        .zip(1u32..)
        .map(|((id, score), rank)| {
            let chunk = Chunk::new(*id, *id, format!("the text of {id}"));
            Candidate::from_hit(ScoredHit { chunk, score: *score }, strategy, rank)
        })
        .collect()
}
