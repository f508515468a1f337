"""int8 models that give the same logits on every x86 CPU.

onnxruntime's dynamic int8 MatMul multiplies uint8 activations by int8 weights. Without VNNI,
its AVX2 kernel adds pairs of products into int16 (``vpmaddubsw``), which saturates when
weights use the full ±127 range (255·127·2 > 32767): the same model then gives other logits
on an AVX2-only CPU than on one with VNNI. Weights in 7 bits (±64) cannot overflow
(255·64·2 = 32640), which is what onnxruntime's ``reduce_range=True`` does.

* :func:`quantize_int8` quantises an fp32 export that way (the release path).
* :func:`requantize_7bit` brings an already-quantised 8-bit model into the 7-bit range
  (``w7 = round(w8 / 2)``, scale doubled), for released models whose fp32 source is gone.
* :func:`int8_check` compares onnxruntime with onnx's exact reference evaluator on the same
  graph and records the CPU it ran on: that difference is what a user's CPU can change.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

__all__ = ["SAFE_WEIGHT_MAX", "quantize_int8", "requantize_7bit", "max_matmul_weight", "int8_check", "cpu_flags"]

SAFE_WEIGHT_MAX = 64  # |w| <= 64: 255 * 64 * 2 = 32640 fits int16, so no kernel can saturate


# MatMuls left in fp32 by default: the feed-forward output projections (1536 -> 384). Their inputs
# (GELU activations) have the widest range of the network; quantising them cost the distilled
# reranker 0.030 dev MRR against fp32, keeping them in fp32 cost nothing (0.699 vs 0.696) at about
# +40% scoring time (models/toolrank-reranker/int8_gate.json, README).
FP32_MATMULS = re.compile(r"/layer\.\d+/output/dense/MatMul$")


def quantize_int8(fp32_path: str | Path, out_path: str | Path, *, per_channel: bool = True,
                  keep_fp32: re.Pattern | None = FP32_MATMULS) -> list[str]:
    """Dynamic int8 with 7-bit weights (``reduce_range=True``): CPU-independent results.

    MatMuls whose node name matches ``keep_fp32`` stay in fp32 (None: quantise all). Returns them.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(fp32_path), load_external_data=False).graph
    keep = [n.name for n in graph.node if n.op_type == "MatMul" and keep_fp32 is not None and keep_fp32.search(n.name)]
    quantize_dynamic(str(fp32_path), str(out_path), weight_type=QuantType.QInt8, per_channel=per_channel,
                     reduce_range=True, nodes_to_exclude=keep)
    return keep


def _matmul_weights(model: Any) -> list[tuple[Any, Any]]:
    """(weight initializer, scale initializer) for every MatMulInteger weight of the graph."""
    from onnx import TensorProto

    inits = {i.name: i for i in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in inits:
            continue
        w = inits[node.input[1]]
        if w.data_type != TensorProto.INT8:
            continue
        base = node.input[1].removesuffix("_quantized")
        scale = inits.get(base + "_scale")
        if scale is None:
            raise ValueError(f"int8 weight {w.name} has no {base}_scale initializer: not a quantize_dynamic graph")
        out.append((w, scale))
    return out


def max_matmul_weight(path: str | Path) -> int:
    """The largest |int8 weight| any MatMulInteger of the model multiplies by."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    pairs = _matmul_weights(model)
    return max((int(np.abs(numpy_helper.to_array(w).astype(np.int32)).max()) for w, _ in pairs), default=0)


def requantize_7bit(path: str | Path, out_path: str | Path) -> int:
    """Rewrite an 8-bit dynamic-quantised model with 7-bit MatMul weights; returns weights changed.

    Each weight becomes ``round(w / 2)`` and its scale doubles, so ``scale * w`` moves by at most
    one old quantisation step (a fresh 7-bit quantisation of the fp32 weights errs by up to one
    new half-step: the same order). Zero points must be 0 (symmetric int8, quantize_dynamic's).
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    pairs = _matmul_weights(model)
    if not pairs:
        raise ValueError(f"{path}: no int8 MatMulInteger weights to requantise")
    scales_done: set[str] = set()
    for w, scale in pairs:
        zp = inits.get(w.name.removesuffix("_quantized") + "_zero_point")
        if zp is not None and np.any(numpy_helper.to_array(zp) != 0):
            raise ValueError(f"{w.name}: non-zero weight zero point; only symmetric int8 can be requantised")
        q = numpy_helper.to_array(w).astype(np.int32)
        if np.abs(q).max() <= SAFE_WEIGHT_MAX and scale.name in scales_done:
            continue
        q7 = np.clip(np.round(q / 2.0), -SAFE_WEIGHT_MAX, SAFE_WEIGHT_MAX).astype(np.int8)
        w.CopyFrom(numpy_helper.from_array(q7, w.name))
        if scale.name in scales_done:
            raise ValueError(f"scale {scale.name} is shared by several weights; cannot requantise safely")
        scale.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(scale) * 2).astype(np.float32), scale.name))
        scales_done.add(scale.name)
    onnx.save(model, str(out_path))
    return len(pairs)


def cpu_flags() -> dict[str, Any]:
    """The CPU features that pick onnxruntime's int8 kernels, and the versions that ran them."""
    import onnxruntime

    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
    return {"machine": platform.machine(), "onnxruntime": onnxruntime.__version__,
            "flags": [f for f in wanted if f in flags]}


def _with_integer_outputs(path: str | Path) -> tuple[Any, list[Any]]:
    """The model with every MatMulInteger's activation inputs and int32 output exposed."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    produced = {}
    for node in model.graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            produced.update(zip(node.output, (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8)))
    nodes = [n for n in model.graph.node if n.op_type == "MatMulInteger"]
    exposed = {}
    for n in nodes:
        for name in (n.input[0], n.input[2] if len(n.input) > 2 else ""):
            if name in produced:
                exposed[name] = produced[name]
        exposed[n.output[0]] = TensorProto.INT32
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(helper.make_tensor_value_info(k, t, None) for k, t in exposed.items() if k not in known)
    return model, nodes


def int8_check(path: str | Path, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Is every integer product onnxruntime computes here exact?

    Runs the model with each MatMulInteger's inputs and int32 output exposed, and recomputes
    each product exactly (float64, exact at these sizes) from the same quantised inputs. Saturating kernels
    (AVX2 without VNNI on 8-bit weights) show up as non-zero differences; exact kernels give 0.
    Float ops around them (layer norm, softmax, scale rounding) are not CPU-specific in this
    sense and are not compared. Returns the largest integer difference, how many products were
    compared, the weight range and :func:`cpu_flags`.
    """
    import onnxruntime as ort
    from onnx import numpy_helper

    model, nodes = _with_integer_outputs(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    values = dict(zip((o.name for o in session.get_outputs()),
                      session.run(None, {k: v for k, v in feeds.items() if k in names})))
    worst, compared = 0, 0
    for n in nodes:
        get = lambda name: values[name] if name in values else inits[name]
        # float64 BLAS is exact here: |255 * 128| * 1536 terms < 2**53
        a = get(n.input[0]).astype(np.float64)
        b = get(n.input[1]).astype(np.float64)
        a = a - (get(n.input[2]).astype(np.float64) if len(n.input) > 2 and n.input[2] else 0)
        b = b - (get(n.input[3]).astype(np.float64) if len(n.input) > 3 and n.input[3] else 0)
        exact = np.matmul(a, b)
        worst = max(worst, int(np.abs(exact - values[n.output[0]].astype(np.float64)).max()))
        compared += int(exact.size)
    return {"matmul_integer_ops": len(nodes), "products_compared": compared,
            "max_abs_int_diff_vs_exact": worst, "max_matmul_weight": max_matmul_weight(path), "cpu": cpu_flags()}


def _release_check_feeds(model_dir: Path, n: int = 24) -> dict[str, np.ndarray]:
    """Token arrays of ``n`` real dev requests paired with tool records, for :func:`int8_check`."""
    import json

    from scorer.reranker import PairEncoder

    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = (model_dir / "tokenizer.json").read_text()
    data = Path(__file__).resolve().parent / "data" / "questions.jsonl"
    from retrieval.jsonl import read_jsonl

    rows = [row for _, row in read_jsonl(data)]
    rows = [r for r in rows if r["split"] == "dev"][:n]
    pairs = [(r["query"], f"Candidate tool: {r['server']} / {r['tool']}") for r in rows]
    encoder = PairEncoder(tokenizer, int(config.get("max_length", 128)), config.get("truncation", "longest_first"))
    feeds = encoder.arrays(encoder.encode(pairs))
    if "token_type_ids" not in feeds:
        feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    return feeds


def quality_gate(fp32_dir: str | Path, int8_dir: str | Path, *, questions: int = 120, k: int = 20,
                 max_mrr_drop: float = 0.01) -> dict[str, Any]:
    """int8 against fp32 of the same checkpoint on real dev lists: MRR of the labelled tool over
    each dev question's hybrid top ``k`` (+ the labelled tool), and the rank agreement per list."""
    import json

    from scipy.stats import spearmanr

    from retrieval.evaluation.harness import load_queries
    from retrieval.index.default import load_or_build_default
    from scorer import Scorer

    index = load_or_build_default()
    data = Path(__file__).resolve().parent / "data" / "questions.jsonl"
    queries = load_queries(data, split="dev")[:questions]
    models = {"fp32": Scorer.load(fp32_dir, threads=2), "int8": Scorer.load(int8_dir, threads=2)}
    rr = {name: [] for name in models}
    rho = []
    for q in queries:
        ids = [h.tool_id for h in index.retrieve(q.query, None, None, k=k)]
        if q.target not in ids:
            ids.append(q.target)
        tools = [index.catalog[t] for t in ids]
        logits = {name: np.asarray(m.logits(q.query, None, tools)) for name, m in models.items()}
        for name, l in logits.items():
            rank = 1 + int((l > l[ids.index(q.target)]).sum())
            rr[name].append(1.0 / rank)
        rho.append(spearmanr(logits["fp32"], logits["int8"])[0])
    report = {"questions": len(queries), "k": k, "mrr_fp32": float(np.mean(rr["fp32"])),
              "mrr_int8": float(np.mean(rr["int8"])), "median_list_spearman": float(np.median(rho)),
              "max_mrr_drop": max_mrr_drop, "cpu": cpu_flags()}
    report["passed"] = report["mrr_fp32"] - report["mrr_int8"] <= max_mrr_drop
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m training.int8 requantize DIR`` / ``check DIR`` / ``gate FP32_DIR INT8_DIR --out F``."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m training.int8", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["requantize", "check", "gate"])
    p.add_argument("model_dir", type=Path, help="a model folder with model.onnx and config.json (gate: the fp32 one)")
    p.add_argument("int8_dir", type=Path, nargs="?", help="gate: the int8 export of the same checkpoint")
    p.add_argument("--out", type=Path, help="gate: write the report here (JSON)")
    a = p.parse_args(argv)
    if a.action == "gate":
        if a.int8_dir is None:
            p.error("gate needs FP32_DIR INT8_DIR")
        report = quality_gate(a.model_dir, a.int8_dir)
        text = json.dumps(report, indent=1)
        if a.out:
            a.out.write_text(text + "\n")
        print(text)
        return 0 if report["passed"] else 1
    path = a.model_dir / "model.onnx"
    if not path.exists():
        p.error(f"{path} does not exist")
    if a.action == "requantize":
        if max_matmul_weight(path) <= SAFE_WEIGHT_MAX:
            print(f"{path}: weights already within ±{SAFE_WEIGHT_MAX}; nothing to do")
            return 0
        tmp = path.with_suffix(".onnx.tmp")
        changed = requantize_7bit(path, tmp)
        tmp.replace(path)
        print(f"{path}: {changed} MatMul weights requantised to 7 bits")
    report = int8_check(path, _release_check_feeds(a.model_dir))
    print(json.dumps(report, indent=1))
    return 0 if report["max_abs_int_diff_vs_exact"] == 0 and report["max_matmul_weight"] <= SAFE_WEIGHT_MAX else 1


if __name__ == "__main__":
    raise SystemExit(main())
