"""The default index of the shipped catalog, built once into a cache folder.

The folder is ``$TOOLRANK_CACHE`` or ``~/.cache/toolrank``; the index lives in a
subfolder named after the hash of the shipped data and encoder, so a new catalog or
encoder release rebuilds it.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
import logging
from functools import lru_cache
from pathlib import Path

from retrieval.catalog.formats import default_catalog_path, default_examples_path, load_default_catalog
from .embedded import IndexLoadError, ToolIndex
from .encoder import default_encoder_path

__all__ = ["cache_dir", "default_index_path", "load_or_build_default", "public_index"]

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """``$TOOLRANK_CACHE`` or ``~/.cache/toolrank`` (:class:`retrieval.settings.RetrievalSettings`)."""
    from retrieval.settings import RetrievalSettings

    return RetrievalSettings().cache_dir()


def _cache_key_inputs() -> tuple[list[Path], list[str]]:
    """What the default index is made from: files (read whole) and library versions.

    The encoder's weights, tokenizer and config: a new encoder (or another vocabulary or
    length) must not meet vectors of the old one. fusion.py: a saved index keeps the fusion weights it
    was built with, so new default weights need a new index. bm25.py and the bm25s / PyStemmer versions:
    what a saved BM25 index holds and how text is tokenised and stemmed follow them.
    """
    encoder = default_encoder_path()
    files = [default_catalog_path(), default_examples_path(), Path(__file__).with_name("text.py"),
             Path(__file__).with_name("bm25.py"), Path(__file__).with_name("fusion.py"), encoder / "model.onnx", encoder / "tokenizer.json",
             encoder / "config.json"]
    libraries = [f"{name}=={_library_version(name)}" for name in ("bm25s", "PyStemmer")]
    return files, libraries


def _library_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def default_index_path(with_examples: bool = True) -> Path:
    h = hashlib.sha256()
    files, libraries = _cache_key_inputs()
    for p in files:
        h.update(p.read_bytes())
    h.update("\n".join(libraries).encode())
    return cache_dir() / f"mcp-zero-{'ex' if with_examples else 'noex'}-{h.hexdigest()[:12]}"


def load_or_build_default(*, with_examples: bool = True, show_progress: bool = False) -> ToolIndex:
    """Load the cached default index, building (and caching) it on first use."""
    path = default_index_path(with_examples)
    if (path / "manifest.json").exists():
        try:
            return ToolIndex.load(path)
        except IndexLoadError as exc:
            log.warning("rebuilding the default index: %s", exc)
    log.info("building the default index of the shipped catalog into %s (once)", path)
    index = ToolIndex.build(load_default_catalog(with_examples=with_examples), with_examples=with_examples,
                            show_progress=show_progress)
    try:
        index.save(path)
    except OSError as exc:  # a read-only home still gets a working index
        log.warning("could not cache the default index at %s: %s", path, exc)
    return index


@lru_cache(maxsize=1)
def public_index() -> ToolIndex:
    """The shipped catalog's index, loaded once per process, for naming public servers to connect.

    Shared by every pipeline of the process; nothing may update it (servers added at run
    time, a tenant's private ones, must never be suggested to anyone).
    """
    return load_or_build_default()
