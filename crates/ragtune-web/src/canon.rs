//! URL canonicalisation and domains: how two results are recognised as the same page, and two pages as the same
//! source.

use url::Url;

/// Query parameters that only track a click and never change the page.
const TRACKING: &[&str] = &[
    "fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "igshid", "mc_cid", "mc_eid", "_hsenc",
    "_hsmi", "ref_src", "spm",
];

/// The canonical form of a URL: scheme and host lower-case, default port, fragment and tracking parameters
/// (`utm_*`, `fbclid`, `gclid`, ...) dropped, no trailing slash on the path. `None` for something that is not an
/// absolute `http(s)` URL.
#[must_use]
pub fn canonical_url(raw: &str) -> Option<String> {
    let mut url = Url::parse(raw.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    url.set_fragment(None);
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| {
            let k = k.to_ascii_lowercase();
            !k.starts_with("utm_") && !TRACKING.contains(&k.as_str())
        })
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    let path = url.path().trim_end_matches('/').to_owned();
    // The url crate lower-cases the scheme and host and drops a default port when it parses.
    let mut out = format!("{}://{}", url.scheme(), url.host_str()?);
    if let Some(port) = url.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(&path);
    if let Some(q) = url.query() {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

/// The host of a URL, lower-case and without a leading `www.`.
#[must_use]
pub fn domain_of(raw: &str) -> Option<String> {
    let url = Url::parse(raw.trim()).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    Some(host.strip_prefix("www.").map_or_else(|| host.clone(), str::to_owned))
}

/// Second-level labels under which registrations happen one level deeper (`bbc.co.uk`, `unimelb.edu.au`).
const SECOND_LEVEL: &[&str] = &["co", "com", "ac", "edu", "gov", "org", "net", "ne", "or", "go", "nic", "mil"];

/// The registered domain of a host (`en.wikipedia.org` → `wikipedia.org`, `news.bbc.co.uk` → `bbc.co.uk`): what
/// counts as one independent source in triangulation.
///
/// A heuristic, not the Public Suffix List: a two-letter country code under one of a few common second-level
/// labels takes three labels, everything else two. IP addresses are their own registered domain.
#[must_use]
pub fn registered_domain(host: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') {
        return host;
    }
    let labels: Vec<&str> = host.split('.').filter(|l| !l.is_empty()).collect();
    let n = labels.len();
    if n <= 2 {
        return labels.join(".");
    }
    let take = if labels[n - 1].len() == 2 && SECOND_LEVEL.contains(&labels[n - 2]) { 3 } else { 2 };
    labels[n - take.min(n)..].join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expect: Option<&str>) {
        assert_eq!(canonical_url(raw).as_deref(), expect, "{raw}");
    }

    #[test]
    fn canonical_urls() {
        check("HTTPS://Example.COM/a/b/#frag", Some("https://example.com/a/b"));
        check("https://example.com/", Some("https://example.com"));
        check("https://example.com:443/x?utm_source=t&id=3&UTM_medium=m&gclid=9", Some("https://example.com/x?id=3"));
        check("http://example.com:8080/x?b=2&a=1", Some("http://example.com:8080/x?b=2&a=1"));
        check("https://example.com/x?q=a%20b", Some("https://example.com/x?q=a+b"));
        check("ftp://example.com/x", None);
        check("not a url", None);
        check("/relative/path", None);
    }

    #[test]
    fn domains_and_registered_domains() {
        assert_eq!(domain_of("https://WWW.Nature.com/articles/1").as_deref(), Some("nature.com"));
        assert_eq!(domain_of("http://127.0.0.1:9/x").as_deref(), Some("127.0.0.1"));
        for (host, expect) in [
            ("en.wikipedia.org", "wikipedia.org"),
            ("news.bbc.co.uk", "bbc.co.uk"),
            ("www.cs.unimelb.edu.au", "unimelb.edu.au"),
            ("arxiv.org", "arxiv.org"),
            ("docs.tavily.com", "tavily.com"),
            ("example.co", "example.co"),
            ("a.b.example.io", "example.io"),
            ("10.0.0.1", "10.0.0.1"),
            ("localhost", "localhost"),
        ] {
            assert_eq!(registered_domain(host), expect, "{host}");
        }
    }
}
