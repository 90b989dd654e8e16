//! arXiv's search API, an Atom feed.
//!
//! Reference: <https://info.arxiv.org/help/api/user-manual.html> — `GET /api/query?search_query=…&start=0&max_results=N`
//! answers an Atom 1.0 feed; each `<entry>` has `<id>` (the abstract page, `http://arxiv.org/abs/…`), `<title>`,
//! `<summary>` (the abstract), `<published>`, `<updated>`, `<author><name>` and `<link>`s. A malformed query is
//! answered with a feed whose single entry has an `<id>` under `http://arxiv.org/api/errors` and the message in
//! `<summary>`. The terms of use ask for no more than one request every three seconds in bulk; the web search
//! protocol's limit is 3 per second (configurable, see [`Resilience`](crate::Resilience)).
//!
//! The feed is read with quick-xml's pull parser (see ADR 0009).
//!
//! Price: free; no key.

use std::time::Instant;

use quick_xml::Reader;
use quick_xml::events::Event;
use ragtune_core::{Ctx, Error, Result, WebQuery, WebResult};

use super::{finish, per_call, result, squash};
use crate::http::{self, Endpoint};

/// The name this provider reports.
pub const NAME: &str = "arxiv";
/// The public API.
pub const DEFAULT_URL: &str = "https://export.arxiv.org";

/// The arXiv search API.
#[derive(Debug, Clone)]
pub struct Arxiv {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl Arxiv {
    /// A client of the API at `endpoint.base_url` ([`DEFAULT_URL`] in production).
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(endpoint: Endpoint) -> Result<Self> {
        Ok(Self { http: http::client(&endpoint)?, endpoint })
    }

    async fn one(&self, ctx: &Ctx, query: &WebQuery) -> Result<Vec<WebResult>> {
        let start = Instant::now();
        let search = search_query(&query.text);
        if search.is_empty() {
            return Ok(Vec::new());
        }
        let max = query.max_results.clamp(1, 100).to_string();
        let params = [("search_query", search.as_str()), ("start", "0"), ("max_results", max.as_str())];
        let request = self.http.get(self.endpoint.url("/api/query")).query(&params);
        let text = http::send(ctx, NAME, &self.endpoint, request).await?;
        Ok(finish(ctx, NAME, start, 0, query.max_results, parse_feed(&text)?))
    }
}

/// A natural-language query as arXiv search syntax: every content word searched in all fields, all required
/// (`all:osteomalacia AND all:vitamin`). Punctuation is dropped (arXiv's syntax gives it meaning) but hyphens are
/// kept (`all:vitamin-d` searches the compound); core's [stop words](ragtune_core::text::STOP_WORDS), the question
/// words among them, would make an all-words-required query miss every paper, and so would arXiv's `ANDNOT`
/// operator taken as a word.
fn search_query(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|w| {
            let lower = w.to_lowercase();
            !w.is_empty() && !ragtune_core::text::is_stop_word(&lower) && lower != "andnot"
        })
        .map(|w| format!("all:{w}"))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The entries of an arXiv Atom feed as results.
///
/// # Errors
/// [`MalformedOutput`](ragtune_core::ErrorKind::MalformedOutput) for XML that does not parse (truncated, HTML);
/// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for arXiv's own error entry.
fn parse_feed(xml: &str) -> Result<Vec<WebResult>> {
    let mut reader = Reader::from_str(xml);
    let mut out = Vec::new();
    let mut entry: Option<Entry> = None;
    // The element whose text is being read inside an entry, and how deep we are below the entry.
    let mut field: Option<&'static str> = None;
    let mut depth = 0usize;
    let mut saw_feed = false;
    loop {
        let event = reader.read_event().map_err(|e| {
            Error::malformed_output(format!(
                "arxiv sent a feed that does not parse as XML ({e}): {}",
                http::snippet(xml)
            ))
        })?;
        match event {
            Event::Start(e) => {
                let name = e.local_name();
                let name = name.as_ref();
                if name == "feed" {
                    saw_feed = true;
                }
                if let Some(current) = entry.as_mut() {
                    depth += 1;
                    if depth == 1 {
                        field = match name {
                            "id" => Some("id"),
                            "title" => Some("title"),
                            "summary" => Some("summary"),
                            "published" => Some("published"),
                            _ => None,
                        };
                        if name == "link" {
                            current.take_link(&e);
                        }
                    }
                } else if name == "entry" {
                    entry = Some(Entry::default());
                    depth = 0;
                }
            }
            Event::Empty(e) => {
                if let Some(current) = entry.as_mut()
                    && depth == 0
                    && e.local_name().as_ref() == "link"
                {
                    current.take_link(&e);
                }
            }
            Event::Text(t) => {
                if let (Some(current), Some(f)) = (entry.as_mut(), field) {
                    current.push(f, &t.xml10_content());
                }
            }
            Event::CData(t) => {
                if let (Some(current), Some(f)) = (entry.as_mut(), field) {
                    current.push(f, &t.into_inner());
                }
            }
            Event::GeneralRef(r) => {
                if let (Some(current), Some(f)) = (entry.as_mut(), field) {
                    current.push(f, &reference_text(&r));
                }
            }
            Event::End(e) => {
                if let Some(current) = entry.as_mut() {
                    if depth == 0 && e.local_name().as_ref() == "entry" {
                        let done = std::mem::take(current);
                        entry = None;
                        if done.id.contains("/api/errors") {
                            return Err(Error::invalid_input(format!(
                                "arxiv rejected the query: {}",
                                squash(&done.summary)
                            )));
                        }
                        if let Some(r) = done.into_result() {
                            out.push(r);
                        }
                    } else {
                        depth = depth.saturating_sub(1);
                        field = None;
                    }
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if entry.is_some() || !saw_feed {
        return Err(Error::malformed_output(format!(
            "arxiv sent an incomplete or non-Atom feed: {}",
            http::snippet(xml)
        )));
    }
    Ok(out)
}

/// The text of a character or predefined entity reference (`&#233;`, `&amp;`); empty for any other.
fn reference_text(r: &quick_xml::events::BytesRef<'_>) -> String {
    match r.resolve_char_ref() {
        Ok(Some(c)) => c.to_string(),
        _ => quick_xml::escape::resolve_predefined_entity(&r.xml10_content()).unwrap_or("").to_owned(),
    }
}

#[derive(Default)]
struct Entry {
    id: String,
    title: String,
    summary: String,
    published: String,
    link: Option<String>,
}

impl Entry {
    fn push(&mut self, field: &str, text: &str) {
        match field {
            "id" => self.id.push_str(text),
            "title" => self.title.push_str(text),
            "summary" => self.summary.push_str(text),
            "published" => self.published.push_str(text),
            _ => {}
        }
    }

    /// Keeps the `rel="alternate"` link (the abstract page), which is what a reader cites.
    fn take_link(&mut self, e: &quick_xml::events::BytesStart<'_>) {
        let attr = |name: &str| {
            e.try_get_attribute(name)
                .ok()
                .flatten()
                .and_then(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).ok().map(|v| v.into_owned()))
        };
        if attr("rel").as_deref().unwrap_or("alternate") == "alternate"
            && let Some(href) = attr("href")
        {
            self.link = Some(href);
        }
    }

    fn into_result(self) -> Option<WebResult> {
        let url = self.link.filter(|l| !l.is_empty()).unwrap_or_else(|| self.id.trim().to_owned());
        if url.is_empty() {
            return None;
        }
        let published = self.published.trim();
        let date = (!published.is_empty()).then(|| published.to_owned());
        Some(result(NAME, url, &self.title, &self.summary, None, date))
    }
}

web_search!(
    Arxiv,
    per_call(1000.0),
    /// One free call per query; about a second.
);

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;

    use super::*;

    const FEED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:arxiv="http://arxiv.org/schemas/atom">
  <title type="html">ArXiv Query: search_query=all:hyde</title>
  <id>http://arxiv.org/api/x</id>
  <entry>
    <id>http://arxiv.org/abs/2212.10496v1</id>
    <published>2022-12-20T18:00:00Z</published>
    <title>Precise Zero-Shot Dense Retrieval
      without Relevance Labels</title>
    <summary>  We propose HyDE &amp; show &#x2014; it works &lt;well&gt;. </summary>
    <author><name>Luyu Gao</name></author>
    <link href="http://arxiv.org/abs/2212.10496v1" rel="alternate" type="text/html"/>
    <link title="pdf" href="http://arxiv.org/pdf/2212.10496v1" rel="related" type="application/pdf"/>
    <arxiv:primary_category term="cs.IR"/>
  </entry>
  <entry>
    <id>http://arxiv.org/abs/2401.15884v2</id>
    <title><![CDATA[Corrective RAG]]></title>
    <summary>CRAG.</summary>
  </entry>
</feed>"#;

    #[test]
    fn entries_become_results() {
        let results = parse_feed(FEED).unwrap();
        let rendered: Vec<String> =
            results.iter().map(|r| format!("{} | {} | {} | {:?}", r.url, r.title, r.content, r.date)).collect();
        assert_eq!(
            rendered,
            [
                "http://arxiv.org/abs/2212.10496v1 | Precise Zero-Shot Dense Retrieval without Relevance Labels | We propose HyDE & show — it works <well>. | Some(\"2022-12-20T18:00:00Z\")",
                "http://arxiv.org/abs/2401.15884v2 | Corrective RAG | CRAG. | None",
            ]
        );
    }

    #[test]
    fn errors_truncation_and_html() {
        let err = parse_feed(r#"<feed xmlns="http://www.w3.org/2005/Atom"><entry><id>http://arxiv.org/api/errors#incorrect_id_format_for_1234</id><title>Error</title><summary>incorrect id format for 1234</summary></entry></feed>"#).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("incorrect id format"), "{err}");
        let truncated = &FEED[..FEED.len() / 2];
        assert_eq!(parse_feed(truncated).unwrap_err().kind(), ErrorKind::MalformedOutput);
        assert_eq!(parse_feed("<html><body>Bad gateway</body></html>").unwrap_err().kind(), ErrorKind::MalformedOutput);
        assert_eq!(parse_feed("{\"not\": \"xml\"}").unwrap_err().kind(), ErrorKind::MalformedOutput);
        assert!(parse_feed(r#"<feed xmlns="http://www.w3.org/2005/Atom"></feed>"#).unwrap().is_empty());
    }

    #[test]
    fn queries_become_arxiv_syntax() {
        assert_eq!(search_query("What is HyDE, in RAG?"), "all:HyDE AND all:RAG");
        assert_eq!(search_query("self-rag and OR 2"), "all:self-rag AND all:2");
        assert_eq!(search_query("?!"), "");
    }
}
