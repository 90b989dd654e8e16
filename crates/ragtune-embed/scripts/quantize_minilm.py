"""Builds the int8 variant of the provisioned all-MiniLM-L6-v2 for `cargo xtask models --quantized`.

The provisioned `model.onnx` stores int8 weights that the graph casts back to fp32 (Cast + Mul) before every MatMul,
so it computes in fp32. This script folds those constants into fp32 weights (onnxruntime's basic graph
optimisations, saved offline) and then applies onnxruntime's dynamic quantisation, per output channel, int8 weights
(per-tensor int8 is too lossy for this model): the MatMuls become MatMulInteger on int8 activations quantised at run
time. Tokenizer and config files are copied unchanged. No torch; the result is the same file for the same inputs
and package versions.

    python quantize_minilm.py --src DIR --out DIR
"""

import argparse
import hashlib
import json
import os
import shutil
import tempfile

import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folded = os.path.join(tmp, "folded.onnx")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = folded
        ort.InferenceSession(os.path.join(a.src, "model.onnx"), opts, providers=["CPUExecutionProvider"])
        partial = os.path.join(a.out, "model.onnx.partial")
        quantize_dynamic(folded, partial, per_channel=True, weight_type=QuantType.QInt8)
        os.replace(partial, os.path.join(a.out, "model.onnx"))
    for name in ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"]:
        shutil.copyfile(os.path.join(a.src, name), os.path.join(a.out, name))
    print(
        json.dumps(
            {
                "source_sha256": sha256(os.path.join(a.src, "model.onnx")),
                "model_sha256": sha256(os.path.join(a.out, "model.onnx")),
                "onnxruntime": ort.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
