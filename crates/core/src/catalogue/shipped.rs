//! The catalogue that ships with rebound, embedded at build time so the binary works from any
//! directory and offline.

use super::Source;

/// The shipped rule files, relative to the repository's `catalogue/` folder.
const SHIPPED: [(&str, &str); 22] = [
    (
        "catalogue.toml",
        include_str!("../../../../catalogue/catalogue.toml"),
    ),
    (
        "rules/generic.toml",
        include_str!("../../../../catalogue/rules/generic.toml"),
    ),
    (
        "rules/text.toml",
        include_str!("../../../../catalogue/rules/text.toml"),
    ),
    (
        "rules/transport.toml",
        include_str!("../../../../catalogue/rules/transport.toml"),
    ),
    (
        "rules/openai.toml",
        include_str!("../../../../catalogue/rules/openai.toml"),
    ),
    (
        "rules/azure.toml",
        include_str!("../../../../catalogue/rules/azure.toml"),
    ),
    (
        "rules/anthropic.toml",
        include_str!("../../../../catalogue/rules/anthropic.toml"),
    ),
    (
        "rules/gemini.toml",
        include_str!("../../../../catalogue/rules/gemini.toml"),
    ),
    (
        "rules/bedrock.toml",
        include_str!("../../../../catalogue/rules/bedrock.toml"),
    ),
    (
        "rules/openrouter.toml",
        include_str!("../../../../catalogue/rules/openrouter.toml"),
    ),
    (
        "rules/relay.toml",
        include_str!("../../../../catalogue/rules/relay.toml"),
    ),
    (
        "rules/cloudflare.toml",
        include_str!("../../../../catalogue/rules/cloudflare.toml"),
    ),
    (
        "rules/quota.toml",
        include_str!("../../../../catalogue/rules/quota.toml"),
    ),
    (
        "rules/mistral.toml",
        include_str!("../../../../catalogue/rules/mistral.toml"),
    ),
    (
        "rules/groq.toml",
        include_str!("../../../../catalogue/rules/groq.toml"),
    ),
    (
        "rules/xai.toml",
        include_str!("../../../../catalogue/rules/xai.toml"),
    ),
    (
        "rules/deepseek.toml",
        include_str!("../../../../catalogue/rules/deepseek.toml"),
    ),
    (
        "rules/moonshot.toml",
        include_str!("../../../../catalogue/rules/moonshot.toml"),
    ),
    (
        "rules/zhipu.toml",
        include_str!("../../../../catalogue/rules/zhipu.toml"),
    ),
    (
        "rules/n8n.toml",
        include_str!("../../../../catalogue/rules/n8n.toml"),
    ),
    (
        "rules/ollama.toml",
        include_str!("../../../../catalogue/rules/ollama.toml"),
    ),
    (
        "rules/agent.toml",
        include_str!("../../../../catalogue/rules/agent.toml"),
    ),
];

/// The shipped rule files as sources, manifest first.
pub fn shipped_sources() -> Vec<Source> {
    SHIPPED
        .iter()
        .map(|(name, text)| Source::new(format!("catalogue/{name}"), *text))
        .collect()
}
