"""A LangChain retriever over ragtune (`pip install ragtune[langchain]`).

`RagtuneRetriever(client=Client(url), k=4)` returns ragtune's top-k as LangChain `Document`s whose metadata holds
`score`, `doc_id`, `chunk_id`, `source` and `title`; with `mode="query"` it returns the context ragtune would answer
from, with `citations` and the CRAG `crag_decision` (and `crag_score`) in each document's metadata.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ragtune.client import Client, Strategy
from ragtune.results import passages


class RagtuneRetriever(BaseRetriever):
    """ragtune's ranked passages (`mode="search"`) or its corrected context (`mode="query"`) as `Document`s."""

    client: Client
    k: int = 4
    mode: Literal["search", "query"] = "search"
    strategy: Strategy | None = None

    model_config = {"arbitrary_types_allowed": True}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return [
            Document(page_content=text, metadata=meta, id=meta["chunk_id"])
            for text, meta in passages(self.client, query, k=self.k, mode=self.mode, strategy=self.strategy)
        ]
