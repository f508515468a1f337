"""Fake models for ``toolrank mcp --components gateway_fakes:components`` in the protocol tests.

The hashed bag-of-words encoder (tests/fakes.py), a scorer that says yes (0.95) when the request
contains every word of a tool's name and no (0.02) otherwise, the identity calibration, a proceed
threshold of 0.5, and the tiny four-server catalog as the public registry for no_fit suggestions.
So every decision in these tests is known in advance, and no model file is loaded.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/: fakes.py

from fakes import HashEncoder, logit, tiny_catalog  # noqa: E402

from retrieval.index.embedded import ToolIndex  # noqa: E402
from retrieval.index.text import split_identifier  # noqa: E402
from retrieval.pipeline.confidence import ConfidenceModel  # noqa: E402
from retrieval.pipeline.decision import Policy  # noqa: E402
from retrieval.pipeline.flow import Pipeline  # noqa: E402
from serve.mcp_gateway import Components  # noqa: E402

LOGIT = ConfidenceModel(("logit",), (1.0,), 0.0, (0.0,), (1.0,))   # p = sigmoid(logit)
YES, NO = 0.95, 0.02


class NameScorer:
    """P(yes) = 0.95 when every word of the tool's name is in the request (or need), else 0.02."""

    info = {"name": "name-scorer-test", "version": 1}
    path = None

    def logits(self, request, need, tools) -> np.ndarray:
        words = set(re.findall(r"[a-z0-9]+", f"{request} {need or ''}".lower()))
        return np.array([logit(YES) if set(split_identifier(t.name)) <= words else logit(NO) for t in tools])

    def score(self, request, need, tools) -> list[float]:
        z = self.logits(request, need, tools)
        return [float(1 / (1 + np.exp(-v))) for v in z]


def components() -> Components:
    encoder = HashEncoder()
    public = ToolIndex.build(tiny_catalog(), encoder=encoder)

    def make_pipeline(index: ToolIndex) -> Pipeline:
        return Pipeline(index, NameScorer(), confidence=LOGIT, policy=Policy(proceed_threshold=0.5),
                        public_index=public)

    return Components(encoder, make_pipeline, lambda path: ToolIndex.load(path, encoder=encoder), lambda: public)
