//! Byte encodings of stored values. Little-endian, length-checked on decode: a short or ragged value is
//! reported as corruption, never a panic.

use ragtune_core::{Chunk, Error, Result, SpanVector, SparseVector};

pub(crate) fn encode_chunk(chunk: &Chunk) -> Result<Vec<u8>> {
    serde_json::to_vec(chunk).map_err(|e| Error::permanent("cannot serialise chunk").with_source(e))
}

pub(crate) fn decode_chunk(key: &str, bytes: &[u8]) -> Result<Chunk> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt(format!("stored chunk `{key}` cannot be decoded")).with_source(e))
}

/// A stored chunk as the in-memory index keeps it: every field but the text, which is skipped while parsing rather
/// than copied and dropped (the index never holds texts; reading a million of them made opening slow).
pub(crate) fn decode_chunk_without_text(key: &str, bytes: &[u8]) -> Result<Chunk> {
    /// `Chunk`'s serialised form with the text ignored; the test below keeps the two field lists equal.
    #[derive(serde::Deserialize)]
    struct Stored {
        id: String,
        doc_id: String,
        #[serde(default)]
        parent_id: Option<String>,
        #[serde(default)]
        kind: ragtune_core::ChunkKind,
        #[serde(default)]
        header_path: Vec<String>,
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        source: Option<String>,
        #[allow(dead_code)]
        text: serde::de::IgnoredAny,
        #[serde(default)]
        position: u32,
        #[serde(default)]
        metadata: ragtune_core::Metadata,
    }
    let s: Stored = serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt(format!("stored chunk `{key}` cannot be decoded")).with_source(e))?;
    Ok(Chunk {
        id: s.id,
        doc_id: s.doc_id,
        parent_id: s.parent_id,
        kind: s.kind,
        header_path: s.header_path,
        title: s.title,
        source: s.source,
        text: String::new(),
        position: s.position,
        metadata: s.metadata,
    })
}

pub(crate) fn encode_dense(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode_dense(key: &str, bytes: &[u8]) -> Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::corrupt(format!("stored dense vector of `{key}` has {} bytes", bytes.len())));
    }
    Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

pub(crate) fn encode_sparse(v: &SparseVector) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 8);
    for (i, w) in v.indices.iter().zip(&v.values) {
        out.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

pub(crate) fn decode_sparse(key: &str, bytes: &[u8]) -> Result<SparseVector> {
    if !bytes.len().is_multiple_of(8) {
        return Err(Error::corrupt(format!("stored sparse vector of `{key}` has {} bytes", bytes.len())));
    }
    let mut v = SparseVector::default();
    for b in bytes.chunks_exact(8) {
        v.indices.push(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        v.values.push(f32::from_le_bytes([b[4], b[5], b[6], b[7]]));
    }
    v.validate().map_err(|e| Error::corrupt(format!("stored sparse vector of `{key}`: {}", e.message())))?;
    Ok(v)
}

/// Span vectors in int8 with one scale per vector (a quarter of f32's bytes; a span vector only ranks strips of
/// retrieved passages, and the cosine to the f32 vector stays above 0.999): `n: u32, dim: u32`, then per span
/// `start: u32, end: u32, scale: f32` and `dim` signed bytes. Decoding L2-normalises again.
pub(crate) fn encode_spans(spans: &[SpanVector]) -> Vec<u8> {
    let dim = spans.first().map_or(0, |s| s.vector.len());
    let mut out = Vec::with_capacity(8 + spans.len() * (12 + dim));
    out.extend_from_slice(&u32::try_from(spans.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&u32::try_from(dim).unwrap_or(u32::MAX).to_le_bytes());
    for s in spans {
        out.extend_from_slice(&s.start.to_le_bytes());
        out.extend_from_slice(&s.end.to_le_bytes());
        let max = s.vector.iter().fold(0.0_f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        out.extend_from_slice(&scale.to_le_bytes());
        // The writer validated every vector as finite and of the space's dimension.
        out.extend(s.vector.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8 as u8));
    }
    out
}

pub(crate) fn decode_spans(key: &str, bytes: &[u8]) -> Result<Vec<SpanVector>> {
    let bad = || Error::corrupt(format!("stored span vectors of `{key}` cannot be decoded ({} bytes)", bytes.len()));
    let word = |at: usize| -> Result<[u8; 4]> { bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).ok_or_else(bad) };
    let n = u32::from_le_bytes(word(0)?) as usize;
    let dim = u32::from_le_bytes(word(4)?) as usize;
    if bytes.len() != 8 + n.checked_mul(12 + dim).ok_or_else(bad)? {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = 8 + i * (12 + dim);
        let (start, end) = (u32::from_le_bytes(word(at)?), u32::from_le_bytes(word(at + 4)?));
        let scale = f32::from_le_bytes(word(at + 8)?);
        let mut vector: Vec<f32> = bytes[at + 12..at + 12 + dim].iter().map(|&b| f32::from(b as i8) * scale).collect();
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Err(bad());
        }
        vector.iter_mut().for_each(|x| *x /= norm);
        out.push(SpanVector { start, end, vector });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_ragged_bytes() {
        let s = SparseVector::from_pairs(vec![(3, 0.5), (1, 2.0)]);
        assert_eq!(decode_sparse("k", &encode_sparse(&s)).unwrap(), s);
        assert!(decode_sparse("k", &[1, 2, 3]).is_err());
        let d = vec![0.25_f32, -1.0];
        assert_eq!(decode_dense("k", &encode_dense(&d)).unwrap(), d);
        assert!(decode_dense("k", &[0; 5]).is_err());
        assert!(decode_chunk("k", b"{").is_err());
    }

    #[test]
    fn a_chunk_decodes_without_its_text_and_keeps_every_other_field() {
        // Every field set, by a struct literal: a field added to `Chunk` fails to compile here until the decoder
        // without text learns it.
        let chunk = Chunk {
            id: "d#1".into(),
            doc_id: "d".into(),
            parent_id: Some("d#0".into()),
            kind: ragtune_core::ChunkKind::Passage,
            header_path: vec!["Guide".into(), "Install".into()],
            title: Some("T".into()),
            source: Some("docs/g.md".into()),
            text: "some \"quoted\" text".into(),
            position: 3,
            metadata: [("lang".to_owned(), serde_json::json!("en"))].into_iter().collect(),
        };
        let bytes = encode_chunk(&chunk).unwrap();
        assert_eq!(decode_chunk("d#1", &bytes).unwrap(), chunk);
        assert_eq!(decode_chunk_without_text("d#1", &bytes).unwrap(), Chunk { text: String::new(), ..chunk.clone() });
        let minimal = encode_chunk(&Chunk::new("x", "y", "z")).unwrap();
        assert_eq!(decode_chunk_without_text("x", &minimal).unwrap(), Chunk::new("x", "y", ""));
        assert!(decode_chunk_without_text("k", b"{").is_err());
        assert!(decode_chunk_without_text("k", br#"{"id":"k","doc_id":"d"}"#).is_err(), "a chunk needs its text");
    }

    #[test]
    fn span_vectors_round_trip_within_int8_precision() {
        let unit = |v: Vec<f32>| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let spans = vec![
            SpanVector {
                start: 0,
                end: 5,
                vector: unit((0..384).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect()),
            },
            SpanVector { start: 6, end: 20, vector: unit((0..384).map(|i| (i as f32).sin()).collect()) },
        ];
        let back = decode_spans("k", &encode_spans(&spans)).unwrap();
        assert_eq!(back.len(), 2);
        for (a, b) in spans.iter().zip(&back) {
            assert_eq!((a.start, a.end), (b.start, b.end));
            let cos: f32 = a.vector.iter().zip(&b.vector).map(|(x, y)| x * y).sum();
            assert!(cos > 0.999, "cosine {cos}");
        }
        assert_eq!(decode_spans("k", &encode_spans(&[])).unwrap(), Vec::new());
        let bytes = encode_spans(&spans);
        assert!(decode_spans("k", &bytes[..bytes.len() - 1]).is_err());
        assert!(decode_spans("k", &[1, 0, 0]).is_err());
    }
}
