"""Day-one lists from labelled requests: which candidates a list gets and how they are labelled."""

from __future__ import annotations

from training.question_lists import candidates_for


def test_labelled_tool_first_then_hard_then_deep_negatives():
    hits = [("S", f"t{i}") for i in range(100)]
    cands = candidates_for(("S", "t3"), hits, {}, hard=4, deep=2, seed="x")
    assert cands[0] == {"server": "S", "tool": "t3", "p_yes": 1.0}
    assert [c["tool"] for c in cands[1:5]] == ["t0", "t1", "t2", "t4"]     # the hybrid's next four, target skipped
    deep = [int(c["tool"][1:]) for c in cands[5:]]
    assert len(deep) == 2 and all(d >= 20 for d in deep)                  # from ranks 21-100
    assert all(c["p_yes"] == 0.0 for c in cands[1:])
    assert cands == candidates_for(("S", "t3"), hits, {}, hard=4, deep=2, seed="x")   # seeded


def test_judged_candidates_keep_the_judges_label_and_mirrors_are_left_out():
    hits = [("A", "send"), ("B", "send"), ("A", "list"), ("C", "post")]
    cands = candidates_for(("A", "send"), hits, {("C", "post"): 0.8}, hard=5, deep=0, seed="x")
    assert [(c["server"], c["tool"], c["p_yes"]) for c in cands] == [
        ("A", "send", 1.0), ("A", "list", 0.0), ("C", "post", 0.8)]       # B / send (a mirror) is not a negative
