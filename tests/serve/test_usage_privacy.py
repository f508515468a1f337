"""Learning from use keeps little, forgets on request, and credits a request once (issue 36)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from retrieval.redaction import MASK, redact_secrets
from serve.usage import UsageBook, tenant_folder


@pytest.mark.parametrize("text, secret", [
    ("log into the vpn with password=hunter2", "hunter2"),
    ("my password is Tr0ub4dor&3 please reset it", "Tr0ub4dor&3"),
    ("charge it with api key sk-live-abcdefghijklmnop1234", "sk-live-abcdefghijklmnop1234"),
    ("call it with Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJhbGciOiJIUzI1NiJ9"),
    ("dump the tables of postgres://admin:s3cretpw@db.local/prod", "s3cretpw"),
    ("fetch https://api.example.com/v1/items?api_key=abc123xyz&q=1", "abc123xyz"),
    ("push with token ghp_abcdefghijklmnopqrstuvwxyz123456", "ghp_abcdefghijklmnopqrstuvwxyz123456"),
    ("aws creds AKIAABCDEFGHIJKLMNOP for the bucket", "AKIAABCDEFGHIJKLMNOP"),
])
def test_obvious_secrets_are_masked(text, secret):
    out = redact_secrets(text)
    assert secret not in out and MASK in out


@pytest.mark.parametrize("text", [
    "send a password reset link to bob@example.com",
    "what is my token usage this month",
    "create issue PROJ-1234 about the login page",
    "pin the message in #general",
    "rotate the api key for the staging project",
])
def test_ordinary_requests_survive(text):
    assert redact_secrets(text) == text


def _taught(book: UsageBook, tenant: str, rid: str, request: str, tool=("GitHub", "create_issue")):
    book.offered(tenant, rid, request, None, [tool, ("GitHub", "list_issues")])
    return book.feedback(tenant, book.offer(tenant, rid), rid, tool, True)


def _all_text(folder: Path) -> str:
    """Every byte under ``folder`` (the offers database included), as text."""
    return "\n".join(p.read_bytes().decode("utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())


def test_a_secret_in_a_request_never_reaches_the_disk(tmp_path):
    book = UsageBook(tmp_path / "usage")
    _taught(book, "alice", "r1", "open an issue: login fails with password=hunter2 on staging")
    text = _all_text(tmp_path / "usage")
    assert "hunter2" not in text and "login fails" in text


def test_a_replayed_request_id_teaches_once(tmp_path):
    book = UsageBook(tmp_path / "usage")
    first = _taught(book, "alice", "r1", "file a bug about the broken login")
    again = book.feedback("alice", book.offer("alice", "r1"), "r1", ("GitHub", "create_issue"), True)
    assert first.learned and not again.learned and "already" in again.reason
    learned = book.learned("alice")
    assert [e.uses for e in learned[("GitHub", "create_issue")]] == [1]
    assert len(book.tenant("alice").events()) == 2     # recorded both times


def test_one_tenants_searches_never_evict_anothers_offers(tmp_path):
    book = UsageBook(tmp_path / "usage", offers=10)
    book.offered("bob", "b1", "list my issues", None, [("GitHub", "list_issues")])
    for i in range(50):
        book.offered("alice", f"a{i}", "anything", None, [("GitHub", "list_issues")])
    assert book.offer("bob", "b1") is not None
    assert book.offer("alice", "a0") is None and book.offer("alice", "a49") is not None


def test_delete_leaves_no_copy_of_the_text_on_disk(tmp_path):
    book = UsageBook(tmp_path / "usage")
    secret_ish = "reopen the ticket about the quarterly zebra migration"
    _taught(book, "alice", "r1", secret_ish)
    _taught(book, "alice", "r2", "label the flaky ci issue as infra")
    _taught(book, "alice", "r3", "close the stale dependabot issues", tool=("GitHub", "list_issues"))
    folder = tmp_path / "usage"            # the tenant's folder and the shared offers ledger
    assert secret_ish in _all_text(folder)
    assert book.remove("alice", ("GitHub", "create_issue"), secret_ish) == 1
    text = _all_text(folder)
    assert secret_ish not in text                       # not in any kept version, not in the log
    assert "label the flaky ci issue" in text           # the rest is kept
    assert book.remove("alice") == 2
    text = _all_text(folder)
    assert "flaky" not in text and "dependabot" not in text


def test_the_feedback_log_is_bounded(tmp_path):
    book = UsageBook(tmp_path / "usage", feedback_max_bytes=4000)
    for i in range(200):
        book.offered("alice", f"r{i}", f"request number {i} " + "x" * 100, None, [("GitHub", "list_issues")])
        book.feedback("alice", book.offer("alice", f"r{i}"), f"r{i}", ("GitHub", "list_issues"), False, error="boom")
    folder = tmp_path / "usage" / tenant_folder("alice")
    total = sum(p.stat().st_size for p in folder.glob("feedback.jsonl*"))
    assert total <= 2 * 4000 + 1000
    events = book.tenant("alice").events()
    assert events and events[-1]["request"].startswith("request number 199")
    assert oct(os.stat(folder / "feedback.jsonl.1").st_mode & 0o777) == "0o600"


def test_the_feedback_log_drops_old_events_as_it_rotates(tmp_path, monkeypatch):
    import time

    book = UsageBook(tmp_path / "usage", feedback_max_bytes=2000, feedback_keep_days=1)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3 * 86400)
    book.offered("alice", "old", "an old request", None, [("GitHub", "list_issues")])
    book.feedback("alice", book.offer("alice", "old"), "old", ("GitHub", "list_issues"), False)
    monkeypatch.setattr(time, "time", real)
    for i in range(40):
        book.offered("alice", f"r{i}", f"request {i} " + "y" * 60, None, [("GitHub", "list_issues")])
        book.feedback("alice", book.offer("alice", f"r{i}"), f"r{i}", ("GitHub", "list_issues"), False)
    assert all(e["request"] != "an old request" for e in book.tenant("alice").events())


def test_a_book_without_a_store_leaves_nothing_behind():
    book = UsageBook()
    root = book.root
    _taught(book, "alice", "r1", "file a bug about the login page")
    assert root.exists()
    del book
    import gc

    gc.collect()
    assert not root.exists()


def _offer_many(root: str, n: int) -> None:
    book = UsageBook(root)
    for i in range(n):
        book.offered("alice", f"r{i}", f"search number {i} for the issue tracker", None,
                     [("GitHub", "create_issue"), ("GitHub", "list_issues")])


def test_feedback_reaches_any_worker_and_credits_once(tmp_path):
    """Two processes on one store, as two uvicorn workers: the searches answered by one, the feedback sent
    to the other; none is lost, and a replay through the first worker does not learn again."""
    import multiprocessing

    root = str(tmp_path / "usage")
    proc = multiprocessing.get_context("spawn").Process(target=_offer_many, args=(root, 100))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    worker_b, worker_a = UsageBook(root), UsageBook(root)
    outcomes = []
    for i in range(100):
        offer = worker_b.offer("alice", f"r{i}")
        assert offer is not None, f"feedback {i} lost"
        outcomes.append(worker_b.feedback("alice", offer, f"r{i}", ("GitHub", "create_issue"), True).learned)
    assert all(outcomes)
    again = worker_a.feedback("alice", worker_a.offer("alice", "r7"), "r7", ("GitHub", "create_issue"), True)
    assert not again.learned
    assert worker_a.offer("bob", "r7") is None          # another tenant's request id is not yours


def test_a_read_only_service_keeps_its_offers_in_memory_and_refuses_feedback(tmp_path):
    from serve.index_store import ReadOnlyStoreError

    root = tmp_path / "replica" / "usage"
    book = UsageBook(root, read_only=True)
    book.offered("alice", "r1", "list my issues", None, [("GitHub", "list_issues")])
    assert book.offer("alice", "r1") is not None
    assert not root.exists()                             # nothing written into the store it serves
    with pytest.raises(ReadOnlyStoreError):
        book.feedback("alice", book.offer("alice", "r1"), "r1", ("GitHub", "list_issues"), True)
