//! A reference in-memory [`VectorStore`]: brute force, obviously correct, for tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use ragtune_core::{
    Chunk, Ctx, Distance, EmbeddingSpec, Error, Record, Result, ScoredHit, SearchRequest, SparseSpec, SparseVector,
    StoreStats, VectorQuery, VectorStore, WriteBatch, WriteReport, sort_ranked,
};

/// A reference implementation of [`VectorStore`] that keeps everything in memory and searches by brute force.
///
/// It passes the whole contract suite in [`contract`](crate::contract) and is meant for unit tests of retrievers
/// and pipelines, and as the executable reading of the contract when another store disagrees with it.
/// It is not for production: every search scans every record, and nothing is persisted.
///
/// Spaces: [`ensure_spaces`](VectorStore::ensure_spaces) fixes each space the first time it is given one; later
/// calls with another spec are a [`Mismatch`](ragtune_core::ErrorKind::Mismatch). Dense writes before any dense
/// spec fix the dimension. A batch is validated completely before anything is applied, under one write lock.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    dense_spec: Option<EmbeddingSpec>,
    /// The dense dimension, fixed by the dense spec or by the first dense write.
    dense_dim: Option<usize>,
    sparse_spec: Option<SparseSpec>,
    records: BTreeMap<String, Record>,
}

impl MemoryStore {
    /// An empty store with no spaces fixed.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    // A poisoned lock means a panic happened elsewhere while holding it; every mutation is applied only after
    // validation succeeded, so the state is still consistent and tests can go on reading it.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl State {
    fn validate(&self, record: &Record, batch_dim: &mut Option<usize>) -> Result<()> {
        let id = &record.chunk.id;
        if id.is_empty() {
            return Err(Error::invalid_input("a record has an empty chunk id"));
        }
        if let Some(dense) = &record.dense {
            let dim = *batch_dim.get_or_insert(dense.len());
            if dense.len() != dim {
                return Err(Error::mismatch(format!(
                    "record `{id}` has a dense vector of {} dimensions; the store's dense space has {dim}",
                    dense.len()
                )));
            }
            if dense.iter().any(|x| !x.is_finite()) {
                return Err(Error::invalid_input(format!("record `{id}` has a non-finite dense value")));
            }
        }
        if let Some(sparse) = &record.sparse {
            sparse.validate().map_err(|e| e.context(format!("record `{id}`")))?;
        }
        Ok(())
    }

    fn dense_score(&self, query: &[f32], vector: &[f32]) -> f32 {
        let dot: f64 = query.iter().zip(vector).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        let cosine_of_raw = self.dense_spec.as_ref().is_some_and(|s| s.distance == Distance::Cosine && !s.normalized);
        if cosine_of_raw {
            let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
            let denom = norm(query) * norm(vector);
            return if denom == 0.0 { 0.0 } else { (dot / denom) as f32 };
        }
        dot as f32
    }

    fn search_dense(&self, query: &[f32], req: &SearchRequest) -> Result<Vec<ScoredHit>> {
        let Some(dim) = self.dense_dim else {
            // No dense space yet: nothing can match.
            return Ok(Vec::new());
        };
        if query.len() != dim {
            return Err(Error::mismatch(format!(
                "the dense query has {} dimensions; the store's dense space has {dim}",
                query.len()
            )));
        }
        if query.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid_input("the dense query has a non-finite value"));
        }
        Ok(self.rank(req, |r| r.dense.as_deref().map(|d| self.dense_score(query, d))))
    }

    fn search_sparse(&self, query: &SparseVector, req: &SearchRequest) -> Result<Vec<ScoredHit>> {
        query.validate().map_err(|e| e.context("the sparse query"))?;
        let weights: HashMap<u32, f32> = query.indices.iter().copied().zip(query.values.iter().copied()).collect();
        let with_sparse = || self.records.values().filter_map(|r| r.sparse.as_ref());
        let total = with_sparse().count() as f64;
        let mut df: HashMap<u32, f64> = HashMap::new();
        for v in with_sparse() {
            for i in v.indices.iter().filter(|i| weights.contains_key(i)) {
                *df.entry(*i).or_default() += 1.0;
            }
        }
        let use_idf = self.sparse_spec.as_ref().is_none_or(|s| s.idf);
        let idf = |t: u32| {
            let n = df.get(&t).copied().unwrap_or(0.0);
            if use_idf { (1.0 + (total - n + 0.5) / (n + 0.5)).ln() } else { 1.0 }
        };
        Ok(self.rank(req, |r| {
            let doc = r.sparse.as_ref()?;
            let mut matched = false;
            let mut score = 0.0_f64;
            for (t, d) in doc.indices.iter().zip(&doc.values) {
                if let Some(q) = weights.get(t) {
                    matched = true;
                    score += idf(*t) * f64::from(*q) * f64::from(*d);
                }
            }
            // Only chunks sharing a term with the query are hits, as in an inverted index.
            matched.then_some(score as f32)
        }))
    }

    fn rank(&self, req: &SearchRequest, score: impl Fn(&Record) -> Option<f32>) -> Vec<ScoredHit> {
        let mut hits: Vec<ScoredHit> = self
            .records
            .values()
            .filter(|r| req.filter.as_ref().is_none_or(|f| f.matches(&r.chunk)))
            .filter_map(|r| score(r).map(|s| ScoredHit { chunk: r.chunk.clone(), score: s }))
            .collect();
        sort_ranked(&mut hits, |h| (h.score, h.chunk.id.as_str()));
        hits.truncate(req.top_k);
        hits
    }
}

#[async_trait]
impl VectorStore for MemoryStore {
    async fn scan(&self, ctx: &Ctx, cursor: Option<String>, limit: usize) -> Result<(Vec<Record>, Option<String>)> {
        ctx.check()?;
        let st = self.read();
        let limit = limit.max(1);
        let after = |id: &String| cursor.as_ref().is_none_or(|c| id > c);
        let page: Vec<Record> =
            st.records.iter().filter(|(id, _)| after(id)).take(limit).map(|(_, r)| r.clone()).collect();
        let next = (page.len() == limit).then(|| page.last().map(|r| r.chunk.id.clone())).flatten();
        Ok((page, next))
    }

    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        ctx.check()?;
        let mut st = self.write_lock();
        if let Some(want) = dense {
            match (&st.dense_spec, st.dense_dim) {
                (Some(have), _) if have != want => {
                    return Err(Error::mismatch(format!(
                        "the store's dense space is {have:?}; it cannot take vectors of {want:?}"
                    )));
                }
                (None, Some(dim)) if dim != want.dim => {
                    return Err(Error::mismatch(format!(
                        "the store holds dense vectors of {dim} dimensions; {} has {}",
                        want.model_id, want.dim
                    )));
                }
                _ => {}
            }
        }
        if let Some(want) = sparse
            && let Some(have) = &st.sparse_spec
            && have != want
        {
            return Err(Error::mismatch(format!("the store's sparse space is {have:?}; it cannot take {want:?}")));
        }
        if let Some(want) = dense {
            st.dense_dim = Some(want.dim);
            st.dense_spec = Some(want.clone());
        }
        if let Some(want) = sparse {
            st.sparse_spec = Some(want.clone());
        }
        Ok(())
    }

    async fn write(&self, ctx: &Ctx, batch: WriteBatch) -> Result<WriteReport> {
        ctx.check()?;
        let mut st = self.write_lock();
        let mut dim = st.dense_dim;
        for record in &batch.upsert {
            st.validate(record, &mut dim)?;
        }
        // Everything is valid: apply deletes, then upserts, without releasing the lock.
        st.dense_dim = dim;
        let before = st.records.len();
        st.records.retain(|_, r| !batch.delete_docs.contains(&r.chunk.doc_id));
        let mut report = WriteReport { upserted: 0, deleted: (before - st.records.len()) as u64 };
        for record in batch.upsert {
            if st.records.insert(record.chunk.id.clone(), record).is_some() {
                report.deleted += 1;
            }
            report.upserted += 1;
        }
        Ok(report)
    }

    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        ctx.check()?;
        let st = self.read();
        Ok(ids.iter().map(|id| st.records.get(id).map(|r| r.chunk.clone())).collect())
    }

    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        ctx.check()?;
        let st = self.read();
        requests
            .iter()
            .map(|req| match &req.vector {
                VectorQuery::Dense(q) => st.search_dense(q, req),
                VectorQuery::Sparse(q) => st.search_sparse(q, req),
            })
            .collect()
    }

    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> {
        ctx.check()?;
        let st = self.read();
        let records = st.records.values();
        Ok(StoreStats {
            chunks: st.records.len() as u64,
            documents: records.clone().map(|r| r.chunk.doc_id.as_str()).collect::<BTreeSet<_>>().len() as u64,
            dense_vectors: records.clone().filter(|r| r.dense.is_some()).count() as u64,
            sparse_vectors: records.filter(|r| r.sparse.is_some()).count() as u64,
            dense_spec: st.dense_spec.clone(),
            sparse_spec: st.sparse_spec.clone(),
            settings: BTreeMap::from([("backend".to_owned(), "memory".into())]),
        })
    }
}
