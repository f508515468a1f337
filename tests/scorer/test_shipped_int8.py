"""The shipped int8 models give the same integer products on any x86 CPU.

Their MatMul weights sit in the 7-bit range (|w| <= 64), so the AVX2 kernel without VNNI
cannot saturate; and on this machine every integer product onnxruntime computes for real
dev requests equals the exact product (training/int8.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from scorer.locations import ENCODER, RERANKER, models_root  # noqa: E402
from training.int8 import SAFE_WEIGHT_MAX, _release_check_feeds, int8_check  # noqa: E402


@pytest.mark.parametrize("name", [RERANKER, ENCODER])
def test_shipped_model_integer_products_are_exact(name):
    folder = models_root() / name
    report = int8_check(folder / "model.onnx", _release_check_feeds(folder, n=8))
    assert report["max_matmul_weight"] <= SAFE_WEIGHT_MAX
    assert report["max_abs_int_diff_vs_exact"] == 0, report
