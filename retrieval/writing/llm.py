"""A small client for OpenAI-compatible chat-completions endpoints.

One request at a time per call, safe to share between threads. Transient failures
(429, 5xx, timeouts, dropped connections) are retried with exponential backoff;
an endpoint that cannot work (connection refused, 401/403, 404, other 4xx) raises
:class:`EndpointError` at once, and a reply that is not a chat completion raises
:class:`MalformedReplyError`. Both are ``ValueError`` subclasses whose message says
what to fix.

Configuration comes from ``TOOLRANK_LLM_BASE_URL``, ``TOOLRANK_LLM_MODEL`` and
``TOOLRANK_LLM_API_KEY`` (read by :class:`retrieval.settings.LLMSettings` alone) unless given
explicitly (see :meth:`LLMConfig.from_env`).

Used at index time (example requests for a user's tools, :mod:`retrieval.index.examples`) and by the
training data generator (``toolrank generate``, :mod:`training.generate`), which imports it from here.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import httpx

from retrieval.settings import LLMSettings
from scorer.locations import variable

__all__ = [
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "ChatClient",
    "ChatReply",
    "EndpointError",
    "GenerationError",
    "LLMConfig",
    "MalformedReplyError",
    "TokenLogprob",
]

logger = logging.getLogger(__name__)

ENV_BASE_URL = variable(LLMSettings, "base_url")
ENV_MODEL = variable(LLMSettings, "model")
ENV_API_KEY = variable(LLMSettings, "api_key")

MAX_REPLY_BYTES = 8 * 1024 * 1024     # a chat completion is kilobytes; more is a broken endpoint
_TRANSIENT_HTTP_ERRORS = (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError,
                          httpx.WriteError)


class GenerationError(ValueError):
    """Data generation cannot go on; the message says why and what to change."""


class EndpointError(GenerationError):
    """The endpoint refused or cannot serve the request (bad URL, key, model, parameters).

    Attributes:
        status: the HTTP status code, or None when no response came back.
        body: the start of the response body, for diagnosis.
    """

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status = status
        self.body = body


class MalformedReplyError(GenerationError):
    """The endpoint answered, but not with something this generator can use."""


@dataclass(frozen=True, kw_only=True)
class LLMConfig:
    """Where and how to reach the endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions``
            is appended unless already there).
        model: the model name the endpoint serves.
        api_key: sent as ``Authorization: Bearer ...`` when given.
        timeout: seconds per request.
        max_retries: retries after the first attempt on 429, 5xx and timeouts.
        backoff: seconds before the first retry; doubles each retry (with jitter).
        max_backoff: cap on one wait.
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_retries: int = 5
    backoff: float = 1.0
    max_backoff: float = 60.0

    def __post_init__(self) -> None:
        if not self.base_url or not self.base_url.startswith(("http://", "https://")):
            raise GenerationError(
                f"base URL {self.base_url!r} is not an http(s) URL; pass --base-url or set "
                f"{ENV_BASE_URL}, e.g. http://127.0.0.1:8000/v1"
            )
        if not self.model or not self.model.strip():
            raise GenerationError(f"no model name given; pass --model or set {ENV_MODEL}")
        if self.timeout <= 0:
            raise GenerationError(f"timeout {self.timeout} must be > 0 seconds")
        if self.max_retries < 0:
            raise GenerationError(f"max_retries {self.max_retries} must be >= 0")
        if self.backoff < 0 or self.max_backoff < 0:
            raise GenerationError(f"backoff {self.backoff} and max_backoff {self.max_backoff} must be >= 0")

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        return base if base.endswith("/chat/completions") else base + "/chat/completions"

    @classmethod
    def from_env(cls, *, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None, **kwargs: Any) -> "LLMConfig":
        """A config from explicit values, falling back to the ``TOOLRANK_LLM_*`` variables (:class:`LLMSettings`).

        Raises:
            GenerationError: no base URL or no model is given either way.
        """
        settings = LLMSettings()
        base_url = base_url or settings.base_url or ""
        model = model or settings.model or ""
        if not base_url:
            raise GenerationError(
                f"no endpoint given: pass --base-url or set {ENV_BASE_URL} "
                "(an OpenAI-compatible API root such as http://127.0.0.1:8000/v1)"
            )
        if not model:
            raise GenerationError(f"no model given: pass --model or set {ENV_MODEL}")
        key = api_key or (settings.api_key.get_secret_value() if settings.api_key else None)
        return cls(base_url=base_url, model=model, api_key=key or None, **kwargs)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability, and the alternatives the endpoint listed."""

    token: str
    logprob: float
    top: dict[str, float]


@dataclass(frozen=True)
class ChatReply:
    """The first choice of a chat completion."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None
    finish_reason: str | None = None


def _snippet(text: str, n: int = 300) -> str:
    """A short, one-line piece of an upstream body for a message, with obvious secrets masked (an endpoint
    that echoes the request's Authorization header must not put the key into an answer or a log)."""
    from retrieval.redaction import redact_secrets

    text = redact_secrets(" ".join(text.split()))
    return text if len(text) <= n else text[:n] + "..."


def _parse_logprobs(raw: Any) -> tuple[TokenLogprob, ...] | None:
    """OpenAI's ``choice.logprobs.content``; None when absent or in an unknown shape."""
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), list):
        return None
    out = []
    for entry in raw["content"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return None
        try:
            logprob = float(entry.get("logprob"))
        except (TypeError, ValueError):
            return None
        top: dict[str, float] = {}
        alts = entry.get("top_logprobs") or []
        if isinstance(alts, dict):  # some servers: {token: logprob}
            alts = [{"token": k, "logprob": v} for k, v in alts.items()]
        for alt in alts:
            try:
                tok, lp = alt["token"], float(alt["logprob"])
            except (KeyError, TypeError, ValueError):
                continue
            if isinstance(tok, str):
                top[tok] = max(lp, top.get(tok, float("-inf")))
        top.setdefault(entry["token"], logprob)
        out.append(TokenLogprob(entry["token"], logprob, top))
    return tuple(out)


class ChatClient:
    """Calls ``POST {base_url}/chat/completions``; thread-safe.

    Args:
        config: endpoint settings.
        max_connections: connection-pool size (match the generator's concurrency).
        sleep: the wait function between retries (tests pass a no-op).
    """

    def __init__(self, config: LLMConfig, *, max_connections: int = 8,
                 sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self._sleep = sleep
        headers = {"Content-Type": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._cancelled = False
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(config.timeout),
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
        )

    def close(self) -> None:
        self._http.close()

    def cancel(self) -> None:
        """Stop (a run is stopping with its process): a call in flight ends with the reply it is reading (a
        blocked read cannot be interrupted from another thread) or at once if its connection closes under it,
        it is not retried, and every call after this raises :class:`EndpointError`, as a failing endpoint does."""
        self._cancelled = True
        self._http.close()

    def __enter__(self) -> "ChatClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        delay = min(self.config.max_backoff, self.config.backoff * (2 ** attempt))
        delay *= 0.5 + random.random() / 2
        if retry_after:
            try:
                delay = min(self.config.max_backoff, max(delay, float(retry_after)))
            except ValueError:
                pass
        if delay > 0:
            self._sleep(delay)

    def _snip(self, text: str, n: int = 300) -> str:
        """:func:`_snippet`, with this client's own API key masked wherever the body repeats it."""
        key = self.config.api_key
        if key and len(key) >= 4:
            text = text.replace(key, "[redacted]")
        return _snippet(text, n)

    def _posted(self, url: str, body: dict[str, Any]) -> httpx.Response:
        """:meth:`_post`, ended by :meth:`cancel` as an :class:`EndpointError` whatever the closed connection raised."""
        try:
            return self._post(url, body)
        except Exception:
            if self._cancelled:
                raise EndpointError(f"the call to {url} was cancelled: the run is stopping") from None
            raise

    def _post(self, url: str, body: dict[str, Any]) -> httpx.Response:
        """One POST whose whole reply must arrive within ``config.timeout`` seconds and ``MAX_REPLY_BYTES``
        (httpx's timeout bounds each read, so an endpoint that trickles a byte at a time would hold the call
        for ever); a slower reply is a timeout, retried like one."""
        deadline = time.monotonic() + self.config.timeout
        with self._http.stream("POST", url, json=body) as resp:
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the whole reply took longer than {self.config.timeout:g} s")
                if size > MAX_REPLY_BYTES:
                    raise MalformedReplyError(f"{url} sent more than {MAX_REPLY_BYTES // 1024 // 1024} MiB; "
                                              "a chat completion is far smaller")
            return httpx.Response(resp.status_code, headers=resp.headers, content=b"".join(chunks),
                                  request=resp.request)

    def chat(self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.0,
             max_tokens: int | None = None, logprobs: bool = False,
             top_logprobs: int | None = None, extra: Mapping[str, Any] | None = None) -> ChatReply:
        """One chat completion, with retries on transient failures.

        Args:
            messages: ``[{"role": ..., "content": ...}, ...]``.
            temperature: sampling temperature.
            max_tokens: cap on generated tokens.
            logprobs: ask for token log-probabilities (``top_logprobs`` alternatives each).
            top_logprobs: how many alternatives per token (OpenAI allows up to 20).
            extra: further request fields, passed through.

        Returns:
            The first choice's text, and its log-probabilities when the endpoint gave them.

        Raises:
            EndpointError: the endpoint is unreachable, rejects the request, or keeps
                failing after ``max_retries`` retries.
            MalformedReplyError: the reply is not a chat completion.
        """
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": [dict(m) for m in messages],
                                "temperature": temperature}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if logprobs:
            body["logprobs"] = True
            if top_logprobs:
                body["top_logprobs"] = top_logprobs
        if extra:
            body.update(extra)
        last = ""
        for attempt in range(cfg.max_retries + 1):
            if attempt:
                logger.info("retrying %s (attempt %d of %d): %s", cfg.url, attempt + 1,
                            cfg.max_retries + 1, last)
            retry_after = None
            if self._cancelled:
                raise EndpointError(f"the call to {cfg.url} was cancelled: the run is stopping")
            try:
                resp = self._posted(cfg.url, body)
            except httpx.ConnectError as exc:
                raise EndpointError(
                    f"cannot connect to {cfg.url} ({exc}); is the server running? "
                    f"Check --base-url / {ENV_BASE_URL}"
                ) from None
            except _TRANSIENT_HTTP_ERRORS as exc:
                last = f"{type(exc).__name__}: {exc or 'no detail'}"
            else:
                status = resp.status_code
                if status == 429 or status >= 500:
                    last = f"HTTP {status}: {self._snip(resp.text, 120)}"
                    retry_after = resp.headers.get("retry-after")
                elif status in (401, 403):
                    raise EndpointError(
                        f"{cfg.url} refused the credentials (HTTP {status}); set "
                        f"{ENV_API_KEY} or pass --api-key", status, self._snip(resp.text))
                elif status == 404:
                    raise EndpointError(
                        f"{cfg.url} answered 404 for model {cfg.model!r}: the URL or the model "
                        f"does not exist there ({self._snip(resp.text, 200)}); check --base-url "
                        f"(usually ending in /v1) and --model", status, self._snip(resp.text))
                elif status >= 400:
                    raise EndpointError(
                        f"{cfg.url} rejected the request (HTTP {status}): {self._snip(resp.text)}",
                        status, self._snip(resp.text))
                else:
                    return self._parse(resp)
            if attempt < cfg.max_retries:
                self._wait(attempt, retry_after)
        raise EndpointError(
            f"{cfg.url} kept failing after {cfg.max_retries + 1} attempts (last: {last}); "
            "try again later, lower --concurrency, or raise --timeout / --max-retries"
        )

    def _parse(self, resp: httpx.Response) -> ChatReply:
        url = self.config.url
        try:
            data = resp.json()
        except ValueError:
            raise MalformedReplyError(
                f"{url} answered HTTP {resp.status_code} with a body that is not JSON: "
                f"{_snippet(resp.text, 200)!r}; is --base-url an OpenAI-compatible API root?"
            ) from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MalformedReplyError(
                f"{url} answered without a 'choices' list: {_snippet(str(data), 200)!r}; "
                "is it an OpenAI-compatible chat-completions endpoint?")
        choice = choices[0]
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise MalformedReplyError(
                f"{url} answered without text in choices[0].message.content "
                f"({_snippet(str(choice), 200)!r})")
        return ChatReply(content, _parse_logprobs(choice.get("logprobs")), choice.get("finish_reason"))
