//! Folders of Markdown, plain-text, HTML and PDF files.

use std::io::Read;
use std::path::{Component, Path};

use ragtune_core::{Document, Error, Metadata, Result};
use walkdir::WalkDir;

use crate::chunk::markdown_headings;
use crate::jsonl::require_some;
use crate::lines::io_error;
use crate::markdown::{front_matter_len, front_matter_title};
use crate::pdf::pdf_text;
use crate::{LoadIssue, Loaded};

/// The `format` metadata value of Markdown documents.
pub const FORMAT_MARKDOWN: &str = "markdown";
/// The `format` metadata value of plain-text documents; the chunker does not look for headings in them.
pub const FORMAT_TEXT: &str = "text";

/// The `format` metadata value of HTML pages; their text is the page's main content as Markdown-like text.
pub const FORMAT_HTML: &str = "html";
/// The `format` metadata value of PDF documents; their text has one [`PAGE_BREAK`](crate::PAGE_BREAK) between pages.
pub const FORMAT_PDF: &str = "pdf";

/// The `format` metadata value of Word documents (`.docx`); their text has their headings as `#` lines.
pub const FORMAT_DOCX: &str = "docx";

/// The largest file [`load_folder`] reads, in bytes (64 MiB).
///
/// A Markdown or text file this large is almost always a log, a dump or a mistake, and the loader holds each file
/// in memory whole (and the chunker and the indexer hold copies), so a bigger file is skipped with a
/// [`LoadIssue`] naming its size and this cap. The size is taken from the file's metadata before anything is read.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Loads every `.md`/`.markdown` (Markdown), `.txt` (plain text), `.html`/`.htm`/`.xhtml` (HTML), `.pdf` and
/// `.docx` (Word) file under `path`, recursively.
///
/// Files are visited in file-name order at each level, so the result is the same on every machine.
/// Hidden files and directories (names starting with `.`) and files with other extensions are skipped.
/// A document's id and `source` are its path relative to `path`, with `/` separators (`guide/install.md`).
/// Its title is the text of the first level-1 heading for Markdown (else the `title:` of its YAML front matter,
/// [`front_matter_title`](crate::front_matter_title)), the `<title>` (else the first `<h1>`) for HTML, else the
/// file stem.
/// Its metadata has `format` = `"markdown"`, `"text"`, `"html"`, `"pdf"` or `"docx"`.
/// A DOCX's text is its paragraphs, with `Heading1`–`Heading6` and `Title` paragraphs as `#` lines; its title is
/// its `Title` paragraph, else the file stem.
/// An HTML page's text is its main content (`<main>`, else its `<article>`s, else the body) without scripts,
/// styles, navigation, headers, footers, asides, forms, and elements whose `class`, `id` or `role` mark them as
/// ads, menus, cookie banners, sidebars, comments or share widgets; headings become `#` lines, so the chunker's
/// header paths work.
/// A PDF's text is its pages' texts joined by [`PAGE_BREAK`](crate::PAGE_BREAK); its metadata also has `page_count`, and the
/// chunker gives each of its chunks `page` (and `last_page` when it runs onto another page).
/// A file that cannot be read, is not UTF-8 (HTML, Markdown, text), holds NUL bytes (binary content), or is a
/// corrupt, encrypted or textless PDF or DOCX becomes a [`LoadIssue`] and the others still load.
///
/// Symbolic links inside the folder are not followed, so that indexing never reads outside the tree it was given
/// (a link to `/etc` or to a home directory) and never loops (a link to `..`): each one is a [`LoadIssue`]
/// (`skipped symlink`). `path` itself may be a link. Files larger than [`MAX_FILE_BYTES`] are skipped with a
/// [`LoadIssue`] as well, before any of their bytes are read.
///
/// `path` may also be a single file, which then loads alone (its id is its file name).
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound) when `path` does not exist;
/// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when it holds no loadable document, or is a
/// single file of an unsupported type; each names the path.
pub fn load_folder(path: impl AsRef<Path>) -> Result<Loaded<Document>> {
    load_folder_excluding(path, &[])
}

/// [`load_folder`] without the files and folders that `exclude`'s glob patterns match, gitignore-style: a pattern
/// without `/` matches a file or folder name at any depth (`experiments`, `*.txt`, `draft-*`); a pattern with `/`
/// matches the path relative to `path` (`docs/experiments`, `notes/**/*.md`; a leading `/` is allowed). `*` stays
/// within one path component, `**` spans any number. An excluded folder is not entered. A single `path` file is
/// loaded whatever the patterns say (it was named).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # std::fs::create_dir_all(dir.path().join("experiments")).unwrap();
/// # std::fs::write(dir.path().join("guide.md"), "# Guide\n\nHow to start.").unwrap();
/// # std::fs::write(dir.path().join("experiments/2026-11-29.md"), "# Log\n\nWhat we tried.").unwrap();
/// let loaded = ragtune_ingest::load_folder_excluding(dir.path(), &["experiments".to_owned()]).unwrap();
/// assert_eq!(loaded.items.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["guide.md"]);
/// ```
///
/// # Errors
/// As [`load_folder`]; [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) for a pattern that is
/// not a glob (an unclosed `[` or `{`), naming it.
pub fn load_folder_excluding(path: impl AsRef<Path>, exclude: &[String]) -> Result<Loaded<Document>> {
    let root = path.as_ref();
    let exclude = Exclude::new(exclude)?;
    let meta = std::fs::metadata(root).map_err(|e| io_error(root, "cannot open", e))?;
    let mut out = Loaded::default();
    if meta.is_file() {
        let Some(format) = format_of(root) else {
            return Err(Error::invalid_input(format!(
                "{}: unsupported file type (expected .md, .markdown, .txt, .html, .htm, .xhtml, .pdf or .docx)",
                root.display()
            )));
        };
        let id = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match check_size(root, meta.len()).and_then(|()| load_file(root, id, format)) {
            Ok(doc) => out.items.push(doc),
            Err(issue) => out.issues.push(issue),
        }
    } else {
        // Links below the root are reported, not followed (see above); the root itself is resolved, since the
        // caller named it.
        let walk = WalkDir::new(root)
            .follow_links(false)
            .follow_root_links(true)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                e.depth() == 0
                    || (!e.file_name().to_string_lossy().starts_with('.')
                        && !exclude.matches(&relative_id(root, e.path())))
            });
        for entry in walk {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let at = e.path().unwrap_or(root).to_path_buf();
                    out.issues.push(LoadIssue::file(at, format!("cannot read: {e}")));
                    continue;
                }
            };
            if entry.depth() > 0 && entry.path_is_symlink() {
                out.issues.push(LoadIssue::file(entry.path(), SKIPPED_SYMLINK));
                continue;
            }
            if !entry.file_type().is_file() {
                continue;
            }
            let Some(format) = format_of(entry.path()) else { continue };
            let id = relative_id(root, entry.path());
            let size = entry.metadata().map_err(|e| LoadIssue::file(entry.path(), format!("cannot read: {e}")));
            match size
                .and_then(|m| check_size(entry.path(), m.len()))
                .and_then(|()| load_file(entry.path(), id, format))
            {
                Ok(doc) => out.items.push(doc),
                Err(issue) => out.issues.push(issue),
            }
        }
    }
    require_some(&out, root, "documents")?;
    Ok(out)
}

/// The glob patterns of [`load_folder_excluding`]: names (no `/`) and paths relative to the folder.
struct Exclude {
    names: globset::GlobSet,
    paths: globset::GlobSet,
}

impl Exclude {
    fn new(patterns: &[String]) -> Result<Self> {
        let mut names = globset::GlobSetBuilder::new();
        let mut paths = globset::GlobSetBuilder::new();
        for pattern in patterns {
            let trimmed = pattern.trim().trim_end_matches('/');
            if trimmed.is_empty() {
                return Err(Error::invalid_input(format!("exclude pattern {pattern:?} is empty")));
            }
            let glob = globset::GlobBuilder::new(trimmed.trim_start_matches('/'))
                .literal_separator(true)
                .build()
                .map_err(|e| Error::invalid_input(format!("exclude pattern {pattern:?} is not a glob: {e}")))?;
            if trimmed.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |set: globset::GlobSetBuilder| {
            set.build().map_err(|e| Error::invalid_input(format!("exclude patterns {patterns:?}: {e}")))
        };
        Ok(Self { names: build(names)?, paths: build(paths)? })
    }

    /// Whether the file or folder at `relative` (`/`-separated, from the folder) is excluded.
    fn matches(&self, relative: &str) -> bool {
        let name = relative.rsplit('/').next().unwrap_or(relative);
        self.names.is_match(name) || self.paths.is_match(relative)
    }
}

/// The document format of a file, from its extension (case-insensitive); `None` for files we do not load.
fn format_of(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" => Some(FORMAT_MARKDOWN),
        "txt" => Some(FORMAT_TEXT),
        "html" | "htm" | "xhtml" => Some(FORMAT_HTML),
        "pdf" => Some(FORMAT_PDF),
        "docx" => Some(FORMAT_DOCX),
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

/// The issue message of a symbolic link found inside a folder.
const SKIPPED_SYMLINK: &str = "skipped symlink (links inside the folder are not followed)";

/// An issue when a file of `size` bytes is over [`MAX_FILE_BYTES`].
fn check_size(path: &Path, size: u64) -> std::result::Result<(), LoadIssue> {
    if size > MAX_FILE_BYTES {
        return Err(LoadIssue::file(path, too_large(size)));
    }
    Ok(())
}

fn too_large(size: u64) -> String {
    format!(
        "skipped: the file is {size} bytes, over the cap of {MAX_FILE_BYTES} bytes ({} MiB) on one file",
        MAX_FILE_BYTES >> 20
    )
}

fn load_file(path: &Path, id: String, format: &'static str) -> std::result::Result<Document, LoadIssue> {
    let cannot_read = |e: std::io::Error| LoadIssue::file(path, format!("cannot read: {e}"));
    // The size was checked from the metadata; reading at most one byte past the cap also stops a file that grew
    // since then, without holding more than the cap.
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)).map_err(cannot_read)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        let message =
            format!("skipped: the file grew past the cap of {MAX_FILE_BYTES} bytes on one file while it was read");
        return Err(LoadIssue::file(path, message));
    }
    let mut metadata = Metadata::new();
    metadata.insert("format".to_owned(), format.into());
    let stem = || path.file_stem().map(|s| s.to_string_lossy().into_owned());
    if format == FORMAT_PDF {
        let (text, pages) = pdf_text(&bytes).map_err(|m| LoadIssue::file(path, m))?;
        metadata.insert("page_count".to_owned(), pages.into());
        return Ok(Document { source: Some(id.clone()), id, title: stem(), text, metadata });
    }
    if format == FORMAT_DOCX {
        let (title, text) = crate::docx::docx_text(&bytes).map_err(|m| LoadIssue::file(path, m))?;
        return Ok(Document { source: Some(id.clone()), id, title: title.or_else(stem), text, metadata });
    }
    // Text formats never hold NUL; a file that does is binary whatever its name (an image saved as `.html`).
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(LoadIssue::file(path, format!("binary content, not {format} (a NUL byte at offset {at})")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        LoadIssue::file(path, format!("not valid UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })?;
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    };
    let (title, text) = match format {
        FORMAT_MARKDOWN => {
            // Front matter is no heading (its closing `---` would make its last line a Setext heading).
            let body = &text[front_matter_len(&text)..];
            let h1 = markdown_headings(body).into_iter().find(|h| h.level == 1).map(|h| h.text);
            (h1.or_else(|| front_matter_title(&text)), text)
        }
        FORMAT_HTML => {
            let page = ragtune_core::html::extract(&text);
            (page.title, page.text)
        }
        _ => (None, text),
    };
    Ok(Document { source: Some(id.clone()), id, title: title.or_else(stem), text, metadata })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragtune_core::ErrorKind;

    /// Writes `files` (relative path, bytes) into a temporary folder, loads it, and renders documents and issues.
    fn check(files: &[(&str, &[u8])], expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), files);
        assert_eq!(render(dir.path()), expect);
    }

    fn write(root: &Path, files: &[(&str, &[u8])]) {
        for (name, content) in files {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    /// Loads `root` and renders one line per document, then `! issue` lines, with `root` written `D`.
    fn render(root: &Path) -> String {
        let root_text = root.display().to_string();
        match load_folder(root) {
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
                    got.push_str(&format!("! {}\n", issue.to_string().replace(&root_text, "D")));
                }
                got
            }
            Err(e) => format!("error {}: {}", e.kind(), e.message().replace(&root_text, "D")),
        }
    }

    #[test]
    fn exclude_patterns_skip_names_at_any_depth_and_paths_from_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let files: &[(&str, &[u8])] = &[
            ("guide.md", b"g"),
            ("notes.txt", b"n"),
            ("experiments/log.md", b"e"),
            ("ref/experiments/old.md", b"o"),
            ("ref/api.md", b"a"),
            ("ref/drafts/x.md", b"x"),
            ("drafts/y.md", b"y"),
            ("draft-z.md", b"z"),
        ];
        write(dir.path(), files);
        let ids = |exclude: &[&str]| -> Vec<String> {
            let exclude: Vec<String> = exclude.iter().map(|p| (*p).to_owned()).collect();
            let loaded = load_folder_excluding(dir.path(), &exclude).unwrap();
            loaded.items.iter().map(|d| d.id.clone()).collect()
        };
        let all = ["draft-z.md", "drafts/y.md", "experiments/log.md", "guide.md", "notes.txt", "ref/api.md"];
        assert_eq!(ids(&[])[..6], all);
        // A name: at any depth, folders are not entered.
        assert_eq!(
            ids(&["experiments"]),
            ["draft-z.md", "drafts/y.md", "guide.md", "notes.txt", "ref/api.md", "ref/drafts/x.md"]
        );
        // A glob on names, and a trailing slash.
        assert_eq!(ids(&["*.txt", "draft*/", "experiments"]), ["guide.md", "ref/api.md"]);
        // A path from the folder: only there (`ref/drafts` stays out, `drafts/` at the top stays in).
        assert_eq!(
            ids(&["/ref/drafts", "ref/experiments/**"]),
            ["draft-z.md", "drafts/y.md", "experiments/log.md", "guide.md", "notes.txt", "ref/api.md"]
        );
        // `*` stays in one component; `**` spans several.
        assert_eq!(ids(&["ref/*.md"]).len(), 8 - 1);
        assert_eq!(ids(&["ref/**/*.md"]).len(), 8 - 3);
        // Everything excluded: the folder holds no documents.
        let err = load_folder_excluding(dir.path(), &["*".to_owned()]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        // A pattern that is not a glob, and an empty one, are named.
        for bad in ["ref/[a", "", "  "] {
            let err = load_folder_excluding(dir.path(), &[bad.to_owned()]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains(&format!("{bad:?}")), "{}", err.message());
        }
        // A single file is loaded whatever the patterns say.
        let one = load_folder_excluding(dir.path().join("guide.md"), &["*".to_owned()]).unwrap();
        assert_eq!(one.items.len(), 1);
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
    fn markdown_titles_come_from_the_first_h1_else_the_front_matter() {
        check(
            &[
                ("a.md", b"---\ntitle: From front matter\n---\nBody\n"),
                ("b.md", b"---\ntitle: Ignored\n---\n# Heading wins\n"),
                ("c.md", b"---\nlayout: x\n---\ntext\n"),
            ],
            "a.md source=a.md title=Some(\"From front matter\") markdown \"---\\ntitle: From front matter\\n---\\nBody\\n\"\n\
             b.md source=b.md title=Some(\"Heading wins\") markdown \"---\\ntitle: Ignored\\n---\\n# Heading wins\\n\"\n\
             c.md source=c.md title=Some(\"c\") markdown \"---\\nlayout: x\\n---\\ntext\\n\"\n",
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

    #[cfg(unix)]
    #[test]
    fn symlinks_are_reported_not_followed() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), &[("secret.md", b"# Secret\nprivate key material")]);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("good.md", b"# Good\n"), ("sub/inner.txt", b"inner")]);
        symlink(outside.path().join("secret.md"), dir.path().join("link.md")).unwrap();
        symlink(outside.path(), dir.path().join("outside-dir")).unwrap();
        symlink(dir.path().join("sub/inner.txt"), dir.path().join("sub/same.txt")).unwrap();
        assert_eq!(
            render(dir.path()),
            "good.md source=good.md title=Some(\"Good\") markdown \"# Good\\n\"\n\
             sub/inner.txt source=sub/inner.txt title=Some(\"inner\") text \"inner\"\n\
             ! D/link.md: skipped symlink (links inside the folder are not followed)\n\
             ! D/outside-dir: skipped symlink (links inside the folder are not followed)\n\
             ! D/sub/same.txt: skipped symlink (links inside the folder are not followed)\n",
        );
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loops_are_reported_and_the_rest_loads() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("a/good.md", b"# Good\n")]);
        symlink("..", dir.path().join("a/up")).unwrap();
        symlink(dir.path(), dir.path().join("a/root")).unwrap();
        symlink("self.md", dir.path().join("self.md")).unwrap();
        assert_eq!(
            render(dir.path()),
            "a/good.md source=a/good.md title=Some(\"Good\") markdown \"# Good\\n\"\n\
             ! D/a/root: skipped symlink (links inside the folder are not followed)\n\
             ! D/a/up: skipped symlink (links inside the folder are not followed)\n\
             ! D/self.md: skipped symlink (links inside the folder are not followed)\n",
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_root_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("real/one.md", b"# One\n")]);
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("alias")).unwrap();
        let loaded = load_folder(dir.path().join("alias")).unwrap();
        assert_eq!(loaded.items.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["one.md"]);
        assert!(loaded.is_clean(), "{:?}", loaded.issues);
    }

    #[test]
    fn files_over_the_cap_are_skipped_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &[("good.md", b"# Good\n")]);
        // Sparse: the size is in the metadata, no byte is written (and none may be read).
        let big = dir.path().join("huge.txt");
        std::fs::File::create(&big).unwrap().set_len(MAX_FILE_BYTES + 1).unwrap();
        assert_eq!(
            render(dir.path()),
            "good.md source=good.md title=Some(\"Good\") markdown \"# Good\\n\"\n\
             ! D/huge.txt: skipped: the file is 67108865 bytes, over the cap of 67108864 bytes (64 MiB) on one file\n",
        );
        // A single file over the cap is an issue too, and then there is nothing to load.
        let e = load_folder(&big).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().contains("huge.txt: skipped: the file is 67108865 bytes"), "{}", e.message());
    }
}
