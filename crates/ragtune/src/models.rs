//! Where the engine gets its models: the files provisioned by `cargo xtask models` under `$RAGTUNE_HOME`, or the
//! paths the configuration names.

use std::sync::Arc;

use ragtune_core::{Embedder, Error, Result};

use crate::config::EmbeddingSettings;

/// Loads the dense embedder the settings describe.
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model or ONNX Runtime is not provisioned (the
/// message says to run `cargo xtask models`); model loading failures.
pub fn load_embedder(settings: &EmbeddingSettings) -> Result<Arc<dyn Embedder>> {
    let _ = settings;
    Err(Error::unavailable("the embedding model is not wired yet"))
}
