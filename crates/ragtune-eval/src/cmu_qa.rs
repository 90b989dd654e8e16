//! The CMU/Pitt Wikipedia Question-Answer dataset (release 1.2): Wikipedia articles with student-written
//! questions and answers.
//!
//! The layout under the dataset root is one directory per semester (`S08`, `S09`, ...), each with
//! `question_answer_pairs.txt` (tab-separated, a header line, columns `ArticleTitle`, `Question`, `Answer`,
//! `DifficultyFromQuestioner`, `DifficultyFromAnswerer`, `ArticleFile`) and the articles under
//! `data/setN/aM.txt` (raw) and `data/setN/aM.txt.clean` (a little wiki markup removed).
//!
//! The files are not clean, and [`load_cmu_qa`] is written for what they really hold:
//! the same question appears on several lines with different answers (one line per student who answered it);
//! answers may be `NULL` or empty; some lines and articles are not UTF-8 but Windows-1252 (Latin-1 with curly
//! quotes); an answer may end in a stray carriage return or a literal `\n` typed by a student.
//! Note also that the `set4` articles of `S08` and `S09` are the same texts, so a question of one semester is
//! answerable from the other semester's copy.
//!
//! ```no_run
//! use std::path::Path;
//! use ragtune_eval::cmu_qa::{ArticleText, load_cmu_qa};
//!
//! let qa = load_cmu_qa(Path::new("../shared/data/qa/cmu-wiki-qa"), ArticleText::Clean)?;
//! for issue in qa.report.issues() {
//!     eprintln!("{issue}");
//! }
//! let q = &qa.questions[0];
//! println!("{}: {} -> {:?} (in {})", q.id, q.question, q.answers, q.article_id);
//! # Ok::<(), ragtune::core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::collections::hash_map::{Entry, HashMap};
use std::path::{Path, PathBuf};

use ragtune::core::{Document, Error, Metadata, Result};
use ragtune::ingest::LoadIssue;
use serde::{Deserialize, Serialize};

/// An I/O error on `path` as a ragtune error: not-found stays not-found, the rest is permanent.
fn io_error(path: &Path, doing: &str, e: std::io::Error) -> Error {
    let kind = if e.kind() == std::io::ErrorKind::NotFound { Error::not_found } else { Error::permanent };
    kind(format!("{doing} {}: {e}", path.display())).with_source(e)
}

/// The name of the questions file in each semester directory.
const PAIRS_FILE: &str = "question_answer_pairs.txt";

/// The columns of [`PAIRS_FILE`], for messages.
const COLUMNS: &str = "ArticleTitle, Question, Answer, DifficultyFromQuestioner, DifficultyFromAnswerer, ArticleFile";

/// Which of the two article files to load as the document text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArticleText {
    /// `aM.txt.clean`: the article with a little wiki markup removed.
    #[default]
    Clean,
    /// `aM.txt`: the article as first extracted.
    Raw,
}

impl ArticleText {
    fn suffix(self) -> &'static str {
        match self {
            Self::Clean => ".txt.clean",
            Self::Raw => ".txt",
        }
    }
}

/// One question with every usable answer given to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaQuestion {
    /// Stable id: `"{semester}/set{N}/a{M}#q{k}"`, where `k` is the 1-based order of first appearance of the
    /// question among the questions of its article in the questions file.
    /// Questions that were skipped keep their number, so ids do not shift when an answer is filled in.
    pub id: String,
    /// The question as first written (trimmed).
    pub question: String,
    /// Every distinct non-empty, non-`NULL` gold answer (trimmed), in file order.
    pub answers: Vec<String>,
    /// The [`Document::id`] of the article the question is about, e.g. `"S08/set1/a1"`.
    pub article_id: String,
    /// The article's title, underscores turned into spaces (`"Abraham Lincoln"`).
    pub article_title: String,
    /// The question writer's difficulty rating (`easy`, `medium`, `hard`): the first one that is not `NULL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difficulty: Option<String>,
}

impl QaQuestion {
    /// Whether this is a yes/no question: every gold answer starts with the word "yes" or "no" (`"Yes."`,
    /// `"yes, it is"`, `"No"`), ignoring case and leading punctuation.
    /// A question without answers is not a yes/no question.
    #[must_use]
    pub fn is_yes_no(&self) -> bool {
        !self.answers.is_empty() && self.answers.iter().all(|a| matches!(first_word(a).as_str(), "yes" | "no"))
    }
}

/// The first run of letters in `s`, lowercased.
fn first_word(s: &str) -> String {
    s.trim_start_matches(|c: char| !c.is_alphanumeric())
        .chars()
        .take_while(|c| c.is_alphabetic())
        .flat_map(char::to_lowercase)
        .collect()
}

/// What [`load_cmu_qa`] read and what it stepped over.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QaReport {
    /// Data lines read from every questions file (header and blank lines not counted).
    pub lines_read: usize,
    /// Questions kept (the length of [`QaDataset::questions`]).
    pub questions: usize,
    /// Lines merged into a question seen on an earlier line of the same article (same normalised text).
    pub duplicates_merged: usize,
    /// Lines whose answer was `NULL` or empty; their question may still have answers from other lines.
    pub null_answers: usize,
    /// Questions dropped because their article file could not be read.
    pub questions_without_article: usize,
    /// Lines stepped over, as `file:line: why`: a wrong number of fields, no usable `ArticleFile`, no question.
    pub skipped_lines: Vec<LoadIssue>,
    /// Questions dropped because no line gave them a usable answer, each at the line of its first appearance.
    pub skipped_questions: Vec<LoadIssue>,
    /// Article files that could not be read, each at the first line that refers to it; its questions are dropped.
    pub missing_articles: Vec<LoadIssue>,
    /// Lines and article files that were not valid UTF-8 and were decoded as Windows-1252 (which agrees with
    /// Latin-1 on every printable character).
    pub recoded: Vec<LoadIssue>,
    /// Anything else worth knowing: a semester directory without a questions file, an article with two titles.
    pub warnings: Vec<LoadIssue>,
}

impl QaReport {
    /// Every issue, grouped by kind: skipped lines, skipped questions, missing articles, recoded text, warnings.
    pub fn issues(&self) -> impl Iterator<Item = &LoadIssue> {
        self.skipped_lines
            .iter()
            .chain(&self.skipped_questions)
            .chain(&self.missing_articles)
            .chain(&self.recoded)
            .chain(&self.warnings)
    }

    /// Whether nothing was skipped, recoded or warned about.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.issues().next().is_none()
    }
}

/// The dataset: the articles as documents, the questions, and the load report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QaDataset {
    /// One document per article file referenced by a well-formed line and readable, id `"S08/set1/a1"`, title
    /// the article title (underscores as spaces), text the trimmed article, source the file's path, and
    /// metadata `semester`, `set`, `article` and `wiki_title`.
    pub articles: Vec<Document>,
    /// The questions with at least one usable answer and a readable article.
    pub questions: Vec<QaQuestion>,
    /// What was read and what was stepped over.
    pub report: QaReport,
}

impl QaDataset {
    /// The article a question is about.
    #[must_use]
    pub fn article(&self, question: &QaQuestion) -> Option<&Document> {
        self.articles.iter().find(|d| d.id == question.article_id)
    }
}

/// Loads every semester directory (`S08`, `S09`, ...: `S` and digits) under `root`, with the article files
/// chosen by `text`.
///
/// Lines of the same article whose questions are equal after normalisation (case, whitespace, trailing `?` and
/// `.`) are merged into one [`QaQuestion`] whose answers are the distinct usable answers of all of them.
/// Questions without a usable answer and questions whose article file cannot be read are skipped and reported;
/// so are malformed lines. Lines that are not UTF-8 are decoded as Windows-1252 and reported.
/// The order is deterministic: semester, set number, article number, then a question's first appearance.
///
/// # Errors
/// [`ErrorKind::NotFound`](ragtune::core::ErrorKind::NotFound) when `root` is not a directory or holds no
/// semester directory; [`ErrorKind::Permanent`](ragtune::core::ErrorKind::Permanent) when `root` cannot be listed.
/// Everything else is reported in [`QaDataset::report`].
pub fn load_cmu_qa(root: &Path, text: ArticleText) -> Result<QaDataset> {
    if !root.is_dir() {
        return Err(Error::not_found(format!("CMU QA dataset directory {} not found", root.display())));
    }
    let semesters = semester_dirs(root)?;
    if semesters.is_empty() {
        return Err(Error::not_found(format!(
            "no semester directories (S08, S09, ...) in CMU QA dataset directory {}",
            root.display()
        )));
    }
    let mut out = QaDataset { articles: Vec::new(), questions: Vec::new(), report: QaReport::default() };
    for (name, dir) in semesters {
        load_semester(&name, &dir, text, &mut out);
    }
    out.report.questions = out.questions.len();
    Ok(out)
}

/// The semester directories under `root`, ordered by number (then name).
fn semester_dirs(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(root).map_err(|e| io_error(root, "cannot list", e))?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(root, "cannot list", e))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
        let Some(number) = name.strip_prefix('S').and_then(digits) else { continue };
        if path.is_dir() {
            found.push((number, name, path));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, name, path)| (name, path)).collect())
}

/// `s` as a number when it is all ASCII digits (and not too long for `u64`).
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// One article of a semester, gathered from the lines that refer to it.
struct ArticleRows {
    title: String,
    first_line: usize,
    questions: Vec<QuestionRows>,
    by_key: HashMap<String, usize>,
}

/// One question of an article, gathered from its lines.
struct QuestionRows {
    question: String,
    answers: Vec<String>,
    difficulty: Option<String>,
    first_line: usize,
    lines: usize,
}

/// Reads one semester's questions file and the articles it refers to into `out`.
fn load_semester(semester: &str, dir: &Path, text: ArticleText, out: &mut QaDataset) {
    let pairs_path = dir.join(PAIRS_FILE);
    let bytes = match std::fs::read(&pairs_path) {
        Ok(bytes) => bytes,
        Err(e) => {
            let message = io_error(&pairs_path, "cannot read", e).message().to_owned();
            out.report.warnings.push(LoadIssue::file(dir, format!("semester skipped: {message}")));
            return;
        }
    };
    let articles = read_pairs(&pairs_path, &bytes, &mut out.report);
    let files = SemesterFiles { semester, dir, text, pairs_path: &pairs_path };
    for (key, article) in articles {
        files.add_article(key, article, out);
    }
}

/// The articles of one semester's questions file (read from `pairs_path`), each with the questions gathered from
/// its lines; the lines stepped over, merged or recoded are counted in `report`.
fn read_pairs(pairs_path: &Path, bytes: &[u8], report: &mut QaReport) -> BTreeMap<(u64, u64), ArticleRows> {
    // Keyed by (set, article) numbers, so iteration is in numeric order.
    let mut articles: BTreeMap<(u64, u64), ArticleRows> = BTreeMap::new();
    for (n, raw) in split_lines(bytes) {
        let line = decode_line(raw, &mut |message| report.recoded.push(LoadIssue::line(pairs_path, n, message)));
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if n == 1 && fields[0].trim() == "ArticleTitle" {
            continue;
        }
        report.lines_read += 1;
        let [title, question, answer, difficulty, _answerer_difficulty, file] = fields[..] else {
            let message = format!("expected 6 tab-separated fields ({COLUMNS}), found {}", fields.len());
            report.skipped_lines.push(LoadIssue::line(pairs_path, n, message));
            continue;
        };
        let Some(key) = article_key(file.trim()) else {
            let message = format!("ArticleFile {:?} is not of the form data/setN/aM; line skipped", file.trim());
            report.skipped_lines.push(LoadIssue::line(pairs_path, n, message));
            continue;
        };
        let question = question.trim();
        if is_null(question) {
            report.skipped_lines.push(LoadIssue::line(pairs_path, n, "the question is empty or NULL; line skipped"));
            continue;
        }
        let title = title.trim().replace('_', " ");
        let article = articles.entry(key).or_insert_with(|| ArticleRows {
            title: title.clone(),
            first_line: n,
            questions: Vec::new(),
            by_key: HashMap::new(),
        });
        if title != article.title && !title.is_empty() {
            let message = format!(
                "ArticleTitle {title:?} differs from {:?} (line {}) for the same article file; kept the first",
                article.title, article.first_line
            );
            report.warnings.push(LoadIssue::line(pairs_path, n, message));
        }
        article.add_line(n, question, answer, difficulty, report);
    }
    articles
}

impl ArticleRows {
    /// Adds line `n`'s question (merged into an equal question of an earlier line), its difficulty and its answer.
    fn add_line(&mut self, n: usize, question: &str, answer: &str, difficulty: &str, report: &mut QaReport) {
        let index = match self.by_key.entry(question_key(question)) {
            Entry::Occupied(e) => {
                report.duplicates_merged += 1;
                *e.get()
            }
            Entry::Vacant(e) => {
                self.questions.push(QuestionRows {
                    question: question.to_owned(),
                    answers: Vec::new(),
                    difficulty: None,
                    first_line: n,
                    lines: 0,
                });
                *e.insert(self.questions.len() - 1)
            }
        };
        let entry = &mut self.questions[index];
        entry.lines += 1;
        let difficulty = difficulty.trim();
        if entry.difficulty.is_none() && !is_null(difficulty) {
            entry.difficulty = Some(difficulty.to_owned());
        }
        let answer = clean_answer(answer);
        if is_null(answer) {
            report.null_answers += 1;
        } else if !entry.answers.iter().any(|a| a == answer) {
            entry.answers.push(answer.to_owned());
        }
    }
}

/// One semester being loaded: its name, its directory, the article files to read and its questions file.
struct SemesterFiles<'a> {
    semester: &'a str,
    dir: &'a Path,
    text: ArticleText,
    pairs_path: &'a Path,
}

impl SemesterFiles<'_> {
    /// Reads one article of the semester into `out` with its questions that have a usable answer; an article that
    /// cannot be read is reported and its questions are skipped.
    fn add_article(&self, (set, number): (u64, u64), article: ArticleRows, out: &mut QaDataset) {
        let semester = self.semester;
        let article_id = format!("{semester}/set{set}/a{number}");
        let relative = format!("data/set{set}/a{number}");
        let path = self.dir.join(format!("{relative}{}", self.text.suffix()));
        let usable = article.questions.iter().filter(|q| !q.answers.is_empty()).count();
        let body = match read_article(&path, &mut out.report) {
            Ok(body) => body,
            Err(e) => {
                let message = format!(
                    "article {article_id} cannot be read ({}); skipped its {usable} question(s)",
                    io_error(&path, "cannot read", e).message()
                );
                out.report.missing_articles.push(LoadIssue::line(self.pairs_path, article.first_line, message));
                out.report.questions_without_article += usable;
                return;
            }
        };

        for (k, q) in article.questions.into_iter().enumerate() {
            if q.answers.is_empty() {
                let message = format!(
                    "question {:?} has no usable answer ({} line(s), all NULL or empty); skipped",
                    q.question, q.lines
                );
                out.report.skipped_questions.push(LoadIssue::line(self.pairs_path, q.first_line, message));
                continue;
            }
            out.questions.push(QaQuestion {
                id: format!("{article_id}#q{}", k + 1),
                question: q.question,
                answers: q.answers,
                article_id: article_id.clone(),
                article_title: article.title.clone(),
                difficulty: q.difficulty,
            });
        }

        let mut metadata = Metadata::new();
        metadata.insert("semester".to_owned(), semester.into());
        metadata.insert("set".to_owned(), set.into());
        metadata.insert("article".to_owned(), number.into());
        metadata.insert("wiki_title".to_owned(), article.title.replace(' ', "_").into());
        out.articles.push(Document {
            id: article_id,
            title: Some(article.title).filter(|t| !t.is_empty()),
            text: body.trim().to_owned(),
            source: Some(path.display().to_string()),
            metadata,
        });
    }
}

/// An article file's text, decoded line by line; recoded lines are reported in `report`.
fn read_article(path: &Path, report: &mut QaReport) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    let mut bad_lines = Vec::new();
    let body = decode_text(&bytes, &mut bad_lines);
    if let Some(first) = bad_lines.first() {
        let message = format!(
            "not valid UTF-8 on {} line(s) (first: line {first}); decoded them as Windows-1252",
            bad_lines.len()
        );
        report.recoded.push(LoadIssue::file(path, message));
    }
    Ok(body)
}

/// `(set, article)` from an `ArticleFile` value `data/setN/aM`.
fn article_key(file: &str) -> Option<(u64, u64)> {
    let rest = file.strip_prefix("data/set")?;
    let (set, article) = rest.split_once("/a")?;
    Some((digits(set)?, digits(article)?))
}

/// Whether a field holds nothing: empty, blank or `NULL`.
fn is_null(field: &str) -> bool {
    let field = field.trim();
    field.is_empty() || field == "NULL"
}

/// The key two lines of one article are merged on: lowercase, whitespace collapsed, trailing `?`/`.` removed.
fn question_key(question: &str) -> String {
    let lower = question.to_lowercase();
    let collapsed = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed.trim_end_matches(['?', '.', ' ']).to_owned()
}

/// Trims an answer, including escape sequences typed literally at its end (`"No\r\\n"`, `"Totally.\\t"`).
fn clean_answer(answer: &str) -> &str {
    let mut answer = answer.trim();
    while let Some(rest) = ["\\n", "\\t", "\\r"].iter().find_map(|esc| answer.strip_suffix(esc)) {
        answer = rest.trim_end();
    }
    answer
}

/// The lines of `bytes` with their 1-based numbers; the `\n` is removed (a `\r` before it is kept and trimmed
/// away by the field parsing).
fn split_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let empty = bytes.is_empty();
    bytes.split(|&b| b == b'\n').enumerate().filter(move |_| !empty).map(|(i, line)| (i + 1, line))
}

/// Decodes one line: UTF-8 (a byte order mark dropped), or else Windows-1252, calling `recoded` with a message.
fn decode_line(bytes: &[u8], recoded: &mut impl FnMut(String)) -> String {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(e) => {
            recoded(format!("not valid UTF-8 (invalid byte at offset {}); decoded as Windows-1252", e.valid_up_to()));
            windows_1252(bytes)
        }
    }
}

/// Decodes a whole file line by line (so one bad line does not garble the UTF-8 around it), pushing the numbers
/// of recoded lines onto `bad_lines`.
fn decode_text(bytes: &[u8], bad_lines: &mut Vec<usize>) -> String {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let mut out = String::with_capacity(bytes.len());
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match std::str::from_utf8(line) {
            Ok(s) => out.push_str(s),
            Err(_) => {
                bad_lines.push(i + 1);
                out.push_str(&windows_1252(line));
            }
        }
    }
    out
}

/// The characters Windows-1252 puts at 0x80..=0x9F; its five undefined bytes map to the C1 control of the same
/// number, as in Latin-1.
const CP1252_HIGH: [char; 32] = [
    '€', '\u{81}', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', '\u{8d}', 'Ž', '\u{8f}', '\u{90}', '‘', '’',
    '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', '\u{9d}', 'ž', 'Ÿ',
];

/// Decodes Windows-1252; every byte maps to a character, so nothing is lost.
fn windows_1252(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| if (0x80..0xA0).contains(&b) { CP1252_HIGH[usize::from(b - 0x80)] } else { char::from(b) })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ragtune::core::ErrorKind;

    /// Writes `content` to `dir/name`, creating directories.
    pub(crate) fn write(dir: &Path, name: &str, content: &[u8]) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// The header line of a questions file.
    pub(crate) const HEADER: &str =
        "ArticleTitle\tQuestion\tAnswer\tDifficultyFromQuestioner\tDifficultyFromAnswerer\tArticleFile\n";

    /// Two semesters with the troubles of the real files.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let s08 = format!(
            "{HEADER}\
             Abraham_Lincoln\tWas Lincoln the 16th president?\tyes\teasy\teasy\tdata/set1/a10\n\
             Abraham_Lincoln\tWhen was Lincoln born?\tFebruary 12, 1809\tNULL\tmedium\tdata/set1/a10\n\
             Abraham_Lincoln\twas lincoln the 16th  president\tYes.\teasy\thard\tdata/set1/a10\n\
             Abraham_Lincoln\tWhen was Lincoln born?\tNULL\tmedium\tmedium\tdata/set1/a10\n\
             Abraham_Lincoln\tWhen was Lincoln born?\t1809\thard\tmedium\tdata/set1/a10\n\
             Abraham_Lincoln\tWas Lincoln the 16th president?\tyes\teasy\teasy\tdata/set1/a10\n\
             Abraham_Lincoln\tWho shot Lincoln?\tNULL\thard\tNULL\tdata/set1/a10\n\
             Abraham_Lincoln\tWho shot Lincoln?\t\thard\tNULL\tdata/set1/a10\n\
             Kangaroo\tIs a kangaroo a marsupial?\tNo\\r\\n\teasy\teasy\tdata/set1/a2\n\
             Kangaroo\tThis line has too few fields\tdata/set1/a2\n\
             Ghost\tIs this article missing?\tYes\teasy\teasy\tdata/set2/a1\n\
             Ghost\tWhere is it?\tNowhere\teasy\teasy\tNULL\n\
             \n"
        );
        write(root, "S08/question_answer_pairs.txt", s08.as_bytes());
        write(root, "S08/data/set1/a10.txt.clean", b"\n\nAbraham Lincoln was the 16th president.\n\n");
        write(root, "S08/data/set1/a10.txt", b"Abraham Lincoln\n:Raw markup.\n");
        write(root, "S08/data/set1/a2.txt.clean", b"Kangaroo\n\nA marsupial.\n");
        write(root, "S08/data/set1/a2.txt", b"Kangaroo raw\n");
        // S09: a Windows-1252 line in the questions file and a Latin-1 article.
        let mut s09 = HEADER.as_bytes().to_vec();
        s09.extend_from_slice(b"Cello\tWho called it \x93basso\x94?\tMonteverdi\thard\tmedium\tdata/set2/a9\n");
        s09.extend_from_slice(b"Turtle\tWhere are giant tortoises?\tGal\xe1pagos\tmedium\teasy\tdata/set1/a4\n");
        write(root, "S09/question_answer_pairs.txt", &s09);
        write(root, "S09/data/set2/a9.txt.clean", "Cello\n\nThe cello (“violoncello”).\n".as_bytes());
        write(root, "S09/data/set1/a4.txt.clean", b"Turtle\n\nThe Gal\xe1pagos tortoise.\n");
        // Not semesters: ignored.
        write(root, "README.v1.2", b"readme");
        write(root, "Sx/question_answer_pairs.txt", HEADER.as_bytes());
        dir
    }

    fn render(qa: &QaDataset, root: &Path) -> String {
        let mut out = String::new();
        for d in &qa.articles {
            out.push_str(&format!("doc {} {:?} {:?}\n", d.id, d.title.as_deref().unwrap_or(""), d.text));
        }
        for q in &qa.questions {
            out.push_str(&format!(
                "q {} {:?} {:?} {} {} yes_no={}\n",
                q.id,
                q.question,
                q.answers,
                q.article_title,
                q.difficulty.as_deref().unwrap_or("-"),
                q.is_yes_no()
            ));
        }
        for issue in qa.report.issues() {
            out.push_str(&format!("! {issue}\n"));
        }
        out.replace(&root.display().to_string(), "D")
    }

    #[test]
    fn loads_two_semesters_merging_and_reporting() {
        let dir = fixture();
        let qa = load_cmu_qa(dir.path(), ArticleText::Clean).unwrap();
        let expect = "\
doc S08/set1/a2 \"Kangaroo\" \"Kangaroo\\n\\nA marsupial.\"
doc S08/set1/a10 \"Abraham Lincoln\" \"Abraham Lincoln was the 16th president.\"
doc S09/set1/a4 \"Turtle\" \"Turtle\\n\\nThe Galápagos tortoise.\"
doc S09/set2/a9 \"Cello\" \"Cello\\n\\nThe cello (“violoncello”).\"
q S08/set1/a2#q1 \"Is a kangaroo a marsupial?\" [\"No\"] Kangaroo easy yes_no=true
q S08/set1/a10#q1 \"Was Lincoln the 16th president?\" [\"yes\", \"Yes.\"] Abraham Lincoln easy yes_no=true
q S08/set1/a10#q2 \"When was Lincoln born?\" [\"February 12, 1809\", \"1809\"] Abraham Lincoln medium yes_no=false
q S09/set1/a4#q1 \"Where are giant tortoises?\" [\"Galápagos\"] Turtle medium yes_no=false
q S09/set2/a9#q1 \"Who called it “basso”?\" [\"Monteverdi\"] Cello hard yes_no=false
! D/S08/question_answer_pairs.txt:11: expected 6 tab-separated fields (ArticleTitle, Question, Answer, DifficultyFromQuestioner, DifficultyFromAnswerer, ArticleFile), found 3
! D/S08/question_answer_pairs.txt:13: ArticleFile \"NULL\" is not of the form data/setN/aM; line skipped
! D/S08/question_answer_pairs.txt:8: question \"Who shot Lincoln?\" has no usable answer (2 line(s), all NULL or empty); skipped
! D/S08/question_answer_pairs.txt:12: article S08/set2/a1 cannot be read (cannot read D/S08/data/set2/a1.txt.clean: No such file or directory (os error 2)); skipped its 1 question(s)
! D/S09/question_answer_pairs.txt:2: not valid UTF-8 (invalid byte at offset 20); decoded as Windows-1252
! D/S09/question_answer_pairs.txt:3: not valid UTF-8 (invalid byte at offset 37); decoded as Windows-1252
! D/S09/data/set1/a4.txt.clean: not valid UTF-8 on 1 line(s) (first: line 3); decoded them as Windows-1252
";
        assert_eq!(render(&qa, dir.path()), expect);
        let r = &qa.report;
        assert_eq!((r.lines_read, r.questions, r.duplicates_merged, r.null_answers), (14, 5, 5, 3));
        assert_eq!(r.questions_without_article, 1);
        assert!(!r.is_clean());
        let lincoln = &qa.questions[1];
        assert_eq!(qa.article(lincoln).unwrap().id, "S08/set1/a10");
        assert_eq!(qa.articles[1].metadata.get("wiki_title"), Some(&serde_json::json!("Abraham_Lincoln")));
        assert_eq!(qa.articles[1].metadata.get("set"), Some(&serde_json::json!(1)));

        let raw = load_cmu_qa(dir.path(), ArticleText::Raw).unwrap();
        assert_eq!(raw.articles[1].text, "Abraham Lincoln\n:Raw markup.");
        assert_eq!(raw.questions, qa.questions[..3]);
        // S09's raw files are absent in the fixture, so its two articles and questions are reported missing.
        assert_eq!(raw.articles.len(), 2);
        assert_eq!(raw.report.missing_articles.len(), 3);
        assert_eq!(raw.report.questions_without_article, 3);
    }

    #[test]
    fn ids_are_stable_when_an_earlier_question_has_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        let pairs =
            format!("{HEADER}T\tFirst?\tNULL\teasy\teasy\tdata/set1/a1\nT\tSecond?\tno\teasy\teasy\tdata/set1/a1\n");
        write(dir.path(), "S10/question_answer_pairs.txt", pairs.as_bytes());
        write(dir.path(), "S10/data/set1/a1.txt.clean", b"text");
        let qa = load_cmu_qa(dir.path(), ArticleText::default()).unwrap();
        assert_eq!(qa.questions.len(), 1);
        assert_eq!(qa.questions[0].id, "S10/set1/a1#q2");
        assert_eq!(qa.report.skipped_questions.len(), 1);
    }

    #[test]
    fn missing_root_or_no_semesters_is_not_found() {
        let e = load_cmu_qa(Path::new("/nonexistent/cmu-wiki-qa"), ArticleText::Clean).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("/nonexistent/cmu-wiki-qa"), "{}", e.message());

        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "README", b"x");
        let e = load_cmu_qa(dir.path(), ArticleText::Clean).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e.message().contains("no semester directories"), "{}", e.message());

        // A semester directory without its questions file is a warning, not an error.
        std::fs::create_dir(dir.path().join("S08")).unwrap();
        let qa = load_cmu_qa(dir.path(), ArticleText::Clean).unwrap();
        assert!(qa.questions.is_empty());
        assert_eq!(qa.report.warnings.len(), 1);
        assert!(qa.report.warnings[0].message.starts_with("semester skipped: cannot read"), "{:?}", qa.report);
    }

    #[test]
    fn helpers() {
        assert_eq!(question_key("  Was  Lincoln THE president? "), "was lincoln the president");
        assert_eq!(clean_answer(" No\r\\n"), "No");
        assert_eq!(clean_answer("Totally.\\t"), "Totally.");
        assert_eq!(clean_answer("a\\nb"), "a\\nb");
        assert_eq!(article_key("data/set3/a10"), Some((3, 10)));
        assert_eq!(article_key("data/set3/../a1"), None);
        assert_eq!(article_key("NULL"), None);
        assert_eq!(windows_1252(b"\x93a\x94 \xe9\x81"), "“a” é\u{81}");
        assert_eq!(first_word("  \"Yes, it is"), "yes");
        assert_eq!(first_word("Nope"), "nope");
        let q = |answers: &[&str]| QaQuestion {
            id: String::new(),
            question: String::new(),
            answers: answers.iter().map(|a| (*a).to_owned()).collect(),
            article_id: String::new(),
            article_title: String::new(),
            difficulty: None,
        };
        assert!(q(&["Yes.", "yes, it is", "No"]).is_yes_no());
        assert!(!q(&["Yes.", "Totally."]).is_yes_no());
        assert!(!q(&["Nobody"]).is_yes_no());
        assert!(!q(&[]).is_yes_no());
    }

    /// The real dataset, when this machine has it.
    #[test]
    fn loads_the_real_dataset() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/qa/cmu-wiki-qa");
        let root = root.canonicalize().unwrap_or(root);
        if !root.is_dir() {
            println!("SKIPPED: {} not found (CMU QA counts were NOT checked)", root.display());
            return;
        }
        let qa = load_cmu_qa(&root, ArticleText::Clean).unwrap();
        let r = &qa.report;
        let yes_no = qa.questions.iter().filter(|q| q.is_yes_no()).count();
        println!(
            "CMU QA: {} articles, {} questions ({} yes/no, {:.1}%), {} lines read, {} duplicates merged, \
             {} NULL/empty answers, {} skipped lines, {} questions without answer, {} missing articles, \
             {} recoded, {} warnings",
            qa.articles.len(),
            qa.questions.len(),
            yes_no,
            100.0 * yes_no as f64 / qa.questions.len() as f64,
            r.lines_read,
            r.duplicates_merged,
            r.null_answers,
            r.skipped_lines.len(),
            r.skipped_questions.len(),
            r.missing_articles.len(),
            r.recoded.len(),
            r.warnings.len()
        );
        for issue in r.skipped_lines.iter().chain(&r.missing_articles).chain(&r.recoded).chain(&r.warnings) {
            println!("  {issue}");
        }
        assert!((70..=90).contains(&qa.articles.len()), "{}", qa.articles.len());
        assert!((1200..=1600).contains(&qa.questions.len()), "{}", qa.questions.len());
        assert!((0.3..0.6).contains(&(yes_no as f64 / qa.questions.len() as f64)));
        // The real files have 19 lines with neither question nor answer (all fields NULL but title and file).
        assert!(r.skipped_lines.len() < 40 && r.missing_articles.is_empty(), "{r:?}");
        assert!(r.skipped_lines.iter().all(|i| i.message.starts_with("the question is empty")), "{r:?}");
        assert!(qa.articles.iter().all(|d| d.text.len() > 1000), "an article is nearly empty");
        let ids: std::collections::BTreeSet<&str> = qa.questions.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids.len(), qa.questions.len(), "question ids are unique");
        assert!(qa.questions.iter().all(|q| qa.article(q).is_some()));
        let raw = load_cmu_qa(&root, ArticleText::Raw).unwrap();
        assert_eq!(raw.questions, qa.questions);
    }
}
