"""Fine-tune the cross-encoder: the documented entry point (``toolrank train``) of training/distill.py.

The shipped scorer is distilled from the LLM judge's teacher lists; this runs that, with every
option of ``python -m training.distill``::

    python -m training.train --teacher training/data/teacher/lists_*.jsonl \\
        --smithery ../shared/data/smithery/servers --pools runs/pools --out runs/ce-long --minutes 110

Export and calibration are separate steps (training/export.py, training/calibrate.py, or
training/release.sh for all of them). The 0.1.0 pointwise fine-tune on mined question pairs is
retired (git history before issue 37).
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from .distill import main as distill_main

    return distill_main(argv)


if __name__ == "__main__":
    sys.exit(main())
