//! Budget efficiency of the reranking controller, on an evaluation's retrieved candidates: for each policy and
//! budget, the nDCG@10 reached and the pairs scored, beside a full rerank and the fixed "rerank the first B by
//! retrieval rank" baseline at the same budget.
//!
//! The reranker's scores are cached on disk per (reranker, model, query, passage) (`CachedReranker`): the full
//! rerank pays for every pair once, and every policy and budget then replays from the cache, so comparing ten
//! settings costs one model pass.
//!
//! The reranker is the LLM relevance judge or a cross-encoder ([`EvalReranker`]); `eval retrieval --rerank`
//! reranks the top of every query with it fully ([`FullRerank`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ragtune::core::{Budget, Candidate, Cost, Ctx, Error, Llm, Reranker, Result};
use ragtune::evaluators::metrics::{Metric, Qrels, Runs, evaluate};
use ragtune::rerank::{CachedReranker, Controller, ControllerConfig, RerankPolicy};
use ragtune::{EmbeddingSettings, LlmSettings, RerankSettings, RerankerKind};
use serde::{Deserialize, Serialize};

/// The reranker of an evaluation and where its scores are cached.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalReranker {
    /// `reranker` (`llm` or `cross-encoder`) and the cross-encoder's `model`, `max_length` and `batch_size`, as in
    /// `[rerank]` (its pipeline settings, `enabled`, `max_docs` and `policy`, are not read).
    pub settings: RerankSettings,
    /// The score cache (`$RAGTUNE_HOME/rerank-cache` by default).
    pub score_cache: PathBuf,
}

impl Default for EvalReranker {
    fn default() -> Self {
        Self { settings: RerankSettings::default(), score_cache: ragtune::ragtune_home().join("rerank-cache") }
    }
}

impl EvalReranker {
    /// The reranker `kind` with the model `model` (a cross-encoder's directory).
    #[must_use]
    pub fn new(kind: RerankerKind, model: Option<String>) -> Self {
        let mut r = Self::default();
        r.settings.reranker = kind;
        r.settings.model = model;
        r
    }

    /// Which reranker.
    #[must_use]
    pub fn kind(&self) -> RerankerKind {
        self.settings.reranker
    }

    /// What is wrong with the settings, if anything (a cross-encoder without a model, sizes of 0).
    pub(crate) fn problem(&self) -> Option<String> {
        if self.kind() == RerankerKind::CrossEncoder
            && self.settings.model.as_deref().is_none_or(|m| m.trim().is_empty())
        {
            return Some("the reranker `cross-encoder` needs a model: pass --rerank-model DIR".to_owned());
        }
        self.settings.validate().err().map(|e| e.message().to_owned())
    }

    /// Builds the reranker behind the score cache, and what the report's `config` records of it (the reranker, its
    /// model and, for a cross-encoder, the sha256 of its `model.onnx` and its `max_length`: everything that changes
    /// scores). The cross-encoder runs on `embedding`'s ONNX Runtime and threads.
    ///
    /// # Errors
    /// An `llm` reranker without `llm`; a model that does not load; a score cache that cannot be created.
    pub fn build(
        &self,
        llm: Option<&Arc<dyn Llm>>,
        llm_settings: &LlmSettings,
        embedding: &EmbeddingSettings,
    ) -> Result<(Arc<dyn Reranker>, serde_json::Value)> {
        match self.kind() {
            RerankerKind::Llm => {
                let llm = llm.ok_or_else(|| {
                    Error::invalid_input(
                        "the reranker `llm` needs an LLM: pass --llm-url URL or set $RAGTUNE_LLM_URL (`cargo xtask llm start` runs a local one)",
                    )
                })?;
                let inner = ragtune::rerank::LlmReranker::new(
                    llm.clone(),
                    ragtune::rerank::LlmRerankerConfig {
                        repair: Some(ragtune::llm::prompts::REPAIR_JSON),
                        ..ragtune::rerank::LlmRerankerConfig::new(ragtune::llm::prompts::RELEVANCE)
                    },
                )?;
                let cached = CachedReranker::new(Arc::new(inner), &self.score_cache)?;
                let config = serde_json::json!({ "reranker": "llm", "llm_model": llm_settings.model });
                Ok((Arc::new(cached), config))
            }
            RerankerKind::CrossEncoder => {
                let fingerprint = ragtune::cross_encoder_fingerprint(&self.settings)?;
                // On the evaluation's `--threads`, like the embedding model: scores do not depend on threads.
                let settings = RerankSettings { threads: embedding.threads, ..self.settings.clone() };
                let inner = ragtune::load_cross_encoder(&settings, embedding)?;
                let model = inner.name().strip_prefix("cross-encoder:").unwrap_or(inner.name()).to_owned();
                let cached = CachedReranker::new(inner, &self.score_cache)?.with_model_id(&fingerprint);
                let mut config = serde_json::json!({
                    "reranker": "cross-encoder", "model": model, "max_length": self.settings.max_length,
                });
                match fingerprint.strip_prefix("sha256:") {
                    Some(sha) => config["model_sha256"] = sha.into(),
                    None => config["model_id"] = fingerprint.into(),
                }
                Ok((Arc::new(cached), config))
            }
        }
    }
}

/// `eval retrieval --rerank`: the first `depth` passages of every query reranked fully by `reranker`; the
/// metrics are those of the reranked run.
#[derive(Debug, Clone, PartialEq)]
pub struct FullRerank {
    /// The reranker.
    pub reranker: EvalReranker,
    /// Passages reranked per query (from the top of the retrieved list).
    pub depth: usize,
    /// The weight of the retrieval score in the reranked head's order (0: the reranker's scores alone); see
    /// [`rerank_head`].
    pub retrieval_weight: f32,
}

/// The first `depth` passages of `list` scored by `reranker` and ordered by those scores (ties keep the
/// retrieval order), and the passages below the depth, unchanged.
///
/// With `retrieval_weight` w > 0 the head is ordered by `(1 − w)·z(reranker) + w·z(retrieval)`, each score
/// standardised over the head (mean 0, deviation 1; a constant list counts 0): the reranker refines retrieval
/// instead of replacing it. The fused value becomes the candidates' score.
///
/// # Errors
/// The reranker's.
pub async fn rerank_head(
    reranker: &dyn Reranker,
    ctx: &Ctx,
    query: &str,
    mut list: Vec<Candidate>,
    depth: usize,
    retrieval_weight: f32,
) -> Result<(Vec<Candidate>, Vec<Candidate>)> {
    let tail = list.split_off(depth.min(list.len()));
    let scores = if list.is_empty() { Vec::new() } else { reranker.score(ctx, query, &list).await? };
    if scores.len() != list.len() {
        return Err(Error::permanent(format!(
            "the reranker `{}` returned {} scores for {} passages",
            reranker.name(),
            scores.len(),
            list.len()
        )));
    }
    let scores = if retrieval_weight > 0.0 {
        let retrieval: Vec<f32> = list.iter().map(|c| c.score).collect();
        ragtune::rerank::blend(&scores, &retrieval, retrieval_weight)
    } else {
        scores
    };
    let mut head: Vec<(usize, Candidate)> = list
        .into_iter()
        .zip(scores)
        .map(|(mut c, s)| {
            c.score = s;
            c
        })
        .enumerate()
        .collect();
    head.sort_by(|a, b| b.1.score.total_cmp(&a.1.score).then(a.0.cmp(&b.0)));
    Ok((head.into_iter().map(|(_, c)| c).collect(), tail))
}

/// What to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct RerankEvalOptions {
    /// The reranker (`llm` by default, or `cross-encoder`).
    pub reranker: EvalReranker,
    /// Candidates per query taken from retrieval (the pool the controller works on).
    pub pool: usize,
    /// Budgets as fractions of the pool (0.1 = a tenth of the pairs).
    pub budgets: Vec<f64>,
    /// Policies to compare.
    pub policies: Vec<RerankPolicy>,
    /// Documents per reranker batch.
    pub batch_size: usize,
    /// The weight of retrieval's score in the order of the reranked passages (`[rerank] retrieval_weight`,
    /// [`ragtune::rerank::blend`]), for the full rerank, the fixed baseline and every policy alike; 0: the
    /// reranker's scores alone.
    pub retrieval_weight: f32,
    /// Where to write every query's pool as JSON lines ([`PoolRecord`]), or nowhere.
    pub per_query: Option<PathBuf>,
}

/// One query's pool as `--rerank-per-query` writes it: the candidates in retrieval order with their scores, and
/// the query's judgements (document id → grade).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    /// The query's id.
    pub query: String,
    /// Its candidates in retrieval order.
    pub candidates: Vec<PoolCandidate>,
    /// Its judged documents with their grades.
    pub qrels: BTreeMap<String, i32>,
}

/// One candidate of a [`PoolRecord`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolCandidate {
    /// The passage.
    pub id: String,
    /// Its document.
    pub doc: String,
    /// The retrieval score (the fused score for hybrid).
    pub retrieval: f32,
    /// Each retriever's score and 1-based rank that produced it.
    pub sources: BTreeMap<String, (f32, u32)>,
    /// The reranker's score of the pair.
    pub reranker: f32,
}

impl Default for RerankEvalOptions {
    fn default() -> Self {
        Self {
            reranker: EvalReranker::default(),
            pool: 50,
            budgets: vec![0.1, 0.2, 0.3, 0.5, 1.0],
            policies: vec![RerankPolicy::Greedy, RerankPolicy::Uncertainty],
            batch_size: 5,
            retrieval_weight: 0.0,
            per_query: None,
        }
    }
}

impl RerankEvalOptions {
    /// Checks the reranker, every budget and the sizes before anything runs: a bad budget found after every query
    /// was retrieved would waste the whole retrieval.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune::core::ErrorKind::InvalidInput) naming every setting that is wrong, and why.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        problems.extend(self.reranker.problem());
        let bad: Vec<String> =
            self.budgets.iter().filter(|b| !(**b > 0.0 && **b <= 1.0)).map(ToString::to_string).collect();
        if !bad.is_empty() {
            problems.push(format!("rerank budgets are fractions in (0, 1], got {}", bad.join(", ")));
        }
        if self.budgets.is_empty() || self.policies.is_empty() {
            problems.push("at least one rerank budget and one policy are needed".to_owned());
        }
        if self.pool == 0 || self.batch_size == 0 {
            problems.push("the rerank pool and batch size must be at least 1".to_owned());
        }
        let w = self.retrieval_weight;
        if !(w.is_finite() && (0.0..=1.0).contains(&w)) {
            problems.push(format!("the rerank retrieval weight must be between 0 and 1, got {w}"));
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::invalid_input(problems.join("; "))) }
    }
}

/// One (policy, budget) result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankPoint {
    /// The policy (`baseline-top-b` for the fixed baseline).
    pub policy: String,
    /// The budget as a fraction of the pool.
    pub budget: f64,
    /// Mean nDCG@10 over the queries.
    pub ndcg_at_10: f64,
    /// Mean pairs scored per query.
    pub pairs_per_query: f64,
    /// Mean cost per query as reported by the controller (documents, calls, tokens).
    pub cost_per_query: [f64; 3],
    /// Mean controller time per query in milliseconds, reranker time excluded where the scores came from the
    /// cache.
    pub ms_per_query: f64,
    /// How often each stop reason ended a run.
    pub stopped_by: BTreeMap<String, usize>,
}

/// The budget-efficiency part of an evaluation report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankEvalReport {
    /// The reranker's name.
    pub reranker: String,
    /// Candidates per query.
    pub pool: usize,
    /// Queries evaluated.
    pub queries: usize,
    /// nDCG@10 of retrieval alone on the pool.
    pub retrieval_ndcg_at_10: f64,
    /// nDCG@10 when every pair of the pool is reranked.
    pub full_ndcg_at_10: f64,
    /// Pairs the full rerank scored per query.
    pub full_pairs_per_query: f64,
    /// Every policy and budget, and the fixed baseline at each budget.
    pub points: Vec<RerankPoint>,
}

/// A ranked list of candidates as a run (documents once, at their best position; scores encode the order).
fn to_run(list: &[Candidate]) -> Vec<(String, f32)> {
    let mut seen = HashSet::new();
    let docs: Vec<String> =
        list.iter().filter(|c| seen.insert(c.chunk.doc_id.clone())).map(|c| c.chunk.doc_id.clone()).collect();
    let n = docs.len();
    #[allow(clippy::cast_precision_loss)]
    docs.into_iter().enumerate().map(|(i, d)| (d, (n - i) as f32)).collect()
}

fn ndcg10(qrels: &Qrels, runs: &Runs) -> f64 {
    evaluate(qrels, runs, &[Metric::Ndcg(10)]).mean.get("ndcg@10").copied().unwrap_or(0.0)
}

/// Runs the budget-efficiency evaluation over `queries` (id, text, retrieved candidates in retrieval order).
///
/// # Errors
/// Invalid options ([`RerankEvalOptions::validate`]), reranker failures during the full rerank.
pub async fn evaluate_reranking(
    opts: &RerankEvalOptions,
    reranker: Arc<dyn Reranker>,
    qrels: &Qrels,
    queries: &[(String, String, Vec<Candidate>)],
    log: &mut dyn FnMut(&str),
) -> Result<RerankEvalReport> {
    opts.validate()?;
    let qrels: Qrels = {
        let ids: HashSet<&str> = queries.iter().map(|(id, _, _)| id.as_str()).collect();
        qrels.iter().filter(|(id, _)| ids.contains(id.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    // Retrieval alone, and the full rerank (which fills the score cache).
    // The pools' file is created first: a path that cannot be written fails before the reranker scores anything.
    let pools = opts.per_query.as_deref().map(PoolsFile::create).transpose()?;
    let full = full_pass(opts, &reranker, queries, log).await?;
    if let Some(pools) = pools {
        pools.write(queries, &full.scores, &qrels)?;
    }
    let n = queries.len().max(1) as f64;
    let mut points = Vec::new();
    for &budget in &opts.budgets {
        points.push(baseline_point(opts, budget, queries, &full.scores, &qrels));
        for policy in &opts.policies {
            points.push(policy_point(opts, policy, budget, &reranker, queries, &qrels).await?);
        }
    }
    Ok(RerankEvalReport {
        reranker: reranker.name().to_owned(),
        pool: opts.pool,
        queries: queries.len(),
        retrieval_ndcg_at_10: ndcg10(&qrels, &full.retrieval),
        full_ndcg_at_10: ndcg10(&qrels, &full.full),
        full_pairs_per_query: full.pairs as f64 / n,
        points,
    })
}

/// The `--rerank-per-query` file, created before anything is scored.
struct PoolsFile {
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
}

impl PoolsFile {
    fn fail(path: &Path, e: std::io::Error) -> Error {
        Error::permanent(format!("cannot write {}", path.display())).with_source(e)
    }

    fn create(path: &Path) -> Result<Self> {
        let file = std::fs::File::create(path).map_err(|e| Self::fail(path, e))?;
        Ok(Self { path: path.to_path_buf(), out: std::io::BufWriter::new(file) })
    }

    /// Every query's pool ([`PoolRecord`]), one JSON line each, in the queries' order.
    fn write(
        mut self,
        queries: &[(String, String, Vec<Candidate>)],
        scores: &HashMap<String, HashMap<String, f32>>,
        qrels: &Qrels,
    ) -> Result<()> {
        use std::io::Write as _;
        for (id, _, cands) in queries {
            let record = PoolRecord {
                query: id.clone(),
                candidates: cands
                    .iter()
                    .map(|c| PoolCandidate {
                        id: c.chunk.id.clone(),
                        doc: c.chunk.doc_id.clone(),
                        retrieval: c.score,
                        sources: c.sources.iter().map(|(k, v)| (k.clone(), (v.score, v.rank))).collect(),
                        reranker: scores[id][&c.chunk.id],
                    })
                    .collect(),
                qrels: qrels.get(id).map(|q| q.iter().map(|(d, g)| (d.clone(), *g)).collect()).unwrap_or_default(),
            };
            let line = serde_json::to_string(&record)
                .map_err(|e| Error::permanent("cannot serialise a pool").with_source(e))?;
            writeln!(self.out, "{line}").map_err(|e| Self::fail(&self.path, e))?;
        }
        self.out.flush().map_err(|e| Self::fail(&self.path, e))
    }
}

/// What the full pass over the queries gave: the runs of retrieval alone and of the full rerank, every pair's
/// reranker score (per query id, per chunk id) and the pairs scored.
struct FullPass {
    retrieval: Runs,
    full: Runs,
    scores: HashMap<String, HashMap<String, f32>>,
    pairs: usize,
}

/// Retrieval alone, and the full rerank of every query's candidates in batches (which fills the score cache).
async fn full_pass(
    opts: &RerankEvalOptions,
    reranker: &Arc<dyn Reranker>,
    queries: &[(String, String, Vec<Candidate>)],
    log: &mut dyn FnMut(&str),
) -> Result<FullPass> {
    let mut retrieval: Runs = BTreeMap::new();
    let mut full: Runs = BTreeMap::new();
    let mut scores: HashMap<String, HashMap<String, f32>> = HashMap::new();
    let mut full_pairs = 0_usize;
    for (i, (id, text, cands)) in queries.iter().enumerate() {
        retrieval.insert(id.clone(), to_run(cands));
        let mut s = Vec::with_capacity(cands.len());
        for chunk in cands.chunks(opts.batch_size.max(1)) {
            s.extend(reranker.score(&Ctx::new(), text, chunk).await.map_err(|e| e.context(format!("query {id}")))?);
        }
        full_pairs += cands.len();
        let order_by = blended(&s, cands, opts.retrieval_weight);
        let mut order: Vec<(usize, f32)> = order_by.iter().copied().enumerate().collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let ranked: Vec<Candidate> = order.iter().map(|(j, _)| cands[*j].clone()).collect();
        full.insert(id.clone(), to_run(&ranked));
        scores.insert(id.clone(), cands.iter().zip(&s).map(|(c, v)| (c.chunk.id.clone(), *v)).collect());
        if (i + 1) % 10 == 0 {
            log(&format!("rerank: full pass {} of {} queries", i + 1, queries.len()));
        }
    }
    Ok(FullPass { retrieval, full, scores, pairs: full_pairs })
}

/// The fixed baseline at one budget: rerank the first B candidates by retrieval rank (with the full pass's
/// `scores`), the rest stay in retrieval order.
fn baseline_point(
    opts: &RerankEvalOptions,
    budget: f64,
    queries: &[(String, String, Vec<Candidate>)],
    scores: &HashMap<String, HashMap<String, f32>>,
    qrels: &Qrels,
) -> RerankPoint {
    let n = queries.len().max(1) as f64;
    let mut runs: Runs = BTreeMap::new();
    let mut pairs = 0_usize;
    for (id, _, cands) in queries {
        let b = ((budget * cands.len() as f64).ceil() as usize).min(cands.len());
        let s = &scores[id];
        let model: Vec<f32> = cands[..b].iter().map(|c| s[&c.chunk.id]).collect();
        let by = blended(&model, &cands[..b], opts.retrieval_weight);
        let mut head: Vec<(usize, &Candidate)> = cands[..b].iter().enumerate().collect();
        head.sort_by(|x, y| by[y.0].total_cmp(&by[x.0]).then(x.0.cmp(&y.0)));
        let ranked: Vec<Candidate> =
            head.into_iter().map(|(_, c)| c.clone()).chain(cands[b..].iter().cloned()).collect();
        runs.insert(id.clone(), to_run(&ranked));
        pairs += b;
    }
    RerankPoint {
        policy: "baseline-top-b".into(),
        budget,
        ndcg_at_10: ndcg10(qrels, &runs),
        pairs_per_query: pairs as f64 / n,
        cost_per_query: [pairs as f64 / n, 0.0, 0.0],
        ms_per_query: 0.0,
        stopped_by: BTreeMap::new(),
    }
}

/// One policy's point at one budget: the controller run on every query with a budget of that share of its
/// candidates (at least one document), its order blended with retrieval's when `retrieval_weight` > 0.
async fn policy_point(
    opts: &RerankEvalOptions,
    policy: &RerankPolicy,
    budget: f64,
    reranker: &Arc<dyn Reranker>,
    queries: &[(String, String, Vec<Candidate>)],
    qrels: &Qrels,
) -> Result<RerankPoint> {
    let n = queries.len().max(1) as f64;
    let (estimator, scheduler) = policy.parts(opts.batch_size);
    let controller = Controller::new(reranker.clone())
        .estimator(estimator)
        .scheduler(scheduler)
        .config(ControllerConfig { k: 10, ..ControllerConfig::default() });
    let mut runs: Runs = BTreeMap::new();
    let (mut spent, mut ms) = (Cost::ZERO, 0.0);
    let mut stopped: BTreeMap<String, usize> = BTreeMap::new();
    for (id, text, cands) in queries {
        let docs = ((budget * cands.len() as f64).ceil() as u64).max(1);
        let ctx = Ctx::new().with_budget(Budget::new(Cost::new(u64::MAX, docs, u64::MAX)));
        let t = Instant::now();
        let outcome = controller.run(&ctx, text, cands.clone()).await?;
        let mut ranked = outcome.candidates();
        if opts.retrieval_weight > 0.0 {
            let before: HashMap<String, f32> = cands.iter().map(|c| (c.chunk.id.clone(), c.score)).collect();
            ragtune::rerank::blend_reranked(&mut ranked, reranker.name(), &before, opts.retrieval_weight);
        }
        ms += t.elapsed().as_secs_f64() * 1000.0;
        spent += outcome.report.spent;
        *stopped.entry(outcome.report.stopped_by.to_string()).or_default() += 1;
        runs.insert(id.clone(), to_run(&ranked));
    }
    Ok(RerankPoint {
        policy: policy.name().to_owned(),
        budget,
        ndcg_at_10: ndcg10(qrels, &runs),
        pairs_per_query: spent.docs as f64 / n,
        cost_per_query: [spent.docs as f64 / n, spent.calls as f64 / n, spent.tokens as f64 / n],
        ms_per_query: ms / n,
        stopped_by: stopped,
    })
}

/// The order scores of `candidates` whose reranker scores are `model`: blended with their retrieval scores when
/// `retrieval_weight` > 0, else the reranker's.
fn blended(model: &[f32], candidates: &[Candidate], retrieval_weight: f32) -> Vec<f32> {
    if retrieval_weight > 0.0 {
        let retrieval: Vec<f32> = candidates.iter().map(|c| c.score).collect();
        ragtune::rerank::blend(model, &retrieval, retrieval_weight)
    } else {
        model.to_vec()
    }
}

/// Renders the report as a table.
#[must_use]
pub fn rerank_table(r: &RerankEvalReport) -> String {
    let mut out = format!(
        "rerank {} on the top {} of {} queries: retrieval nDCG@10 {:.4}, full rerank {:.4} ({:.1} pairs/query)\n",
        r.reranker, r.pool, r.queries, r.retrieval_ndcg_at_10, r.full_ndcg_at_10, r.full_pairs_per_query
    );
    out.push_str(&format!(
        "{:<16} {:>7} {:>9} {:>8} {:>8} {:>10}\n",
        "policy", "budget", "nDCG@10", "% full", "pairs", "ms/query"
    ));
    for p in &r.points {
        let pct = if r.full_ndcg_at_10 > 0.0 { 100.0 * p.ndcg_at_10 / r.full_ndcg_at_10 } else { 0.0 };
        out.push_str(&format!(
            "{:<16} {:>7.2} {:>9.4} {:>7.1}% {:>8.1} {:>10.3}\n",
            p.policy, p.budget, p.ndcg_at_10, pct, p.pairs_per_query, p.ms_per_query
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wrong_setting_is_named() {
        RerankEvalOptions::default().validate().unwrap();
        let opts = RerankEvalOptions {
            reranker: EvalReranker::new(RerankerKind::CrossEncoder, None),
            budgets: vec![0.0, 0.5, 1.5],
            ..Default::default()
        };
        let err = opts.validate().unwrap_err();
        assert_eq!(err.kind(), ragtune::core::ErrorKind::InvalidInput);
        assert_eq!(
            err.to_string(),
            "the reranker `cross-encoder` needs a model: pass --rerank-model DIR; rerank budgets are fractions in \
             (0, 1], got 0, 1.5"
        );
        let opts = RerankEvalOptions { policies: vec![], pool: 0, ..Default::default() };
        assert!(opts.validate().unwrap_err().to_string().contains("one policy"));
        let mut opts = RerankEvalOptions::default();
        opts.reranker.settings.max_length = 0;
        assert!(opts.validate().unwrap_err().to_string().contains("[rerank] max_length"));
    }

    /// Reranks the first `depth` of `texts` (retrieval order) with scores by text and renders `head | tail`.
    fn check_head(texts: &[&str], scores: &[(&str, f32)], depth: usize, expect: &str) {
        use ragtune::core::{Chunk, ScoredHit};
        let mut reranker = ragtune_testkit::fakes::ScriptedReranker::new().with_default(0.0);
        for (t, s) in scores {
            reranker = reranker.with_score(*t, *s);
        }
        let list: Vec<Candidate> = texts
            .iter()
            .map(|t| Candidate::from_hit(ScoredHit { chunk: Chunk::new(*t, *t, *t), score: 1.0 }, "bm25", 1))
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (head, tail) = rt.block_on(rerank_head(&reranker, &Ctx::new(), "q", list, depth, 0.0)).unwrap();
        let ids = |l: &[Candidate]| l.iter().map(|c| c.chunk.id.clone()).collect::<Vec<_>>().join(" ");
        assert_eq!(format!("{} | {}", ids(&head), ids(&tail)), expect);
        assert!(reranker.calls() <= 1, "one call for the whole head");
    }

    #[test]
    fn the_head_is_ordered_by_the_reranker_and_the_tail_keeps_its_order() {
        check_head(&["a", "b", "c", "d", "e"], &[("c", 3.0), ("b", 2.0), ("e", 9.0)], 3, "c b a | d e");
        // Ties keep the retrieval order.
        check_head(&["a", "b", "c"], &[], 3, "a b c | ");
        check_head(&["a", "b"], &[("b", 1.0)], 10, "b a | ");
        check_head(&[], &[], 3, " | ");
    }

    #[test]
    fn a_retrieval_weight_blends_the_standardised_scores() {
        use ragtune::core::{Chunk, ScoredHit};
        // Retrieval says a > b > c; the reranker says c > b > a, by little between b and c.
        let reranker = ragtune_testkit::fakes::ScriptedReranker::new()
            .with_default(0.0)
            .with_score("a", 0.0)
            .with_score("b", 1.0)
            .with_score("c", 1.2);
        let list = || -> Vec<Candidate> {
            [("a", 3.0), ("b", 2.0), ("c", 1.0)]
                .iter()
                .map(|(t, s)| Candidate::from_hit(ScoredHit { chunk: Chunk::new(*t, *t, *t), score: *s }, "bm25", 1))
                .collect()
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let order = |w: f32| {
            let (head, _) = rt.block_on(rerank_head(&reranker, &Ctx::new(), "q", list(), 3, w)).unwrap();
            head.iter().map(|c| c.chunk.id.clone()).collect::<Vec<_>>().join(" ")
        };
        assert_eq!(order(0.0), "c b a");
        assert_eq!(order(0.5), "b a c", "b, second by both, leads the blend; a and c come close");
        assert_eq!(order(1.0), "a b c");
        assert_eq!(ragtune::rerank::standardised(&[2.0, 2.0]), vec![0.0, 0.0], "a constant list counts 0");
    }

    #[tokio::test]
    async fn the_per_query_file_holds_each_pool_with_its_scores_and_judgements() {
        use ragtune::core::{Chunk, ScoredHit};
        let reranker = ragtune_testkit::fakes::ScriptedReranker::new().with_score("p2", 4.0).with_score("p1", -1.5);
        let pool = |id: &str, doc: &str, score: f32, rank: u32| {
            Candidate::from_hit(ScoredHit { chunk: Chunk::new(id, doc, id), score }, "bm25", rank)
        };
        let queries = vec![
            ("q1".to_owned(), "first".to_owned(), vec![pool("p1", "d1", 2.0, 1), pool("p2", "d2", 1.0, 2)]),
            ("q2".to_owned(), "second".to_owned(), vec![pool("p3", "d1", 0.5, 1)]),
        ];
        let qrels: Qrels = [("q1".to_owned(), [("d2".to_owned(), 1)].into_iter().collect())].into_iter().collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pools.jsonl");
        let opts = RerankEvalOptions {
            pool: 30,
            budgets: vec![0.5],
            policies: vec![RerankPolicy::Greedy],
            per_query: Some(path.clone()),
            ..RerankEvalOptions::default()
        };
        let report = evaluate_reranking(&opts, Arc::new(reranker), &qrels, &queries, &mut |_| {}).await.unwrap();
        assert_eq!(report.queries, 2);
        let lines: Vec<PoolRecord> =
            std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].query, "q1");
        let ids: Vec<(&str, &str, f32, f32)> =
            lines[0].candidates.iter().map(|c| (c.id.as_str(), c.doc.as_str(), c.retrieval, c.reranker)).collect();
        assert_eq!(ids, [("p1", "d1", 2.0, -1.5), ("p2", "d2", 1.0, 4.0)]);
        assert_eq!(lines[0].candidates[1].sources["bm25"], (1.0, 2));
        assert_eq!(lines[0].qrels["d2"], 1);
        assert!(lines[1].qrels.is_empty(), "an unjudged query has no judgements");
        // An unwritable path is an error that names it.
        let opts = RerankEvalOptions { per_query: Some(dir.path().join("missing/pools.jsonl")), ..opts };
        let reranker = Arc::new(ragtune_testkit::fakes::ScriptedReranker::new());
        let err = evaluate_reranking(&opts, reranker.clone(), &qrels, &queries, &mut |_| {}).await.unwrap_err();
        assert!(err.to_string().contains("missing/pools.jsonl"), "{err}");
        assert_eq!(reranker.calls(), 0, "nothing was scored before the file failed");
    }
}
