from __future__ import annotations

from llama_index.core.schema import NodeWithScore

from ragtune import Client
from ragtune.llamaindex import RagtuneRetriever


def test_retrieve_returns_top_k_nodes_with_scores(client: Client) -> None:
    nodes = RagtuneRetriever(client, k=2).retrieve("upgrade data")
    expected = client.search_hits("upgrade data", top_k=2)
    assert all(isinstance(n, NodeWithScore) for n in nodes)
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in expected]
    assert [n.score for n in nodes] == [h.score for h in expected]
    top = nodes[0]
    assert top.node.get_content() == expected[0].text
    assert top.node.metadata["doc_id"] == "upgrade"
    assert top.node.metadata["title"] == "Upgrading" and top.node.metadata["source"] == "docs/upgrade.md"


def test_query_mode_carries_the_crag_decision(client: Client) -> None:
    nodes = RagtuneRetriever(client, k=2, mode="query").retrieve("How do upgrades keep data?")
    assert nodes and nodes[0].node.metadata["crag_decision"] in {"CORRECT", "AMBIGUOUS", "INCORRECT"}
