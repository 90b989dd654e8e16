//! Byte encodings of stored values. Little-endian, length-checked on decode: a short or ragged value is
//! reported as corruption, never a panic.

use ragtune_core::{Chunk, Error, Result, SparseVector};

pub(crate) fn encode_chunk(chunk: &Chunk) -> Result<Vec<u8>> {
    serde_json::to_vec(chunk).map_err(|e| Error::permanent("cannot serialise chunk").with_source(e))
}

pub(crate) fn decode_chunk(key: &str, bytes: &[u8]) -> Result<Chunk> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::corrupt(format!("stored chunk `{key}` cannot be decoded")).with_source(e))
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
}
