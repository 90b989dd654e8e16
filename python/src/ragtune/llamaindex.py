"""A LlamaIndex retriever over ragtune (`pip install ragtune[llamaindex]`).

`RagtuneRetriever(Client(url), k=4)` returns ragtune's top-k as `NodeWithScore`s of `TextNode`s whose metadata
holds `score`, `doc_id`, `chunk_id`, `source` and `title` (and with `mode="query"` the citations and CRAG decision).
"""

from __future__ import annotations

from typing import Any, Literal

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ragtune.client import Client, Strategy
from ragtune.results import passages


class RagtuneRetriever(BaseRetriever):
    """ragtune's ranked passages (`mode="search"`) or its corrected context (`mode="query"`) as nodes."""

    def __init__(
        self,
        client: Client,
        k: int = 4,
        mode: Literal["search", "query"] = "search",
        strategy: Strategy | None = None,
        **kwargs: Any,
    ) -> None:
        self.client = client
        self.k = k
        self.mode = mode
        self.strategy = strategy
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        out = []
        for text, meta in passages(self.client, query_bundle.query_str, k=self.k, mode=self.mode,
                                   strategy=self.strategy):
            node = TextNode(id_=meta["chunk_id"], text=text, metadata=meta)
            out.append(NodeWithScore(node=node, score=meta["score"]))
        return out
