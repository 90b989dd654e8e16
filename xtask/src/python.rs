//! The Python virtual environments of xtask: `$RAGTUNE_HOME/bench-venv` for the Python peer and reference scripts of
//! `cargo xtask bench` and the quantisation script of `cargo xtask models --quantized`, and
//! `$RAGTUNE_HOME/python-tests-venv` for the tests of the Python surfaces (`python/tests`, run by `cargo xtask ci`).

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
    let wanted: Vec<String> = PY_REQUIREMENTS.iter().map(|r| (*r).to_owned()).collect();
    venv_with(sh, &home.join("bench-venv"), &wanted)
}

/// The environment of the Python surface tests (`python/tests`): the pinned packages of
/// `python/requirements-test.txt` (the official `openai` and `mcp` clients, LangChain, LlamaIndex, pytest), created
/// once per set of pins, then the `ragtune` package of `python/` installed anew (its code changes more often).
pub fn test_venv(sh: &Shell, home: &Path) -> Result<PathBuf> {
    let pins = sh.root().join("python").join("requirements-test.txt");
    let text = std::fs::read_to_string(&pins).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", pins.display()))?;
    let wanted: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    let python = venv_with(sh, &home.join("python-tests-venv"), &wanted)?;
    shell::run(
        sh.cmd(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--force-reinstall",
                "--no-build-isolation",
            ])
            .arg(sh.root().join("python")),
    )?;
    Ok(python)
}

/// A virtual environment in `dir` holding `requirements`, made (or remade) when the recorded list differs.
fn venv_with(sh: &Shell, dir: &Path, requirements: &[String]) -> Result<PathBuf> {
    let python = dir.join("bin").join("python");
    let stamp = dir.join("requirements.txt");
    let wanted = requirements.join("\n");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(python);
    }
    shell::run(sh.cmd("python3").args(["-m", "venv"]).arg(dir))?;
    shell::run(
        sh.cmd(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(requirements),
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}
