//! The `Embedder` contract suite: what every dense embedder (a model, a fake, a cache in front of either) must do,
//! as executable checks.
//!
//! Each check gets a fresh embedder from the caller's factory, embeds a few fixed texts and compares vectors
//! component by component within [`TOLERANCE`]. A failing check panics with a message naming it;
//! [`embedder_contract`] runs them all and lists every failed one.
//!
//! ```
//! use ragtune_testkit::{contract::embedder::embedder_contract, fakes::HashEmbedder};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # rt.block_on(async {
//! embedder_contract(|| async { HashEmbedder::new(16) }).await;
//! # });
//! ```

use std::future::Future;
use std::sync::Arc;

use ragtune_core::{Ctx, Embedder, ErrorKind, TextRole};

use super::support::Checker;
use super::{Check, CheckFuture, report};

const SUITE: &str = "Embedder";

/// The largest difference allowed between two components of vectors that must be equal (the same text embedded
/// alone and in a batch, or in either role by a role-independent embedder).
pub const TOLERANCE: f32 = 1e-4;

/// Distinct texts about different things, each a sentence.
const TEXTS: [&str; 4] = [
    "Scurvy is caused by a lack of vitamin C.",
    "Rickets weakens the bones of children.",
    "The stock market fell sharply on Monday.",
    "Iodine deficiency leads to goitre.",
];

const ROLES: [TextRole; 2] = [TextRole::Query, TextRole::Passage];

async fn embed<E: Embedder + ?Sized>(c: &Checker, e: &E, texts: &[&str], role: TextRole) -> Vec<Vec<f32>> {
    let what = format!("embedding {} texts as {role:?}", texts.len());
    let vectors = c.ok(&what, e.embed(&Ctx::new(), texts, role).await);
    c.eq(&format!("number of vectors {what}"), vectors.len(), texts.len());
    vectors
}

/// The largest component-wise difference of two vectors (infinite when their lengths differ).
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[track_caller]
fn same(c: &Checker, what: &str, a: &[f32], b: &[f32]) {
    let d = max_diff(a, b);
    c.that(d <= TOLERANCE, format_args!("{what}: vectors differ by {d} (more than {TOLERANCE})"));
}

/// `spec().dim` is positive and every vector, in either role, has exactly that many components.
pub async fn dimension_matches_spec<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "dimension_matches_spec");
    let dim = e.spec().dim;
    c.that(dim > 0, "spec().dim is 0");
    for role in ROLES {
        for (text, v) in TEXTS.iter().zip(embed(&c, e, &TEXTS, role).await) {
            c.eq(&format!("length of the {role:?} vector of {text:?} (spec().dim)"), v.len(), dim);
        }
    }
}

/// A batch gets one vector per text, in the order of the texts: the batch reversed gives the vectors reversed, and
/// a text given twice gets the same vector twice.
pub async fn one_vector_per_text_in_order<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "one_vector_per_text_in_order");
    let forward = embed(&c, e, &TEXTS, TextRole::Passage).await;
    let distinct = (0..forward.len()).any(|i| (0..i).any(|j| max_diff(&forward[i], &forward[j]) > TOLERANCE));
    c.that(distinct, "every text got the same vector: the order of a batch cannot show");
    let reversed_texts: Vec<&str> = TEXTS.iter().rev().copied().collect();
    let reversed = embed(&c, e, &reversed_texts, TextRole::Passage).await;
    for (i, v) in reversed.iter().enumerate() {
        let j = TEXTS.len() - 1 - i;
        same(&c, &format!("vector {i} of the reversed batch and vector {j} of the batch"), v, &forward[j]);
    }
    let twice = embed(&c, e, &[TEXTS[0], TEXTS[1], TEXTS[0]], TextRole::Passage).await;
    same(&c, "the two vectors of a text given twice in one batch", &twice[0], &twice[2]);
}

/// An empty batch returns an empty `Vec`, in either role.
pub async fn empty_batch<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "empty_batch");
    for role in ROLES {
        let vectors = c.ok(&format!("embedding no text as {role:?}"), e.embed(&Ctx::new(), &[], role).await);
        c.eq(&format!("vectors of an empty batch as {role:?}"), vectors.len(), 0);
    }
}

/// A text gets the same vector (within [`TOLERANCE`]) every time: in two calls, and alone or in a batch.
pub async fn deterministic<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "deterministic");
    for role in ROLES {
        let batch = embed(&c, e, &TEXTS, role).await;
        let again = embed(&c, e, &TEXTS, role).await;
        for (i, text) in TEXTS.iter().enumerate() {
            same(&c, &format!("{text:?} as {role:?} in two calls"), &batch[i], &again[i]);
            let alone = embed(&c, e, &[*text], role).await;
            same(&c, &format!("{text:?} as {role:?} alone and in a batch"), &alone[0], &batch[i]);
        }
    }
}

/// Every component of every vector is finite, for ordinary texts and for edge cases (empty, blank, long,
/// non-Latin); when `spec().normalized`, each vector has unit length (within 1e-3).
pub async fn vectors_are_finite<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "vectors_are_finite");
    let long = "vitamin ".repeat(2000);
    let edge = ["", "   ", long.as_str(), "Ünïcödé, 漢字 and 🙂!", "?!"];
    for role in ROLES {
        for (text, v) in TEXTS.iter().chain(&edge).zip(embed(&c, e, &[&TEXTS[..], &edge[..]].concat(), role).await) {
            let shown: String = text.chars().take(40).collect();
            c.that(v.iter().all(|x| x.is_finite()), format_args!("the {role:?} vector of {shown:?} is not finite"));
            if e.spec().normalized && TEXTS.contains(text) {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                c.that(
                    (norm - 1.0).abs() <= 1e-3,
                    format_args!("spec().normalized but the {role:?} vector of {shown:?} has length {norm}"),
                );
            }
        }
    }
}

/// When the embedder says it is `role_independent()`, a text's query and passage vectors are the same (within
/// [`TOLERANCE`]); otherwise nothing is required.
pub async fn role_independence<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "role_independence");
    if !e.role_independent() {
        return;
    }
    let queries = embed(&c, e, &TEXTS, TextRole::Query).await;
    let passages = embed(&c, e, &TEXTS, TextRole::Passage).await;
    for (i, text) in TEXTS.iter().enumerate() {
        same(&c, &format!("query and passage vectors of {text:?} (role_independent)"), &queries[i], &passages[i]);
    }
}

/// A cancelled context fails with `Cancelled` in either role, for new texts and for texts embedded before (a
/// cache must not answer a cancelled request either).
pub async fn cancelled_ctx_is_refused<E: Embedder + ?Sized>(e: &E) {
    let c = Checker::of(SUITE, "cancelled_ctx_is_refused");
    let cancelled = Ctx::new();
    cancelled.cancel.cancel();
    for role in ROLES {
        for when in ["before", "after"] {
            if when == "after" {
                embed(&c, e, &TEXTS, role).await;
            }
            let what = format!("embedding as {role:?} with a cancelled context, {when} the texts were embedded");
            let err = match e.embed(&cancelled, &TEXTS, role).await {
                Ok(vectors) => c.fail(format_args!("{what}: expected an error, got {} vectors", vectors.len())),
                Err(err) => err,
            };
            c.eq(&format!("kind of the error of {what} ({err})"), err.kind(), ErrorKind::Cancelled);
        }
    }
}

/// Every check of the suite, in the order [`embedder_contract`] runs them.
#[must_use]
pub fn checks<E: Embedder + ?Sized + 'static>() -> Vec<Check<E>> {
    macro_rules! by_ref {
        ($($check:ident),* $(,)?) => {
            vec![$(Check::<E> {
                name: stringify!($check),
                run: |e: Arc<E>| -> CheckFuture { Box::pin(async move { $check(&*e).await }) },
            }),*]
        };
    }
    by_ref![
        dimension_matches_spec,
        empty_batch,
        one_vector_per_text_in_order,
        deterministic,
        vectors_are_finite,
        role_independence,
        cancelled_ctx_is_refused,
    ]
}

/// Runs every check of the suite, each on a fresh embedder from `make`, and panics listing every failed check.
///
/// # Panics
/// When any check fails, or when called outside a Tokio runtime.
pub async fn embedder_contract<E, F, Fut>(mut make: F)
where
    E: Embedder + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = E>,
{
    let mut outcomes = Vec::new();
    for check in &checks::<E>() {
        let embedder = Arc::new(make().await);
        outcomes.push((check.name, tokio::spawn((check.run)(embedder)).await));
    }
    report(SUITE, outcomes);
}
