"""The library's ``TOOLRANK_*`` environment settings, read in one place (pydantic-settings).

The HTTP service has its own, larger :class:`serve.settings.Settings` over the same prefix;
this one holds what the library and the CLI read: the index backend and the cache folder.
An empty variable counts as unset.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["RetrievalSettings"]


class RetrievalSettings(BaseSettings):
    """``TOOLRANK_BACKEND``, ``TOOLRANK_QDRANT_URL``, ``TOOLRANK_QDRANT_API_KEY``, ``TOOLRANK_QDRANT_PATH``,
    ``TOOLRANK_COLLECTION``, ``TOOLRANK_CACHE`` and ``TOOLRANK_PUBLIC_CORPORA``; read when constructed, never at
    import time."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    backend: str = "embedded"     # checked with a helpful message by retrieval.index.backends.BackendConfig
    qdrant_url: str | None = None
    qdrant_api_key: SecretStr | None = None
    qdrant_path: str | None = None
    collection: str = "toolrank"
    cache: Path | None = None
    public_corpora: Path | None = None   # other writers' corpora (retrieval.evaluation.corpora)

    def cache_dir(self) -> Path:
        """``TOOLRANK_CACHE``, else ``~/.cache/toolrank``."""
        return self.cache or Path.home() / ".cache" / "toolrank"
