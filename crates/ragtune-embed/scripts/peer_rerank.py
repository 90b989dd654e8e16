"""The Python peer of `cargo xtask bench compare --reranker DIR`: a cross-encoder as a user would run it without
ragtune, on the same ONNX file and the same (query, passage) pairs as ragtune's `CrossEncoderReranker`.

It tokenises as fastembed's `TextRerank` does (the tokenizer of `tokenizer.json` with truncation to `max_length`,
capped by `model_max_length` of `tokenizer_config.json`; padding to the longest pair of the batch with the pad token of
`tokenizer_config.json` and the pad id of `config.json`; the special tokens of `special_tokens_map.json` added),
encodes each pair as a pair (query, passage), feeds `input_ids`, `attention_mask` and `token_type_ids` (when the model
takes them) to onnxruntime, and reads `logits[:, 0]`.

    python peer_rerank.py --model-dir DIR --pairs pairs.jsonl [--threads 0] [--batch-size 16] [--max-length 256]
                          [--dump scores.f32]

`pairs.jsonl` is written by `rerank-compare pairs` (one line per query: `query`, `passages`). Each query's passages
are scored in batches of `--batch-size`, one query after the other, as ragtune's reranker is called once per query.
`--threads 0` leaves onnxruntime at its defaults (intra-op threads = cores); `--threads T` sets intra-op threads to T.
`--dump` writes every score in file order as little-endian f32. Prints one JSON line.
"""

import argparse
import json
import time

import numpy as np
import onnxruntime as ort
from tokenizers import AddedToken, Tokenizer


def make_tokenizer(model_dir: str, max_length: int) -> Tokenizer:
    """The tokenizer fastembed's `load_tokenizer` builds from the four files."""
    with open(f"{model_dir}/config.json", encoding="utf-8") as f:
        config = json.load(f)
    with open(f"{model_dir}/special_tokens_map.json", encoding="utf-8") as f:
        special = json.load(f)
    with open(f"{model_dir}/tokenizer_config.json", encoding="utf-8") as f:
        tok_config = json.load(f)
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    max_length = min(max_length, int(float(tok_config["model_max_length"])))
    pad = tok_config["pad_token"]
    pad_token = pad if isinstance(pad, str) else pad["content"]
    pad_id = config.get("pad_token_id")
    if not isinstance(pad_id, int):
        pad_id = tok.token_to_id(pad_token)
    tok.enable_padding(pad_id=pad_id if pad_id is not None else 0, pad_token=pad_token)
    tok.enable_truncation(max_length)
    for value in special.values():
        if isinstance(value, str):
            # fastembed's `AddedToken { special: true, ..Default::default() }`: normalized is true by default in Rust.
            tok.add_special_tokens([AddedToken(value, special=True, normalized=True)])
        elif isinstance(value, dict) and all(k in value for k in ("content", "single_word", "lstrip", "rstrip", "normalized")):
            tok.add_special_tokens(
                [
                    AddedToken(
                        value["content"],
                        special=True,
                        single_word=value["single_word"],
                        lstrip=value["lstrip"],
                        rstrip=value["rstrip"],
                        normalized=value["normalized"],
                    )
                ]
            )
    return tok


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--pairs", required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--dump")
    a = p.parse_args()

    with open(a.pairs, encoding="utf-8") as f:
        groups = [json.loads(line) for line in f if line.strip()]

    started = time.perf_counter()
    tok = make_tokenizer(a.model_dir, a.max_length)
    opts = ort.SessionOptions()
    if a.threads > 0:
        opts.intra_op_num_threads = a.threads
        opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(f"{a.model_dir}/model.onnx", opts, providers=["CPUExecutionProvider"])
    load_seconds = time.perf_counter() - started
    names = {i.name for i in sess.get_inputs()}

    def score(query: str, passages: list[str]) -> np.ndarray:
        enc = tok.encode_batch([(query, p) for p in passages])
        feed = {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        }
        if "token_type_ids" in names:
            feed["token_type_ids"] = np.array([e.type_ids for e in enc], dtype=np.int64)
        return sess.run(["logits"], feed)[0][:, 0]

    def score_query(g: dict) -> np.ndarray:
        ps = g["passages"]
        return np.concatenate([score(g["query"], ps[i : i + a.batch_size]) for i in range(0, len(ps), a.batch_size)])

    first = groups[0]
    score(first["query"], first["passages"][: a.batch_size])  # warm-up, as the Rust side does

    scores, query_ms = [], []
    started = time.perf_counter()
    for g in groups:
        t = time.perf_counter()
        scores.append(score_query(g))
        query_ms.append((time.perf_counter() - t) * 1000.0)
    seconds = time.perf_counter() - started
    scores = np.concatenate(scores).astype("<f4")
    if a.dump:
        scores.tofile(a.dump)

    # What the model read (outside the timing): tokens per pair without padding, and pairs cut at max_length.
    tok.no_padding()
    encodings = [e for g in groups for e in tok.encode_batch([(g["query"], p) for p in g["passages"]])]
    lengths = [len(e.ids) for e in encodings]
    cut = sum(1 for e in encodings if e.overflowing)
    ms = np.array(query_ms)
    print(
        json.dumps(
            {
                "impl": "python",
                "threads": a.threads,
                "max_length": a.max_length,
                "batch_size": a.batch_size,
                "queries": len(groups),
                "pairs": int(len(scores)),
                "model_load_seconds": load_seconds,
                "seconds": seconds,
                "pairs_per_second": len(scores) / seconds,
                "query_ms": {
                    "p50": float(np.percentile(ms, 50)),
                    "p99": float(np.percentile(ms, 99)),
                    "mean": float(ms.mean()),
                },
                "mean_pair_tokens": float(np.mean(lengths)),
                "pairs_truncated": cut,
            }
        )
    )


if __name__ == "__main__":
    main()
