"""The library's ``TOOLRANK_*`` environment settings, one pydantic-settings class per concern.

* :class:`BackendSettings`: the index backend (embedded, or a Qdrant server or folder).
* :class:`RetrievalSettings`: the backend, plus the cache folder and the public corpora folder.
* :class:`HarvestSettings`: the MCP configurations that started this process (the recursion guard).
* :class:`LLMSettings`: the OpenAI-compatible endpoint that writes example requests and training data.

The HTTP service's :class:`serve.settings.Settings` adds its own fields to :class:`BackendSettings`;
the model folders are :class:`scorer.locations.ModelSettings`. Each class is the only reader of its
variables, reads them when constructed (never at import time), and counts an empty variable as unset.
:func:`serve.settings.unknown_variables` knows every variable from these classes' fields.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["BACKENDS", "BackendSettings", "HarvestSettings", "LLMSettings", "RetrievalSettings"]

BACKENDS = ("embedded", "qdrant")


class BackendSettings(BaseSettings):
    """``TOOLRANK_BACKEND``, ``TOOLRANK_QDRANT_URL``, ``TOOLRANK_QDRANT_API_KEY``, ``TOOLRANK_QDRANT_PATH`` and
    ``TOOLRANK_COLLECTION``. The backend's name is checked by its reader, with the choices in the message
    (:class:`retrieval.index.backends.BackendConfig`, the service's settings)."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    backend: str = Field(
        "embedded", json_schema_extra={"enum": list(BACKENDS)},
        description="Index backend: 'embedded' (bm25s + FAISS in each worker, a shared index folder) or "
                    "'qdrant' (one shared Qdrant collection; workers and replicas hold no index).")
    qdrant_url: str | None = Field(None, description="Qdrant server for backend 'qdrant' (http://host:6333).")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server, if it has one.")
    qdrant_path: str | None = Field(
        None, description="An embedded Qdrant (local mode) in this folder instead of a server: one process only.")
    collection: str = Field("toolrank", min_length=1, max_length=255, description="Qdrant collection name.")


class RetrievalSettings(BackendSettings):
    """The index backend (:class:`BackendSettings`), ``TOOLRANK_CACHE`` and ``TOOLRANK_PUBLIC_CORPORA``."""

    cache: Path | None = Field(None, description="Cache folder (default ~/.cache/toolrank).")
    public_corpora: Path | None = Field(
        None, description="Other writers' corpora for evaluation (default: shared/data/public beside the checkout).")

    def cache_dir(self) -> Path:
        """``TOOLRANK_CACHE``, else ``~/.cache/toolrank``."""
        return self.cache or Path.home() / ".cache" / "toolrank"


class HarvestSettings(BaseSettings):
    """``TOOLRANK_MCP_PARENTS``, set by toolrank (never by hand) for every stdio MCP server it starts."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    mcp_parents: str | None = Field(
        None, description="Internal: the MCP configurations whose gateway or index started this process "
                          "(os.pathsep between them); a gateway refuses to start their servers again.")

    def parents(self) -> list[str]:
        """The configurations above this process, outermost first."""
        return [p for p in (self.mcp_parents or "").split(os.pathsep) if p]


class LLMSettings(BaseSettings):
    """``TOOLRANK_LLM_BASE_URL``, ``TOOLRANK_LLM_MODEL`` and ``TOOLRANK_LLM_API_KEY``: the chat-completions
    endpoint of ``toolrank generate`` and of ``--write-examples`` (empty when unset). Its client checks them
    and adds explicit values (``LLMConfig.from_env``)."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_LLM_", env_ignore_empty=True, extra="ignore",
                                      frozen=True)

    base_url: str = Field("", description="An OpenAI-compatible API root, such as http://127.0.0.1:8000/v1.")
    model: str = Field("", description="The model name the endpoint serves.")
    api_key: SecretStr | None = Field(None, description="The endpoint's API key, if it needs one.")
