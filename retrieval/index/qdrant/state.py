"""The tool table a replica holds: every owner's tools at one catalog version (:class:`State`,
immutable once made), the catalog one tenant sees in it (:class:`View`: its eligibility, BM25
statistics and payload filter), and reading a version from the collection, whole or as the
changes since the replica's own (:func:`load_state`)."""

from __future__ import annotations

import bisect
import json
import threading
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from qdrant_client import models

from retrieval.catalog.eligibility import Eligibility
from retrieval.catalog.model import Catalog, Tool

from .collection import QdrantCollection
from .schema import DENSE, LIVE, NAMESPACE, PUBLIC, SPARSE, in_range, is_any, is_value, term_index

__all__ = ["Vocab", "Entry", "State", "View", "tool_point", "load_state"]

# ---------------------------------------------------------------------------------- the tool table


class Vocab:
    """Term -> local id (append-only, shared by every state of a process; ids never leave it)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, term: str) -> int | None:
        return self._ids.get(term)

    def ids(self, terms: Iterable[str]) -> np.ndarray:
        out = []
        with self._lock:
            for t in terms:
                i = self._ids.get(t)
                if i is None:
                    i = self._ids[t] = len(self._ids)
                out.append(i)
        return np.asarray(out, dtype=np.int32)


@dataclass(frozen=True)
class Entry:
    """One live tool point as a replica holds it."""

    tool: Tool
    owner: str
    point: str
    terms: np.ndarray        # local ids of the document's distinct terms
    v_from: int
    seq: int


def _order_key(entries: Sequence[Entry]) -> tuple[int, int]:
    return min((e.v_from, e.seq) for e in entries)


class State:
    """Every owner's tools at one catalog version (immutable once made)."""

    def __init__(self, version: int, oldest: int, vocab: Vocab, servers: dict[tuple[str, str], tuple[Entry, ...]],
                 order: list[tuple[int, int, str, str]], df: dict[str, np.ndarray], counts: dict[str, int]):
        self.version = version
        self.oldest = oldest
        self.vocab = vocab
        self.servers = servers      # (owner, server) -> entries in (v_from, seq) order
        self.order = order          # sorted (v_from, seq, owner, server) of each server's first entry
        self.df = df                # owner -> document frequency per local term id
        self.counts = counts        # owner -> tools
        self.hidden: frozenset[str] = frozenset()   # points closed at or before this version, not yet deleted
        self._views: dict[str | None, View] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_entries(cls, version: int, oldest: int, vocab: Vocab, entries: Iterable[Entry]) -> "State":
        groups: dict[tuple[str, str], list[Entry]] = {}
        for e in entries:
            groups.setdefault((e.owner, e.tool.server), []).append(e)
        empty = cls(version, oldest, vocab, {}, [], {}, {})
        return empty.changed(version, oldest, added=[e for g in groups.values() for e in g], removed=[])

    def changed(self, version: int, oldest: int, added: Sequence[Entry], removed: Sequence[Entry]) -> "State":
        """A new state: this one with ``removed`` entries gone and ``added`` ones in (only their servers are touched)."""
        servers = dict(self.servers)
        order = list(self.order)
        df = dict(self.df)
        counts = dict(self.counts)
        size = len(self.vocab)
        touched_owners = {e.owner for e in added} | {e.owner for e in removed}
        for owner in touched_owners:
            old = df.get(owner)
            new = np.zeros(size, dtype=np.int32)
            if old is not None:
                new[:len(old)] = old
            df[owner] = new
        gone_points = {e.point for e in removed}
        touched: dict[tuple[str, str], list[Entry]] = {}
        for e in removed:
            key = (e.owner, e.tool.server)
            if key not in touched:
                touched[key] = list(servers.get(key, ()))
        for e in added:
            key = (e.owner, e.tool.server)
            if key not in touched:
                touched[key] = list(servers.get(key, ()))
        for key, current in touched.items():
            if key in servers and servers[key]:
                v, s = _order_key(servers[key])
                i = bisect.bisect_left(order, (v, s, key[0], key[1]))
                if i < len(order) and order[i] == (v, s, key[0], key[1]):
                    order.pop(i)
            kept = [e for e in current if e.point not in gone_points]
            for e in current:
                if e.point in gone_points:
                    df[e.owner][e.terms] -= 1
                    counts[e.owner] = counts.get(e.owner, 0) - 1
            touched[key] = kept
        for e in added:
            key = (e.owner, e.tool.server)
            touched[key].append(e)
            df[e.owner][e.terms] += 1
            counts[e.owner] = counts.get(e.owner, 0) + 1
        for key, entries in touched.items():
            if entries:
                entries.sort(key=lambda e: (e.v_from, e.seq))
                servers[key] = tuple(entries)
                v, s = _order_key(entries)
                bisect.insort(order, (v, s, key[0], key[1]))
            else:
                servers.pop(key, None)
        return State(version, oldest, self.vocab, servers, order, df, counts)

    def view(self, owner: str | None) -> "View":
        with self._lock:
            found = self._views.get(owner)
            if found is None:
                found = self._views[owner] = View(self, owner)
            return found

    def entries_of(self, owner: str, server: str) -> tuple[Entry, ...]:
        return self.servers.get((owner, server), ())

    def with_hidden(self, head: dict[str, Any]) -> "State":
        """This state, knowing from ``head`` which closed points it must exclude by id."""
        closed = head.get("closed") or {}
        self.hidden = frozenset(pid for v, ids in closed.items() if int(v) <= self.version for pid in ids)
        return self


class View:
    """The catalog one tenant sees at one version (``owner=None``: the shared servers only)."""

    def __init__(self, state: State, owner: str | None):
        self.state = state
        self.owner = owner
        self.version = state.version
        own = {s for (o, s) in state.servers if owner is not None and o == owner}
        self.shadowed = frozenset(s for s in own if (PUBLIC, s) in state.servers)
        entries: list[Entry] = []
        for _, _, o, s in state.order:
            if o == owner or (o == PUBLIC and s not in self.shadowed):
                entries.extend(state.servers[(o, s)])
        self.entries = entries
        self.catalog = Catalog([e.tool for e in entries],
                               {e.tool.server: e.tool.server_description for e in entries})
        self.point_row = {e.point: i for i, e in enumerate(entries)}
        self.row_of_tool = {e.tool.id: i for i, e in enumerate(entries)}
        self.rows_of_server: dict[str, list[int]] = {}
        for i, e in enumerate(entries):
            self.rows_of_server.setdefault(e.tool.server, []).append(i)
        size = len(state.vocab)
        df = np.zeros(size, dtype=np.int64)
        for o in {PUBLIC, owner} - {None}:
            arr = state.df.get(o)
            if arr is not None:
                df[:len(arr)] += arr
        for s in self.shadowed:
            for e in state.servers[(PUBLIC, s)]:
                df[e.terms] -= 1
        self.df = df
        self.n = len(entries)
        self._stats: OrderedDict[tuple, tuple[int, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------- eligibility

    def eligible_rows(self, eligible: Eligibility) -> np.ndarray:
        rows: set[int] | None = None
        if eligible.servers is not None:
            rows = {r for s in eligible.servers for r in self.rows_of_server.get(s, ())}
        if eligible.tools is not None:
            by_tool = {self.row_of_tool[t] for t in eligible.tools if t in self.row_of_tool}
            rows = by_tool if rows is None else rows & by_tool
        return np.fromiter(sorted(rows or ()), dtype=np.int64)

    def stats(self, eligible: Eligibility | None) -> tuple[int, np.ndarray]:
        """(N, document frequency per local term id) over the tools ``eligible`` allows in this view."""
        if eligible is None or eligible.unrestricted:
            return self.n, self.df
        key = (eligible.servers, eligible.tools)
        with self._lock:
            found = self._stats.get(key)
            if found is not None:
                self._stats.move_to_end(key)
                return found
        rows = self.eligible_rows(eligible)
        size = len(self.df)
        if 2 * len(rows) <= self.n:
            parts = [self.entries[r].terms for r in rows]
            df = np.bincount(np.concatenate(parts), minlength=size)[:size] if parts else np.zeros(size, np.int64)
        else:  # most of the view: subtract the few excluded tools instead
            mask = np.ones(self.n, dtype=bool)
            mask[rows] = False
            parts = [self.entries[r].terms for r in np.flatnonzero(mask)]
            df = self.df - (np.bincount(np.concatenate(parts), minlength=size)[:size] if parts else 0)
        found = (len(rows), df)
        with self._lock:
            self._stats[key] = found
            if len(self._stats) > 128:
                self._stats.popitem(last=False)
        return found

    def filter(self, eligible: Eligibility | None) -> Any | None:
        """The payload filter of a search in this view at this version; None when nothing is eligible."""
        v = self.version
        # Visible at v: written at or before v and not closed at or before v. The points closed at or
        # before v that still exist are few and known (the head lists them until they are deleted).
        must: list[Any] = [in_range("v_from", lte=v)]
        must_not: list[Any] = [models.HasIdCondition(has_id=sorted(self.state.hidden))] if self.state.hidden else []
        others = [o for o, n in self.state.counts.items() if n > 0 and o not in (PUBLIC, self.owner)]
        if others:   # only then can another owner's point match (later ones are excluded by version)
            must.append(is_value("owner", PUBLIC) if self.owner is None else is_any("owner", [PUBLIC, self.owner]))
        if self.shadowed:
            must_not.append(models.Filter(must=[is_value("owner", PUBLIC), is_any("server", sorted(self.shadowed))]))
        if eligible is not None and eligible.servers is not None:
            servers = sorted(s for s in eligible.servers if s in self.rows_of_server)
            if not servers:
                return None
            must.append(is_any("server", servers))
        if eligible is not None and eligible.tools is not None:
            keys = sorted(f"{t.server}\x1f{t.tool}" for t in eligible.tools if t in self.row_of_tool)
            if not keys:
                return None
            must.append(is_any("tool_key", keys))
        return models.Filter(must=must, must_not=must_not or None)


# ---------------------------------------------------------------------------------- points


def tool_point(tool: Tool, owner: str, version: int, seq: int, vector: np.ndarray, doc: list[str],
           head: dict[str, Any], vocab: Vocab) -> tuple[Any, Entry]:
    """One tool's point (dense vector, BM25 document weights, payload) and the replica's entry for it."""
    k1, b, avgdl = float(head["k1"]), float(head["b"]), float(head["avgdl"])
    norm = k1 * (1.0 - b + b * len(doc) / avgdl)
    weights: dict[int, float] = {}
    counts = Counter(doc)
    for term, tf in counts.items():
        idx = term_index(term)
        weights[idx] = weights.get(idx, 0.0) + tf / (tf + norm)
    idx = sorted(weights)
    vectors: dict[str, Any] = {DENSE: np.asarray(vector, dtype=np.float32).ravel().tolist()}
    if idx:
        vectors[SPARSE] = models.SparseVector(indices=idx, values=[weights[i] for i in idx])
    point_id = str(uuid.uuid5(NAMESPACE, f"{owner}\x1f{tool.server}\x1f{tool.name}\x1f{version}"))
    terms = sorted(counts)
    payload = {"kind": "tool", "owner": owner, "server": tool.server, "tool": tool.name,
               "tool_key": f"{tool.server}\x1f{tool.name}", "v_from": version, "v_to": LIVE, "seq": seq,
               "hash": tool.content_hash(), "terms": " ".join(terms),
               "record": json.dumps(tool.to_dict(), ensure_ascii=False)}
    entry = Entry(tool, owner, point_id, vocab.ids(terms), version, seq)
    return models.PointStruct(id=point_id, vector=vectors, payload=payload), entry


def _entry_of(point: Any, vocab: Vocab) -> Entry:
    p = point.payload
    tool = Tool.from_dict(json.loads(p["record"]))
    terms = p.get("terms") or ""
    return Entry(tool, p.get("owner", PUBLIC), str(point.id), vocab.ids(terms.split()), int(p["v_from"]),
                  int(p.get("seq", 0)))


def load_state(coll: QdrantCollection, head: dict[str, Any], base: State | None, vocab: Vocab) -> State:
    """The state at ``head``'s version: what changed since ``base`` when it is recent enough, else everything."""
    version, oldest = int(head["version"]), int(head.get("oldest", 1))
    if base is not None and oldest <= base.version <= version:
        if base.version == version:
            return base
        lo = base.version
        flt = models.Filter(must=[is_value("kind", "tool")], should=[
            in_range("v_from", gt=lo, lte=version), in_range("v_to", gt=lo, lte=version)])
        events: list[tuple[int, int, Entry | str]] = []
        points = list(coll.scroll(flt))
        after = coll.head() or {}
        if int(after.get("oldest", 1)) > base.version:   # collected while we read: read everything anew
            return load_state(coll, after, None, vocab)
        known = {e.point: e for entries in base.servers.values() for e in entries}
        for p in points:
            v_from, v_to = int(p.payload["v_from"]), int(p.payload["v_to"])
            if lo < v_to <= version:
                events.append((v_to, 0, str(p.id)))
            if lo < v_from <= version:
                events.append((v_from, 1, str(p.id)))
        by_id = {str(p.id): p for p in points}
        state = base
        for v in sorted({e[0] for e in events}):
            removed = [known[pid] for vv, kind, pid in events if vv == v and kind == 0 and pid in known]
            added = [_entry_of(by_id[pid], vocab) for vv, kind, pid in events if vv == v and kind == 1]
            for a in added:
                known[a.point] = a
            state = state.changed(v, oldest, added, removed)
        return State(version, oldest, state.vocab, state.servers, state.order, state.df, state.counts).with_hidden(head)
    flt = models.Filter(must=[is_value("kind", "tool"), in_range("v_from", lte=version), in_range("v_to", gt=version)])
    entries = [_entry_of(p, vocab) for p in coll.scroll(flt)]
    after = coll.head() or {}
    if int(after.get("oldest", 1)) > version:   # points of our version were collected while we read
        return load_state(coll, after, None, vocab)
    return State.from_entries(version, oldest, vocab, entries).with_hidden(head)
