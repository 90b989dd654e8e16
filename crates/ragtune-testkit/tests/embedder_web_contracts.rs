//! The contract suites on the testkit's own fakes: the fake embedder passes the `Embedder` suite, and fakes that
//! break the contracts on purpose fail exactly the checks they break, each named in the report.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use ragtune_core::{Cost, CostModel, Ctx, Embedder, EmbeddingSpec, Result, TextRole, WebQuery, WebResult, WebSearch};
use ragtune_testkit::contract::{embedder, web_search};
use ragtune_testkit::fakes::HashEmbedder;
use ragtune_testkit::http::Reply;

#[tokio::test]
async fn the_hash_embedder_meets_the_embedder_contract() {
    embedder::embedder_contract(|| async { HashEmbedder::new(32) }).await;
    embedder::embedder_contract(|| async { HashEmbedder::new(1) }).await;
}

/// Claims to be role-independent but is not, ignores cancellation, and drifts on every call.
#[derive(Debug)]
struct Broken {
    inner: HashEmbedder,
    drift: AtomicBool,
}

#[async_trait]
impl Embedder for Broken {
    fn spec(&self) -> &EmbeddingSpec {
        self.inner.spec()
    }

    fn cost_model(&self) -> CostModel {
        self.inner.cost_model()
    }

    async fn embed(&self, _ctx: &Ctx, texts: &[&str], role: TextRole) -> Result<Vec<Vec<f32>>> {
        let drift = if self.drift.fetch_xor(true, Ordering::Relaxed) { 0.01 } else { 0.0 };
        let shift = if role == TextRole::Query { 0.5 } else { 0.0 };
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = self.inner.embed_one(t);
                v[0] += drift + shift;
                v
            })
            .collect())
    }

    fn role_independent(&self) -> bool {
        true
    }
}

fn failure_of(panic: Box<dyn std::any::Any + Send>) -> String {
    panic.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_broken_embedder_fails_the_checks_it_breaks() {
    let run = tokio::spawn(embedder::embedder_contract(|| async {
        Broken { inner: HashEmbedder::new(8), drift: AtomicBool::new(false) }
    }));
    let message = failure_of(run.await.unwrap_err().into_panic());
    for failed in ["deterministic", "role_independence", "cancelled_ctx_is_refused", "vectors_are_finite"] {
        assert!(message.contains(&format!("- {failed}: Embedder contract check `{failed}` failed")), "{message}");
    }
    for passed in ["dimension_matches_spec", "empty_batch"] {
        assert!(!message.contains(&format!("- {passed}:")), "{message}");
    }
}

/// Never asks its server: one more result than asked, with relative URLs, whatever the context.
#[derive(Debug)]
struct Careless;

#[async_trait]
impl WebSearch for Careless {
    fn name(&self) -> &str {
        "careless"
    }

    fn cost_model(&self) -> CostModel {
        CostModel { per_call: Cost::new(0, 0, 1), per_doc: Cost::ZERO, ms_per_doc: 0.0 }
    }

    async fn search(&self, _ctx: &Ctx, queries: &[WebQuery]) -> Result<Vec<Vec<WebResult>>> {
        Ok(queries
            .iter()
            .map(|q| {
                (0..=q.max_results)
                    .map(|i| WebResult {
                        url: format!("/page/{i}"),
                        provider: "careless".into(),
                        ..WebResult::default()
                    })
                    .collect()
            })
            .collect())
    }
}

#[tokio::test]
async fn a_careless_web_search_fails_the_checks_it_breaks() {
    let run = tokio::spawn(web_search::web_search_contract(|_| Careless, |_, _| Reply::status(500)));
    let message = failure_of(run.await.unwrap_err().into_panic());
    for failed in [
        "one_list_per_query_in_order",
        "at_most_max_results",
        "results_are_well_formed",
        "cancelled_ctx_is_refused",
        "search_routed_skips_a_failing_server",
        "server_error_is_classified",
    ] {
        assert!(message.contains(&format!("- {failed}: WebSearch contract check `{failed}` failed")), "{message}");
    }
    for passed in ["name_is_not_empty", "empty_batch"] {
        assert!(!message.contains(&format!("- {passed}:")), "{message}");
    }
}

#[test]
fn every_check_is_registered_once() {
    let names: Vec<&str> = embedder::checks::<HashEmbedder>().iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "dimension_matches_spec",
            "empty_batch",
            "one_vector_per_text_in_order",
            "deterministic",
            "vectors_are_finite",
            "role_independence",
            "cancelled_ctx_is_refused",
        ]
    );
    let names: Vec<&str> = web_search::checks::<Careless>().iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "name_is_not_empty",
            "empty_batch",
            "one_list_per_query_in_order",
            "at_most_max_results",
            "results_are_well_formed",
            "cancelled_ctx_is_refused",
            "search_routed_reports_who_answered",
            "search_routed_skips_a_failing_server",
            "server_error_is_classified",
        ]
    );
}
