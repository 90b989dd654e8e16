//! Prompts and structured output on the [`Llm`] seam: the template type every layer renders, tolerant parsing of
//! JSON answers, and [`generate_json`] with one repair round.
//!
//! The prompt texts themselves live in one place, `ragtune_llm::prompts`; layers that must not depend on
//! `ragtune-llm` (retrieval, evaluators) receive the [`Prompt`]s they need from whoever wires them.
//! Placeholders are written `{{name}}`; rendering fails on a missing value or a leftover placeholder.

use std::fmt;

use serde_json::Value;

use crate::{Cost, Ctx, Error, ErrorKind, Llm, LlmRequest, Message, Result, Role, TraceEvent};

/// One prompt template.
#[derive(Debug, Clone, Copy)]
pub struct Prompt {
    /// Stable name (`hyde`, `multi_query`).
    pub id: &'static str,
    /// Bumped on every change of wording or schema.
    pub version: u32,
    /// The system message.
    pub system: &'static str,
    /// The user message with `{{placeholders}}`.
    pub user: &'static str,
    /// The output's JSON schema, for structured prompts.
    pub schema: Option<fn() -> Value>,
    /// Sampling temperature.
    pub temperature: f32,
    /// Most tokens to generate.
    pub max_tokens: u32,
}

impl Prompt {
    /// `id@version`, for traces.
    #[must_use]
    pub fn tag(&self) -> String {
        format!("{}@{}", self.id, self.version)
    }

    /// The request for the given values (seed 0, so answers are reproducible where the server honours seeds).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming a placeholder without a value.
    pub fn render(&self, values: &[(&str, &str)]) -> Result<LlmRequest> {
        let user = fill(self.user, values).map_err(|e| e.context(self.tag()))?;
        Ok(LlmRequest {
            messages: chat(self.system, &user),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            seed: Some(0),
            stop: Vec::new(),
            json_schema: self.schema.map(|f| f()),
        })
    }
}

/// Fills the template's `{{name}}` placeholders in one pass over the template: a value is inserted as it is and never
/// read again, so text that itself contains `{{...}}` (wiki markup in a document, a question about templates) is
/// sent verbatim instead of being taken for a placeholder.
fn fill(template: &str, values: &[(&str, &str)]) -> Result<String> {
    let mut out = String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            let name: String = after.chars().take(40).collect();
            Error::invalid_input(format!("the prompt has an unclosed placeholder `{{{{{name}`"))
        })?;
        let name = &after[..end];
        let value = values
            .iter()
            .find(|(k, _)| *k == name)
            .ok_or_else(|| Error::invalid_input(format!("the prompt needs a value for `{name}`")))?;
        out.push_str(value.1);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The raw text of a structured answer that did not parse, attached as the source of a
/// [`ErrorKind::MalformedOutput`] error so that a caller can show it or ask for a repair.
#[derive(Debug, Clone, PartialEq)]
pub struct RawOutput {
    /// What the model wrote.
    pub text: String,
    /// What producing it cost.
    pub cost: Cost,
}

impl fmt::Display for RawOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raw output of {} bytes", self.text.len())
    }
}

impl std::error::Error for RawOutput {}

/// The [`RawOutput`] behind a malformed-output error, if there is one.
#[must_use]
pub fn raw_output(error: &Error) -> Option<&RawOutput> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = cur {
        if let Some(raw) = e.downcast_ref::<RawOutput>() {
            return Some(raw);
        }
        cur = e.source();
    }
    None
}

/// Parses a model's JSON answer, tolerating what models add around it: whitespace, a Markdown code fence, or prose
/// before the first `{`/`[` and after the matching last `}`/`]`.
///
/// # Errors
/// The parser's message when no JSON document can be found.
pub fn parse_json_text(text: &str) -> std::result::Result<Value, String> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return Ok(v);
    }
    let unfenced = t.trim_start_matches("```json").trim_start_matches("```").trim_end_matches("```").trim();
    if let Ok(v) = serde_json::from_str::<Value>(unfenced) {
        return Ok(v);
    }
    let start = unfenced.find(['{', '[']);
    let end = unfenced.rfind(['}', ']']);
    match (start, end) {
        (Some(s), Some(e)) if e > s => serde_json::from_str(&unfenced[s..=e]).map_err(|e| e.to_string()),
        _ => Err("no JSON object or array in the output".into()),
    }
}

/// What [`generate_json`] returns: the parsed value, what it cost (repair included), and whether a repair was
/// needed.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonAnswer {
    /// The parsed output.
    pub value: Value,
    /// Tokens and calls of every attempt.
    pub cost: Cost,
    /// Whether the first answer was malformed and a repair prompt fixed it.
    pub repaired: bool,
}

/// Runs a request that has a JSON schema and returns the parsed output. When the answer is malformed or
/// truncated, asks once more with the `repair` prompt (placeholders `schema` and `output`; `ragtune_llm` ships
/// `prompts::REPAIR_JSON`) showing the broken output and the schema; when that fails too, returns the
/// [`ErrorKind::MalformedOutput`] error so the caller can degrade.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] when the request has no schema; the LLM's errors; `MalformedOutput` after a failed
/// repair.
pub async fn generate_json(llm: &dyn Llm, ctx: &Ctx, request: LlmRequest, repair: &Prompt) -> Result<JsonAnswer> {
    let Some(schema) = request.json_schema.clone() else {
        return Err(Error::invalid_input("generate_json needs a request with a JSON schema"));
    };
    let first = llm.generate(ctx, std::slice::from_ref(&request)).await;
    let error = match first {
        Ok(mut r) => {
            let response = r.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
            match parse_json_text(&response.text) {
                Ok(value) => return Ok(JsonAnswer { value, cost: response.cost, repaired: false }),
                Err(e) => Error::malformed_output(format!("the structured output is not valid JSON ({e})"))
                    .with_source(RawOutput { text: response.text, cost: response.cost }),
            }
        }
        Err(e) if e.kind() == ErrorKind::MalformedOutput => e,
        Err(e) => return Err(e),
    };
    let raw = raw_output(&error).cloned().unwrap_or(RawOutput { text: String::new(), cost: Cost::ZERO });
    ctx.trace(TraceEvent::new("llm", "repair").detail("error", error.message().to_owned()));
    let schema_text = serde_json::to_string(&schema).unwrap_or_default();
    let mut repair = repair
        .render(&[("schema", &schema_text), ("output", &truncate(&raw.text, 4000))])
        .map_err(|e| e.context("rendering the repair prompt"))?;
    repair.json_schema = Some(schema);
    repair.seed = request.seed;
    repair.max_tokens = request.max_tokens.max(repair.max_tokens);
    let mut cost = raw.cost;
    match llm.generate(ctx, std::slice::from_ref(&repair)).await {
        Ok(mut r) => {
            let response = r.pop().ok_or_else(|| Error::permanent("the LLM returned no response"))?;
            cost += response.cost;
            parse_json_text(&response.text)
                .map(|value| JsonAnswer { value, cost, repaired: true })
                .map_err(|e| Error::malformed_output(format!("the repaired output is still not valid JSON ({e})")))
        }
        Err(e) if e.kind() == ErrorKind::MalformedOutput => Err(e.context("after one repair attempt")),
        Err(e) => Err(e),
    }
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => text[..i].to_owned(),
        None => text.to_owned(),
    }
}

/// Untrusted text (a document, a web page) made safe to place inside a prompt's delimited source blocks: `<` before
/// `source` or `/source` (any case, with spaces) becomes `‹`, so the text cannot close its block or open another,
/// and a citation number `[n]` becomes `(n)`, so it cannot pass for a numbered source or sentence. Everything else
/// is kept as it is.
///
/// ```
/// assert_eq!(ragtune_core::prompt::neutralise("a</source> <SOURCE>[2] b"), "a‹/source> ‹SOURCE>(2) b");
/// ```
#[must_use]
pub fn neutralise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        if c == '<' {
            let name = after.trim_start_matches(|c: char| c.is_whitespace() || c == '/');
            if name.get(..6).is_some_and(|w| w.eq_ignore_ascii_case("source")) {
                out.push('‹');
                rest = after;
                continue;
            }
        } else if c == '[' {
            let digits = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
            if digits > 0 && after[digits..].starts_with(']') {
                out.push('(');
                out.push_str(&after[..digits]);
                out.push(')');
                rest = &after[digits + 1..];
                continue;
            }
        }
        out.push(c);
        rest = after;
    }
    out
}

/// A system message and a user message.
#[must_use]
pub fn chat(system: &str, user: &str) -> Vec<Message> {
    let mut out = Vec::with_capacity(2);
    if !system.is_empty() {
        out.push(Message { role: Role::System, content: system.to_owned() });
    }
    out.push(Message { role: Role::User, content: user.to_owned() });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: Option<&str>) {
        let got = parse_json_text(input).ok().map(|v| v.to_string());
        assert_eq!(got.as_deref(), expect, "input: {input:?}");
    }

    #[test]
    fn values_are_inserted_verbatim_and_never_read_as_placeholders() {
        let template = "Sources:\n{{context}}\n\nQuestion: {{question}}";
        // Wiki markup in a document, and a value that names another placeholder: both sent as they are.
        let context = "London {{cite web|url= title=Largest EU City}} is large. {{question}}";
        let filled = fill(template, &[("question", "Is London big?"), ("context", context)]).unwrap();
        assert_eq!(filled, format!("Sources:\n{context}\n\nQuestion: Is London big?"));
        // The same placeholder twice, and one value given but unused.
        assert_eq!(fill("{{a}}-{{a}}", &[("a", "x"), ("b", "y")]).unwrap(), "x-x");
        // A placeholder of the template without a value, and an unclosed one, are errors that name it.
        let missing = fill("{{context}} {{question}}", &[("context", "c")]).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::InvalidInput);
        assert!(missing.to_string().contains("needs a value for `question`"), "{missing}");
        let unclosed = fill("Question: {{question", &[("question", "q")]).unwrap_err();
        assert!(unclosed.to_string().contains("unclosed placeholder `{{question`"), "{unclosed}");
    }

    #[test]
    fn json_is_found_inside_what_models_write() {
        check(r#"{"a": 1}"#, Some(r#"{"a":1}"#));
        check("```json\n{\"a\": [1, 2]}\n```", Some(r#"{"a":[1,2]}"#));
        check("Sure! Here it is: {\"q\": \"x\"} Hope that helps.", Some(r#"{"q":"x"}"#));
        check("[\"a\", \"b\"]", Some(r#"["a","b"]"#));
        check("{\"a\": ", None);
        check("no json here", None);
        check("", None);
    }
}
