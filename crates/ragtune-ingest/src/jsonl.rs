//! JSON Lines documents, and the JSON helpers the BEIR loader shares.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use ragtune_core::{Document, Error, Metadata, Result};
use serde_json::{Map, Value};

use crate::lines::{for_each_line, open, utf8_message};
use crate::{LoadIssue, Loaded};

/// Loads documents from a JSON Lines file, one JSON object per line.
///
/// Each object needs an `id` (or `_id`; a string or a number) and a string `text`.
/// `title` and `source` (strings) and `metadata` (an object) are optional; every other top-level field is added
/// to the document's metadata (`metadata` wins on a clash).
/// A blank title is treated as no title. Blank lines are skipped.
/// A line that is not such an object, is not UTF-8, or repeats an earlier id becomes a [`LoadIssue`] with its line
/// number, and the other lines still load (the first of two equal ids is kept).
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when the file does not exist,
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when it holds no valid document, and
/// [`ErrorKind::Permanent`](ragtune_core::ErrorKind::Permanent) for other IO failures; each names the path.
pub fn load_jsonl_documents(path: impl AsRef<Path>) -> Result<Loaded<Document>> {
    let path = path.as_ref();
    let loaded = read_jsonl_documents(open(path)?, path)?;
    require_some(&loaded, path, "documents")?;
    Ok(loaded)
}

/// Reads JSONL documents from any buffered reader; `path` only names the origin in issues.
pub(crate) fn read_jsonl_documents(reader: impl BufRead, path: &Path) -> Result<Loaded<Document>> {
    let mut out = Loaded::default();
    let mut seen = SeenIds::default();
    for_each_line(reader, path, |n, line| match line.map_err(utf8_message).and_then(parse_document_line) {
        Ok(None) => {}
        Ok(Some(doc)) => match seen.first_line(&doc.id, n) {
            None => out.items.push(doc),
            Some(first) => out.issues.push(LoadIssue::line(path, n, duplicate_message(&doc.id, first))),
        },
        Err(message) => out.issues.push(LoadIssue::line(path, n, message)),
    })?;
    Ok(out)
}

/// Parses one line into a document; `Ok(None)` for a blank line.
fn parse_document_line(line: &str) -> std::result::Result<Option<Document>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let mut obj = parse_object(line)?;
    let id = match obj.remove("id") {
        Some(v) => id_value(v, "id")?,
        None => id_value(obj.remove("_id").ok_or("missing `id` (or `_id`)")?, "_id")?,
    };
    let text = take_string(&mut obj, "text")?.ok_or("missing `text`")?;
    let title = take_string(&mut obj, "title")?.filter(|t| !t.trim().is_empty());
    let source = take_string(&mut obj, "source")?;
    let explicit = take_metadata(&mut obj)?;
    // The remaining fields are metadata too; the explicit object is inserted last so that it wins on a clash.
    let mut metadata: Metadata = obj.into_iter().collect();
    metadata.extend(explicit);
    Ok(Some(Document { id, title, text, source, metadata }))
}

/// Parses `line` as a JSON object, with an error message fit for a `file:line:` prefix.
pub(crate) fn parse_object(line: &str) -> std::result::Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!("expected a JSON object, found {}", type_name(&other))),
        Err(e) => {
            // serde_json says "... at line 1 column 3"; a JSONL line is always line 1, so keep only the column.
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full);
            Err(format!("{message} at column {}", e.column()))
        }
    }
}

/// Converts an id field (a non-empty string or a number) into a string.
pub(crate) fn id_value(v: Value, key: &str) -> std::result::Result<String, String> {
    let id = match v {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        other => return Err(format!("`{key}` must be a string or a number, found {}", type_name(&other))),
    };
    if id.trim().is_empty() {
        return Err(format!("`{key}` is empty"));
    }
    Ok(id)
}

/// Removes `key` from `obj`: `Ok(None)` when absent or null, an error when it is not a string.
pub(crate) fn take_string(obj: &mut Map<String, Value>, key: &str) -> std::result::Result<Option<String>, String> {
    match obj.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("`{key}` must be a string, found {}", type_name(&other))),
    }
}

/// Removes `metadata` from `obj`: empty when absent or null, an error when it is not an object.
pub(crate) fn take_metadata(obj: &mut Map<String, Value>) -> std::result::Result<Metadata, String> {
    match obj.remove("metadata") {
        None | Some(Value::Null) => Ok(Metadata::new()),
        Some(Value::Object(map)) => Ok(map.into_iter().collect()),
        Some(other) => Err(format!("`metadata` must be an object, found {}", type_name(&other))),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Remembers the line on which each id was first seen.
#[derive(Debug, Default)]
pub(crate) struct SeenIds(HashMap<String, usize>);

impl SeenIds {
    /// Records `id` at `line`; returns the earlier line when the id was already seen.
    pub(crate) fn first_line(&mut self, id: &str, line: usize) -> Option<usize> {
        if let Some(&first) = self.0.get(id) {
            return Some(first);
        }
        self.0.insert(id.to_owned(), line);
        None
    }
}

pub(crate) fn duplicate_message(id: &str, first: usize) -> String {
    format!("duplicate id {id:?} (first seen on line {first}); kept the first")
}

/// Fails with "no {what} found in {path}" when nothing loaded, quoting the first issue as the likely reason.
pub(crate) fn require_some<T>(loaded: &Loaded<T>, path: &Path, what: &str) -> Result<()> {
    if !loaded.items.is_empty() {
        return Ok(());
    }
    let mut message = format!("no {what} found in {}", path.display());
    if let Some(first) = loaded.issues.first() {
        message.push_str(&format!(" ({} problem(s), the first: {first})", loaded.issues.len()));
    }
    Err(Error::invalid_input(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::ErrorKind;

    /// Loads `input` as a JSONL file and renders documents and issues one per line.
    fn check(input: &[u8], expect: &str) {
        let loaded = read_jsonl_documents(input, Path::new("docs.jsonl")).unwrap();
        let mut got = String::new();
        for d in &loaded.items {
            let meta = serde_json::to_string(&d.metadata).unwrap();
            got.push_str(&format!(
                "{} title={:?} source={:?} meta={meta} text={:?}\n",
                d.id, d.title, d.source, d.text
            ));
        }
        for issue in &loaded.issues {
            got.push_str(&format!("! {issue}\n"));
        }
        assert_eq!(got, expect);
    }

    #[test]
    fn fields_and_extra_metadata() {
        check(
            br#"{"id": "a", "text": "hello", "title": "T", "source": "s.md", "lang": "en", "metadata": {"lang": "de", "n": 1}}
{"_id": 7, "text": "x", "title": "  "}
"#,
            "a title=Some(\"T\") source=Some(\"s.md\") meta={\"lang\":\"de\",\"n\":1} text=\"hello\"\n\
             7 title=None source=None meta={} text=\"x\"\n",
        );
    }

    #[test]
    fn malformed_lines_are_issues_and_the_rest_loads() {
        check(
            b"{\"id\": \"a\", \"text\": \"one\"}\n\n{\"id\": \"b\", \"text\": }\n{\"text\": \"no id\"}\r\n[1]\n\
              {\"id\": \"a\", \"text\": \"dup\"}\n{\"id\": \"c\", \"text\": \"b\xffad\"}\n{\"id\": \"d\", \"text\": 3}\n\
              {\"id\": \"e\", \"text\": \"last\"}",
            "a title=None source=None meta={} text=\"one\"\n\
             e title=None source=None meta={} text=\"last\"\n\
             ! docs.jsonl:3: expected value at column 21\n\
             ! docs.jsonl:4: missing `id` (or `_id`)\n\
             ! docs.jsonl:5: expected a JSON object, found an array\n\
             ! docs.jsonl:6: duplicate id \"a\" (first seen on line 1); kept the first\n\
             ! docs.jsonl:7: not valid UTF-8 (invalid byte at offset 22)\n\
             ! docs.jsonl:8: `text` must be a string, found a number\n",
        );
    }

    #[test]
    fn missing_and_empty_files_are_errors() {
        let e = load_jsonl_documents("/nonexistent/docs.jsonl").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("/nonexistent/docs.jsonl"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.jsonl");
        std::fs::write(&path, "\n  \n").unwrap();
        let e = load_jsonl_documents(&path).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), format!("no documents found in {}", path.display()));

        std::fs::write(&path, "{\"text\": \"x\"}\n").unwrap();
        let e = load_jsonl_documents(&path).unwrap_err();
        assert!(e.message().contains("the first: ") && e.message().ends_with(":1: missing `id` (or `_id`))"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let loaded = read_jsonl_documents(&bytes[..], Path::new("fuzz.jsonl")).unwrap();
            let lines = bytes.split(|&b| b == b'\n').count();
            proptest::prop_assert!(loaded.items.len() + loaded.issues.len() <= lines);
        }

        #[test]
        fn never_panics_on_json_like_lines(lines in proptest::collection::vec("[{}\\[\\]\":, a-z_0-9\\\\]{0,40}", 0..8)) {
            let input = lines.join("\n");
            read_jsonl_documents(input.as_bytes(), Path::new("fuzz.jsonl")).unwrap();
        }
    }
}
