//! Where the engine gets its models: the files provisioned by `cargo xtask models` under `$RAGTUNE_HOME`, or the
//! paths the configuration names.

use std::sync::Arc;

use ragtune_core::{Embedder, Result};
use ragtune_embed::provisioning::ModelLayout;
use ragtune_embed::{FastEmbedder, FastEmbedderConfig};

use crate::config::EmbeddingSettings;

/// Loads the dense embedder the settings describe (by default the provisioned all-MiniLM-L6-v2).
///
/// # Errors
/// [`Unavailable`](ragtune_core::ErrorKind::Unavailable) when the model or ONNX Runtime is not provisioned (the
/// message says to run `cargo xtask models`); model loading failures.
pub fn load_embedder(settings: &EmbeddingSettings) -> Result<Arc<dyn Embedder>> {
    let layout = ModelLayout::new(crate::ragtune_home());
    let mut cfg = FastEmbedderConfig::new(
        settings.model_dir.clone().unwrap_or_else(|| layout.minilm_dir()),
        settings.ort_library.clone().unwrap_or_else(|| layout.onnxruntime_library()),
    );
    cfg.batch_size = settings.batch_size;
    cfg.intra_threads = settings.threads;
    cfg.max_length = settings.max_length;
    Ok(Arc::new(FastEmbedder::new(cfg)?))
}
