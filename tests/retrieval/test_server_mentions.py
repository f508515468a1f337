from __future__ import annotations


import pytest

from retrieval.catalog.formats import load_default_catalog
from retrieval.shortcuts.server_mentions import ServerMentionMatcher


@pytest.fixture(scope="module")
def matcher() -> ServerMentionMatcher:
    return ServerMentionMatcher(load_default_catalog(with_examples=False).servers)


# A mention also names the servers whose names extend it ("GitHub" -> "Github Actions").
GITHUB = {"GitHub", "Github Actions"}
AWS = {"AWS", "AWS - rishikavikondala", "AWS Athena", "AWS Cost Explorer", "AWS Resources Operations",
       "AWS S3", "AWS KB Retrieval"}

# (request, servers named) over the shipped catalog's 308 server names.
POSITIVE = [
    ("use github to open an issue for the login bug", GITHUB),
    ("Use the GitHub MCP server to list my repositories", GITHUB),
    ("GitHub: list my open pull requests", GITHUB),
    ("@github what are my open PRs?", GITHUB),
    ("trigger the deploy workflow with github actions", {"Github Actions"}),
    ("create an issue via linear", {"Linear", "Linear (Go)"}),
    ("In Linear, create an issue for the crash", {"Linear", "Linear (Go)"}),
    ("scrape the pricing page with firecrawl", {"Firecrawl", "FireCrawl"}),
    ("scrape the pricing page with fire crawl", {"Firecrawl", "FireCrawl"}),
    ("scrape the pricing page with firecrwal", {"Firecrawl", "FireCrawl"}),          # typo, 9 chars
    ("post the summary on slack", {"Slack", "Slack - nourl"}),
    ("post the summary on our Slack workspace", {"Slack", "Slack - nourl"}),
    ("use the Slack - nourl server to post it", {"Slack - nourl"}),
    ("list my buckets using AWS", AWS),
    ("list the objects in the bucket using the aws s3 tools", {"AWS S3"}),
    ("get my tickets from the atlassian server", {"Atlassian"}),
    ("Remember that Ana likes tea with the Memory server", {"Memory"}),
    ("download the page via the fetch tool", {"Fetch", "Fetch - zcaceres"}),
    ("Memory MCP: store that Ana likes tea", {"Memory"}),
    ("show the staged diff using the git mcp", {"Git", "Git - geropl"}),
    ("ask the time server what time it is in Tokyo", {"Time"}),
    ("add a dentist appointment in my google calendar", {"Google Calendar"}),
    ("search the web with brave search", {"Brave Search"}),
    ("ask perplexity what happened in the markets today", {"Perplexity"}),
    ("create a board using monday.com", {"Monday.com"}),
    ("query the logs via github, gitlab and the datadog tools", GITHUB | {"GitLab", "Datadog"}),
    ("find the error through Sentry", {"Sentry"}),
    ("store the embeddings in pinecone", {"Pinecone", "Pinecone - sirmews"}),
    ("turn off the kitchen lights with home assistant", {"Home Assistant", "Home Assistant - tevonsb"}),
    ("use the Elasticsearch - cr7258 server for this", {"Elasticsearch - cr7258"}),
    ("search for flights using airbnb", {"Airbnb"}),
    ("use the puppeter server to take a screenshot", {"Puppeteer"}),                   # typo, 9 chars
    ("run the query on mongo db", {"MongoDB", "MongoDB - kiliczsh", "MongoDB Lens"}),
    ("use the everything tool to find my notes", {"Everything", "Everything Search"}),
    ("send it through gmail", {"Gmail", "Gmail Headless"}),
    ("convert the file with the json mcp", {"JSON"}),
]

NEGATIVE = [
    "write the parser from scratch with care",
    "solve this using Python",
    "notify me via email when it is done",
    "keep track of it with time",
    "what time is it in Tokyo?",
    "store this in memory for later",
    "fetch the page at https://example.com",
    "commit my changes with git",
    "return the result as JSON",
    "search everything on my disk",
    "fit the data with linear regression",
    "sort it in linear time",
    "cut me some slack",
    "tell me some good news with good news",
    "write a Dart script using Dart",
    "help me with data exploration",
    "help me with image generation",
    "plan a trip to national parks",
    "paint it with red is fine",
    "use an in-memory cache for sessions",
    "render the title in neon colors",
    "format the docs with github-flavored markdown",
    "think it through with sequential thinking",
    "put the files in a box",
    "we went with the notion that it works",
    "write the essay with an outline",
    "use the calculator to add 2 and 3",
    "open my memory of the trip",
    "deploy it with docker compose",
    "score the model with perplexity scores",
    "sync the clock with the NTP time server",
    "read a file with the Go filesystem server",
    "list and query databases on a managed PostgreSQL server",
]


@pytest.mark.parametrize(("request_text", "expected"), POSITIVE, ids=[p[0][:40] for p in POSITIVE])
def test_positive_mentions(matcher, request_text, expected):
    assert set(matcher.find(request_text)) == expected


@pytest.mark.parametrize("request_text", NEGATIVE, ids=[n[:40] for n in NEGATIVE])
def test_negative_mentions(matcher, request_text):
    assert matcher.find(request_text) == []


def test_table_is_large_enough():
    assert len(POSITIVE) >= 20 and len(NEGATIVE) >= 20


def test_order_of_mention_and_catalog_order(matcher):
    assert matcher.find("move the repo from gitlab to github") == ["GitLab", "GitHub", "Github Actions"]
    assert matcher.find("compare gitlab with github") == ["GitHub", "Github Actions"]   # no trigger before gitlab
    # one mention naming several servers lists them in catalog order
    servers = load_default_catalog(with_examples=False).servers
    found = matcher.find("via the fetch tool")
    assert found == sorted(found, key=servers.index)


def test_common_word_servers_need_strict_form(matcher):
    common = set(matcher.common_servers())
    assert {"Time", "Memory", "Fetch", "Git", "JSON", "Everything"} <= common
    assert {"GitHub", "Firecrawl", "Atlassian", "Linear", "Slack"}.isdisjoint(common)
    assert matcher.tier("Linear") == "ambiguous"
    assert matcher.tier("GitHub") == "distinctive"


def test_brief_phrasings_on_a_small_catalog():
    m = ServerMentionMatcher(["Jira", "Notion", "Context7", "Linear", "Firecrawl"])
    assert m.find("get my open tickets from the jira server") == ["Jira"]
    assert m.find("summarise the meeting notes in the Notion workspace") == ["Notion"]
    assert m.find("ask context7 for the React docs") == ["Context7"]
    assert m.find("look it up on context7") == ["Context7"]
    assert m.find("using notion, draft a page") == ["Notion"]
    assert m.find("Jira: list my issues") == ["Jira"]
    assert m.find("i have a notion of how to do it") == []


def test_typos_only_on_long_names():
    m = ServerMentionMatcher(["Redis", "Todoist", "Typesense"])
    assert m.find("use todoist to add milk") == ["Todoist"]
    assert m.find("use todoits to add milk") == ["Todoist"]      # swapped letters, 7 chars
    assert m.find("use rediz to cache it") == []                  # 5 chars: exact only
    assert m.find("use typesence") == ["Typesense"]


def test_custom_word_lists():
    m = ServerMentionMatcher(["Weather"], common_words=[])
    assert m.find("check the forecast using weather") == ["Weather"]
    assert ServerMentionMatcher(["Weather"]).find("check the forecast using weather") == []
    assert ServerMentionMatcher(["Weather"]).find("use the weather server") == ["Weather"]


def test_empty_and_bad_input():
    assert ServerMentionMatcher([]).find("use github") == []
    m = ServerMentionMatcher(["GitHub"])
    assert m.find("") == []
    with pytest.raises(ValueError, match="request must be a string"):
        m.find(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string"):
        ServerMentionMatcher(["GitHub", ""])
    with pytest.raises(KeyError, match="unknown server"):
        m.tier("Nope")


def test_long_requests_are_matched_to_the_end(matcher):
    # correctness only: timing belongs in benchmarks/, not in a unit test on a shared machine
    long_request = " ".join(["please use the data from the report with care and then"] * 200) + " via github"
    assert matcher.find(long_request) == ["GitHub", "Github Actions"]


EXPLICIT_FORMS = [
    ("Gitee get_pull_detail: owner dromara, repo Sa-Token", ["Gitee"]),       # leading name + tool
    ("Using Telegram listMessages, get 25 messages from chat 42", ["Telegram", "Telegram-Client"]),
    ("Golang Filesystem Server read_file /var/www/.htaccess", ["Golang Filesystem Server"]),
    ("With Terminal-Control, switch to /srv/app", ["Terminal-Control"]),      # catalog spelling
    ("help me with terminal control", []),
    ("In eSignatures, delete the test contract", ["eSignatures"]),
    ("sign the contract with e-signatures", []),
    ("use the linear integration to file it", ["Linear", "Linear (Go)"]),    # weak suffix after trigger
    ("we just connected our GitHub integration yesterday", []),
    ("expose it with python -m weather_server", []),
    ("pull tweets from @stripe and @adyen", []),
    ("only use results from postgresql.org", []),
    ("use the Memory server-side cache", []),
]


@pytest.mark.parametrize(("request_text", "expected"), EXPLICIT_FORMS, ids=[e[0][:40] for e in EXPLICIT_FORMS])
def test_explicit_forms(matcher, request_text, expected):
    assert matcher.find(request_text) == expected


def test_families_can_be_turned_off():
    names = load_default_catalog(with_examples=False).servers
    plain = ServerMentionMatcher(names, expand_families=False)
    assert plain.find("use github to open an issue") == ["GitHub"]
    assert set(plain.find("list my buckets using AWS")) == {"AWS", "AWS - rishikavikondala"}
    assert plain.find("use the aws s3 tools") == ["AWS S3"]


# ``loose``: evidence for the confidence model, never a restriction.
LOOSE = [
    ("send a slack msg to #general saying deploy done", {"Slack", "Slack - nourl"}),
    ("create a linear ticket for the login crash", {"Linear", "Linear (Go)"}),
    ("my github PRs that still need review", GITHUB),
    ("post the summary on slack", {"Slack", "Slack - nourl"}),          # strict mentions stay found
]


@pytest.mark.parametrize("request_text, expected", LOOSE)
def test_loose_mentions_find_casual_names(matcher, request_text, expected):
    assert set(matcher.find(request_text, loose=True)) == expected


def test_loose_is_a_superset_of_strict(matcher):
    for request_text, _ in POSITIVE + LOOSE:
        assert set(matcher.find(request_text)) <= set(matcher.find(request_text, loose=True))


def test_loose_still_needs_the_strict_form_for_common_words(matcher):
    # "time", "memory", "fetch" are ordinary words: written casually they name nothing
    for request_text in ("what time is it in Tokyo?", "save this in memory for later", "fetch the latest prices"):
        assert matcher.find(request_text, loose=True) == []
    assert matcher.find("ask the time server what time it is", loose=True) == ["Time"]


def test_casual_names_do_not_restrict(matcher):
    assert matcher.find("send a slack msg to #general saying deploy done") == []
