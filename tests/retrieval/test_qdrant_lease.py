"""The Qdrant backend's write lease: renewal while a write runs, and the two conflict paths (our lease
expired and another writer took the lock; another writer committed while our lease had expired).
Nothing of a write that lost its lease is published. Embedded local mode (``:memory:``); the other
lock cases (a crashed writer's lock taken over, a live lock waited on) are in test_qdrant_index.py."""

from __future__ import annotations

import uuid

import pytest

from fakes import HashEncoder, tiny_catalog
from retrieval.catalog.model import Tool
from retrieval.index.qdrant.collection import QdrantCollection
from retrieval.index.qdrant.index import QdrantToolIndex
from retrieval.index.qdrant.schema import HEAD_ID, LOCK_ID, QdrantConfig, QdrantWriteConflict
from qdrant_client import models


def build(**config) -> QdrantToolIndex:
    cfg = QdrantConfig(path=":memory:", collection=f"toolrank-lease-{uuid.uuid4().hex[:12]}", **config)
    return QdrantToolIndex.build(tiny_catalog(), config=cfg, encoder=HashEncoder())


def lock_of(coll: QdrantCollection) -> dict:
    return dict(coll.client.retrieve(coll.name, [LOCK_ID], with_payload=True)[0].payload)


def set_lock(coll: QdrantCollection, **payload) -> None:
    coll.client.upsert(coll.name, points=[models.PointStruct(id=LOCK_ID, vector={}, payload={"kind": "lock", **payload})])


def during_the_next_batch(monkeypatch, coll: QdrantCollection, act, after=lambda lease: None) -> list:
    """Run ``act(lease)`` just before the next write's first batch of points (which renews the lease
    when it is due) and ``after(lease)`` once that batch is written; returns the leases seen."""
    seen = []
    upsert = QdrantCollection.upsert

    def hooked(self, points, lease=None):
        if lease is None or seen:
            return upsert(self, points, lease)
        seen.append(lease)
        act(lease)
        upsert(self, points, lease)
        after(lease)

    monkeypatch.setattr(QdrantCollection, "upsert", hooked)
    return seen


def test_a_long_write_renews_its_lease(monkeypatch):
    index = build()
    coll = index.collection

    def almost_expired(lease):
        set_lock(coll, holder=lease.token, expires=1.0)     # as if the lease were about to run out ...
        lease._renewed = float("-inf")                      # ... and a third of it had passed

    during_write = []
    seen = during_the_next_batch(monkeypatch, coll, almost_expired, lambda lease: during_write.append(lock_of(coll)))
    index.upsert_server("Jira", "Tickets", [Tool("", "create_ticket", "Create a ticket")])
    assert seen and index.version == 2 and "Jira" in index.catalog.servers
    assert during_write[0]["holder"] == seen[0].token and during_write[0]["expires"] > 1.0   # renewed, still ours
    assert lock_of(coll)["holder"] == ""                    # released at the end


def test_renewal_extends_the_expiry_only_when_a_third_of_the_lease_has_passed():
    coll = build(lock_lease_s=30.0).collection
    with coll.writing() as lease:
        set_lock(coll, holder=lease.token, expires=1.0)
        lease.renew()                                       # just taken: nothing to renew yet
        assert lock_of(coll)["expires"] == 1.0
        lease._renewed = float("-inf")
        lease.renew()
        renewed = lock_of(coll)
        assert renewed["holder"] == lease.token and renewed["expires"] > 1.0
    assert lock_of(coll)["holder"] == ""


def test_a_write_whose_lock_was_taken_publishes_nothing_and_leaves_the_lock_alone(monkeypatch):
    index = build()
    coll = index.collection
    other = QdrantToolIndex.open(coll, encoder=index.encoder)

    def taken_over(lease):                                   # our lease ran out; another writer took the lock
        set_lock(coll, holder="another-writer", expires=4e9)
        lease._renewed = float("-inf")

    seen = during_the_next_batch(monkeypatch, coll, taken_over)
    with pytest.raises(QdrantWriteConflict, match="expired and was taken by another writer"):
        index.upsert_server("Jira", "Tickets", [Tool("", "create_ticket", "Create a ticket")])
    assert seen and seen[0].lost is not None
    assert index.version == 1 and "Jira" not in index.catalog.servers
    assert not other.refresh() and other.version == 1 and "Jira" not in other.catalog.servers
    assert lock_of(coll)["holder"] == "another-writer"       # never released on the other writer's behalf


def test_a_commit_by_another_writer_while_our_lease_had_expired_is_a_conflict(monkeypatch):
    index = build()
    coll = index.collection

    def commit_by_another(lease):                            # someone else commits version 2 under our feet
        head = dict(coll.client.retrieve(coll.name, [HEAD_ID], with_payload=True)[0].payload)
        coll.client.upsert(coll.name, points=[models.PointStruct(id=HEAD_ID, vector={}, payload={
            **head, "version": int(head["version"]) + 1, "writer": "another-writer"})])

    during_the_next_batch(monkeypatch, coll, commit_by_another)
    with pytest.raises(QdrantWriteConflict, match="another writer committed version 2"):
        index.upsert_server("Jira", "Tickets", [Tool("", "create_ticket", "Create a ticket")])
    assert index.version == 1 and "Jira" not in index.catalog.servers   # our state never moved on
    head = coll.head()
    assert head["version"] == 2 and head["writer"] == "another-writer"  # theirs stands, ours was not written over
    assert lock_of(coll)["holder"] == ""                                 # ours, released
