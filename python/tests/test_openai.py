"""`ragtune serve` as an OpenAI-compatible endpoint, driven by the official `openai` client (docs/openai.md).

Starts the binary at $RAGTUNE_BIN (conftest.serve) on a free loopback port with a fresh store, no dense model and no LLM
(answers are extractive, so it is fast) and a collection `med`, PUTs a few documents, then asks through
`client.chat.completions.create` whole, streamed, and of the collection.
"""

import json
import urllib.request

import openai
import pytest

from conftest import serve

DOCS = [
    {"id": "scurvy", "title": "Scurvy",
     "text": "Scurvy is a disease caused by a lack of vitamin C. James Lind showed in 1747 that citrus fruit cures it."},
    {"id": "rickets", "title": "Rickets",
     "text": "Rickets is caused by a lack of vitamin D. It softens the bones of children."},
    {"id": "ships", "title": "Ships",
     "text": "Ships of the Royal Navy carried lemons and limes to protect the crews on long voyages."},
]


@pytest.fixture(scope="module")
def server():
    with serve(collections=("med",)) as url:
        yield url


def put_documents(url, documents, collection=None):
    prefix = f"/v1/collections/{collection}" if collection else "/v1"
    request = urllib.request.Request(
        url + prefix + "/documents", method="PUT", data=json.dumps({"documents": documents}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        return json.load(response)


def test_chat_completions_answer_with_citations(server):
    assert put_documents(server, DOCS)["indexed"]["documents"] == 3
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused-without-a-server-key")

    assert [m.id for m in client.models.list().data] == ["ragtune", "ragtune:med"]

    completion = client.chat.completions.create(
        model="ragtune",
        messages=[{"role": "user", "content": "What causes scurvy?"}],
        temperature=0,
    )
    content = completion.choices[0].message.content
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "stop"
    assert "vitamin C" in content and "[1]" in content, content
    assert "Sources:\n[1] Scurvy — scurvy" in content, content
    extra = completion.model_extra["ragtune"]
    assert extra["citations"][0]["doc_id"] == "scurvy"
    assert "category" in extra["crag"]

    stream = client.chat.completions.create(
        model="ragtune",
        messages=[{"role": "user", "content": "What causes scurvy?"}],
        stream=True,
    )
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(chunks) > 3
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert streamed == content


def test_errors_are_openai_errors(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "q"}])
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="ragtune", messages=[{"role": "user", "content": "q"}], n=2)
    assert e.value.param == "n"


def test_the_model_selects_a_collection(server):
    put_documents(server, [{"id": "lind", "title": "Lind", "text": "James Lind ran a trial of citrus against scurvy."}],
                  collection="med")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused")
    completion = client.chat.completions.create(
        model="ragtune:med", messages=[{"role": "user", "content": "Who ran a trial of citrus?"}],
    )
    assert completion.model == "ragtune:med"
    assert "[1] Lind — lind" in completion.choices[0].message.content
    assert [c["doc_id"] for c in completion.model_extra["ragtune"]["citations"]] == ["lind"]
