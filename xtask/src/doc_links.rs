//! The references between the project's documents resolve: a unit test of xtask (so `cargo xtask ci` runs it with
//! the rest of the workspace's tests), reading the files as they are on disk, in well under a second.
//!
//! In README.md, ARCHITECTURE.md and every Markdown file under `docs/`, outside fenced code blocks:
//! - a relative Markdown link `[text](path#anchor)` names a file that exists, and its anchor a heading of that file
//!   (GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats);
//! - a Markdown file named in the text (`docs/eval.md`, `adr/0008-light-provisioning-crate.md`,
//!   `experiments/2026-11-28-two-corpus-sizes.md`, `eval.md`) exists, relative to the file, the repository root,
//!   `docs/` or `docs/experiments/`, which is how the documents write their references;
//! - a section named after a file (`eval.md, "Baselines and tolerance"`, or `"A", "B" and "C"`) is a heading of that
//!   file, or the beginning of one (its backticks and a numbering such as `8. ` left out);
//! - an ADR named by number (`docs/adr/0008`) exists.
//!
//! The ADR and experiment-log paths are also checked in the workspace's sources and manifests (`.rs`, `.toml`,
//! `.py`), where doc comments cite them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Markdown file names the documents mention that are not documents of this repository: the design documents the
/// project was started from (they live outside its tree, as ADR 0008 says of house-style.md), and a report
/// `cargo xtask eval --matrix` writes.
const NOT_IN_THE_TREE: &[&str] = &["house-style.md", "models-and-llm.md", "mission.md", "matrix.md"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// README.md, ARCHITECTURE.md and `docs/**/*.md`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    walk(&root.join("docs"), &mut |p| p.extension().is_some_and(|e| e == "md"), &mut out);
    out
}

/// The files under `dir` that `keep` accepts, skipping hidden directories and build or environment output.
fn walk(dir: &Path, keep: &mut dyn FnMut(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !name.starts_with('.') && !matches!(name, "target" | "node_modules" | "__pycache__" | "venv") {
                walk(&path, keep, out);
            }
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// The text with every fenced code block blanked (lines kept, so offsets still give line numbers).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let start = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| start.starts_with(m));
        let blank = match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                true
            }
            (Some(f), Some(m)) if f == m => {
                fence = None;
                true
            }
            (Some(_), _) => true,
            (None, None) => false,
        };
        if blank {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The headings of a Markdown text (ATX headings outside code blocks), as written.
fn headings(text: &str) -> Vec<String> {
    prose(text)
        .lines()
        .filter_map(|line| {
            let hashes = line.bytes().take_while(|&b| b == b'#').count();
            let rest = &line[hashes..];
            ((1..=6).contains(&hashes) && rest.starts_with(' '))
                .then(|| rest.trim().trim_end_matches('#').trim().to_owned())
        })
        .collect()
}

/// A heading as a reference names it: no backticks, no numbering (`8. Generate`), lower case.
fn section_key(text: &str) -> String {
    let t = text.replace('`', "").trim().to_lowercase();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    match t[digits..].strip_prefix(". ") {
        Some(rest) if digits > 0 => rest.trim().to_owned(),
        _ => t,
    }
}

/// The ids GitHub gives a file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for heading in headings(text) {
        // The rendered text: links keep their text, code and emphasis lose their markers.
        let mut rendered = String::new();
        let mut rest = heading.as_str();
        while let Some(open) = rest.find('[') {
            rendered.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find("](").and_then(|close| after[close..].find(')').map(|end| (close, close + end))) {
                Some((close, end)) => {
                    rendered.push_str(&after[..close]);
                    rest = &after[end + 1..];
                }
                None => {
                    rendered.push('[');
                    rest = after;
                }
            }
        }
        rendered.push_str(rest);
        let slug: String = rendered
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// The file a reference written in `from` names, if it exists: relative to `from`'s directory, the root, `docs/`
/// or `docs/experiments/`.
fn resolve(root: &Path, from: &Path, reference: &str) -> Option<PathBuf> {
    let bases = [
        from.parent().unwrap_or(root).to_path_buf(),
        root.to_path_buf(),
        root.join("docs"),
        root.join("docs/experiments"),
    ];
    bases.iter().map(|b| b.join(reference)).find(|p| p.is_file())
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// Every Markdown file name written in `text`, with its byte range (`foo/bar.md`; not `.mdx`, not a URL's).
fn md_mentions(text: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(".md").map(|i| i + from) {
        from = i + 3;
        let end = i + 3;
        if text[end..].chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let start = text[..i].char_indices().rev().take_while(|&(_, c)| is_path_char(c)).last().map_or(i, |(j, _)| j);
        let name = &text[start..end];
        let url = text[..start].ends_with(':') || name.starts_with("//");
        // A Markdown link's target is checked as a link.
        let link = text[..start].ends_with("](");
        if !url && !link && !name.starts_with('.') && !name.starts_with('/') {
            out.push((start, end, name));
        }
    }
    out
}

/// The sections named right after a file name: `, "A"`, `: "A"`, ` "A"`, then `, "B"`, ` and "C"`, ...
fn named_sections(after: &str) -> Vec<&str> {
    let after = after.strip_prefix('`').unwrap_or(after);
    let Some(mut rest) = [", \"", ": \"", " \""].iter().find_map(|p| after.strip_prefix(p)) else { return Vec::new() };
    let mut out = Vec::new();
    while let Some(close) = rest.find('"') {
        let name = &rest[..close];
        if name.contains('\n') || !name.starts_with(|c: char| c.is_alphanumeric() || c == '`') {
            break;
        }
        out.push(name);
        rest = &rest[close + 1..];
        match [", and \"", ", \"", " and \""].iter().find_map(|p| rest.strip_prefix(p)) {
            Some(next) => rest = next,
            None => break,
        }
    }
    out
}

/// `adr/NNNN` references (with or without a name after the number) that name no ADR.
fn broken_adr_numbers(root: &Path, text: &str) -> Vec<String> {
    let adrs: Vec<String> = fs::read_dir(root.join("docs/adr"))
        .expect("docs/adr")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let mut out = Vec::new();
    for (i, _) in text.match_indices("adr/") {
        let digits: String = text[i + 4..].chars().take_while(char::is_ascii_digit).collect();
        if digits.len() == 4 && !adrs.iter().any(|a| a.starts_with(&format!("{digits}-"))) {
            out.push(format!("adr/{digits}"));
        }
    }
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// Every broken reference in the documents, as `file:line: what`.
fn broken_in_documents(root: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    let mut cache: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut read =
        |p: &Path| cache.entry(p.to_path_buf()).or_insert_with(|| fs::read_to_string(p).unwrap_or_default()).clone();
    for doc in documents(root) {
        let text = read(&doc);
        let body = prose(&text);
        let shown = doc.strip_prefix(root).unwrap_or(&doc).display().to_string();
        let mut report =
            |offset: usize, what: String| broken.push(format!("{shown}:{}: {what}", line_of(&body, offset)));

        // Markdown links.
        for (i, _) in body.match_indices("](") {
            let target: String = body[i + 2..].chars().take_while(|&c| c != ')' && !c.is_whitespace()).collect();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                Some(doc.clone())
            } else {
                doc.parent().map(|d| d.join(path)).filter(|p| p.exists())
            };
            let Some(file) = file else {
                report(i, format!("link to {target}: no such file"));
                continue;
            };
            if !anchor.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&file)).contains(anchor)
            {
                report(i, format!("link to {target}: no heading with the id `{anchor}` there"));
            }
        }

        // Markdown files and their sections named in the text.
        for (start, end, name) in md_mentions(&body) {
            let base = name.rsplit('/').next().unwrap_or(name);
            if NOT_IN_THE_TREE.contains(&base) {
                continue;
            }
            let Some(file) = resolve(root, &doc, name) else {
                report(start, format!("{name}: no such file"));
                continue;
            };
            let sections = named_sections(&body[end..]);
            if sections.is_empty() {
                continue;
            }
            let keys: Vec<String> = headings(&read(&file)).iter().map(|h| section_key(h)).collect();
            for section in sections {
                let want = section_key(section);
                let found = keys.iter().any(|k| {
                    k == &want || (k.starts_with(&want) && !k[want.len()..].starts_with(|c: char| c.is_alphanumeric()))
                });
                if !found {
                    report(start, format!("{name}, \"{section}\": no such section there"));
                }
            }
        }

        for adr in broken_adr_numbers(root, &body) {
            broken.push(format!("{shown}: {adr}: no such ADR"));
        }
    }
    broken
}

/// ADR and experiment-log references in the workspace's sources and manifests that name no file.
fn broken_in_sources(root: &Path) -> Vec<String> {
    let mut sources = vec![root.join("Cargo.toml")];
    for dir in ["crates", "xtask", "tests", "benches", "fuzz", "python", "configs"] {
        walk(
            &root.join(dir),
            &mut |p| p.extension().is_some_and(|e| e == "rs" || e == "toml" || e == "py"),
            &mut sources,
        );
    }
    let mut broken = Vec::new();
    // This file's own test writes made-up references on purpose.
    sources.retain(|s| !s.ends_with("xtask/src/doc_links.rs"));
    for source in sources {
        let Ok(text) = fs::read_to_string(&source) else { continue };
        let shown = source.strip_prefix(root).unwrap_or(&source).display().to_string();
        for (start, _, name) in md_mentions(&text) {
            if (name.starts_with("docs/adr/") || name.starts_with("docs/experiments/")) && !root.join(name).is_file() {
                broken.push(format!("{shown}:{}: {name}: no such file", line_of(&text, start)));
            }
        }
        for adr in broken_adr_numbers(root, &text) {
            broken.push(format!("{shown}: {adr}: no such ADR"));
        }
    }
    broken
}

#[test]
fn the_documents_references_resolve() {
    let broken = broken_in_documents(&root());
    assert!(broken.is_empty(), "broken references in the documents:\n  {}", broken.join("\n  "));
}

#[test]
fn the_sources_adr_and_experiment_references_resolve() {
    let broken = broken_in_sources(&root());
    assert!(broken.is_empty(), "broken references in the sources:\n  {}", broken.join("\n  "));
}

#[test]
fn the_checks_find_what_is_broken() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("docs/adr")).unwrap();
    fs::create_dir_all(root.join("docs/experiments")).unwrap();
    fs::write(root.join("docs/adr/0001-first.md"), "# 0001 — First\n").unwrap();
    fs::write(root.join("docs/experiments/2026-01-01-study.md"), "# 2026-01-01: a study\n").unwrap();
    fs::write(root.join("ARCHITECTURE.md"), "See docs/adr/0001 and docs/adr/0002.\n").unwrap();
    fs::write(
        root.join("README.md"),
        "[ok](docs/eval.md#running-an-evaluation) [anchor](docs/eval.md#nowhere) [file](docs/none.md)\n",
    )
    .unwrap();
    fs::write(
        root.join("docs/eval.md"),
        "# Evaluation\n\n## Running an evaluation\n\n### 8. Generate (`x`)\n\n\
         See eval.md, \"Running an evaluation\" and \"Generate\"; `eval.md`, \"Gone\"; pipeline.md, \"X\".\n\
         The study: 2026-01-01-study.md; experiments/2026-01-02-missing.md; adr/0001-first.md.\n\
         ```sh\nnot/checked.md, \"Nope\"\n```\n",
    )
    .unwrap();
    let broken = broken_in_documents(root);
    assert_eq!(
        broken,
        [
            "README.md:1: link to docs/eval.md#nowhere: no heading with the id `nowhere` there",
            "README.md:1: link to docs/none.md: no such file",
            "ARCHITECTURE.md: adr/0002: no such ADR",
            "docs/eval.md:7: eval.md, \"Gone\": no such section there",
            "docs/eval.md:7: pipeline.md: no such file",
            "docs/eval.md:8: experiments/2026-01-02-missing.md: no such file",
        ],
        "{broken:#?}"
    );
    assert!(anchors("# A `b` [c](d.md) — e\n## A b c  e\n").contains("a-b-c--e-1"));
}
