//! The in-memory side of the embedded store: slot table, inverted index and dense matrix.
//!
//! It is a pure function of the database contents: rebuilt on open, updated after each committed write.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use ragtune_core::{Chunk, Distance, Filter, SparseVector};

use crate::ann::Ann;

/// One stored chunk as the index sees it: the chunk without its text (for filters and ids).
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) chunk: Chunk,
    pub(crate) sparse_terms: Vec<u32>,
    pub(crate) has_sparse: bool,
    pub(crate) has_dense: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_id: HashMap<String, u32>,
    by_doc: BTreeMap<String, BTreeSet<u32>>,
    postings: HashMap<u32, Vec<(u32, f32)>>,
    sparse_count: u64,
    dense_count: u64,
    dim: usize,
    dense: Vec<f32>,
    /// The approximate index, when one was built (`EmbeddedStore::optimize`).
    pub(crate) ann: Option<Ann>,
}

pub(crate) struct Hit {
    pub(crate) slot: u32,
    pub(crate) score: f32,
}

impl Index {
    pub(crate) fn new(dim: usize) -> Self {
        Self { dim, ..Self::default() }
    }

    pub(crate) fn set_dim(&mut self, dim: usize) {
        if self.dense_count == 0 {
            self.dim = dim;
            self.dense.clear();
            self.dense.resize(self.slots.len() * dim, 0.0);
        }
    }

    pub(crate) fn chunks(&self) -> u64 {
        self.by_id.len() as u64
    }

    pub(crate) fn documents(&self) -> u64 {
        self.by_doc.len() as u64
    }

    pub(crate) fn sparse_count(&self) -> u64 {
        self.sparse_count
    }

    pub(crate) fn dense_count(&self) -> u64 {
        self.dense_count
    }

    pub(crate) fn chunk_ids_of_doc(&self, doc_id: &str) -> Vec<String> {
        self.by_doc
            .get(doc_id)
            .map(|s| s.iter().filter_map(|&i| self.slot(i).map(|s| s.chunk.id.clone())).collect())
            .unwrap_or_default()
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(crate) fn slot(&self, i: u32) -> Option<&Slot> {
        self.slots.get(i as usize).and_then(Option::as_ref)
    }

    /// Inserts or replaces a chunk. `chunk.text` should already be emptied by the caller.
    pub(crate) fn insert(&mut self, chunk: Chunk, sparse: Option<&SparseVector>, dense: Option<&[f32]>) {
        self.remove(&chunk.id.clone());
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.dense.resize(self.slots.len() * self.dim, 0.0);
                u32::try_from(self.slots.len() - 1).expect("invariant: fewer than 2^32 chunks in one store")
            }
        };
        let mut sparse_terms = Vec::new();
        let has_sparse = sparse.is_some();
        if let Some(v) = sparse {
            for (&t, &w) in v.indices.iter().zip(&v.values) {
                self.postings.entry(t).or_default().push((slot, w));
            }
            sparse_terms.clone_from(&v.indices);
            self.sparse_count += 1;
        }
        let has_dense = dense.is_some();
        if let Some(d) = dense {
            let at = slot as usize * self.dim;
            self.dense[at..at + self.dim].copy_from_slice(d);
            self.dense_count += 1;
        }
        self.by_id.insert(chunk.id.clone(), slot);
        self.by_doc.entry(chunk.doc_id.clone()).or_default().insert(slot);
        self.slots[slot as usize] = Some(Slot { chunk, sparse_terms, has_sparse, has_dense });
    }

    pub(crate) fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.by_id.remove(id) else { return false };
        let old = self.slots[slot as usize].take().expect("invariant: by_id points at a live slot");
        for t in &old.sparse_terms {
            if let Some(list) = self.postings.get_mut(t) {
                list.retain(|&(s, _)| s != slot);
                if list.is_empty() {
                    self.postings.remove(t);
                }
            }
        }
        if old.has_sparse {
            self.sparse_count -= 1;
        }
        if old.has_dense {
            self.dense_count -= 1;
        }
        if let Some(set) = self.by_doc.get_mut(&old.chunk.doc_id) {
            set.remove(&slot);
            if set.is_empty() {
                self.by_doc.remove(&old.chunk.doc_id);
            }
        }
        self.free.push(slot);
        true
    }

    /// BM25-style sparse scoring with Qdrant's IDF over the chunks that have a sparse vector.
    pub(crate) fn search_sparse(&self, q: &SparseVector, idf: bool, top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let n_docs = self.sparse_count as f32;
        // Scores accumulate in an array indexed by slot, with a bitset of the slots touched: a common term's
        // postings run to hundreds of thousands in a large store, and an array add is far cheaper than a hash
        // map's. Each slot's sum is taken in query-term order, as before, so scores do not change.
        let mut acc = vec![0.0f32; self.slots.len()];
        let mut seen = vec![0u64; self.slots.len().div_ceil(64)];
        let mut touched: Vec<u32> = Vec::new();
        for (&t, &qw) in q.indices.iter().zip(&q.values) {
            let Some(list) = self.postings.get(&t) else { continue };
            let weight = if idf {
                let n = list.len() as f32;
                qw * (1.0 + (n_docs - n + 0.5) / (n + 0.5)).ln()
            } else {
                qw
            };
            for &(slot, w) in list {
                // Postings only name live slots; `get_mut` keeps a broken invariant from becoming a panic.
                let (Some(a), Some(word)) = (acc.get_mut(slot as usize), seen.get_mut(slot as usize / 64)) else {
                    continue;
                };
                let bit = 1u64 << (slot % 64);
                if *word & bit == 0 {
                    *word |= bit;
                    touched.push(slot);
                }
                *a += weight * w;
            }
        }
        let hits = touched.into_iter().map(|slot| Hit { slot, score: acc[slot as usize] });
        self.top_k(hits, top_k, filter)
    }

    /// The live dense vectors with their chunk ids, sorted by id (the input of an index build).
    pub(crate) fn dense_vectors(&self) -> Vec<(String, Vec<f32>)> {
        let mut out: Vec<(String, Vec<f32>)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref().filter(|s| s.has_dense)?;
                Some((s.chunk.id.clone(), self.dense[i * self.dim..(i + 1) * self.dim].to_vec()))
            })
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Records that `id` changed after the approximate index was built; returns whether an index exists.
    pub(crate) fn mark_dirty(&mut self, id: &str) -> bool {
        match &mut self.ann {
            Some(ann) => {
                ann.dirty.insert(id.to_owned());
                true
            }
            None => false,
        }
    }

    fn dense_hit(&self, slot: u32, q: &[f32]) -> Option<Hit> {
        self.slot(slot).filter(|s| s.has_dense)?;
        let at = slot as usize * self.dim;
        Some(Hit { slot, score: dot(&self.dense[at..at + self.dim], q) })
    }

    /// Dense search: through the approximate index when there is one and it can answer, else exact.
    pub(crate) fn search_dense(&self, q: &[f32], top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        if let Some(ann) = self.ann.as_ref().filter(|a| top_k <= a.ef_search()) {
            let snapshot = ann.candidates(q).into_iter().filter_map(|id| self.by_id.get(&id).copied());
            let changed = ann.dirty.iter().filter_map(|id| self.by_id.get(id).copied());
            let hits: Vec<Hit> = snapshot.chain(changed).filter_map(|slot| self.dense_hit(slot, q)).collect();
            let found = self.top_k(hits.into_iter(), top_k, filter);
            // Filters can remove most approximate candidates; then only an exact scan can fill the list.
            if found.len() >= top_k || found.len() as u64 >= self.dense_count {
                return found;
            }
        }
        self.search_dense_exact(q, top_k, filter)
    }

    /// Exact dense search: one dot product per stored vector (vectors of cosine spaces are normalised on write).
    pub(crate) fn search_dense_exact(&self, q: &[f32], top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let hits = self.slots.iter().enumerate().filter_map(|(i, s)| {
            let s = s.as_ref()?;
            if !s.has_dense {
                return None;
            }
            let score = dot(&self.dense[i * self.dim..(i + 1) * self.dim], q);
            let slot = u32::try_from(i).expect("invariant: fewer than 2^32 slots");
            Some(Hit { slot, score })
        });
        self.top_k(hits, top_k, filter)
    }

    fn top_k(&self, hits: impl Iterator<Item = Hit>, top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let id = |h: &Hit| self.slot(h.slot).map_or("", |s| s.chunk.id.as_str());
        let mut hits: Vec<Hit> = hits
            .filter(|h| {
                let Some(s) = self.slot(h.slot) else { return false };
                filter.is_none_or(|f| f.matches(&s.chunk))
            })
            .collect();
        let cmp = |a: &Hit, b: &Hit| -> Ordering { b.score.total_cmp(&a.score).then_with(|| id(a).cmp(id(b))) };
        if hits.len() > top_k && top_k > 0 {
            hits.select_nth_unstable_by(top_k - 1, cmp);
            hits.truncate(top_k);
        }
        hits.truncate(top_k);
        hits.sort_by(cmp);
        hits
    }
}

/// Dot product written so the compiler vectorises it: eight independent accumulators break the sequential
/// dependency of a plain float sum (which strict IEEE ordering would otherwise keep scalar).
#[must_use]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Normalises a vector in place for cosine spaces.
pub(crate) fn prepare_dense(v: &mut [f32], distance: Distance) {
    if distance == Distance::Cosine {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum() {
        for n in [0usize, 1, 7, 8, 9, 384, 385] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "n = {n}");
        }
    }
}
