//! Structured output with ragtune's own repair prompt.

use ragtune_core::{Ctx, Llm, LlmRequest, Result};

pub use ragtune_core::prompt::{JsonAnswer, RawOutput, chat, parse_json_text, raw_output};

use crate::prompts;

/// [`ragtune_core::prompt::generate_json`] with [`prompts::REPAIR_JSON`] as the repair prompt: runs a request
/// that has a JSON schema, repairs a malformed answer once, and otherwise returns the
/// [`MalformedOutput`](ragtune_core::ErrorKind::MalformedOutput) error for the caller to degrade on.
///
/// # Errors
/// As [`ragtune_core::prompt::generate_json`].
pub async fn generate_json(llm: &dyn Llm, ctx: &Ctx, request: LlmRequest) -> Result<JsonAnswer> {
    ragtune_core::prompt::generate_json(llm, ctx, request, &prompts::REPAIR_JSON).await
}
