from __future__ import annotations

import pytest

from ragtune import Client, Hit, RagtuneError


def test_search_ranks_the_matching_document_first(client: Client) -> None:
    hits = client.search_hits("upgrade data", top_k=2, strategy="bm25")
    assert hits and all(isinstance(h, Hit) for h in hits)
    assert len(hits) <= 2
    assert hits[0].doc_id == "upgrade"
    assert hits[0].title == "Upgrading" and hits[0].source == "docs/upgrade.md"
    assert hits[0].score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    raw = client.search("upgrade data", top_k=2)
    assert raw["hits"][0]["chunk"]["doc_id"] == "upgrade"


def test_ask_answers_with_citations(client: Client) -> None:
    answer = client.ask("How do upgrades keep data?")
    assert answer["answer"]
    assert answer["citations"] and answer["citations"][0]["doc_id"] in {"upgrade", "backup"}
    assert answer["crag"]["decision"] in {"CORRECT", "AMBIGUOUS", "INCORRECT"}


def test_query_returns_context_without_an_answer(client: Client) -> None:
    answer = client.query("How do upgrades keep data?", top_k=2, use_crag=False)
    assert answer["answer"] is None
    assert answer["context"] and answer["context"][0]["doc_id"] in {"upgrade", "backup"}


def test_put_and_delete_a_document(client: Client) -> None:
    before = client.stats()["stats"]["documents"]
    client.put_documents([{"id": "temp", "text": "Zeppelins float on hydrogen."}])
    assert client.stats()["stats"]["documents"] == before + 1
    assert client.search_hits("zeppelins", top_k=1)[0].doc_id == "temp"
    assert client.delete_document("temp") == {"deleted": "temp"}
    assert client.stats()["stats"]["documents"] == before


def test_errors_carry_kind_message_and_status(client: Client) -> None:
    with pytest.raises(RagtuneError) as e:
        client.delete_document("no-such-document")
    assert (e.value.kind, e.value.status) == ("not_found", 404)
    assert "no-such-document" in e.value.message
    with pytest.raises(RagtuneError) as e:
        client.search("upgrade", top_k=0)
    assert (e.value.kind, e.value.status) == ("invalid_input", 400)


def test_an_unknown_collection_is_not_found(server_url: str) -> None:
    with pytest.raises(RagtuneError) as e:
        Client(server_url, collection="nope").stats()
    assert e.value.status == 404


def test_an_unreachable_server_is_a_connection_error() -> None:
    with pytest.raises(RagtuneError) as e:
        Client("http://127.0.0.1:9", timeout=5).stats()
    assert e.value.kind == "connection" and e.value.status is None
