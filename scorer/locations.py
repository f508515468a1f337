"""Where the released model folders are: ``$TOOLRANK_MODELS``, else the installed package's copy.

A checkout and an editable install read ``models/`` in the repository; a wheel install reads the
copy shipped as the ``toolrank_models`` package. ``TOOLRANK_MODELS`` names a folder holding
``toolrank-reranker/`` and ``toolrank-encoder/`` (for example a newer release, unpacked).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV_MODELS", "models_root", "RERANKER", "ENCODER"]

ENV_MODELS = "TOOLRANK_MODELS"
RERANKER = "toolrank-reranker"
ENCODER = "toolrank-encoder"


def models_root() -> Path:
    env = os.environ.get(ENV_MODELS, "").strip()
    if env:
        return Path(env).expanduser()
    try:
        import toolrank_models
        return Path(toolrank_models.__file__).resolve().parent
    except ImportError:  # running from a checkout that is not installed
        return Path(__file__).resolve().parents[1] / "models"
