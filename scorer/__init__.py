"""Runtime cross-encoder scoring of candidate tools: record format, ONNX scorer, calibration.

Needs only onnxruntime, tokenizers and numpy at run time (no torch).
"""

from __future__ import annotations

from scorer.calibration import (
    Calibration,
    CalibrationError,
    expected_calibration_error,
    fit_platt,
    reliability_table,
    sigmoid,
)
from scorer.record import RECORD_FORMAT_VERSION, format_record, record_text
from scorer.reranker import ModelConfig, Scorer, ScorerLoadError, default_model_path

__all__ = [
    "Scorer",
    "ScorerLoadError",
    "ModelConfig",
    "default_model_path",
    "format_record",
    "record_text",
    "RECORD_FORMAT_VERSION",
    "Calibration",
    "CalibrationError",
    "fit_platt",
    "sigmoid",
    "expected_calibration_error",
    "reliability_table",
]
