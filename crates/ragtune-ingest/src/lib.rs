//! Loading corpora into [`Document`](ragtune_core::Document)s and cutting them into
//! [`Chunk`](ragtune_core::Chunk)s.
//!
//! Loaders read BEIR datasets ([`load_beir`]), JSON Lines files ([`load_jsonl_documents`]) and folders of
//! Markdown, plain text, HTML (main content only), PDF (text with page numbers) and DOCX ([`load_folder`]).
//! They step over bad lines and files and report them as [`LoadIssue`]s (`corpus.jsonl:17: expected value at
//! column 3`) next to what loaded; only problems that make the whole load meaningless (a missing file, an unknown
//! split, nothing loadable) are errors.
//! The chunker ([`chunk_document`]) cuts a document into parent sections at its Markdown headings and each
//! section into overlapping child passages of so many words; [`whole_document_chunk`] keeps a short document whole.
//! [`chunk_markdown`] cuts Markdown so that every passage fits an embedding model's window, counted in the model's
//! own tokens through the [`TokenCounter`](ragtune_core::TokenCounter) seam (or [`EstimatedTokens`]): whole blocks
//! packed up to the window, cut code blocks fenced again, cut tables under their header row, front matter left out.
//!
//! ```
//! use ragtune_core::{ChunkKind, Document};
//! use ragtune_ingest::{ChunkerConfig, chunk_document};
//!
//! let doc = Document::new("guide.md", "# Guide\nWelcome.\n\n## Install\nRun `make`.\n");
//! let chunks = chunk_document(&doc, &ChunkerConfig::default())?;
//! let passages: Vec<_> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).collect();
//! assert_eq!(passages.len(), 2);
//! assert_eq!(passages[1].id, "guide.md#1");
//! assert_eq!(passages[1].parent_id.as_deref(), Some("guide.md#s1"));
//! assert_eq!(passages[1].header_path, ["Guide", "Install"]);
//! assert_eq!(passages[1].text, "## Install\nRun `make`.");
//! # Ok::<(), ragtune_core::Error>(())
//! ```
//!
//! Cutting to a model's window (here the estimate for a 256-token model; the facade passes the model's tokenizer):
//!
//! ```
//! use ragtune_core::{ChunkKind, Document, TokenCounter};
//! use ragtune_ingest::{ChunkerConfig, EstimatedTokens, chunk_markdown};
//!
//! let code: String = (0..200).map(|i| format!("let x{i} = compute({i});\n")).collect();
//! let text = format!("---\ntitle: Guide\n---\n# Guide\nRun:\n\n```rust\n{code}```\n");
//! let tokens = EstimatedTokens::new(256);
//! let chunks = chunk_markdown(&Document::new("guide.md", text), &ChunkerConfig::default(), &tokens)?;
//! let passages: Vec<_> = chunks.iter().filter(|c| c.kind == ChunkKind::Passage).collect();
//! assert!(passages.len() > 1);
//! for p in &passages {
//!     assert!(tokens.count(&[&p.indexable_text()])?[0] <= 256);
//!     assert!(p.text.contains("```rust\n") && p.text.ends_with("```"), "every piece is fenced");
//!     assert!(!p.text.contains("title:"), "front matter is not indexed");
//! }
//! # Ok::<(), ragtune_core::Error>(())
//! ```

mod beir;
mod chunk;
mod docx;
mod folder;
mod jsonl;
mod lines;
mod markdown;
mod pdf;
mod report;

pub use beir::{BeirDataset, BeirQuery, Qrels, corpus_ids, list_splits, load_beir, load_qrels};
pub use chunk::{ChunkerConfig, chunk_document, whole_document_chunk};
pub use folder::{
    FORMAT_DOCX, FORMAT_HTML, FORMAT_MARKDOWN, FORMAT_PDF, FORMAT_TEXT, MAX_FILE_BYTES, load_folder,
    load_folder_excluding,
};
pub use jsonl::load_jsonl_documents;
pub use markdown::{EstimatedTokens, chunk_markdown, front_matter_len, front_matter_title};
pub use pdf::PAGE_BREAK;
pub use report::{LoadIssue, Loaded};
