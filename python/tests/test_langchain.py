from __future__ import annotations

from langchain_core.documents import Document

from ragtune import Client
from ragtune.langchain import RagtuneRetriever


def test_search_mode_returns_top_k_with_metadata(client: Client) -> None:
    docs = RagtuneRetriever(client=client, k=2).invoke("upgrade data")
    expected = client.search_hits("upgrade data", top_k=2)
    assert all(isinstance(d, Document) for d in docs)
    assert [d.metadata["chunk_id"] for d in docs] == [h.chunk_id for h in expected]
    top = docs[0]
    assert top.page_content == expected[0].text
    assert top.metadata["doc_id"] == "upgrade"
    assert top.metadata["title"] == "Upgrading" and top.metadata["source"] == "docs/upgrade.md"
    assert top.metadata["score"] == expected[0].score


def test_query_mode_carries_citations_and_crag(client: Client) -> None:
    docs = RagtuneRetriever(client=client, k=2, mode="query").invoke("How do upgrades keep data?")
    assert docs and len(docs) <= 2
    assert docs[0].metadata["doc_id"] in {"upgrade", "backup"}
    assert docs[0].metadata["crag_decision"] in {"CORRECT", "AMBIGUOUS", "INCORRECT"}
    assert isinstance(docs[0].metadata["citations"], list)
    assert {"score", "doc_id", "chunk_id", "source", "title"} <= docs[0].metadata.keys()
