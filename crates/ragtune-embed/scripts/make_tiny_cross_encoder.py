"""Builds the tiny cross-encoder used by ragtune-embed's tests (tests/data/tiny-cross-encoder/).

No trained cross-encoder can be obtained on the machines this project builds on, so the tests exercise the real
ONNX code path (fastembed's TextRerank on ONNX Runtime) with this small model instead. Its weights are NOT trained:
random unit vectors per word, seeded. The graph scores a pair by the dot product of the bag of word vectors of the
query segment and that of the passage segment, so pairs that share words score higher; no ranking quality is
claimed from it.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install onnx==1.17.0 tokenizers numpy
    /tmp/v/bin/python crates/ragtune-embed/scripts/make_tiny_cross_encoder.py crates/ragtune-embed/tests/data/tiny-cross-encoder
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

WORDS = (
    "the a of and to in is was for on with as by at from it that this be are an or not "
    "vitamin c scurvy rickets d deficiency cause caused causes disease iron anemia calcium bone "
    "stock market fell rose price bank rate cat dog sat mat garden apple pear rain sun"
).split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
DIM = 16


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.save(str(out / "tokenizer.json"))
    (out / "config.json").write_text(json.dumps({"model_type": "bert", "pad_token_id": 0, "max_position_embeddings": 512}, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}, indent=1) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512, "pad_token": "[PAD]"}, indent=1) + "\n")

    rng = np.random.default_rng(20261122)
    emb = rng.normal(size=(len(vocab), DIM)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    emb[vocab["[PAD]"]] = 0.0
    emb[vocab["[UNK]"]] = 0.0
    # Special tokens carry no meaning: zero them so only shared words move the score.
    emb[vocab["[CLS]"]] = 0.0
    emb[vocab["[SEP]"]] = 0.0

    B, S = "batch", "sequence"
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, S]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [B, S]),
        helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [B, S]),
    ]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, 1])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["e"]),  # [B,S,D]
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),  # [B,S]
        helper.make_node("Cast", ["token_type_ids"], ["t"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "t"], ["not_t"]),
        helper.make_node("Mul", ["m", "not_t"], ["wa"]),  # query segment weights
        helper.make_node("Mul", ["m", "t"], ["wb"]),  # passage segment weights
        helper.make_node("Unsqueeze", ["wa", "axis1"], ["wa3"]),  # [B,1,S]
        helper.make_node("Unsqueeze", ["wb", "axis1"], ["wb3"]),
        helper.make_node("MatMul", ["wa3", "e"], ["qa"]),  # [B,1,D]
        helper.make_node("MatMul", ["wb3", "e"], ["qb"]),
        helper.make_node("Mul", ["qa", "qb"], ["prod"]),
        helper.make_node("ReduceSum", ["prod", "axis2"], ["s"], keepdims=0),  # [B,1]
        helper.make_node("Identity", ["s"], ["logits"]),
    ]
    inits = [
        helper.make_tensor("emb", TensorProto.FLOAT, emb.shape, emb.flatten().tolist()),
        one,
        helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("axis2", TensorProto.INT64, [1], [2]),
    ]
    graph = helper.make_graph(nodes, "tiny_cross_encoder", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ragtune-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "model.onnx"))
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir())} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
