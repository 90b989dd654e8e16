//! The in-memory side of the embedded store: slot table, inverted index and dense matrix.
//!
//! It is a pure function of the database contents: rebuilt on open, updated after each committed write.
//!
//! Sparse (BM25) search prunes with MaxScore and returns exactly what exhaustive scoring returns: the same chunks in
//! the same order with bit-identical scores. [`Index::search_sparse`] explains how and why that holds.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use ragtune_core::{Chunk, Distance, Filter, SparseVector};
use rustc_hash::FxHashMap;

use crate::ann::Ann;

/// One stored chunk as the index sees it: the chunk without its text (for filters and ids).
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) chunk: Chunk,
    /// The chunk's sparse vector as `(term, weight)` pairs in the stored order, which is by ascending term for every
    /// valid vector. It is the forward index: removal finds the postings to drop through it, and pruned search looks
    /// up a chunk's weight for a term by binary search in it.
    pub(crate) sparse: Vec<(u32, f32)>,
    pub(crate) has_sparse: bool,
    pub(crate) has_dense: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Index {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_id: HashMap<String, u32>,
    by_doc: BTreeMap<String, BTreeSet<u32>>,
    /// Term id → postings. Term ids are hashes of terms already, so a fast non-keyed hash is enough here.
    postings: FxHashMap<u32, Postings>,
    sparse_count: u64,
    /// Live chunks whose sparse vector breaks a precondition of pruning (see [`prunable`]); while there is one,
    /// sparse search scores exhaustively.
    unprunable: u64,
    dense_count: u64,
    dim: usize,
    dense: Vec<f32>,
    /// The approximate index, when one was built (`EmbeddedStore::optimize`).
    pub(crate) ann: Option<Ann>,
}

/// One term's postings and the bound MaxScore needs.
#[derive(Debug, Default)]
struct Postings {
    /// `(slot, weight)` in insertion order; slots are reused, so the list is not sorted by slot.
    entries: Vec<(u32, f32)>,
    /// The largest weight in `entries`. It is recomputed on removal, which walks the list anyway, so it stays tight.
    max: f32,
}

pub(crate) struct Hit {
    pub(crate) slot: u32,
    pub(crate) score: f32,
}

impl Index {
    pub(crate) fn new(dim: usize) -> Self {
        Self { dim, ..Self::default() }
    }

    /// An empty index with room for `chunks` chunks, for loading a store whose size is known: the slot table, the
    /// id map and the dense matrix are allocated once instead of growing (and copying) as they fill.
    pub(crate) fn with_capacity(dim: usize, chunks: usize) -> Self {
        let mut index = Self::new(dim);
        index.slots.reserve_exact(chunks);
        index.by_id.reserve(chunks);
        index.dense.reserve_exact(chunks.saturating_mul(dim));
        index
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

    /// The postings a keyword search for `q` reads at most.
    pub(crate) fn sparse_postings(&self, q: &SparseVector) -> u64 {
        q.indices.iter().filter_map(|t| self.postings.get(t)).map(|l| l.entries.len() as u64).sum()
    }

    /// The slots a keyword search's score accumulator spans.
    pub(crate) fn slot_count(&self) -> u64 {
        self.slots.len() as u64
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
        let mut pairs: Vec<(u32, f32)> = Vec::new();
        let has_sparse = sparse.is_some();
        if let Some(v) = sparse {
            pairs = v.indices.iter().copied().zip(v.values.iter().copied()).collect();
            for &(t, w) in &pairs {
                let list = self.postings.entry(t).or_default();
                list.entries.push((slot, w));
                list.max = list.max.max(w);
            }
            if !prunable(&pairs) {
                self.unprunable += 1;
            }
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
        self.slots[slot as usize] = Some(Slot { chunk, sparse: pairs, has_sparse, has_dense });
    }

    pub(crate) fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.by_id.remove(id) else { return false };
        let old = self.slots[slot as usize].take().expect("invariant: by_id points at a live slot");
        for (t, _) in &old.sparse {
            if let Some(list) = self.postings.get_mut(t) {
                let mut max = 0.0f32;
                list.entries.retain(|&(s, w)| {
                    let keep = s != slot;
                    if keep {
                        max = max.max(w);
                    }
                    keep
                });
                list.max = max;
                if list.entries.is_empty() {
                    self.postings.remove(t);
                }
            }
        }
        if old.has_sparse {
            self.sparse_count -= 1;
            if !prunable(&old.sparse) {
                self.unprunable -= 1;
            }
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
    ///
    /// A chunk's score is the sum, in the query's term order, of `term_weight * w` over the query terms it holds
    /// (`w` its weight for the term). Exhaustive scoring adds every posting of every query term, and common terms
    /// have posting lists as long as the store. This function prunes with MaxScore and still returns exactly what
    /// exhaustive scoring returns: the same chunks, in the same order, with the same score bits.
    ///
    /// 1. A term adds at most its bound `term_weight * max_w` (`max_w` its largest posting weight) to any chunk,
    ///    because weights are non-negative and float rounding is monotone.
    /// 2. Terms are added whole, by descending bound. Before a long list, θ is taken: the k-th best partial sum among
    ///    the touched chunks that pass the filter. Partial sums only grow, so at least k eligible chunks end at θ or
    ///    above. Once the bounds of the terms left sum below θ, a chunk not yet touched can only end below k others
    ///    and the remaining lists are not read.
    /// 3. The touched eligible chunks are the candidates now. One whose partial sum plus the bounds left is below θ
    ///    cannot enter the top k either and is dropped. While the candidates are many, the next list is read for them
    ///    alone, which raises θ and lowers the bounds left, so more drop out; once looking their terms up is
    ///    cheaper, the rest are not read.
    /// 4. The candidates left get their final score re-summed from the forward index ([`Slot::sparse`]) in the
    ///    query's term order: the same products added in the same order as the exhaustive sum, hence the same bits.
    ///    The usual top-k cut, ties by chunk id, then runs over them.
    ///
    /// Partial sums are added in another order than final ones, so each differs from its exact value by rounding.
    /// Every comparison with θ therefore carries a relative slack of a few ulps per term, more than the rounding of a
    /// sum of non-negative floats can amount to; the slack can only keep more chunks, never drop one that belongs.
    /// A query or store with a negative or non-finite weight, or a stored vector with a repeated term, breaks the
    /// argument and is scored exhaustively.
    pub(crate) fn search_sparse(&self, q: &SparseVector, idf: bool, top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        if top_k == 0 {
            return Vec::new();
        }
        match self.plan_sparse(q, idf) {
            Some(plan) => self.search_sparse_pruned(&plan, top_k, filter, LOOKUP_COST).0,
            None => self.search_sparse_exhaustive(q, idf, top_k, filter),
        }
    }

    /// Exhaustive sparse scoring: every posting of every query term, summed by slot in query-term order.
    ///
    /// It is the fallback when pruning's preconditions do not hold, and the reference the pruned path is tested
    /// against.
    fn search_sparse_exhaustive(&self, q: &SparseVector, idf: bool, top_k: usize, filter: Option<&Filter>) -> Vec<Hit> {
        let n_docs = self.sparse_count as f32;
        let mut acc = Accumulator::new(self.slots.len());
        for (&t, &qw) in q.indices.iter().zip(&q.values) {
            let Some(list) = self.postings.get(&t) else { continue };
            acc.add(&list.entries, term_weight(qw, list.entries.len(), n_docs, idf));
        }
        let hits = acc.touched.iter().map(|&slot| Hit { slot, score: acc.get(slot) });
        self.top_k(hits, top_k, filter)
    }

    /// The query's terms with their weights and bounds, or `None` when a weight breaks pruning's preconditions.
    fn plan_sparse(&self, q: &SparseVector, idf: bool) -> Option<SparsePlan<'_>> {
        if self.unprunable > 0 {
            return None;
        }
        let n_docs = self.sparse_count as f32;
        let mut plan = SparsePlan { query: Vec::new(), by_bound: Vec::new() };
        for (&t, &qw) in q.indices.iter().zip(&q.values) {
            if !non_negative(qw) {
                return None;
            }
            let Some(list) = self.postings.get(&t) else { continue };
            let weight = term_weight(qw, list.entries.len(), n_docs, idf);
            let bound = weight * list.max;
            if !non_negative(weight) || !non_negative(bound) {
                return None;
            }
            plan.query.push((t, weight));
            plan.by_bound.push(PlannedTerm { term: t, entries: &list.entries, weight, bound });
        }
        // Ties go by term id (a stable sort keeps a repeated term's entries in query order): the plan, and so the
        // work done, depends on the query only, not on the order of a hash map.
        plan.by_bound.sort_by(|a, b| b.bound.total_cmp(&a.bound).then(a.term.cmp(&b.term)));
        Some(plan)
    }

    /// MaxScore over `plan` (see [`Index::search_sparse`]), with `lookup_cost` as [`LOOKUP_COST`] (tests vary it).
    /// Also returns how many posting lists it read.
    fn search_sparse_pruned(
        &self,
        plan: &SparsePlan<'_>,
        top_k: usize,
        filter: Option<&Filter>,
        lookup_cost: usize,
    ) -> (Vec<Hit>, usize) {
        let terms = &plan.by_bound;
        // `rest[i]` is the most the terms from `i` on can add to one chunk. It is summed in f64, where the sum of a
        // few f32 values is exact or as good as, so the slack below only has to cover the f32 sums.
        let mut rest = vec![0.0f64; terms.len() + 1];
        for i in (0..terms.len()).rev() {
            rest[i] = rest[i + 1] + f64::from(terms[i].bound);
        }
        // A sum of m non-negative f32 values in any order is within a factor (1 ± 2^-24)^(m-1) of the exact sum. A
        // final score may sit that far below θ's partial sum, and that far above a partial sum plus the bounds left:
        // `slack` squared covers both with room to spare.
        let slack = 1.0 + 4.0 * (terms.len() as f64 + 2.0) * f64::from(f32::EPSILON);
        let slack2 = slack * slack;
        let mut acc = Accumulator::new(self.slots.len());
        let mut eligible = Eligible::new(filter);
        let mut scratch = Vec::new();
        let mut read = 0;
        // Open phase: every posting counts, and a chunk met for the first time joins the touched set.
        while let Some(term) = terms.get(read) {
            // Taking θ costs a pass over the chunks touched so far: worth it only before a list about as long.
            if read > 0 && term.entries.len() * 2 >= acc.touched.len() {
                eligible.update(self, &acc);
                let theta = kth_best(&mut scratch, eligible.slots(&acc), &acc, top_k);
                if theta.is_some_and(|th| rest[read] * slack2 < th) {
                    break;
                }
            }
            acc.add(term.entries, term.weight);
            read += 1;
        }
        // Closed phase: no chunk outside `candidates` can reach the top k any more. Each round drops the candidates
        // that cannot reach θ, then completes the partial sums of the rest by the cheaper of two ways: reading the
        // next posting list (skipping chunks that are not candidates), or looking up every remaining term of every
        // candidate in its forward index. A lookup is a few cache misses, a posting a sequential read, hence
        // `LOOKUP_COST`; and the final re-sum looks every term up anyway, so the lookups are already paid for.
        eligible.update(self, &acc);
        let mut candidates = eligible.slots(&acc).to_vec();
        if filter.is_some() {
            // Chunks the filter rejects are no candidates: the lists read from here on skip them too.
            acc.keep_only(&candidates);
        }
        loop {
            if let Some(th) = kth_best(&mut scratch, &candidates, &acc, top_k) {
                candidates.retain(|&slot| {
                    let keep = (f64::from(acc.get(slot)) + rest[read]) * slack2 >= th;
                    if !keep {
                        acc.forget(slot);
                    }
                    keep
                });
            }
            match terms.get(read) {
                Some(term) if candidates.len().saturating_mul(lookup_cost) > term.entries.len() => {
                    acc.add_known(term.entries, term.weight);
                    read += 1;
                }
                _ => break,
            }
        }
        // Partial sums were added in bound order; the exhaustive sum runs in query order, and so does this one.
        let hits =
            candidates.iter().filter_map(|&slot| Some(Hit { slot, score: self.final_score(slot, &plan.query)? }));
        // Every candidate is eligible: the filter has been applied.
        (self.top_k(hits, top_k, None), read)
    }

    /// A chunk's exhaustive score from the forward index: the same products added in the same (query) order.
    fn final_score(&self, slot: u32, query: &[(u32, f32)]) -> Option<f32> {
        let s = self.slot(slot)?;
        let mut score = 0.0f32;
        for &(t, weight) in query {
            let found = s.sparse.binary_search_by_key(&t, |&(term, _)| term).ok().and_then(|at| s.sparse.get(at));
            if let Some(&(_, w)) = found {
                score += weight * w;
            }
        }
        Some(score)
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

/// Whether a stored sparse vector keeps the preconditions of pruned search: strictly increasing terms (so a binary
/// search finds a term's one weight) and finite, non-negative weights (so a term's largest weight bounds what it can
/// add and partial sums only grow).
fn prunable(pairs: &[(u32, f32)]) -> bool {
    pairs.windows(2).all(|p| p[0].0 < p[1].0) && pairs.iter().all(|&(_, w)| non_negative(w))
}

/// The query-side weight of a term whose posting list has `n` entries, in a store of `n_docs` sparse vectors:
/// Qdrant's IDF times the query weight, or the query weight alone. Both search paths call this one function, so
/// their products, and therefore their scores, are the same bits.
fn term_weight(qw: f32, n: usize, n_docs: f32, idf: bool) -> f32 {
    if idf {
        let n = n as f32;
        qw * (1.0 + (n_docs - n + 0.5) / (n + 0.5)).ln()
    } else {
        qw
    }
}

/// Scores accumulated by slot, one sum per chunk, in the order the posting lists are added.
///
/// The sums live in an array indexed by slot, with a bitset of the slots touched: a common term's postings run to
/// hundreds of thousands in a large store, and an array add is far cheaper than a hash map's.
///
/// A fresh one per search costs little even at a million slots: the zeroed pages come from the kernel on first
/// touch, and keeping cleared accumulators for reuse timed no faster (clearing costs about what allocating does).
struct Accumulator {
    acc: Vec<f32>,
    seen: Vec<u64>,
    touched: Vec<u32>,
}

impl Accumulator {
    fn new(slots: usize) -> Self {
        Self { acc: vec![0.0; slots], seen: vec![0; slots.div_ceil(64)], touched: Vec::new() }
    }

    /// Adds `weight * w` to the sum of every slot in `postings`.
    fn add(&mut self, postings: &[(u32, f32)], weight: f32) {
        for &(slot, w) in postings {
            // Postings only name live slots; `get_mut` keeps a broken invariant from becoming a panic.
            let (Some(a), Some(word)) = (self.acc.get_mut(slot as usize), self.seen.get_mut(slot as usize / 64)) else {
                continue;
            };
            let bit = 1u64 << (slot % 64);
            if *word & bit == 0 {
                *word |= bit;
                self.touched.push(slot);
            }
            *a += weight * w;
        }
    }

    /// Adds `weight * w` to the sums of the slots in `postings` that are still known (touched and not forgotten).
    fn add_known(&mut self, postings: &[(u32, f32)], weight: f32) {
        for &(slot, w) in postings {
            let known = self.seen.get(slot as usize / 64).is_some_and(|word| word & (1u64 << (slot % 64)) != 0);
            if let (true, Some(a)) = (known, self.acc.get_mut(slot as usize)) {
                *a += weight * w;
            }
        }
    }

    /// Forgets every touched slot but those in `keep`.
    fn keep_only(&mut self, keep: &[u32]) {
        // Every set bit belongs to a touched slot, so zeroing the touched slots' words clears them all.
        for &slot in &self.touched {
            if let Some(word) = self.seen.get_mut(slot as usize / 64) {
                *word = 0;
            }
        }
        for &slot in keep {
            if let Some(word) = self.seen.get_mut(slot as usize / 64) {
                *word |= 1u64 << (slot % 64);
            }
        }
    }

    /// Stops `add_known` from adding to `slot`: it has dropped out of the race.
    fn forget(&mut self, slot: u32) {
        if let Some(word) = self.seen.get_mut(slot as usize / 64) {
            *word &= !(1u64 << (slot % 64));
        }
    }

    fn get(&self, slot: u32) -> f32 {
        self.acc.get(slot as usize).copied().unwrap_or(0.0)
    }
}

/// A sparse query prepared for pruned search.
struct SparsePlan<'a> {
    /// The query's terms that have postings, with their weights, in query order: the order of the final sums.
    query: Vec<(u32, f32)>,
    /// The same terms by descending bound: the order posting lists are read in.
    by_bound: Vec<PlannedTerm<'a>>,
}

struct PlannedTerm<'a> {
    term: u32,
    entries: &'a [(u32, f32)],
    weight: f32,
    /// The most this term can add to one chunk's score.
    bound: f32,
}

/// The touched slots that pass the filter, brought up to date lazily so each chunk meets the filter once.
struct Eligible<'f> {
    filter: Option<&'f Filter>,
    slots: Vec<u32>,
    checked: usize,
}

impl<'f> Eligible<'f> {
    fn new(filter: Option<&'f Filter>) -> Self {
        Self { filter, slots: Vec::new(), checked: 0 }
    }

    fn update(&mut self, index: &Index, acc: &Accumulator) {
        let Some(f) = self.filter else { return };
        for &slot in acc.touched.get(self.checked..).unwrap_or_default() {
            if index.slot(slot).is_some_and(|s| f.matches(&s.chunk)) {
                self.slots.push(slot);
            }
        }
        self.checked = acc.touched.len();
    }

    /// The eligible slots as of the last `update`; without a filter, every touched slot (no copy).
    fn slots<'a>(&'a self, acc: &'a Accumulator) -> &'a [u32] {
        if self.filter.is_some() { &self.slots } else { &acc.touched }
    }
}

/// θ: the k-th best partial sum among `slots`, when there are k of them. `scratch` is reused between calls.
fn kth_best(scratch: &mut Vec<f32>, slots: &[u32], acc: &Accumulator, k: usize) -> Option<f64> {
    if k == 0 || slots.len() < k {
        return None;
    }
    scratch.clear();
    scratch.extend(slots.iter().map(|&s| acc.get(s)));
    let (_, kth, _) = scratch.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    Some(f64::from(*kth))
}

/// How many postings cost about as much to read in the closed phase as one chunk's forward-index lookups. Such a
/// posting is a sequential read and a test in a bitset that stays in cache (a nanosecond or two); a lookup is a
/// handful of cache misses (about a microsecond). Timed roughly at a million synthetic chunks: 256 to 1024 did about
/// equally well, 16 to 64 clearly worse.
const LOOKUP_COST: usize = 512;

/// Finite and not negative: what pruning needs of every weight.
fn non_negative(x: f32) -> bool {
    x.is_finite() && x >= 0.0
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
    use proptest::prelude::*;

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

    /// Vocabulary size of the generated stores; a few more ids appear in queries only.
    const VOCAB: u32 = 30;

    fn chunk(id: &str, group: u8) -> Chunk {
        let mut c = Chunk::new(id, format!("doc-{id}"), "");
        c.metadata.insert("g".into(), group.into());
        c
    }

    fn put(index: &mut Index, id: &str, group: u8, pairs: &[(u32, f32)]) {
        index.insert(chunk(id, group), Some(&SparseVector::from_pairs(pairs.to_vec())), None);
    }

    /// Runs the exhaustive search and the pruned one (as `search_sparse` runs it, and with lookups made cheaper or
    /// dearer than postings, so both ways of completing the candidates' sums run) and asserts they agree on ids,
    /// order and score bits. Returns the ranking and how many posting lists `search_sparse` read (`None`: it scored
    /// exhaustively).
    fn check(
        index: &Index,
        q: &SparseVector,
        idf: bool,
        top_k: usize,
        filter: Option<&Filter>,
    ) -> (Vec<String>, Option<usize>) {
        let render = |hits: Vec<Hit>| -> Vec<String> {
            hits.iter()
                .map(|h| {
                    let id = index.slot(h.slot).map_or("?", |s| s.chunk.id.as_str());
                    format!("{}@{} {:08x}", id, h.slot, h.score.to_bits())
                })
                .collect()
        };
        let exhaustive = render(index.search_sparse_exhaustive(q, idf, top_k, filter));
        let context = format!("query {q:?}, idf {idf}, top {top_k}, filter {filter:?}");
        assert_eq!(render(index.search_sparse(q, idf, top_k, filter)), exhaustive, "{context}");
        let plan = index.plan_sparse(q, idf).filter(|_| top_k > 0);
        if let Some(plan) = &plan {
            for cost in [0, 1, 8, usize::MAX] {
                let (hits, _) = index.search_sparse_pruned(plan, top_k, filter, cost);
                assert_eq!(render(hits), exhaustive, "{context}, lookup cost {cost}");
            }
        }
        let read = plan.map(|plan| index.search_sparse_pruned(&plan, top_k, filter, LOOKUP_COST).1);
        (exhaustive, read)
    }

    #[test]
    fn a_common_term_is_not_read_when_it_cannot_change_the_top_k() {
        let mut index = Index::new(0);
        for i in 0..4000u32 {
            // Term 0 is in every chunk; term 1 in three of them, with tied weights so ids break the tie.
            let pairs = if i % 1500 == 5 { vec![(0, 1.0), (1, 2.0)] } else { vec![(0, 1.0 + (i % 7) as f32)] };
            put(&mut index, &format!("c{i:04}"), 0, &pairs);
        }
        let q = SparseVector::from_pairs(vec![(0, 1.0), (1, 1.0)]);
        let (ranking, read) = check(&index, &q, true, 2, None);
        assert_eq!(read, Some(1), "the list of term 0 should have been skipped");
        assert_eq!(ranking.len(), 2);
        assert!(ranking[0].starts_with("c0005@") && ranking[1].starts_with("c1505@"), "{ranking:?}");
        // Without IDF the common term has the larger bound and is read first; the rare term's list is then shorter
        // than the lookups it would save, so it is read too.
        assert_eq!(check(&index, &q, false, 2, None).1, Some(2));
    }

    #[test]
    fn a_negative_weight_falls_back_to_exhaustive_until_it_is_removed() {
        let mut index = Index::new(0);
        put(&mut index, "a", 0, &[(1, 1.0), (2, 0.5)]);
        put(&mut index, "b", 0, &[(1, -1.0)]);
        let q = SparseVector::from_pairs(vec![(1, 1.0), (2, 1.0)]);
        assert_eq!(check(&index, &q, true, 5, None).1, None);
        assert!(index.remove("b"));
        assert_eq!(check(&index, &q, true, 5, None).1, Some(2));
        assert_eq!(check(&index, &SparseVector::from_pairs(vec![(1, -1.0)]), true, 5, None).1, None);
    }

    #[test]
    fn removal_lowers_a_terms_bound() {
        let mut index = Index::new(0);
        put(&mut index, "a", 0, &[(1, 4.0)]);
        put(&mut index, "b", 0, &[(1, 1.5)]);
        assert_eq!(index.postings[&1].max, 4.0);
        index.remove("a");
        assert_eq!(index.postings[&1].max, 1.5);
        put(&mut index, "a", 0, &[(1, 0.5)]);
        assert_eq!(index.postings[&1].max, 1.5);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put { id: u8, pairs: Vec<(u32, f32)>, sparse: bool },
        Remove { id: u8 },
    }

    /// A term id skewed towards small ids, as word frequencies are: the product of three uniform draws.
    fn term(limit: u32) -> impl Strategy<Value = u32> {
        (0..limit, 0..limit, 0..limit).prop_map(move |(a, b, c)| a * b * c / (limit * limit))
    }

    /// Weights with many exact ties (so ids decide), zeros, and tiny values whose products underflow.
    fn weight() -> impl Strategy<Value = f32> {
        prop_oneof![
            3 => Just(1.0f32),
            1 => Just(0.5f32),
            1 => Just(0.0f32),
            4 => 0.0f32..4.0,
            1 => 1e-30f32..1e-20,
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..60, prop::collection::vec((term(VOCAB), weight()), 0..12), prop::bool::weighted(0.9))
                .prop_map(|(id, pairs, sparse)| Op::Put { id, pairs, sparse }),
            2 => (0u8..60).prop_map(|id| Op::Remove { id }),
        ]
    }

    proptest! {
        // Cases are cheap (a store of at most 60 chunks) and an early stop needs a lucky mix; many cases buy coverage.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn pruned_search_returns_the_exhaustive_ranking_and_scores(
            poison in prop::bool::weighted(0.1),
            ops in prop::collection::vec(op(), 1..150),
            query in prop::collection::vec((term(VOCAB + 3), prop_oneof![3 => Just(1.0f32), 1 => 0.0f32..3.0]), 1..8),
            idf: bool,
            top_k in prop_oneof![3 => 1usize..5, 1 => 0usize..70],
            group in prop::option::of(0u8..3),
        ) {
            let mut index = Index::new(0);
            if poison {
                // A negative weight disables pruning until a later op replaces or removes chunk 0.
                put(&mut index, "0", 0, &[(0, -1.0), (1, 1.0)]);
            }
            let q = SparseVector::from_pairs(query);
            let filter = group.map(|g| Filter::eq("g", g));
            let half = ops.len() / 2;
            for (i, op) in ops.into_iter().enumerate() {
                // Searching halfway too checks a store whose slots are about to be reused and its bounds lowered.
                if i == half {
                    check(&index, &q, idf, top_k, filter.as_ref());
                }
                match op {
                    Op::Put { id, pairs, sparse } => {
                        let v = SparseVector::from_pairs(pairs);
                        index.insert(chunk(&id.to_string(), id % 3), sparse.then_some(&v), None);
                    }
                    Op::Remove { id } => {
                        index.remove(&id.to_string());
                    }
                }
            }
            check(&index, &q, idf, top_k, filter.as_ref());
        }
    }
}
