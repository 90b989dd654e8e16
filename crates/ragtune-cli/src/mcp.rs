//! `ragtune mcp`: the engine as a Model Context Protocol server over stdio (ADR 0025), with three tools:
//! `search`, `ask` and `index_documents`. Their input schemas are the HTTP API's bodies (`SearchBody`, `AskBody`,
//! `DocumentsBody` of `ragtune_server::openapi`) and their arguments are parsed by the same functions as the HTTP
//! routes, so a tool call takes exactly what the route takes. Stdout carries the protocol only; logs go to stderr.
//! A failing call (bad arguments, an engine error) is an MCP tool error (`isError: true`), never a crash.

use std::path::Path;
use std::sync::Arc;

use ragtune::Engine;
use ragtune_server::openapi::{AskBody, DocumentsBody, SearchBody};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};

use crate::args::{Overrides, StoreArgs, load_config};

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Serves the store over MCP on stdin/stdout until the client closes stdin.
///
/// # Errors
///
/// When the configuration or the store cannot be opened, or the transport fails.
pub async fn run(config: Option<&Path>, args: McpArgs) -> anyhow::Result<()> {
    let cfg = load_config(config, Overrides::store(args.store))?;
    let engine = Engine::open(cfg).await?;
    eprintln!("ragtune: MCP server on stdio (tools: search, ask, index_documents)");
    let service = Tools { engine: Arc::new(engine) }.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

#[derive(Debug, Clone)]
struct Tools {
    engine: Arc<Engine>,
}

fn input_schema<T: schemars::JsonSchema>() -> JsonObject {
    match serde_json::to_value(schemars::schema_for!(T)) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "search",
            "Search the indexed documents: ranked passages with their scores and provenance (doc_id, title, \
             source). Options as POST /v1/search: top_k, strategy (auto, bm25, dense, hybrid).",
            input_schema::<SearchBody>(),
        ),
        Tool::new(
            "ask",
            "Answer a question from the indexed documents with numbered citations, after judging and correcting \
             the retrieval (Corrective RAG) and checking the answer's faithfulness. Options as POST /v1/ask.",
            input_schema::<AskBody>(),
        ),
        Tool::new(
            "index_documents",
            "Index a batch of documents (id and text required; title, source, metadata optional), replacing \
             documents with the same ids. The batch is written whole or not at all.",
            input_schema::<DocumentsBody>(),
        ),
    ]
}

fn failure(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

fn json_result<T: serde::Serialize>(value: &T) -> CallToolResult {
    match serde_json::to_string_pretty(value) {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(e) => failure(format!("cannot encode the result: {e}")),
    }
}

impl Tools {
    async fn call(&self, name: &str, arguments: &[u8]) -> CallToolResult {
        let engine = &self.engine;
        match name {
            "search" => match ragtune_server::parse_search(arguments) {
                Ok((query, options)) => match ragtune::commands::search(engine, &query, &options).await {
                    Ok(found) => json_result(&found),
                    Err(e) => failure(format!("error: {}", e.chain())),
                },
                Err(e) => failure(format!("invalid arguments: {e:?}")),
            },
            "ask" => match ragtune_server::parse_ask(arguments) {
                Ok((question, options)) => match ragtune::commands::ask(engine, &question, &options, true).await {
                    Ok(answer) => json_result(&answer),
                    Err(e) => failure(format!("error: {}", e.chain())),
                },
                Err(e) => failure(format!("invalid arguments: {e:?}")),
            },
            "index_documents" => match ragtune_server::parse_documents(arguments) {
                Ok(documents) => match ragtune::commands::index_shared(engine, &documents).await {
                    Ok(report) => json_result(&report),
                    Err(e) => failure(format!("error: {}", e.chain())),
                },
                Err(e) => failure(format!("invalid arguments: {e:?}")),
            },
            other => failure(format!("no tool `{other}`: the tools are search, ask and index_documents")),
        }
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ragtune", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "ragtune: search and ask over an indexed document store, with citations; index_documents adds \
                 documents.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let bytes = serde_json::to_vec(&arguments).unwrap_or_default();
        Ok(self.call(&request.name, &bytes).await.into())
    }
}
