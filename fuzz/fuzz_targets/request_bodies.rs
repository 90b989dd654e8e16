//! The HTTP API's request bodies (`/v1/ask`, `/v1/query`, `/v1/search`, `PUT /v1/documents`) on arbitrary bytes:
//! anything may be refused as a 400, nothing may panic, and what parses survives the limits the handlers apply.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((question, options)) = ragtune_server::parse_ask(data) {
        let _ = (question.trim().is_empty(), options.top_k, options.deadline_ms);
    }
    let _ = ragtune_server::parse_search(data);
    if let Ok(documents) = ragtune_server::parse_documents(data) {
        for d in &documents {
            let _ = (d.id.len(), d.text.len());
        }
    }
});
