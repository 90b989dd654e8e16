//! `cargo xtask eval --matrix`: every retriever and fusion method on every dataset, in one table and one report.
//!
//! ```text
//! cargo xtask eval --matrix                                   # SciFact and the CMU QA sets (built if missing)
//! cargo xtask eval --matrix --dataset DIR --dataset DIR2      # the BEIR-format datasets named
//! cargo xtask eval --matrix --update-baseline                 # after an intended change
//! cargo xtask eval --matrix --rerank-report rerank.json       # adds the rerank budget curve to the report
//! cargo xtask eval --matrix --llm-url URL --llm-limit 50      # adds the LLM query transformations (50 queries)
//! cargo xtask eval --matrix --llm-url URL --llm-only          # only those, the rest read from the last run
//! cargo xtask eval --matrix --render-only                     # redraws table and page from the last run's reports
//! cargo xtask eval --matrix --debug                           # the debug binary (same numbers, no release build)
//! ```
//!
//! For each dataset and each setting of [`SETTINGS`] it runs `ragtune eval retrieval` (release build unless
//! `--debug`, the test split unless `--split` says otherwise), reading the numbers from the run's JSON report. The
//! fitted row's fusion is fitted on the dataset's train split first (`ragtune calibrate --fusion`), never on the split
//! it is measured on; a dataset without a train split has no fitted row.
//!
//! It writes, under `target/eval/matrix/` (or `--out-dir`): every run's report, `matrix.md` (nDCG@10 and p50
//! latency per setting and dataset, with the check that hybrid is not below its better part by more than 0.005;
//! the engine's default hybrid row failing it fails the command),
//! `matrix.json`, and `report.html`: a self-contained page (no script, no CDN; the charts are inline SVG drawn by
//! `plotters`) with the table and the quality-vs-cost pictures: nDCG@10 against query latency and against LLM
//! tokens per query (the LLM query transformations are rows of their own when `--llm-url` names an LLM; with
//! `--llm-limit N` they, and the default hybrid beside them as their LLM-free reference, run on the first N queries
//! and their names say so; such rows are compared with no row measured on all the queries), and the
//! rerank budget curve when `--rerank-report` names a `ragtune eval rerank` report.
//!
//! The committed baseline is `eval/baselines/matrix-<split>.json` (nDCG@10 and Recall@100 per cell); a cell further
//! below it than its tolerance (`baseline.rs`: exact for the BM25 row, 0.015 for the model-scored rows, whose numbers
//! differ between CPUs) fails the command, and `--update-baseline` writes the new numbers instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use plotters::prelude::*;
use serde_json::{Value, json};

use crate::baseline::{Regression, Scoring};
use crate::shell::{self, Shell};

/// How far below its better part hybrid may fall (both measured in the same run, on the same machine; how far
/// below the baseline a cell may fall is `baseline.rs`'s).
const TOLERANCE: f64 = 0.005;

/// One row of the matrix: a retrieval setting, as arguments of `ragtune eval retrieval`.
struct Setting {
    name: &'static str,
    args: &'static [&'static str],
    /// Fitted on the dataset's train split by `ragtune calibrate --fusion` before it is measured.
    fitted: bool,
}

/// The rows: each retriever alone (dense also on whole documents, which the model sees only the beginning of), then
/// hybrid with the engine's default fusion, every fusion method at equal weights and fixed (RRF the previous
/// default), the fusion fitted on the dataset's train split, and the header boost on the default. Every row but the
/// `whole documents` one indexes passages (`eval retrieval`'s default chunking) and scores documents by their best
/// passage.
const SETTINGS: &[Setting] = &[
    Setting { name: "bm25", args: &["--retriever", "bm25"], fitted: false },
    Setting {
        name: "dense, whole documents (truncated)",
        args: &["--retriever", "dense", "--chunking", "whole"],
        fitted: false,
    },
    Setting { name: "dense", args: &["--retriever", "dense"], fitted: false },
    Setting { name: DEFAULT_HYBRID, args: &["--retriever", "hybrid"], fitted: false },
    Setting { name: "hybrid rrf", args: &RRF, fitted: false },
    Setting { name: "hybrid convex", args: &CONVEX, fitted: false },
    Setting { name: "hybrid dbsf", args: &DBSF, fitted: false },
    Setting { name: "hybrid fitted on train", args: &["--retriever", "hybrid"], fitted: true },
    Setting {
        name: "hybrid + header boost 0.1",
        args: &["--retriever", "hybrid", "--header-boost", "0.1"],
        fitted: false,
    },
];

/// The row of the engine's default hybrid retrieval (`[hybrid]` as `Config::default` has it): the one that must not
/// fall more than [`TOLERANCE`] below its better part on any dataset.
const DEFAULT_HYBRID: &str = "hybrid (default)";

/// One method's row arguments: equal fixed weights, no query-time or level weights.
macro_rules! fixed_method {
    ($method:literal) => {
        [
            "--retriever",
            "hybrid",
            "--fusion",
            $method,
            "--bm25-weight",
            "1",
            "--dense-weight",
            "1",
            "--adaptive",
            "0",
            "--level-slope",
            "0",
        ]
    };
}

/// Each method at equal weights and fixed (RRF so is the default before ADR 0014): the method rows compare
/// methods, not the default's fitted weights.
const RRF: [&str; 12] = fixed_method!("rrf");
const CONVEX: [&str; 12] = fixed_method!("convex");
const DBSF: [&str; 12] = fixed_method!("dbsf");

/// Rows that need an LLM (`--llm-url`): the query transformations over default hybrid retrieval. They give the
/// tokens chart its points; they are slow on a CPU LLM, so `--limit` is worth giving with them.
const LLM_SETTINGS: &[Setting] = &[
    Setting { name: "hybrid + rewrite", args: &["--retriever", "hybrid", "--transform", "rewrite"], fitted: false },
    Setting { name: "hybrid + hyde", args: &["--retriever", "hybrid", "--transform", "hyde"], fitted: false },
    Setting {
        name: "hybrid + multi-query",
        args: &["--retriever", "hybrid", "--transform", "multi-query"],
        fitted: false,
    },
];

/// The LLM-free reference for the LLM rows when they run on fewer queries (`--llm-limit`): the default hybrid on the
/// same queries, so the tokens chart compares like with like.
const LLM_REFERENCE: Setting =
    Setting { name: "hybrid (default), no LLM", args: &["--retriever", "hybrid"], fitted: false };

/// A row measured on a subset of the queries (`--llm-limit`): its name says how many, and it is compared with no
/// row measured on all of them.
fn subset_row(name: &str) -> bool {
    name.ends_with(" queries)")
}

/// One measured cell.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    ndcg: f64,
    recall: f64,
    p50_ms: f64,
    llm_tokens: f64,
}

/// Runs the matrix; `args` are what follows `--matrix`.
pub fn run(args: &[String]) -> Result<()> {
    let sh = Shell::new();
    let mut datasets: Vec<PathBuf> = Vec::new();
    let mut llm = false;
    let (mut llm_limit, mut llm_only) = (None, false);
    let mut render_only = false;
    let mut debug = false;
    let (mut split, mut update, mut out_dir, mut rerank, mut extra) =
        ("test".to_owned(), false, sh.target_dir().join("eval").join("matrix"), None, Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value")).cloned();
        match a.as_str() {
            "--dataset" => datasets.push(PathBuf::from(value()?)),
            "--split" => split = value()?,
            "--out-dir" => out_dir = PathBuf::from(value()?),
            "--rerank-report" => rerank = Some(PathBuf::from(value()?)),
            "--update-baseline" => update = true,
            // The debug binary: the same numbers (quality does not depend on the build), slower, and no release
            // build of the whole tree on a small machine; latencies are then not comparable with release runs.
            "--debug" => debug = true,
            // Redraw the table and the page from the reports an earlier run left in the out dir; run nothing.
            "--render-only" => render_only = true,
            // Passed to every run (for example `--limit 50` for a quick look, `--threads 2`).
            "--limit" | "--threads" => extra.extend([a.clone(), value()?]),
            // The LLM for the transformation rows; without it those rows are not run.
            "--llm-url" => {
                llm = true;
                extra.extend([a.clone(), value()?]);
            }
            "--llm-model" => extra.extend([a.clone(), value()?]),
            // The LLM rows (and their LLM-free reference) on the first N queries only: an LLM on a CPU takes
            // seconds a query, the other rows milliseconds.
            "--llm-limit" => llm_limit = Some(value()?),
            // Run the LLM rows only; the other rows are read from the out dir's earlier reports, when there.
            "--llm-only" => llm_only = true,
            other => bail!(
                "unknown argument {other} (use --dataset, --split, --out-dir, --rerank-report, --limit, --threads, --llm-url, --llm-model, --llm-limit, --llm-only, --debug, --update-baseline, --render-only)"
            ),
        }
    }
    if (llm_limit.is_some() || llm_only) && !llm {
        bail!("--llm-limit and --llm-only are about the LLM rows: give --llm-url URL too");
    }
    std::fs::create_dir_all(&out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    // One build (release unless --debug); every run below uses the binary directly.
    let profile = if debug { "debug" } else { "release" };
    let build: &[&str] = if debug { &["build", "--quiet", "-j2"] } else { &["build", "--release", "--quiet", "-j2"] };
    shell::run(sh.cargo(build).args(["-p", "ragtune-cli"]))?;
    let exe = sh.target_dir().join(profile).join("ragtune");
    if datasets.is_empty() {
        datasets = default_datasets(&sh, &exe)?;
    }
    let load_before = if render_only { "not measured (redrawn from earlier reports)".to_owned() } else { load() };

    let mut cells: BTreeMap<String, BTreeMap<String, Cell>> = BTreeMap::new();
    for dataset in &datasets {
        let name = dataset_name(dataset)?;
        let has_train = dataset.join("qrels").join("train.tsv").is_file();
        // Redrawing reads whichever LLM rows an earlier run left; a run runs them only with an LLM.
        let llm_rows: Vec<&Setting> = if llm || render_only {
            LLM_SETTINGS.iter().chain((llm_limit.is_some() || render_only).then_some(&LLM_REFERENCE)).collect()
        } else {
            Vec::new()
        };
        let rows = SETTINGS.iter().map(|s| (s, false)).chain(llm_rows.into_iter().map(|s| (s, true)));
        // How many queries the rows measured on all of them ran on, to tell an LLM row that ran on fewer.
        let mut all_queries: Option<u64> = None;
        for (setting, is_llm_row) in rows {
            let subset_of = is_llm_row.then(|| all_queries.unwrap_or(u64::MAX));
            let report_path = out_dir.join(format!("{name}-{}.json", file_stem(setting.name)));
            if render_only || (llm_only && !is_llm_row) {
                if report_path.is_file() {
                    let report = read_json(&report_path)?;
                    add_report(&mut cells, &name, setting.name, subset_of, &report)?;
                    all_queries = all_queries.or(report["queries"].as_u64().filter(|_| !is_llm_row));
                }
                continue;
            }
            let mut cmd = sh.cmd(&exe);
            cmd.args(["eval", "retrieval", "--dataset"]).arg(dataset).args(["--split", split.as_str()]);
            cmd.args(setting.args);
            match (&llm_limit, is_llm_row) {
                (Some(n), true) => {
                    cmd.args(without_limit(&extra)).args(["--limit", n.as_str()]);
                }
                _ => {
                    cmd.args(&extra);
                }
            }
            if setting.fitted {
                if !has_train {
                    println!("matrix: {name} has no train split: no fitted row");
                    continue;
                }
                let fitted = out_dir.join(format!("{name}-fusion-fitted.toml"));
                let mut fit = sh.cmd(&exe);
                fit.args(["calibrate", "--fusion", "--dataset"]).arg(dataset).args(["--split", "train", "--out"]);
                shell::run(fit.arg(&fitted))?;
                cmd.arg("--config").arg(&fitted);
            }
            shell::run(cmd.arg("--out").arg(&report_path))?;
            let report = read_json(&report_path)?;
            add_report(&mut cells, &name, setting.name, subset_of, &report)?;
            all_queries = all_queries.or(report["queries"].as_u64().filter(|_| !is_llm_row));
        }
    }
    let load_after = if render_only { "–".to_owned() } else { load() };

    let table = markdown(&cells);
    let (default_violations, violations): (Vec<_>, Vec<_>) =
        fusion_violations(&cells).into_iter().partition(|(row, _)| row == DEFAULT_HYBRID);
    let mut md = format!("# Quality across datasets ({split} split)\n\n{table}\n");
    let checks = [
        (
            &default_violations,
            "The default hybrid row is",
            "**The default hybrid row is more than 0.005 below its better part:**",
        ),
        (&violations, "\nEvery other hybrid row is", "\nOther hybrid rows more than 0.005 below their better part:"),
    ];
    for (found, ok, failed) in checks {
        if found.is_empty() {
            let _ = writeln!(md, "{ok} at least its better part − 0.005 nDCG@10 on every dataset.");
        } else {
            let _ = writeln!(md, "{failed}\n");
            for (_, v) in found {
                let _ = writeln!(md, "- {v}");
            }
        }
    }
    let _ = write!(md, "\nLoad average before / after: {load_before} / {load_after}.\n");
    std::fs::write(out_dir.join("matrix.md"), &md)?;
    let matrix_json = to_json(&cells);
    std::fs::write(out_dir.join("matrix.json"), serde_json::to_string_pretty(&matrix_json)?)?;
    let rerank = match &rerank {
        Some(path) => Some(read_json(path)?),
        None => None,
    };
    let html = html(&split, &cells, &md, rerank.as_ref(), &load_before, &load_after)?;
    std::fs::write(out_dir.join("report.html"), html)?;
    println!("{md}");
    println!("matrix: reports, matrix.md, matrix.json and report.html in {}", out_dir.display());

    let baseline_path = sh.root().join("eval").join("baselines").join(format!("matrix-{split}.json"));
    if render_only {
        return Ok(());
    }
    // The engine's default must not lose to its better part: that fails the run like a regression.
    let default_loses = || {
        let lines: Vec<&str> = default_violations.iter().map(|(_, v)| v.as_str()).collect();
        anyhow::anyhow!("the default hybrid fusion loses to its better part:\n  {}", lines.join("\n  "))
    };
    if update {
        std::fs::write(&baseline_path, serde_json::to_string_pretty(&baseline_of(&matrix_json))? + "\n")?;
        println!("baseline updated: {}", baseline_path.display());
        return if default_violations.is_empty() { Ok(()) } else { Err(default_loses()) };
    }
    if !baseline_path.is_file() {
        println!("no committed baseline {} (run with --update-baseline to create it)", baseline_path.display());
        return if default_violations.is_empty() { Ok(()) } else { Err(default_loses()) };
    }
    let regressions = regressions(&read_json(&baseline_path)?, &matrix_json);
    if !regressions.is_empty() {
        let update = crate::baseline::update_command(&[&["--matrix".to_owned()][..], args].concat());
        bail!(crate::baseline::failure(&regressions, &baseline_path, &update));
    }
    println!("no cell is further below {} than its tolerance", baseline_path.display());
    if default_violations.is_empty() { Ok(()) } else { Err(default_loses()) }
}

/// SciFact, and the CMU QA retrieval sets (plain text, and Markdown with the article titles as headers, for the
/// header boost) built from `../shared/data/qa/cmu-wiki-qa` by `ragtune eval build-cmu-set` into `target/sets/`.
fn default_datasets(sh: &Shell, exe: &Path) -> Result<Vec<PathBuf>> {
    let data = sh.root().join("../shared/data");
    let mut out = Vec::new();
    let scifact = data.join("beir/scifact");
    if scifact.join("corpus.jsonl").is_file() {
        out.push(scifact);
    } else {
        println!("matrix: {} is missing: no SciFact column", scifact.display());
    }
    let cmu = data.join("qa/cmu-wiki-qa");
    if cmu.is_dir() {
        for (name, markdown) in [("cmu-qa", false), ("cmu-qa-md", true)] {
            let set = sh.target_dir().join("sets").join(name);
            if !set.join("corpus.jsonl").is_file() {
                let mut build = sh.cmd(exe);
                build.args(["eval", "build-cmu-set", "--dataset"]).arg(&cmu).arg("--out").arg(&set);
                if markdown {
                    build.arg("--markdown");
                }
                shell::run(&mut build)?;
            }
            out.push(set);
        }
    } else {
        println!("matrix: {} is missing: no CMU QA columns", cmu.display());
    }
    if out.is_empty() {
        bail!("no --dataset given and none of the default datasets is in {}", data.display());
    }
    Ok(out)
}

/// A setting's name as part of a file name: words joined by `-`.
fn file_stem(name: &str) -> String {
    name.split(|c: char| !c.is_ascii_alphanumeric() && c != '.').filter(|w| !w.is_empty()).collect::<Vec<_>>().join("-")
}

fn dataset_name(dir: &Path) -> Result<String> {
    Ok(dir
        .canonicalize()
        .with_context(|| format!("no dataset at {}", dir.display()))?
        .file_name()
        .context("a dataset directory has a name")?
        .to_string_lossy()
        .into_owned())
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or_else(|_| "unknown".into(), |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// The numbers of one `ragtune eval retrieval` report.
fn cell(report: &Value) -> Result<Cell> {
    let metric = |k: &str| report["metrics"][k].as_f64().with_context(|| format!("the report has no {k}"));
    Ok(Cell {
        ndcg: metric("ndcg@10")?,
        recall: metric("recall@100")?,
        p50_ms: report["latency_ms"]["p50"].as_f64().unwrap_or(f64::NAN),
        llm_tokens: report["cost"]["llm_tokens_per_query"].as_f64().unwrap_or(0.0),
    })
}

/// `extra` without its `--limit N`.
fn without_limit(extra: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(extra.len());
    let mut it = extra.iter();
    while let Some(a) = it.next() {
        if a == "--limit" {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Puts a report's numbers in the matrix; a dataset with passage-level judgements gets a column of its own for them.
/// `subset_of` is given for an LLM row: the queries the other rows ran on (`u64::MAX` when unknown); an LLM row that
/// ran on fewer says how many in its name (`hybrid + hyde (50 queries)`).
fn add_report(
    cells: &mut BTreeMap<String, BTreeMap<String, Cell>>,
    dataset: &str,
    setting: &str,
    subset_of: Option<u64>,
    report: &Value,
) -> Result<()> {
    let row = match (report["queries"].as_u64(), subset_of) {
        (Some(n), Some(all)) if n < all => format!("{setting} ({n} queries)"),
        _ => setting.to_owned(),
    };
    cells.entry(dataset.to_owned()).or_default().insert(row.clone(), cell(report)?);
    if let Some(passages) = passage_cell(report) {
        cells.entry(format!("{dataset} (passages)")).or_default().insert(row, passages);
    }
    Ok(())
}

/// The passage-level numbers of a report, when the dataset has passage judgements (and the run indexed passages).
fn passage_cell(report: &Value) -> Option<Cell> {
    let level = report.get("passage_level").filter(|v| v.is_object())?;
    Some(Cell {
        ndcg: level["metrics"]["ndcg@10"].as_f64()?,
        recall: level["metrics"]["recall@100"].as_f64()?,
        p50_ms: report["latency_ms"]["p50"].as_f64().unwrap_or(f64::NAN),
        llm_tokens: report["cost"]["llm_tokens_per_query"].as_f64().unwrap_or(0.0),
    })
}

/// Settings in table order (those of [`SETTINGS`] first, then any others in name order).
fn row_names(cells: &BTreeMap<String, BTreeMap<String, Cell>>) -> Vec<String> {
    let mut rows: Vec<String> = SETTINGS.iter().chain(LLM_SETTINGS).map(|s| s.name.to_owned()).collect();
    for row in cells.values().flat_map(BTreeMap::keys) {
        if !rows.contains(row) {
            rows.push(row.clone());
        }
    }
    rows.retain(|r| cells.values().any(|c| c.contains_key(r)));
    rows
}

/// nDCG@10 (p50 ms) per setting and dataset; the best row of each dataset in bold (of the rows measured on every
/// query: a subset row's nDCG@10 is over other queries).
fn markdown(cells: &BTreeMap<String, BTreeMap<String, Cell>>) -> String {
    let mut out = String::from("| nDCG@10 (p50 ms) |");
    for dataset in cells.keys() {
        let _ = write!(out, " {dataset} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(cells.len()));
    out.push('\n');
    for row in row_names(cells) {
        let _ = write!(out, "| {row} |");
        for by_row in cells.values() {
            let best = by_row.iter().filter(|(r, _)| !subset_row(r)).map(|(_, c)| c.ndcg).fold(f64::MIN, f64::max);
            match by_row.get(&row) {
                Some(c) if (c.ndcg - best).abs() < 1e-12 && !subset_row(&row) => {
                    let _ = write!(out, " **{:.4}** ({:.1}) |", c.ndcg, c.p50_ms);
                }
                Some(c) => {
                    let _ = write!(out, " {:.4} ({:.1}) |", c.ndcg, c.p50_ms);
                }
                None => out.push_str(" – |"),
            }
        }
        out.push('\n');
    }
    out
}

/// Hybrid rows more than [`TOLERANCE`] below the better of BM25 and dense alone on the same dataset: the row and
/// what to print.
fn fusion_violations(cells: &BTreeMap<String, BTreeMap<String, Cell>>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (dataset, by_row) in cells {
        let (Some(bm25), Some(dense)) = (by_row.get("bm25"), by_row.get("dense")) else { continue };
        let best = bm25.ndcg.max(dense.ndcg);
        for (row, c) in by_row.iter().filter(|(r, _)| r.starts_with("hybrid") && !subset_row(r)) {
            if c.ndcg < best - TOLERANCE {
                let text = format!("{dataset}: {row} {:.4} < max(bm25, dense) {best:.4} − {TOLERANCE}", c.ndcg);
                out.push((row.clone(), text));
            }
        }
    }
    out
}

fn to_json(cells: &BTreeMap<String, BTreeMap<String, Cell>>) -> Value {
    let mut out = serde_json::Map::new();
    for (dataset, by_row) in cells {
        let rows: serde_json::Map<String, Value> = by_row
            .iter()
            .map(|(row, c)| {
                let v = json!({"ndcg@10": c.ndcg, "recall@100": c.recall, "p50_ms": c.p50_ms, "llm_tokens_per_query": c.llm_tokens});
                (row.clone(), v)
            })
            .collect();
        out.insert(dataset.clone(), Value::Object(rows));
    }
    Value::Object(out)
}

/// The quality numbers of a matrix (latency depends on the machine and is not a baseline).
fn baseline_of(matrix: &Value) -> Value {
    let mut out = matrix.clone();
    for rows in out.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
        for cell in rows.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
            if let Some(c) = cell.as_object_mut() {
                c.retain(|k, _| k == "ndcg@10" || k == "recall@100");
            }
        }
    }
    out
}

/// Cells of `baseline` whose metric fell by more than its tolerance in `now` (cells only in one of them are not
/// compared: a new dataset or setting has no baseline yet).
fn regressions(baseline: &Value, now: &Value) -> Vec<Regression> {
    let mut out = Vec::new();
    for (dataset, rows) in baseline.as_object().into_iter().flatten() {
        for (row, metrics) in rows.as_object().into_iter().flatten() {
            for (metric, base) in metrics.as_object().into_iter().flatten() {
                let (Some(base), Some(value)) = (base.as_f64(), now[dataset][row][metric].as_f64()) else { continue };
                let name = format!("{dataset} / {row} / {metric}");
                out.extend(Regression::check(name, value, base, Scoring::of_matrix_row(row)));
            }
        }
    }
    out
}

/// Colours of the datasets' series, in dataset order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One labelled scatter series.
struct Series {
    name: String,
    points: Vec<(f64, f64, String)>,
}

/// A scatter plot of `series` as an SVG document, each point labelled, with a legend when there are several.
fn scatter(title: &str, x_desc: &str, series: &[Series]) -> Result<String> {
    let all: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().map(|p| (p.0, p.1))).filter(|p| p.0.is_finite()).collect();
    if all.is_empty() {
        return Ok(String::new());
    }
    let (x_max, y_min, y_max) =
        all.iter().fold((0.0f64, f64::MAX, f64::MIN), |(a, b, c), p| (a.max(p.0), b.min(p.1), c.max(p.1)));
    let x_max = if x_max > 0.0 { x_max * 1.25 } else { 1.0 };
    let (y_lo, y_hi) = (y_min - 0.02, y_max + 0.02);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..x_max, y_lo..y_hi)
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc(x_desc).y_desc("nDCG@10").draw().map_err(plot_err)?;
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(s.points.iter().filter(|p| p.0.is_finite()).map(|p| {
                    EmptyElement::at((p.0, p.1))
                        + Circle::new((0, 0), 4, colour.filled())
                        + Text::new(p.2.clone(), (6, -4), ("sans-serif", 11))
                }))
                .map_err(plot_err)?
                .label(s.name.clone())
                .legend(move |(x, y)| Circle::new((x, y), 4, colour.filled()));
        }
        if series.len() > 1 {
            chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

/// The rerank budget curve of a `ragtune eval rerank` report: nDCG@10 against the budget, one line per policy.
fn budget_curve(report: &Value) -> Result<String> {
    let rerank = if report["rerank"].is_object() { &report["rerank"] } else { report };
    let mut by_policy: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for p in rerank["points"].as_array().context("the rerank report has no points")? {
        let (Some(policy), Some(budget), Some(ndcg)) =
            (p["policy"].as_str(), p["budget"].as_f64(), p["ndcg_at_10"].as_f64())
        else {
            continue;
        };
        by_policy.entry(policy.to_owned()).or_default().push((budget, ndcg));
    }
    let ys: Vec<f64> = by_policy.values().flatten().map(|p| p.1).collect();
    let (lo, hi) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(*y), b.max(*y)));
    if ys.is_empty() {
        bail!("the rerank report has no points");
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let title =
            format!("rerank budget curve ({}, pool {})", rerank["reranker"].as_str().unwrap_or("?"), rerank["pool"]);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..1.05, (lo - 0.02)..(hi + 0.02))
            .map_err(plot_err)?;
        chart.configure_mesh().x_desc("budget (share of the pool)").y_desc("nDCG@10").draw().map_err(plot_err)?;
        for (i, (policy, mut points)) in by_policy.into_iter().enumerate() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
                .map_err(plot_err)?
                .label(policy)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(plot_err)?;
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE).draw().map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the chart: {e:?}")
}

/// The self-contained HTML report.
fn html(
    split: &str,
    cells: &BTreeMap<String, BTreeMap<String, Cell>>,
    md: &str,
    rerank: Option<&Value>,
    load_before: &str,
    load_after: &str,
) -> Result<String> {
    let series = |x: &dyn Fn(&Cell) -> f64| -> Vec<Series> {
        cells
            .iter()
            .map(|(dataset, by_row)| Series {
                name: dataset.clone(),
                points: by_row.iter().map(|(row, c)| (x(c), c.ndcg, row.clone())).collect(),
            })
            .collect()
    };
    // One latency chart per dataset: their nDCG@10 ranges differ too much to share an axis.
    let mut latency = String::new();
    for s in series(&|c| c.p50_ms) {
        let title = format!("{}: nDCG@10 against query latency", s.name);
        latency.push_str(&scatter(&title, "p50 latency per query (ms)", std::slice::from_ref(&s))?);
    }
    let tokens = if cells.values().flat_map(BTreeMap::values).any(|c| c.llm_tokens > 0.0) {
        scatter("nDCG@10 against LLM tokens", "LLM tokens per query", &series(&|c| c.llm_tokens))?
    } else {
        "<p>Every setting measured spends no LLM tokens (retrieval only); run with <code>--llm-url URL</code> to add \
         the LLM query transformations (rewrite, HyDE, multi-query) and their tokens.</p>"
            .to_owned()
    };
    let curve = match rerank {
        Some(r) => budget_curve(r)?,
        None => {
            "<p>No rerank report was given (<code>--rerank-report FILE</code>, from <code>ragtune eval rerank</code>): \
                 no budget curve.</p>"
                .to_owned()
        }
    };
    let mut table = String::from("<table><thead><tr><th>setting</th>");
    for dataset in cells.keys() {
        let _ = write!(table, "<th>{} nDCG@10</th><th>Recall@100</th><th>p50 ms</th>", escape(dataset));
    }
    table.push_str("</tr></thead><tbody>");
    for row in row_names(cells) {
        let _ = write!(table, "<tr><td>{}</td>", escape(&row));
        for by_row in cells.values() {
            match by_row.get(&row) {
                Some(c) => {
                    let _ = write!(table, "<td>{:.4}</td><td>{:.4}</td><td>{:.1}</td>", c.ndcg, c.recall, c.p50_ms);
                }
                None => table.push_str("<td>–</td><td>–</td><td>–</td>"),
            }
        }
        table.push_str("</tr>");
    }
    table.push_str("</tbody></table>");
    let checks: String = md
        .lines()
        .filter(|l| l.starts_with("- ") || l.contains("better part"))
        .map(|l| format!("<p>{}</p>", escape(l.trim_start_matches("- ").trim_matches('*'))))
        .collect();
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ragtune: quality across datasets</title>\
         <style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}\
         figure{{margin:1.5em 0}}</style></head><body>\n<h1>Quality across datasets</h1>\n\
         <p>Split <code>{split}</code>; every number from <code>cargo xtask eval --matrix</code> (load average before / \
         after: {load_before} / {load_after}; latency is per query, one at a time, on this machine under that load).</p>\n\
         {table}\n{checks}\n<h2 id=\"cost\">Quality against cost</h2>\n<figure>{latency}</figure>\n<figure>{tokens}</figure>\n\
         <h2 id=\"rerank\">Reranking under a budget</h2>\n<figure>{curve}</figure>\n</body></html>\n",
        split = escape(split),
        load_before = escape(load_before),
        load_after = escape(load_after),
    ))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(rows: &[(&str, &str, f64)]) -> BTreeMap<String, BTreeMap<String, Cell>> {
        let mut out: BTreeMap<String, BTreeMap<String, Cell>> = BTreeMap::new();
        for &(dataset, row, ndcg) in rows {
            let cell = Cell { ndcg, recall: 0.9, p50_ms: 5.0, llm_tokens: 0.0 };
            out.entry(dataset.to_owned()).or_default().insert(row.to_owned(), cell);
        }
        out
    }

    #[test]
    fn report_files_are_named_by_words() {
        assert_eq!(file_stem("dense, whole documents (truncated)"), "dense-whole-documents-truncated");
        assert_eq!(file_stem("hybrid + header boost 0.1"), "hybrid-header-boost-0.1");
        assert_eq!(file_stem(DEFAULT_HYBRID), "hybrid-default");
    }

    #[test]
    fn hybrid_below_its_better_part_is_reported() {
        let c = cells(&[
            ("a", "bm25", 0.70),
            ("a", "dense", 0.60),
            ("a", "hybrid rrf", 0.696),
            ("a", "hybrid dbsf", 0.69),
            ("b", "bm25", 0.3),
            ("b", "hybrid rrf", 0.1),
        ]);
        // b has no dense row: nothing to compare with.
        let text = "a: hybrid dbsf 0.6900 < max(bm25, dense) 0.7000 − 0.005".to_owned();
        assert_eq!(fusion_violations(&c), vec![("hybrid dbsf".to_owned(), text.clone())]);
        // A row measured on some of the queries only (an LLM row under --llm-limit) is compared with nothing.
        let mut c = c;
        let low = Cell { ndcg: 0.1, ..c["a"]["bm25"].clone() };
        c.get_mut("a").unwrap().insert("hybrid + hyde (50 queries)".into(), low);
        assert_eq!(fusion_violations(&c), vec![("hybrid dbsf".to_owned(), text)]);
    }

    #[test]
    fn llm_rows_say_how_many_queries_they_ran_on_and_can_drop_the_common_limit() {
        assert_eq!(without_limit(&["--limit".into(), "9".into(), "--threads".into(), "2".into()]), ["--threads", "2"]);
        let report = json!({"queries": 50, "metrics": {"ndcg@10": 0.8, "recall@100": 0.9}, "latency_ms": {"p50": 3.0}});
        let mut c = BTreeMap::new();
        add_report(&mut c, "scifact", "hybrid + hyde", Some(300), &report).unwrap();
        add_report(&mut c, "scifact", "bm25", None, &report).unwrap();
        let rows: Vec<&String> = c["scifact"].keys().collect();
        assert_eq!(rows, ["bm25", "hybrid + hyde (50 queries)"]);
        // An LLM row on every query is an ordinary row.
        add_report(&mut c, "other", "hybrid + rewrite", Some(50), &report).unwrap();
        assert!(c["other"].contains_key("hybrid + rewrite"));
    }

    #[test]
    fn the_table_has_a_row_per_setting_and_bolds_the_best() {
        let c = cells(&[("a", "bm25", 0.7), ("a", "dense", 0.6), ("b", "dense", 0.5), ("b", "extra", 0.55)]);
        let t = markdown(&c);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| nDCG@10 (p50 ms) | a | b |");
        assert_eq!(lines[2], "| bm25 | **0.7000** (5.0) | – |");
        assert_eq!(lines[3], "| dense | 0.6000 (5.0) | 0.5000 (5.0) |");
        assert_eq!(lines[4], "| extra | – | **0.5500** (5.0) |");
        // A row over a subset of the queries is never the best, and does not unbold the best full row.
        let c = cells(&[("a", "bm25", 0.7), ("a", "hybrid + hyde (50 queries)", 0.8)]);
        let t = markdown(&c);
        assert!(
            t.contains("| bm25 | **0.7000** (5.0) |") && t.contains("| hybrid + hyde (50 queries) | 0.8000 (5.0) |"),
            "{t}"
        );
    }

    #[test]
    fn baselines_keep_quality_only_and_regressions_beyond_tolerance_fail() {
        let now = to_json(&cells(&[("a", "bm25", 0.70), ("a", "dense", 0.60)]));
        let base = baseline_of(&now);
        assert_eq!(base["a"]["bm25"], json!({"ndcg@10": 0.70, "recall@100": 0.9}));
        assert!(regressions(&base, &now).is_empty());
        let lines = |now: &Value| regressions(&base, now).iter().map(Regression::line).collect::<Vec<_>>();
        // BM25 is exact; the model-scored rows may move by the cross-machine tolerance.
        let worse = to_json(&cells(&[("a", "bm25", 0.6999), ("a", "dense", 0.59)]));
        let got = lines(&worse);
        assert!(
            got.len() == 1 && got[0].starts_with("a / bm25 / ndcg@10: measured 0.6999, baseline 0.7000"),
            "{got:?}"
        );
        let worse = to_json(&cells(&[("a", "bm25", 0.70), ("a", "dense", 0.58)]));
        let got = lines(&worse);
        assert!(
            got.len() == 1 && got[0].starts_with("a / dense / ndcg@10: measured 0.5800, baseline 0.6000"),
            "{got:?}"
        );
        // A cell missing from the new run is not a regression (a dataset left out of this run).
        assert!(regressions(&base, &json!({})).is_empty());
    }

    #[test]
    fn the_report_is_self_contained_html_with_inline_svg() {
        let c = cells(&[("a", "bm25", 0.7), ("a", "dense", 0.6), ("a", "hybrid rrf", 0.72)]);
        let rerank = json!({"rerank": {"reranker": "llm", "pool": 30, "points": [
            {"policy": "greedy", "budget": 0.1, "ndcg_at_10": 0.70},
            {"policy": "greedy", "budget": 0.5, "ndcg_at_10": 0.74},
            {"policy": "baseline-top-b", "budget": 0.1, "ndcg_at_10": 0.69}]}});
        let page = html("test", &c, &markdown(&c), Some(&rerank), "0.5", "0.7").unwrap();
        assert!(page.starts_with("<!doctype html>"));
        assert_eq!(page.matches("<svg").count(), 2, "latency (one dataset) and the budget curve; no tokens spent");
        assert!(page.contains("spends no LLM tokens"));
        // Nothing is fetched: no script, no stylesheet or image from elsewhere (the SVG namespace URI is a name).
        assert!(!page.contains("<script") && !page.contains("<link") && !page.contains("src="), "no CDN");
        assert!(!page.contains("href=\"http"), "no external reference");
        assert!(page.contains("hybrid rrf") && page.contains("greedy"));
        let without = html("test", &c, &markdown(&c), None, "0.5", "0.7").unwrap();
        assert!(without.contains("no budget curve"));
        let mut with_llm = c.clone();
        with_llm
            .get_mut("a")
            .unwrap()
            .insert("hybrid + hyde".into(), Cell { ndcg: 0.7, recall: 0.9, p50_ms: 900.0, llm_tokens: 190.0 });
        let page = html("test", &with_llm, &markdown(&with_llm), None, "0.5", "0.7").unwrap();
        assert_eq!(page.matches("<svg").count(), 2, "latency and tokens");
        assert!(page.contains("hybrid + hyde"));
    }
}
