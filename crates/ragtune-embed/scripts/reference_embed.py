"""Reference embeddings for all-MiniLM-L6-v2 with Python onnxruntime + tokenizers, the same steps FastEmbedder takes:
tokenise (truncate to max_length, pad), run the ONNX model, mean-pool over the attention mask, L2-normalise.

Used by `cargo xtask bench embed` (throughput, same model file, batch size and threads as the Rust side) and to check
that Rust and Python produce the same vectors.

    python reference_embed.py --model-dir DIR --corpus corpus.jsonl --passages 512 --batch-size 32 --threads 1 [--dump out.npy]
"""

import argparse
import json
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def load_passages(corpus: str, n: int) -> list[str]:
    out = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            title = (doc.get("title") or "").strip()
            out.append(f"{title}\n{doc['text']}" if title else doc["text"])
            if len(out) == n:
                break
    return out


def make_embedder(model_dir: str, threads: int, max_length: int = 256):
    """The embedding function FastEmbedder mirrors: tokenise (truncate, pad), run, mean-pool, L2-normalise.
    `threads` 0 leaves onnxruntime's intra-op threads at its default (the number of cores)."""
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    opts = ort.SessionOptions()
    if threads > 0:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(f"{model_dir}/model.onnx", opts, providers=["CPUExecutionProvider"])

    def embed(batch: list[str]) -> np.ndarray:
        enc = tok.encode_batch(batch)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        types = np.array([e.type_ids for e in enc], dtype=np.int64)
        hidden = sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    return embed


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model-dir", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--passages", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--dump")
    p.add_argument("--compare", help="raw little-endian f32 vectors from the Rust side, same passages in order")
    a = p.parse_args()

    embed = make_embedder(a.model_dir, a.threads, a.max_length)
    texts = load_passages(a.corpus, a.passages)

    embed(texts[: a.batch_size])  # warm-up, as the Rust side loads and runs once before timing
    start = time.perf_counter()
    vectors = np.concatenate([embed(texts[i : i + a.batch_size]) for i in range(0, len(texts), a.batch_size)])
    seconds = time.perf_counter() - start
    if a.dump:
        np.save(a.dump, vectors)
    result = {"impl": "python-onnxruntime", "passages": len(texts), "seconds": seconds, "per_second": len(texts) / seconds}
    if a.compare:
        rust = np.fromfile(a.compare, dtype="<f4").reshape(-1, vectors.shape[1])[: len(vectors)]
        cos = (rust * vectors).sum(1)
        result["cosine_to_rust"] = {"min": float(cos.min()), "mean": float(cos.mean())}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
