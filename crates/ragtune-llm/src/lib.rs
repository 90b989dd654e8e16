//! The LLM layer of ragtune.
//!
//! - [`OpenAiClient`]: the [`Llm`](ragtune_core::Llm) seam on any OpenAI-compatible server (`/v1/chat/completions`
//!   or `/v1/completions`): JSON-schema output, timeouts, retries with backoff for transient failures only, token
//!   usage in the cost of every call, API keys never logged.
//! - [`prompts`]: every prompt ragtune sends, versioned, with the JSON schema of its output.
//! - [`generate_json`]: structured output with one repair round; malformed output is an
//!   [`ErrorKind::MalformedOutput`](ragtune_core::ErrorKind::MalformedOutput) error that callers degrade on.
//! - [`CachedLlm`]: answers kept on disk, so evaluation runs are fast and reproducible.
//!
//! Tests and offline users run a real small model locally: `cargo xtask llm start` (see `docs/llm.md`).
//!
//! ```no_run
//! use ragtune_core::Ctx;
//! use ragtune_llm::{LlmConfig, OpenAiClient, generate_json, prompts};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let llm = OpenAiClient::new(LlmConfig { base_url: "http://127.0.0.1:8080".into(), ..LlmConfig::default() })?;
//! let request = prompts::REWRITE.render(&[("query", "who wrote it?"), ("context", "We talked about Dune.")])?;
//! let answer = generate_json(&llm, &Ctx::new(), request).await?;
//! println!("search for: {}", answer.value["query"]);
//! # Ok(())
//! # }
//! ```

mod cache;
mod client;
pub mod prompts;
mod structured;

pub use cache::{CacheLimits, CachedLlm};
pub use client::{DEFAULT_MAX_RESPONSE_BYTES, Endpoint, LlmConfig, OpenAiClient, plain_prompt};
pub use structured::{JsonAnswer, RawOutput, chat, generate_json, parse_json_text, raw_output};
