//! The document loaders on arbitrary bytes: JSONL, a BEIR dataset (corpus, queries and qrels all from the input),
//! and a folder of Markdown and text. Any bytes may be refused with an error or reported as issues; none may panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One scratch directory per fuzzing process (in memory when /dev/shm exists).
fn scratch() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
        let dir = base.join(format!("ragtune-fuzz-loaders-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("beir/qrels")).expect("scratch directory");
        std::fs::create_dir_all(dir.join("folder")).expect("scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch();
    // Three parts separated by the first two 0xFF bytes (never valid UTF-8 alone), so one input drives three files.
    let mut parts = data.splitn(3, |b| *b == 0xFF);
    let (a, b, c) =
        (parts.next().unwrap_or_default(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let write = |path: &str, bytes: &[u8]| std::fs::write(dir.join(path), bytes).expect("write scratch file");
    write("docs.jsonl", data);
    let _ = ragtune::ingest::load_jsonl_documents(dir.join("docs.jsonl"));
    write("beir/corpus.jsonl", a);
    write("beir/queries.jsonl", b);
    write("beir/qrels/test.tsv", c);
    let _ = ragtune::ingest::list_splits(dir.join("beir"));
    let _ = ragtune::ingest::load_beir(dir.join("beir"), "test");
    write("folder/a.md", a);
    write("folder/b.txt", b);
    write("folder/c.markdown", c);
    if let Ok(loaded) = ragtune::ingest::load_folder(dir.join("folder")) {
        assert!(loaded.items.len() <= 3);
    }
});
