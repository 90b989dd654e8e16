//! ONNX-backed embedders and rerankers (filled by the fastembed work).
