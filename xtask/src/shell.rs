//! Running child processes from the workspace root with a controlled `PATH`.
//!
//! Edition 2024 makes `std::env::set_var` unsafe and the workspace denies `unsafe_code`, so tools that provisioning
//! installs reach child processes through an explicit `PATH` on every [`Command`] instead of the process environment.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The workspace root and the `PATH` every child process gets.
#[derive(Debug, Clone)]
pub struct Shell {
    root: PathBuf,
    path: OsString,
    /// Variables every `cargo` child gets (see [`Shell::cargo_env`]).
    cargo_env: Vec<(OsString, OsString)>,
}

impl Shell {
    /// A shell at the workspace root with this process's `PATH`.
    pub fn new() -> Self {
        Self { root: project_root(), path: std::env::var_os("PATH").unwrap_or_default(), cargo_env: Vec::new() }
    }

    /// The workspace root (the directory holding the root `Cargo.toml`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Cargo's target directory, where provisioned tools are cached.
    pub fn target_dir(&self) -> PathBuf {
        match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => self.root.join(dir),
            None => self.root.join("target"),
        }
    }

    /// Puts `dir` in front of the `PATH` that child processes get, unless it is already there.
    pub fn prepend_path(&mut self, dir: &Path) -> Result<()> {
        let mut dirs: Vec<PathBuf> = std::env::split_paths(&self.path).collect();
        if dirs.first().is_some_and(|first| first == dir) {
            return Ok(());
        }
        dirs.retain(|existing| existing != dir);
        dirs.insert(0, dir.to_path_buf());
        self.path = std::env::join_paths(dirs).with_context(|| format!("cannot put {} on PATH", dir.display()))?;
        Ok(())
    }

    /// Sets `key=value` on every `cargo` command this shell makes from now on (CI turns incremental builds off).
    pub fn cargo_env(&mut self, key: &str, value: &str) {
        self.cargo_env.retain(|(existing, _)| existing != key);
        self.cargo_env.push((key.into(), value.into()));
    }

    /// A command run from the workspace root, with our `PATH` and no stdin (CI has none).
    pub fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root).env("PATH", &self.path).stdin(Stdio::null());
        cmd
    }

    /// `cargo <args>` run from the workspace root, without the package variables `cargo run` gave xtask.
    ///
    /// Build scripts such as ring's declare `rerun-if-env-changed=CARGO_PKG_NAME` (and `CARGO_MANIFEST_DIR`, …), and
    /// cargo compares those with its own environment: a nested cargo that inherited `CARGO_PKG_NAME=xtask` would
    /// rebuild ring and everything above it (minutes) whenever the developer had built from a plain shell, and the
    /// other way round.
    pub fn cargo(&self, args: &[&str]) -> Command {
        let mut cmd = self.cmd(cargo());
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(is_package_variable) {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.cargo_env.iter().map(|(key, value)| (key, value)));
        cmd.args(args);
        cmd
    }
}

/// Whether `key` is one of the variables cargo sets for the package it runs (its manifest, name, version, …).
fn is_package_variable(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// The cargo that runs us (`$CARGO`), so that child commands use the same toolchain.
pub fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The workspace root: xtask lives one level below it.
pub fn project_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// Runs `cmd` with inherited stdout/stderr, echoing it first; fails naming the command when it does.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = display(cmd);
    println!("$ {shown}");
    let status = cmd.status().with_context(|| format!("cannot start `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout, or `None` when it cannot start or exits non-zero.
pub fn probe(cmd: &mut Command) -> Option<String> {
    let output = cmd.stderr(Stdio::null()).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The command line as a person would type it, with the program's file name rather than its full path.
pub fn display(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program()).file_name().unwrap_or(cmd.get_program());
    std::iter::once(program)
        .chain(cmd.get_args())
        .map(|part| {
            let part = part.to_string_lossy();
            // Quote arguments with spaces so the echoed command can be pasted back into a shell.
            if part.contains(' ') { format!("'{part}'") } else { part.into_owned() }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_variables_of_cargo_run_are_recognised() {
        for key in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION_PRE", "CARGO_MANIFEST_DIR", "CARGO_MANIFEST_LINKS"] {
            assert!(is_package_variable(key), "{key}");
        }
        // The toolchain and the user's settings pass through.
        for key in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_BUILD_JOBS", "PATH", "CARGO_PKGX"] {
            assert!(!is_package_variable(key), "{key}");
        }
    }
}
