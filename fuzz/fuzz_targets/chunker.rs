//! The header-aware chunker on arbitrary text with arbitrary settings: it may refuse settings, never panic, and every
//! passage's `parent_id` names a section it emitted for the same document (the invariant in ARCHITECTURE.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ragtune::core::{ChunkKind, Document};
use ragtune::ingest::{ChunkerConfig, chunk_document};

fuzz_target!(|data: &[u8]| {
    let Some((settings, text)) = data.split_first_chunk::<4>() else { return };
    let cfg = ChunkerConfig {
        chunk_size: usize::from(settings[0]),
        chunk_overlap: usize::from(settings[1]),
        max_section_size: usize::from(u16::from_le_bytes([settings[2], settings[3]])),
    };
    let mut doc = Document::new("d", String::from_utf8_lossy(text));
    if settings[0] % 2 == 1 {
        doc.metadata.insert("format".into(), serde_json::json!("text"));
    }
    let Ok(chunks) = chunk_document(&doc, &cfg) else { return };
    let sections: std::collections::BTreeSet<&str> =
        chunks.iter().filter(|c| c.kind == ChunkKind::Section).map(|c| c.id.as_str()).collect();
    for c in chunks.iter().filter(|c| c.kind == ChunkKind::Passage) {
        assert_eq!(c.doc_id, "d");
        if let Some(parent) = &c.parent_id {
            assert!(sections.contains(parent.as_str()), "passage {} names a section that was not emitted", c.id);
        }
        assert!(!c.text.is_empty(), "passage {} is empty", c.id);
    }
});
