//! Translation of [`ragtune_core::Filter`] into a Qdrant filter with the same answers as [`Filter::matches`].
//!
//! The rules, each chosen to agree with `Filter::matches`:
//! - built-in fields map to top-level payload keys (`doc_id`, `id` → `chunk_id`, `parent_id`, `kind`); every other
//!   field is a metadata key, `metadata.<key>` (quoted when the key is not a plain identifier);
//! - strings match as keywords, built explicitly: the client's `MatchValue::from(String)` turns a string with
//!   whitespace into a full-text match;
//! - numbers, integers included, match as a range with `gte = lte = value`: `Filter::matches` compares numbers by
//!   value (`2020` equals `2020.0`), and Qdrant's integer match does not match a float payload value, whereas its
//!   range compares any JSON number as `f64`, exactly as `Filter::matches` does;
//! - booleans match as booleans; an array payload value matches when any element does, in both;
//! - `Eq` with `null`, an array or an object (exact JSON equality) has no Qdrant equivalent and is refused;
//! - a missing field satisfies no positive condition in both, and `Not` is `must_not`;
//! - `And([])` matches everything and `Or([])` / `In` with no values match nothing. Qdrant treats an empty
//!   `should` list as no condition at all, so these constants are folded here and never sent: a request whose
//!   filter matches nothing is answered without asking the server.
//!
//! One divergence remains: `Range` on a field holding an array matches on Qdrant when any element is in range,
//! while `Filter::matches` never matches an array with `Range`. Metadata written by ragtune's loaders keeps
//! numbers scalar.

use qdrant_client::qdrant::r#match::MatchValue;
use qdrant_client::qdrant::{Condition, Filter as QFilter, Range, RepeatedStrings, condition::ConditionOneOf};
use ragtune_core::{Error, Filter, Result};

use super::payload::{CHUNK_ID, DOC_ID, KIND, METADATA, PARENT_ID};

/// A translated filter: everything, nothing, or a condition for the server.
// One short-lived value per request: the size of the condition variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Translated {
    /// No restriction (send no filter).
    All,
    /// Matches no chunk (send no request; the answer is empty).
    Nothing,
    /// A condition for the server.
    Cond(Condition),
}

impl Translated {
    /// The filter to send: `None` for [`Translated::All`].
    ///
    /// Callers handle [`Translated::Nothing`] before asking for a filter; here it becomes a filter no chunk
    /// passes (a `chunk_id` that is empty is never stored, since writes refuse empty ids), for safety.
    pub(crate) fn into_filter(self) -> Option<QFilter> {
        match self {
            Self::All => None,
            Self::Nothing => Some(QFilter::must([keyword(CHUNK_ID, String::new())])),
            Self::Cond(Condition { condition_one_of: Some(ConditionOneOf::Filter(f)) }) => Some(f),
            Self::Cond(c) => Some(QFilter::must([c])),
        }
    }
}

/// Translates a filter.
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a condition Qdrant cannot express the same way
/// (`Eq`/`In` with `null`, an array or an object; a metadata key containing `"` or `\`).
pub(crate) fn translate(filter: &Filter) -> Result<Translated> {
    Ok(match filter {
        Filter::Eq { field, value } => value_condition(field, value)?,
        Filter::In { field, values } => {
            let key = payload_key(field)?;
            let mut strings = Vec::new();
            let mut others = Vec::new();
            for v in values {
                match v {
                    serde_json::Value::String(s) => strings.push(s.clone()),
                    other => others.push(value_condition(field, other)?),
                }
            }
            match strings.len() {
                0 => {}
                1 => others.push(Translated::Cond(keyword(&key, strings.remove(0)))),
                _ => others
                    .push(Translated::Cond(Condition::matches(key, MatchValue::Keywords(RepeatedStrings { strings })))),
            }
            any(others)
        }
        Filter::Range { field, gte, lte } => {
            if gte.is_some_and(f64::is_nan) || lte.is_some_and(f64::is_nan) {
                // Every comparison with NaN is false in `Filter::matches`.
                Translated::Nothing
            } else {
                Translated::Cond(Condition::range(
                    payload_key(field)?,
                    Range { gte: *gte, lte: *lte, lt: None, gt: None },
                ))
            }
        }
        Filter::And(all) => {
            let mut conds = Vec::with_capacity(all.len());
            for f in all {
                match translate(f)? {
                    Translated::All => {}
                    Translated::Nothing => return Ok(Translated::Nothing),
                    Translated::Cond(c) => conds.push(c),
                }
            }
            match conds.len() {
                0 => Translated::All,
                1 => Translated::Cond(conds.remove(0)),
                _ => Translated::Cond(QFilter::must(conds).into()),
            }
        }
        Filter::Or(options) => any(options.iter().map(translate).collect::<Result<Vec<_>>>()?),
        Filter::Not(inner) => match translate(inner)? {
            Translated::All => Translated::Nothing,
            Translated::Nothing => Translated::All,
            Translated::Cond(c) => Translated::Cond(QFilter::must_not([c]).into()),
        },
    })
}

/// At least one of the options.
fn any(options: Vec<Translated>) -> Translated {
    let mut conds = Vec::with_capacity(options.len());
    for t in options {
        match t {
            Translated::All => return Translated::All,
            Translated::Nothing => {}
            Translated::Cond(c) => conds.push(c),
        }
    }
    match conds.len() {
        0 => Translated::Nothing,
        1 => Translated::Cond(conds.remove(0)),
        _ => Translated::Cond(QFilter::should(conds).into()),
    }
}

/// `field == value` for one scalar value.
fn value_condition(field: &str, value: &serde_json::Value) -> Result<Translated> {
    let key = payload_key(field)?;
    Ok(Translated::Cond(match value {
        serde_json::Value::String(s) => keyword(&key, s.clone()),
        serde_json::Value::Bool(b) => Condition::matches(key, MatchValue::Boolean(*b)),
        serde_json::Value::Number(n) => {
            let Some(x) = n.as_f64() else { return Ok(Translated::Nothing) };
            Condition::range(key, Range { gte: Some(x), lte: Some(x), lt: None, gt: None })
        }
        serde_json::Value::Null | serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
            return Err(Error::invalid_input(format!(
                "the filter condition `{field}` equals {value} cannot be expressed on Qdrant: only strings, numbers \
                 and booleans can be compared there (use the embedded store for exact JSON equality)"
            )));
        }
    }))
}

/// An exact keyword match, never a full-text match.
pub(crate) fn keyword(key: &str, value: String) -> Condition {
    Condition::matches(key, MatchValue::Keyword(value))
}

/// The payload key of a filter field.
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a metadata key Qdrant's key syntax cannot quote.
pub(crate) fn payload_key(field: &str) -> Result<String> {
    Ok(match field {
        "doc_id" => DOC_ID.to_owned(),
        "id" => CHUNK_ID.to_owned(),
        "parent_id" => PARENT_ID.to_owned(),
        "kind" => KIND.to_owned(),
        key if !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') => {
            format!("{METADATA}.{key}")
        }
        key if key.contains(['"', '\\']) => {
            return Err(Error::invalid_input(format!(
                "the metadata key `{key}` cannot be filtered on Qdrant: its key paths cannot quote `\"` or `\\`"
            )));
        }
        // Qdrant's key paths quote keys with dots, brackets or spaces: `metadata."a.b"`.
        key => format!("{METADATA}.\"{key}\""),
    })
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use qdrant_client::qdrant::FieldCondition;
    use qdrant_client::qdrant::r#match::MatchValue;
    use ragtune_core::{Chunk, ChunkKind, ErrorKind};
    use serde_json::{Value as Json, json};

    use super::*;

    /// Renders a translated filter as compact text, the expectation format of [`check`].
    fn render(t: &Translated) -> String {
        match t {
            Translated::All => "ALL".into(),
            Translated::Nothing => "NOTHING".into(),
            Translated::Cond(c) => render_cond(c),
        }
    }

    fn render_cond(c: &Condition) -> String {
        match c.condition_one_of.as_ref().expect("a condition") {
            ConditionOneOf::Field(f) => render_field(f),
            ConditionOneOf::Filter(f) => {
                let mut parts = Vec::new();
                for (name, list) in [("all", &f.must), ("any", &f.should), ("not", &f.must_not)] {
                    if !list.is_empty() {
                        let inner: Vec<String> = list.iter().map(render_cond).collect();
                        parts.push(format!("{name}({})", inner.join(", ")));
                    }
                }
                assert!(f.min_should.is_none());
                parts.join(" & ")
            }
            other => format!("{other:?}"),
        }
    }

    fn render_field(f: &FieldCondition) -> String {
        let mut out = f.key.clone();
        if let Some(m) = f.r#match.as_ref().and_then(|m| m.match_value.as_ref()) {
            let _ = match m {
                MatchValue::Keyword(s) => write!(out, " = {s:?}"),
                MatchValue::Keywords(s) => write!(out, " in {:?}", s.strings),
                MatchValue::Boolean(b) => write!(out, " = {b}"),
                other => write!(out, " {other:?}"),
            };
        }
        if let Some(r) = &f.range {
            let _ = write!(out, " in [{:?}, {:?}]", r.gte, r.lte);
            assert!(r.gt.is_none() && r.lt.is_none());
        }
        out
    }

    #[track_caller]
    fn check(input: Filter, expect: &str) {
        let got = translate(&input).unwrap_or_else(|e| panic!("{input:?}: {}", e.message()));
        assert_eq!(render(&got), expect, "{input:?}");
    }

    #[track_caller]
    fn check_err(input: Filter, expect: &str) {
        let e = translate(&input).expect_err("an error");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains(expect), "{}", e.message());
    }

    fn range(field: &str, gte: Option<f64>, lte: Option<f64>) -> Filter {
        Filter::Range { field: field.into(), gte, lte }
    }

    fn one_of(field: &str, values: Vec<Json>) -> Filter {
        Filter::In { field: field.into(), values }
    }

    fn not(f: Filter) -> Filter {
        Filter::Not(Box::new(f))
    }

    #[test]
    fn fields_and_values() {
        check(Filter::eq("doc_id", "d1"), r#"doc_id = "d1""#);
        check(Filter::eq("id", "d1#0"), r#"chunk_id = "d1#0""#);
        check(Filter::eq("parent_id", "p"), r#"parent_id = "p""#);
        check(Filter::eq("kind", "section"), r#"kind = "section""#);
        // Whitespace in a value stays a keyword match (not full text).
        check(Filter::eq("lang", "en gb"), r#"metadata.lang = "en gb""#);
        check(Filter::eq("year", 2020), "metadata.year in [Some(2020.0), Some(2020.0)]");
        check(Filter::eq("ratio", 0.25), "metadata.ratio in [Some(0.25), Some(0.25)]");
        check(Filter::eq("draft", true), "metadata.draft = true");
        check(Filter::eq("a.b", "x"), r#"metadata."a.b" = "x""#);
        check(Filter::eq("with space", "x"), r#"metadata."with space" = "x""#);
        check(Filter::eq("", "x"), r#"metadata."" = "x""#);
        check(Filter::eq("dash-and_underscore9", "x"), r#"metadata.dash-and_underscore9 = "x""#);
    }

    #[test]
    fn combinations() {
        check(one_of("lang", vec![json!("de"), json!("fr")]), r#"metadata.lang in ["de", "fr"]"#);
        check(one_of("lang", vec![json!("de")]), r#"metadata.lang = "de""#);
        check(
            one_of("year", vec![json!(2016), json!("x")]),
            r#"any(metadata.year in [Some(2016.0), Some(2016.0)], metadata.year = "x")"#,
        );
        check(one_of("lang", vec![]), "NOTHING");
        check(range("year", Some(2018.0), None), "metadata.year in [Some(2018.0), None]");
        check(range("year", Some(f64::NAN), None), "NOTHING");
        check(
            Filter::And(vec![Filter::eq("lang", "en"), range("year", Some(2020.0), None)]),
            r#"all(metadata.lang = "en", metadata.year in [Some(2020.0), None])"#,
        );
        check(
            Filter::Or(vec![Filter::eq("lang", "de"), Filter::eq("tags", "c")]),
            r#"any(metadata.lang = "de", metadata.tags = "c")"#,
        );
        check(not(Filter::eq("lang", "en")), r#"not(metadata.lang = "en")"#);
        check(
            not(Filter::Or(vec![Filter::eq("doc_id", "f0"), Filter::eq("draft", true)])),
            r#"not(any(doc_id = "f0", metadata.draft = true))"#,
        );
        check(Filter::And(vec![]), "ALL");
        check(Filter::Or(vec![]), "NOTHING");
        check(not(Filter::Or(vec![])), "ALL");
        check(not(Filter::And(vec![])), "NOTHING");
        check(Filter::And(vec![Filter::eq("a", "x"), Filter::Or(vec![])]), "NOTHING");
        check(Filter::Or(vec![Filter::eq("a", "x"), Filter::And(vec![])]), "ALL");
        check(Filter::And(vec![Filter::And(vec![]), Filter::eq("a", "x")]), r#"metadata.a = "x""#);
    }

    #[test]
    fn refusals() {
        check_err(Filter::eq("lang", Json::Null), "cannot be expressed on Qdrant");
        check_err(Filter::eq("tags", json!(["a"])), "cannot be expressed on Qdrant");
        check_err(Filter::eq("nested", json!({"k": 1})), "cannot be expressed on Qdrant");
        check_err(one_of("lang", vec![json!("en"), Json::Null]), "cannot be expressed on Qdrant");
        check_err(Filter::eq("quo\"te", "x"), "cannot be filtered on Qdrant");
    }

    #[test]
    fn nothing_becomes_an_impossible_filter() {
        assert_eq!(Translated::All.into_filter(), None);
        let f = Translated::Nothing.into_filter().expect("a filter");
        assert_eq!(f.must.len(), 1);
        let single = translate(&Filter::eq("doc_id", "d")).unwrap().into_filter().unwrap();
        assert_eq!(single.must.len(), 1);
        // A translated `And` is sent as the filter itself, not wrapped in another one.
        let and = translate(&Filter::And(vec![Filter::eq("a", "x"), Filter::eq("b", "y")])).unwrap();
        assert_eq!(and.into_filter().unwrap().must.len(), 2);
    }

    /// A model of how Qdrant evaluates a filter on a JSON payload, as its documentation describes it: a condition
    /// on an array holds when it holds for any element, a missing key satisfies no condition, ranges compare any
    /// JSON number as `f64`, keyword and boolean matches compare exactly.
    fn qdrant_eval(c: &Condition, payload: &Json) -> bool {
        match c.condition_one_of.as_ref().expect("a condition") {
            ConditionOneOf::Filter(f) => {
                f.must.iter().all(|c| qdrant_eval(c, payload))
                    && (f.should.is_empty() || f.should.iter().any(|c| qdrant_eval(c, payload)))
                    && !f.must_not.iter().any(|c| qdrant_eval(c, payload))
            }
            ConditionOneOf::Field(f) => {
                let values = lookup(payload, &f.key);
                values.iter().any(|v| {
                    let m = f.r#match.as_ref().and_then(|m| m.match_value.as_ref()).is_none_or(|m| match m {
                        MatchValue::Keyword(s) => v.as_str() == Some(s),
                        MatchValue::Keywords(s) => v.as_str().is_some_and(|x| s.strings.iter().any(|s| s == x)),
                        MatchValue::Boolean(b) => v.as_bool() == Some(*b),
                        other => panic!("not modelled: {other:?}"),
                    });
                    let r = f.range.as_ref().is_none_or(|r| {
                        v.as_f64().is_some_and(|x| r.gte.is_none_or(|g| x >= g) && r.lte.is_none_or(|l| x <= l))
                    });
                    m && r
                })
            }
            other => panic!("not modelled: {other:?}"),
        }
    }

    /// The values at a key path (`a`, `a.b`, `a."b.c"`), arrays flattened one level.
    fn lookup<'a>(payload: &'a Json, key: &str) -> Vec<&'a Json> {
        let (first, rest) = match key.split_once('.') {
            Some((first, rest)) => (first, Some(rest)),
            None => (key, None),
        };
        let Some(v) = payload.get(first) else { return Vec::new() };
        match rest {
            Some(rest) => {
                let rest = rest.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(rest);
                v.get(rest).map(flatten).unwrap_or_default()
            }
            None => flatten(v),
        }
    }

    fn flatten(v: &Json) -> Vec<&Json> {
        match v {
            Json::Array(items) => items.iter().collect(),
            other => vec![other],
        }
    }

    fn payload_json(c: &Chunk) -> Json {
        let p = super::super::payload::chunk_payload(c).unwrap();
        Json::Object(p.into_iter().map(|(k, v)| (k, super::super::payload::value_to_json(v).unwrap())).collect())
    }

    /// The translation agrees with `Filter::matches` on the contract's kind of corpus, under the Qdrant model.
    #[test]
    fn translation_agrees_with_filter_matches() {
        let mut corpus = Vec::new();
        for i in 0..16_u32 {
            let doc = format!("f{}", i / 4);
            let mut c = Chunk::new(format!("{doc}#{}", i % 4), doc.clone(), "t");
            if let Some(lang) = [Some("en"), Some("de"), Some("fr"), None][(i % 4) as usize] {
                c.metadata.insert("lang".into(), lang.into());
            }
            let year = if i % 5 == 0 { json!(f64::from(2015 + i)) } else { json!(2015 + i) };
            c.metadata.insert("year".into(), year);
            if i % 2 == 0 {
                c.metadata.insert("tags".into(), json!(["a", "b"]));
            } else if i % 3 == 0 {
                c.metadata.insert("tags".into(), json!(["c"]));
            }
            c.metadata.insert("score".into(), json!(f64::from(i) * 0.125));
            c.metadata.insert("draft".into(), json!(i % 3 == 1));
            c.metadata.insert("a.b".into(), json!(i % 2));
            if i % 4 != 0 {
                c.parent_id = Some(format!("{doc}#s"));
            }
            if i == 15 {
                c.kind = ChunkKind::Section;
            }
            corpus.push(c);
        }
        let filters = vec![
            Filter::eq("lang", "en"),
            Filter::eq("doc_id", "f2"),
            Filter::eq("id", "f1#3"),
            Filter::eq("parent_id", "f3#s"),
            Filter::eq("kind", "passage"),
            Filter::eq("kind", "section"),
            Filter::eq("year", 2020),
            Filter::eq("year", 2016.0),
            Filter::eq("year", "2020"),
            Filter::eq("doc_id", 5),
            Filter::eq("tags", "b"),
            Filter::eq("draft", true),
            Filter::eq("missing", "x"),
            Filter::eq("a.b", 1),
            one_of("lang", vec![json!("de"), json!("fr")]),
            one_of("doc_id", vec![json!("f0"), json!("f3"), json!("no-such-doc")]),
            one_of("year", vec![json!(2016), json!(2025.0)]),
            range("year", Some(2018.0), Some(2022.0)),
            range("score", Some(0.5), None),
            range("score", None, Some(0.375)),
            range("lang", Some(0.0), None),
            range("year", None, None),
            Filter::And(vec![Filter::eq("lang", "en"), range("year", Some(2020.0), None)]),
            Filter::Or(vec![Filter::eq("lang", "de"), Filter::eq("tags", "c")]),
            not(Filter::eq("lang", "en")),
            not(Filter::eq("parent_id", "f3#s")),
            not(Filter::Or(vec![Filter::eq("doc_id", "f0"), Filter::eq("draft", true)])),
            Filter::And(vec![
                not(Filter::eq("doc_id", "f0")),
                Filter::Or(vec![range("score", None, Some(1.0)), Filter::eq("draft", true)]),
            ]),
            not(not(Filter::eq("missing", "x"))),
        ];
        for f in &filters {
            let t = translate(f).unwrap();
            for c in &corpus {
                let payload = payload_json(c);
                let qdrant = match &t {
                    Translated::All => true,
                    Translated::Nothing => false,
                    Translated::Cond(cond) => qdrant_eval(cond, &payload),
                };
                assert_eq!(qdrant, f.matches(c), "{f:?} on {}: {}", c.id, render(&t));
            }
        }
    }
}
