"""The distillation loss over one teacher list, as a sentence-transformers cross-encoder loss.

A training row is a request with its candidates and the judge's P(yes) for each, laid out as the
library's list losses expect (``ListNetLoss``): ``(query, [doc1, ..., docN])`` with labels
``[p1, ..., pN]``. The loss of one list is

* binary cross-entropy of every candidate's logit to the teacher's P(yes), so the logit keeps an
  absolute meaning (a list where nothing fits must give low logits everywhere);
* plus ``listwise_weight`` times KL(teacher || student) between the teacher's P(yes) normalised over
  the list and the softmax of the logits (over ``temperature``), only on lists where something fits
  (a P(yes) of 0.5 or more): the order among look-alikes is what rank 1 needs.

A batch's loss is the mean over its lists. The logits come from :func:`pair_logits`: the pairs are
truncated on the tool side only (every candidate of a list sees the same request text) and run in
length-sorted micro-batches, so little of a step is padding.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["ListLoss", "pair_logits"]


def pair_logits(model: Any, tok: Any, pairs: Sequence[tuple[str, str]], max_length: int, micro: int) -> Tensor:
    """The 1-logit head's output for every (query, tool) pair, in order.

    Args:
        model: A transformers sequence-classification model with one label.
        tok: Its tokenizer.
        pairs: ``(query_text, tool_text)`` records.
        max_length: Tokens per pair; the tool side is cut, never the query.
        micro: Pairs per forward pass (sorted by length first, so a pass holds similar lengths).

    Returns:
        A 1-D tensor of ``len(pairs)`` logits (with gradients when the model is training).
    """
    enc = tok([q for q, _ in pairs], [d for _, d in pairs], truncation="only_second", max_length=max_length)
    lengths = [len(ids) for ids in enc["input_ids"]]
    order = sorted(range(len(pairs)), key=lambda i: lengths[i])
    device = next(model.parameters()).device
    parts, where = [], []
    for s in range(0, len(order), micro):
        idx = order[s:s + micro]
        batch = tok.pad({k: [enc[k][i] for i in idx] for k in enc.keys()}, return_tensors="pt")
        parts.append(model(**{k: v.to(device) for k, v in batch.items()}).logits.view(-1))
        where += idx
    logits = torch.cat(parts)
    inverse = torch.empty(len(where), dtype=torch.long)
    inverse[torch.tensor(where)] = torch.arange(len(where))
    return logits[inverse.to(logits.device)]


class ListLoss(nn.Module):
    """Pointwise BCE to the teacher's P(yes) plus a listwise KL term, mean over a batch of lists.

    Args:
        model: The :class:`~sentence_transformers.cross_encoder.CrossEncoder` being trained (one label).
        listwise_weight: Weight of the KL term (0 = pointwise only).
        temperature: Softmax temperature of the student's distribution in the KL term.
        max_length: Tokens per (query, tool) pair.
        micro_batch: Pairs per forward pass.

    After each call, ``last_loss`` holds the batch's loss and ``last_pairs`` its number of pairs
    (the trainer's callback reads them for the curve).
    """

    def __init__(self, model: Any, listwise_weight: float = 1.0, temperature: float = 1.0,
                 max_length: int = 96, micro_batch: int = 32) -> None:
        super().__init__()
        if model.num_labels != 1:
            raise ValueError(f"ListLoss needs a cross-encoder with 1 output label, got {model.num_labels}")
        if listwise_weight < 0 or temperature <= 0:
            raise ValueError(f"listwise_weight must be >= 0 and temperature > 0, got {listwise_weight} and {temperature}")
        self.model = model
        self.listwise_weight = listwise_weight
        self.temperature = temperature
        self.max_length = max_length
        self.micro_batch = micro_batch
        self.last_loss: float | None = None
        self.last_pairs = 0

    def list_term(self, logits: Tensor, targets: Tensor) -> Tensor:
        """The loss of one list: BCE to P(yes), plus the weighted KL where something fits."""
        loss = F.binary_cross_entropy_with_logits(logits, targets)
        total = targets.sum()
        if self.listwise_weight > 0 and float(targets.max()) >= 0.5 and total > 0:
            teacher = targets / total
            log_student = F.log_softmax(logits / self.temperature, dim=0)
            kl = torch.sum(teacher * (torch.log(teacher.clamp(min=1e-9)) - log_student))
            loss = loss + self.listwise_weight * kl
        return loss

    def from_logits(self, logits: Sequence[Tensor], targets: Sequence[Tensor]) -> Tensor:
        """Mean of :meth:`list_term` over lists (``logits[i]`` and ``targets[i]`` are one list's)."""
        if len(logits) != len(targets) or not logits:
            raise ValueError(f"need one target tensor per list, got {len(logits)} lists and {len(targets)} targets")
        return sum(self.list_term(z, t.to(z)) for z, t in zip(logits, targets)) / len(logits)

    def forward(self, inputs: list[Any], labels: list[Tensor], prompt: str | None = None,
                task: str | None = None) -> Tensor:
        """Loss of a batch ``[queries, docs_lists]`` with one label tensor per list."""
        if isinstance(labels, Tensor) or len(inputs) != 2:
            raise ValueError("ListLoss expects (queries, lists of tool texts) with a list of P(yes) per query")
        queries, docs_lists = inputs
        sizes = [len(docs) for docs in docs_lists]
        if sizes != [len(t) for t in labels]:
            raise ValueError(f"tool texts per list {sizes} do not match labels per list {[len(t) for t in labels]}")
        pairs = [(q, d) for q, docs in zip(queries, docs_lists) for d in docs]
        logits = pair_logits(self.model.model, self.model.tokenizer, pairs, self.max_length, self.micro_batch)
        loss = self.from_logits(torch.split(logits, sizes), [t.float() for t in labels])
        self.last_loss, self.last_pairs = float(loss.detach()), len(pairs)
        return loss

    def get_config_dict(self) -> dict[str, float]:
        return {"listwise_weight": self.listwise_weight, "temperature": self.temperature,
                "max_length": self.max_length, "micro_batch": self.micro_batch}
