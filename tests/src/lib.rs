//! Integration tests live in `it/`.
