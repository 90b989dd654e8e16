//! The contract suites: the invariants documented on a seam, as executable checks that every implementation runs
//! from its own tests; an implementation that passes its seam's suite can replace any other.
//!
//! - `VectorStore` (this module): described below.
//! - [`web_search`]: every `WebSearch` provider, and a search over several, against a scripted HTTP server
//!   ([`web_search_contract`]).
//! - [`embedder`]: every `Embedder` ([`embedder_contract`]).
//!
//! The `VectorStore` suite checks the invariants documented on [`VectorStore`].
//!
//! Every store runs the whole suite from its own tests with [`vector_store_contract`] (or
//! [`vector_store_contract_with_guard`] when a store needs a temporary directory that must outlive it). Each check
//! also exists as its own function, so a failing one can be run alone while fixing it, and [`checks`] lists them
//! all for [`run_checks`].
//!
//! Each check gets a fresh, empty store, fixes its spaces with [`dense_spec`] (4 dimensions) and [`sparse_spec`]
//! (IDF on), writes hand-built data, and compares what the store answers with a brute-force model of what was
//! written. A failing check panics with a message that names it and shows what differed, with rankings rendered
//! as text. Checks never time anything.
//!
//! Runtime: the suite runs inside a Tokio runtime. Each check runs in its own `tokio::spawn`ed task, and
//! [`concurrent_readers_with_writer`] spawns reader tasks. Both runtime flavours work: on a current-thread runtime
//! the readers interleave with the writer at await points; a multi-thread runtime also runs them in parallel and
//! is the stronger test, so stores should prefer `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`.
//!
//! ```no_run
//! use ragtune_testkit::{MemoryStore, contract};
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn memory_store_meets_the_contract() {
//!     contract::vector_store_contract(|| async { MemoryStore::new() }).await;
//! }
//!
//! // A store on disk keeps its temporary directory alive next to it:
//! // contract::vector_store_contract_with_guard(|| async {
//! //     let dir = tempfile::tempdir().unwrap();
//! //     (EmbeddedStore::open(dir.path()).unwrap(), dir)
//! // }).await;
//! ```

mod checks;
pub mod embedder;
mod support;
pub mod web_search;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ragtune_core::VectorStore;

pub use checks::{
    concurrent_readers_with_writer, delete_by_document, dense_scoring, empty_store, filters, large_batch,
    request_order, round_trip, scan_pages, space_mismatch, sparse_scoring, top_k_and_ties, upsert_replaces,
};
pub use embedder::embedder_contract;
pub use support::{dense_spec, sparse_spec};
pub use web_search::web_search_contract;

/// The future of one check, ready to be spawned.
pub type CheckFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// One named check of a contract, runnable on a shared subject (a store, an embedder, a web search subject).
pub struct Check<S: ?Sized> {
    /// The check's name, which is also the name of its function in its suite's module.
    pub name: &'static str,
    /// Runs the check on a fresh subject; panics when the subject breaks the contract.
    pub run: fn(Arc<S>) -> CheckFuture,
}

impl<S: ?Sized> fmt::Debug for Check<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Every check of the suite, in the order [`vector_store_contract`] runs them (cheap and basic ones first).
#[must_use]
pub fn checks<S: VectorStore + ?Sized + 'static>() -> Vec<Check<S>> {
    macro_rules! by_ref {
        ($($check:ident),* $(,)?) => {
            vec![$(Check::<S> {
                name: stringify!($check),
                run: |store: Arc<S>| -> CheckFuture { Box::pin(async move { $check(&*store).await }) },
            }),*]
        };
    }
    let mut all = by_ref![
        empty_store,
        round_trip,
        scan_pages,
        upsert_replaces,
        delete_by_document,
        filters,
        top_k_and_ties,
        dense_scoring,
        sparse_scoring,
        space_mismatch,
        request_order,
        large_batch,
    ];
    all.push(Check {
        name: "concurrent_readers_with_writer",
        run: |store: Arc<S>| -> CheckFuture { Box::pin(concurrent_readers_with_writer(store)) },
    });
    all
}

/// Runs every check of the suite, each on a fresh store from `make`, and panics listing the failed checks.
///
/// `make` must return a new, empty store on every call.
///
/// # Panics
/// When any check fails (the message names every failed check and what differed), or when called outside a
/// Tokio runtime.
pub async fn vector_store_contract<S, F, Fut>(mut make: F)
where
    S: VectorStore + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    run_checks(&checks::<S>(), move || {
        let store = make();
        async move { (store.await, ()) }
    })
    .await;
}

/// Like [`vector_store_contract`] for stores that need something to outlive them, such as a temporary directory:
/// `make` returns the store and a guard that is dropped after the store, once its check is done.
///
/// # Panics
/// As [`vector_store_contract`].
pub async fn vector_store_contract_with_guard<S, G, F, Fut>(make: F)
where
    S: VectorStore + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = (S, G)>,
{
    run_checks(&checks::<S>(), make).await;
}

/// Runs the given checks, each on a fresh store and guard from `make`, and panics listing the failed ones.
///
/// Every check runs even when an earlier one failed, so one run shows everything that is wrong. Each check runs
/// in its own Tokio task; its panic is caught there and reported here.
///
/// # Panics
/// When any check fails, or when called outside a Tokio runtime.
pub async fn run_checks<S, G, F, Fut>(checks: &[Check<S>], mut make: F)
where
    S: VectorStore + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = (S, G)>,
{
    let mut failures = Vec::new();
    for check in checks {
        let (store, guard) = make().await;
        let store = Arc::new(store);
        let outcome = tokio::spawn((check.run)(Arc::clone(&store))).await;
        // The store goes before its guard (a directory must outlive the database in it).
        drop(store);
        drop(guard);
        match outcome {
            Ok(()) => eprintln!("VectorStore contract: {} ... ok", check.name),
            Err(e) => {
                eprintln!("VectorStore contract: {} ... FAILED", check.name);
                failures.push(format!("- {}: {}", check.name, panic_message(e)));
            }
        }
    }
    if !failures.is_empty() {
        panic!("VectorStore contract: {} of {} checks failed:\n{}", failures.len(), checks.len(), failures.join("\n"));
    }
}

/// Prints each check's outcome and panics listing every failed check of `suite`.
pub(crate) fn report(suite: &str, outcomes: Vec<(&'static str, Result<(), tokio::task::JoinError>)>) {
    let total = outcomes.len();
    let mut failures = Vec::new();
    for (name, outcome) in outcomes {
        match outcome {
            Ok(()) => eprintln!("{suite} contract: {name} ... ok"),
            Err(e) => {
                eprintln!("{suite} contract: {name} ... FAILED");
                failures.push(format!("- {name}: {}", panic_message(e)));
            }
        }
    }
    if !failures.is_empty() {
        panic!("{suite} contract: {} of {total} checks failed:\n{}", failures.len(), failures.join("\n"));
    }
}

/// The message of a task that panicked, or why it did not finish.
pub(crate) fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return format!("the task did not finish: {e}");
    }
    let payload = e.into_panic();
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        "a panic without a text message".to_owned()
    }
}
