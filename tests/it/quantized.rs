//! The quantised embedding model (`embedding.quantized`, the default, built by `cargo xtask models`): a clear error
//! when it is missing; when present, vectors close to the fp32 model's, and its own identity in the store.

use ragtune::core::{Ctx, TextRole};
use ragtune::{EmbeddingSettings, load_embedder};

#[test]
fn a_missing_quantized_model_is_a_clear_unavailable_error() {
    let dir = tempfile::tempdir().unwrap();
    let settings = EmbeddingSettings {
        quantized: true,
        model_dir: Some(dir.path().to_path_buf()),
        ..EmbeddingSettings::default()
    };
    let err = load_embedder(&settings).expect_err("no model there");
    assert_eq!(err.kind(), ragtune::core::ErrorKind::Unavailable);
    assert!(err.to_string().contains("cargo xtask models`"), "{err}");
    assert!(err.to_string().contains("embedding.quantized = false"), "{err}");
}

#[test]
fn the_int8_model_is_the_default() {
    assert!(EmbeddingSettings::default().quantized);
}

/// Whether the quantised model was built; CI builds it (`RAGTUNE_REQUIRE_MODELS=1` makes its absence a failure).
fn quantized_provisioned() -> bool {
    // The int8 model is the default, so "provisioned" includes it.
    crate::models_provisioned()
}

#[tokio::test]
async fn the_quantized_model_gives_vectors_close_to_the_default_and_is_another_model_to_the_store() {
    if !quantized_provisioned() {
        return;
    }
    let one = |quantized| EmbeddingSettings { quantized, sessions: 1, query_cache: 0, ..EmbeddingSettings::default() };
    let (base, int8) = (load_embedder(&one(false)).unwrap(), load_embedder(&one(true)).unwrap());
    assert_ne!(base.spec(), int8.spec(), "the variant must have its own identity in an index");
    assert_eq!(int8.spec().model_id, ragtune::QUANTIZED_MODEL_ID);
    assert_eq!(base.spec().dim, int8.spec().dim);
    let texts = [
        "What causes scurvy?",
        "Scurvy is a disease resulting from a lack of vitamin C, which is required for collagen synthesis.",
        "Otters hold hands while they sleep so that they do not drift apart.",
        "The mitochondrion is the powerhouse of the cell, producing ATP through oxidative phosphorylation.",
        "0-dimensional biomaterials show inductive properties.",
    ];
    let ctx = Ctx::new();
    let a = base.embed(&ctx, &texts, TextRole::Passage).await.unwrap();
    let b = int8.embed(&ctx, &texts, TextRole::Passage).await.unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let cos: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
        assert!(cos > 0.98, "text {i}: cosine {cos} between the default and the quantised model");
    }
    // Same ranking of the passages for the question under both models.
    let rank = |v: &[Vec<f32>]| {
        let mut order: Vec<usize> = (1..v.len()).collect();
        let score = |i: usize| -> f32 { v[0].iter().zip(&v[i]).map(|(p, q)| p * q).sum() };
        order.sort_by(|&i, &j| score(j).total_cmp(&score(i)));
        order
    };
    assert_eq!(rank(&a)[0], rank(&b)[0]);

    // An index built with the default model refuses the quantised one, with a message that says so.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ragtune::Config::default();
    cfg.store.path = dir.path().join("store");
    let mut engine = ragtune::Engine::open_with_embedder(cfg.clone(), Some(base.clone())).await.unwrap();
    let docs = vec![ragtune::core::Document::new("d1", texts[1])];
    engine.index_documents(&docs, ragtune::Chunking::WholeDocuments, &mut |_, _| {}).await.unwrap();
    drop(engine);
    let err = ragtune::Engine::open_with_embedder(cfg, Some(int8)).await.expect_err("another model");
    assert_eq!(err.kind(), ragtune::core::ErrorKind::Mismatch, "{err}");
}

#[tokio::test]
async fn a_spinning_lone_query_session_embeds_what_the_default_sessions_do() {
    if !quantized_provisioned() {
        return;
    }
    // One-thread sessions only, against the default lone-query session (two threads, spinning while it runs).
    let plain = EmbeddingSettings { query_cache: 0, lone_threads: 1, spinning: false, ..EmbeddingSettings::default() };
    let spinning = EmbeddingSettings { lone_threads: 2, spinning: true, ..plain.clone() };
    let (a, b) = (load_embedder(&plain).unwrap(), load_embedder(&spinning).unwrap());
    assert_eq!(a.spec(), b.spec(), "scheduling is not part of the model's identity");
    let ctx = Ctx::new();
    for text in ["What causes scurvy?", "Otters hold hands while they sleep."] {
        // A lone query: the spinning session with two threads runs it.
        let (x, y) = (
            a.embed(&ctx, &[text], TextRole::Query).await.unwrap(),
            b.embed(&ctx, &[text], TextRole::Query).await.unwrap(),
        );
        let cos: f32 = x[0].iter().zip(&y[0]).map(|(p, q)| p * q).sum();
        assert!(cos > 0.9999, "{text}: cosine {cos}");
    }
}
