//! Counting a model's tokens, so that text can be cut to fit the model's window before it is embedded.

use std::fmt::Debug;
use std::sync::Arc;

use crate::Result;

/// Counts the tokens a model sees of texts, and says the most it sees of one text (its window).
///
/// What it is for: a chunker cuts documents into passages that the embedding model sees whole, counting with the
/// model's own tokenizer instead of guessing from words (code and tables run at two to four tokens per word, prose
/// at about 1.3). The ingest layer takes it as `&dyn TokenCounter`, so it never depends on the embedding crate.
///
/// Who implements it: the embedding crate over the model's tokenizer (`ragtune_embed::ModelTokenCounter`), and
/// `ragtune_ingest::EstimatedTokens`, a conservative estimate for when no tokenizer is at hand.
///
/// Invariants: `count` returns one number per text, in order, and each is the length of the text's encoding as the
/// model would see it without truncation, special tokens (`[CLS]`, `[SEP]`) included, so a text fits the model
/// exactly when its count is at most [`window`](Self::window). The count of the empty text is the fixed cost of
/// the special tokens. Counting is deterministic.
///
/// Cost model: no model runs; tokenizing is CPU work of about a microsecond per token, done on the calling
/// thread. That is why the method is synchronous and takes no [`Ctx`](crate::Ctx): there is no IO to cancel, no
/// budget to charge, and nothing to trace at this grain. Callers that count a whole corpus run off the async
/// executor (the facade chunks on the blocking pool).
pub trait TokenCounter: Send + Sync + Debug {
    /// A name for reports and errors (the model id, or `estimate`).
    fn name(&self) -> &str;

    /// The most tokens the model sees of one text, special tokens included (`embedding.max_length`).
    fn window(&self) -> usize;

    /// The tokens of each text as the model sees it untruncated, special tokens included.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the tokenizer cannot encode a text.
    fn count(&self, texts: &[&str]) -> Result<Vec<usize>>;
}

macro_rules! forward_token_counter {
    ($($ptr:ident),*) => {$(
        impl<T: TokenCounter + ?Sized> TokenCounter for $ptr<T> {
            fn name(&self) -> &str { (**self).name() }
            fn window(&self) -> usize { (**self).window() }
            fn count(&self, texts: &[&str]) -> Result<Vec<usize>> { (**self).count(texts) }
        }
    )*};
}

forward_token_counter!(Arc, Box);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Chars;

    impl TokenCounter for Chars {
        fn name(&self) -> &str {
            "chars"
        }
        fn window(&self) -> usize {
            8
        }
        fn count(&self, texts: &[&str]) -> Result<Vec<usize>> {
            Ok(texts.iter().map(|t| t.chars().count() + 2).collect())
        }
    }

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn the_seam_is_object_safe_send_and_sync_and_forwards_through_pointers() {
        assert_send_sync::<Arc<dyn TokenCounter>>();
        assert_send_sync::<Box<dyn TokenCounter>>();
        let shared: Arc<dyn TokenCounter> = Arc::new(Chars);
        let boxed: Box<dyn TokenCounter> = Box::new(shared.clone());
        assert_eq!((boxed.name(), boxed.window()), ("chars", 8));
        assert_eq!(boxed.count(&["", "abc"]).unwrap(), [2, 5]);
    }
}
