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
/// one result and counts the requests, for tests of web search through the engine and the command-line tool.
#[derive(Debug)]
pub struct SearxServer {
    /// The base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SearxServer {
    /// Starts the server on a free port; it answers each request with `result` (a SearXNG result object:
    /// `url`, `title`, `content`, …) and lives as long as the test process.
    ///
    /// # Panics
    /// When no loopback port can be bound: this is test support.
    #[must_use]
    pub fn start(result: serde_json::Value) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("a bound address"));
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::clone(&requests);
        let body = serde_json::json!({ "results": [result] }).to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut buf = [0_u8; 8192];
                let mut head = Vec::new();
                // Read the request head; the body (there is none for GET) is not needed.
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { url, requests }
    }

    /// Requests answered so far.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
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
