//! Folders of Markdown and plain-text files.

use std::path::{Component, Path};

use ragtune_core::{Document, Error, Metadata, Result};
use walkdir::WalkDir;

use crate::chunk::markdown_headings;
use crate::jsonl::require_some;
use crate::lines::io_error;
use crate::{LoadIssue, Loaded};

/// The `format` metadata value of Markdown documents.
pub const FORMAT_MARKDOWN: &str = "markdown";
/// The `format` metadata value of plain-text documents; the chunker does not look for headings in them.
pub const FORMAT_TEXT: &str = "text";

/// Loads every `.md`/`.markdown` (Markdown) and `.txt` (plain text) file under `path`, recursively.
///
/// Files are visited in file-name order at each level, so the result is the same on every machine.
/// Hidden files and directories (names starting with `.`) and files with other extensions are skipped;
/// symbolic links are followed.
/// A document's id and `source` are its path relative to `path`, with `/` separators (`guide/install.md`).
/// Its title is the text of the first level-1 heading for Markdown, else the file stem.
/// Its metadata has `format` = `"markdown"` or `"text"`.
/// A file that cannot be read or is not UTF-8 becomes a [`LoadIssue`] and the others still load.
///
/// `path` may also be a single file, which then loads alone (its id is its file name).
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when `path` does not exist;
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when it holds no loadable document, or is a
/// single file of an unsupported type; each names the path.
pub fn load_folder(path: impl AsRef<Path>) -> Result<Loaded<Document>> {
    let root = path.as_ref();
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, "cannot open", e))?;
    let mut out = Loaded::default();
    if meta.is_file() {
        let Some(format) = format_of(root) else {
            return Err(Error::invalid_input(format!(
                "{}: unsupported file type (expected .md, .markdown or .txt)",
                root.display()
            )));
        };
        let id = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match load_file(root, id, format) {
            Ok(doc) => out.items.push(doc),
            Err(issue) => out.issues.push(issue),
        }
    } else {
        let walk = WalkDir::new(root)
            .follow_links(true)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
        for entry in walk {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let at = e.path().unwrap_or(root).to_path_buf();
                    out.issues.push(LoadIssue::file(at, format!("cannot read: {e}")));
                    continue;
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let Some(format) = format_of(entry.path()) else { continue };
            let id = relative_id(root, entry.path());
            match load_file(entry.path(), id, format) {
                Ok(doc) => out.items.push(doc),
                Err(issue) => out.issues.push(issue),
            }
        }
    }
    require_some(&out, root, "documents")?;
    Ok(out)
}

/// The document format of a file, from its extension (case-insensitive); `None` for files we do not load.
fn format_of(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" => Some(FORMAT_MARKDOWN),
        "txt" => Some(FORMAT_TEXT),
        _ => None,
    }
}

/// `path` relative to `root` with `/` separators, whatever the platform.
fn relative_id(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    parts.join("/")
}

fn load_file(path: &Path, id: String, format: &'static str) -> std::result::Result<Document, LoadIssue> {
    let bytes = std::fs::read(path).map_err(|e| LoadIssue::file(path, format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        LoadIssue::file(path, format!("not valid UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })?;
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    };
    let title = if format == FORMAT_MARKDOWN {
        markdown_headings(&text).into_iter().find(|h| h.level == 1).map(|h| h.text)
    } else {
        None
    };
    let title = title.or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()));
    let mut metadata = Metadata::new();
    metadata.insert("format".to_owned(), format.into());
    Ok(Document { source: Some(id.clone()), id, title, text, metadata })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::ErrorKind;

    /// Writes `files` (relative path, bytes) into a temporary folder, loads it, and renders documents and issues.
    fn check(files: &[(&str, &[u8])], expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let got = match load_folder(dir.path()) {
            Ok(loaded) => {
                let mut got = String::new();
                for d in &loaded.items {
                    let format = d.metadata["format"].as_str().unwrap();
                    got.push_str(&format!(
                        "{} source={} title={:?} {format} {:?}\n",
                        d.id,
                        d.source.as_deref().unwrap(),
                        d.title,
                        d.text
                    ));
                }
                for issue in &loaded.issues {
                    got.push_str(&format!("! {}\n", issue.to_string().replace(&dir.path().display().to_string(), "D")));
                }
                got
            }
            Err(e) => format!("error {}: {}", e.kind(), e.message().replace(&dir.path().display().to_string(), "D")),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn loads_markdown_and_text_recursively_in_order() {
        check(
            &[
                ("b.txt", b"plain # not a heading"),
                ("a.md", b"intro\n\n## Sub\n\n# Real Title\n"),
                ("guide/z.markdown", b"Setext\n======\n"),
                ("guide/notes.MD", b"no heading"),
                ("image.png", b"\x89PNG"),
                (".hidden/x.md", b"# hidden"),
                ("guide/.draft.md", b"# draft"),
            ],
            "a.md source=a.md title=Some(\"Real Title\") markdown \"intro\\n\\n## Sub\\n\\n# Real Title\\n\"\n\
             b.txt source=b.txt title=Some(\"b\") text \"plain # not a heading\"\n\
             guide/notes.MD source=guide/notes.MD title=Some(\"notes\") markdown \"no heading\"\n\
             guide/z.markdown source=guide/z.markdown title=Some(\"Setext\") markdown \"Setext\\n======\\n\"\n",
        );
    }

    #[test]
    fn invalid_utf8_file_is_an_issue_and_the_rest_loads() {
        check(
            &[("good.md", b"# Good\n"), ("bad.txt", b"ab\xff\xfecd")],
            "good.md source=good.md title=Some(\"Good\") markdown \"# Good\\n\"\n\
             ! D/bad.txt: not valid UTF-8 (invalid byte at offset 2)\n",
        );
    }

    #[test]
    fn empty_folder_is_invalid_input() {
        check(&[("x.png", b"")], "error invalid_input: no documents found in D");
        check(
            &[("bad.txt", b"\xff")],
            "error invalid_input: no documents found in D (1 problem(s), the first: D/bad.txt: not valid UTF-8 (invalid byte at offset 0))",
        );
    }

    #[test]
    fn single_files_and_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("one.md");
        std::fs::write(&file, "# One\nbody").unwrap();
        let loaded = load_folder(&file).unwrap();
        assert_eq!(loaded.items.len(), 1);
        assert_eq!(loaded.items[0].id, "one.md");
        assert_eq!(loaded.items[0].title.as_deref(), Some("One"));

        let other = dir.path().join("data.csv");
        std::fs::write(&other, "a,b").unwrap();
        assert_eq!(load_folder(&other).unwrap_err().kind(), ErrorKind::InvalidInput);

        let missing = dir.path().join("missing");
        let e = load_folder(&missing).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains(&missing.display().to_string()), "{}", e.message());
    }
}
