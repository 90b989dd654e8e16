//! HTML and PDF ingestion on fixtures written by the tests: how much of the source text is recovered, how much
//! boilerplate is kept, page numbers in chunk metadata, and broken files reported per file.

use std::collections::HashMap;
use std::path::Path;

use lopdf::content::{Content, Operation};
use lopdf::{Object, Stream, dictionary};
use ragtune_core::{ChunkKind, Document};
use ragtune_ingest::{ChunkerConfig, chunk_document, load_folder, whole_document_chunk};

/// A PDF with one page per entry of `pages`, each page's text in lines of at most 12 words, written by lopdf.
fn write_pdf(pages: &[String]) -> Vec<u8> {
    let mut doc = lopdf::Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {"Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica"});
    let resources_id = doc.add_object(dictionary! {"Font" => dictionary! {"F1" => font_id}});
    let mut kids = Vec::new();
    for text in pages {
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Tf", vec!["F1".into(), 10.into()]),
            Operation::new("TL", vec![14.into()]),
            Operation::new("Td", vec![50.into(), 780.into()]),
        ];
        for line in words.chunks(12) {
            ops.push(Operation::new("Tj", vec![Object::string_literal(line.join(" "))]));
            ops.push(Operation::new("T*", vec![]));
        }
        ops.push(Operation::new("ET", vec![]));
        let content = Content { operations: ops };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
        let page_id = doc.add_object(dictionary! {"Type" => "Page", "Parent" => pages_id, "Contents" => content_id});
        kids.push(page_id.into());
    }
    let count = i64::try_from(kids.len()).unwrap();
    let pages_dict = dictionary! {
        "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
        "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
    };
    doc.objects.insert(pages_id, Object::Dictionary(pages_dict));
    let catalog_id = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    doc.save_to(&mut out).unwrap();
    out
}

/// `n` words `{prefix}{k}` (distinct, so each can be looked for), with sentence ends every 9 words.
fn words(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|k| if k % 9 == 8 { format!("{prefix}{k}.") } else { format!("{prefix}{k}") })
        .collect::<Vec<_>>()
        .join(" ")
}

fn bag(text: &str) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for w in text.split_whitespace() {
        *m.entry(w.trim_matches(|c: char| !c.is_alphanumeric()).to_owned()).or_insert(0) += 1;
    }
    m
}

/// The share of `source`'s words (with multiplicity) that `got` holds.
fn share_kept(source: &str, got: &str) -> f64 {
    let got = bag(got);
    let source = bag(source);
    let total: usize = source.values().sum();
    let kept: usize = source.iter().map(|(w, n)| (*n).min(got.get(w).copied().unwrap_or(0))).sum();
    kept as f64 / total as f64
}

/// A page with a main article of `article` (a heading and paragraphs) among navigation, scripts, ads, a cookie
/// banner, a sidebar, comments, share buttons and a footer, all written with the `junk` words.
fn page(title: &str, paragraphs: &[String], junk: &[String], with_main: bool) -> String {
    let body: String = paragraphs.iter().map(|p| format!("<p>{p}</p>\n")).collect();
    let (open, close) =
        if with_main { ("<main><article>", "</article></main>") } else { ("<div class=\"content\">", "</div>") };
    format!(
        "<!DOCTYPE html>\n<html><head><title>{title}</title><meta charset=utf-8>\
         <style>body {{ color: red }}</style><script>var tracking = \"{j0}\";</script></head>\n<body>\n\
         <header class=\"site-header\"><a href=\"/\">{j1}</a></header>\n\
         <nav><ul><li><a href=\"/a\">{j2}</a></li><li>{j3}</li></ul></nav>\n\
         <div id=\"cookie-banner\" class=\"consent\">{j4} <button>Accept</button></div>\n\
         {open}<h1>{title}</h1>\n{body}<div class=\"ad ad-slot\">{j5}</div>\n<h2>Details</h2><p>{last}</p>\n\
         <div class=\"share-buttons\">{j6}</div><section id=\"comments\"><p>{j7}</p></section>{close}\n\
         <aside class=\"sidebar\">{j8}</aside>\n<div class=\"advertisement\">{j9}</div>\n\
         <footer><p>{j10}</p></footer>\n<script src=\"x.js\"></script><script>document.write(\"{j11}\")</script>\n\
         </body></html>\n",
        j0 = junk[0],
        j1 = junk[1],
        j2 = junk[2],
        j3 = junk[3],
        j4 = junk[4],
        j5 = junk[5],
        j6 = junk[6],
        j7 = junk[7],
        j8 = junk[8],
        j9 = junk[9],
        j10 = junk[10],
        j11 = junk[11],
        last = paragraphs.last().unwrap(),
    )
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn html_main_content_is_recovered_and_boilerplate_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut source, mut boilerplate) = (String::new(), String::new());
    for (k, with_main) in [(0, true), (1, false), (2, true)] {
        let paragraphs: Vec<String> = (0..4).map(|p| words(&format!("art{k}p{p}w"), 60)).collect();
        let junk: Vec<String> = (0..12).map(|j| words(&format!("junk{k}x{j}w"), 8)).collect();
        let title = format!("Article {k}");
        // The known text: the title heading, every paragraph, the `Details` heading and the last paragraph again.
        source.push_str(&format!("{title} {} Details {}\n", paragraphs.join(" "), paragraphs[3]));
        boilerplate.push_str(&junk.join(" "));
        boilerplate.push(' ');
        write(dir.path(), &format!("page{k}.html"), page(&title, &paragraphs, &junk, with_main).as_bytes());
    }
    let loaded = load_folder(dir.path()).unwrap();
    assert!(loaded.is_clean(), "{:?}", loaded.issues);
    assert_eq!(loaded.items.len(), 3);
    let got: String = loaded.items.iter().map(|d| format!("{}\n", d.text)).collect();
    let recovered = share_kept(&source, &got);
    let kept = share_kept(&boilerplate, &got);
    println!("HTML: source words recovered {:.4}, boilerplate words kept {:.4}", recovered, kept);
    assert!(recovered >= 0.95, "recovered {recovered}");
    assert!(kept <= 0.05, "boilerplate kept {kept}");
    let d = &loaded.items[0];
    assert_eq!((d.title.as_deref(), d.metadata["format"].as_str()), (Some("Article 0"), Some("html")));
    // Headings become sections of the chunker.
    let chunks = chunk_document(d, &ChunkerConfig::default()).unwrap();
    assert!(chunks.iter().any(|c| c.header_path == ["Article 0", "Details"]), "{chunks:#?}");
}

#[test]
fn pdf_text_is_recovered_with_page_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let pages: Vec<String> = (1..=4).map(|p| words(&format!("page{p}w"), 150)).collect();
    write(dir.path(), "report.pdf", &write_pdf(&pages));
    let loaded = load_folder(dir.path()).unwrap();
    assert!(loaded.is_clean(), "{:?}", loaded.issues);
    let d: &Document = &loaded.items[0];
    assert_eq!((d.id.as_str(), d.title.as_deref()), ("report.pdf", Some("report")));
    assert_eq!((d.metadata["format"].as_str(), d.metadata["page_count"].as_u64()), (Some("pdf"), Some(4)));
    let recovered = share_kept(&pages.join(" "), &d.text);
    println!("PDF: source words recovered {recovered:.4}");
    assert!(recovered >= 0.95, "recovered {recovered}");

    // Every passage carries the page of its first word, and of its last when that is another page.
    let chunks = chunk_document(d, &ChunkerConfig::default()).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for c in chunks.iter().filter(|c| c.kind == ChunkKind::Passage) {
        let first_word = c.text.split_whitespace().next().unwrap();
        let last_word = c.text.split_whitespace().last().unwrap();
        let page_of = |w: &str| w.trim_start_matches("page").split('w').next().unwrap().parse::<u64>().unwrap();
        assert_eq!(c.metadata["page"].as_u64(), Some(page_of(first_word)), "{}", c.id);
        let last = c.metadata.get("last_page").and_then(serde_json::Value::as_u64).unwrap_or(page_of(first_word));
        assert_eq!(last, page_of(last_word), "{}", c.id);
        seen.insert(c.metadata["page"].as_u64().unwrap());
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
    // Kept whole, a PDF's chunk spans its pages.
    let whole = whole_document_chunk(d);
    assert_eq!((whole.metadata["page"].as_u64(), whole.metadata["last_page"].as_u64()), (Some(1), Some(4)));
}

#[test]
fn broken_files_are_issues_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_pdf(&[words("alpha", 30), words("beta", 30)]);
    write(dir.path(), "good.pdf", &good);
    write(dir.path(), "corrupt.pdf", &good[..good.len() / 3]);
    write(dir.path(), "garbage.pdf", b"%PDF-1.4\n\x00\x01\x02 not really a pdf \xff\xfe");
    write(dir.path(), "mangled.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ntrailer\n%%EOF\n");
    // A whole file with its middle overwritten: the objects are gone, the end is there.
    let mut middle = good.clone();
    let (a, b) = (good.len() / 4, good.len() * 3 / 4);
    middle[a..b].fill(b'#');
    write(dir.path(), "middle.pdf", &middle);
    write(dir.path(), "x.html", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00");
    write(dir.path(), "latin1.htm", b"<p>caf\xe9</p>");
    write(dir.path(), "page.html", b"<html><title>Fine</title><body><p>Fine words here.</p></body></html>");
    write(dir.path(), "notes.md", b"# Notes\nsome notes");
    let loaded = load_folder(dir.path()).unwrap();
    let ids: Vec<&str> = loaded.items.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["good.pdf", "notes.md", "page.html"]);
    let root = dir.path().display().to_string();
    let issues: Vec<String> = loaded.issues.iter().map(|i| i.to_string().replace(&root, "D")).collect();
    println!("{issues:#?}");
    assert_eq!(issues.len(), 6, "{issues:#?}");
    assert_eq!(issues[0], "D/corrupt.pdf: truncated PDF (no %%EOF marker at its end)");
    assert_eq!(issues[1], "D/garbage.pdf: truncated PDF (no %%EOF marker at its end)");
    assert_eq!(issues[2], "D/latin1.htm: not valid UTF-8 (invalid byte at offset 6)");
    assert!(issues[3].starts_with("D/mangled.pdf: "), "{issues:#?}");
    assert!(issues[4].starts_with("D/middle.pdf: "), "{issues:#?}");
    assert_eq!(issues[5], "D/x.html: binary content, not html (a NUL byte at offset 8)");
}

/// A minimal DOCX (the parts Word needs to open it) with a `Title` paragraph, a heading and `paragraphs`.
fn write_docx(title: &str, heading: &str, paragraphs: &[String]) -> Vec<u8> {
    use std::io::Write;
    let para = |style: Option<&str>, text: &str| {
        let style = style.map(|s| format!("<w:pPr><w:pStyle w:val=\"{s}\"/></w:pPr>")).unwrap_or_default();
        format!("<w:p>{style}<w:r><w:t xml:space=\"preserve\">{text}</w:t></w:r></w:p>")
    };
    let mut body = para(Some("Title"), title) + &para(Some("Heading1"), heading);
    for p in paragraphs {
        body.push_str(&para(None, p));
    }
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\
         <w:document xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"><w:body>{body}</w:body></w:document>"
    );
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    for (name, content) in [
        (
            "[Content_Types].xml",
            "<?xml version=\"1.0\"?><Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\"><Override PartName=\"/word/document.xml\" ContentType=\"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml\"/></Types>",
        ),
        ("word/document.xml", document.as_str()),
    ] {
        zip.start_file(name, opts).unwrap();
        zip.write_all(content.as_bytes()).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[test]
fn docx_text_is_recovered_with_headings_and_broken_ones_are_issues() {
    let dir = tempfile::tempdir().unwrap();
    let paragraphs: Vec<String> = (0..5).map(|p| words(&format!("docx{p}w"), 80)).collect();
    write(dir.path(), "memo.docx", &write_docx("Quarterly memo", "Findings", &paragraphs));
    write(dir.path(), "broken.docx", b"PK\x03\x04 this is no archive");
    let loaded = load_folder(dir.path()).unwrap();
    assert_eq!(loaded.items.len(), 1);
    let d = &loaded.items[0];
    assert_eq!((d.title.as_deref(), d.metadata["format"].as_str()), (Some("Quarterly memo"), Some("docx")));
    let recovered = share_kept(&format!("Quarterly memo Findings {}", paragraphs.join(" ")), &d.text);
    println!("DOCX: source words recovered {recovered:.4}");
    assert!(recovered >= 0.95, "recovered {recovered}");
    let chunks = chunk_document(d, &ChunkerConfig::default()).unwrap();
    assert!(chunks.iter().any(|c| c.header_path == ["Findings"]), "{chunks:#?}");
    let root = dir.path().display().to_string();
    let issues: Vec<String> = loaded.issues.iter().map(|i| i.to_string().replace(&root, "D")).collect();
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert!(issues[0].starts_with("D/broken.docx: not a readable DOCX"), "{issues:#?}");
}
