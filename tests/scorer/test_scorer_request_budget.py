"""The request's own token budget (RequestFitter) and batch-independent scores on the shipped model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from tokenizers import Tokenizer

from scorer import Scorer
from scorer.record import ELLIPSIS, RequestFitter, format_record
from scorer.reranker import default_model_path

LONG = ("We moved our app backend onto a serverless Postgres host last month and the old BI dashboards are gone "
        "since then. Marketing keeps asking, every Monday, for the weekly signup numbers by country and plan. "
        "Can you run a query that counts signups per country for the last seven days?")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(default_model_path() / "tokenizer.json"))


def n_tokens(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("cut", ["head_tail", "end", "start"])
def test_query_side_fits_its_budget(tokenizer, cut):
    fitter = RequestFitter(tokenizer, 32, cut)
    request, need = fitter.fit(LONG, "run sql")
    query, _ = format_record(request, need, SimpleNamespace(server="s", name="t", description="d"))
    assert n_tokens(tokenizer, query) <= 32
    assert ELLIPSIS in request


def test_head_tail_keeps_the_ask_at_the_end(tokenizer):
    request, _ = RequestFitter(tokenizer, 32, "head_tail").fit(LONG, None)
    assert request.startswith("We moved")
    assert request.endswith("for the last seven days?")
    start, _ = RequestFitter(tokenizer, 32, "start").fit(LONG, None)
    assert not start.endswith("seven days?")


def test_a_short_request_is_untouched(tokenizer):
    assert RequestFitter(tokenizer, 48).fit("list my open pull requests", None) == ("list my open pull requests", None)


def test_bad_budget_and_cut_are_refused(tokenizer):
    with pytest.raises(ValueError, match="budget"):
        RequestFitter(tokenizer, 8)
    with pytest.raises(ValueError, match="cut"):
        RequestFitter(tokenizer, 32, "middle")


@pytest.fixture(scope="module")
def shipped() -> Scorer:
    return Scorer.load(default_model_path(), threads=1)


def _tools(n: int, description: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(server="Dummy", name=f"tool_{i}", description=description, examples=()) for i in range(n)]


def test_a_pairs_score_does_not_depend_on_its_batch(shipped):
    """Dynamic int8 scales activations per batch: each pair is its own batch, so its logit is the same
    alone, beside short dummies and beside long ones (0.2.0 moved 0.694 -> 0.668 -> 0.684)."""
    tool = SimpleNamespace(server="GitHub", name="create_issue", description="Create a new issue in a repository",
                           examples=())
    request = "open a bug about the login page in our repo"
    alone = shipped.logits(request, None, [tool])[0]
    short = shipped.logits(request, None, [tool] + _tools(31, "x"))[0]
    long = shipped.logits(request, None, [tool] + _tools(31, "a very long description " * 20))[0]
    fresh = Scorer.load(default_model_path(), threads=1, cache_size=0)   # no cache: really recomputed
    recomputed = fresh.logits(request, None, _tools(31, "a very long description " * 20) + [tool])[-1]
    assert alone == short == long == recomputed


def test_larger_batches_are_still_possible(shipped):
    batched = Scorer.load(default_model_path(), threads=1, batch_size=16)
    tools = _tools(8, "lists things")
    z = batched.logits("list things", None, tools)
    assert z.shape == (8,) and np.all(np.isfinite(z))
