//! The `WebSearch` contract suite: what every web search provider, and every search over several of them, must
//! do whatever its API, as executable checks.
//!
//! Each check gets a fresh [`WebSubject`]: a [`ScriptedServer`] on 127.0.0.1 and the searcher under test, made by
//! the caller's factory from the server's base URL. The check switches the server between two [`Script`]s: answer
//! with `n` results ([`hits`]), rendered in the provider's own format by the caller's render function, or fail
//! with an HTTP status. A failing check panics with a message naming it; [`web_search_contract`] runs them all and
//! lists every failed one.
//!
//! ```no_run
//! use ragtune_testkit::contract::web_search::{ScriptedHit, web_search_contract};
//! use ragtune_testkit::http::{Reply, Request};
//!
//! # #[derive(Debug)] struct MySearx; impl MySearx { fn new(_: &str) -> Self { Self } }
//! # #[async_trait::async_trait] impl ragtune_core::WebSearch for MySearx {
//! #   fn name(&self) -> &str { "mine" }
//! #   fn cost_model(&self) -> ragtune_core::CostModel { ragtune_core::CostModel::FREE }
//! #   async fn search(&self, _: &ragtune_core::Ctx, _: &[ragtune_core::WebQuery])
//! #     -> ragtune_core::Result<Vec<Vec<ragtune_core::WebResult>>> { Ok(Vec::new()) } }
//! fn searx_format(_: &Request, hits: &[ScriptedHit]) -> Reply {
//!     let results: Vec<_> = hits
//!         .iter()
//!         .map(|h| serde_json::json!({"url": h.url, "title": h.title, "content": h.content}))
//!         .collect();
//!     Reply::json_value(200, &serde_json::json!({ "results": results }))
//! }
//!
//! #[tokio::test]
//! async fn my_provider_meets_the_contract() {
//!     web_search_contract(|url| MySearx::new(url), searx_format).await;
//! }
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use ragtune_core::{Complexity, Ctx, ErrorKind, WebOutcome, WebQuery, WebResult, WebSearch};

use super::support::Checker;
use super::{Check, CheckFuture, report};
use crate::http::{Reply, Request, ScriptedServer, serve};

const SUITE: &str = "WebSearch";

/// One result the scripted server has to give, before a provider's format renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedHit {
    /// An absolute `https` URL, distinct for each hit.
    pub url: String,
    /// A short title.
    pub title: String,
    /// A one-sentence snippet.
    pub content: String,
}

/// The `n` results the server gives in [`Script::Results`]: `https://site-I.example.org/page/I`, titled
/// `Result I`, for `I` from 1.
#[must_use]
pub fn hits(n: usize) -> Vec<ScriptedHit> {
    (1..=n)
        .map(|i| ScriptedHit {
            url: format!("https://site-{i}.example.org/page/{i}"),
            title: format!("Result {i}"),
            content: format!("The snippet of result {i} about vitamins and bones."),
        })
        .collect()
}

/// What the scripted server answers, until a check says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// Every request is answered with [`hits`]`(n)` in the provider's format.
    Results(usize),
    /// Every request is answered with this HTTP status and a short JSON error body.
    Failing(u16),
}

/// Renders results in a provider's response format for the request it sent (a search over several providers
/// tells them apart by the request's path).
pub type Render = dyn Fn(&Request, &[ScriptedHit]) -> Reply + Send + Sync;

/// A searcher under test and the scripted server it talks to.
pub struct WebSubject<W: ?Sized> {
    server: ScriptedServer,
    script: Arc<Mutex<Script>>,
    web: Box<W>,
}

impl<W: ?Sized> fmt::Debug for WebSubject<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSubject").field("server", &self.server).field("script", &self.current()).finish()
    }
}

impl<W: WebSearch> WebSubject<W> {
    /// Starts a scripted server answering [`Script::Results`]`(5)` through `render`, and makes the searcher from
    /// its base URL (`http://127.0.0.1:PORT`).
    ///
    /// # Panics
    /// When no loopback port can be bound: this is test support.
    pub fn start(make: impl FnOnce(&str) -> W, render: Arc<Render>) -> Self {
        let script = Arc::new(Mutex::new(Script::Results(5)));
        let current = Arc::clone(&script);
        let server = serve(move |request, _| {
            let script = *current.lock().unwrap_or_else(PoisonError::into_inner);
            match script {
                Script::Results(n) => render(request, &hits(n)),
                Script::Failing(status) => Reply::json(
                    status,
                    &format!(r#"{{"error": {{"message": "scripted failure with HTTP {status}"}}}}"#),
                ),
            }
        });
        let web = Box::new(make(server.url()));
        Self { server, script, web }
    }
}

impl<W: ?Sized> WebSubject<W> {
    /// The searcher under test.
    #[must_use]
    pub fn web(&self) -> &W {
        &self.web
    }

    /// Makes the server answer with `script` from now on.
    pub fn script(&self, script: Script) {
        *self.script.lock().unwrap_or_else(PoisonError::into_inner) = script;
    }

    fn current(&self) -> Script {
        *self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many requests reached the server so far.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.server.count()
    }
}

fn query(text: &str, max_results: usize) -> WebQuery {
    WebQuery { text: text.to_owned(), max_results }
}

/// Every route, simplest first.
const ROUTES: [Complexity; 3] = [Complexity::Simple, Complexity::Moderate, Complexity::Complex];

fn render_lists(lists: &[Vec<WebResult>]) -> String {
    let lists: Vec<Vec<String>> =
        lists.iter().map(|l| l.iter().map(|r| format!("{} ({})", r.url, r.provider)).collect()).collect();
    format!("{lists:?}")
}

async fn search<W: WebSearch + ?Sized>(c: &Checker, web: &W, queries: &[WebQuery], what: &str) -> Vec<Vec<WebResult>> {
    c.ok(what, web.search(&Ctx::new(), queries).await)
}

async fn routed<W: WebSearch + ?Sized>(c: &Checker, web: &W, q: &WebQuery, route: Complexity) -> WebOutcome {
    c.ok(&format!("search_routed on the {} route", route.as_str()), web.search_routed(&Ctx::new(), q, route).await)
}

/// Whether `url` is absolute `http` or `https` with a host.
fn is_absolute_http(url: &str) -> bool {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or_default();
        !host.is_empty() && !r.chars().any(char::is_whitespace)
    })
}

/// `name()` is not blank: it names the provider in routes, traces and skipped reports.
pub async fn name_is_not_empty<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "name_is_not_empty");
    c.that(!s.web().name().trim().is_empty(), format_args!("name() is blank: {:?}", s.web().name()));
}

/// A batch gets one list per query, in the order of the queries: asking for 1, 3 and 2 results of a server that
/// has 5 gives lists of 1, 3 and 2.
pub async fn one_list_per_query_in_order<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "one_list_per_query_in_order");
    s.script(Script::Results(5));
    let queries = [query("scurvy vitamin deficiency", 1), query("rickets bones", 3), query("iodine goitre", 2)];
    let lists = search(&c, s.web(), &queries, "searching a batch of 3 queries").await;
    let lengths: Vec<usize> = lists.iter().map(Vec::len).collect();
    c.eq(
        &format!("list lengths for queries asking 1, 3 and 2 of 5 results; lists {}", render_lists(&lists)),
        lengths,
        vec![1, 3, 2],
    );
}

/// No list is longer than its query's `max_results` (0 included), however many results the server has.
pub async fn at_most_max_results<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "at_most_max_results");
    s.script(Script::Results(12));
    for max in [0, 1, 4, 7] {
        let lists = search(&c, s.web(), &[query("vitamin c scurvy", max)], &format!("searching {max} results")).await;
        c.eq(&format!("number of lists for one query of max_results {max}"), lists.len(), 1);
        c.that(
            lists[0].len() <= max,
            format_args!("{} results for max_results {max}: {}", lists[0].len(), render_lists(&lists)),
        );
    }
}

/// An empty batch returns an empty `Vec` and asks the server nothing.
pub async fn empty_batch<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "empty_batch");
    let lists = search(&c, s.web(), &[], "searching an empty batch").await;
    c.that(lists.is_empty(), format_args!("an empty batch returned {}", render_lists(&lists)));
    c.eq("requests the server received for an empty batch", s.requests(), 0);
}

/// Every result has a non-empty absolute `http(s)` URL and names its provider: the searcher's `name()` for a single
/// provider, one of the providers `search_routed` reports as answering for a search over several.
pub async fn results_are_well_formed<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "results_are_well_formed");
    s.script(Script::Results(4));
    let q = query("bone softening vitamin d", 4);
    let mut providers: BTreeSet<String> = BTreeSet::from([s.web().name().to_owned()]);
    let mut all = search(&c, s.web(), std::slice::from_ref(&q), "searching one query").await;
    c.that(all.first().is_some_and(|l| !l.is_empty()), "no result from a server that has 4");
    for route in ROUTES {
        let outcome = routed(&c, s.web(), &q, route).await;
        providers.extend(outcome.answered);
        all.push(outcome.results);
    }
    for r in all.iter().flatten() {
        c.that(is_absolute_http(&r.url), format_args!("a result's url is not absolute http(s): {:?}", r.url));
        c.that(
            providers.contains(&r.provider),
            format_args!("a result's provider {:?} is none of {providers:?} (name() and who answered)", r.provider),
        );
    }
}

/// A cancelled context fails `search` and `search_routed` with `Cancelled`, and no request reaches the server.
pub async fn cancelled_ctx_is_refused<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "cancelled_ctx_is_refused");
    s.script(Script::Results(3));
    let ctx = Ctx::new();
    ctx.cancel.cancel();
    let q = query("scurvy vitamin deficiency", 3);
    let err = c.err("searching with a cancelled context", s.web().search(&ctx, std::slice::from_ref(&q)).await);
    c.eq(&format!("kind of the error of a cancelled search ({err})"), err.kind(), ErrorKind::Cancelled);
    for route in ROUTES {
        let what = format!("search_routed on the {} route with a cancelled context", route.as_str());
        let err = c.err(&what, s.web().search_routed(&ctx, &q, route).await);
        c.eq(&format!("kind of the error of {what} ({err})"), err.kind(), ErrorKind::Cancelled);
    }
    c.eq("requests the server received for cancelled searches", s.requests(), 0);
}

/// With the server answering, `search_routed` succeeds on every route and skips nobody: the providers it asked
/// are in `answered` (once each; for a single provider, itself), its results are at most `max_results` and come
/// from them, and at least one route asks somebody.
pub async fn search_routed_reports_who_answered<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "search_routed_reports_who_answered");
    s.script(Script::Results(6));
    let q = query("vitamin deficiency diseases", 3);
    let mut asked_anybody = false;
    for route in ROUTES {
        let o = routed(&c, s.web(), &q, route).await;
        let on = format!("on the {} route", route.as_str());
        c.that(o.skipped.is_empty(), format_args!("{on}, a provider was skipped while the server answers: {o:?}"));
        let unique: BTreeSet<&String> = o.answered.iter().collect();
        c.eq(&format!("providers answering {on}, without repeats"), unique.len(), o.answered.len());
        c.that(o.results.len() <= q.max_results, format_args!("{on}, {} results for max_results 3", o.results.len()));
        for r in &o.results {
            c.that(
                o.answered.contains(&r.provider),
                format_args!("{on}, a result of {:?}, who did not answer: {o:?}", r.provider),
            );
        }
        c.that(
            !o.answered.is_empty() || o.results.is_empty(),
            format_args!("{on}, results but nobody answered: {o:?}"),
        );
        asked_anybody |= !o.answered.is_empty();
    }
    c.that(asked_anybody, "no route reported any provider as answering");
}

/// With the server failing (HTTP 500 and 503), `search_routed` is still `Ok` on every route: no results, nobody
/// answered, and every provider asked is reported in `skipped` with its name, an error kind and a reason.
pub async fn search_routed_skips_a_failing_server<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "search_routed_skips_a_failing_server");
    let q = query("vitamin deficiency diseases", 3);
    for status in [500, 503] {
        s.script(Script::Failing(status));
        let mut skipped_anybody = false;
        for route in ROUTES {
            let o = routed(&c, s.web(), &q, route).await;
            let on = format!("on the {} route with HTTP {status}", route.as_str());
            c.that(o.results.is_empty() && o.answered.is_empty(), format_args!("{on}, something answered: {o:?}"));
            for skip in &o.skipped {
                let named = !skip.provider.is_empty() && !skip.kind.is_empty() && !skip.reason.is_empty();
                c.that(named, format_args!("{on}, a skipped provider without name, kind or reason: {skip:?}"));
            }
            skipped_anybody |= !o.skipped.is_empty();
        }
        c.that(skipped_anybody, format_args!("with HTTP {status}, no route reported any provider as skipped"));
    }
}

/// A server error (HTTP 500, 502, 503) makes `search` return a classified error, `Transient` or `Unavailable`, with
/// a message; never a panic, never results.
pub async fn server_error_is_classified<W: WebSearch + ?Sized>(s: &WebSubject<W>) {
    let c = Checker::of(SUITE, "server_error_is_classified");
    for status in [500, 502, 503] {
        s.script(Script::Failing(status));
        let what = format!("searching while the server answers HTTP {status}");
        let err = c.err(&what, s.web().search(&Ctx::new(), &[query("scurvy vitamin deficiency", 3)]).await);
        c.that(
            matches!(err.kind(), ErrorKind::Transient | ErrorKind::Unavailable),
            format_args!("{what}: a {} error, not transient or unavailable: {err}", err.kind()),
        );
        c.that(!err.message().trim().is_empty(), format_args!("{what}: an error without a message"));
    }
}

/// Every check of the suite, in the order [`web_search_contract`] runs them.
#[must_use]
pub fn checks<W: WebSearch + ?Sized + 'static>() -> Vec<Check<WebSubject<W>>> {
    macro_rules! by_ref {
        ($($check:ident),* $(,)?) => {
            vec![$(Check::<WebSubject<W>> {
                name: stringify!($check),
                run: |s: Arc<WebSubject<W>>| -> CheckFuture { Box::pin(async move { $check(&*s).await }) },
            }),*]
        };
    }
    by_ref![
        name_is_not_empty,
        empty_batch,
        one_list_per_query_in_order,
        at_most_max_results,
        results_are_well_formed,
        cancelled_ctx_is_refused,
        search_routed_reports_who_answered,
        search_routed_skips_a_failing_server,
        server_error_is_classified,
    ]
}

/// Runs every check of the suite, each on a fresh scripted server and a searcher `make` builds from its base URL,
/// with responses in the format `render` writes; panics listing every failed check.
///
/// # Panics
/// When any check fails, or when called outside a Tokio runtime.
pub async fn web_search_contract<W, F, R>(mut make: F, render: R)
where
    W: WebSearch + 'static,
    F: FnMut(&str) -> W,
    R: Fn(&Request, &[ScriptedHit]) -> Reply + Send + Sync + 'static,
{
    let render: Arc<Render> = Arc::new(render);
    let mut outcomes = Vec::new();
    let all = checks::<W>();
    for check in &all {
        let subject = Arc::new(WebSubject::start(&mut make, Arc::clone(&render)));
        outcomes.push((check.name, tokio::spawn((check.run)(subject)).await));
    }
    report(SUITE, outcomes);
}
