//! Partial-failure reports: what a loader loaded and what it had to skip.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One problem a loader met and stepped over: a malformed line, a file that is not UTF-8, a duplicate id.
///
/// Problems that make the whole load meaningless (a missing file, an unknown split, an empty corpus) are
/// [`ragtune_core::Error`]s instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadIssue {
    /// The file the problem is in.
    pub path: PathBuf,
    /// The 1-based line number, for line-oriented files.
    pub line: Option<usize>,
    /// What is wrong, in words.
    pub message: String,
}

impl LoadIssue {
    /// An issue about a whole file.
    pub fn file(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self { path: path.into(), line: None, message: message.into() }
    }

    /// An issue about one line of a file.
    pub fn line(path: impl Into<PathBuf>, line: usize, message: impl Into<String>) -> Self {
        Self { path: path.into(), line: Some(line), message: message.into() }
    }
}

/// Renders as `path:line: message` (or `path: message`), the form compilers use, so editors can jump to it.
impl fmt::Display for LoadIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

/// What a loader produced: the items it could load and the issues it stepped over, both in file order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Loaded<T> {
    /// The loaded items.
    pub items: Vec<T>,
    /// Problems that were skipped; empty when the input was clean.
    pub issues: Vec<LoadIssue>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Self { items: Vec::new(), issues: Vec::new() }
    }
}

impl<T> Loaded<T> {
    /// Whether nothing had to be skipped.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.issues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(issue: &LoadIssue, expect: &str) {
        assert_eq!(issue.to_string(), expect);
    }

    #[test]
    fn display_is_path_line_message() {
        check(
            &LoadIssue::line("corpus.jsonl", 17, "expected value at column 3"),
            "corpus.jsonl:17: expected value at column 3",
        );
        check(&LoadIssue::file("docs/a.md", "not valid UTF-8"), "docs/a.md: not valid UTF-8");
    }
}
