"""Fine-tunes a cross-encoder from BERT weights (all-MiniLM-L6-v2's safetensors) for `ragtune train reranker`.

The Rust side mines the training groups (a question, one passage that answers it, hard negatives from ragtune's own
hybrid retrieval) and runs this script in the trainer's virtual environment (Debian's CPU `python3-torch`, see
docs/adr/0026-reranker-trainer.md). The script:

1. builds a BERT encoder in plain torch from `--init` (`model.safetensors`, `config.json`, `tokenizer.json`), with a
   new scoring head on the pooled [CLS] vector, initialised from `--seed`;
2. trains it (scoring head on the mean of the tokens, as the model was trained to pool) on `--groups` (JSON lines `{"query", "positive", "negatives": [...]}`) with a listwise loss (softmax
   cross-entropy of the positive against its group's negatives), AdamW, linear warm-up and decay;
3. exports ONNX (inputs `input_ids`, `attention_mask`, `token_type_ids`; output `logits [batch, 1]`), checks it
   against torch with onnxruntime, and quantises it per output channel to int8 like the embedder;
4. writes `provenance.json`: the Rust side's description of the data (`--provenance`), the recipe, the loss curve,
   the versions and every file's sha256.

Progress goes to stdout as JSON lines (`{"event": "step", ...}`), which `ragtune train` turns into a progress bar.
Same seed, data, recipe and thread count give the same model file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import struct
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"]


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (F32 and I64 only: what a BERT checkpoint holds)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] not in dtypes:
            raise SystemExit(f"{path}: tensor {name} has dtype {meta['dtype']}, expected F32 or I64")
        start, end = meta["data_offsets"]
        out[name.removeprefix("bert.")] = np.frombuffer(body[start:end], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.attention_out, self.attention_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=eps)
        self.inner, self.out, self.out_norm = nn.Linear(hidden, inner), nn.Linear(inner, hidden), nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask
        attended = torch.matmul(self.dropout(torch.softmax(scores, dim=-1)), v).transpose(1, 2).reshape(b, s, h)
        x = self.attention_norm(x + self.dropout(self.attention_out(attended)))
        return self.out_norm(x + self.dropout(self.out(nn.functional.gelu(self.inner(x)))))


class CrossEncoder(nn.Module):
    def __init__(self, config: dict, dropout: float, cosine: bool = False) -> None:
        super().__init__()
        self.cosine = cosine
        self.scale = nn.Parameter(torch.tensor(20.0))
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.words = nn.Embedding(config["vocab_size"], hidden)
        self.positions = nn.Embedding(config["max_position_embeddings"], hidden)
        self.types = nn.Embedding(config.get("type_vocab_size", 2), hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            Layer(hidden, config["num_attention_heads"], config["intermediate_size"], eps, dropout)
            for _ in range(config["num_hidden_layers"])
        )
        self.head = nn.Linear(hidden, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.dropout(self.norm(self.words(input_ids) + self.positions(positions) + self.types(token_type_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        # The mean of the tokens, as all-MiniLM-L6-v2 was trained to pool (its [CLS] vector and pooler were not
        # trained by sentence-transformers, so a head on them starts from a nearly constant input).
        weights = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        if not self.cosine:
            return self.head(self.dropout(pooled))
        # The cosine of the query's and the passage's token means, as the bi-encoder scores them apart: the model
        # starts as a ranker (its retrieval quality) instead of from a random head, and the head learns the rest.
        second = (token_type_ids.unsqueeze(-1).to(x.dtype)) * weights
        first = weights - second
        a = (x * first).sum(dim=1) / first.sum(dim=1).clamp(min=1.0)
        b = (x * second).sum(dim=1) / second.sum(dim=1).clamp(min=1.0)
        cos = nn.functional.cosine_similarity(a, b, dim=-1).unsqueeze(-1)
        return self.scale * cos + self.head(self.dropout(pooled))

    def load_bert(self, tensors: dict[str, np.ndarray]) -> None:
        names = {
            "words.weight": "embeddings.word_embeddings.weight",
            "positions.weight": "embeddings.position_embeddings.weight",
            "types.weight": "embeddings.token_type_embeddings.weight",
            "norm.weight": "embeddings.LayerNorm.weight",
            "norm.bias": "embeddings.LayerNorm.bias",
        }
        for i in range(len(self.layers)):
            p = f"encoder.layer.{i}."
            for ours, theirs in [
                ("query", "attention.self.query"), ("key", "attention.self.key"), ("value", "attention.self.value"),
                ("attention_out", "attention.output.dense"), ("attention_norm", "attention.output.LayerNorm"),
                ("inner", "intermediate.dense"), ("out", "output.dense"), ("out_norm", "output.LayerNorm"),
            ]:
                for part in ["weight", "bias"]:
                    names[f"layers.{i}.{ours}.{part}"] = f"{p}{theirs}.{part}"
        state = self.state_dict()
        for ours, theirs in names.items():
            if theirs not in tensors:
                raise SystemExit(f"the initial weights have no tensor `{theirs}`")
            value = torch.from_numpy(tensors[theirs].copy())
            if value.shape != state[ours].shape:
                raise SystemExit(f"`{theirs}` has shape {tuple(value.shape)}, the model wants {tuple(state[ours].shape)}")
            state[ours] = value
        self.load_state_dict(state)


def read_groups(path: str, negatives: int) -> tuple[list[dict], int]:
    groups, short = [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                g = json.loads(line)
                query, positive, negs = g["query"], g["positive"], g["negatives"]
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{n}: not a training group ({e})")
            if len(negs) < negatives:
                short += 1
                continue
            groups.append({"query": query, "positive": positive, "negatives": negs[:negatives]})
    return groups, short


def encode(tokenizer, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    encodings = tokenizer.encode_batch(pairs)
    return {
        "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
        "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
        "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
    }


def export(model: CrossEncoder, tokenizer, out_dir: str, init: str, quantize: bool) -> dict:
    import onnxruntime as ort

    model.eval()
    fp32_dir = os.path.join(out_dir, "fp32")
    os.makedirs(fp32_dir, exist_ok=True)
    sample = encode(tokenizer, [("what causes scurvy", "Scurvy is caused by a lack of vitamin C."),
                                ("a second question", "and a second, longer passage to pad the batch with words")])
    args = (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"])
    fp32 = os.path.join(fp32_dir, "model.onnx")
    axes = {"batch": 0, "sequence": 1}
    torch.onnx.export(
        model, args, fp32, input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["logits"],
        dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                      "token_type_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch"}},
        opset_version=14, do_constant_folding=True,
    )
    del axes
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(init, name), os.path.join(fp32_dir, name))
    with torch.no_grad():
        expected = model(*args).numpy()
    session = ort.InferenceSession(fp32, providers=["CPUExecutionProvider"])
    feed = {k: v.numpy() for k, v in sample.items()}
    got = session.run(["logits"], feed)[0]
    if got.shape != (2, 1) or float(np.max(np.abs(got - expected))) > 1e-3:
        raise SystemExit(f"the ONNX export disagrees with torch: {got.ravel()} vs {expected.ravel()}")
    check = {"fp32_max_abs_diff": float(np.max(np.abs(got - expected)))}
    final = os.path.join(out_dir, "model.onnx")
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            folded = os.path.join(tmp, "folded.onnx")
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            opts.optimized_model_filepath = folded
            ort.InferenceSession(fp32, opts, providers=["CPUExecutionProvider"])
            quantize_dynamic(folded, final + ".partial", per_channel=True, weight_type=QuantType.QInt8)
            os.replace(final + ".partial", final)
        q = ort.InferenceSession(final, providers=["CPUExecutionProvider"]).run(["logits"], feed)[0]
        check["int8_max_abs_diff"] = float(np.max(np.abs(q - expected)))
    else:
        shutil.copyfile(fp32, final)
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(init, name), os.path.join(out_dir, name))
    check["onnxruntime"] = ort.__version__
    return check


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--groups", required=True, help="training groups, JSON lines")
    p.add_argument("--init", required=True, help="directory with model.safetensors, config.json and tokenizer files")
    p.add_argument("--out", required=True)
    p.add_argument("--provenance", help="a JSON file describing the data, merged into provenance.json")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--steps", type=int, default=0, help="optimizer steps (0: one pass over the groups)")
    p.add_argument("--queries-per-step", type=int, default=2)
    p.add_argument("--negatives", type=int, default=7)
    p.add_argument("--max-length", type=int, default=192)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--head-lr-scale", type=float, default=30.0)
    p.add_argument("--score", choices=["cosine", "head"], default="cosine",
                   help="cosine: the segments' cosine (scaled) plus a head on the mean; head: a head on the mean only")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-quantize", action="store_true")
    a = p.parse_args()

    from tokenizers import Tokenizer

    started = time.time()
    torch.set_num_threads(a.threads)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)

    groups, short = read_groups(a.groups, a.negatives)
    if not groups:
        raise SystemExit(f"{a.groups}: no group with a positive and {a.negatives} negatives")
    with open(os.path.join(a.init, "config.json")) as f:
        config = json.load(f)
    tokenizer = Tokenizer.from_file(os.path.join(a.init, "tokenizer.json"))
    tokenizer.enable_truncation(max_length=a.max_length, strategy="longest_first")
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    model = CrossEncoder(config, a.dropout, cosine=a.score == "cosine")
    model.load_bert(read_safetensors(os.path.join(a.init, "model.safetensors")))
    with torch.no_grad():
        # With the cosine score the model starts as the cosine alone; the head grows from zero.
        nn.init.normal_(model.head.weight, std=0.0 if model.cosine else 0.02)
        nn.init.zeros_(model.head.bias)

    order_rng = random.Random(a.seed)
    per_pass = math.ceil(len(groups) / a.queries_per_step)
    steps = a.steps or per_pass
    encoder = [(n, p_) for n, p_ in model.named_parameters() if not n.startswith("head.") and n != "scale"]
    decay = [p_ for n, p_ in encoder if not (n.endswith("bias") or "norm" in n)]
    no_decay = [p_ for n, p_ in encoder if n.endswith("bias") or "norm" in n]
    # The new head starts from nothing: it learns at `--head-lr-scale` times the encoder's rate.
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0},
                                   {"params": list(model.head.parameters()), "weight_decay": 0.0,
                                    "lr": a.lr * a.head_lr_scale},
                                   {"params": [model.scale], "weight_decay": 0.0, "lr": a.lr * a.head_lr_scale}], lr=a.lr)
    warmup = max(1, int(steps * a.warmup))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
    emit("start", groups=len(groups), skipped_short=short, steps=steps, pairs_per_step=a.queries_per_step * (1 + a.negatives))

    model.train()
    order: list[int] = []
    curve, window = [], []
    target = torch.zeros(a.queries_per_step, dtype=torch.long)
    for step in range(steps):
        if len(order) < a.queries_per_step:
            fresh = list(range(len(groups)))
            order_rng.shuffle(fresh)
            order += fresh
        batch = [groups[i] for i in order[: a.queries_per_step]]
        del order[: a.queries_per_step]
        pairs = [(g["query"], text) for g in batch for text in [g["positive"], *g["negatives"]]]
        logits = model(**encode(tokenizer, pairs)).view(len(batch), 1 + a.negatives)
        loss = nn.functional.cross_entropy(logits, target[: len(batch)])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        window.append(float(loss))
        if (step + 1) % max(1, min(25, steps // 20)) == 0 or step + 1 == steps:
            mean = sum(window) / len(window)
            curve.append({"step": step + 1, "loss": round(mean, 6)})
            window = []
            emit("step", step=step + 1, steps=steps, loss=mean, elapsed=time.time() - started)
    trained = time.time() - started

    os.makedirs(a.out, exist_ok=True)
    emit("export")
    check = export(model, tokenizer, a.out, a.init, not a.no_quantize)
    provenance = {}
    if a.provenance:
        with open(a.provenance) as f:
            provenance = json.load(f)
    provenance.update({
        "recipe": {k: getattr(a, k) for k in ["seed", "queries_per_step", "negatives", "max_length", "lr", "warmup",
                                              "head_lr_scale", "score", "dropout", "threads"]} | {"steps": steps, "loss": "listwise softmax"},
        "groups": {"used": len(groups), "skipped_short": short, "sha256": sha256(a.groups)},
        "init": {name: sha256(os.path.join(a.init, name)) for name in ["model.safetensors", *TOKENIZER_FILES]},
        "loss_curve": curve,
        "export": check,
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__},
        "train_seconds": round(trained, 1),
        "files": {name: sha256(os.path.join(a.out, name)) for name in ["model.onnx", "fp32/model.onnx", *TOKENIZER_FILES]},
    })
    with open(os.path.join(a.out, "provenance.json"), "w") as f:
        json.dump(provenance, f, indent=1, sort_keys=True)
        f.write("\n")
    emit("done", seconds=time.time() - started, model=os.path.join(a.out, "model.onnx"))


if __name__ == "__main__":
    main()
