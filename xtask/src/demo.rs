//! `cargo xtask demo`: the main job end to end on a fresh machine — index the project's own documentation into a
//! new embedded store and answer a few questions from it with the `ragtune` binary.
//!
//! ```text
//! cargo xtask demo                     # index docs/, then run the built-in questions
//! cargo xtask demo "how is BM25 scored?"   # ... and your own
//! ```

use anyhow::{Context, Result};

use crate::shell::{self, Shell};

const QUESTIONS: [&str; 3] = [
    "How does the embedded store survive a crash?",
    "Which BM25 parameters are the default and why?",
    "How do I run an evaluation on SciFact?",
];

pub fn run(args: &[String]) -> Result<()> {
    crate::models::provision_models()?;
    let sh = Shell::new();
    let store = sh.target_dir().join("demo").join("store");
    if store.exists() {
        std::fs::remove_dir_all(&store).with_context(|| format!("cannot clear {}", store.display()))?;
    }
    let store_arg = store.to_string_lossy().into_owned();
    let ragtune = |rest: &[&str]| {
        let mut cmd = sh.cargo(&["run", "--quiet", "-j2", "-p", "ragtune-cli", "--"]);
        cmd.args(rest);
        cmd
    };
    println!("== indexing the project's docs/ into {}", store.display());
    let docs = sh.root().join("docs");
    shell::run(&mut ragtune(&["index", &docs.to_string_lossy(), "--store", &store_arg]))?;
    let questions: Vec<&str> =
        if args.is_empty() { QUESTIONS.to_vec() } else { args.iter().map(String::as_str).collect() };
    for q in questions {
        println!("\n== {q}");
        shell::run(&mut ragtune(&["search", q, "--store", &store_arg, "-k", "3"]))?;
    }
    Ok(())
}
