//! The checks every store makes of a record before writing it, in one place so the embedded store and Qdrant refuse
//! the same records with the same messages (the contract suite checks both).

use ragtune_core::{EmbeddingSpec, Error, Record, Result};

/// Checks `record` against the store's spaces: a chunk id and a document id; a sparse vector only with a sparse
/// space, and a valid one; a dense vector only with a dense space, of its dimension and finite.
///
/// # Errors
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) or, for a dense vector of another dimension,
/// [`Mismatch`](ragtune_core::ErrorKind::Mismatch), naming the chunk.
pub(crate) fn check_record(record: &Record, dense: Option<&EmbeddingSpec>, has_sparse: bool) -> Result<()> {
    let id = &record.chunk.id;
    if id.is_empty() || record.chunk.doc_id.is_empty() {
        return Err(Error::invalid_input(format!(
            "a record needs a chunk id and a document id (chunk `{id}`, document `{}`)",
            record.chunk.doc_id
        )));
    }
    if let Some(v) = &record.sparse {
        if !has_sparse {
            return Err(Error::invalid_input(format!(
                "chunk `{id}` has a sparse vector but the store has no sparse space yet: call ensure_spaces first"
            )));
        }
        v.validate().map_err(|e| e.context(format!("chunk `{id}`")))?;
    }
    if let Some(v) = &record.dense {
        let Some(spec) = dense else {
            return Err(Error::invalid_input(format!(
                "chunk `{id}` has a dense vector but the store has no dense space yet: call ensure_spaces first"
            )));
        };
        if v.len() != spec.dim {
            return Err(Error::mismatch(format!(
                "chunk `{id}` has a dense vector of {} dimensions; the store's space `{}` has {}",
                v.len(),
                spec.model_id,
                spec.dim
            )));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid_input(format!("chunk `{id}` has a non-finite dense value")));
        }
    }
    Ok(())
}
