from __future__ import annotations

import copy

import pytest

from scorer.record import ELLIPSIS, RECORD_FORMAT_VERSION, format_record, record_text, truncate_at_word


def test_version_is_two():
    assert RECORD_FORMAT_VERSION == 2


def test_server_line_comes_last_and_is_off_by_default(tool_cls):
    tool = tool_cls("Airflow", "List DAGs", "List all DAGs.",
                    server_description="Apache Airflow:   workflow orchestration\nand scheduling for data pipelines.")
    _, plain = format_record("show every workflow on our scheduler", None, tool)
    assert "Server:" not in plain                      # version 1's text when the budget is 0
    _, text = format_record("show every workflow on our scheduler", None, tool, server_description_chars=60)
    assert text == plain + "\nServer: Apache Airflow: workflow orchestration and scheduling for" + ELLIPSIS
    with pytest.raises(ValueError, match="server_description_chars must be 0 or an int >= 2"):
        format_record("q", None, tool, server_description_chars=1)


def test_no_server_line_without_a_server_description(tool_cls):
    _, text = format_record("q", None, tool_cls("S", "t", "Does t."), server_description_chars=100)
    assert text == "Candidate tool: S / t: Does t."


def test_record_without_need(tool_cls):
    tool = tool_cls("Gmail", "send_email", "Send an email.")
    query, text = format_record("mail the report to Ana", None, tool)
    assert query == "User request: mail the report to Ana"
    assert text == "Candidate tool: Gmail / send_email: Send an email."


@pytest.mark.parametrize("need", [None, "", "   \n\t"])
def test_blank_need_omits_line(tool_cls, need):
    query, _ = format_record("hi there", need, tool_cls("S", "t", "d"))
    assert "looking for" not in query
    assert "\n" not in query


def test_record_with_need(tool_cls):
    query, _ = format_record("mail the report", "send an email", tool_cls("Gmail", "send_email", "x"))
    assert query == "User request: mail the report\nThe assistant is looking for: send an email"


def test_whitespace_is_normalised(tool_cls):
    tool = tool_cls("  Gmail ", "send_email\n", "Send\tan\n\n email.  ", ("  mail\nAna ",))
    query, text = format_record("  mail \n the\treport ", " send  email ", tool, examples=1)
    assert query == "User request: mail the report\nThe assistant is looking for: send email"
    assert text == "Candidate tool: Gmail / send_email: Send an email.\nExamples: mail Ana"


def test_empty_description_has_no_dangling_colon(tool_cls):
    _, text = format_record("rain?", None, tool_cls("Weather", "get_forecast", "   "))
    assert text == "Candidate tool: Weather / get_forecast"


def test_truncation_at_word_boundary(tool_cls):
    desc = "alpha beta gamma delta epsilon"
    _, text = format_record("x", None, tool_cls("S", "t", desc), max_description_chars=14)
    # budget 14 incl. ellipsis -> 13 chars of text, cut back to the last whole word
    assert text == f"Candidate tool: S / t: alpha beta{ELLIPSIS}"


def test_truncation_exact_boundary_and_fit():
    assert truncate_at_word("alpha beta gamma", 16) == "alpha beta gamma"  # fits: unchanged
    assert truncate_at_word("alpha beta gamma", 11) == f"alpha beta{ELLIPSIS}"  # cut falls on the space
    assert truncate_at_word("alpha, beta gamma", 10) == f"alpha{ELLIPSIS}"  # trailing comma dropped


def test_truncation_respects_budget_and_long_words():
    text = "word " * 200
    for budget in (2, 5, 17, 64, 300):
        out = truncate_at_word(text, budget)
        assert len(out) <= budget and out.endswith(ELLIPSIS)
        assert not out[:-1].endswith(" ")
    assert truncate_at_word("x" * 50, 10) == "x" * 9 + ELLIPSIS


def test_examples(tool_cls):
    tool = tool_cls("Gmail", "send_email", "Send.", ("first one", "", "second  one", "third"))
    assert "Examples" not in format_record("r", None, tool)[1]
    assert format_record("r", None, tool, examples=2)[1].endswith("\nExamples: first one | second one")
    assert format_record("r", None, tool, examples=9)[1].endswith("Examples: first one | second one | third")
    no_examples = tool_cls("Gmail", "send_email", "Send.")
    assert "Examples" not in format_record("r", None, no_examples, examples=3)[1]


def test_inputs_not_mutated(tool_cls):
    tool = tool_cls("Gmail", "send_email", "Send an email. " * 50, ("a", "b"))
    before = copy.deepcopy(tool)
    format_record("req", "need", tool, max_description_chars=20, examples=1)
    assert tool == before


def test_record_text_joins_sides(tool_cls):
    tool = tool_cls("Gmail", "send_email", "Send.")
    assert record_text("r", "n", tool) == "\n".join(format_record("r", "n", tool))


def test_bad_arguments(tool_cls):
    tool = tool_cls("S", "t", "d")
    with pytest.raises(ValueError, match="request is empty"):
        format_record("  ", None, tool)
    with pytest.raises(ValueError, match="examples must be an int >= 0"):
        format_record("r", None, tool, examples=-1)
    with pytest.raises(ValueError, match="max_description_chars must be an int >= 2"):
        format_record("r", None, tool, max_description_chars=1)


def test_works_with_catalog_tool():
    catalog = pytest.importorskip("retrieval.catalog.model")
    tool = catalog.Tool("Gmail", "send_email", "Send an email.", examples=("mail Ana",))
    assert format_record("r", None, tool, examples=1)[1] == \
        "Candidate tool: Gmail / send_email: Send an email.\nExamples: mail Ana"


def test_parameter_names_join_the_record_required_first(tool_cls):
    from dataclasses import dataclass

    from scorer.record import format_record

    @dataclass
    class WithSchema:
        server: str = "Cal"
        name: str = "rename_calendar"
        description: str = "Rename a calendar."
        examples: tuple = ()
        input_schema: dict = None

    tool = WithSchema(input_schema={"type": "object", "properties": {"color": {}, "calendar_id": {}, "new_name": {}},
                                    "required": ["calendar_id", "new_name"]})
    _, text = format_record("rename my work calendar", None, tool, parameters=2)
    assert text.endswith("\nParameters: calendar_id, new_name")
    assert format_record("x", None, tool)[1] == "Candidate tool: Cal / rename_calendar: Rename a calendar."
    assert "Parameters" not in format_record("x", None, WithSchema(input_schema=None), parameters=5)[1]
