//! The contract suite checked against itself: the reference store passes every check, and stores with one
//! deliberate bug each are rejected by the check meant to catch that bug.

use std::sync::Arc;

use async_trait::async_trait;
use ragtune_core::{
    Chunk, Ctx, EmbeddingSpec, Error, Result, ScoredHit, SearchRequest, SparseSpec, StoreStats, VectorStore,
    WriteBatch, WriteReport,
};
use ragtune_testkit::{MemoryStore, contract};

#[tokio::test(flavor = "current_thread")]
async fn memory_store_passes_the_contract_on_a_current_thread_runtime() {
    contract::vector_store_contract(|| async { MemoryStore::new() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_contract_on_a_multi_thread_runtime() {
    contract::vector_store_contract(|| async { MemoryStore::new() }).await;
}

#[tokio::test]
async fn checks_run_on_plain_references_and_trait_objects() {
    contract::round_trip(&MemoryStore::new()).await;
    let store: Arc<dyn VectorStore> = Arc::new(MemoryStore::new());
    contract::filters(&*store).await;
    contract::concurrent_readers_with_writer(Arc::new(MemoryStore::new()) as Arc<dyn VectorStore>).await;
}

#[tokio::test]
async fn guards_outlive_their_stores() {
    let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    struct Guard(Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let counter = Arc::clone(&drops);
    contract::vector_store_contract_with_guard(move || {
        let guard = Guard(Arc::clone(&counter));
        async move { (MemoryStore::new(), guard) }
    })
    .await;
    assert_eq!(drops.load(std::sync::atomic::Ordering::SeqCst), contract::checks::<MemoryStore>().len());
}

#[test]
fn every_check_is_registered_once() {
    let names: Vec<&str> = contract::checks::<MemoryStore>().iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "empty_store",
            "round_trip",
            "scan_pages",
            "upsert_replaces",
            "delete_by_document",
            "filters",
            "top_k_and_ties",
            "dense_scoring",
            "sparse_scoring",
            "space_mismatch",
            "request_order",
            "large_batch",
            "concurrent_readers_with_writer",
        ]
    );
}

/// One deliberate bug of a [`Buggy`] store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// Stats report one chunk too many.
    PhantomChunk,
    /// `get` loses the header path.
    LosesHeaderPath,
    /// `get` leaves out unknown ids instead of answering `None`.
    SkipsUnknownIds,
    /// Stats count every chunk as having a dense vector.
    CountsEveryChunkAsDense,
    /// Upsert keeps the first version of a chunk.
    KeepsFirstVersion,
    /// Writes ignore `delete_docs`.
    IgnoresDeletes,
    /// Upserts are applied before deletes.
    UpsertsBeforeDeletes,
    /// Filters are dropped.
    IgnoresFilters,
    /// Filters are applied after the top-k cut.
    FiltersAfterTopK,
    /// Ties are broken by descending chunk id.
    TiesByDescendingId,
    /// One hit more than asked for.
    IgnoresTopK,
    /// Scores are rounded to two decimals.
    RoundsScores,
    /// Sparse scores without IDF.
    NoIdf,
    /// `ensure_spaces` accepts any space once spaces are fixed.
    AcceptsOtherSpaces,
    /// A batch is applied one record at a time, yielding in between, and stops at the first invalid record.
    NonAtomicWrites,
    /// Hit lists are returned in reverse request order.
    ReversesRequests,
    /// Batches over 1,000 records are refused.
    RefusesLargeBatches,
}

/// A [`MemoryStore`] with one bug.
#[derive(Debug)]
struct Buggy {
    inner: MemoryStore,
    bug: Bug,
}

#[async_trait]
impl VectorStore for Buggy {
    async fn ensure_spaces(&self, ctx: &Ctx, dense: Option<&EmbeddingSpec>, sparse: Option<&SparseSpec>) -> Result<()> {
        match self.bug {
            Bug::AcceptsOtherSpaces if self.inner.stats(ctx).await?.dense_spec.is_some() => Ok(()),
            Bug::NoIdf => {
                let sparse = sparse.map(|s| SparseSpec { idf: false, ..s.clone() });
                self.inner.ensure_spaces(ctx, dense, sparse.as_ref()).await
            }
            _ => self.inner.ensure_spaces(ctx, dense, sparse).await,
        }
    }

    async fn write(&self, ctx: &Ctx, mut batch: WriteBatch) -> Result<WriteReport> {
        match self.bug {
            Bug::KeepsFirstVersion => {
                let ids: Vec<String> = batch.upsert.iter().map(|r| r.chunk.id.clone()).collect();
                let existing = self.inner.get(ctx, &ids).await?;
                let mut known = existing.iter().map(Option::is_some);
                batch.upsert.retain(|_| !known.next().unwrap_or(false));
                self.inner.write(ctx, batch).await
            }
            Bug::IgnoresDeletes => {
                batch.delete_docs.clear();
                self.inner.write(ctx, batch).await
            }
            Bug::UpsertsBeforeDeletes => {
                let deletes = std::mem::take(&mut batch.delete_docs);
                let mut report = self.inner.write(ctx, batch).await?;
                report.deleted += self.inner.delete_documents(ctx, &deletes).await?.deleted;
                Ok(report)
            }
            Bug::NonAtomicWrites => {
                let mut report = self.inner.delete_documents(ctx, &batch.delete_docs).await?;
                for record in batch.upsert {
                    tokio::task::yield_now().await;
                    let r = self.inner.upsert(ctx, vec![record]).await?;
                    report.upserted += r.upserted;
                    report.deleted += r.deleted;
                }
                Ok(report)
            }
            Bug::RefusesLargeBatches if batch.upsert.len() > 1_000 => Err(Error::invalid_input("batch too large")),
            _ => self.inner.write(ctx, batch).await,
        }
    }

    async fn get(&self, ctx: &Ctx, ids: &[String]) -> Result<Vec<Option<Chunk>>> {
        let mut got = self.inner.get(ctx, ids).await?;
        match self.bug {
            Bug::LosesHeaderPath => got.iter_mut().flatten().for_each(|c| c.header_path.clear()),
            Bug::SkipsUnknownIds => got.retain(Option::is_some),
            _ => {}
        }
        Ok(got)
    }

    async fn search(&self, ctx: &Ctx, requests: &[SearchRequest]) -> Result<Vec<Vec<ScoredHit>>> {
        let mut changed = requests.to_vec();
        match self.bug {
            Bug::IgnoresFilters | Bug::FiltersAfterTopK => changed.iter_mut().for_each(|r| r.filter = None),
            Bug::IgnoresTopK => changed.iter_mut().for_each(|r| r.top_k += 1),
            _ => {}
        }
        let mut lists = self.inner.search(ctx, &changed).await?;
        match self.bug {
            Bug::FiltersAfterTopK => {
                for (list, req) in lists.iter_mut().zip(requests) {
                    list.retain(|h| req.filter.as_ref().is_none_or(|f| f.matches(&h.chunk)));
                }
            }
            Bug::TiesByDescendingId => lists.iter_mut().for_each(|l| {
                l.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| b.chunk.id.cmp(&a.chunk.id)));
            }),
            Bug::RoundsScores => {
                lists.iter_mut().flatten().for_each(|h| h.score = (h.score * 100.0).round() / 100.0);
            }
            Bug::ReversesRequests => lists.reverse(),
            _ => {}
        }
        Ok(lists)
    }

    async fn stats(&self, ctx: &Ctx) -> Result<StoreStats> {
        let mut s = self.inner.stats(ctx).await?;
        match self.bug {
            Bug::PhantomChunk => s.chunks += 1,
            Bug::CountsEveryChunkAsDense => s.dense_vectors = s.chunks,
            _ => {}
        }
        Ok(s)
    }
}

impl Buggy {
    fn new(bug: Bug) -> Self {
        Self { inner: MemoryStore::new(), bug }
    }
}

/// Runs the check named `check` on a store with `bug` and expects it to fail with a message naming the check.
async fn rejected(bug: Bug, check: &str) {
    let checks = contract::checks::<Buggy>();
    let found = checks.iter().find(|c| c.name == check).unwrap_or_else(|| panic!("no check named {check}"));
    let outcome = tokio::spawn((found.run)(Arc::new(Buggy::new(bug)))).await;
    let Err(e) = outcome else { panic!("check `{check}` accepted a store with the bug {bug:?}") };
    assert!(e.is_panic(), "check `{check}` did not finish: {e}");
    let payload = e.into_panic();
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains(&format!("`{check}` failed")), "the failure of `{check}` does not name it: {message}");
}

macro_rules! rejects {
    ($($test:ident: $bug:ident => $check:literal;)*) => {$(
        #[tokio::test]
        async fn $test() {
            rejected(Bug::$bug, $check).await;
        }
    )*};
}

rejects! {
    empty_store_rejects_phantom_chunks: PhantomChunk => "empty_store";
    round_trip_rejects_lost_header_paths: LosesHeaderPath => "round_trip";
    round_trip_rejects_skipped_unknown_ids: SkipsUnknownIds => "round_trip";
    round_trip_rejects_wrong_vector_counts: CountsEveryChunkAsDense => "round_trip";
    upsert_replaces_rejects_keeping_the_first_version: KeepsFirstVersion => "upsert_replaces";
    delete_by_document_rejects_ignored_deletes: IgnoresDeletes => "delete_by_document";
    delete_by_document_rejects_upserts_before_deletes: UpsertsBeforeDeletes => "delete_by_document";
    filters_rejects_ignored_filters: IgnoresFilters => "filters";
    filters_rejects_filtering_after_the_top_k_cut: FiltersAfterTopK => "filters";
    top_k_and_ties_rejects_ties_by_descending_id: TiesByDescendingId => "top_k_and_ties";
    top_k_and_ties_rejects_ignored_top_k: IgnoresTopK => "top_k_and_ties";
    dense_scoring_rejects_rounded_scores: RoundsScores => "dense_scoring";
    sparse_scoring_rejects_scores_without_idf: NoIdf => "sparse_scoring";
    space_mismatch_rejects_accepting_other_spaces: AcceptsOtherSpaces => "space_mismatch";
    space_mismatch_rejects_partially_applied_batches: NonAtomicWrites => "space_mismatch";
    request_order_rejects_reversed_lists: ReversesRequests => "request_order";
    large_batch_rejects_refused_large_batches: RefusesLargeBatches => "large_batch";
}

#[tokio::test(flavor = "current_thread")]
async fn concurrency_check_rejects_partially_visible_batches_on_a_current_thread_runtime() {
    rejected(Bug::NonAtomicWrites, "concurrent_readers_with_writer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_check_rejects_partially_visible_batches_on_a_multi_thread_runtime() {
    rejected(Bug::NonAtomicWrites, "concurrent_readers_with_writer").await;
}

#[tokio::test]
async fn the_whole_suite_names_every_failed_check() {
    let outcome = tokio::spawn(contract::vector_store_contract(|| async { Buggy::new(Bug::TiesByDescendingId) })).await;
    let payload = outcome.expect_err("the suite accepted a store that breaks ties by descending id").into_panic();
    let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.starts_with("VectorStore contract: "), "{message}");
    assert!(message.contains("- top_k_and_ties: "), "{message}");
    assert!(!message.contains("- empty_store: "), "{message}");
}
