"""The shipped data: consistent with the catalog and itself, loadable with ``datasets``, counted in the card."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections import Counter

import pytest

from retrieval.catalog.model import Catalog, Tool, ToolId
from training import dataset


@pytest.fixture(scope="module")
def shipped():
    return {
        "catalog": dataset.load_shipped_catalog(),
        "splits": dataset.load_splits(),
        "questions": dataset.load_questions(),
        "judgments": dataset.load_judgments(),
    }


def test_shipped_data_validates():
    assert dataset.validate() == []


def test_split_names_exactly_the_catalogs_servers(shipped):
    assert set(shipped["splits"]) == set(shipped["catalog"].servers)
    assert set(shipped["splits"].values()) == set(dataset.SPLITS)


def test_every_reference_exists_in_the_catalog(shipped):
    cat = shipped["catalog"]
    refs = [ToolId(q["server"], q["tool"]) for q in shipped["questions"]]
    refs += [ToolId(a["server"], a["tool"]) for q in shipped["questions"] for a in q.get("acceptable") or ()]
    refs += [ToolId(j["server"], j["tool"]) for j in shipped["judgments"]]
    missing = [r for r in refs if r not in cat]
    assert missing == []


def test_ids_are_unique(shipped):
    ids = Counter(q["id"] for q in shipped["questions"])
    assert [i for i, n in ids.items() if n > 1] == []
    pairs = Counter((j["qid"], j["server"], j["tool"]) for j in shipped["judgments"])
    assert [p for p, n in pairs.items() if n > 1] == []


def test_training_material_sits_on_train_servers(shipped):
    splits = shipped["splits"]
    by_id = {q["id"]: q for q in shipped["questions"]}
    for q in shipped["questions"]:
        assert q["split"] == splits[q["server"]], q["id"]
    assert {splits[j["server"]] for j in shipped["judgments"]} == {"train"}
    assert {by_id[j["qid"]]["split"] for j in shipped["judgments"]} == {"train"}


def test_dev_and_test_questions_carry_existing_acceptable_tools(shipped):
    cat = shipped["catalog"]
    for q in shipped["questions"]:
        if q["split"] == "train":
            assert "acceptable" not in q
        else:
            assert isinstance(q["acceptable"], list)
            assert all(ToolId(a["server"], a["tool"]) in cat for a in q["acceptable"])


def test_counts_match_the_sources(shipped):
    stats = dataset.summary()
    assert stats["servers"] == {"train": 200, "dev": 33, "test": 75}
    assert stats["tools"] == {"train": 1971, "dev": 270, "test": 556}
    assert stats["questions"]["total"] == 7013 and stats["questions"]["by_split"]["train"] == 5913
    assert stats["judgments"]["pairs"] == 10195 and stats["judgments"]["questions"] == 800
    assert set(stats["judgments"]["by_style"].values()) == {160}


def test_card_counts_are_computed_from_the_files():
    assert dataset.card_counts() == dataset.render_counts(dataset.summary()).strip(), \
        "the card's counts drifted from the data: run `python -m training.dataset card`"


# ---------------------------------------------------------------- datasets


def test_questions_and_judgments_load_as_datasets(shipped):
    dd = dataset.questions_dataset_dict()
    assert {s: dd[s].num_rows for s in dataset.SPLITS} == {"train": 5913, "dev": 400, "test": 700}
    assert "acceptable" not in dd["train"].column_names
    dev = dd["dev"]
    assert dev.features["acceptable"].feature["server"].dtype == "string"
    first_dev = next(q for q in shipped["questions"] if q["split"] == "dev")
    assert dev[0] == first_dev
    judged = dataset.judgments_dataset()
    assert judged.num_rows == 10195 and judged.features["p_yes"].dtype == "float64"
    assert dataset.questions_dataset().num_rows == 7013


def test_files_load_with_load_dataset_json_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    questions = datasets.load_dataset("json", data_files=str(dataset.questions_path()),
                                      cache_dir=str(tmp_path), split="train")
    judgments = datasets.load_dataset("json", data_files=str(dataset.judgments_path()),
                                      cache_dir=str(tmp_path), split="train")
    assert questions.num_rows == 7013 and judgments.num_rows == 10195
    assert sum(a is None for a in questions["acceptable"]) == 5913


def test_import_training_is_light():
    code = "import sys, training, training.dataset, training.generate; " \
           "print(sorted(m for m in ('torch', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- validate() finds each kind of problem


def tiny():
    cat = Catalog([Tool("A", "a1"), Tool("A", "a2"), Tool("B", "b1"), Tool("C", "c1")])
    splits = {"A": "train", "B": "dev", "C": "test"}
    questions = [
        {"id": "t1", "split": "train", "style": "goal", "query": "q", "need": "n", "server": "A", "tool": "a1"},
        {"id": "d1", "split": "dev", "style": "function", "query": "q", "need": "n", "server": "B", "tool": "b1",
         "acceptable": [{"server": "A", "tool": "a2"}]},
        {"id": "s1", "split": "test", "style": "problem", "query": "q", "need": "n", "server": "C",
         "tool": "c1", "acceptable": []},
    ]
    judgments = [{"qid": "t1", "server": "A", "tool": "a1", "p_yes": 0.9},
                 {"qid": "t1", "server": "A", "tool": "a2", "p_yes": 0.05}]
    examples = {t.id: [f"{t.name} {i}" for i in range(5)] for t in cat}
    return dict(catalog=cat, splits=splits, questions=questions, judgments=judgments, examples=examples)


def test_tiny_data_is_valid():
    assert dataset.validate(**tiny()) == []


def _broken(change):
    data = copy.deepcopy({k: v for k, v in tiny().items() if k != "catalog"})
    data["catalog"] = tiny()["catalog"]
    change(data)
    return dataset.validate(**data)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["splits"].pop("C"), "catalog server 'C' has no split"),
    (lambda d: d["splits"].update(Z="train"), "server 'Z', which is not in the catalog"),
    (lambda d: d["splits"].update(A="holdout"), "split 'holdout'"),
    (lambda d: d["questions"].append(dict(d["questions"][0])), "id repeats"),
    (lambda d: d["questions"][0].update(tool="a9"), r"tool A / a9 is not in the catalog"),
    (lambda d: d["questions"][0].update(split="dev"), "split 'dev' but its server 'A' is in 'train'"),
    (lambda d: d["questions"][0].update(style="poem"), "style 'poem'"),
    (lambda d: d["questions"][0].update(need=" "), "empty or missing 'need'"),
    (lambda d: d["questions"][0].update(acceptable=[]), "train question carries 'acceptable'"),
    (lambda d: d["questions"][1].pop("acceptable"), "dev question lacks an 'acceptable' list"),
    (lambda d: d["questions"][1].update(acceptable=[{"server": "A", "tool": "zz"}]),
     r"acceptable tool A / zz is not in the catalog"),
    (lambda d: d["judgments"].append({"qid": "t1", "server": "B", "tool": "b1", "p_yes": 0.0}),
     "candidate sits on a 'dev' server"),
    (lambda d: d["judgments"].append({"qid": "d1", "server": "A", "tool": "a1", "p_yes": 0.0}),
     "judges a 'dev' question"),
    (lambda d: d["judgments"].append({"qid": "nope", "server": "A", "tool": "a1", "p_yes": 0.0}),
     "no question with that id"),
    (lambda d: d["judgments"].append({"qid": "t1", "server": "A", "tool": "a9", "p_yes": 0.0}),
     "candidate is not in the catalog"),
    (lambda d: d["judgments"].append(dict(d["judgments"][0])), "pair repeats"),
    (lambda d: d["judgments"][0].update(p_yes=1.5), "p_yes 1.5 is not a number in"),
    (lambda d: d["examples"].pop(ToolId("C", "c1")), r"C / c1 has no example requests"),
    (lambda d: d["examples"].update({ToolId("C", "c9"): list("abcde")}), r"examples for C / c9"),
    (lambda d: d["examples"].update({ToolId("C", "c1"): ["x"] * 5}), "1 distinct non-empty"),
])
def test_validate_reports(change, message):
    problems = _broken(change)
    assert any(re.search(message, p) for p in problems), problems


def test_validate_caps_repeated_problems():
    def many(d):
        d["judgments"].extend({"qid": "t1", "server": "A", "tool": f"x{i}", "p_yes": 0.0} for i in range(9))
    problems = _broken(many)
    assert len(problems) == 6 and "4 more problems of kind 'judgment-tool'" in problems[-1]


def test_load_questions_rejects_unknown_split():
    with pytest.raises(ValueError, match="split 'val' is not one of train, dev, test"):
        dataset.load_questions(split="val")
