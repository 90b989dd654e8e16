//! Metadata filters, evaluated by every store the same way.

use serde::{Deserialize, Serialize};

use crate::Chunk;

/// A condition on a chunk's fields.
///
/// `field` names either a built-in field (`doc_id`, `parent_id`, `kind`) or a metadata key.
/// Stores must give the same answer as [`Filter::matches`]; the contract suite checks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Filter {
    /// The field equals the value.
    Eq {
        /// Field name.
        field: String,
        /// Value to match.
        value: serde_json::Value,
    },
    /// The field equals one of the values.
    In {
        /// Field name.
        field: String,
        /// Values to match.
        values: Vec<serde_json::Value>,
    },
    /// The field is a number within the bounds (inclusive); a missing bound is open.
    Range {
        /// Field name.
        field: String,
        /// Lower bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gte: Option<f64>,
        /// Upper bound.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lte: Option<f64>,
    },
    /// All conditions hold.
    And(Vec<Filter>),
    /// At least one condition holds.
    Or(Vec<Filter>),
    /// The condition does not hold.
    Not(Box<Filter>),
}

impl Filter {
    /// `field == value`.
    pub fn eq(field: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        Self::Eq { field: field.into(), value: value.into() }
    }

    /// The value of `field` on `chunk`, if it has one.
    #[must_use]
    pub fn field_value(chunk: &Chunk, field: &str) -> Option<serde_json::Value> {
        match field {
            "doc_id" => Some(chunk.doc_id.clone().into()),
            "id" => Some(chunk.id.clone().into()),
            "parent_id" => chunk.parent_id.clone().map(Into::into),
            "kind" => serde_json::to_value(chunk.kind).ok(),
            _ => chunk.metadata.get(field).cloned(),
        }
    }

    /// Whether `chunk` satisfies the filter. A missing field satisfies no positive condition.
    #[must_use]
    pub fn matches(&self, chunk: &Chunk) -> bool {
        match self {
            Self::Eq { field, value } => Self::field_value(chunk, field).is_some_and(|v| json_eq(&v, value)),
            Self::In { field, values } => {
                Self::field_value(chunk, field).is_some_and(|v| values.iter().any(|x| json_eq(&v, x)))
            }
            Self::Range { field, gte, lte } => Self::field_value(chunk, field)
                .and_then(|v| v.as_f64())
                .is_some_and(|x| gte.is_none_or(|g| x >= g) && lte.is_none_or(|l| x <= l)),
            Self::And(all) => all.iter().all(|f| f.matches(chunk)),
            Self::Or(any) => any.iter().any(|f| f.matches(chunk)),
            Self::Not(f) => !f.matches(chunk),
        }
    }
}

/// Equality where numbers compare by value (`1` equals `1.0`) and an array field matches any element.
fn json_eq(field: &serde_json::Value, wanted: &serde_json::Value) -> bool {
    match (field, wanted) {
        (serde_json::Value::Number(a), serde_json::Value::Number(b)) => a.as_f64() == b.as_f64(),
        (serde_json::Value::Array(items), w) if !w.is_array() => items.iter().any(|i| json_eq(i, w)),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk() -> Chunk {
        let mut c = Chunk::new("d1#0", "d1", "text");
        c.metadata.insert("lang".into(), "en".into());
        c.metadata.insert("year".into(), 2021.into());
        c.metadata.insert("tags".into(), serde_json::json!(["a", "b"]));
        c
    }

    fn check(f: Filter, expect: bool) {
        assert_eq!(f.matches(&chunk()), expect, "{f:?}");
    }

    #[test]
    fn filters() {
        check(Filter::eq("doc_id", "d1"), true);
        check(Filter::eq("lang", "de"), false);
        check(Filter::eq("year", 2021.0), true);
        check(Filter::eq("tags", "b"), true);
        check(Filter::eq("missing", "x"), false);
        check(Filter::In { field: "lang".into(), values: vec!["de".into(), "en".into()] }, true);
        check(Filter::Range { field: "year".into(), gte: Some(2020.0), lte: None }, true);
        check(Filter::Range { field: "year".into(), gte: None, lte: Some(2020.0) }, false);
        check(Filter::And(vec![Filter::eq("lang", "en"), Filter::eq("year", 2021)]), true);
        check(Filter::Or(vec![Filter::eq("lang", "de"), Filter::eq("year", 1999)]), false);
        check(Filter::Not(Box::new(Filter::eq("lang", "de"))), true);
    }

    #[test]
    fn serde_shape_is_stable() {
        let f = Filter::And(vec![Filter::eq("lang", "en")]);
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"and":[{"eq":{"field":"lang","value":"en"}}]}"#);
    }
}
