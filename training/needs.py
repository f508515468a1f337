"""Blind needs: the agent's one-line need, written by writers that saw only the request.

    python -m training.needs --merge /work/blind/in /work/blind/out   # -> training/data/needs_blind.jsonl
    python -m training.needs --check                                  # the leak check, printed
    python -m training.needs --merge IN OUT --out benchmarks/data/corpus_needs_calibration.jsonl   # another file

Each writer got a TSV of ``id<TAB>voice<TAB>request`` and the brief in ``training/data/briefs/needs_blind.md``
(never the catalog, the label or the tool) and wrote ``{"id", "need", "need2"?}``. Merging keeps the
voice beside each line. The check: a need must not name its target tool (its name, or the name's
words joined) unless the request already does, and must not carry an identifier the request lacks.
The author-written needs of ``questions.jsonl`` (written by the writer who knew the tool) stay there,
apart; every figure says which needs it used.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
OUT = DATA / "needs_blind.jsonl"


def read_needs(path: Path = OUT) -> dict[str, dict]:
    """The blind needs by request id: ``{"id", "voice", "need", "need2"?}`` (one reader for training and
    the benchmarks; :func:`retrieval.jsonl.read_jsonl`, which splits lines only where JSON Lines does).

    Raises:
        FileNotFoundError: no such file.
    """
    from retrieval.jsonl import read_jsonl

    return {str(r["id"]): r for _, r in read_jsonl(path)}


def merge(inputs: Path, outputs: Path, out: Path = OUT) -> dict[str, int]:
    """Join every writer's output to its input's voices; lines whose id is not in the input are refused."""
    from retrieval.jsonl import split_lines

    voice: dict[str, str] = {}
    for tsv in sorted(inputs.glob("*.tsv")):
        for line in split_lines(tsv.read_text(encoding="utf-8")):
            parts = line.split("\t")
            if len(parts) >= 3:
                voice[parts[0]] = parts[1]
    rows: dict[str, dict] = {}
    stats = {"read": 0, "bad_json": 0, "unknown_id": 0, "empty": 0}
    for f in sorted(outputs.glob("*.jsonl")):
        for line in split_lines(f.read_text(encoding="utf-8")):
            if not line.strip():
                continue
            stats["read"] += 1
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                stats["bad_json"] += 1
                continue
            rid = str(r.get("id", ""))
            if rid not in voice:
                stats["unknown_id"] += 1
                continue
            need = " ".join(str(r.get("need") or "").split())
            if not need:
                stats["empty"] += 1
                continue
            row = {"id": rid, "voice": voice[rid], "need": need}
            if r.get("need2"):
                row["need2"] = " ".join(str(r["need2"]).split())
            rows[rid] = row
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sorted(rows.values(), key=lambda r: r["id"])),
                   encoding="utf-8")
    stats["kept"] = len(rows)
    return stats


def _words(name: str) -> str:
    return " ".join(w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", name).lower()) if w)


def leaks(request: str, need: str, tool: str) -> bool:
    """The need names the tool (its identifier, or its words in order when the name has 2+ words) where
    the request does not."""
    ident = tool.lower()
    if re.search(r"[_A-Z]|[a-z][A-Z]", tool) and ident in need.lower() and ident not in request.lower():
        return True
    words = _words(tool)
    return len(words.split()) >= 2 and words in _words(need) and words not in _words(request)


def check(path: Path = OUT) -> dict[str, int]:
    needs = read_needs(path)
    counts = {"checked": 0, "need_leaks": 0, "need2_leaks": 0}
    from retrieval.jsonl import read_jsonl

    rows = [q for _, q in read_jsonl(DATA / "questions.jsonl")]
    teacher = DATA / "teacher" / "requests.jsonl"     # the teacher's requests: one target tool each
    if teacher.is_file():
        rows += [q for _, q in read_jsonl(teacher)]
    if any(":" in i for i in needs):   # a corpus request's need: checked against its first labelled tool
        from retrieval.evaluation.corpora import CORPORA, load_corpus
        for name in CORPORA:
            for cq in load_corpus(name).questions:
                if cq.id in needs:
                    rows.append({"id": cq.id, "query": cq.query, "tool": cq.target.tool})
    for q in rows:
        n = needs.get(q["id"])
        if not n:
            continue
        counts["checked"] += 1
        counts["need_leaks"] += leaks(q["query"], n["need"], q["tool"])
        counts["need2_leaks"] += bool(n.get("need2")) and leaks(q["query"], n["need2"], q["tool"])
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--merge", nargs=2, type=Path, metavar=("INPUTS", "OUTPUTS"))
    p.add_argument("--check", action="store_true")
    p.add_argument("--out", type=Path, default=OUT, help=f"the merged file (default {OUT.name}); also what --check reads")
    a = p.parse_args(argv)
    if a.merge:
        print(merge(*a.merge, out=a.out))
    if a.check or not a.merge:
        print(check(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
