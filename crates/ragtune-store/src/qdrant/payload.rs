//! How a chunk is laid out in a Qdrant point: its id, its payload, and the exact JSON conversions both ways.

use std::collections::{BTreeMap, HashMap};

use qdrant_client::qdrant::value::Kind;
use qdrant_client::qdrant::{ListValue, NullValue, PointId, Struct, Value, point_id::PointIdOptions};
use ragtune_core::{Chunk, ChunkKind, Error, Result};

/// Payload keys of a chunk point. Filters on the built-in fields use the same names (`id` maps to `chunk_id`).
pub(crate) const CHUNK_ID: &str = "chunk_id";
pub(crate) const DOC_ID: &str = "doc_id";
pub(crate) const PARENT_ID: &str = "parent_id";
pub(crate) const KIND: &str = "kind";
const HEADER_PATH: &str = "header_path";
const TITLE: &str = "title";
const SOURCE: &str = "source";
pub(crate) const TEXT: &str = "text";
const POSITION: &str = "position";
pub(crate) const METADATA: &str = "metadata";

/// The Qdrant point id of a chunk id: a UUID made from the 128-bit XXH3 hash of the id.
///
/// Qdrant accepts only unsigned integers and UUIDs as point ids, so chunk ids (arbitrary strings) are hashed; the
/// chunk id itself is kept in the payload and is what every answer is read from. The version and variant bits are
/// set (UUID version 8, "custom"), leaving 122 hash bits: a collision is not a practical concern, and `get`
/// checks the payload's chunk id anyway. This mapping is part of the stored format and must never change.
pub(crate) fn point_uuid(chunk_id: &str) -> String {
    let h = xxhash_rust::xxh3::xxh3_128(chunk_id.as_bytes());
    let h = (h & !(0xf_u128 << 76)) | (0x8_u128 << 76); // version 8
    let h = (h & !(0x3_u128 << 62)) | (0x2_u128 << 62); // RFC 4122 variant
    let hex = format!("{h:032x}");
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// [`point_uuid`] as a gRPC point id.
pub(crate) fn point_id(chunk_id: &str) -> PointId {
    PointId { point_id_options: Some(PointIdOptions::Uuid(point_uuid(chunk_id))) }
}

/// The payload of a chunk: every field of [`Chunk`], with optional fields left out when absent (so that a filter
/// on a missing `parent_id` matches nothing, as [`Filter::matches`](ragtune_core::Filter::matches) says).
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for metadata Qdrant cannot store exactly (an integer
/// above `i64::MAX`).
pub(crate) fn chunk_payload(chunk: &Chunk) -> Result<HashMap<String, Value>> {
    let mut p = HashMap::with_capacity(10);
    p.insert(CHUNK_ID.to_owned(), string(&chunk.id));
    p.insert(DOC_ID.to_owned(), string(&chunk.doc_id));
    if let Some(parent) = &chunk.parent_id {
        p.insert(PARENT_ID.to_owned(), string(parent));
    }
    p.insert(KIND.to_owned(), string(kind_name(chunk.kind)));
    let headers = chunk.header_path.iter().map(|h| string(h)).collect();
    p.insert(HEADER_PATH.to_owned(), Value { kind: Some(Kind::ListValue(ListValue { values: headers })) });
    if let Some(title) = &chunk.title {
        p.insert(TITLE.to_owned(), string(title));
    }
    if let Some(source) = &chunk.source {
        p.insert(SOURCE.to_owned(), string(source));
    }
    p.insert(TEXT.to_owned(), string(&chunk.text));
    p.insert(POSITION.to_owned(), Value { kind: Some(Kind::IntegerValue(i64::from(chunk.position))) });
    let mut fields = HashMap::with_capacity(chunk.metadata.len());
    for (k, v) in &chunk.metadata {
        let value = json_to_value(v).map_err(|why| {
            Error::invalid_input(format!("chunk `{}`: metadata `{k}` cannot be stored in Qdrant: {why}", chunk.id))
        })?;
        fields.insert(k.clone(), value);
    }
    p.insert(METADATA.to_owned(), Value { kind: Some(Kind::StructValue(Struct { fields })) });
    Ok(p)
}

/// The stored name of a chunk kind, as in its serde form (`passage`, `section`).
pub(crate) fn kind_name(kind: ChunkKind) -> &'static str {
    match kind {
        ChunkKind::Passage => "passage",
        ChunkKind::Section => "section",
    }
}

/// Reads a chunk back from a point's payload; `point` names the point in error messages.
///
/// # Errors
/// [`Corrupt`](ragtune_core::ErrorKind::Corrupt) when a field is missing or has the wrong type.
pub(crate) fn chunk_from_payload(
    mut p: HashMap<String, Value>,
    point: &dyn std::fmt::Display,
    with_text: bool,
) -> Result<Chunk> {
    let bad = |field: &str, why: &str| {
        Error::corrupt(format!("Qdrant point {point} is not a ragtune chunk: payload field `{field}` {why}"))
    };
    let mut take_string = |field: &str, required: bool| -> Result<Option<String>> {
        match p.remove(field).and_then(|v| v.kind) {
            Some(Kind::StringValue(s)) => Ok(Some(s)),
            None if !required => Ok(None),
            Some(Kind::NullValue(_)) if !required => Ok(None),
            None => Err(bad(field, "is missing")),
            Some(_) => Err(bad(field, "is not a string")),
        }
    };
    let id = take_string(CHUNK_ID, true)?.unwrap_or_default();
    let doc_id = take_string(DOC_ID, true)?.unwrap_or_default();
    let parent_id = take_string(PARENT_ID, false)?;
    let kind = match take_string(KIND, true)?.as_deref() {
        Some("passage") => ChunkKind::Passage,
        Some("section") => ChunkKind::Section,
        _ => return Err(bad(KIND, "is neither `passage` nor `section`")),
    };
    let title = take_string(TITLE, false)?;
    let source = take_string(SOURCE, false)?;
    let text = if with_text { take_string(TEXT, true)?.unwrap_or_default() } else { String::new() };
    let header_path = match p.remove(HEADER_PATH).and_then(|v| v.kind) {
        None => Vec::new(),
        Some(Kind::ListValue(list)) => list
            .values
            .into_iter()
            .map(|v| match v.kind {
                Some(Kind::StringValue(s)) => Ok(s),
                _ => Err(bad(HEADER_PATH, "holds a value that is not a string")),
            })
            .collect::<Result<_>>()?,
        Some(_) => return Err(bad(HEADER_PATH, "is not a list")),
    };
    let position = match p.remove(POSITION).and_then(|v| v.kind) {
        None => 0,
        Some(Kind::IntegerValue(n)) => u32::try_from(n).map_err(|_| bad(POSITION, "is out of range"))?,
        Some(_) => return Err(bad(POSITION, "is not an integer")),
    };
    let metadata = match p.remove(METADATA).and_then(|v| v.kind) {
        None => BTreeMap::new(),
        Some(Kind::StructValue(s)) => s
            .fields
            .into_iter()
            .map(|(k, v)| value_to_json(v).map(|v| (k, v)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|why| bad(METADATA, &why))?,
        Some(_) => return Err(bad(METADATA, "is not an object")),
    };
    Ok(Chunk { id, doc_id, parent_id, kind, header_path, title, source, text, position, metadata })
}

/// The chunk id in a payload, if it has one (results are identified by it, never by the point id).
pub(crate) fn payload_chunk_id(p: &HashMap<String, Value>) -> Option<&str> {
    match p.get(CHUNK_ID).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(s)) => Some(s),
        _ => None,
    }
}

pub(crate) fn string(s: &str) -> Value {
    Value { kind: Some(Kind::StringValue(s.to_owned())) }
}

/// JSON to a gRPC value, exactly: integers stay integers, floats stay floats.
///
/// The client's own `From<serde_json::Value>` turns an integer above `i64::MAX` into a float silently; here it is
/// an error, because a round trip must return what was written.
pub(crate) fn json_to_value(v: &serde_json::Value) -> std::result::Result<Value, String> {
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(NullValue::NullValue as i32),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Kind::IntegerValue(i)
            } else if n.is_u64() {
                return Err(format!("the integer {n} is above the largest integer Qdrant stores ({})", i64::MAX));
            } else {
                Kind::DoubleValue(n.as_f64().ok_or_else(|| format!("the number {n} is not representable"))?)
            }
        }
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => {
            Kind::ListValue(ListValue { values: items.iter().map(json_to_value).collect::<Result<_, _>>()? })
        }
        serde_json::Value::Object(map) => Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| json_to_value(v).map(|v| (k.clone(), v))).collect::<Result<_, _>>()?,
        }),
    };
    Ok(Value { kind: Some(kind) })
}

/// A gRPC value back to JSON, exactly (the inverse of [`json_to_value`]).
pub(crate) fn value_to_json(v: Value) -> std::result::Result<serde_json::Value, String> {
    Ok(match v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::IntegerValue(i)) => serde_json::Value::from(i),
        Some(Kind::DoubleValue(d)) => serde_json::Number::from_f64(d)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("holds the non-finite number {d}"))?,
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(value_to_json).collect::<Result<_, _>>()?)
        }
        Some(Kind::StructValue(s)) => serde_json::Value::Object(
            s.fields.into_iter().map(|(k, v)| value_to_json(v).map(|v| (k, v))).collect::<Result<_, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn point_ids_are_stable_uuids() {
        let id = point_uuid("doc-1#0");
        // The stored format: this value must never change, or existing collections lose their points.
        assert_eq!(id, "90770627-ac41-8af0-a893-7fd9538aa10d");
        assert_eq!(id.len(), 36);
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), vec![8, 4, 4, 4, 12]);
        assert!(parts[2].starts_with('8'), "version 8: {id}");
        assert!(matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'), "RFC 4122 variant: {id}");
        assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(point_uuid("doc-1#0"), point_uuid("doc-1#1"));
        assert_ne!(point_uuid(""), point_uuid(" "));
    }

    #[test]
    fn chunks_round_trip_through_payloads() {
        let mut rich = Chunk::new("doc-a#1", "doc-a", "Ünïcödé text, \"quotes\",\ttabs and\nnew lines");
        rich.parent_id = Some("doc-a#s0".into());
        rich.kind = ChunkKind::Section;
        rich.header_path = vec!["Guide".into(), "Install".into()];
        rich.title = Some("Guide".into());
        rich.source = Some("guide.md".into());
        rich.position = 7;
        let meta = json!({
            "lang": "en", "year": 2021, "float_year": 2021.0, "ratio": 0.25, "neg": -3, "tags": ["a", "b"],
            "nested": {"k": [1, null, true, {"deep": 1.5}]}, "draft": false, "empty": "", "none": null,
            "big": i64::MAX, "small": i64::MIN
        });
        rich.metadata = meta.as_object().unwrap().clone().into_iter().collect();
        for chunk in [rich, Chunk::new("x", "y", "")] {
            let payload = chunk_payload(&chunk).unwrap();
            assert_eq!(payload_chunk_id(&payload), Some(chunk.id.as_str()));
            let back = chunk_from_payload(payload, &"test", true).unwrap();
            assert_eq!(back, chunk);
        }
    }

    #[test]
    fn floats_and_integers_stay_apart() {
        for v in [json!(2021), json!(2021.0), json!(-0.5), json!(1e300)] {
            assert_eq!(value_to_json(json_to_value(&v).unwrap()).unwrap(), v);
        }
        let e = json_to_value(&json!(u64::MAX)).unwrap_err();
        assert!(e.contains("above the largest integer"), "{e}");
        let mut c = Chunk::new("c", "d", "t");
        c.metadata.insert("huge".into(), json!(u64::MAX));
        let e = chunk_payload(&c).unwrap_err();
        assert_eq!(e.kind(), ragtune_core::ErrorKind::InvalidInput);
        assert!(e.message().contains("metadata `huge`"), "{}", e.message());
    }

    #[test]
    fn foreign_payloads_are_corrupt() {
        let mut p = chunk_payload(&Chunk::new("c", "d", "t")).unwrap();
        p.remove(DOC_ID);
        let e = chunk_from_payload(p, &"abc", true).unwrap_err();
        assert_eq!(e.kind(), ragtune_core::ErrorKind::Corrupt);
        assert!(e.message().contains("`doc_id` is missing"), "{}", e.message());
    }
}
