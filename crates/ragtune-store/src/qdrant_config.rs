//! Settings of the Qdrant store: plain data, available without the `qdrant` feature so that a configuration file
//! can name a Qdrant server wherever it is read (the facade's `[store.qdrant]` section is this type).

use std::time::Duration;

use ragtune_core::Secret;
use serde::{Deserialize, Serialize};

/// Settings of a Qdrant store (`QdrantStore`, feature `qdrant`), and the `[store.qdrant]` section of a
/// configuration file. Durations are written in seconds (`timeout_secs`, `connect_timeout_secs`).
///
/// The API key is a [`Secret`]: never serialised, never in `Debug` output, errors or traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QdrantConfig {
    /// The server's gRPC URL, e.g. `http://127.0.0.1:6334`; `https://` uses TLS with the system's root
    /// certificates.
    pub url: String,
    /// The collection holding the chunks.
    pub collection: String,
    /// The API key, when the server requires one (prefer `$QDRANT_API_KEY`).
    #[serde(skip_serializing)]
    pub api_key: Option<Secret>,
    /// The limit of one request.
    #[serde(rename = "timeout_secs", with = "seconds")]
    pub timeout: Duration,
    /// The limit of establishing a connection.
    #[serde(rename = "connect_timeout_secs", with = "seconds")]
    pub connect_timeout: Duration,
    /// Retries of a request that failed transiently (timeouts, overload, dropped connections), with exponential
    /// backoff from 100 ms. Writes are idempotent, so retrying them is safe.
    pub max_retries: u32,
    /// Shards of a new collection (Qdrant's default when `None`); only used when the store creates the collection.
    pub shard_number: Option<u32>,
    /// Replicas of each shard of a new collection, for clusters. With more than one, reads ask a majority of
    /// replicas, so that a read after a write sees it.
    pub replication_factor: Option<u32>,
    /// How many replicas must confirm a write, for a new collection.
    pub write_consistency_factor: Option<u32>,
    /// Whether a new collection keeps payloads (chunk texts) on disk rather than in memory.
    pub on_disk_payload: bool,
    /// Points per upsert request.
    pub upsert_batch_size: usize,
}

impl Default for QdrantConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:6334".to_owned(),
            collection: "ragtune".to_owned(),
            api_key: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_retries: 3,
            shard_number: None,
            replication_factor: None,
            write_consistency_factor: None,
            on_disk_payload: true,
            upsert_batch_size: 256,
        }
    }
}

/// A duration as a number of seconds (fractions allowed); zero, negative and non-finite values are refused.
mod seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        if secs.is_finite() && secs > 0.0 && secs < 1e9 {
            Ok(Duration::from_secs_f64(secs))
        } else {
            Err(D::Error::custom(format!("a duration must be a positive number of seconds, got {secs}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_in_files_durations_in_code_and_no_key_written() {
        let c: QdrantConfig =
            serde_json::from_str(r#"{"url": "http://q:6334", "timeout_secs": 2.5, "api_key": "k"}"#).expect("valid");
        assert_eq!(c.url, "http://q:6334");
        assert_eq!((c.timeout, c.connect_timeout), (Duration::from_millis(2500), Duration::from_secs(5)));
        assert_eq!(c.api_key.as_ref().map(Secret::expose), Some("k"));
        let written = serde_json::to_string(&c).expect("serialisable");
        assert!(written.contains(r#""timeout_secs":2.5"#) && !written.contains("api_key"), "{written}");
        assert!(format!("{c:?}").contains("<redacted>"));
        for bad in ["0", "-1", "1e12"] {
            let err = serde_json::from_str::<QdrantConfig>(&format!(r#"{{"timeout_secs": {bad}}}"#)).unwrap_err();
            assert!(err.to_string().contains("positive number of seconds"), "{bad}: {err}");
        }
    }
}
