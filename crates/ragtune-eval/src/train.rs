//! `ragtune train reranker`: fine-tunes a cross-encoder on labelled data, with hard negatives from ragtune's own
//! hybrid retrieval, and writes an ONNX model that [`CrossEncoderReranker`](ragtune::embed::CrossEncoderReranker)
//! loads.
//!
//! 1. **Mining** ([`mine_groups`]): for every dataset (a BEIR directory; only its `train` qrels are read), the
//!    corpus is indexed in passages (the evaluation bench's cached index) and each judged query retrieves its top
//!    [`TrainOptions::pool`] passages with hybrid search. A group is the query, one passage that answers it and
//!    [`TrainOptions::negatives`] passages that do not, chosen by a seeded hash among the retrieved ones (hard
//!    negatives). With passage judgements (`qrels/passages/train.tsv`, e.g. the CMU set) the positive is the best
//!    retrieved passage that holds a judged one, else the judged passage itself; without them, each relevant
//!    document gives its best retrieved passage, else its opening words; with passage judgements, queries without
//!    any (yes/no questions) are stepped over. For the CMU set the questions that QA
//!    evaluations report (the first [`QA_CALIBRATION_FROM`](crate::qa::QA_CALIBRATION_FROM) of the hash order) are
//!    left out as well.
//! 2. **Training**: `scripts/train_cross_encoder.py` (embedded in the binary) runs in the trainer's venv
//!    ([`ragtune_provision::trainer`]) from the provisioned all-MiniLM-L6-v2 fp32 weights; its progress lines come
//!    back through [`TrainEvent`]s.
//! 3. **Output**: `model.onnx` (int8, the default the engine loads), `fp32/model.onnx`, the tokenizer files,
//!    `groups.jsonl` (the mined data) and `provenance.json` (datasets and their hashes, split, seed, recipe, loss
//!    curve, versions, every file's sha256).
//!
//! Same datasets, seed, recipe and thread count give the same model file.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ragtune::core::{Candidate, Ctx, Document, Error, Query, Result};
use ragtune::{EmbeddingMode, EmbeddingSettings, HybridSettings, Strategy, Transform};
use serde::{Deserialize, Serialize};

use crate::retrieval::{EvalChunking, EvalOptions, dataset_name, open_index};

/// The trainer script, shipped inside the binary so an installed `ragtune` can train.
pub const TRAINER_SCRIPT: &str = include_str!("../scripts/train_cross_encoder.py");

/// What to train on and how.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOptions {
    /// BEIR directories (their `train` qrels only).
    pub datasets: Vec<PathBuf>,
    /// The model directory to write.
    pub out: PathBuf,
    /// Seeds the negatives' choice, the head's initialisation, dropout and the order of the groups.
    pub seed: u64,
    /// Optimizer steps; 0 is one pass over the groups.
    pub steps: usize,
    /// Queries per optimizer step (each with its positive and negatives).
    pub queries_per_step: usize,
    /// Hard negatives per group.
    pub negatives: usize,
    /// Passages retrieved per query to draw them from.
    pub pool: usize,
    /// At most this many groups per dataset (0: all), taken in a seeded order.
    pub max_groups: usize,
    /// The first this many judged train queries of each dataset (in the file's order: those `ragtune eval retrieval
    /// --split train --limit N` evaluates) are left out of training, to fit `[rerank] retrieval_weight` on queries
    /// the model has not seen.
    pub hold_out: usize,
    /// Tokens per (query, passage) pair.
    pub max_length: usize,
    /// Peak learning rate.
    pub learning_rate: f64,
    /// Torch threads.
    pub threads: usize,
    /// Where cached indexes live.
    pub cache_dir: PathBuf,
    /// The embedding settings of the hybrid retrieval that mines negatives.
    pub embedding: EmbeddingSettings,
    /// Its fusion settings.
    pub hybrid: HybridSettings,
    /// Stop after writing `groups.jsonl` (no training).
    pub mine_only: bool,
}

/// The default recipe's optimizer steps (three passes over SciFact's train groups).
pub const DEFAULT_STEPS: usize = 500;
/// The default recipe's tokens per pair.
pub const DEFAULT_MAX_LENGTH: usize = 160;
/// The default recipe's held-out queries per dataset (to fit `[rerank] retrieval_weight` on).
pub const DEFAULT_HOLD_OUT: usize = 200;

impl TrainOptions {
    /// The default recipe ([`DEFAULT_STEPS`] steps of pairs cut at [`DEFAULT_MAX_LENGTH`] tokens, the first
    /// [`DEFAULT_HOLD_OUT`] judged queries held out; the recipe of docs/experiments/2026-11-29-reranker.md's model b3).
    pub fn new(datasets: Vec<PathBuf>, out: impl Into<PathBuf>) -> Self {
        Self {
            datasets,
            out: out.into(),
            seed: 13,
            steps: DEFAULT_STEPS,
            queries_per_step: 4,
            negatives: 4,
            pool: 30,
            max_groups: 0,
            hold_out: DEFAULT_HOLD_OUT,
            max_length: DEFAULT_MAX_LENGTH,
            learning_rate: 3e-5,
            threads: 2,
            cache_dir: ragtune::ragtune_home().join("eval-cache"),
            embedding: EmbeddingSettings::default(),
            hybrid: HybridSettings::default(),
            mine_only: false,
        }
    }

    fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.datasets.is_empty() {
            problems.push("at least one --dataset is needed".to_owned());
        }
        if self.negatives == 0 || self.queries_per_step == 0 || self.threads == 0 {
            problems.push("--negatives, --queries-per-step and --threads must be at least 1".to_owned());
        }
        if self.pool <= self.negatives {
            problems.push(format!("--pool {} must exceed --negatives {}", self.pool, self.negatives));
        }
        if !(16..=512).contains(&self.max_length) {
            problems.push(format!("--max-length {} is outside 16..=512", self.max_length));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate < 1.0) {
            problems.push(format!("--learning-rate {} is outside (0, 1)", self.learning_rate));
        }
        for d in &self.datasets {
            let train = d.join("qrels").join("train.tsv");
            if !train.is_file() {
                problems.push(format!(
                    "{} has no train split ({} is missing): the reranker trains on train judgements only",
                    d.display(),
                    train.display()
                ));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::invalid_input(problems.join("; "))) }
    }
}

/// One training group, a line of `groups.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The query.
    pub query: String,
    /// A passage that answers it.
    pub positive: String,
    /// Passages that do not, hardest first in no particular sense (a seeded choice among the retrieved).
    pub negatives: Vec<String>,
    /// Where it came from: `dataset/query id`.
    pub source: String,
}

/// What was mined from one dataset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MinedDataset {
    /// The dataset directory.
    pub dataset: String,
    /// The split read (always `train`).
    pub split: String,
    /// xxh3 of `corpus.jsonl`, `queries.jsonl` and the split's qrels.
    pub files_xxh3: BTreeMap<String, String>,
    /// Judged queries of the split.
    pub queries: usize,
    /// Queries left out because QA evaluations report them.
    pub reserved_for_evaluation: usize,
    /// Queries held out for fitting the blend weight (`hold_out`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_out: usize,
    /// Groups written.
    pub groups: usize,
    /// Groups whose positive was not retrieved (the judged text, or a relevant document's opening words).
    pub positives_not_retrieved: usize,
    /// Groups with fewer negatives than asked (the trainer skips them).
    pub short_groups: usize,
    /// Queries stepped over because the dataset judges passages but not for them.
    pub without_passage_judgements: usize,
}

/// A progress event of [`train_reranker`].
#[derive(Debug, Clone, PartialEq)]
pub enum TrainEvent {
    /// A message.
    Log(String),
    /// Training started: the optimizer steps to run.
    Started {
        /// Steps.
        steps: u64,
        /// Groups used.
        groups: u64,
    },
    /// An optimizer step finished.
    Step {
        /// Steps done.
        step: u64,
        /// Mean loss since the previous event.
        loss: f64,
    },
    /// Exporting and quantising.
    Export,
}

/// What [`train_reranker`] produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The model directory.
    pub out: PathBuf,
    /// The datasets mined.
    pub mined: Vec<MinedDataset>,
    /// `provenance.json` as written (absent with `mine_only`).
    pub provenance: Option<serde_json::Value>,
}

/// Mines the training groups of every dataset and writes them to `out/groups.jsonl`.
///
/// # Errors
/// Datasets without a train split, model or index failures.
pub async fn mine_groups(opts: &TrainOptions, log: &mut dyn FnMut(&str)) -> Result<(Vec<Group>, Vec<MinedDataset>)> {
    opts.validate()?;
    let embedding = EmbeddingSettings { mode: EmbeddingMode::On, ..opts.embedding.clone() };
    let embedder = ragtune::load_embedder(&embedding)?;
    let mut groups = Vec::new();
    let mut mined = Vec::new();
    for dataset in &opts.datasets {
        let (g, m) = mine_dataset(opts, dataset, &embedding, embedder.clone(), log).await?;
        log(&format!(
            "{}: {} groups from {} judged train queries ({} reserved for evaluation, {} held out)",
            dataset.display(),
            m.groups,
            m.queries,
            m.reserved_for_evaluation,
            m.held_out
        ));
        groups.extend(g);
        mined.push(m);
    }
    Ok((groups, mined))
}

/// Mines one dataset's groups: its passages indexed, each training query's hard negatives drawn from its hybrid
/// retrieval, and what was mined.
async fn mine_dataset(
    opts: &TrainOptions,
    dataset: &Path,
    embedding: &EmbeddingSettings,
    embedder: std::sync::Arc<dyn ragtune::core::Embedder>,
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<Group>, MinedDataset)> {
    let data = ragtune::ingest::load_beir(dataset, "train")?;
    let gold = crate::passages::load_passage_qrels(dataset, "train")?;
    let name = dataset_name(dataset);
    let eval = EvalOptions {
        split: "train".into(),
        retriever: "hybrid".into(),
        top_k: opts.pool,
        embedding: embedding.clone(),
        hybrid: opts.hybrid,
        cache_dir: opts.cache_dir.clone(),
        chunking: EvalChunking::Passages,
        ..EvalOptions::new(dataset)
    };
    let opened = open_index(&eval, &name, &data.corpus, Some(embedder), None, log).await?;
    let retriever = opened.engine.transformed_retriever(Strategy::Hybrid, Transform::None).await?;
    let gold = gold.map(|g| g.locate(&data.corpus));
    let mut miner = Miner {
        opts,
        name: &name,
        qrels: &data.qrels,
        gold: gold.as_ref(),
        locator: crate::passages::Locator::new(&data.corpus),
        docs: data.corpus.iter().map(|d| (d.id.as_str(), d)).collect(),
    };
    let (queries, mut report) = training_queries(opts, dataset, &data);
    if queries.is_empty() && report.held_out > 0 {
        return Err(Error::invalid_input(format!(
            "--hold-out {} leaves none of the {} judged train queries of {} to train on; pass a smaller --hold-out \
             (0 trains on all of them)",
            opts.hold_out,
            report.queries - report.reserved_for_evaluation,
            dataset.display()
        )));
    }

    let mut groups = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let query = Query { id: Some(q.id.clone()), ..Query::new(q.text.clone()).with_top_k(opts.pool) };
        let list = retriever.retrieve(&Ctx::new(), std::slice::from_ref(&query)).await?.pop().unwrap_or_default();
        let Some((positives, not_negative)) = miner.positives(q, &list, &mut report) else { continue };
        miner.push_groups(q, &list, positives, &not_negative, &mut groups, &mut report);
        if (i + 1) % 200 == 0 {
            log(&format!("{name}: mined {} of {} queries", i + 1, queries.len()));
        }
    }
    if opts.max_groups > 0 && groups.len() > opts.max_groups {
        groups.sort_by_key(|g| {
            (xxhash_rust::xxh3::xxh3_64(format!("{}\0{}", opts.seed, g.source).as_bytes()), g.source.clone())
        });
        groups.truncate(opts.max_groups);
        groups.sort_by(|a, b| a.source.cmp(&b.source));
    }
    report.groups = groups.len();
    Ok((groups, report))
}

/// The judged train queries of a dataset that training may use, and the report begun for them: the CMU set's
/// questions that QA evaluations report and the first `opts.hold_out` queries are left out, and the dataset's files
/// are hashed.
fn training_queries<'d>(
    opts: &TrainOptions,
    dataset: &Path,
    data: &'d ragtune::ingest::BeirDataset,
) -> (Vec<&'d ragtune::ingest::BeirQuery>, MinedDataset) {
    let mut queries = data.queries_with_qrels();
    // The CMU set's questions are those of the QA evaluations: leave out the ones they report.
    let reserved: HashSet<String> = if dataset.join("build.json").is_file() {
        let mut ids: Vec<&str> = data.queries.iter().map(|q| q.id.as_str()).collect();
        ids.sort_by_key(|id| (xxhash_rust::xxh3::xxh3_64(id.as_bytes()), *id));
        ids.into_iter().take(crate::qa::QA_CALIBRATION_FROM).map(str::to_owned).collect()
    } else {
        HashSet::new()
    };
    let held: HashSet<String> = queries.iter().take(opts.hold_out).map(|q| q.id.clone()).collect();
    let before = queries.len();
    queries.retain(|q| !reserved.contains(&q.id));
    let reserved_count = before - queries.len();
    queries.retain(|q| !held.contains(&q.id));
    let mut report = MinedDataset {
        dataset: dataset.display().to_string(),
        split: "train".into(),
        queries: before,
        reserved_for_evaluation: reserved_count,
        held_out: before - reserved_count - queries.len(),
        ..MinedDataset::default()
    };
    for file in ["corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/passages/train.tsv", "passages.jsonl"] {
        if let Ok(bytes) = std::fs::read(dataset.join(file)) {
            report.files_xxh3.insert(file.to_owned(), format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes)));
        }
    }
    (queries, report)
}

/// A query's positives (each with whether it was retrieved) and the ids of the retrieved passages that may not be
/// its negatives.
type Positives<'l> = (Vec<(String, bool)>, HashSet<&'l str>);

/// What mining one dataset's groups reads: its judgements at document and passage level and its documents.
struct Miner<'a> {
    opts: &'a TrainOptions,
    name: &'a str,
    qrels: &'a ragtune::ingest::Qrels,
    gold: Option<&'a crate::passages::GoldPassages>,
    locator: crate::passages::Locator<'a>,
    docs: std::collections::HashMap<&'a str, &'a Document>,
}

impl Miner<'_> {
    /// The positives of query `q` among its retrieved passages `list` and the passages that may not be negatives;
    /// `None` (counted in `report`) when the dataset judges passages but not for this query.
    fn positives<'l>(
        &mut self,
        q: &ragtune::ingest::BeirQuery,
        list: &'l [Candidate],
        report: &mut MinedDataset,
    ) -> Option<Positives<'l>> {
        let judged = self.qrels.get(&q.id);
        let relevant_doc = |doc: &str| judged.and_then(|j| j.get(doc)).is_some_and(|g| *g > 0);
        // Positives, and which retrieved passages may not be negatives.
        let mut positives: Vec<(String, bool)> = Vec::new();
        let mut not_negative: HashSet<&str> = HashSet::new();
        if let Some(g) = self.gold {
            // With passage judgements, a query without any (a yes/no question, say) has no known answering
            // passage: a relevant article's best passage need not answer it.
            if !g.judges(&q.id) {
                report.without_passage_judgements += 1;
                return None;
            }
            let credited: Vec<&Candidate> =
                list.iter().filter(|c| g.credits(&q.id, &c.chunk, &mut self.locator)).collect();
            not_negative.extend(credited.iter().map(|c| c.chunk.id.as_str()));
            // A passage of a relevant article that holds no judged passage may still answer: not a negative.
            not_negative.extend(list.iter().filter(|c| relevant_doc(&c.chunk.doc_id)).map(|c| c.chunk.id.as_str()));
            match credited.first() {
                Some(c) => positives.push((c.chunk.indexable_text(), true)),
                None => {
                    if let Some(text) = g.first_text(&q.id, &self.docs) {
                        positives.push((text, false));
                    }
                }
            }
        } else {
            not_negative.extend(list.iter().filter(|c| relevant_doc(&c.chunk.doc_id)).map(|c| c.chunk.id.as_str()));
            let mut relevant: Vec<&str> = judged
                .map(|j| j.iter().filter(|(_, g)| **g > 0).map(|(d, _)| d.as_str()).collect())
                .unwrap_or_default();
            relevant.sort_unstable();
            for doc in relevant.into_iter().take(2) {
                match list.iter().find(|c| c.chunk.doc_id == doc) {
                    Some(c) => positives.push((c.chunk.indexable_text(), true)),
                    None => {
                        if let Some(d) = self.docs.get(doc) {
                            positives.push((opening(d, 100), false));
                        }
                    }
                }
            }
        }
        Some((positives, not_negative))
    }

    /// Pushes query `q`'s groups onto `groups`: one per positive, with `opts.negatives` passages of `list` that may
    /// be negatives, chosen by a seeded hash.
    fn push_groups(
        &self,
        q: &ragtune::ingest::BeirQuery,
        list: &[Candidate],
        positives: Vec<(String, bool)>,
        not_negative: &HashSet<&str>,
        groups: &mut Vec<Group>,
        report: &mut MinedDataset,
    ) {
        let opts = self.opts;
        let mut candidates: Vec<&Candidate> =
            list.iter().filter(|c| !not_negative.contains(c.chunk.id.as_str())).collect();
        for (n, (positive, retrieved)) in positives.into_iter().enumerate() {
            candidates.sort_by_key(|c| {
                (
                    xxhash_rust::xxh3::xxh3_64(format!("{}\0{}\0{}\0{n}", opts.seed, q.id, c.chunk.id).as_bytes()),
                    c.chunk.id.clone(),
                )
            });
            let negatives: Vec<String> =
                candidates.iter().take(opts.negatives).map(|c| c.chunk.indexable_text()).collect();
            report.positives_not_retrieved += usize::from(!retrieved);
            report.short_groups += usize::from(negatives.len() < opts.negatives);
            let source = format!("{}/{}", self.name, q.id);
            groups.push(Group { query: q.text.clone(), positive, negatives, source });
        }
    }
}

/// A document's title and its first `words` words, as a passage would be shown to the model.
fn opening(d: &Document, words: usize) -> String {
    let text: Vec<&str> = d.text.split_whitespace().take(words).collect();
    match d.title.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => format!("{t}\n{}", text.join(" ")),
        None => text.join(" "),
    }
}

/// Mines the groups, then trains, exports and quantises the model in the trainer's venv.
///
/// # Errors
/// As [`mine_groups`]; [`Unavailable`](ragtune::core::ErrorKind::Unavailable) when the trainer's environment cannot
/// be made (no PyTorch: the message names the Debian packages); the trainer's own failure with its last lines.
pub async fn train_reranker(opts: &TrainOptions, progress: &mut dyn FnMut(TrainEvent)) -> Result<TrainReport> {
    opts.validate()?;
    let home = ragtune::ragtune_home();
    let init = ragtune::provision::ModelLayout::new(&home).minilm_dir();
    // Fail before the long mining when the trainer cannot run.
    let python = if opts.mine_only { None } else { Some(trainer_venv_python(&home, &init, progress)?) };
    let (groups, mined) = mine_groups(opts, &mut |m| progress(TrainEvent::Log(m.to_owned()))).await?;
    if groups.is_empty() {
        return Err(Error::invalid_input("no training group could be mined from the datasets"));
    }
    let io = |what: String| move |e: std::io::Error| Error::permanent(what).with_source(e);
    std::fs::create_dir_all(&opts.out).map_err(io(format!("cannot create {}", opts.out.display())))?;
    let groups_path = opts.out.join("groups.jsonl");
    let mut text = String::new();
    for g in &groups {
        text.push_str(&serde_json::to_string(g).map_err(|e| Error::permanent("groups").with_source(e))?);
        text.push('\n');
    }
    std::fs::write(&groups_path, text).map_err(io(format!("cannot write {}", groups_path.display())))?;
    let Some(python) = python else {
        return Ok(TrainReport { out: opts.out.clone(), mined, provenance: None });
    };

    let described = serde_json::json!({
        "format": 1,
        "trainer": "ragtune train reranker",
        "ragtune": env!("CARGO_PKG_VERSION"),
        "datasets": mined,
        "negatives_from": {"retrieval": "hybrid", "pool": opts.pool, "chunking": EvalOptions::new("").chunking_key()},
        "max_groups": opts.max_groups,
        "hold_out": opts.hold_out,
    });
    // The script and the data description sit beside the groups while training runs, and are removed after.
    let script = opts.out.join(".train_cross_encoder.py");
    std::fs::write(&script, TRAINER_SCRIPT).map_err(io(format!("cannot write {}", script.display())))?;
    let described_path = opts.out.join(".data.json");
    std::fs::write(&described_path, described.to_string()).map_err(io("cannot write the data description".into()))?;

    let files = TrainerFiles { script: &script, groups: &groups_path, init: &init, described: &described_path };
    let mut child = trainer_command(opts, &python, &files)
        .spawn()
        .map_err(|e| Error::unavailable(format!("cannot run {}: {e}", python.display())))?;
    let stderr = child.stderr.take().map(|s| {
        std::thread::spawn(move || {
            let mut lines: Vec<String> = BufReader::new(s).lines().map_while(std::result::Result::ok).collect();
            let keep = lines.len().saturating_sub(12);
            lines.drain(..keep);
            lines
        })
    });
    if let Some(out) = child.stdout.take() {
        forward_progress(out, progress);
    }
    let status = child.wait().map_err(|e| Error::permanent("the trainer vanished").with_source(e))?;
    let tail = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let _ = std::fs::remove_file(&script);
    let _ = std::fs::remove_file(&described_path);
    if !status.success() {
        return Err(Error::permanent(format!("the trainer failed ({status}): {}", tail.join(" | "))));
    }
    let provenance_path = opts.out.join("provenance.json");
    let provenance = std::fs::read_to_string(&provenance_path)
        .map_err(io(format!("cannot read {}", provenance_path.display())))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| Error::corrupt("provenance.json").with_source(e)))?;
    let _ = std::io::stderr().flush();
    Ok(TrainReport { out: opts.out.clone(), mined, provenance: Some(provenance) })
}

/// The trainer venv's Python, made when missing, once the fp32 weights the reranker starts from (`init`) are known
/// to be there.
fn trainer_venv_python(home: &Path, init: &Path, progress: &mut dyn FnMut(TrainEvent)) -> Result<PathBuf> {
    if !init.join("model.safetensors").is_file() {
        return Err(Error::unavailable(format!(
            "{} is missing: run `cargo xtask models` (it provisions the fp32 weights the reranker starts from)",
            init.join("model.safetensors").display()
        )));
    }
    ragtune::provision::trainer::trainer_python(home, &mut |m| progress(TrainEvent::Log(m.to_owned())))
}

/// The files a training run reads: the trainer script, the groups, the initial weights' directory and the data
/// description.
struct TrainerFiles<'a> {
    script: &'a Path,
    groups: &'a Path,
    init: &'a Path,
    described: &'a Path,
}

/// The trainer's command line and environment: the recipe's settings as arguments, the thread count for torch and
/// the BLAS libraries, unbuffered output, stdout and stderr piped.
fn trainer_command(opts: &TrainOptions, python: &Path, files: &TrainerFiles<'_>) -> Command {
    let mut cmd = Command::new(python);
    cmd.arg(files.script)
        .arg("--groups")
        .arg(files.groups)
        .arg("--init")
        .arg(files.init)
        .arg("--out")
        .arg(&opts.out)
        .arg("--provenance")
        .arg(files.described)
        .args(["--seed", &opts.seed.to_string(), "--steps", &opts.steps.to_string()])
        .args(["--queries-per-step", &opts.queries_per_step.to_string()])
        .args(["--negatives", &opts.negatives.to_string(), "--max-length", &opts.max_length.to_string()])
        .args(["--lr", &opts.learning_rate.to_string(), "--threads", &opts.threads.to_string()])
        .env("OMP_NUM_THREADS", opts.threads.to_string())
        .env("OPENBLAS_NUM_THREADS", opts.threads.to_string())
        .env("PYTHONUNBUFFERED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Reads the trainer's stdout to its end: its JSON events as [`TrainEvent`]s, any other line as a log line.
fn forward_progress(out: impl std::io::Read, progress: &mut dyn FnMut(TrainEvent)) {
    for line in BufReader::new(out).lines().map_while(std::result::Result::ok) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            progress(TrainEvent::Log(line));
            continue;
        };
        let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        match v.get("event").and_then(serde_json::Value::as_str) {
            Some("start") => progress(TrainEvent::Started { steps: n("steps"), groups: n("groups") }),
            Some("step") => progress(TrainEvent::Step {
                step: n("step"),
                loss: v.get("loss").and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN),
            }),
            Some("export") => progress(TrainEvent::Export),
            _ => {}
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &usize) -> bool {
    *n == 0
}
