"""Obvious secrets in what a user typed, masked before anything is stored.

A request can carry a password, an API key or a token ("log in with password=hunter2", "use
sk-live-…", "Authorization: Bearer eyJ…"). Learning from use keeps requests on disk (learned
examples, the feedback log); :func:`redact_secrets` masks what is plainly a secret first:

* ``key=value`` / ``key: value`` / ``key is value`` where the key names a secret (password, passwd,
  pwd, passphrase, secret, token, api key, access key, private key, client secret, auth, credentials);
* ``Bearer …`` and ``Basic …`` credentials;
* well-known key shapes (``sk-…``, ``ghp_…``, ``github_pat_…``, ``xox?-…``, ``glpat-…``, ``AKIA…``,
  ``AIza…``), JSON Web Tokens, and PEM private-key blocks;
* credentials inside URLs (``user:pass@host``, query values named like secrets).

It errs toward keeping words: a long random-looking word is not masked unless it has a key's
shape or sits after a secret's name, so ordinary requests (ids, file names, versions) survive.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redact_secrets"]

MASK = "[redacted]"

_KEYWORD = (r"(?:pass(?:word|wd|phrase)?|pwd|secret|client[ _-]?secret|(?:api|access|secret|private|auth)[ _-]?key|"
            r"api[ _-]?token|access[ _-]?token|refresh[ _-]?token|auth[ _-]?token|token|credentials?|otp|pin)")
# "password=x", "password: x", "password is x", "api key 'x'" (the value is one word, quoted or not)
_KEYED = re.compile(
    rf"(?i)\b({_KEYWORD})(\s*(?:=|:|\bis\b|\bto\b|\bas\b)\s*|\s+)([\"']?)([^\s\"',;]{{3,}})\3")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+([A-Za-z0-9\-._~+/]{8,}=*)")
_SHAPES = re.compile(
    r"\b(?:sk|pk|rk)[-_](?:live|test|proj|ant)?[-_]?[A-Za-z0-9\-_]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}|\bglpat-[A-Za-z0-9\-_]{16,}"
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b|\bAIza[A-Za-z0-9\-_]{30,}"
    r"|\beyJ[A-Za-z0-9\-_]{8,}\.[A-Za-z0-9\-_]{8,}\.[A-Za-z0-9\-_]{8,}")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S)
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://)([^\s/@:]+):([^\s/@]+)@")
_QUERY_SECRET = re.compile(rf"(?i)([?&;]{_KEYWORD}[a-z_]*=)([^&\s#]+)")
# Words that follow "password"/"token" in ordinary requests and are not the secret itself.
_NOT_A_VALUE = {"reset", "for", "of", "the", "a", "an", "my", "our", "your", "their", "and", "or", "in", "on",
                "with", "from", "that", "this", "expired", "expires", "expiry", "policy", "manager", "field",
                "change", "changed", "rotation", "rotate", "strength", "hash", "hashes", "login", "page", "form",
                "usage", "limit", "limits", "count", "counts", "budget", "management", "list", "lists", "value",
                "values", "settings", "setting", "vault", "store", "stored", "protected", "required", "generator",
                "length", "recovery", "request", "requests", "scopes", "scope", "refresh", "auth", "key", "keys",
                "id", "ids", "name", "names", "type", "types", "has", "have", "was", "were", "will", "should",
                "must", "can", "could", "would", "be", "been", "not", "no", "is", "are", "to", "as", "at", "by",
                "it", "me", "them", "so", "but", "if", "when", "where", "which", "who", "what", "how", "why",
                "please", "again", "anymore", "too", "also", "here", "there", "now", "later", "today"}


def _keyed(m: re.Match) -> str:
    value = m.group(4)
    sep = m.group(2)
    # "password reset link", "token budget": a bare space after the key and an ordinary word is no secret.
    if value.lower().strip(".!?") in _NOT_A_VALUE or (not sep.strip() and value.isalpha() and value.islower()):
        return m.group(0)
    return f"{m.group(1)}{sep}{m.group(3)}{MASK}{m.group(3)}"


def redact_secrets(text: str) -> str:
    """``text`` with obvious secrets replaced by ``[redacted]`` (see the module notes); other text unchanged."""
    if not text:
        return text
    text = _PEM.sub(MASK, text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _SHAPES.sub(MASK, text)
    return _KEYED.sub(_keyed, text)
