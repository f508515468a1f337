"""The runtime cross-encoder: a model folder in, calibrated P(fits) per candidate tool out.

Needs only ``onnxruntime``, ``tokenizers`` and ``numpy`` (no torch, no transformers).

A model folder (written by ``training/export.py``) holds:

* ``model.onnx`` — inputs ``input_ids``, ``attention_mask`` (and optionally
  ``token_type_ids``), each ``[batch, sequence]`` int64; one output of shape
  ``[batch, 1]`` or ``[batch]``: the relevance logit.
* ``tokenizer.json`` — a ``tokenizers`` file whose post-processor builds pairs.
* ``config.json`` — ``name``, ``version``, ``base_model``, ``max_length``,
  ``record_format_version``, ``record`` (``max_description_chars``, ``examples``),
  ``calibration``, ``truncation`` (optional, default ``"only_second"``),
  ``training_data_hash``, ``package_version``, ``quantization``.
* ``MODEL_CARD.md`` — what the model is, how it was trained and measured.

Example:
    >>> scorer = Scorer.load("models/toolrank-reranker")          # doctest: +SKIP
    >>> scorer.score("send the report to Ana", None, tools)          # doctest: +SKIP
    [0.91, 0.07, ...]
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Encoding, Tokenizer

from scorer.calibration import Calibration, CalibrationError
from scorer.locations import RERANKER, models_root
from scorer.record import READABLE_RECORD_VERSIONS, REQUEST_CUTS, RequestFitter, format_record

if TYPE_CHECKING:
    from scorer.record import Tool

__all__ = [
    "ScorerLoadError",
    "ModelConfig",
    "PairEncoder",
    "Scorer",
    "MODEL_FILE",
    "TOKENIZER_FILE",
    "CONFIG_FILE",
    "CARD_FILE",
    "TRUNCATION_STRATEGIES",
    "DEFAULT_MODEL_DIR",
    "default_model_path",
]

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "config.json"
CARD_FILE = "MODEL_CARD.md"
REQUIRED_FILES = (CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE)
TRUNCATION_STRATEGIES = ("only_second", "longest_first")
_FEEDS = ("input_ids", "attention_mask", "token_type_ids")
_INT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
_FLOAT_TYPES = {"tensor(float)", "tensor(float16)", "tensor(double)"}
_PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<PAD>")

DEFAULT_MODEL_DIR = models_root() / RERANKER   # as resolved at import; default_model_path() re-reads


def default_model_path() -> Path:
    """Where the shipped scorer model folder lives: ``$TOOLRANK_MODELS/toolrank-reranker``, else the
    package's own copy (``models/toolrank-reranker`` in the repository).

    The folder may be absent (no model released yet); callers check ``.exists()``.
    """
    return models_root() / RERANKER


class _LRU:
    """A small thread-safe least-recently-used map of (query_text, tool_text) -> logit."""

    def __init__(self, size: int):
        import threading
        from collections import OrderedDict

        self.size = size
        self._data: "OrderedDict[tuple[str, str], float]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> float | None:
        if self.size <= 0:
            return None
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple[str, str], value: float) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


class ScorerLoadError(ValueError):
    """A model folder that cannot be served as it is; the message names the file and the fix."""


# --------------------------------------------------------------------------- config


def _require_int(raw: Mapping[str, Any], key: str, where: str, *, minimum: int, default: Any = ...) -> int:
    value = raw.get(key, default)
    if value is ...:
        raise ScorerLoadError(f"{where}: missing required key '{key}'")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScorerLoadError(f"{where}: '{key}' must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class ModelConfig:
    """The parsed ``config.json`` of a model folder.

    Attributes:
        name: Model name, e.g. ``"toolrank-reranker-minilm"``.
        version: Model version string.
        max_length: Token budget of a (query, tool) pair, special tokens included.
        record_format_version: The record format version it was trained with (one of :data:`scorer.record.READABLE_RECORD_VERSIONS`).
        max_description_chars: Description budget passed to :func:`scorer.record.format_record`.
        examples: How many example requests the record carries (where the tool has some).
        parameters: How many input-schema parameter names the record carries.
        request_tokens: Token budget of the query side (request and need), cut once per request
            by :class:`scorer.record.RequestFitter`; 0 leaves the cut to the pair tokeniser.
        request_cut: Where a long request is cut (see :data:`scorer.record.REQUEST_CUTS`).
        calibration: Logit to probability mapping.
        truncation: ``"only_second"`` (cut the tool side first) or ``"longest_first"``;
            must match how the training pairs were truncated.
        base_model: What the cross-encoder was initialised from.
        training_data_hash: Hash of the training data, for provenance.
        package_version: toolrank version that exported the folder.
        quantization: Free-form description of the quantisation (``"none"`` or a dict).
        raw: The whole JSON object, unknown keys included.
    """

    name: str
    version: str
    max_length: int
    record_format_version: int
    max_description_chars: int = 300
    examples: int = 0
    parameters: int = 0
    server_description_chars: int = 0
    request_tokens: int = 0
    request_cut: str = "head_tail"
    calibration: Calibration = field(default_factory=Calibration)
    truncation: str = "only_second"
    base_model: str = ""
    training_data_hash: str | None = None
    package_version: str | None = None
    quantization: Any = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, raw: Any, where: str = CONFIG_FILE) -> "ModelConfig":
        """Validate and parse a config object.

        Raises:
            ScorerLoadError: a required key is missing or a value has the wrong type,
                or the record format version differs from this package's.
        """
        if not isinstance(raw, dict):
            raise ScorerLoadError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        for key in ("name", "version"):
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and key == "version":
                value = str(value)
            if not isinstance(value, str) or not value.strip():
                raise ScorerLoadError(f"{where}: missing or empty required key '{key}' (a string)")
        max_length = _require_int(raw, "max_length", where, minimum=4)
        fmt = _require_int(raw, "record_format_version", where, minimum=1)
        if fmt not in READABLE_RECORD_VERSIONS:
            raise ScorerLoadError(
                f"{where}: the model was trained on record format version {fmt}, but this toolrank "
                f"builds versions {', '.join(map(str, READABLE_RECORD_VERSIONS))}; install the toolrank "
                "release that matches the model, or retrain and re-export it with this one"
            )
        record = raw.get("record") or {}
        if not isinstance(record, dict):
            raise ScorerLoadError(f"{where}: 'record' must be an object like "
                                  '{"max_description_chars": 300, "examples": 0}')
        max_chars = _require_int(record, "max_description_chars", f"{where}, record", minimum=2, default=300)
        examples = _require_int(record, "examples", f"{where}, record", minimum=0, default=0)
        parameters = _require_int(record, "parameters", f"{where}, record", minimum=0, default=0)
        server_chars = _require_int(record, "server_description_chars", f"{where}, record", minimum=0, default=0)
        if server_chars == 1 or (server_chars and fmt < 2):
            raise ScorerLoadError(f"{where}, record: 'server_description_chars' must be 0 or >= 2, and needs "
                                  f"record format version 2 (this folder says {fmt}), got {server_chars}")
        request_tokens = _require_int(record, "request_tokens", f"{where}, record", minimum=0, default=0)
        if request_tokens and not 16 <= request_tokens < max_length:
            raise ScorerLoadError(f"{where}, record: 'request_tokens' must be 0 (no request budget) or "
                                  f"16..{max_length - 1}, got {request_tokens}")
        request_cut = record.get("request_cut", "head_tail")
        if request_cut not in REQUEST_CUTS:
            raise ScorerLoadError(f"{where}, record: 'request_cut' must be one of {REQUEST_CUTS}, got {request_cut!r}")
        try:
            calibration = Calibration.from_dict(raw.get("calibration"))
        except CalibrationError as exc:
            raise ScorerLoadError(f"{where}: bad 'calibration': {exc}") from None
        truncation = raw.get("truncation", "only_second")
        if truncation not in TRUNCATION_STRATEGIES:
            raise ScorerLoadError(f"{where}: 'truncation' must be one of {TRUNCATION_STRATEGIES}, got {truncation!r}")
        base_model = raw.get("base_model") or ""
        if not isinstance(base_model, str):
            raise ScorerLoadError(f"{where}: 'base_model' must be a string, got {type(base_model).__name__}")
        return cls(
            name=raw["name"],
            version=str(raw["version"]),
            max_length=max_length,
            record_format_version=fmt,
            max_description_chars=max_chars,
            examples=examples,
            parameters=parameters,
            server_description_chars=server_chars,
            request_tokens=request_tokens,
            request_cut=request_cut,
            calibration=calibration,
            truncation=truncation,
            base_model=base_model,
            training_data_hash=raw.get("training_data_hash"),
            package_version=raw.get("package_version"),
            quantization=raw.get("quantization"),
            raw=dict(raw),
        )

    @classmethod
    def read(cls, path: str | Path) -> "ModelConfig":
        """Read and validate a ``config.json`` file.

        Raises:
            ScorerLoadError: the file is missing, not UTF-8 JSON, or invalid (see :meth:`from_dict`).
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ScorerLoadError(f"{path}: file not found") from None
        except UnicodeDecodeError as exc:
            raise ScorerLoadError(f"{path}: not UTF-8 text ({exc})") from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScorerLoadError(
                f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
                "re-export the model folder or fix the file"
            ) from None
        return cls.from_dict(raw, where=str(path))


# --------------------------------------------------------------------------- tokenisation


class PairEncoder:
    """Tokenises (query_text, tool_text) pairs exactly as the scorer feeds them to the model.

    Truncation cuts the tool side first (``only_second``); a pair whose query side alone is
    too long falls back to ``longest_first`` on its own, so a pair's tokens never depend on
    the other pairs in the call. No padding here: :meth:`arrays` pads each mini-batch to its
    longest member.

    Args:
        tokenizer_json: The contents of ``tokenizer.json``.
        max_length: Token budget per pair, special tokens included.
        truncation: ``"only_second"`` or ``"longest_first"``.
    """

    def __init__(self, tokenizer_json: str, max_length: int, truncation: str = "only_second"):
        if truncation not in TRUNCATION_STRATEGIES:
            raise ValueError(f"truncation must be one of {TRUNCATION_STRATEGIES}, got {truncation!r}")
        self.max_length = max_length
        self.truncation = truncation
        self._primary = self._make(tokenizer_json, truncation)
        self._fallback = self._make(tokenizer_json, "longest_first") if truncation != "longest_first" else None
        self.pad_id = self._pad_id(self._primary)

    @property
    def tokenizer(self) -> Tokenizer:
        """The underlying ``tokenizers.Tokenizer`` (truncation set; copy it before changing it)."""
        return self._primary

    def _make(self, tokenizer_json: str, strategy: str) -> Tokenizer:
        tok = Tokenizer.from_str(tokenizer_json)
        tok.no_padding()
        tok.enable_truncation(self.max_length, strategy=strategy)
        return tok

    @staticmethod
    def _pad_id(tok: Tokenizer) -> int:
        for token in _PAD_TOKENS:
            tid = tok.token_to_id(token)
            if tid is not None:
                return int(tid)
        return 0

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[Encoding]:
        """Encode pairs (truncated, unpadded), in the given order."""
        pairs = list(pairs)
        if not pairs:
            return []
        try:
            return self._primary.encode_batch(pairs)
        except Exception:  # tokenizers raises a bare Exception when a query alone exceeds the budget
            if self._fallback is None:
                raise
        out = []
        for pair in pairs:
            try:
                out.append(self._primary.encode(*pair))
            except Exception:
                out.append(self._fallback.encode(*pair))
        return out

    def arrays(self, encodings: Sequence[Encoding]) -> dict[str, np.ndarray]:
        """Pad encodings to the longest among them: int64 ``input_ids``, ``attention_mask``, ``token_type_ids``."""
        width = max(len(e.ids) for e in encodings)
        n = len(encodings)
        ids = np.full((n, width), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for i, enc in enumerate(encodings):
            k = len(enc.ids)
            ids[i, :k] = enc.ids
            mask[i, :k] = enc.attention_mask
            types[i, :k] = enc.type_ids
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


# --------------------------------------------------------------------------- scorer


def _check_signature(session: ort.InferenceSession, where: Path) -> tuple[dict[str, Any], str]:
    """The feeds the model takes (name -> numpy dtype) and the name of its logit output."""
    inputs = session.get_inputs()
    names = [i.name for i in inputs]
    unknown = [n for n in names if n not in _FEEDS]
    missing = [n for n in ("input_ids", "attention_mask") if n not in names]
    if unknown or missing:
        raise ScorerLoadError(
            f"{where}: model inputs are {names}; the scorer feeds input_ids, attention_mask and optionally "
            f"token_type_ids (missing {missing}, unexpected {unknown}); re-export with training/export.py"
        )
    feeds: dict[str, Any] = {}
    for inp in inputs:
        if len(inp.shape) != 2:
            raise ScorerLoadError(f"{where}: input '{inp.name}' has shape {inp.shape}; expected [batch, sequence]")
        if inp.type not in _INT_TYPES:
            raise ScorerLoadError(f"{where}: input '{inp.name}' has type {inp.type}; expected tensor(int64)")
        feeds[inp.name] = _INT_TYPES[inp.type]

    outputs = session.get_outputs()
    chosen = next((o for o in outputs if o.name == "logits"), outputs[0] if len(outputs) == 1 else None)
    if chosen is None:
        raise ScorerLoadError(
            f"{where}: model has outputs {[o.name for o in outputs]} and none is named 'logits'; "
            "re-export with training/export.py"
        )
    shape = list(chosen.shape)
    if chosen.type not in _FLOAT_TYPES:
        raise ScorerLoadError(f"{where}: output '{chosen.name}' has type {chosen.type}; expected a float tensor")
    if len(shape) == 2 and isinstance(shape[1], int) and shape[1] != 1:
        raise ScorerLoadError(
            f"{where}: output '{chosen.name}' has shape {shape}: {shape[1]} values per pair, but the scorer "
            "needs one relevance logit per pair ([batch, 1] or [batch]); train with num_labels=1"
        )
    if len(shape) not in (1, 2):
        raise ScorerLoadError(
            f"{where}: output '{chosen.name}' has shape {shape}; expected [batch, 1] or [batch] "
            "(one relevance logit per pair)"
        )
    return feeds, chosen.name


class Scorer:
    """Cross-encoder relevance scoring of (request, need, tool) with calibrated probabilities.

    Build one with :meth:`load`. Safe to share between threads (the ONNX session and the
    tokenizers are only read after loading).
    """

    def __init__(
        self,
        session: ort.InferenceSession,
        encoder: PairEncoder,
        config: ModelConfig,
        *,
        path: Path,
        threads: int,
        batch_size: int,
        cache_size: int = 4096,
        workers: int = 1,
    ):
        self._session = session
        self.workers = workers
        # One pair a batch leaves a core idle while a single small product runs: with workers > 1,
        # pairs run side by side, each on one onnxruntime thread (the session is thread-safe).
        self._pool = (ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolrank-scorer")
                      if workers > 1 and batch_size == 1 else None)
        self._encoder = encoder
        self.config = config
        self.path = path
        self.threads = threads
        self.batch_size = batch_size
        self._feeds, self._output = _check_signature(session, path / MODEL_FILE)
        self._cache = _LRU(cache_size)
        self._fitter = (RequestFitter(encoder.tokenizer, config.request_tokens, config.request_cut)
                        if config.request_tokens else None)

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, path: str | Path, *, threads: int = 2, batch_size: int = 1, cache_size: int = 4096,
             workers: int | None = None) -> "Scorer":
        """Load a model folder and check it end to end on one test pair.

        Args:
            path: The model folder (``model.onnx``, ``tokenizer.json``, ``config.json``).
            threads: onnxruntime intra-op threads.
            batch_size: Pairs per ONNX call. 1 (the default) makes every pair's score independent
                of the other pairs in the call (dynamic int8 scales activations per batch); larger
                batches are sorted by length so they pad little, but their scores move slightly.
            cache_size: (query, tool) records whose logits are kept (only with ``batch_size=1``,
                where a pair's logit is the same in any call); 0 turns the cache off.
            workers: Pairs run side by side (only with ``batch_size=1``), each on
                ``threads // workers`` onnxruntime threads. Default: ``threads`` (one thread a pair),
                faster than two threads on one pair at a time on a 2-core machine
                (``benchmarks/scorer_speed.py``). The logits are the same either way.

        Returns:
            A ready :class:`Scorer`.

        Raises:
            ScorerLoadError: the folder or a file is missing, ``config.json`` is invalid or
                from another record format version, the tokenizer cannot be read, or the
                ONNX model does not take/produce the expected tensors.
        """
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ScorerLoadError(f"threads must be an int >= 1, got {threads!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ScorerLoadError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if workers is None:
            workers = threads if batch_size == 1 else 1
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= threads:
            raise ScorerLoadError(f"workers must be an int in 1..threads ({threads}), got {workers!r}")
        if batch_size != 1:
            workers = 1
        path = Path(path)
        if not path.exists():
            raise ScorerLoadError(
                f"model folder {path} does not exist; pass a folder written by training/export.py "
                f"(holding {', '.join(REQUIRED_FILES)})"
            )
        if not path.is_dir():
            raise ScorerLoadError(f"{path} is a file; pass the model folder that contains it")
        missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
        if missing:
            raise ScorerLoadError(
                f"model folder {path} is missing {', '.join(missing)}; it needs {', '.join(REQUIRED_FILES)} "
                "(re-export it with training/export.py)"
            )
        if not (path / CARD_FILE).is_file():
            logger.warning("model folder %s has no %s", path, CARD_FILE)

        config = ModelConfig.read(path / CONFIG_FILE)

        try:
            tokenizer_json = (path / TOKENIZER_FILE).read_text(encoding="utf-8")
            encoder = PairEncoder(tokenizer_json, config.max_length, config.truncation)
        except Exception as exc:  # tokenizers raises bare Exceptions
            raise ScorerLoadError(
                f"{path / TOKENIZER_FILE}: cannot be read as a tokenizers file ({exc}); save it with "
                "tokenizer.backend_tokenizer.save(...)"
            ) from None

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads // workers)
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(path / MODEL_FILE), sess_options=options,
                                           providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ScorerLoadError(f"{path / MODEL_FILE}: onnxruntime cannot load it ({exc})") from None

        scorer = cls(session, encoder, config, path=path, threads=threads, batch_size=batch_size,
                     cache_size=cache_size, workers=workers)
        scorer._smoke_test()
        logger.info("loaded scorer %s %s from %s (%d threads, %d pairs at a time)", config.name, config.version,
                    path, threads, workers)
        return scorer

    def _smoke_test(self) -> None:
        probe = SimpleNamespace(server="toolrank", name="probe", description="checks the model loads",
                                examples=("an example request",))
        try:
            out = self.logits("check that the model runs", "a test", [probe, probe])
        except ScorerLoadError:
            raise
        except Exception as exc:
            raise ScorerLoadError(f"{self.path / MODEL_FILE}: failed on a test pair: {exc}") from None
        if not np.all(np.isfinite(out)):
            raise ScorerLoadError(f"{self.path / MODEL_FILE}: produced non-finite logits on a test pair")

    # ------------------------------------------------------------------ scoring

    def records(self, request: str, need: str | None, tools: Sequence["Tool"]) -> list[tuple[str, str]]:
        """The (query_text, tool_text) pairs this model reads for these candidates.

        With a request budget the request is cut once, so every candidate sees the same text."""
        if self._fitter is not None:
            request, need = self._fitter.fit(request, need)
        return [
            format_record(request, need, tool, max_description_chars=self.config.max_description_chars,
                          examples=self.config.examples, parameters=self.config.parameters,
                          server_description_chars=self.config.server_description_chars)
            for tool in tools
        ]

    def pair_logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Raw logits for already formatted pairs, float32 of shape ``(len(pairs),)``, in order.

        Each pair is run as its own batch (``batch_size=1``, the default): dynamic int8
        quantisation computes activation scales per batch, so a pair scored beside others would
        get a score that moves with them (0.694 alone, 0.668 beside 31 short dummies). One pair a
        batch needs no padding either, and costs little on two cores (the sequence already
        fills the matrix products). Repeated pairs come from a small cache, exact for that reason.
        """
        pairs = list(pairs)
        result = np.empty(len(pairs), dtype=np.float32)
        if not pairs:
            return result
        todo = []
        for i, pair in enumerate(pairs):
            hit = self._cache.get(pair) if self.batch_size == 1 else None
            if hit is None:
                todo.append(i)
            else:
                result[i] = hit
        if not todo:
            return result
        encodings = self._encoder.encode([pairs[i] for i in todo])
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        batches = [order[start:start + self.batch_size] for start in range(0, len(order), self.batch_size)]

        def run(idx: np.ndarray) -> np.ndarray:
            arrays = self._encoder.arrays([encodings[i] for i in idx])
            feeds = {name: arrays[name].astype(dtype, copy=False) for name, dtype in self._feeds.items()}
            out = np.asarray(self._session.run([self._output], feeds)[0])
            if out.shape not in ((len(idx), 1), (len(idx),)):
                raise ScorerLoadError(
                    f"{self.path / MODEL_FILE}: output '{self._output}' has shape {list(out.shape)} for a batch "
                    f"of {len(idx)}; expected [{len(idx)}, 1] or [{len(idx)}] (one logit per pair)"
                )
            return out.reshape(-1)

        outs = self._pool.map(run, batches) if self._pool is not None and len(batches) > 1 else map(run, batches)
        for idx, out in zip(batches, outs):
            for j, value in zip(idx, out):
                result[todo[j]] = value
        if self.batch_size == 1:
            for i in todo:
                self._cache.put(pairs[i], float(result[i]))
        return result

    def logits(self, request: str, need: str | None, tools: Sequence["Tool"]) -> np.ndarray:
        """Raw model logits, float32 of shape ``(len(tools),)``, in the order of ``tools``.

        Raises:
            ValueError: ``request`` is blank.
        """
        tools = list(tools)
        if not tools:
            return np.empty(0, dtype=np.float32)
        return self.pair_logits(self.records(request, need, tools))

    def score(self, request: str, need: str | None, tools: Sequence["Tool"]) -> list[float]:
        """Calibrated probability that each tool fits the request, as plain floats in [0, 1].

        Args:
            request: The user's request.
            need: What the assistant is looking for, or ``None``.
            tools: Candidate tools (objects with ``server``, ``name``, ``description``, ``examples``).

        Returns:
            One probability per tool, in the order given; ``[]`` for no tools.

        Raises:
            ValueError: ``request`` is blank.
        """
        tools = list(tools)
        if not tools:
            return []
        return [float(p) for p in self.config.calibration.apply(self.logits(request, need, tools))]

    # ------------------------------------------------------------------ description

    @property
    def calibration(self) -> Calibration:
        return self.config.calibration

    @property
    def encoder(self) -> PairEncoder:
        """The pair tokeniser this scorer feeds the model with (for token counts and tests)."""
        return self._encoder

    @property
    def info(self) -> dict[str, Any]:
        """What is loaded, as JSON-ready plain types (for /health, logs and eval reports)."""
        c = self.config
        return {
            "name": c.name,
            "version": c.version,
            "base_model": c.base_model,
            "max_length": c.max_length,
            "record_format_version": c.record_format_version,
            "record": {"max_description_chars": c.max_description_chars, "examples": c.examples,
                       **({"parameters": c.parameters} if c.parameters else {})},
            "truncation": c.truncation,
            "calibration": c.calibration.to_dict(),
            "quantization": c.quantization,
            "training_data_hash": c.training_data_hash,
            "package_version": c.package_version,
            "inputs": list(self._feeds),
            "path": str(self.path),
            "threads": self.threads,
            "batch_size": self.batch_size,
            "workers": self.workers,
        }

    def __repr__(self) -> str:
        return f"Scorer({self.config.name!r}, version={self.config.version!r}, path={str(self.path)!r})"
