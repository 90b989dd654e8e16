"""Every example of the surface pages (docs/python.md, docs/openai.md, docs/mcp.md) runs against a real server.

Addresses in the examples (http://127.0.0.1:8080, localhost:8080) are replaced by the test server's, the `ragtune`
command by $RAGTUNE_BIN and store paths by the test's; nothing else in an example is changed. docs/mcp.md's Python
client is run by test_mcp.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import ragtune_bin, ragtune_env, serve

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DEFAULT_URL = "http://127.0.0.1:8080"

SCURVY = [
    {"id": "scurvy", "title": "Scurvy",
     "text": "Scurvy is a disease caused by a lack of vitamin C. James Lind showed in 1747 that citrus fruit cures it."},
    {"id": "rickets", "title": "Rickets",
     "text": "Rickets is caused by a lack of vitamin D. It softens the bones of children."},
]


def blocks(page: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", (DOCS / page).read_text(), flags=re.S | re.M)


def commands(block: str) -> list[str]:
    """The block's shell commands, continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("index", range(len(blocks("python.md", "python"))))
def test_python_md_examples_run(server_url: str, index: int) -> None:
    code = blocks("python.md", "python")[index]
    assert DEFAULT_URL in code
    exec(compile(code.replace(DEFAULT_URL, server_url), f"docs/python.md block {index}", "exec"), {})


def test_python_md_install_names_the_package_and_its_extras() -> None:
    install = commands(blocks("python.md", "sh")[0])
    project = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    pips = [c for c in install if c.startswith("pip install")]
    assert pips, install
    for pip in pips:
        target = shlex.split(pip)[2]
        assert target.startswith("./python"), target
        named = re.findall(r"\[(\w+)\]", target)
        assert set(named) <= extras, (named, extras)
    assert project["name"] == "ragtune"


def test_python_md_index_and_serve_line_works(tmp_path: Path) -> None:
    (line,) = [c for c in commands(blocks("python.md", "sh")[0]) if c.startswith("ragtune index")]
    index, serve_cmd = [shlex.split(part) for part in line.split("&&")]
    assert index[:3] == ["ragtune", "index", "docs/"] and serve_cmd[:2] == ["ragtune", "serve"]
    shutil.copytree(DOCS, tmp_path / "docs")
    done = subprocess.run([ragtune_bin(), *index[1:]], cwd=tmp_path, env=ragtune_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    env = dict(ragtune_env(), RAGTUNE__SERVER__BIND="127.0.0.1:0")
    proc = subprocess.Popen([ragtune_bin(), *serve_cmd[1:]], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"on (http://\S+)", line)
        assert url, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(url.group(1) + "/v1/stats", timeout=30) as response:
            stats = json.load(response)
        assert stats["stats"]["documents"] > 10, stats
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture(scope="module")
def openai_server():
    """A server with the documents the openai.md examples ask about, and the `handbook` collection."""
    with serve(collections=("handbook",)) as url:
        request = urllib.request.Request(url + "/v1/documents", method="PUT",
                                         data=json.dumps({"documents": SCURVY}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200
        yield url


def test_openai_md_python_example_runs(openai_server: str) -> None:
    (code,) = blocks("openai.md", "python")
    assert DEFAULT_URL in code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace(DEFAULT_URL, openai_server), "docs/openai.md", "exec"), {})
    printed = out.getvalue()
    assert "['ragtune', 'ragtune:handbook']" in printed, printed
    assert "vitamin C" in printed and "Sources:\n[1] Scurvy — scurvy" in printed, printed
    assert "'doc_id': 'scurvy'" in printed, printed


def test_openai_md_curl_examples_run(openai_server: str) -> None:
    host = openai_server.removeprefix("http://")
    outputs = []
    for command in commands(blocks("openai.md", "sh")[0]):
        assert command.startswith("curl ") and "localhost:8080" in command, command
        done = subprocess.run(shlex.split(command.replace("localhost:8080", host)), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    put, models, completion, stream = outputs
    assert json.loads(put)["indexed"]["documents"] == 1, put
    assert [m["id"] for m in json.loads(models)["data"]] == ["ragtune", "ragtune:handbook"], models
    assert "vitamin C" in json.loads(completion)["choices"][0]["message"]["content"], completion
    events = [line.removeprefix("data: ") for line in stream.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]", stream
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[0]["model"] == "ragtune:handbook"
    assert "ragtune migrate" in text and "[1] FAQ — faq" in text, text


def test_mcp_md_commands_and_client_configuration_work(tmp_path: Path) -> None:
    index_line, serve_line = commands(blocks("mcp.md", "sh")[0])
    assert shlex.split(serve_line) == ["ragtune", "mcp", "--store", ".ragtune"]
    shutil.copytree(DOCS, tmp_path / "docs")
    done = subprocess.run([ragtune_bin(), *shlex.split(index_line)[1:]], cwd=tmp_path, env=ragtune_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    (config,) = blocks("mcp.md", "json")
    entry = json.loads(config)["mcpServers"]["ragtune"]
    assert entry["command"] == "ragtune" and entry["args"][:2] == ["mcp", "--store"], entry
    args = [*entry["args"][:-1], str(tmp_path / ".ragtune")]
    params = StdioServerParameters(command=ragtune_bin(), args=args, env=ragtune_env())

    async def main():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                result = await session.call_tool("search", {"query": "mcpServers claude_desktop_config.json", "top_k": 3})
                return tools, result

    tools, result = asyncio.run(main())
    assert tools == ["search", "ask", "index_documents"]
    assert not result.is_error, result.content
    hits = json.loads(result.content[0].text)["hits"]
    assert any(h["chunk"]["doc_id"].endswith("mcp.md") for h in hits), hits
