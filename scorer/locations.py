"""Where the released model folders are: ``$TOOLRANK_MODELS``, else the installed package's copy.

A checkout and an editable install read ``models/`` in the repository; a wheel install reads the
copy shipped as the ``toolrank_models`` package. ``TOOLRANK_MODELS`` names a folder holding
``toolrank-reranker/`` and ``toolrank-encoder/`` (for example a newer release, unpacked).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ENV_MODELS", "ModelSettings", "models_root", "variable", "RERANKER", "ENCODER"]

RERANKER = "toolrank-reranker"
ENCODER = "toolrank-encoder"


def variable(cls: type[BaseSettings], field: str) -> str:
    """The environment variable of one field of a settings class, as ``cls()`` reads it (``TOOLRANK_<FIELD>``).
    Here, in the lowest layer, so every layer names its variables from its settings instead of spelling them."""
    if field not in cls.model_fields:
        raise ValueError(f"{cls.__name__} has no field {field!r}")
    return (cls.model_config.get("env_prefix", "") + field).upper()


class ModelSettings(BaseSettings):
    """``TOOLRANK_MODELS``, read when constructed; empty (or blank) counts as unset."""

    model_config = SettingsConfigDict(env_prefix="TOOLRANK_", env_ignore_empty=True, extra="ignore", frozen=True)

    models: Path | None = Field(
        None, description="A folder holding toolrank-reranker/ and toolrank-encoder/ (default: the installed copy).")

    @field_validator("models", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return (value.strip() or None) if isinstance(value, str) else value


ENV_MODELS = variable(ModelSettings, "models")


def models_root() -> Path:
    """``$TOOLRANK_MODELS``, else the installed ``toolrank_models`` package, else ``models/`` of the checkout."""
    configured = ModelSettings().models
    if configured is not None:
        return configured.expanduser()
    try:
        import toolrank_models
        return Path(toolrank_models.__file__).resolve().parent
    except ImportError:  # running from a checkout that is not installed
        return Path(__file__).resolve().parents[1] / "models"
