"""The docs' Python examples run against the session's server (its address replaces http://127.0.0.1:8080)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
DEFAULT_URL = "http://127.0.0.1:8080"


def python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("index", range(len(python_blocks("python.md"))))
def test_python_md_examples_run(server_url: str, index: int) -> None:
    code = python_blocks("python.md")[index]
    assert DEFAULT_URL in code
    exec(compile(code.replace(DEFAULT_URL, server_url), f"docs/python.md block {index}", "exec"), {})
