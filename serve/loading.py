"""Building the real pipeline for the service: index store seed, scorer, pipeline factory.

Imported lazily by the app's start-up, so an app built with an injected pipeline never touches
the index, the encoder or the scorer packages.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .settings import Settings
from .work import checkpointed

__all__ = ["PipelineParts", "load_scorer", "default_parts"]

log = logging.getLogger(__name__)


@dataclass
class PipelineParts:
    """What the engine needs: how to load a saved index, seed the store, and wrap an index."""

    load: Callable[[Path], Any]
    seed: Callable[[], Any]
    make_pipeline: Callable[[Any], Any]
    scorer: dict[str, Any] = field(default_factory=dict)
    # Background work in progress, in words (the app shows it in /readyz); the app may share its dict.
    notes: dict[str, str] = field(default_factory=dict)
    # Called (from a background thread) once the public suggestion index has loaded.
    on_public_ready: Callable[[], None] | None = None


def load_scorer(settings: Settings) -> tuple[Any | None, dict[str, Any]]:
    """The scorer named by the settings, or the shipped default, or none (said in the status).

    Raises:
        Exception: an explicitly configured model folder that fails to load, or a missing
            scorer with ``require_scorer`` set.
    """
    try:
        import scorer as scorer_pkg
        Scorer = scorer_pkg.Scorer
    except (ImportError, AttributeError) as exc:
        if settings.model_dir is not None or settings.require_scorer:
            raise RuntimeError(f"the scorer package cannot be imported ({exc}); install toolrank fully") from exc
        return None, {"loaded": False, "detail": "scorer package unavailable: probabilities come from retrieval alone"}
    path: Path | None = settings.model_dir
    if path is None:
        default = getattr(scorer_pkg, "default_model_path", None)
        path = Path(default()) if callable(default) else None
        if path is None or not (path / "model.onnx").exists():
            where = f"no scorer model at {path}" if path is not None else "no scorer model configured"
            if settings.require_scorer:
                raise RuntimeError(f"{where}; pass --model DIR")
            return None, {"loaded": False,
                          "detail": f"{where} (pass --model DIR): probabilities come from retrieval alone"}
    scorer = checkpointed(Scorer.load(path))  # explicit or default present: a failure here is fatal
    info = getattr(scorer, "info", None) or getattr(scorer, "model_info", None) or {}
    log.info("loaded scorer from %s", path)
    return scorer, {"loaded": True, **{k: info[k] for k in _PUBLIC_INFO if k in info}}


_PUBLIC_INFO = ("name", "version", "base_model", "quantization", "record_format_version", "max_length")


def default_parts(settings: Settings) -> PipelineParts:
    """Parts of the real pipeline: ``ToolIndex`` + ``Pipeline`` + ``Scorer``.

    Every index version this worker loads shares one encoder (the first one made or loaded).
    The shipped catalog's index for ``no_fit`` suggestions is loaded from its cache when it is
    there; when it must be built first (minutes on a cold machine) it is built in a background
    thread, so readiness never waits for it: answers carry no suggestions until it is ready,
    then ``on_public_ready`` is called.
    """
    from retrieval.index.embedded import ToolIndex
    from retrieval.pipeline.flow import Pipeline

    scorer, scorer_status = load_scorer(settings)
    shared: dict[str, Any] = {}

    def encoder() -> Any | None:
        if "encoder" not in shared:
            try:
                from retrieval.index.encoder import OnnxEncoder
            except ImportError:
                shared["encoder"] = None
            else:
                shared["encoder"] = OnnxEncoder()
        return shared["encoder"]

    def keep_encoder(index: Any) -> Any:
        shared.setdefault("encoder", getattr(index, "encoder", None))
        return index

    def load(path: Path) -> Any:
        enc = encoder()
        return ToolIndex.load(path, encoder=enc) if enc is not None else ToolIndex.load(path)

    def seed() -> Any:
        if settings.catalog is not None:
            from retrieval.catalog.formats import load_catalog

            log.info("building the first index from %s", settings.catalog)
            catalog = load_catalog(settings.catalog, allow_empty=True)
            if not len(catalog):
                log.warning("%s holds no tools: the index starts empty (servers come from PUT /v1/servers)",
                            settings.catalog)
            return ToolIndex.build(catalog, encoder=encoder())
        if settings.index_dir is not None and (Path(settings.index_dir) / "manifest.json").exists():
            log.info("seeding the store from the saved index in %s", settings.index_dir)
            return load(Path(settings.index_dir))
        try:
            from retrieval.index.default import load_or_build_default
        except ImportError:
            from retrieval.catalog.formats import load_default_catalog

            log.info("building the default index from the shipped catalog (about a minute)")
            return ToolIndex.build(load_default_catalog(), encoder=encoder())
        index = keep_encoder(load_or_build_default())
        if settings.public_suggestions:
            shared.setdefault("public", index)  # safe to share: served indexes are never changed in place
        return index

    def public_index() -> Any | None:
        """The shipped catalog's index, never updated: the only source of no_fit suggestions."""
        if "public" in shared:
            return shared["public"]
        shared["public"] = None
        if not settings.public_suggestions:
            return None
        try:
            from retrieval.index.default import default_index_path, load_or_build_default
        except ImportError:
            log.warning("no public catalog index: no_fit answers carry no suggestions")
            return None
        path = default_index_path()
        if (path / "manifest.json").exists():
            try:
                shared["public"] = load(path)
                return shared["public"]
            except Exception as exc:  # a stale or broken cache: rebuild it, in the background
                log.warning("cannot load the cached public catalog index at %s (%s); rebuilding it", path, exc)

        def build() -> None:
            try:
                index = keep_encoder(load_or_build_default())
            except Exception:
                log.exception("building the public catalog index failed: no_fit answers carry no suggestions")
                parts.notes["public"] = "no no_fit suggestions: building the public catalog index failed (see the log)"
                return
            shared["public"] = index
            log.info("public catalog index ready: no_fit answers carry suggestions")
            if parts.on_public_ready is not None:
                parts.on_public_ready()

        parts.notes["public"] = "building the public catalog index in the background: no no_fit suggestions until then"
        log.info("building the public catalog index in the background (no suggestions until it is ready)")
        threading.Thread(target=build, name="toolrank-public-index", daemon=True).start()
        return None

    def make_pipeline(index: Any) -> Any:
        # Versions after the first: the first one's scorer, policy and token counter over the new index, with the
        # models this index's kind reads (its confidence model, the one for tools without examples, the tail)
        # and its own catalog calibration; before 0.15.0 they were handed the first one's confidence model,
        # which left them without the tail's and the without-examples models.
        first = shared.get("pipeline")
        if first is None:
            pipeline = Pipeline(index, scorer, public_index=public_index())
            shared["pipeline"] = pipeline
            return pipeline
        pipeline = first.with_index(index)
        pipeline.public_index = public_index()
        return pipeline

    parts = PipelineParts(load, seed, make_pipeline, scorer_status)
    return parts
