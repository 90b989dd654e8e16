//! Tokenise + embed one query with the provisioned all-MiniLM-L6-v2 (`cargo xtask bench embed_query`), the first
//! step of every dense and hybrid query. Needs the model (`cargo xtask models`); without it the benchmark says so
//! and measures nothing.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ragtune::core::{Ctx, TextRole};
use ragtune::{EmbeddingSettings, load_embedder};

fn embed_query(c: &mut Criterion) {
    // The raw model: no query cache, one session, one intra-op thread (as the Python peer's one-thread figure).
    let settings = EmbeddingSettings { query_cache: 0, sessions: 1, threads: 1, ..EmbeddingSettings::default() };
    let embedder = match load_embedder(&settings) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("embed_query: skipped, the embedding model is not available: {e}");
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let ctx = Ctx::new();
    for (name, query) in [
        ("short", "What causes scurvy?"),
        ("scifact", "0-dimensional biomaterials show inductive properties."),
        (
            "long",
            "Which genes regulate the differentiation of hematopoietic stem cells into erythrocytes in adult mice, and how does their expression change with age?",
        ),
    ] {
        c.bench_function(&format!("embed_query/{name}"), |b| {
            b.iter(|| {
                black_box(rt.block_on(embedder.embed(&ctx, &[black_box(query)], TextRole::Query)).expect("embed"))
            });
        });
    }
}

criterion_group!(benches, embed_query);
criterion_main!(benches);
