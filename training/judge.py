"""Judges: the probability that a candidate tool itself does what a user asked.

Two backends share one interface, ``judge(query, need, tool) -> Judgment``:

* :class:`EndpointJudge` asks an OpenAI-compatible endpoint to answer ``yes`` or ``no``
  with ``logprobs=true, top_logprobs=5`` and reads ``P(yes) = e^yes / (e^yes + e^no)``
  from the first answer token (``source="logprobs"``). Where the endpoint gives no
  log-probabilities (or rejects the parameter), it asks instead for a probability in
  words and parses it (``source="verbalised"``).
* :class:`LlamaCppJudge` runs a local GGUF model with llama-cpp-python (optional
  extra ``toolrank[llama]``) and reads the same two tokens from the last position's
  logits (``source="logits"``).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from retrieval.catalog.model import Tool
from retrieval.writing.llm import ChatClient, EndpointError, GenerationError, MalformedReplyError, TokenLogprob
from training.prompting import judgment_messages

__all__ = [
    "JUDGE_METHODS",
    "EndpointJudge",
    "Judgment",
    "LlamaCppJudge",
    "MissingDependencyError",
    "p_yes_from_logits",
    "p_yes_from_logprobs",
    "p_yes_from_text",
    "render_chat",
]

logger = logging.getLogger(__name__)

JUDGE_METHODS = ("auto", "logprobs", "verbalised")
Source = Literal["logprobs", "verbalised", "logits"]

_YES = ("yes", "Yes", "YES", " yes", " Yes", " YES")
_NO = ("no", "No", "NO", " no", " No", " NO")


class MissingDependencyError(GenerationError):
    """An optional package this backend needs is not installed."""


@dataclass(frozen=True)
class Judgment:
    """A judged probability and how it was obtained."""

    p_yes: float
    source: Source


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _logsumexp(values: Sequence[float]) -> float:
    m = max(values)
    if m == float("-inf"):
        return m
    return m + math.log(sum(math.exp(v - m) for v in values))


def _word(token: str) -> str:
    return token.strip().strip(".,!:;\"'`*").lower()


def p_yes_from_logprobs(tokens: Sequence[TokenLogprob]) -> float | None:
    """``e^yes / (e^yes + e^no)`` at the first non-blank answer token.

    All spellings of a word among the listed alternatives count (``yes``, ``Yes``,
    `` yes``...). When only one of the two words is listed, the other's log-probability
    is taken as the lowest listed one (an upper bound on it).

    Returns:
        The probability, or None when neither word is among the alternatives.
    """
    for tok in tokens:
        if not tok.token.strip():
            continue
        yes = [lp for t, lp in tok.top.items() if _word(t) == "yes"]
        no = [lp for t, lp in tok.top.items() if _word(t) == "no"]
        if not yes and not no:
            return None
        floor = min(tok.top.values())
        ly = _logsumexp(yes) if yes else floor
        ln = _logsumexp(no) if no else floor
        return _sigmoid(ly - ln)
    return None


def p_yes_from_logits(yes_logits: Sequence[float], no_logits: Sequence[float]) -> float:
    """P(yes) from raw logits of the spellings of ``yes`` and of ``no``."""
    return _sigmoid(_logsumexp([float(v) for v in yes_logits]) - _logsumexp([float(v) for v in no_logits]))


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(%?)")


def p_yes_from_text(text: str) -> float | None:
    """A verbalised probability: ``{"p_yes": 0.85}``, ``0.85``, ``85%``, or a bare yes/no.

    Returns:
        The probability in [0, 1], or None when the text holds none.
    """
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("p_yes", "probability", "p"):
            value = data.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
                return float(value)
    elif isinstance(data, (int, float)) and not isinstance(data, bool) and 0 <= data <= 1:
        return float(data)
    for match in _NUMBER.finditer(text):
        value = float(match.group(1)) / (100 if match.group(2) else 1)
        if 0 <= value <= 1:
            return value
    word = _word(text.split()[0]) if text.split() else ""
    if word == "yes":
        return 1.0
    if word == "no":
        return 0.0
    return None


class EndpointJudge:
    """Judges through an OpenAI-compatible endpoint.

    Args:
        client: the endpoint client.
        method: ``logprobs`` (fail if the endpoint gives none), ``verbalised`` (always ask
            for a stated probability), or ``auto`` (log-probabilities where the endpoint
            returns them, a stated probability where it does not).
        top_logprobs: alternatives requested per token.
    """

    def __init__(self, client: ChatClient, *, method: str = "auto", top_logprobs: int = 5):
        if method not in JUDGE_METHODS:
            raise GenerationError(f"judge method {method!r} is not one of {', '.join(JUDGE_METHODS)}")
        self.client = client
        self.method = method
        self.top_logprobs = top_logprobs
        self._use_logprobs = method != "verbalised"

    @property
    def model(self) -> str:
        return self.client.config.model

    def _stop_logprobs(self, why: str) -> None:
        if self._use_logprobs:
            logger.warning("%s; judging with verbalised probabilities instead", why)
        self._use_logprobs = False

    def __call__(self, query: str, need: str | None, tool: Tool) -> Judgment:
        if self._use_logprobs:
            try:
                reply = self.client.chat(judgment_messages(query, need, tool, "logprobs"),
                                         temperature=0.0, max_tokens=3, logprobs=True,
                                         top_logprobs=self.top_logprobs)
            except EndpointError as exc:
                if self.method != "auto" or exc.status != 400 or "logprob" not in str(exc).lower():
                    raise
                self._stop_logprobs(f"the endpoint rejects logprobs ({exc.status})")
            else:
                if reply.logprobs is None:
                    if self.method == "logprobs":
                        raise GenerationError(
                            f"{self.client.config.url} returned no log-probabilities; "
                            "use --method auto or --method verbalised")
                    self._stop_logprobs("the endpoint returns no log-probabilities")
                else:
                    p = p_yes_from_logprobs(reply.logprobs)
                    if p is not None:
                        return Judgment(p, "logprobs")
                    if self.method == "logprobs":
                        raise GenerationError(
                            f"neither 'yes' nor 'no' among the top {self.top_logprobs} first tokens "
                            f"(reply {reply.text!r}); use --method auto to fall back to a stated probability")
                    logger.debug("no yes/no among top logprobs for %s; asking in words", tool.id)
        reply = self.client.chat(judgment_messages(query, need, tool, "verbalised"),
                                 temperature=0.0, max_tokens=20)
        p = p_yes_from_text(reply.text)
        if p is None:
            raise MalformedReplyError(
                f"the judge's reply {reply.text[:120]!r} holds no probability; "
                "the model may not follow the judgment prompt")
        return Judgment(p, "verbalised")


def render_chat(messages: Sequence[Mapping[str, str]], template: str | None) -> str:
    """A prompt string from chat messages: the model's Jinja chat template, else ChatML."""
    if not template:
        parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
        return "".join(parts) + "<|im_start|>assistant\n"
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def _raise(message: str) -> None:
        raise GenerationError(f"the model's chat template failed: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=list(messages), add_generation_prompt=True,
                                             bos_token="", eos_token="", raise_exception=_raise)


def _load_llama(model_path: str | Path, **kwargs: Any) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError:
        raise MissingDependencyError(
            "the llama-cpp backend needs llama-cpp-python: pip install 'toolrank[llama]' "
            "(or pip install llama-cpp-python==0.3.36)") from None
    path = Path(model_path)
    if not path.is_file():
        raise GenerationError(f"GGUF model {str(path)!r} not found; pass --gguf PATH to a .gguf file")
    return Llama(model_path=str(path), logits_all=False, verbose=False, **kwargs)


class LlamaCppJudge:
    """Judges with a local GGUF model through llama-cpp-python (``pip install 'toolrank[llama]'``).

    Reads the last position's logits after the chat prompt (``llm._ctx.get_logits()``,
    llama-cpp-python 0.3.x) and compares the spellings of ``yes`` and ``no``. Calls are
    serialised: one llama context is not thread-safe.

    Args:
        model_path: a ``.gguf`` file.
        n_ctx: context length; longer prompts raise GenerationError.
        llm: an already loaded ``llama_cpp.Llama`` (then ``model_path`` only names it).
        **llama_kwargs: passed to ``llama_cpp.Llama`` (e.g. ``n_gpu_layers``, ``n_threads``).

    Raises:
        MissingDependencyError: llama-cpp-python is not installed.
    """

    def __init__(self, model_path: str | Path, *, n_ctx: int = 4096, llm: Any = None,
                 **llama_kwargs: Any):
        self.model = Path(model_path).name
        self.n_ctx = n_ctx
        self._llm = llm if llm is not None else _load_llama(model_path, n_ctx=n_ctx, **llama_kwargs)
        self._lock = threading.Lock()
        metadata = getattr(self._llm, "metadata", None) or {}
        self._template = metadata.get("tokenizer.chat_template")
        self._yes = self._single_tokens(_YES)
        self._no = self._single_tokens(_NO)
        if not self._yes or not self._no:
            raise GenerationError(f"{self.model}: 'yes' or 'no' is not a single token in this vocabulary")

    def _single_tokens(self, words: Sequence[str]) -> list[int]:
        ids = []
        for w in words:
            toks = self._llm.tokenize(w.encode("utf-8"), add_bos=False, special=False)
            if len(toks) == 1 and toks[0] not in ids:
                ids.append(toks[0])
        return ids

    def __call__(self, query: str, need: str | None, tool: Tool) -> Judgment:
        import numpy as np

        prompt = render_chat(judgment_messages(query, need, tool, "logprobs"), self._template)
        with self._lock:
            tokens = self._llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
            if len(tokens) >= self.n_ctx:
                raise GenerationError(f"judgment prompt of {len(tokens)} tokens does not fit "
                                      f"n_ctx={self.n_ctx}; raise --n-ctx")
            self._llm.reset()
            self._llm.eval(tokens)
            logits = np.ctypeslib.as_array(self._llm._ctx.get_logits(), shape=(self._llm.n_vocab(),))
            p = p_yes_from_logits(logits[self._yes], logits[self._no])
        return Judgment(p, "logits")
