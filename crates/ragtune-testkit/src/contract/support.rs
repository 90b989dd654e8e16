//! What the checks share: the failure reporter, fixtures, a model of what was written, and brute-force rankings.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::{Debug, Display, Write as _};

use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, Error, Filter, Metadata, Record, Result, ScoredHit, SearchRequest, SparseSpec,
    SparseVector, StoreStats, VectorQuery, VectorStore, WriteBatch, WriteReport,
};

/// The dense space every check uses: `contract-dense`, 4 dimensions, normalised, cosine.
#[must_use]
pub fn dense_spec() -> EmbeddingSpec {
    EmbeddingSpec { model_id: "contract-dense".into(), dim: DIM, normalized: true, distance: Distance::Cosine }
}

/// The sparse space every check uses: `contract-sparse` with IDF applied by the store.
#[must_use]
pub fn sparse_spec() -> SparseSpec {
    SparseSpec { encoder_id: "contract-sparse".into(), idf: true }
}

pub(crate) const DIM: usize = 4;
/// Tolerance for dense scores (dot products of unit vectors in 4 dimensions).
pub(crate) const DENSE_TOL: f64 = 1e-5;
/// Tolerance for sparse scores (sums of IDF-weighted products).
pub(crate) const SPARSE_TOL: f64 = 1e-4;

/// Reports failures of one named check: every panic message starts with the check's name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checker {
    suite: &'static str,
    name: &'static str,
}

impl Checker {
    /// The reporter of a check of the `VectorStore` contract.
    pub(crate) const fn new(name: &'static str) -> Self {
        Self::of("VectorStore", name)
    }

    /// The reporter of check `name` of the contract of seam `suite` (`WebSearch`, `Embedder`).
    pub(crate) const fn of(suite: &'static str, name: &'static str) -> Self {
        Self { suite, name }
    }

    #[track_caller]
    pub(crate) fn fail(&self, message: impl Display) -> ! {
        panic!("{} contract check `{}` failed: {message}", self.suite, self.name)
    }

    #[track_caller]
    pub(crate) fn that(&self, condition: bool, message: impl Display) {
        if !condition {
            self.fail(message);
        }
    }

    #[track_caller]
    pub(crate) fn eq<T: PartialEq + Debug>(&self, what: &str, actual: T, expected: T) {
        if actual != expected {
            self.fail(format_args!("{what}\n  expected: {expected:?}\n  actual:   {actual:?}"));
        }
    }

    #[track_caller]
    pub(crate) fn ok<T>(&self, what: &str, result: Result<T>) -> T {
        match result {
            Ok(v) => v,
            Err(e) => self.fail(format_args!("{what}: unexpected {} error: {}", e.kind(), e.chain())),
        }
    }

    #[track_caller]
    pub(crate) fn err<T: Debug>(&self, what: &str, result: Result<T>) -> Error {
        match result {
            Ok(v) => self.fail(format_args!("{what}: expected an error, got Ok({v:?})")),
            Err(e) => e,
        }
    }
}

/// A deterministic pseudo-random source (SplitMix64), so every run of the suite writes the same data.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in [-1, 1).
    pub(crate) fn signed(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1_u64 << 23) as f32 - 1.0
    }

    pub(crate) fn unit_vector(&mut self) -> Vec<f32> {
        loop {
            let v: Vec<f32> = (0..DIM).map(|_| self.signed()).collect();
            if v.iter().map(|x| x * x).sum::<f32>() > 0.01 {
                return normalize(&v);
            }
        }
    }
}

pub(crate) fn normalize(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / norm).collect()
}

/// The unit vector along `v`.
pub(crate) fn unit(v: [f32; DIM]) -> Vec<f32> {
    normalize(&v)
}

pub(crate) fn sparse(pairs: &[(u32, f32)]) -> SparseVector {
    SparseVector::from_pairs(pairs.to_vec())
}

/// A passage chunk with a text naming its id.
pub(crate) fn passage(id: &str, doc_id: &str) -> Chunk {
    Chunk::new(id, doc_id, format!("passage {id} of {doc_id}"))
}

pub(crate) fn record(chunk: Chunk, dense: Option<Vec<f32>>, sparse: Option<SparseVector>) -> Record {
    Record::new(chunk, dense, sparse)
}

pub(crate) fn metadata(value: serde_json::Value) -> Metadata {
    match value {
        serde_json::Value::Object(map) => map.into_iter().collect(),
        other => panic!("metadata fixtures are JSON objects, not {other}"),
    }
}

pub(crate) fn dense_req(query: Vec<f32>, top_k: usize, filter: Option<Filter>) -> SearchRequest {
    SearchRequest { vector: VectorQuery::Dense(query), top_k, filter }
}

pub(crate) fn sparse_req(pairs: &[(u32, f32)], top_k: usize, filter: Option<Filter>) -> SearchRequest {
    SearchRequest { vector: VectorQuery::Sparse(sparse(pairs)), top_k, filter }
}

pub(crate) fn upserts(records: Vec<Record>) -> WriteBatch {
    WriteBatch { delete_docs: Vec::new(), upsert: records }
}

pub(crate) fn ids(list: &[ScoredHit]) -> Vec<&str> {
    list.iter().map(|h| h.chunk.id.as_str()).collect()
}

/// `ln(1 + (N - n + 0.5) / (n + 0.5))`, the IDF of the `VectorStore` contract.
pub(crate) fn idf(total: f64, with_term: f64) -> f64 {
    (1.0 + (total - with_term + 0.5) / (with_term + 0.5)).ln()
}

/// The four counts of [`StoreStats`], compared as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) chunks: u64,
    pub(crate) documents: u64,
    pub(crate) dense_vectors: u64,
    pub(crate) sparse_vectors: u64,
}

impl From<&StoreStats> for Counts {
    fn from(s: &StoreStats) -> Self {
        Self {
            chunks: s.chunks,
            documents: s.documents,
            dense_vectors: s.dense_vectors,
            sparse_vectors: s.sparse_vectors,
        }
    }
}

/// What the store should hold after the writes of a check: the oracle for every expectation.
#[derive(Debug, Default, Clone)]
pub(crate) struct Model {
    pub(crate) records: BTreeMap<String, Record>,
}

impl Model {
    pub(crate) fn apply(&mut self, batch: &WriteBatch) {
        self.records.retain(|_, r| !batch.delete_docs.contains(&r.chunk.doc_id));
        for r in &batch.upsert {
            self.records.insert(r.chunk.id.clone(), r.clone());
        }
    }

    pub(crate) fn chunk(&self, id: &str) -> Option<Chunk> {
        self.records.get(id).map(|r| r.chunk.clone())
    }

    pub(crate) fn counts(&self) -> Counts {
        let records = || self.records.values();
        Counts {
            chunks: records().count() as u64,
            documents: records().map(|r| r.chunk.doc_id.as_str()).collect::<BTreeSet<_>>().len() as u64,
            dense_vectors: records().filter(|r| r.dense.is_some()).count() as u64,
            sparse_vectors: records().filter(|r| r.sparse.is_some()).count() as u64,
        }
    }

    /// Every chunk the request may return with its exact score, in ranking order, not truncated to `top_k`.
    ///
    /// Dense: the dot product (the vectors are unit vectors, so this is the cosine). Sparse: the contract's
    /// IDF-weighted sum over the chunks that share at least one term with the query.
    pub(crate) fn ranked(&self, req: &SearchRequest) -> Vec<(String, f64)> {
        let candidates = self.records.values().filter(|r| req.filter.as_ref().is_none_or(|f| f.matches(&r.chunk)));
        let mut out: Vec<(String, f64)> = match &req.vector {
            VectorQuery::Dense(q) => candidates
                .filter_map(|r| {
                    let d = r.dense.as_ref()?;
                    Some((r.chunk.id.clone(), q.iter().zip(d).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum()))
                })
                .collect(),
            VectorQuery::Sparse(q) => {
                let with_sparse: Vec<&SparseVector> = self.records.values().filter_map(|r| r.sparse.as_ref()).collect();
                let total = with_sparse.len() as f64;
                let df = |t: u32| with_sparse.iter().filter(|v| v.indices.contains(&t)).count() as f64;
                let idfs: HashMap<u32, f64> = q.indices.iter().map(|&t| (t, idf(total, df(t)))).collect();
                candidates
                    .filter_map(|r| {
                        let d = r.sparse.as_ref()?;
                        let mut score = None;
                        for (t, qw) in q.indices.iter().zip(&q.values) {
                            if let Some(at) = d.indices.iter().position(|i| i == t) {
                                *score.get_or_insert(0.0) += idfs[t] * f64::from(*qw) * f64::from(d.values[at]);
                            }
                        }
                        score.map(|s| (r.chunk.id.clone(), s))
                    })
                    .collect()
            }
        };
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

/// Renders a ranking as text, one hit per line (`  1. doc-17#0  0.812300`).
pub(crate) fn render<'a>(rows: impl IntoIterator<Item = (&'a str, f64)>) -> String {
    let mut out = String::new();
    for (i, (id, score)) in rows.into_iter().enumerate() {
        let _ = writeln!(out, "    {}. {id}  {score:.6}", i + 1);
    }
    if out.is_empty() {
        out.push_str("    (no hits)\n");
    }
    out
}

pub(crate) fn render_hits(hits: &[ScoredHit]) -> String {
    render(hits.iter().map(|h| (h.chunk.id.as_str(), f64::from(h.score))))
}

/// Checks what every hit list must satisfy whatever the data: at most `top_k` hits, finite scores, distinct ids,
/// descending scores with exact ties in ascending chunk id order.
#[track_caller]
pub(crate) fn check_list_shape(c: &Checker, what: &str, req: &SearchRequest, hits: &[ScoredHit]) {
    c.that(
        hits.len() <= req.top_k,
        format_args!("{what}: {} hits for top_k {}:\n{}", hits.len(), req.top_k, render_hits(hits)),
    );
    c.that(
        hits.iter().all(|h| h.score.is_finite()),
        format_args!("{what}: a score is not finite:\n{}", render_hits(hits)),
    );
    let distinct: BTreeSet<&str> = ids(hits).into_iter().collect();
    c.that(distinct.len() == hits.len(), format_args!("{what}: a chunk id appears twice:\n{}", render_hits(hits)));
    for (i, w) in hits.windows(2).enumerate() {
        let ordered = w[0].score > w[1].score || (w[0].score == w[1].score && w[0].chunk.id < w[1].chunk.id);
        c.that(
            ordered,
            format_args!(
                "{what}: hits {} and {} are out of order (scores descending, exact ties by ascending chunk id):\n{}",
                i + 1,
                i + 2,
                render_hits(hits)
            ),
        );
    }
}

/// Checks a hit list against the model's brute-force ranking: same length, scores within `tol` of the formula,
/// each rank held by the expected chunk (or one whose true score is within `tol` of it), payloads as written.
#[track_caller]
pub(crate) fn expect_hits(c: &Checker, what: &str, hits: &[ScoredHit], req: &SearchRequest, model: &Model, tol: f64) {
    let full = model.ranked(req);
    let expected = &full[..full.len().min(req.top_k)];
    let show = || {
        format!(
            "\n  expected:\n{}  actual:\n{}",
            render(expected.iter().map(|(id, s)| (id.as_str(), *s))),
            render_hits(hits)
        )
    };
    if hits.len() != expected.len() {
        c.fail(format_args!("{what}: {} hits, expected {}{}", hits.len(), expected.len(), show()));
    }
    let truth: HashMap<&str, f64> = full.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    for (i, (hit, (want_id, want_score))) in hits.iter().zip(expected).enumerate() {
        let id = hit.chunk.id.as_str();
        let Some(&true_score) = truth.get(id) else {
            c.fail(format_args!(
                "{what}: hit {} `{id}` must not be returned (unknown, filtered out, without the searched vector, or \
                 sharing no term with a sparse query){}",
                i + 1,
                show()
            ))
        };
        if (f64::from(hit.score) - true_score).abs() > tol {
            c.fail(format_args!(
                "{what}: `{id}` scored {} but the contract's formula gives {true_score:.6} (tolerance {tol}){}",
                hit.score,
                show()
            ));
        }
        if id != want_id && (true_score - want_score).abs() > tol {
            c.fail(format_args!("{what}: rank {} holds `{id}` but should hold `{want_id}`{}", i + 1, show()));
        }
        if let Some(stored) = model.records.get(id)
            && hit.chunk != stored.chunk
        {
            c.fail(format_args!(
                "{what}: the chunk returned for `{id}` differs from the one written\n  written:  {:?}\n  returned: {:?}",
                stored.chunk, hit.chunk
            ));
        }
    }
}

pub(crate) async fn setup<S: VectorStore + ?Sized>(c: &Checker, store: &S) {
    c.ok(
        "ensure_spaces with the contract's dense and sparse specs on a fresh store",
        store.ensure_spaces(&Ctx::new(), Some(&dense_spec()), Some(&sparse_spec())).await,
    );
}

/// Writes through [`VectorStore::write`] and applies the batch to the model.
pub(crate) async fn write<S: VectorStore + ?Sized>(
    c: &Checker,
    store: &S,
    model: &mut Model,
    batch: WriteBatch,
    what: &str,
) -> WriteReport {
    let report = c.ok(what, store.write(&Ctx::new(), batch.clone()).await);
    model.apply(&batch);
    report
}

/// Deletes through [`VectorStore::delete_documents`] and applies the deletion to the model.
pub(crate) async fn delete_documents<S: VectorStore + ?Sized>(
    c: &Checker,
    store: &S,
    model: &mut Model,
    doc_ids: &[&str],
    what: &str,
) -> WriteReport {
    let doc_ids: Vec<String> = doc_ids.iter().map(|&d| d.to_owned()).collect();
    let report = c.ok(what, store.delete_documents(&Ctx::new(), &doc_ids).await);
    model.apply(&WriteBatch { delete_docs: doc_ids, upsert: Vec::new() });
    report
}

pub(crate) async fn get<S: VectorStore + ?Sized>(c: &Checker, store: &S, ids: &[&str]) -> Vec<Option<Chunk>> {
    let ids: Vec<String> = ids.iter().map(|&i| i.to_owned()).collect();
    let got = c.ok(&format!("get {ids:?}"), store.get(&Ctx::new(), &ids).await);
    c.eq(&format!("get {ids:?}: number of entries (one per requested id)"), got.len(), ids.len());
    got
}

pub(crate) async fn stats<S: VectorStore + ?Sized>(c: &Checker, store: &S) -> StoreStats {
    c.ok("stats", store.stats(&Ctx::new()).await)
}

/// Expects the store's counts to equal the model's.
pub(crate) async fn expect_counts<S: VectorStore + ?Sized>(c: &Checker, store: &S, model: &Model, what: &str) {
    let s = stats(c, store).await;
    c.eq(&format!("{what}: stats counts"), Counts::from(&s), model.counts());
}

/// Runs one `search` call and checks the shape of every list.
pub(crate) async fn search<S: VectorStore + ?Sized>(
    c: &Checker,
    store: &S,
    requests: &[SearchRequest],
    what: &str,
) -> Vec<Vec<ScoredHit>> {
    let lists = c.ok(what, store.search(&Ctx::new(), requests).await);
    c.eq(&format!("{what}: number of hit lists (one per request)"), lists.len(), requests.len());
    for (i, (req, hits)) in requests.iter().zip(&lists).enumerate() {
        check_list_shape(c, &format!("{what}, request {}", i + 1), req, hits);
    }
    // The same search without texts: the same hits, every field but the text equal, each text absent or equal.
    let lean = c.ok(&format!("{what} (without texts)"), store.search_without_text(&Ctx::new(), requests).await);
    let without_text = |lists: &[Vec<ScoredHit>]| -> Vec<Vec<ScoredHit>> {
        let mut lists = lists.to_vec();
        for hit in lists.iter_mut().flatten() {
            hit.chunk.text.clear();
        }
        lists
    };
    c.eq(
        &format!("{what}: search_without_text gives the hits of search, texts aside"),
        without_text(&lean),
        without_text(&lists),
    );
    let texts_agree = lean
        .iter()
        .flatten()
        .zip(lists.iter().flatten())
        .all(|(l, f)| l.chunk.text.is_empty() || l.chunk.text == f.chunk.text);
    c.that(texts_agree, format_args!("{what}: search_without_text returned a text that differs from search's"));
    lists
}

/// Runs each request in its own `search` call and compares it with the model.
pub(crate) async fn expect_search<S: VectorStore + ?Sized>(
    c: &Checker,
    store: &S,
    model: &Model,
    req: &SearchRequest,
    what: &str,
) -> Vec<ScoredHit> {
    let hits = search(c, store, std::slice::from_ref(req), what).await.remove(0);
    let tol = match req.vector {
        VectorQuery::Dense(_) => DENSE_TOL,
        VectorQuery::Sparse(_) => SPARSE_TOL,
    };
    expect_hits(c, what, &hits, req, model, tol);
    hits
}
