//! `[web]`: whether Corrective RAG may search the web, over the web layer's own settings.

use super::*;

/// The `[web]` section: whether Corrective RAG may search the web, and the web layer's settings
/// (`providers`, `routing`, `credibility`, `fetch`, `concurrency`, `default_route`; see docs/web.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct WebConfig {
    /// Whether web search runs at all (off by default, so that no request leaves the machine unless asked).
    pub enabled: bool,
    /// The providers and how they are routed, trusted and fetched.
    #[serde(flatten)]
    pub settings: ragtune_web::WebSettings,
}

// By hand rather than `#[serde(flatten)]`, which would let unknown keys through: `enabled` is taken out and the
// rest must be a valid `WebSettings`, which refuses unknown keys.
impl<'de> Deserialize<'de> for WebConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let enabled = match map.remove("enabled") {
            Some(v) => bool::deserialize(v).map_err(|e| D::Error::custom(format!("enabled: {e}")))?,
            None => false,
        };
        let settings =
            ragtune_web::WebSettings::deserialize(serde_json::Value::Object(map)).map_err(D::Error::custom)?;
        Ok(Self { enabled, settings })
    }
}

impl WebConfig {
    /// Whether the section asks for web search: `enabled` with at least one provider.
    #[must_use]
    pub fn active(&self) -> bool {
        self.enabled && !self.settings.providers.is_empty()
    }

    /// The settings with each configured provider's missing key read from its environment variable
    /// (`TAVILY_API_KEY`, `EXA_API_KEY`, `PERPLEXITY_API_KEY`, `SEMANTIC_SCHOLAR_API_KEY`).
    #[must_use]
    pub fn resolved(&self) -> ragtune_web::WebSettings {
        let mut settings = self.settings.clone();
        for (name, var) in ragtune_web::providers::PROVIDERS.iter().filter_map(|p| Some((p.name, p.key_env?))) {
            if let Some(p) = settings.providers.get_mut(name)
                && p.api_key.is_none()
                && let Ok(key) = std::env::var(var)
                && !key.is_empty()
            {
                p.api_key = Some(Secret::from(key));
            }
        }
        settings
    }

    /// Builds the web stack when the section is active.
    ///
    /// # Errors
    /// [`InvalidInput`](ragtune_core::ErrorKind::InvalidInput) naming `[web]` when a provider is unknown or
    /// misconfigured.
    pub fn build(&self) -> Result<Option<ragtune_web::WebStack>> {
        if !self.active() {
            return Ok(None);
        }
        self.resolved().build().map(Some).map_err(|e| e.context("[web]"))
    }
}
