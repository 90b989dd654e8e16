//! The CI run's disk: what a cold build needs, and room made for it before the build starts.
//!
//! A CI machine keeps the target directory between runs and its disk is small at times: one run failed with "No
//! space left on device" while linking the test binaries. Incremental caches are the largest thing a debug build
//! leaves behind (most of the target directory on a developer's machine) and CI gains nothing from them, so CI builds
//! with `CARGO_INCREMENTAL=0`, removes the caches earlier runs left, and, when the disk is still short of what a
//! cold build of the workspace takes, removes the stale debug build too.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// What a cold CI run needs free: it wrote 2.9 GB to the target directory (clippy's metadata and the test build,
/// with `CARGO_INCREMENTAL=0`), about twice that leaves room for the doc tests, the Python venv and the tests'
/// temporary stores. See `docs/experiments/2026-11-29-ci-disk.md`.
pub const COLD_BUILD_BYTES: u64 = 6 << 30;

/// Makes room in `target` for a CI build: see the module docs. Prints what it did and the free space.
pub fn prepare(target: &Path) -> Result<()> {
    for profile in ["debug", "release"] {
        let incremental = target.join(profile).join("incremental");
        if incremental.exists() {
            std::fs::remove_dir_all(&incremental)
                .with_context(|| format!("cannot remove the incremental caches in {}", incremental.display()))?;
            println!("disk: removed {} (CI builds without incremental caches)", incremental.display());
        }
    }
    let probe = existing_ancestor(target);
    let free = free_bytes(probe)?;
    println!("disk: {} free at {}", gib(free), probe.display());
    let debug = target.join("debug");
    if free < COLD_BUILD_BYTES && debug.exists() {
        std::fs::remove_dir_all(&debug).with_context(|| format!("cannot remove {}", debug.display()))?;
        let after = free_bytes(probe)?;
        println!(
            "disk: removed the earlier debug build in {} (a cold build needs about {}); {} free now",
            debug.display(),
            gib(COLD_BUILD_BYTES),
            gib(after)
        );
    }
    let free = free_bytes(probe)?;
    if free < COLD_BUILD_BYTES {
        println!(
            "warning: only {} free at {}; a cold build of the workspace needs about {}, so the build may fail with \
             \"No space left on device\"",
            gib(free),
            probe.display(),
            gib(COLD_BUILD_BYTES)
        );
    }
    Ok(())
}

/// The free bytes of the file system holding `path`, from POSIX `df -Pk`.
pub fn free_bytes(path: &Path) -> Result<u64> {
    let output = Command::new("df")
        .arg("-Pk")
        .arg(path)
        .output()
        .with_context(|| format!("cannot run `df -Pk {}`", path.display()))?;
    if !output.status.success() {
        bail!("`df -Pk {}` failed: {}", path.display(), String::from_utf8_lossy(&output.stderr).trim());
    }
    parse_df(&String::from_utf8_lossy(&output.stdout))
        .with_context(|| format!("cannot read the free space of {} from `df -Pk`", path.display()))
}

/// The available kilobytes (fourth column) of the data line of `df -Pk`'s output, in bytes.
fn parse_df(output: &str) -> Result<u64> {
    let line = output.lines().nth(1).context("`df` printed no data line")?;
    let available = line.split_whitespace().nth(3).context("`df`'s data line has no fourth column")?;
    let kib: u64 = available.parse().with_context(|| format!("`df`'s available column is {available:?}"))?;
    Ok(kib.saturating_mul(1024))
}

/// `path` or its nearest ancestor that exists (a fresh clone has no target directory yet).
fn existing_ancestor(path: &Path) -> &Path {
    path.ancestors().find(|dir| dir.exists()).unwrap_or(Path::new("."))
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_output_gives_the_available_column_in_bytes() {
        let output = "Filesystem     1024-blocks     Used Available Capacity Mounted on\n\
                      /dev/vda         263174212 93323752   2201512      98% /\n";
        assert_eq!(parse_df(output).unwrap(), 2_201_512 * 1024);
    }

    #[test]
    fn df_output_without_a_data_line_is_an_error() {
        assert!(parse_df("Filesystem 1024-blocks Used Available Capacity Mounted on\n").is_err());
        assert!(parse_df("header\n/dev/vda 1 2 lots 98% /\n").is_err());
    }

    #[test]
    fn the_free_space_of_a_directory_that_does_not_exist_yet_is_its_parents() {
        let dir = std::env::temp_dir().join("ragtune-xtask-disk-test").join("not").join("there");
        let probe = existing_ancestor(&dir);
        assert!(probe.exists());
        assert!(free_bytes(probe).unwrap() > 0);
    }
}
