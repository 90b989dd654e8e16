//! The web page text extraction (`ragtune::web::fetch::html_text`, what `PageFetcher` keeps of a fetched page) on
//! arbitrary text: it may drop anything, never panic (multi-byte characters next to `<`, `&` and `;` included), and
//! what it returns has its whitespace collapsed; text without markup or entities comes back as it was, squashed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ragtune::web::fetch::html_text;

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fuzz_target!(|data: &[u8]| {
    // A fetched page is decoded to text before extraction; invalid bytes become U+FFFD as in that decoding.
    let html = String::from_utf8_lossy(data);
    let text = html_text(&html);
    assert_eq!(text, squash(&text), "whitespace is collapsed");
    if !html.contains(['<', '&']) {
        assert_eq!(text, squash(&html), "plain text passes through");
    }
});
