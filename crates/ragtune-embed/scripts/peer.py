"""The Python peer of `cargo xtask bench compare`: what a user would otherwise write for dense + BM25 retrieval.

Dense: the same ONNX file as ragtune through onnxruntime + tokenizers (tokenise with truncation to 256 tokens and
padding, run, mean-pool over the attention mask, L2-normalise), vectors in a numpy matrix, exact top 10 by a
matrix-vector product and argpartition. BM25: bm25s (tokenise with English stop words, `retrieve` top 10).

    python peer.py --model-dir DIR --dataset DIR [--docs 1000] [--queries 300] [--threads 0] [--batch-size 32]
        [--per-query FILE]

`--threads 0` leaves onnxruntime at its defaults (intra-op threads = cores); `--threads T` sets intra-op threads to
T. Indexing time covers embedding every document and building the BM25 index (the peer's "searchable index"); query
latencies are one query at a time: embedding only, dense end to end (embed + search), BM25 end to end (tokenise +
retrieve), each query through all three in turn. Prints one JSON line.
"""

import argparse
import json
import sys
import time

import bm25s
import numpy as np

# The same embedding steps as the reference script next to this one (and as FastEmbedder).
from reference_embed import load_passages, make_embedder


def load_queries(dataset: str, n: int) -> list[str]:
    judged = set()
    with open(f"{dataset}/qrels/test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            judged.add(line.split("\t")[0])
    out = []
    with open(f"{dataset}/queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            if q["_id"] in judged:
                out.append(q["text"])
    return out[:n]


def stats(ms: list[float]) -> dict:
    a = np.array(ms)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--per-query", help="also write each query's milliseconds, one JSON line per query")
    p.add_argument(
        "--serve",
        action="store_true",
        help="after indexing print one JSON line, then answer each query read from stdin (a JSON string a line) "
        "with a JSON line of its milliseconds (embed_ms, dense_ms, bm25_ms): how `compare --peer` runs it",
    )
    a = p.parse_args()

    started = time.perf_counter()
    embed = make_embedder(a.model_dir, a.threads, a.max_length)
    load_seconds = time.perf_counter() - started

    docs = load_passages(f"{a.dataset}/corpus.jsonl", a.docs)
    queries = load_queries(a.dataset, a.queries)
    embed(docs[:2])  # warm-up, as the Rust side does

    started = time.perf_counter()
    matrix = np.concatenate([embed(docs[i : i + a.batch_size]) for i in range(0, len(docs), a.batch_size)])
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    index_seconds = time.perf_counter() - started

    def dense_search(q: str) -> np.ndarray:
        scores = matrix @ embed([q])[0]
        top = np.argpartition(-scores, 10)[:10]
        return top[np.argsort(-scores[top])]

    def bm25_search(q: str):
        return retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k=10, show_progress=False)

    kinds = ((lambda q: embed([q]), "embed_ms"), (dense_search, "dense_ms"), (bm25_search, "bm25_ms"))
    if a.serve:
        print(json.dumps({"impl": "python", "docs": len(docs), "index_seconds": index_seconds}), flush=True)
        for line in sys.stdin:
            q = json.loads(line)
            timed = {}
            for f, name in kinds:
                t = time.perf_counter()
                f(q)
                timed[name] = (time.perf_counter() - t) * 1000.0
            print(json.dumps(timed), flush=True)
        return

    # Each query runs every kind in turn (embedding, dense, BM25), so a change of load during the run falls on all
    # kinds alike, as on the Rust side.
    embed_ms, dense_ms, bm25_ms = [], [], []
    for q in queries:
        for f, out in ((lambda q: embed([q]), embed_ms), (dense_search, dense_ms), (bm25_search, bm25_ms)):
            t = time.perf_counter()
            f(q)
            out.append((time.perf_counter() - t) * 1000.0)
    if a.per_query:
        with open(a.per_query, "w", encoding="utf-8") as f:
            for i, q in enumerate(queries):
                line = {"i": i, "query": q, "embed_ms": embed_ms[i], "dense_ms": dense_ms[i], "bm25_ms": bm25_ms[i]}
                f.write(json.dumps(line) + "\n")
    print(
        json.dumps(
            {
                "impl": "python",
                "threads": a.threads,
                "docs": len(docs),
                "queries": len(queries),
                "model_load_seconds": load_seconds,
                "index_seconds": index_seconds,
                "index_docs_per_second": len(docs) / index_seconds,
                "embed_ms": stats(embed_ms),
                "dense_ms": stats(dense_ms),
                "bm25_ms": stats(bm25_ms),
            }
        )
    )


if __name__ == "__main__":
    main()
