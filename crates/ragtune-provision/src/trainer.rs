//! The trainer's Python environment (`ragtune train reranker`): Debian's CPU build of PyTorch (`python3-torch`, with
//! OpenBLAS) under the system interpreter, and a virtual environment beside it with the pinned packages the export
//! needs (docs/adr/0026-reranker-trainer.md).
//!
//! PyTorch comes from Debian because the PyPI wheels of torch pull several GB of CUDA libraries that cannot be left
//! out; Debian's build is CPU-only and 185 MB with its dependencies. It is compiled against NumPy 1.x, so the venv
//! pins NumPy 1.26 and the ONNX packages that still accept it.
//!
//! ```text
//! <home>/trainer-venv/              python -m venv --system-site-packages (sees Debian's torch)
//! <home>/trainer-venv/requirements.txt   the pins it was made with; another list remakes it
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use ragtune_core::{Error, Result};

/// The interpreter whose site packages hold Debian's `python3-torch`.
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// The Debian packages the trainer needs: PyTorch (CPU), an optimised BLAS (without it Debian's torch multiplies
/// with the reference BLAS, about 20 times slower) and the venv module of the system interpreter.
pub const DEBIAN_PACKAGES: [&str; 3] = ["python3-torch", "libopenblas0-pthread", "python3-venv"];

/// The venv's packages, pinned: NumPy 1.x (Debian's torch 1.13 is built against it), the tokenizer, ONNX Runtime
/// (the same version the engine loads) and onnx for the export's int8 quantisation.
pub const TRAINER_REQUIREMENTS: [&str; 5] =
    ["numpy==1.26.4", "tokenizers==0.23.3", "onnxruntime==1.31.1", "onnx==1.17.0", "ml_dtypes==0.5.1"];

/// Where the venv lives under `home`.
#[must_use]
pub fn trainer_venv(home: &Path) -> PathBuf {
    home.join("trainer-venv")
}

/// What `python -c "import torch"` says on `python`: the torch version and its BLAS, or why it failed.
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) naming the Debian packages to install.
pub fn torch_info(python: &Path) -> Result<String> {
    let out = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .output()
        .map_err(|e| Error::unavailable(format!("cannot run {}: {e}; {}", python.display(), install_hint())))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or("import torch failed");
        return Err(Error::unavailable(format!(
            "{} cannot import torch ({last}); {}",
            python.display(),
            install_hint()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn install_hint() -> String {
    format!(
        "the reranker trainer needs Debian's PyTorch: `apt-get install {}` (as root), or run `cargo xtask trainer`, \
         which installs them",
        DEBIAN_PACKAGES.join(" ")
    )
}

/// The trainer's interpreter, with the venv made (or remade when its pins changed) over the system interpreter.
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the system interpreter has no torch (the message
/// names the Debian packages) or pip cannot install the pins.
pub fn trainer_python(home: &Path, log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = trainer_venv(home);
    let python = dir.join("bin").join("python");
    let stamp = dir.join("requirements.txt");
    let wanted = TRAINER_REQUIREMENTS.join("\n");
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) && torch_info(&python).is_ok() {
        return Ok(python);
    }
    let torch = torch_info(Path::new(SYSTEM_PYTHON))?;
    log(&format!("making the trainer's environment in {} (torch {torch} from {SYSTEM_PYTHON})", dir.display()));
    let _ = std::fs::remove_dir_all(&dir);
    run(Command::new(SYSTEM_PYTHON).args(["-m", "venv", "--system-site-packages"]).arg(&dir), "python3 -m venv")?;
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"])
            .args(TRAINER_REQUIREMENTS),
        "pip install",
    )?;
    torch_info(&python)?;
    std::fs::write(&stamp, wanted)
        .map_err(|e| Error::permanent(format!("cannot write {}", stamp.display())).with_source(e))?;
    Ok(python)
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().map_err(|e| Error::unavailable(format!("cannot run {what}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        Err(Error::unavailable(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_without_torch_is_unavailable_with_the_packages_to_install() {
        let err = torch_info(Path::new("/nonexistent/python3")).unwrap_err();
        assert_eq!(err.kind(), ragtune_core::ErrorKind::Unavailable);
        assert!(err.to_string().contains("python3-torch libopenblas0-pthread python3-venv"), "{err}");
    }
}
