"""Explicit server mentions: "use github to ...", "via linear", "the Memory server".

A request that names a catalog server explicitly restricts the search to that server.
:class:`ServerMentionMatcher` is built once per catalog (it is cheap to rebuild after an
update) and answers :meth:`ServerMentionMatcher.find` with the servers named.

Matching rules, in short:

* Names are compared normalised: case, spaces, hyphens, underscores and dots are ignored,
  so "fire crawl", "FireCrawl" and "firecrawl" are one name. Leading/trailing "mcp",
  "server", "api" (and "ai", "client") words are optional, a " - suffix" ("Slack - nourl") or a
  parenthetical ("Linear (Go)") may be left out, and so may a domain ending ("Monday.com").
  One mention can therefore name several servers ("slack" names "Slack" and
  "Slack - nourl"); all of them are returned.
* A name only counts in an explicit form: after a trigger word (use, using, via, with,
  through, from, on, in, into, to, ask, call, ...) optionally followed by "the"/"my"/"our",
  or continuing a list of mentions ("via github, gitlab and the datadog tools");
  followed by "server"/"mcp"/"tool(s)" (or, after a trigger, "integration"/"connector");
  at the start of the request as "<name>:", "<name> <tool_identifier>" or "@name"; or as a
  full catalog name that says "MCP"/"Server" itself ("Golang Filesystem Server").
* Names are sorted into three tiers:

  - *common*: ordinary words ("Time", "Memory", "Fetch", "Git", "JSON", "Everything",
    "Data Exploration", ...) need the strict form: followed by server/mcp/tool(s)
    ("the Memory server", "via the fetch tool", "using the git mcp", "Memory MCP").
  - *ambiguous*: dictionary words that are also product names ("Linear", "Slack",
    "Docker", "Perplexity", ...) count after a trigger only when what follows does not
    continue an ordinary phrase: "via linear" and "in Linear, create" count,
    "with linear regression" does not.
  - *distinctive*: everything else ("GitHub", "Firecrawl", "Atlassian") counts in any
    explicit form and tolerates one typo (edit distance 1) when the name is 7 or more
    characters long.

  A name written exactly as the catalog writes it with inner capitals or joiners
  ("CodeLogic", "Terminal-Control", "eSignatures") counts as distinctive.
* A name that is the first half of a compound ("github-flavored", "github.com",
  "weather_server") is not a mention.

The word lists below are curated for requests to tools; pass ``common_words`` /
``ambiguous_words`` to adjust them for another catalog.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Iterable, Literal

__all__ = [
    "ServerMentionMatcher",
    "COMMON_WORDS",
    "AMBIGUOUS_WORDS",
    "Tier",
]

logger = logging.getLogger(__name__)

Tier = Literal["common", "ambiguous", "distinctive"]
_TIER_ORDER: dict[str, int] = {"common": 0, "ambiguous": 1, "distinctive": 2}

# Words that name a request's subject in ordinary language. A server name made only of
# these needs the strict form. General English first, then generic tech vocabulary.
COMMON_WORDS: frozenset[str] = frozenset("""
a about above account action actions activity add address advanced after again agent agents
ai alert alerts all an analysis analytics analyze and answer any app apps archive art article
articles as ask assistant at audio auth author auto available back backup bank base basic
batch best better big bill bills board book books bot box brain browse browser budget bug
build builder business by cache calendar call calculator camera car card cards care cart
case cat catalog change channel channels chart charts chat check chess city class clean
clear client clock cloud code coin collection color command commands comment comments
commit company compare complete completion completions computer config connect contact
contacts content context control convert copy cost count create credit cron csv current
custom customer daily dashboard data database databases dataset datasets date day debug
deep default delete deploy design desktop detail details dev device diff direct directory
disk doc docs document documents domain download draft draw drive easy edit editor email
emails engine error errors event events everything example excel executor expert explorer
exploration export extract fast feed fetch file files filesystem filter finance financial find fix
flow folder form format free friend fun function game games general generation generator
get git global go good graph great group guide hash health help history home hook host
hotel hour html http https hub idea image images import index info information input
insights inspect instance internet invoice issue issues item items job jobs json key keys
lab label language last launch layout learn library life light line link links list live
load local location lock log login logs long lookup mail main make manage management manager
map maps market marketing marketplace math media meeting meetings memory message messages
meta metric metrics mobile model models monday money monitor month movie music my name
national native network new news next note notes notify number object office online open
order orders output page pages panel park parks partners password path pay payment payments
pdf people person phone photo photos pipeline place plan planner platform play player
plugin point post posts power present preview price print private process product products
profile project projects prompt prompts proxy public query question queue quick rag random
read record records remote report reports repo request resource resources rest result
results review rich run safe sandbox save schedule schema scholarly score scratch screen
script scripts search secret secrets secure security send sequential server service
services session settings setup share sheet sheets shell shop shopping short shortcut
shortcuts simple simulator site size smart social solver sound source space spaces speech
sql stack start state status stock storage store stream string studio style summary
support sync system table tables task tasks team teams template terminal test tests text
thinking ticket tickets time timer today todo todolist token tool toolbox tools top track
tracker trade training transfer translate translation travel trend tree trip tv type ui
update upload url use user users utility value vector version video
videos view viewer virtual vision voice wallet watch weather web website week weight
window windows word words work workflow workspace world write year your zone
api apis cli csv xml yaml regex python javascript typescript java rust golang kotlin swift
ruby php perl scala haskell dart outline create proxy coin phone graphql openapi
kubernetes k8s lsp ios android linux macos unix llm llms gpu cpu ml nlp ocr http2 sdk mcp
datalog goodnews codelogic
""".split())

# Dictionary words (and a few all-common phrases, spaces removed) that are also product
# names: they count after a trigger only when the next word does not continue an ordinary
# phrase ("with linear regression"), and take no typos.
AMBIGUOUS_WORDS: frozenset[str] = frozenset("""
linear slack discord discourse docker ghost glean sentry stripe chroma pinecone
airflow intercom postman telegram snowflake reaper replicate octagon axiom neon momento
raindrop placid lingo consul nomad obsidian perplexity postgresql postgres sqlite mysql
evm dicom jdbc whois notion zoom signal outlook teams asana shortcut goat ramp unstructured
vectorize esignatures
homeassistant everythingsearch anychatcompletions worldbankdata worldbankdataapi
""".split())

# Words that may stand around a name without being part of it ("sever": the shipped
# catalog's own spelling in "Multicluster-MCP-Sever").
_AFFIX_LEADING = frozenset({"mcp"})
_AFFIX_TRAILING = frozenset({"mcp", "server", "sever", "api", "ai", "client"})
# Affix words that carry the strictness themselves ("Phone MCP").
_STRICT_AFFIXES = frozenset({"mcp", "server", "sever"})

_TRIGGERS = frozenset({
    "use", "uses", "using", "via", "with", "through", "thru", "from", "on", "in", "inside",
    "into", "to", "ask", "call", "calling", "query",
})
_DETERMINERS = frozenset({"the", "my", "our", "your", "their"})
_SUFFIXES = frozenset({"server", "servers", "mcp", "tool", "tools", "toolset", "toolkit"})
# Count only after a trigger: "our GitHub integration" is often another product's feature.
_WEAK_SUFFIXES = frozenset({"integration", "integrations", "connector", "connectors", "plugin", "plugins"})
# Words that may follow an ambiguous name after a trigger ("via linear to ...").
_FOLLOW_OK = frozenset("""
to and or for about so then too as when if please instead now with from in on at by into via
using the a an my our your this these those me us i we you it its what who how why where
whether also first only directly rather not here there since because before after until
while once all any every each is are was were be can could should would will do does did
has have let lets just again today tomorrow yesterday
account accounts workspace workspaces instance instances project projects board boards
channel channels repo repos repository repositories org organization team issue issues
ticket tickets message messages dm dms page pages space spaces bot app cloud database db
cluster clusters dashboard dashboards container containers chat chats group groups thread
threads subscription subscriptions tenant environment region bucket buckets folder folders
index indexes collection collections table tables webhook webhooks
get list create show run add update delete remove post send make open close find patch pull
push read write fetch upload download check start stop set
""".split())
# Words that may stand right before "<name> server" ("the Memory server", "our local Git mcp").
_BARE_BEFORE = _TRIGGERS | _DETERMINERS | frozenset("""
a an this that these those and or official local remote hosted existing configured connected
installed default new same
""".split())
# A re-segmented name ("fire crawl" for "firecrawl") may not be built from these.
_FUNCTION_WORDS = frozenset("""
a an the is are was be am in on at to of or and as by it if so no not we i you he she they
me my our us do go up for with from this that
""".split())

_WORD_RE = re.compile(r"[^\W_]+")
_TIGHT_JOIN_RE = re.compile(r"[-_.]")
_SPAN_JOIN_RE = re.compile(r"[ \t]+|[ \t]*[-_][ \t]*|\.")
_WS_RE = re.compile(r"\s+")
_SUFFIX_JOIN_RE = re.compile(r"[ \t]+|[ \t]*-[ \t]*")
# A tool name right after a server name: "Gitee get_pull_detail", "Telegram listMessages".
_IDENTIFIER_RE = re.compile(
    r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)+|[a-z]{2,}[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+")
_PAREN_RE = re.compile(r"\s*\([^)]*\)")
_INNER_CAPITAL_RE = re.compile(r"[a-z][A-Z]")
_INNER_JOIN_RE = re.compile(r"[A-Za-z0-9][-_.][A-Za-z0-9]")
_DOMAIN_RE = re.compile(r"\.(?:com|io|dev|app|ai|org|net)\b", re.IGNORECASE)
_CLOSING_PUNCT = tuple(",.;:!?)]}\"'’”…")

_FUZZY_MIN_LEN = 7


@dataclass
class _Alias:
    key: str
    tier: Tier
    servers: list[str] = field(default_factory=list)
    spellings: set[tuple[str, ...]] = field(default_factory=set)
    self_strict: bool = False       # spelled with "mcp"/"server": a mention by itself
    # catalog spellings that are unmistakable when written exactly ("Terminal-Control",
    # "CodeLogic"): case-sensitive ones (inner capitals) and lowercased ones (joiners)
    literal_case: set[str] = field(default_factory=set)
    literal_nocase: set[str] = field(default_factory=set)
    # servers + servers whose name extends this one ("mongodb" -> "MongoDB Lens")
    family: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Evidence:
    trigger: bool       # after a trigger word (or continues a list of mentions)
    mention: bool       # written "@name" at the start of the request
    at_start: bool      # the request's first word
    mcp_prefix: bool    # written "mcp <name>"
    bare: bool = True   # not preceded by another modifier ("the Go filesystem server")

    @property
    def any(self) -> bool:
        return self.trigger or self.mention or self.at_start or self.mcp_prefix


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text)]


def _name_variants(name: str) -> set[str]:
    """The written forms a server may be called by, before affix stripping."""
    variants = {name}
    if " - " in name:
        variants.add(name.split(" - ", 1)[0])
    for v in list(variants):
        no_paren = _PAREN_RE.sub(" ", v).strip()
        variants.add(no_paren)
        variants.add(_DOMAIN_RE.sub("", no_paren).strip())
    return {v for v in variants if v}


def _strip_affixes(words: list[str]) -> list[tuple[str, ...]]:
    """``words`` with every combination of leading/trailing affix words removed."""
    out = []
    lo_max = 0
    while lo_max < len(words) and words[lo_max] in _AFFIX_LEADING:
        lo_max += 1
    for lo in range(lo_max + 1):
        hi = len(words)
        while True:
            if lo < hi:
                out.append(tuple(words[lo:hi]))
            if hi - 1 > lo and words[hi - 1] in _AFFIX_TRAILING:
                hi -= 1
            else:
                break
    return out


def _edit_distance_at_most_one(a: str, b: str) -> bool:
    """Optimal-string-alignment distance <= 1 (one insert, delete, substitute or swap)."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    i = 0
    while i < min(la, lb) and a[i] == b[i]:
        i += 1
    if la == lb:
        if a[i + 1:] == b[i + 1:]:
            return True
        return i + 1 < la and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]
    if la > lb:
        return a[i + 1:] == b[i:]
    return a[i:] == b[i + 1:]


def _deletions(key: str) -> set[str]:
    return {key[:i] + key[i + 1:] for i in range(len(key))}


class ServerMentionMatcher:
    """Finds the catalog servers a request names explicitly.

    Args:
        server_names: the catalog's server names (e.g. ``catalog.servers``).
        common_words: words that make a name "common" (strict form only); defaults to
            :data:`COMMON_WORDS`.
        ambiguous_words: dictionary words that are also product names, as normalised keys
            (lowercase, spaces removed: "homeassistant"); defaults to :data:`AMBIGUOUS_WORDS`.
        expand_families: a mention also names the servers whose name extends the mentioned
            one word by word ("MongoDB" -> "MongoDB Lens", "AWS" -> "AWS S3"), so that a
            restriction never drops a server the user would count as "MongoDB".

    Example:
        >>> m = ServerMentionMatcher(["GitHub", "Slack", "Slack - nourl", "Time"])
        >>> m.find("open an issue using github")
        ['GitHub']
        >>> m.find("post it on slack")
        ['Slack', 'Slack - nourl']
        >>> m.find("what time is it in Tokyo?"), m.find("ask the time server")
        ([], ['Time'])
    """

    def __init__(
        self,
        server_names: Iterable[str],
        *,
        common_words: Iterable[str] | None = None,
        ambiguous_words: Iterable[str] | None = None,
        expand_families: bool = True,
    ) -> None:
        self._common = frozenset(COMMON_WORDS if common_words is None else (w.lower() for w in common_words))
        self._ambiguous = frozenset(
            AMBIGUOUS_WORDS if ambiguous_words is None else (w.lower() for w in ambiguous_words))
        self._aliases: dict[str, _Alias] = {}
        self._servers: list[str] = []
        for name in server_names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"server name {name!r} is not a non-empty string: pass catalog.servers")
            if name in self._servers:
                continue
            self._servers.append(name)
            self._add_server(name)
        self._families = expand_families
        self._link_families()
        self._max_words = max((len(s) for a in self._aliases.values() for s in a.spellings), default=0) + 2
        self._fuzzy: dict[str, set[str]] = {}
        for key, alias in self._aliases.items():
            if alias.tier == "distinctive" and len(key) >= _FUZZY_MIN_LEN:
                for variant in _deletions(key) | {key}:
                    self._fuzzy.setdefault(variant, set()).add(key)
        logger.debug("server mention matcher: %d servers, %d aliases", len(self._servers), len(self._aliases))

    # ------------------------------------------------------------------ building

    def _add_server(self, name: str) -> None:
        for variant in _name_variants(name):
            words = _words(variant)
            if not words:
                continue
            literal = variant.strip()
            if _INNER_CAPITAL_RE.search(literal) or _INNER_JOIN_RE.search(literal):
                alias = self._aliases.get("".join(words))
                if alias is None:
                    alias = self._aliases["".join(words)] = _Alias("".join(words), self._tier(tuple(words)))
                if _INNER_CAPITAL_RE.search(literal):
                    alias.literal_case.add(literal)
                else:
                    alias.literal_nocase.add(literal.lower())
            for spelling in _strip_affixes(words):
                key = "".join(spelling)
                tier = self._tier(spelling)
                alias = self._aliases.get(key)
                if alias is None:
                    alias = self._aliases[key] = _Alias(key, tier)
                elif _TIER_ORDER[tier] < _TIER_ORDER[alias.tier]:
                    alias.tier = tier
                alias.spellings.add(spelling)
                alias.self_strict = alias.self_strict or any(w in _STRICT_AFFIXES for w in spelling)
                if name not in alias.servers:
                    alias.servers.append(name)

    def _link_families(self) -> None:
        """Fill each alias's ``family``: its servers, then those of longer names that start
        with one of its spellings word by word ("aws" -> "aws s3", "aws cost explorer")."""
        by_prefix: dict[tuple[str, ...], list[str]] = {}
        for alias in self._aliases.values():
            for spelling in alias.spellings:
                for n in range(1, len(spelling)):
                    bucket = by_prefix.setdefault(spelling[:n], [])
                    bucket.extend(s for s in alias.servers if s not in bucket)
        for alias in self._aliases.values():
            extra = {s for spelling in alias.spellings for s in by_prefix.get(spelling, ())}
            alias.family = list(alias.servers) + [s for s in self._servers
                                                  if s in extra and s not in alias.servers]

    def _tier(self, spelling: tuple[str, ...]) -> Tier:
        if any(w in _STRICT_AFFIXES for w in spelling):
            return "distinctive"          # "Phone MCP" carries its own strictness
        key = "".join(spelling)
        if key in self._ambiguous:
            return "ambiguous"            # curated product names, e.g. "home assistant"
        if key in self._common or all(w in self._common for w in spelling):
            return "common"
        if len(key) <= 2:
            return "common"
        return "distinctive"

    # ------------------------------------------------------------------ inspection

    @property
    def servers(self) -> list[str]:
        """The servers this matcher knows, in catalog order."""
        return list(self._servers)

    def tier(self, server: str) -> Tier:
        """How strictly ``server`` must be named: the loosest tier among its aliases,
        ignoring aliases that contain "mcp"/"server" themselves.

        Raises:
            KeyError: ``server`` is not one of :attr:`servers`.
        """
        if server not in self._servers:
            raise KeyError(f"unknown server {server!r}: not in this matcher's catalog")
        best: Tier = "common"
        for alias in self._aliases.values():
            if server in alias.servers and not any(
                    w in _STRICT_AFFIXES for s in alias.spellings for w in s):
                if _TIER_ORDER[alias.tier] > _TIER_ORDER[best]:
                    best = alias.tier
        return best

    def common_servers(self) -> list[str]:
        """Servers that are only reachable by the strict form ("the Memory server")."""
        return [s for s in self._servers if self.tier(s) == "common"]

    # ------------------------------------------------------------------ matching

    def find(self, request: str, *, loose: bool = False) -> list[str]:
        """The catalog servers ``request`` names explicitly, in order of mention.

        Returns an empty list when no server is named. A mention of a shared base name
        ("slack") returns every server it names ("Slack", "Slack - nourl").

        ``loose``: a distinctive or ambiguous name counts wherever it is written ("send a
        slack msg", "create a linear ticket"), without a trigger word. Too weak to restrict a
        search; used as evidence by the confidence model. Common names still need their form.
        """
        if not isinstance(request, str):
            raise ValueError(f"request must be a string, got {type(request).__name__}")
        text = _Text(request)
        if not text.toks or not self._aliases:
            return []
        toks, seps = text.toks, text.seps
        found: list[str] = []
        last_end = -1       # index of the first token after the previous accepted mention
        i = 0
        while i < len(toks):
            if i > 0 and _TIGHT_JOIN_RE.fullmatch(seps[i]):
                i += 1                      # inside a compound such as "in-memory"
                continue
            evidence = self._evidence(toks, seps, i, last_end)
            hit = self._match_at(text, i, evidence, loose)
            if hit is None and toks[i] == "mcp" and i + 1 < len(toks) and _SUFFIX_JOIN_RE.fullmatch(seps[i + 1]):
                ev = _Evidence(evidence.trigger, evidence.mention, evidence.at_start, True, evidence.bare)
                hit = self._match_at(text, i + 1, ev, loose)
            if hit is None:
                i += 1
                continue
            servers, end = hit
            for s in servers:
                if s not in found:
                    found.append(s)
            if servers:
                last_end = end
            i = max(end, i + 1)
        return found

    def _evidence(self, toks: list[str], seps: list[str], i: int, last_end: int) -> _Evidence:
        ws = bool(_WS_RE.fullmatch(seps[i]))
        trigger = False
        if ws and i >= 1:
            if toks[i - 1] in _TRIGGERS:
                trigger = True
            elif toks[i - 1] in _DETERMINERS and i >= 2 and toks[i - 2] in _TRIGGERS and \
                    _WS_RE.fullmatch(seps[i - 1]):
                trigger = True
        # a list of mentions: "via github, gitlab and the datadog tools"
        if last_end >= 0:
            if last_end == i and re.fullmatch(r"\s*[,&/]\s*", seps[i]):
                trigger = True
            elif ws and last_end == i - 1 and toks[i - 1] in ("and", "or"):
                trigger = True
            elif ws and last_end == i - 2 and toks[i - 2] in ("and", "or") and toks[i - 1] in _DETERMINERS:
                trigger = True
        before = seps[i]
        mention = i == 0 and before.strip() == "@"       # "@handle" elsewhere is usually social
        at_start = i == 0 and not before.strip()
        bare = i == 0 or not ws or trigger or toks[i - 1] in _BARE_BEFORE
        return _Evidence(trigger, mention, at_start, False, bare)

    def _match_at(self, text: "_Text", i: int, ev: _Evidence,
                  loose: bool = False) -> tuple[list[str], int] | None:
        """The longest name starting at token ``i``: ``None`` when there is none, else
        ``(servers, end)`` where ``servers`` is empty if the name is not written as a mention
        (its tokens are still consumed, so no shorter name inside it matches instead)."""
        toks, seps = text.toks, text.seps
        n_tok = len(toks)
        for n in range(min(self._max_words, n_tok - i), 0, -1):
            if any(not _SPAN_JOIN_RE.fullmatch(seps[j]) for j in range(i + 1, i + n)):
                continue
            words = tuple(toks[i:i + n])
            key = "".join(words)
            alias = self._aliases.get(key)
            if alias is not None and not self._spelling_ok(alias, words):
                alias = None
            fuzzy = False
            if alias is None and len(key) >= _FUZZY_MIN_LEN and key not in self._common and \
                    (ev.any or (i + n < n_tok and toks[i + n] in _SUFFIXES)):
                alias = self._fuzzy_alias(key, words)
                fuzzy = alias is not None
            if alias is None:
                continue
            literal = not fuzzy and text.span_is_literal(i, i + n, alias)
            return self._accept(alias, text, i + n, ev, fuzzy or literal, loose)
        return None

    def _spelling_ok(self, alias: _Alias, words: tuple[str, ...]) -> bool:
        """A name written as in the catalog, or re-spaced without function words."""
        if words in alias.spellings:
            return True
        return all(w not in _FUNCTION_WORDS and len(w) >= 2 for w in words)

    def _fuzzy_alias(self, key: str, words: tuple[str, ...]) -> _Alias | None:
        if any(w in _FUNCTION_WORDS for w in words):
            return None
        candidates: set[str] = set()
        for variant in _deletions(key) | {key}:
            candidates |= self._fuzzy.get(variant, set())
        best = sorted(c for c in candidates if c[0] == key[0] and _edit_distance_at_most_one(key, c))
        if len(best) != 1:
            return None                    # none, or a typo between two names: no guess
        return self._aliases[best[0]]

    def _accept(self, alias: _Alias, text: "_Text", end: int, ev: _Evidence,
                as_distinctive: bool, loose: bool = False) -> tuple[list[str], int]:
        toks, seps = text.toks, text.seps
        n_tok = len(toks)
        # the name must not be the first half of a compound ("github-flavored", "github.com",
        # "weather_server"), except for a "-mcp"/"-server" ending
        if end < n_tok and _TIGHT_JOIN_RE.fullmatch(seps[end]) and \
                not (seps[end] == "-" and toks[end] in _SUFFIXES):
            return [], end
        # trailing "server"/"mcp"/"tools" words, not themselves a compound ("server-side")
        suffixes = _SUFFIXES | _WEAK_SUFFIXES if ev.trigger else _SUFFIXES
        k = end
        while k < n_tok and toks[k] in suffixes and _SUFFIX_JOIN_RE.fullmatch(seps[k]):
            k += 1
        if k > end and k < n_tok and _TIGHT_JOIN_RE.fullmatch(seps[k]):
            k = end
        # "the Memory server" names a server; "the NTP time server" describes one
        has_suffix = ((k > end or ev.mcp_prefix) and ev.bare) or alias.self_strict
        lead = ev.at_start and (seps[end].lstrip().startswith(":") or text.identifier_at(end))

        tier = "distinctive" if as_distinctive else alias.tier
        if tier == "common":
            ok = has_suffix
        elif tier == "ambiguous":
            ok = has_suffix or lead or loose or ((ev.trigger or ev.mention) and self._follow_ok(text, end))
        else:
            ok = has_suffix or lead or ev.trigger or ev.mention or loose
        if not ok:
            return [], end
        return list(alias.family if self._families else alias.servers), k

    @staticmethod
    def _follow_ok(text: "_Text", end: int) -> bool:
        """What follows an ambiguous name ends the phrase ("via linear." / "via linear to")."""
        toks, seps = text.toks, text.seps
        if end >= len(toks):
            return True
        stripped = seps[end].strip()
        if stripped:
            if stripped in ("'", "’") and toks[end] == "s":
                return True                   # possessive: "linear's"
            return stripped.startswith(_CLOSING_PUNCT) or stripped.startswith(("-", "—", "–", "("))
        return toks[end] in _FOLLOW_OK or text.identifier_at(end)


class _Text:
    """A request split into lowercased word tokens and the separators between them."""

    def __init__(self, request: str) -> None:
        self.request = request
        self.matches = list(_WORD_RE.finditer(request))
        self.toks = [m.group().lower() for m in self.matches]
        if not self.matches:
            self.seps = [request]
            return
        seps = [request[: self.matches[0].start()]]
        seps += [request[self.matches[j - 1].end(): self.matches[j].start()] for j in range(1, len(self.matches))]
        seps.append(request[self.matches[-1].end():])
        self.seps = seps            # seps[j]: text before token j; seps[len(toks)]: the tail

    def span_is_literal(self, i: int, j: int, alias: _Alias) -> bool:
        """Whether tokens ``i:j`` are written exactly as a catalog spelling of ``alias``."""
        if not (alias.literal_case or alias.literal_nocase):
            return False
        raw = self.request[self.matches[i].start(): self.matches[j - 1].end()]
        return raw in alias.literal_case or raw.lower() in alias.literal_nocase

    def identifier_at(self, j: int) -> bool:
        """Whether the whitespace-delimited chunk at token ``j`` is a code identifier."""
        if j >= len(self.matches) or not _WS_RE.fullmatch(self.seps[j]):
            return False
        start = self.matches[j].start()
        stop = start
        while stop < len(self.request) and not self.request[stop].isspace():
            stop += 1
        chunk = self.request[start:stop].rstrip(",.;:!?)")
        return bool(_IDENTIFIER_RE.fullmatch(chunk))
