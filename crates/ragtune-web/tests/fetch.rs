//! Page fetching against real servers on 127.0.0.1: the main text of a page, and hostile results — private and
//! metadata addresses, a redirect loop, a redirect into the private network, a 50 MB page, a PDF, a slow page —
//! each refused or cut with a trace note, never a hang or a panic.

use std::time::Duration;

use ragtune_core::{Ctx, ErrorKind, TraceSink, WebResult};
use ragtune_testkit::http::{Reply, serve};
use ragtune_web::{FetchPolicy, PageFetcher};

fn loopback_ok() -> FetchPolicy {
    FetchPolicy { enabled: true, allow_loopback: true, timeout: Duration::from_secs(2), ..FetchPolicy::default() }
}

const PAGE: &str = "<html><head><title>x</title></head><body><nav>menu</nav><p>Osteomalacia is the softening of the bones.</p></body></html>";

#[tokio::test]
async fn a_page_becomes_its_main_text() {
    let server = serve(|_, _| Reply::raw(200, "text/html; charset=utf-8", PAGE));
    let fetcher = PageFetcher::new(loopback_ok());
    let page = fetcher.fetch(&Ctx::new(), &format!("{}/wiki/Osteomalacia", server.url())).await.unwrap();
    assert_eq!(page.text, "Osteomalacia is the softening of the bones.");
    assert_eq!((page.content_type.as_str(), page.truncated), ("text/html", false));

    // Short snippets are replaced by the page's text; long ones are left alone.
    let mut results = vec![
        WebResult { url: format!("{}/a", server.url()), content: "Osteo…".into(), ..WebResult::default() },
        WebResult { url: format!("{}/b", server.url()), content: "x".repeat(300), ..WebResult::default() },
    ];
    fetcher.enrich(&Ctx::new(), &mut results).await;
    assert_eq!(results[0].content, "Osteomalacia is the softening of the bones.");
    assert_eq!(results[1].content.len(), 300);
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn loopback_private_and_metadata_addresses_are_refused_without_a_request() {
    let server = serve(|_, _| Reply::raw(200, "text/html", PAGE));
    let strict = PageFetcher::new(FetchPolicy { enabled: true, ..FetchPolicy::default() });
    let sink = TraceSink::new();
    let ctx = Ctx::new().with_trace(sink.clone());
    for url in [
        format!("{}/x", server.url()),
        "http://localhost:9/x".to_owned(),
        "http://10.0.0.1/x".to_owned(),
        "http://192.168.1.1/router".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[::1]:9/x".to_owned(),
        "http://[fd00:ec2::254]/x".to_owned(),
        "file:///etc/passwd".to_owned(),
        "gopher://example.org/".to_owned(),
    ] {
        // Refused by the address check itself (InvalidInput, "refused to fetch"), not by a failed connection.
        let err = strict.fetch(&ctx, &url).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err}");
        assert!(err.message().starts_with("refused to fetch"), "{err}");
    }
    assert!(server.received().is_empty());
    let refused = sink.take().into_iter().filter(|e| e.action == "fetch_refused").count();
    assert_eq!(refused, 9);
    // Allowing loopback does not allow the private network.
    let tests = PageFetcher::new(loopback_ok());
    assert_eq!(tests.fetch(&ctx, "http://10.0.0.1/x").await.unwrap_err().kind(), ErrorKind::InvalidInput);
}

#[tokio::test]
async fn redirects_are_checked_hop_by_hop_and_loops_end() {
    let server = serve(|request, _| match request.target.as_str() {
        "/loop" => Reply::status(302).header("location", "/loop"),
        "/to-metadata" => Reply::status(301).header("location", "http://169.254.169.254/latest/meta-data/"),
        "/moved" => Reply::status(308).header("location", "/final"),
        _ => Reply::raw(200, "text/html", PAGE),
    });
    let fetcher = PageFetcher::new(loopback_ok());
    let ctx = Ctx::new();
    let err = fetcher.fetch(&ctx, &format!("{}/loop", server.url())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent);
    assert!(err.message().contains("more than 3 redirects"), "{err}");
    assert_eq!(server.received().len(), 4);
    let err = fetcher.fetch(&ctx, &format!("{}/to-metadata", server.url())).await.unwrap_err();
    assert!(err.message().contains("metadata"), "{err}");
    let page = fetcher.fetch(&ctx, &format!("{}/moved", server.url())).await.unwrap();
    assert!(page.url.ends_with("/final"), "{}", page.url);
}

#[tokio::test]
async fn a_fifty_megabyte_page_is_cut_at_the_limit() {
    let mut body = b"<html><body><p>".to_vec();
    body.extend(std::iter::repeat_n(b'a', 50 << 20));
    let server = serve(move |_, _| Reply::raw(200, "text/html", body.clone()));
    let fetcher = PageFetcher::new(FetchPolicy { max_bytes: 1 << 20, max_text_chars: 100, ..loopback_ok() });
    let page = fetcher.fetch(&Ctx::new(), &format!("{}/big", server.url())).await.unwrap();
    assert!(page.truncated, "the body was cut at max_bytes");
    assert_eq!(page.text.len(), 100);
}

#[tokio::test]
async fn other_content_types_and_slow_pages_are_refused() {
    let server = serve(|request, _| match request.target.as_str() {
        "/paper.pdf" => Reply::raw(200, "application/pdf", "%PDF-1.7"),
        "/slow" => Reply::raw(200, "text/html", PAGE).delayed(Duration::from_secs(5)),
        "/gone" => Reply::status(404),
        _ => Reply::raw(200, "text/plain", "just   text"),
    });
    let fetcher = PageFetcher::new(FetchPolicy { timeout: Duration::from_millis(300), ..loopback_ok() });
    let ctx = Ctx::new();
    let err = fetcher.fetch(&ctx, &format!("{}/paper.pdf", server.url())).await.unwrap_err();
    assert!(err.message().contains("application/pdf"), "{err}");
    // The page would arrive whole after 5 s: an error means the 300 ms timeout cut it.
    let err = fetcher.fetch(&ctx, &format!("{}/slow", server.url())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient);
    assert_eq!(fetcher.fetch(&ctx, &format!("{}/gone", server.url())).await.unwrap_err().kind(), ErrorKind::Permanent);
    assert_eq!(fetcher.fetch(&ctx, &format!("{}/t", server.url())).await.unwrap().text, "just text");
}
