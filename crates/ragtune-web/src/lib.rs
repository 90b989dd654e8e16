//! The web layer of ragtune: search providers behind the [`WebSearch`](ragtune_core::WebSearch) seam, with the
//! resilience, merging and credibility the web search protocol asks for.
//!
//! - [`providers`]: [`SearxNg`], [`Tavily`], [`Exa`], [`Perplexity`] (Sonar; its citations become results),
//!   [`SemanticScholar`] and [`Arxiv`] (Atom), each written to the provider's public API reference and configured by
//!   an [`Endpoint`] (base URL, key, time limits). Keys are [`Secret`](ragtune_core::Secret)s and never logged.
//! - [`resilience`]: [`RateLimited`], [`Retrying`] and [`CircuitBreaker`] decorators, stacked by
//!   [`Resilience::wrap`]; every state change traced and counted; no wait past the [`Ctx`](ragtune_core::Ctx)
//!   deadline.
//! - [`MultiSearch`]: the providers of a query's route ([`Complexity`]) searched in parallel with bounded
//!   concurrency, results merged with their metadata, canonicalised ([`canonical_url`]), de-duplicated and weighted
//!   by [`Credibility`] tier; a provider that fails is skipped and reported.
//! - [`fetch`]: [`PageFetcher`] reads a result's page when its snippet is too short (off by default), with hard
//!   limits and no request to loopback, private, link-local or metadata addresses unless explicitly allowed.
//! - [`triangulation`]: VERIFIED / LIKELY / UNVERIFIED per claim by independent registered domains.
//!
//! - [`WebSettings`]: the whole layer's settings (a `[web]` configuration section), built into a [`WebStack`] with
//!   one call.
//!
//! This crate reads no configuration file and no environment variable: the facade does, and hands it settings
//! with keys already resolved.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use ragtune_core::{Ctx, WebQuery, WebSearch};
//! use ragtune_web::{Complexity, Endpoint, MultiSearch, Resilience, SearxNg, SemanticScholar, semantic_scholar};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> ragtune_core::Result<()> {
//! let searx = SearxNg::new(Endpoint::new("http://127.0.0.1:8888"))?;
//! let s2 = SemanticScholar::new(Endpoint::new(semantic_scholar::DEFAULT_URL))?;
//! let (searx, _) = Resilience::for_provider(searx.name()).wrap(searx)?;
//! let (s2, s2_stats) = Resilience::for_provider(s2.name()).wrap(s2)?; // 1 request per second
//! let web = MultiSearch::new(vec![Arc::new(searx), Arc::new(s2)]);
//! let query = WebQuery { text: "corrective retrieval augmented generation".into(), max_results: 5 };
//! let outcome = web.search_routed(&Ctx::new(), &query, Complexity::Moderate).await?;
//! for r in &outcome.results {
//!     println!("{:.2} tier {} {} — {}", r.score.unwrap_or(0.0), r.tier.unwrap_or(3), r.url, r.title);
//! }
//! println!("skipped: {:?}; breaker trips: {}", outcome.skipped, s2_stats.snapshot().opened);
//! # Ok(())
//! # }
//! ```

mod canon;
mod credibility;
pub mod fetch;
mod http;
mod multi;
pub mod providers;
pub mod resilience;
mod settings;
pub mod triangulation;

pub use canon::{canonical_url, domain_of, registered_domain};
pub use credibility::Credibility;
pub use fetch::{FetchPolicy, Page, PageFetcher};
pub use http::Endpoint;
pub use multi::{MultiSearch, RoutePlan, Routing, merge};
pub use providers::arxiv::{self, Arxiv};
pub use providers::exa::{self, Exa};
pub use providers::perplexity::{self, Perplexity};
pub use providers::searxng::{self, SearxNg};
pub use providers::semantic_scholar::{self, SemanticScholar};
pub use providers::tavily::{self, Tavily};
pub use ragtune_core::{Complexity, Skipped, WebOutcome};
pub use resilience::{
    BreakerConfig, BreakerState, CircuitBreaker, RateLimit, RateLimited, Resilience, ResilienceStats, Resilient,
    Retrying, StatsSnapshot,
};
pub use settings::{ProviderSettings, WebSettings, WebStack};
