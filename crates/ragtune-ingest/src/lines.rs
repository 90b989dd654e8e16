//! Line-oriented reading shared by the JSONL and TSV loaders.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use ragtune_core::{Error, Result};

/// Opens `path` for buffered reading; a missing file is [`ErrorKind::NotFound`](ragtune_core::ErrorKind::NotFound).
pub(crate) fn open(path: &Path) -> Result<BufReader<File>> {
    match File::open(path) {
        Ok(file) => Ok(BufReader::new(file)),
        Err(e) => Err(io_error(path, "cannot open", e)),
    }
}

/// Converts an IO failure on `path` into the one ragtune error, naming the path.
pub(crate) fn io_error(path: &Path, doing: &str, e: io::Error) -> Error {
    let kind = if e.kind() == io::ErrorKind::NotFound { Error::not_found } else { Error::permanent };
    kind(format!("{doing} {}: {e}", path.display())).with_source(e)
}

/// Calls `f` with the 1-based number and content of every line of `reader`.
///
/// Lines are read as bytes, so one line that is not UTF-8 reaches `f` as an `Err` and does not stop the others.
/// The line end (`\n` or `\r\n`) is removed, and so is a UTF-8 byte order mark at the start of the first line.
///
/// # Errors
/// A read failure of the underlying reader, naming `path`.
pub(crate) fn for_each_line(
    mut reader: impl BufRead,
    path: &Path,
    mut f: impl FnMut(usize, std::result::Result<&str, std::str::Utf8Error>),
) -> Result<()> {
    let mut buf = Vec::new();
    let mut number = 0usize;
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(|e| io_error(path, "cannot read", e))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        let mut line: &[u8] = &buf;
        if let Some(rest) = line.strip_suffix(b"\n") {
            line = rest;
        }
        if let Some(rest) = line.strip_suffix(b"\r") {
            line = rest;
        }
        if number == 1
            && let Some(rest) = line.strip_prefix("\u{feff}".as_bytes())
        {
            line = rest;
        }
        f(number, std::str::from_utf8(line));
    }
}

/// Describes a UTF-8 failure for an issue message.
pub(crate) fn utf8_message(e: std::str::Utf8Error) -> String {
    format!("not valid UTF-8 (invalid byte at offset {})", e.valid_up_to())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expect: &[&str]) {
        let mut got = Vec::new();
        for_each_line(input, Path::new("x"), |n, line| {
            got.push(match line {
                Ok(l) => format!("{n}:{l}"),
                Err(e) => format!("{n}!{}", utf8_message(e)),
            });
        })
        .unwrap();
        assert_eq!(got, expect);
    }

    #[test]
    fn line_ends_bom_and_bad_utf8() {
        check(b"", &[]);
        check(b"a\r\nb\n\nc", &["1:a", "2:b", "3:", "4:c"]);
        check("\u{feff}a\n".as_bytes(), &["1:a"]);
        check(b"ok\nb\xffd\nok", &["1:ok", "2!not valid UTF-8 (invalid byte at offset 1)", "3:ok"]);
    }

    #[test]
    fn missing_file_is_not_found() {
        let e = open(Path::new("/nonexistent/corpus.jsonl")).unwrap_err();
        assert_eq!(e.kind(), ragtune_core::ErrorKind::NotFound);
        assert!(e.message().contains("/nonexistent/corpus.jsonl"), "{}", e.message());
    }
}
