"""A typed client for ragtune's `/v1` routes over the standard library's `urllib`."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

Strategy = Literal["auto", "bm25", "dense", "hybrid"]


class RagtuneError(Exception):
    """An error answered by the server (`{"error": {"kind", "message"}}`) or met on the way to it.

    `kind` is the server's error kind (`invalid_input`, `not_found`, `unauthorized`, ...), or `connection` when the
    server could not be reached and `bad_response` when its answer was not ragtune's JSON; `status` is the HTTP
    status, or None when there was none.
    """

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}" + (f" (HTTP {status})" if status is not None else ""))
        self.kind = kind
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Hit:
    """One ranked passage of `search`: the chunk's text and provenance with its fused score."""

    chunk_id: str
    doc_id: str
    text: str
    score: float
    title: str | None = None
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, hit: Mapping[str, Any]) -> "Hit":
        chunk = hit.get("chunk", {})
        return cls(
            chunk_id=str(chunk.get("id", "")),
            doc_id=str(chunk.get("doc_id", "")),
            text=str(chunk.get("text", "")),
            score=float(hit.get("score", 0.0)),
            title=chunk.get("title"),
            source=chunk.get("source"),
            metadata=dict(chunk.get("metadata") or {}),
            sources=dict(hit.get("sources") or {}),
        )


class Client:
    """ragtune's HTTP API: `Client("http://127.0.0.1:8080", api_key=...)`.

    `collection` sends every call to `/v1/collections/NAME/...` instead of the default collection. Answers are the
    server's JSON as dicts (docs/server.md), except `search_hits`, which returns `Hit`s.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        *,
        collection: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.collection = collection
        self.timeout = timeout

    # -- routes -------------------------------------------------------------------------------------------------

    def ask(
        self,
        question: str,
        *,
        top_k: int | None = None,
        use_crag: bool | None = None,
        use_web: bool | None = None,
        deadline_ms: int | None = None,
        trace: bool | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/ask`: the answer with citations, CRAG metadata, faithfulness and cost."""
        body = _options(question=question, top_k=top_k, use_crag=use_crag, use_web=use_web,
                        deadline_ms=deadline_ms, trace=trace)
        return self._request("POST", "ask", body)

    def query(
        self,
        question: str,
        *,
        top_k: int | None = None,
        use_crag: bool | None = None,
        use_web: bool | None = None,
        deadline_ms: int | None = None,
        trace: bool | None = None,
    ) -> dict[str, Any]:
        """`POST /v1/query`: what `ask` does without generating: the context, citations and CRAG decision."""
        body = _options(question=question, top_k=top_k, use_crag=use_crag, use_web=use_web,
                        deadline_ms=deadline_ms, trace=trace)
        return self._request("POST", "query", body)

    def search(
        self, query: str, *, top_k: int | None = None, strategy: Strategy | None = None, trace: bool | None = None
    ) -> dict[str, Any]:
        """`POST /v1/search`: `{"hits": [...]}` ranked with scores and provenance."""
        return self._request("POST", "search", _options(query=query, top_k=top_k, strategy=strategy, trace=trace))

    def search_hits(self, query: str, *, top_k: int | None = None, strategy: Strategy | None = None) -> list[Hit]:
        """`search` as typed `Hit`s."""
        answer = self.search(query, top_k=top_k, strategy=strategy)
        return [Hit.from_json(h) for h in answer.get("hits", [])]

    def put_documents(self, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """`PUT /v1/documents`: index the batch whole (`id`, `text`, optional `title`, `source`, `metadata`)."""
        return self._request("PUT", "documents", {"documents": [dict(d) for d in documents]})

    def delete_document(self, doc_id: str) -> dict[str, Any]:
        """`DELETE /v1/documents/{id}`: `{"deleted": id}`; `RagtuneError` of kind `not_found` when absent."""
        return self._request("DELETE", "documents/" + urllib.parse.quote(doc_id, safe=""), None)

    def stats(self) -> dict[str, Any]:
        """`GET /v1/stats`: the store's counts, the models and what the engine runs without."""
        return self._request("GET", "stats", None)

    # -- transport ----------------------------------------------------------------------------------------------

    def _url(self, route: str) -> str:
        prefix = "/v1"
        if self.collection is not None:
            prefix += "/collections/" + urllib.parse.quote(self.collection, safe="")
        return f"{self.base_url}{prefix}/{route}"

    def _request(self, method: str, route: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        headers = {"accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self._url(route), data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return _decode(response.read(), response.status)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                detail = json.loads(raw)["error"]
                raise RagtuneError(str(detail["kind"]), str(detail["message"]), e.code) from None
            except (ValueError, KeyError, TypeError):
                raise RagtuneError("http", raw.decode(errors="replace") or str(e.reason), e.code) from None
        except urllib.error.URLError as e:
            raise RagtuneError("connection", str(e.reason)) from e
        except TimeoutError as e:
            raise RagtuneError("connection", f"timed out after {self.timeout} s") from e


def _options(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _decode(raw: bytes, status: int) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise RagtuneError("bad_response", "the answer is not JSON", status) from None
    if not isinstance(value, dict):
        raise RagtuneError("bad_response", "the answer is not a JSON object", status)
    return value
