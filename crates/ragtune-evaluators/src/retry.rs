//! The retry policy of self-correction: after an attempt (retrieve, extract, answer, judge), decide whether to
//! accept the answer, retry with a larger `k` or a rewritten query, or give up.
//!
//! This is "smart retry" (docs/pipeline.md, "Smart retry"). It retries only on real failures: retrieval returned
//! nothing, extraction ran and came back (nearly) empty, the answer reports a retrieval error, or more than a set share
//! of the answer's statements are unsupported (70% by default; a 50% rule retried too eagerly). It does not retry an
//! honest "the documents don't contain this" when documents were retrieved: for a question the corpus cannot answer,
//! that is the right answer, and retrying only wastes calls (a policy that did so dropped answer quality from 94% to
//! 81%).
//!
//! [`decide`] is a pure function of the configuration, the attempt number and what the attempt produced, so a
//! pipeline's retry behaviour can be tested without running one.
//!
//! ```
//! use ragtune_evaluators::retry::{AttemptOutcome, RetryConfig, RetryDecision, RetryReason, RetryStrategy, decide};
//!
//! let config = RetryConfig::default();
//! let hallucinated =
//!     AttemptOutcome { retrieved: 5, extracted_chars: Some(400), unsupported_share: Some(0.75), ..Default::default() };
//! let RetryDecision::Retry { reason, strategy, next_k, .. } = decide(&config, 0, &hallucinated) else {
//!     panic!("three quarters unsupported is a retry");
//! };
//! // A rewrite searches again at the same depth.
//! assert_eq!((reason, strategy, next_k), (RetryReason::Unfaithful, RetryStrategy::RewriteQuery, 5));
//!
//! let out_of_scope = AttemptOutcome {
//!     answer: Some("The documents don't contain information about Python.".into()),
//!     unsupported_share: Some(0.0),
//!     ..hallucinated
//! };
//! assert!(matches!(decide(&config, 0, &out_of_scope), RetryDecision::Accept { .. }));
//! assert!(matches!(decide(&config, 2, &AttemptOutcome::default()), RetryDecision::GiveUp { .. }));
//! ```

use ragtune_core::{Error, Result, Verdict};
use serde::{Deserialize, Serialize};

use crate::faithfulness::is_no_info;
use crate::metrics::answer::yes_no;

/// The `k` used when a schedule is empty (which [`RetryConfig::validate`] refuses).
const FALLBACK_K: usize = 5;

/// Settings of the retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// The most retries after the first attempt.
    pub max_retries: usize,
    /// Retry when more than this share of the statements is unsupported (exactly this share does not retry).
    pub unsupported_share: f32,
    /// The retrieval `k` of attempt 0, 1, 2, ...; the last value repeats.
    pub k_schedule: Vec<usize>,
    /// Extraction shorter than this many characters counts as empty.
    pub min_extraction_chars: usize,
    /// When an answer that says the documents lack the information is read again: the same query and `k`,
    /// answered from `pipeline.retry_context` (a focused context can surface a sentence the whole passages
    /// buried). Off by default: an honest "not in the documents" is otherwise never retried.
    pub recheck_no_info: NoInfoRecheck,
}

/// When a "not in the documents" answer is reread ([`RetryConfig::recheck_no_info`]), by the retrieval evaluator's
/// verdict on the passages it was answered from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoInfoRecheck {
    /// Never: the answer is accepted as a valid out-of-scope answer.
    #[default]
    Off,
    /// Only when the evaluator judged the retrieval CORRECT.
    Correct,
    /// Unless the evaluator judged the retrieval INCORRECT (CORRECT, AMBIGUOUS, or not evaluated): only a
    /// retrieval the evaluator itself called a failure makes the admission believable.
    UnlessIncorrect,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 2,
            unsupported_share: 0.7,
            k_schedule: vec![5, 8, 10],
            min_extraction_chars: 50,
            recheck_no_info: NoInfoRecheck::Off,
        }
    }
}

impl RetryConfig {
    /// Checks that the schedule is non-empty with every `k` at least 1 and that the share lies in `0..=1`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming the offending field.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.unsupported_share) {
            return Err(Error::invalid_input(format!(
                "retry config: unsupported_share must lie in 0..=1, not {}",
                self.unsupported_share
            )));
        }
        if self.k_schedule.is_empty() {
            return Err(Error::invalid_input("retry config: k_schedule needs at least one k"));
        }
        if self.k_schedule.contains(&0) {
            return Err(Error::invalid_input(format!(
                "retry config: every k in k_schedule must be at least 1, not {:?}",
                self.k_schedule
            )));
        }
        Ok(())
    }

    /// The retrieval `k` of attempt `attempt` (0-based): the schedule's entry, or its last one past the end
    /// (5 for an empty schedule, which `validate` refuses).
    #[must_use]
    pub fn k_for(&self, attempt: usize) -> usize {
        self.k_schedule.get(attempt).or(self.k_schedule.last()).copied().unwrap_or(FALLBACK_K)
    }
}

/// Why an attempt is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryReason {
    /// Retrieval returned nothing.
    NoResults,
    /// Extraction ran and kept (almost) nothing.
    ExtractionEmpty,
    /// Too many of the answer's statements are unsupported.
    Unfaithful,
    /// The answer reports that retrieval failed.
    RetrievalError,
    /// The answer says the documents lack the information, though the evaluator judged the retrieval CORRECT
    /// (`recheck_no_info`).
    NoInfoDespiteCorrect,
    /// The answer says the documents lack the information, and the evaluator did not judge the retrieval CORRECT
    /// but not INCORRECT either (`recheck_no_info = "unless_incorrect"`).
    NoInfoNotIncorrect,
}

/// How the next attempt differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryStrategy {
    /// Retrieve more passages (the next `k` of the schedule).
    ExpandK,
    /// Rewrite the query with other keywords.
    RewriteQuery,
    /// The same query and `k`, answered again from the retry's context (`pipeline.retry_context`).
    Reread,
}

/// What one attempt produced, as the policy sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptOutcome {
    /// How many passages retrieval returned.
    pub retrieved: usize,
    /// Characters of extracted content; `None` when extraction did not run.
    pub extracted_chars: Option<usize>,
    /// The judge's unsupported share; `None` when the answer was not judged.
    pub unsupported_share: Option<f32>,
    /// The generated answer, if there is one.
    pub answer: Option<String>,
    /// The retrieval evaluator's verdict on the passages; `None` when Corrective RAG did not run.
    pub retrieval_verdict: Option<Verdict>,
    /// The `k` this attempt retrieved with; `0` when unknown, read as the schedule's `k` for the attempt
    /// ([`RetryConfig::k_for`]). A rewrite or a reread keeps it.
    pub k: usize,
    /// This attempt was itself a no-info reread ([`RetryStrategy::Reread`]): a second reread of the same passages
    /// would ask the same request again, so its no-info answer is accepted.
    pub reread: bool,
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum RetryDecision {
    /// Keep the answer.
    Accept {
        /// Why it is kept.
        reason: String,
    },
    /// Try again.
    Retry {
        /// What failed.
        reason: RetryReason,
        /// How the next attempt differs.
        strategy: RetryStrategy,
        /// The retrieval `k` of the next attempt.
        next_k: usize,
        /// What exactly failed, for traces.
        detail: String,
    },
    /// Stop retrying and keep the last answer.
    GiveUp {
        /// That the retries are spent, with the last failure.
        reason: String,
    },
}

/// Phrases with which an answer reports that retrieval itself failed, lower-cased.
const RETRIEVAL_ERRORS: &[&str] = &[
    "couldn't find any documents",
    "could not find any documents",
    "no documents were retrieved",
    "no documents were found",
    "no documents were returned",
    "search failed",
    "retrieval failed",
    "error retrieving",
    "error while retrieving",
];

/// Whether `answer` reports a retrieval error ("couldn't find any documents", "no documents were retrieved",
/// "search failed", "error retrieving"), in any case and with straight or curly apostrophes.
#[must_use]
pub fn is_retrieval_error(answer: &str) -> bool {
    let lower = answer.to_lowercase().replace(['\u{2019}', '\u{2018}'], "'");
    RETRIEVAL_ERRORS.iter().any(|p| lower.contains(p))
}

/// Whether a no-info reread's answer ([`RetryStrategy::Reread`]) replaces the "not in the documents" it rereads,
/// and why. A reread is asked without the prompt's way out, so it is kept only when it has content, does not loop
/// ([`crate::text::repeats_itself`]) and the judge did not find it unfaithful (more than `unsupported_share` of
/// its statements unsupported); otherwise the honest no-info answer stands. Without a judgement (no judge, or the judge failed) the reread is kept, as any retry's
/// answer is.
#[must_use]
pub fn keep_reread(config: &RetryConfig, reread: &AttemptOutcome) -> (bool, String) {
    let answer = reread.answer.as_deref().unwrap_or_default();
    if answer.trim().is_empty() || is_no_info(answer) {
        return (false, "the reread found no answer either".to_owned());
    }
    if crate::text::repeats_itself(answer) {
        // Every word of a loop can be in the passages, so the judge would find it supported.
        return (false, "the reread repeats itself".to_owned());
    }
    match reread.unsupported_share {
        Some(s) if s > config.unsupported_share => (
            false,
            format!(
                "{} of the reread's statements are unsupported (more than {})",
                percent(s),
                percent(config.unsupported_share)
            ),
        ),
        Some(s) => (true, format!("{} of the reread's statements are unsupported", percent(s))),
        None => (true, "the reread was not judged".to_owned()),
    }
}

/// Decides what follows attempt `attempt` (0-based: 0 is the first try) given what it produced.
///
/// The triggers, checked in this order:
/// 1. retrieval returned nothing: [`RetryReason::NoResults`], expand `k`;
/// 2. the answer reports a retrieval error: [`RetryReason::RetrievalError`], expand `k` (checked before the no-info
///    rule, since "I couldn't find any documents" is a failure of retrieval, not an honest gap in the corpus);
/// 3. documents were retrieved and the answer honestly says they lack the information ([`is_no_info`]): accept,
///    unless the judge found it unfaithful (trigger 5), which an honest admission is not, or `recheck_no_info`
///    asks for a reread at the evaluator's verdict ([`NoInfoRecheck`]): [`RetryReason::NoInfoDespiteCorrect`] after
///    a CORRECT verdict, [`RetryReason::NoInfoNotIncorrect`] after any other but INCORRECT; reread the same
///    passages. An answer that opens with Yes or No ("No. The documents don't contain this information.") has
///    answered a yes/no question and is never reread, nor is the answer of a reread;
/// 4. extraction ran and kept fewer than `min_extraction_chars`: [`RetryReason::ExtractionEmpty`], expand `k`;
/// 5. more than `unsupported_share` of the statements are unsupported: [`RetryReason::Unfaithful`], rewrite the
///    query.
///
/// When a trigger fires and `attempt >= max_retries`, the decision is [`RetryDecision::GiveUp`]; otherwise
/// `next_k` is [`RetryConfig::k_for`]`(attempt + 1)` for [`RetryStrategy::ExpandK`], and the attempt's own `k`
/// for a rewrite or a reread, which search at the same depth.
#[must_use]
pub fn decide(config: &RetryConfig, attempt: usize, outcome: &AttemptOutcome) -> RetryDecision {
    let answer = outcome.answer.as_deref().unwrap_or_default();
    let unfaithful = outcome.unsupported_share.filter(|&s| s > config.unsupported_share).map(|s| {
        (
            RetryReason::Unfaithful,
            RetryStrategy::RewriteQuery,
            format!(
                "{} of the statements are unsupported (more than {})",
                percent(s),
                percent(config.unsupported_share)
            ),
        )
    });
    let trigger = if outcome.retrieved == 0 {
        Some((RetryReason::NoResults, RetryStrategy::ExpandK, "retrieval returned no passages".to_owned()))
    } else if is_retrieval_error(answer) {
        Some((RetryReason::RetrievalError, RetryStrategy::ExpandK, "the answer reports a retrieval error".to_owned()))
    } else if is_no_info(answer) {
        let recheck = match (config.recheck_no_info, outcome.retrieval_verdict) {
            // "No. The documents don't contain this information." has answered the yes/no question: the missing
            // fact is its reason. A reread without the way out would have to turn it into a Yes or No anyway.
            _ if yes_no(answer).is_some() || outcome.reread => None,
            (NoInfoRecheck::Correct | NoInfoRecheck::UnlessIncorrect, Some(Verdict::Correct)) => {
                Some((RetryReason::NoInfoDespiteCorrect, "CORRECT"))
            }
            (NoInfoRecheck::UnlessIncorrect, Some(Verdict::Ambiguous)) => {
                Some((RetryReason::NoInfoNotIncorrect, "AMBIGUOUS"))
            }
            (NoInfoRecheck::UnlessIncorrect, None) => Some((RetryReason::NoInfoNotIncorrect, "unevaluated")),
            _ => None,
        };
        match (recheck, unfaithful) {
            (_, Some(unfaithful)) => Some(unfaithful),
            (Some((reason, verdict)), None) => Some((
                reason,
                RetryStrategy::Reread,
                format!(
                    "the answer says the documents lack the information, but the {} passage(s) were judged {verdict}",
                    outcome.retrieved
                ),
            )),
            (None, None) => {
                return RetryDecision::Accept {
                    reason: format!(
                        "the answer says the documents lack the information, and {} passage(s) were retrieved: a \
                         valid out-of-scope answer, not a failure",
                        outcome.retrieved
                    ),
                };
            }
        }
    } else if let Some(chars) = outcome.extracted_chars.filter(|&c| c < config.min_extraction_chars) {
        Some((
            RetryReason::ExtractionEmpty,
            RetryStrategy::ExpandK,
            format!("extraction kept {chars} characters (fewer than {})", config.min_extraction_chars),
        ))
    } else {
        unfaithful
    };
    let Some((reason, strategy, detail)) = trigger else {
        let reason = match outcome.unsupported_share {
            Some(s) => format!(
                "{} passage(s) retrieved and {} of the statements unsupported (at most {})",
                outcome.retrieved,
                percent(s),
                percent(config.unsupported_share)
            ),
            None => format!("{} passage(s) retrieved; no retry trigger fired", outcome.retrieved),
        };
        return RetryDecision::Accept { reason };
    };
    if attempt >= config.max_retries {
        return RetryDecision::GiveUp {
            reason: format!("max retries ({}) reached; last failure: {detail}", config.max_retries),
        };
    }
    let next_k = match strategy {
        RetryStrategy::ExpandK => config.k_for(attempt + 1),
        RetryStrategy::RewriteQuery | RetryStrategy::Reread if outcome.k > 0 => outcome.k,
        RetryStrategy::RewriteQuery | RetryStrategy::Reread => config.k_for(attempt),
    };
    RetryDecision::Retry { reason, strategy, next_k, detail }
}

/// A share as a whole percentage (`0.75` → `75%`), for messages.
fn percent(share: f32) -> String {
    format!("{:.0}%", share * 100.0)
}

#[cfg(test)]
mod tests {
    use ragtune_core::ErrorKind;

    use super::*;

    /// Renders the decision as one line, so that a whole decision compares at once.
    fn check(config: &RetryConfig, attempt: usize, outcome: &AttemptOutcome, expect: &str) {
        let got = match decide(config, attempt, outcome) {
            RetryDecision::Accept { reason } => format!("accept: {reason}"),
            RetryDecision::Retry { reason, strategy, next_k, detail } => {
                format!("retry {reason:?} {strategy:?} k={next_k}: {detail}")
            }
            RetryDecision::GiveUp { reason } => format!("give up: {reason}"),
        };
        assert_eq!(got, expect, "attempt {attempt}, {outcome:?}");
    }

    fn good() -> AttemptOutcome {
        AttemptOutcome {
            retrieved: 5,
            extracted_chars: Some(300),
            unsupported_share: Some(0.0),
            answer: Some("Scurvy is caused by a lack of vitamin C.".into()),
            retrieval_verdict: None,
            k: 0,
            reread: false,
        }
    }

    #[test]
    fn every_trigger_retries_with_its_strategy() {
        let c = RetryConfig::default();
        check(&c, 0, &good(), "accept: 5 passage(s) retrieved and 0% of the statements unsupported (at most 70%)");
        check(
            &c,
            0,
            &AttemptOutcome { retrieved: 0, ..good() },
            "retry NoResults ExpandK k=8: retrieval returned no passages",
        );
        check(
            &c,
            0,
            &AttemptOutcome { extracted_chars: Some(49), ..good() },
            "retry ExtractionEmpty ExpandK k=8: extraction kept 49 characters (fewer than 50)",
        );
        check(
            &c,
            0,
            &AttemptOutcome { extracted_chars: Some(50), ..good() },
            "accept: 5 passage(s) retrieved and 0% of the statements unsupported (at most 70%)",
        );
        check(
            &c,
            0,
            &AttemptOutcome { unsupported_share: Some(0.75), ..good() },
            "retry Unfaithful RewriteQuery k=5: 75% of the statements are unsupported (more than 70%)",
        );
        for answer in ["Sorry, I couldn't find any documents.", "The SEARCH FAILED.", "There was an error retrieving."]
        {
            check(
                &c,
                1,
                &AttemptOutcome { answer: Some(answer.into()), ..good() },
                "retry RetrievalError ExpandK k=10: the answer reports a retrieval error",
            );
        }
        check(
            &c,
            0,
            &AttemptOutcome { retrieved: 3, ..AttemptOutcome::default() },
            "accept: 3 passage(s) retrieved; no retry trigger fired",
        );
    }

    #[test]
    fn an_honest_no_info_answer_is_not_retried() {
        let c = RetryConfig::default();
        let no_info = AttemptOutcome {
            retrieved: 5,
            extracted_chars: Some(0),
            unsupported_share: Some(0.0),
            answer: Some("The documents don't contain information about Python.".into()),
            retrieval_verdict: Some(Verdict::Correct),
            k: 0,
            reread: false,
        };
        check(
            &c,
            0,
            &no_info,
            "accept: the answer says the documents lack the information, and 5 passage(s) were retrieved: a valid \
             out-of-scope answer, not a failure",
        );
        // Without documents the same answer is a retrieval failure.
        check(
            &c,
            0,
            &AttemptOutcome { retrieved: 0, ..no_info.clone() },
            "retry NoResults ExpandK k=8: retrieval returned no passages",
        );
        // A hedge followed by mostly hallucinated statements is still unfaithful.
        check(
            &c,
            0,
            &AttemptOutcome { unsupported_share: Some(0.8), ..no_info.clone() },
            "retry Unfaithful RewriteQuery k=5: 80% of the statements are unsupported (more than 70%)",
        );
    }

    #[test]
    fn recheck_no_info_rereads_by_the_evaluators_verdict() {
        let no_info = AttemptOutcome {
            retrieved: 5,
            extracted_chars: None,
            unsupported_share: Some(0.0),
            answer: Some("The documents don't contain this information.".into()),
            retrieval_verdict: Some(Verdict::Correct),
            k: 0,
            reread: false,
        };
        let accept = "accept: the answer says the documents lack the information, and 5 passage(s) were retrieved: \
                      a valid out-of-scope answer, not a failure";
        let at = |verdict| AttemptOutcome { retrieval_verdict: verdict, ..no_info.clone() };
        let correct = RetryConfig { recheck_no_info: NoInfoRecheck::Correct, ..RetryConfig::default() };
        check(
            &correct,
            0,
            &no_info,
            "retry NoInfoDespiteCorrect Reread k=5: the answer says the documents lack the information, but the 5 \
             passage(s) were judged CORRECT",
        );
        // Not judged CORRECT (AMBIGUOUS, INCORRECT, or no evaluation): an honest out-of-scope answer.
        for verdict in [Some(Verdict::Ambiguous), Some(Verdict::Incorrect), None] {
            check(&correct, 0, &at(verdict), accept);
        }
        // Off: never reread, whatever the verdict.
        check(&RetryConfig::default(), 0, &no_info, accept);

        // Unless INCORRECT: every verdict but INCORRECT is reread.
        let unless = RetryConfig { recheck_no_info: NoInfoRecheck::UnlessIncorrect, ..RetryConfig::default() };
        check(
            &unless,
            0,
            &no_info,
            "retry NoInfoDespiteCorrect Reread k=5: the answer says the documents lack the information, but the 5 \
             passage(s) were judged CORRECT",
        );
        check(
            &unless,
            0,
            &at(Some(Verdict::Ambiguous)),
            "retry NoInfoNotIncorrect Reread k=5: the answer says the documents lack the information, but the 5 \
             passage(s) were judged AMBIGUOUS",
        );
        check(
            &unless,
            0,
            &at(None),
            "retry NoInfoNotIncorrect Reread k=5: the answer says the documents lack the information, but the 5 \
             passage(s) were judged unevaluated",
        );
        check(&unless, 0, &at(Some(Verdict::Incorrect)), accept);
        // A reread that found nothing either is not reread again: the same request would be asked.
        check(&unless, 1, &AttemptOutcome { reread: true, ..no_info.clone() }, accept);
        // A yes/no answer that gives the missing fact as its reason has answered: never reread, in any mode.
        for answer in
            ["No. The documents don't contain this information.", "Yes. The documents don't contain this information."]
        {
            let answered = AttemptOutcome { answer: Some(answer.into()), ..no_info.clone() };
            check(&unless, 0, &answered, accept);
            check(&correct, 0, &answered, accept);
        }
        // "Not" is not a "no".
        check(
            &unless,
            0,
            &AttemptOutcome {
                answer: Some("Not known: the documents don't contain this information.".into()),
                ..no_info.clone()
            },
            "retry NoInfoDespiteCorrect Reread k=5: the answer says the documents lack the information, but the 5 \
             passage(s) were judged CORRECT",
        );

        // The retries spent, it gives up and keeps the answer.
        check(
            &correct,
            2,
            &no_info,
            "give up: max retries (2) reached; last failure: the answer says the documents lack the information, \
             but the 5 passage(s) were judged CORRECT",
        );
        // An unfaithful hedge is retried as unfaithful, whatever the recheck says.
        check(
            &unless,
            0,
            &AttemptOutcome { unsupported_share: Some(0.8), ..no_info.clone() },
            "retry Unfaithful RewriteQuery k=5: 80% of the statements are unsupported (more than 70%)",
        );
        // An answer with content is judged as before.
        check(
            &unless,
            0,
            &AttemptOutcome { answer: Some("Scurvy is caused by a lack of vitamin C.".into()), ..no_info },
            "accept: 5 passage(s) retrieved and 0% of the statements unsupported (at most 70%)",
        );
    }

    #[test]
    fn next_k_is_the_schedules_only_when_k_expands() {
        let c = RetryConfig { recheck_no_info: NoInfoRecheck::Correct, ..RetryConfig::default() };
        let at_k = |k, answer: &str, unsupported| AttemptOutcome {
            retrieved: 5,
            answer: Some(answer.into()),
            unsupported_share: Some(unsupported),
            retrieval_verdict: Some(Verdict::Correct),
            k,
            ..AttemptOutcome::default()
        };
        let next = |d: RetryDecision| match d {
            RetryDecision::Retry { strategy, next_k, .. } => (strategy, next_k),
            other => panic!("{other:?}"),
        };
        // A rewrite and a reread search again at the attempt's own depth (here a configured top k of 12)…
        let unfaithful = at_k(12, "Scurvy is caused by moonlight.", 0.9);
        assert_eq!(next(decide(&c, 0, &unfaithful)), (RetryStrategy::RewriteQuery, 12));
        let no_info = at_k(12, "The documents don't contain this information.", 0.0);
        assert_eq!(next(decide(&c, 0, &no_info)), (RetryStrategy::Reread, 12));
        // …or, with `k` unknown, at the schedule's depth for this attempt.
        assert_eq!(next(decide(&c, 1, &at_k(0, "The documents don't contain this information.", 0.0))).1, 8);
        // Only an expansion takes the schedule's next k.
        let nothing = AttemptOutcome { retrieved: 0, k: 12, ..AttemptOutcome::default() };
        assert_eq!(next(decide(&c, 0, &nothing)), (RetryStrategy::ExpandK, 8));
    }

    #[test]
    fn a_reread_replaces_the_no_info_answer_only_when_supported() {
        let c = RetryConfig::default();
        let reread = |answer: &str, unsupported| AttemptOutcome {
            retrieved: 5,
            answer: Some(answer.into()),
            unsupported_share: unsupported,
            ..AttemptOutcome::default()
        };
        let supported = reread("Leopards are solitary. [1]", Some(0.0));
        assert_eq!(keep_reread(&c, &supported), (true, "0% of the reread's statements are unsupported".to_owned()));
        assert_eq!(
            keep_reread(&c, &reread("Leopards are solitary. [1]", Some(0.8))),
            (false, "80% of the reread's statements are unsupported (more than 70%)".to_owned())
        );
        // Exactly the threshold is not unfaithful, as for the retry trigger.
        assert!(keep_reread(&c, &reread("Leopards are solitary. [1]", Some(0.7))).0);
        for nothing in ["The documents don't contain this information.", "  "] {
            assert_eq!(
                keep_reread(&c, &reread(nothing, Some(0.0))),
                (false, "the reread found no answer either".into())
            );
        }
        assert_eq!(
            keep_reread(&c, &reread("Leopards are solitary. [1]", None)),
            (true, "the reread was not judged".to_owned())
        );
        // A loop of the passages' own words is judged supported, and still discarded (qwen-0.5b wrote this one).
        let looped = "[1] (Copenhagen) Copenhagen [2] (Copenhagen) Copenhagen ".repeat(6);
        assert_eq!(keep_reread(&c, &reread(&looped, Some(0.0))), (false, "the reread repeats itself".to_owned()));
    }

    #[test]
    fn recheck_no_info_reads_by_name() {
        let c: RetryConfig = serde_json::from_str(r#"{"recheck_no_info": "unless_incorrect"}"#).unwrap();
        assert_eq!(c.recheck_no_info, NoInfoRecheck::UnlessIncorrect);
        let err = serde_json::from_str::<RetryConfig>(r#"{"recheck_no_info": "always"}"#).unwrap_err().to_string();
        assert!(err.contains("unless_incorrect"), "{err}");
    }

    #[test]
    fn exactly_the_threshold_does_not_retry() {
        let c = RetryConfig::default();
        check(
            &c,
            0,
            &AttemptOutcome { unsupported_share: Some(0.7), ..good() },
            "accept: 5 passage(s) retrieved and 70% of the statements unsupported (at most 70%)",
        );
        check(
            &c,
            0,
            &AttemptOutcome { unsupported_share: Some(0.71), ..good() },
            "retry Unfaithful RewriteQuery k=5: 71% of the statements are unsupported (more than 70%)",
        );
    }

    #[test]
    fn retries_stop_at_the_maximum() {
        let c = RetryConfig::default();
        let bad = AttemptOutcome { retrieved: 0, ..good() };
        check(&c, 1, &bad, "retry NoResults ExpandK k=10: retrieval returned no passages");
        check(&c, 2, &bad, "give up: max retries (2) reached; last failure: retrieval returned no passages");
        check(&c, 7, &good(), "accept: 5 passage(s) retrieved and 0% of the statements unsupported (at most 70%)");
        let none = RetryConfig { max_retries: 0, ..RetryConfig::default() };
        check(&none, 0, &bad, "give up: max retries (0) reached; last failure: retrieval returned no passages");
    }

    #[test]
    fn k_follows_the_schedule_and_repeats_its_last_value() {
        let c = RetryConfig::default();
        assert_eq!((0..4).map(|a| c.k_for(a)).collect::<Vec<_>>(), [5, 8, 10, 10]);
        let empty = RetryConfig { k_schedule: Vec::new(), ..RetryConfig::default() };
        assert_eq!(empty.k_for(3), 5);
    }

    #[test]
    fn config_is_validated() {
        assert!(RetryConfig::default().validate().is_ok());
        for bad in [
            RetryConfig { unsupported_share: 1.2, ..RetryConfig::default() },
            RetryConfig { unsupported_share: f32::NAN, ..RetryConfig::default() },
            RetryConfig { k_schedule: Vec::new(), ..RetryConfig::default() },
            RetryConfig { k_schedule: vec![5, 0], ..RetryConfig::default() },
        ] {
            assert_eq!(bad.validate().unwrap_err().kind(), ErrorKind::InvalidInput, "{bad:?}");
        }
        let parsed: RetryConfig = serde_json::from_str(r#"{"max_retries": 1}"#).unwrap();
        assert_eq!(parsed.k_schedule, [5, 8, 10]);
        assert!(serde_json::from_str::<RetryConfig>(r#"{"retries": 1}"#).is_err());
    }

    #[test]
    fn decisions_serialise_with_a_tag() {
        let d = decide(&RetryConfig::default(), 0, &AttemptOutcome { retrieved: 0, ..good() });
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"decision":"retry","reason":"no_results","strategy":"expand_k","next_k":8,"detail":"retrieval returned no passages"}"#
        );
    }
}
