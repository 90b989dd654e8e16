//! Fetching result pages, for snippets too short to answer from, with hard limits and no reach into the user's
//! network.
//!
//! Nothing fetches unless a [`PageFetcher`] is built (the facade builds one only when `fetch.enabled` is set; it is
//! off by default). Every request, and every redirect hop, is checked before it is made: only `http`/`https`, only
//! public addresses (the host is resolved here and the connection pinned to the checked address, so a DNS answer
//! cannot change between the check and the connection), at most `max_redirects` hops, only the allowed content
//! types, at most `max_bytes` read (the rest is cut and the page marked truncated), within `timeout` and the
//! context's deadline. Loopback, private, link-local (including the cloud metadata address `169.254.169.254`),
//! carrier-grade NAT, multicast and unspecified addresses are refused unless the policy allows them (tests allow
//! loopback).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use ragtune_core::{Cost, Ctx, Error, ErrorKind, Result, TraceEvent, WebResult};
use serde::{Deserialize, Serialize};
use url::Url;

/// The limits of page fetching.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchPolicy {
    /// Whether pages are fetched at all (off by default); read by whoever builds the fetcher.
    pub enabled: bool,
    /// Fetch a result's page when its snippet is shorter than this many characters.
    pub min_snippet_chars: usize,
    /// The most bytes read from one page; the rest is not downloaded.
    pub max_bytes: usize,
    /// The most characters of extracted text kept as the result's content.
    pub max_text_chars: usize,
    /// The longest one page may take, redirects included (seconds in configuration files).
    #[serde(with = "ragtune_core::http::secs")]
    pub timeout: Duration,
    /// The most redirects followed.
    pub max_redirects: usize,
    /// The media types read (`text/html`, ...); anything else is refused.
    pub content_types: Vec<String>,
    /// Whether loopback addresses (127.0.0.0/8, ::1) may be fetched: for tests and local search servers only.
    pub allow_loopback: bool,
    /// Whether private, link-local and other non-public addresses may be fetched. Never in production.
    pub allow_private: bool,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            min_snippet_chars: 200,
            max_bytes: 2 << 20,
            max_text_chars: 4000,
            timeout: Duration::from_secs(10),
            max_redirects: 3,
            content_types: vec!["text/html".into(), "application/xhtml+xml".into(), "text/plain".into()],
            allow_loopback: false,
            allow_private: false,
        }
    }
}

/// A fetched page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The URL finally read, after redirects.
    pub url: String,
    /// The media type the server declared.
    pub content_type: String,
    /// The main text (HTML stripped of markup, scripts, styles and navigation).
    pub text: String,
    /// Whether the body was cut at `max_bytes`.
    pub truncated: bool,
}

/// Why an address is refused, if it is.
fn refusal(ip: IpAddr, policy: &FetchPolicy) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() {
        return (!policy.allow_loopback).then_some("a loopback address");
    }
    if policy.allow_private {
        return None;
    }
    match ip {
        IpAddr::V4(v4) => v4_refusal(v4),
        IpAddr::V6(v6) => v6_refusal(v6),
    }
}

fn v4_refusal(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) {
        Some("the cloud metadata address")
    } else if ip.is_link_local() {
        Some("a link-local address")
    } else if ip.is_private() {
        Some("a private address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a carrier-grade NAT address")
    } else if ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 198 && (b == 18 || b == 19))
    {
        Some("a reserved address")
    } else {
        None
    }
}

fn v6_refusal(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Some("the cloud metadata address")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if ip.is_unspecified() || ip.is_multicast() || first == 0x2001 && ip.segments()[1] == 0xdb8 {
        Some("a reserved address")
    } else {
        None
    }
}

/// Fetches pages under a [`FetchPolicy`].
#[derive(Debug, Clone)]
pub struct PageFetcher {
    policy: FetchPolicy,
}

impl PageFetcher {
    /// A fetcher with `policy` (its `enabled` flag is for whoever decides to build one).
    #[must_use]
    pub fn new(policy: FetchPolicy) -> Self {
        Self { policy }
    }

    /// The policy.
    #[must_use]
    pub fn policy(&self) -> &FetchPolicy {
        &self.policy
    }

    /// Checks a URL and resolves it to the address to connect to.
    async fn check(&self, url: &Url) -> Result<SocketAddr> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid_input(format!("refused to fetch {url}: only http and https are fetched")));
        }
        let host = url.host_str().ok_or_else(|| Error::invalid_input(format!("refused to fetch {url}: no host")))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| Error::unavailable(format!("cannot resolve {host}: {e}")))?
                .collect(),
        };
        // Every address the name has must be allowed: otherwise the connection could pick the refused one.
        for a in &addrs {
            if let Some(why) = refusal(a.ip(), &self.policy) {
                return Err(Error::invalid_input(format!("refused to fetch {url}: {host} is {why} ({})", a.ip())));
            }
        }
        addrs.first().copied().ok_or_else(|| Error::unavailable(format!("{host} has no address")))
    }

    /// Fetches `url` and extracts its main text.
    ///
    /// # Errors
    /// [`InvalidInput`](ErrorKind::InvalidInput) for a refused URL or address; `Permanent` for too many redirects
    /// or a refused content type; transient and unavailable failures as for providers; the deadline.
    pub async fn fetch(&self, ctx: &Ctx, url: &str) -> Result<Page> {
        let start = Instant::now();
        let result = self.fetch_inner(ctx, url).await;
        match &result {
            Ok(page) => ctx.trace(
                TraceEvent::new("web", "fetch")
                    .detail("url", page.url.as_str())
                    .detail("chars", page.text.chars().count())
                    .detail("truncated", page.truncated)
                    .cost(Cost::new(0, 1, 1))
                    .elapsed(start.elapsed()),
            ),
            Err(e) => ctx.trace(
                TraceEvent::new(
                    "web",
                    if e.kind() == ErrorKind::InvalidInput { "fetch_refused" } else { "fetch_failed" },
                )
                .detail("url", url)
                .detail("reason", e.message())
                .elapsed(start.elapsed()),
            ),
        }
        result
    }

    async fn fetch_inner(&self, ctx: &Ctx, url: &str) -> Result<Page> {
        ctx.check()?;
        let deadline = ctx.remaining().map_or(self.policy.timeout, |r| r.min(self.policy.timeout));
        let work = async {
            let mut current =
                Url::parse(url).map_err(|e| Error::invalid_input(format!("refused to fetch {url}: {e}")))?;
            let mut hops = 0;
            loop {
                let addr = self.check(&current).await?;
                let host = current.host_str().unwrap_or_default().to_owned();
                // One client per hop, pinned to the checked address and following no redirect by itself.
                let client = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .resolve(&host, addr)
                    .user_agent(concat!("ragtune/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| Error::permanent("cannot start the HTTP client").with_source(e))?;
                let mut response = client.get(current.clone()).send().await.map_err(|e| {
                    if e.is_connect() {
                        Error::unavailable(format!("cannot reach {host}: {e}"))
                    } else {
                        Error::transient(format!("fetching {current} failed: {e}"))
                    }
                })?;
                let status = response.status();
                if status.is_redirection() {
                    hops += 1;
                    if hops > self.policy.max_redirects {
                        return Err(Error::permanent(format!(
                            "fetching {url} took more than {} redirects",
                            self.policy.max_redirects
                        )));
                    }
                    let location = response
                        .headers()
                        .get(reqwest::header::LOCATION)
                        .and_then(|v| v.to_str().ok())
                        .ok_or_else(|| Error::permanent(format!("{current} redirected without a location")))?;
                    current = current
                        .join(location)
                        .map_err(|e| Error::permanent(format!("{current} redirected to a bad location: {e}")))?;
                    continue;
                }
                if !status.is_success() {
                    let what = format!("{current} answered HTTP {status}");
                    return Err(if status.is_server_error() || status.as_u16() == 429 {
                        Error::transient(what)
                    } else {
                        Error::permanent(what)
                    });
                }
                let content_type = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase();
                if !self.policy.content_types.iter().any(|t| t.eq_ignore_ascii_case(&content_type)) {
                    return Err(Error::permanent(format!("{current} is {content_type:?}, which is not fetched")));
                }
                let mut body = Vec::new();
                let mut truncated = false;
                while let Some(chunk) =
                    response.chunk().await.map_err(|e| Error::transient(format!("reading {current} failed: {e}")))?
                {
                    let room = self.policy.max_bytes - body.len();
                    if chunk.len() >= room {
                        body.extend_from_slice(&chunk[..room]);
                        // At the limit the rest is not read, so a page of exactly `max_bytes` also counts as cut.
                        truncated = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                let raw = String::from_utf8_lossy(&body);
                let text =
                    if content_type == "text/plain" { squash(&raw) } else { ragtune_core::html::extract(&raw).text };
                let text: String = text.chars().take(self.policy.max_text_chars).collect();
                return Ok(Page { url: current.to_string(), content_type, text, truncated });
            }
        };
        match tokio::time::timeout(deadline, work).await {
            Ok(r) => r,
            Err(_) => Err(Error::transient(format!("fetching {url} took longer than {:.1} s", deadline.as_secs_f64()))),
        }
    }

    /// Replaces the content of results whose snippet is shorter than `min_snippet_chars` with their page's text.
    /// A page that cannot be fetched leaves its result as it was (the failure is traced); fetching happens one page
    /// at a time, in order, so the trace is deterministic.
    pub async fn enrich(&self, ctx: &Ctx, results: &mut [WebResult]) {
        for r in results.iter_mut() {
            if r.content.chars().count() >= self.policy.min_snippet_chars || ctx.check().is_err() {
                continue;
            }
            if let Ok(page) = self.fetch(ctx, &r.url).await
                && page.text.chars().count() > r.content.chars().count()
            {
                r.content = page.text;
            }
        }
    }
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let strict = FetchPolicy::default();
        let loopback_ok = FetchPolicy { allow_loopback: true, ..FetchPolicy::default() };
        let check = |ip: &str, policy: &FetchPolicy| refusal(ip.parse().unwrap(), policy);
        assert_eq!(check("127.0.0.1", &strict), Some("a loopback address"));
        assert_eq!(check("::1", &strict), Some("a loopback address"));
        assert_eq!(check("::ffff:127.0.0.1", &strict), Some("a loopback address"));
        assert_eq!(check("127.0.0.1", &loopback_ok), None);
        assert_eq!(check("10.1.2.3", &loopback_ok), Some("a private address"));
        assert_eq!(check("192.168.0.1", &strict), Some("a private address"));
        assert_eq!(check("172.16.5.4", &strict), Some("a private address"));
        assert_eq!(check("169.254.169.254", &strict), Some("the cloud metadata address"));
        assert_eq!(check("169.254.1.1", &strict), Some("a link-local address"));
        assert_eq!(check("100.64.0.1", &strict), Some("a carrier-grade NAT address"));
        assert_eq!(check("0.0.0.0", &strict), Some("a reserved address"));
        assert_eq!(check("fe80::1", &strict), Some("a link-local address"));
        assert_eq!(check("fd12::1", &strict), Some("a private (unique local) address"));
        assert_eq!(check("fd00:ec2::254", &strict), Some("the cloud metadata address"));
        assert_eq!(check("::ffff:10.0.0.1", &strict), Some("a private address"));
        assert_eq!(check("93.184.216.34", &strict), None);
        assert_eq!(check("2606:4700::1111", &strict), None);
        assert_eq!(check("10.1.2.3", &FetchPolicy { allow_private: true, ..FetchPolicy::default() }), None);
    }
}
