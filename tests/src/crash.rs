//! The crash-test workload: a deterministic stream of write batches whose every state can be checked.
//!
//! The writer replaces whole documents: batch `r` deletes a few documents and writes them again at version `r`
//! with a number of chunks that depends on `(doc, r)`. A store that applies batches atomically therefore holds,
//! for every document, either nothing or exactly the chunks `0..n` of one version `v` with `n = chunk_count(doc, v)`
//! — anything else (chunks of two versions, a missing chunk, a stray vector) is a torn write.
//!
//! Every chunk carries a sparse term that no other chunk has ([`unique_term`]) and a dense vector of its own, so a
//! checker can search for each stored chunk and expect it first.

use ragtune::core::{Chunk, Distance, EmbeddingSpec, Record, SparseSpec, SparseVector};

/// Documents in the workload (`doc-000` …).
pub const DOCS: u64 = 240;
/// The most chunks a document can have.
pub const MAX_CHUNKS: u64 = 6;
/// Dimension of the dense vectors.
pub const DIM: usize = 8;
/// Documents rewritten per batch.
pub const DOCS_PER_BATCH: u64 = 3;

/// The dense space of the workload.
#[must_use]
pub fn dense_spec() -> EmbeddingSpec {
    EmbeddingSpec { model_id: "crash-test".into(), dim: DIM, normalized: true, distance: Distance::Cosine }
}

/// The sparse space of the workload (IDF applied by the store, as for BM25).
#[must_use]
pub fn sparse_spec() -> SparseSpec {
    SparseSpec { encoder_id: "crash-test".into(), idf: true }
}

/// SplitMix64: a small, well-mixed deterministic generator (no dependency for a test workload).
#[must_use]
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The id of document `doc`.
#[must_use]
pub fn doc_id(doc: u64) -> String {
    format!("doc-{doc:03}")
}

/// The id of chunk `j` of document `doc`.
#[must_use]
pub fn chunk_id(doc: u64, j: u64) -> String {
    format!("doc-{doc:03}#{j}")
}

/// How many chunks document `doc` has at `version` (1 ..= [`MAX_CHUNKS`]).
#[must_use]
pub fn chunk_count(doc: u64, version: u64) -> u64 {
    1 + mix(doc.wrapping_mul(1_000_003) ^ version) % MAX_CHUNKS
}

/// The documents rewritten by batch `round`: distinct, so a batch never writes one document twice.
#[must_use]
pub fn batch_docs(round: u64) -> Vec<u64> {
    let mut docs: Vec<u64> = Vec::new();
    let mut k = 0;
    while docs.len() < DOCS_PER_BATCH as usize {
        let d = mix(round.wrapping_mul(31).wrapping_add(k)) % DOCS;
        if !docs.contains(&d) {
            docs.push(d);
        }
        k += 1;
    }
    docs
}

/// The sparse term that only chunk `j` of `doc` has.
#[must_use]
pub fn unique_term(doc: u64, j: u64) -> u32 {
    u32::try_from(1_000 + doc * MAX_CHUNKS + j).expect("invariant: the workload's term ids fit in u32")
}

/// The dense vector of chunk `j` of `doc` (unit length; the same for every version, so only the payload changes).
#[must_use]
pub fn dense_vector(doc: u64, j: u64) -> Vec<f32> {
    let seed = mix(doc.wrapping_mul(7919).wrapping_add(j));
    #[allow(clippy::cast_precision_loss)]
    let mut v: Vec<f32> = (0..DIM as u64).map(|i| ((mix(seed ^ i) % 20_001) as f32 - 10_000.0) / 10_000.0).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// The records of `doc` at `version`.
#[must_use]
pub fn records(doc: u64, version: u64) -> Vec<Record> {
    (0..chunk_count(doc, version))
        .map(|j| {
            let mut chunk =
                Chunk::new(chunk_id(doc, j), doc_id(doc), format!("chunk {j} of {} v{version}", doc_id(doc)));
            chunk.position = u32::try_from(j).expect("invariant: at most MAX_CHUNKS chunks");
            chunk.metadata.insert("version".into(), version.into());
            // A few shared terms (so IDF and postings lists are exercised) plus the chunk's own term.
            let shared = u32::try_from(mix(doc ^ j) % 16).expect("invariant: < 16");
            let sparse = SparseVector::from_pairs(vec![(shared, 0.5), (unique_term(doc, j), 1.0)]);
            // Some text to make pages fill and split: records of a few hundred bytes.
            chunk.metadata.insert("filler".into(), "x".repeat(64 + (mix(doc + j) % 400) as usize).into());
            Record { chunk, dense: Some(dense_vector(doc, j)), sparse: Some(sparse), spans: Vec::new() }
        })
        .collect()
}
