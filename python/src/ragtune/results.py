"""ragtune's answers as (text, metadata) pairs: what both retrievers return, in their frameworks' types."""

from __future__ import annotations

from typing import Any, Iterator

from ragtune.client import Client, Strategy


def passages(
    client: Client, query: str, *, k: int, mode: str = "search", strategy: Strategy | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """ragtune's top-k for `query`: `/v1/search` hits, or with `mode="query"` the `/v1/query` context.

    Metadata: `score`, `doc_id`, `chunk_id`, `source`, `title` (plus the chunk's own metadata); in query mode also
    `n` (the citation number), `citations`, `crag_decision` and `crag_score`. A context passage has no score of its
    own: its score is its rank's reciprocal, 1/n, so that order and score agree.
    """
    if mode == "search":
        for hit in client.search_hits(query, top_k=k, strategy=strategy):
            meta = {**hit.metadata, "score": hit.score, "doc_id": hit.doc_id, "chunk_id": hit.chunk_id,
                    "source": hit.source, "title": hit.title}
            yield hit.text, meta
    elif mode == "query":
        answer = client.query(query, top_k=k)
        crag = answer.get("crag") or {}
        citations = answer.get("citations") or []
        for item in (answer.get("context") or [])[:k]:
            n = int(item.get("n", 0))
            meta = {"score": 1.0 / n if n > 0 else 0.0, "doc_id": item.get("doc_id"), "chunk_id": item.get("chunk_id"),
                    "source": item.get("source"), "title": item.get("title"), "n": n, "citations": citations,
                    "crag_decision": crag.get("decision"), "crag_score": crag.get("score")}
            yield str(item.get("text", "")), meta
    else:
        raise ValueError(f"mode must be 'search' or 'query', not {mode!r}")
