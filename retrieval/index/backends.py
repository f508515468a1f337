"""Choosing the index backend: the embedded one (bm25s + FAISS in each process, the default) or
Qdrant (one shared collection; replicas hold no index).

Both give a :class:`~retrieval.index.embedded.ToolIndex`; the pipeline, evaluation, the CLI and the
service never ask which. The choice is configuration: ``--backend qdrant --qdrant-url URL
[--qdrant-api-key KEY] [--collection NAME]`` (or ``--qdrant-path DIR`` for an embedded Qdrant
in one process), or the same as ``TOOLRANK_BACKEND``, ``TOOLRANK_QDRANT_URL``,
``TOOLRANK_QDRANT_API_KEY``, ``TOOLRANK_QDRANT_PATH``, ``TOOLRANK_COLLECTION``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:
    from retrieval.index.qdrant.index import QdrantToolIndex
    from retrieval.index.qdrant.schema import QdrantConfig
    from .embedded import ToolIndex

__all__ = ["BACKENDS", "BackendConfig", "qdrant_index"]

BACKENDS = ("embedded", "qdrant")
Backend = Literal["embedded", "qdrant"]


@dataclass(frozen=True, kw_only=True)
class BackendConfig:
    """Which backend, and where Qdrant is when it is chosen.

    Raises:
        ValueError: an unknown backend, Qdrant settings without ``backend="qdrant"``, or
            ``backend="qdrant"`` without exactly one of a URL and a path.
    """

    backend: Backend = "embedded"
    qdrant_url: str | None = None
    qdrant_api_key: str | None = field(default=None, repr=False)
    qdrant_path: str | None = None
    collection: str = "toolrank"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}: use {' or '.join(BACKENDS)}")
        if self.backend == "embedded" and (self.qdrant_url or self.qdrant_path):
            raise ValueError("a Qdrant URL or path was given but the backend is 'embedded': add --backend qdrant "
                             "(TOOLRANK_BACKEND=qdrant), or drop the Qdrant settings")
        if self.backend == "qdrant":
            self.qdrant()   # validates

    @classmethod
    def from_env(cls, **overrides: Any) -> "BackendConfig":
        """The ``TOOLRANK_*`` settings (:class:`retrieval.settings.RetrievalSettings`), with
        ``overrides`` (None values ignored) on top."""
        from retrieval.settings import RetrievalSettings

        env = RetrievalSettings()
        values: dict[str, Any] = {
            "backend": env.backend, "qdrant_url": env.qdrant_url,
            "qdrant_api_key": env.qdrant_api_key.get_secret_value() if env.qdrant_api_key else None,
            "qdrant_path": env.qdrant_path, "collection": env.collection,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def qdrant(self) -> "QdrantConfig":
        """The Qdrant connection settings.

        Raises:
            ValueError: neither or both of a URL and a path.
        """
        from retrieval.index.qdrant.schema import QdrantConfig

        if (self.qdrant_url is None) == (self.qdrant_path is None):
            raise ValueError("--backend qdrant needs --qdrant-url URL (a server, e.g. http://localhost:6333) or "
                             "--qdrant-path DIR (an embedded Qdrant for one process), exactly one of them")
        return QdrantConfig(url=self.qdrant_url, path=self.qdrant_path, api_key=self.qdrant_api_key,
                            collection=self.collection)


def qdrant_index(config: "QdrantConfig", *, seed: Callable[[], "ToolIndex"] | None = None,
                 with_examples: bool | None = None, encoder: Any = None) -> "QdrantToolIndex":
    """Open the collection; an empty one is first filled from ``seed()`` (an embedded index whose
    vectors are reused), when given.

    Args:
        config: where the collection is.
        seed: builds the index to upload into an empty collection.
        with_examples: when given, the collection must match it (it was built with or without
            the tools' example requests).
        encoder: the dense encoder (default: the shipped one, or the seed's).
    Raises:
        QdrantUnavailable: Qdrant cannot be reached.
        IndexLoadError: the collection is empty and there is no seed, or it does not match.
    """
    from retrieval.index.qdrant.collection import QdrantCollection
    from retrieval.index.qdrant.index import QdrantToolIndex
    from .embedded import IndexLoadError

    coll = QdrantCollection.connect(config)
    if coll.head() is None and seed is not None:
        source = seed()
        index = QdrantToolIndex.from_index(source, config=coll, if_absent=True,
                                           **({"encoder": encoder} if encoder is not None else {}))
    else:
        index = QdrantToolIndex.open(coll, encoder=encoder)
    if with_examples is not None and index.with_examples != with_examples:
        have = "with" if index.with_examples else "without"
        raise IndexLoadError(f"{config.where} indexes the tools {have} their example requests; choose another "
                             "--collection for the other kind (or rebuild this one with --recreate)")
    return index
