"""A real `ragtune serve` for the whole session: an empty temporary store, embeddings off, no LLM."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from ragtune import Client

DOCUMENTS = [
    {"id": "upgrade", "title": "Upgrading", "source": "docs/upgrade.md",
     "text": "Upgrades keep your data. Run ragtune migrate after installing the new version."},
    {"id": "backup", "title": "Backups", "source": "docs/backup.md",
     "text": "Back up the store directory before an upgrade; copy it while the server is stopped."},
    {"id": "fruit", "title": "Fruit", "source": "notes/fruit.md",
     "text": "Bananas are yellow and grow in bunches."},
]


def ragtune_bin() -> str:
    path = os.environ.get("RAGTUNE_BIN")
    if not path:
        pytest.fail("RAGTUNE_BIN is not set: build with `cargo build -p ragtune-cli` and set "
                    "RAGTUNE_BIN=target/debug/ragtune", pytrace=False)
    if not Path(path).is_file():
        pytest.fail(f"RAGTUNE_BIN={path} is not a file", pytrace=False)
    return str(Path(path).resolve())


def ragtune_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAGTUNE_LLM_URL", None)
    env.pop("RAGTUNE_CONFIG", None)
    env["RAGTUNE__EMBEDDING__MODE"] = "off"
    return env


@contextlib.contextmanager
def serve(collections: tuple[str, ...] = ()):
    """Run `ragtune serve` on a free loopback port over a fresh store (and one fresh store per collection
    name); yields its base URL and stops it on exit."""
    binary = ragtune_bin()
    with tempfile.TemporaryDirectory(prefix="ragtune-py-") as tmp:
        env = ragtune_env()
        env.pop("RAGTUNE_SERVER_API_KEY", None)
        for name in collections:
            env[f"RAGTUNE__COLLECTIONS__{name.upper()}__STORE__PATH"] = str(Path(tmp) / name)
        proc = subprocess.Popen(
            [binary, "serve", "--bind", "127.0.0.1:0", "--store", str(Path(tmp) / "store")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp,
        )
        stderr: list[str] = []
        threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
        try:
            url = None
            for line in proc.stdout:
                m = re.match(r"ragtune: serving .* on (http://\S+)", line)
                if m:
                    url = m.group(1)
                    break
            if url is None:
                proc.wait(timeout=10)
                pytest.fail(f"ragtune serve exited ({proc.returncode}) without serving:\n{''.join(stderr)}",
                            pytrace=False)
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def server_url():
    with serve() as url:
        Client(url).put_documents(DOCUMENTS)
        yield url


@pytest.fixture
def client(server_url: str) -> Client:
    return Client(server_url)
