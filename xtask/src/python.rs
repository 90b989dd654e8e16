//! The Python virtual environment of xtask's helpers, `$RAGTUNE_HOME/bench-venv`: the Python peer and reference
//! scripts of `cargo xtask bench` and the quantisation script of `cargo xtask models --quantized`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::shell::{self, Shell};

/// The packages, pinned: the same ONNX Runtime as the Rust side loads, `bm25s` (the
/// fastest Python BM25) with the SciPy it needs, and `onnx` for the quantisation script of `cargo xtask models
/// --quantized`.
const PY_REQUIREMENTS: [&str; 6] =
    ["onnxruntime==1.31.1", "tokenizers==0.23.3", "numpy==2.4.6", "bm25s==0.3.16", "scipy==1.17.1", "onnx==1.23.2"];

/// A virtual environment with the pinned reference packages, created once.
pub fn venv(sh: &Shell, home: &Path) -> Result<PathBuf> {
    let dir = home.join("bench-venv");
    let python = dir.join("bin").join("python");
    let stamp = dir.join("requirements.txt");
    let wanted = PY_REQUIREMENTS.join("\n");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(python);
    }
    shell::run(sh.cmd("python3").args(["-m", "venv"]).arg(&dir))?;
    shell::run(
        sh.cmd(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(PY_REQUIREMENTS),
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}
