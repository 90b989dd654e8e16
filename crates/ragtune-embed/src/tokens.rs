//! The embedding model's own tokenizer as a [`TokenCounter`], for chunkers that cut text to fit its window.

use std::path::Path;
use std::sync::Arc;

use ragtune_core::{Error, Result, TokenCounter};

/// Counts tokens with an embedding model's tokenizer, untruncated and unpadded, special tokens included: a text
/// fits the model whole exactly when its count is at most [`window`](TokenCounter::window), the length the
/// embedder truncates at. The embedder's `embed`/`truncated` trace event counts the same way.
///
/// Get one from a loaded model with [`FastEmbedder::token_counter`](crate::FastEmbedder::token_counter), or load
/// the tokenizer alone with [`from_dir`](Self::from_dir) (no ONNX Runtime needed).
#[derive(Clone)]
pub struct ModelTokenCounter {
    tokenizer: Arc<tokenizers::Tokenizer>,
    window: usize,
    name: String,
}

impl std::fmt::Debug for ModelTokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenCounter").field("name", &self.name).field("window", &self.window).finish()
    }
}

impl ModelTokenCounter {
    /// A counter over `tokenizer` (its truncation and padding are turned off here) for a model that sees `window`
    /// tokens of a text, named `name` in reports.
    pub(crate) fn new(mut tokenizer: tokenizers::Tokenizer, window: usize, name: impl Into<String>) -> Result<Self> {
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::invalid_input(format!("cannot turn the tokenizer's truncation off: {e}")))?;
        Ok(Self { tokenizer: Arc::new(tokenizer), window, name: name.into() })
    }

    /// Loads the tokenizer of the model in `dir` (`tokenizer.json`, and `tokenizer_config.json` for the model's
    /// own length limit) for a model run with `max_length` (`embedding.max_length`): the window is the smaller of
    /// the two, as the embedder truncates. `name` names it in reports (the model id).
    ///
    /// # Errors
    /// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the files are missing or do not parse;
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) when `max_length` is 0.
    pub fn from_dir(dir: &Path, max_length: usize, name: impl Into<String>) -> Result<Self> {
        if max_length == 0 {
            return Err(Error::invalid_input("max_length must be at least 1"));
        }
        let file = dir.join("tokenizer.json");
        let tokenizer = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| Error::unavailable(format!("cannot load the tokenizer {}: {e}", file.display())))?;
        let config = dir.join("tokenizer_config.json");
        let model_max = std::fs::read(&config)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("model_max_length").and_then(serde_json::Value::as_f64))
            .map_or(usize::MAX, |m| if m >= usize::MAX as f64 { usize::MAX } else { m as usize });
        Self::new(tokenizer, max_length.min(model_max), name)
    }
}

impl TokenCounter for ModelTokenCounter {
    fn name(&self) -> &str {
        &self.name
    }

    fn window(&self) -> usize {
        self.window
    }

    fn count(&self, texts: &[&str]) -> Result<Vec<usize>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::invalid_input(format!("cannot tokenise the input: {e}")))?;
        Ok(encodings.iter().map(tokenizers::Encoding::len).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provisioned model's directory, or `None` after printing why the test skips.
    fn model_dir() -> Option<std::path::PathBuf> {
        let layout = ragtune_provision::ModelLayout::new(ragtune_provision::ragtune_home());
        let dir = layout.minilm_dir();
        if dir.join("tokenizer.json").is_file() {
            return Some(dir);
        }
        let msg = format!(
            "the embedding model's tokenizer is not provisioned in {}: run `cargo xtask models`",
            dir.display()
        );
        assert!(!std::env::var("RAGTUNE_REQUIRE_MODELS").is_ok_and(|v| v == "1"), "RAGTUNE_REQUIRE_MODELS=1 but {msg}");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED: {msg}\n").as_bytes());
        None
    }

    #[test]
    fn counts_word_pieces_with_special_tokens_and_no_truncation() {
        let Some(dir) = model_dir() else { return };
        let counter = ModelTokenCounter::from_dir(&dir, 256, "all-MiniLM-L6-v2").unwrap();
        assert_eq!(counter.window(), 256);
        // `[CLS] [SEP]`; `[CLS] b ##m ##25 [SEP]`; `[CLS] the em ##bed ##ding [SEP]`.
        assert_eq!(counter.count(&["", "BM25", "the embedding"]).unwrap(), [2, 5, 6]);
        let long = "word ".repeat(600);
        assert_eq!(counter.count(&[long.as_str()]).unwrap(), [602], "no truncation at the window");
        // The model's own limit caps a larger max_length.
        assert_eq!(ModelTokenCounter::from_dir(&dir, 4096, "m").unwrap().window(), 512);
        assert!(ModelTokenCounter::from_dir(&dir.join("missing"), 256, "m").is_err());
    }
}
