"""`ragtune mcp` with the official MCP Python SDK: list the tools, ask, search, index, and a tool error."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import ragtune_bin, ragtune_env


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp")
    docs = root / "docs"
    docs.mkdir()
    (docs / "upgrade.md").write_text("# Upgrading\n\nUpgrades keep your data. Run ragtune migrate afterwards.\n")
    (docs / "fruit.md").write_text("# Fruit\n\nBananas are yellow and grow in bunches.\n")
    subprocess.run([ragtune_bin(), "index", str(docs), "--store", str(root / "store")], check=True,
                   env=ragtune_env(), cwd=root, capture_output=True)
    return root / "store"


def run_session(store: Path, steps):
    params = StdioServerParameters(command=ragtune_bin(), args=["mcp", "--store", str(store)], env=ragtune_env())

    async def main():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await steps(session)

    return asyncio.run(main())


def test_tools_are_listed_with_their_schemas(store: Path) -> None:
    async def steps(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in run_session(store, steps)}
    assert set(tools) == {"search", "ask", "index_documents"}
    assert "question" in tools["ask"].input_schema["required"]
    assert "query" in tools["search"].input_schema["required"]
    assert "documents" in tools["index_documents"].input_schema["required"]


def test_ask_answers_with_citations(store: Path) -> None:
    async def steps(session):
        return await session.call_tool("ask", {"question": "Do upgrades keep my data?"})

    result = run_session(store, steps)
    assert not result.is_error, result.content
    answer = json.loads(result.content[0].text)
    assert answer["answer"]
    assert answer["citations"] and answer["citations"][0]["doc_id"].endswith("upgrade.md")


def test_index_then_search_and_errors_are_tool_errors(store: Path) -> None:
    async def steps(session):
        indexed = await session.call_tool(
            "index_documents", {"documents": [{"id": "zep", "text": "Zeppelins float on hydrogen."}]})
        found = await session.call_tool("search", {"query": "zeppelins", "top_k": 1})
        bad = await session.call_tool("search", {"top_k": 1})
        after = await session.call_tool("search", {"query": "bananas"})
        return indexed, found, bad, after

    indexed, found, bad, after = run_session(store, steps)
    assert not indexed.is_error, indexed.content
    assert json.loads(found.content[0].text)["hits"][0]["chunk"]["doc_id"] == "zep"
    assert bad.is_error and "query" in bad.content[0].text
    assert not after.is_error


def test_the_docs_example_runs(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    original = 'StdioServerParameters(command="ragtune", args=["mcp", "--store", ".ragtune"])'
    assert original in code
    ours = (f"StdioServerParameters(command={ragtune_bin()!r}, args=['mcp', '--store', {str(store)!r}], "
            f"env={ragtune_env()!r})")
    exec(compile(code.replace(original, ours), "docs/mcp.md", "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out
    assert "['search', 'ask', 'index_documents']" in out
    assert "upgrade.md" in out
