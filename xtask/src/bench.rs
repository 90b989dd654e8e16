//! `cargo xtask bench`: runs the criterion benchmarks of the `benches` package (release build).
//!
//! ```text
//! cargo xtask bench            # every benchmark
//! cargo xtask bench bm25       # one benchmark target
//! ```
//!
//! Benchmarks that need `../shared/data` say so and measure only what they can without it.

use anyhow::Result;

use crate::shell::{self, Shell};

pub fn run(args: &[String]) -> Result<()> {
    let sh = Shell::new();
    let mut cmd = sh.cargo(&["bench", "-j2", "-p", "benches"]);
    if let Some((target, rest)) = args.split_first().filter(|(t, _)| !t.starts_with('-')) {
        cmd.args(["--bench", target]).arg("--").args(rest);
    } else {
        cmd.arg("--").args(args);
    }
    shell::run(&mut cmd)
}
