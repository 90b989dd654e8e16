//! The answer-level evaluation on a tiny dataset in the CMU Wikipedia QA layout, without an LLM: the report's
//! scores, the refinement check and the degradation counts, end to end on a real embedded store.

use std::path::Path;

use ragtune_eval::qa::{QaEvalOptions, qa_table, run_qa_eval};

fn tiny_cmu_qa(root: &Path) {
    let set = root.join("S08/data/set1");
    std::fs::create_dir_all(&set).unwrap();
    let scurvy = "Scurvy is a disease. Scurvy is caused by a lack of vitamin C in the diet. Sailors on long voyages \
                  often suffered from it. James Lind showed in 1747 that citrus fruit cures scurvy. The navy later \
                  gave its sailors lemon juice.";
    let goitre = "Goitre is a swelling of the neck. Goitre is linked to a lack of iodine. Iodised salt was introduced \
                  in Switzerland in 1922. Since then goitre has become rare in many countries.";
    for (file, text) in [("a1", scurvy), ("a2", goitre)] {
        std::fs::write(set.join(format!("{file}.txt")), text).unwrap();
        std::fs::write(set.join(format!("{file}.txt.clean")), text).unwrap();
    }
    let rows = [
        "ArticleTitle\tQuestion\tAnswer\tDifficultyFromQuestioner\tDifficultyFromAnswerer\tArticleFile",
        "Scurvy\tWhat is scurvy caused by?\ta lack of vitamin C\teasy\teasy\tdata/set1/a1",
        "Scurvy\tIn what year did James Lind show that citrus fruit cures scurvy?\t1747\teasy\teasy\tdata/set1/a1",
        "Scurvy\tIs scurvy a disease?\tyes\teasy\teasy\tdata/set1/a1",
        "Goitre\tWhen was iodised salt introduced in Switzerland?\t1922\tmedium\tmedium\tdata/set1/a2",
        "Goitre\tWhat is goitre linked to?\tNULL\teasy\teasy\tdata/set1/a2",
    ];
    std::fs::write(root.join("S08/question_answer_pairs.txt"), rows.join("\n") + "\n").unwrap();
}

#[tokio::test]
async fn answer_level_evaluation_without_an_llm() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny-qa");
    tiny_cmu_qa(&data);
    let mut config = ragtune::Config::default();
    config.embedding.mode = ragtune::EmbeddingMode::Off;
    config.llm.url = String::new();
    let opts = QaEvalOptions {
        dataset: data.clone(),
        experiments: vec!["baseline".into(), "refined".into(), "corrective".into()],
        config,
        limit: None,
        skip: 0,
        cache_dir: dir.path().join("cache"),
        reindex: false,
        refinement_check: true,
        local_semester: None,
    };
    let mut log = Vec::new();
    let report = run_qa_eval(&opts, &mut |line| log.push(line.to_owned())).await.unwrap();
    assert_eq!((report.articles, report.dataset_questions), (2, 4), "the NULL-only question is left out");
    assert_eq!(report.experiments.len(), 3);
    for e in &report.experiments {
        assert_eq!(e.questions, 4, "{}: every question is asked: {:?}", e.experiment, e.failed);
        assert!(e.failed.is_empty());
        assert_eq!(e.yes_no_questions, 1);
        // Extractive answers quote the passage that holds the answer, so the three factual questions are right,
        // and the yes/no one is answered "Yes" with the sentence that states the claim.
        assert_eq!(e.other_accuracy, 1.0, "{}: {e:?}", e.experiment);
        assert_eq!(e.yes_no_accuracy, 1.0, "{e:?}");
        assert_eq!(e.accuracy, 1.0);
        assert_eq!((e.abstention_rate, e.markup_answers), (0.0, 0), "{e:?}");
        assert_eq!(e.answer_kinds.get("extractive"), Some(&4), "{e:?}");
        assert_eq!(e.llm_calls_per_question, 0.0, "no LLM is configured");
        // Every citation points into the question's own article.
        assert_eq!(e.citation_precision, Some(1.0), "{e:?}");
    }
    for e in &report.experiments {
        // One record per answer, consistent with the averages.
        assert_eq!(e.answers.len(), e.questions, "{e:?}");
        let correct = e.answers.iter().filter(|a| a.correct).count();
        assert!((correct as f64 / e.questions as f64 - e.accuracy).abs() < 1e-9, "{e:?}");
        assert!(e.answers.iter().all(|a| !a.gold.is_empty() && !a.id.is_empty()), "{e:?}");
    }
    let corrective = &report.experiments[2];
    assert_eq!(corrective.decisions.values().sum::<usize>(), 4, "CRAG judged every question: {corrective:?}");
    // Without an LLM the pipeline's judge falls back to the LLM-free one, and says so on every answer.
    assert_eq!(corrective.degraded, 4, "{corrective:?}");
    assert!(
        corrective.notes.keys().any(|k| k.starts_with("faithfulness judged without the LLM")),
        "{:?}",
        corrective.notes
    );
    let refinement = report.refinement.as_ref().expect("--refinement was asked for");
    assert_eq!(refinement.questions, 3, "the three questions with a non-yes/no answer found in a strip");
    assert_eq!(refinement.answer_strips_kept, refinement.answer_strips, "{refinement:?}");
    assert!(refinement.token_reduction > 0.0, "{refinement:?}");
    assert!((refinement.mean_question_retention - 1.0).abs() < 1e-9, "{refinement:?}");
    assert!((refinement.question_retention - 1.0).abs() < 1e-9, "{refinement:?}");
    let bucketed: usize = refinement.by_mentions.values().map(|b| b.questions).sum();
    assert_eq!(bucketed, refinement.questions, "every measured question is in one bucket: {refinement:?}");
    let strips: usize = refinement.by_mentions.values().map(|b| b.answer_strips).sum();
    assert_eq!(strips, refinement.answer_strips, "{refinement:?}");
    let table = qa_table(&report);
    assert!(table.contains("degraded") && table.contains("corrective"), "{table}");
    assert!(log.iter().any(|l| l.starts_with("indexing 2 articles")), "{log:?}");

    // Same inputs, same report (apart from timings), and the index is reused.
    let mut again_log = Vec::new();
    let again = run_qa_eval(&opts, &mut |line| again_log.push(line.to_owned())).await.unwrap();
    assert!(again.index_cached && again_log.iter().any(|l| l.starts_with("using the cached index")));
    for (a, b) in report.experiments.iter().zip(&again.experiments) {
        assert_eq!((a.accuracy, a.token_f1, &a.decisions, &a.notes), (b.accuracy, b.token_f1, &b.decisions, &b.notes));
        let answers = |e: &ragtune_eval::qa::ExperimentReport| {
            e.answers.iter().map(|a| (a.id.clone(), a.answer.clone(), a.cited.clone())).collect::<Vec<_>>()
        };
        assert_eq!(answers(a), answers(b));
    }
}

#[tokio::test]
async fn a_knowledge_split_indexes_one_semester_and_scores_local_and_web_only_questions_apart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tiny-qa");
    tiny_cmu_qa(&data);
    // A second semester whose article exists only "on the web".
    let set = data.join("S09/data/set1");
    std::fs::create_dir_all(&set).unwrap();
    let pyramids = "The Great Pyramid of Giza was built for the pharaoh Khufu. It was the tallest building for \
                    almost four thousand years.";
    std::fs::write(set.join("a1.txt.clean"), pyramids).unwrap();
    std::fs::write(set.join("a1.txt"), pyramids).unwrap();
    let rows = [
        "ArticleTitle\tQuestion\tAnswer\tDifficultyFromQuestioner\tDifficultyFromAnswerer\tArticleFile",
        "Great_Pyramid\tFor which pharaoh was the Great Pyramid of Giza built?\tKhufu\teasy\teasy\tdata/set1/a1",
    ];
    std::fs::write(data.join("S09/question_answer_pairs.txt"), rows.join("\n") + "\n").unwrap();
    // The web: a SearXNG-compatible endpoint that knows the pyramid article.
    let searx = ragtune_testkit::fixtures::SearxServer::start(serde_json::json!({
        "url": "https://example.org/great-pyramid",
        "title": "Great Pyramid",
        "content": pyramids,
        "engine": "test",
        "score": 1.0
    }));
    let mut config = ragtune::Config::from_toml(&crate::web::web_toml(&searx.url, true)).unwrap();
    config.embedding.mode = ragtune::EmbeddingMode::Off;
    config.llm.url = String::new();
    let opts = QaEvalOptions {
        dataset: data.clone(),
        experiments: vec!["baseline".into(), "corrective".into()],
        config,
        limit: None,
        skip: 0,
        cache_dir: dir.path().join("cache"),
        reindex: false,
        refinement_check: false,
        local_semester: Some("S08".into()),
    };
    let report = run_qa_eval(&opts, &mut |_| {}).await.unwrap();
    assert_eq!((report.articles, report.dataset_questions), (2, 5), "S08 indexed, every semester asked");
    let split = |i: usize| report.experiments[i].split.clone().expect("a knowledge split is scored");
    let (baseline, corrective) = (split(0), split(1));
    assert_eq!((baseline.local_questions, baseline.web_only_questions), (4, 1));
    assert_eq!(baseline.web_trigger_rate, 0.0, "plain RAG never searches the web: {baseline:?}");
    assert_eq!(baseline.web_only_accuracy, 0.0, "the corpus cannot answer the pyramid question: {baseline:?}");
    assert_eq!(corrective.web_used_when_web_only, 1, "{corrective:?}");
    assert_eq!(corrective.web_only_accuracy, 1.0, "the web answers it: {corrective:?}");
    let pyramid = report.experiments[1].answers.iter().find(|a| a.id.starts_with("S09/")).unwrap();
    assert!(pyramid.web_used && pyramid.local == Some(false) && pyramid.answer.contains("Khufu"), "{pyramid:?}");
    let table = qa_table(&report);
    assert!(table.contains("web-only 1 questions"), "{table}");
}
