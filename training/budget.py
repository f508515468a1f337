"""The trainer callback of a distillation run: its minute budget, its dev curve and its best checkpoint.

The run (:class:`training.distill.DistillRun`) measures and keeps; this callback decides when, from
the training time it counts (wall time less dev measurement and saving): every ``--eval-minutes``,
at the last step and when ``--minutes`` are spent, it calls ``run.checkpoint()`` (dev sets, a
``curve.jsonl`` row, ``best/`` when the dev score is the best so far) and has the trainer save a
resumable checkpoint beside which it writes the run's progress (``progress.json``); when
``--minutes`` are spent it stops the run.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

__all__ = ["BudgetCallback"]

log = logging.getLogger("toolrank.distill")


class BudgetCallback(TrainerCallback):
    """Minute budget, dev curve and checkpoints for a ``DistillRun``.

    Args:
        run: Holds ``args`` (``minutes``, ``eval_minutes``), ``progress`` (the counters saved with a
            checkpoint), ``loss`` (its ``last_loss`` and ``last_pairs``), ``devs``, ``resumed``,
            ``start_step``, ``steps``, ``budget`` (seconds) and ``checkpoint()``.
    """

    def __init__(self, run: Any):
        self.run = run
        self.mark = time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.run.resumed and self.run.devs:
            self.run.checkpoint()          # the start, so the curve begins at step 0
        self.mark = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        run, progress = self.run, self.run.progress
        progress["train_seconds"] += time.time() - self.mark
        progress["step"] = run.start_step + state.global_step
        progress["pairs"] += run.loss.last_pairs
        if run.loss.last_loss is not None:
            last = run.loss.last_loss
            progress["running"] = last if progress["running"] is None else 0.98 * progress["running"] + 0.02 * last
        if state.global_step % 50 == 1:
            log.info("step %d/%d loss %.4f pairs %d (%.1f pairs/s)", progress["step"], run.steps, progress["running"],
                     progress["pairs"], progress["pairs"] / max(1e-9, progress["train_seconds"]))
        spent = progress["train_seconds"] >= run.budget
        if spent:
            log.info("time budget of %.1f minutes spent at step %d", run.args.minutes, progress["step"])
            control.should_training_stop = True
        due = progress["train_seconds"] - progress.get("last_eval_train_seconds", 0.0) >= run.args.eval_minutes * 60
        if due or spent or state.global_step >= state.max_steps:
            run.checkpoint()
            control.should_save = True
        self.mark = time.time()

    def on_save(self, args, state, control, **kwargs):
        """The run's progress beside the checkpoint the trainer just saved (written aside, then renamed),
        then the older checkpoints removed: whenever the run is killed, one checkpoint with its
        ``progress.json`` is on disk (the trainer's own ``save_total_limit`` would delete the older one
        before this one has its progress)."""
        root = Path(args.output_dir)
        folder = root / f"checkpoint-{state.global_step}"
        tmp = folder / "progress.json.tmp"
        tmp.write_text(json.dumps(self.run.progress))
        tmp.replace(folder / "progress.json")
        for older in root.glob("checkpoint-*"):
            if older != folder and older.is_dir():
                shutil.rmtree(older, ignore_errors=True)
        self.mark = time.time()
