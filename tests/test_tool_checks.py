"""The checks of saved tool tests (toolhub.toolkits.tool_checks): what each kind accepts when a
test is saved, how it judges a call's outcome, and that an author's regular expression cannot
hold a worker (it runs in a child process killed after a second)."""

from __future__ import annotations

import re
import time

import pytest

from toolhub.toolkits.tool_checks import CheckInvalid, clean_checks, diff_lines, evaluate, follow, parse_path


def _ok(checks, result, *, succeeded=True, error=""):
    return evaluate(clean_checks(checks), succeeded=succeeded, result=result, error=error)


def test_equals_compares_text_as_text_and_json_text_as_json():
    assert _ok([{"kind": "equals", "value": "Hello"}], "Hello").passed
    assert _ok([{"kind": "equals", "value": {"a": [1, 2]}}], '{"a": [1, 2]}').passed
    failed = _ok([{"kind": "equals", "value": "Hello"}], "Goodbye")
    assert (failed.passed, failed.expected, failed.actual) == (False, "Hello", "Goodbye")
    assert diff_lines(failed.expected, failed.actual)[-2:] == ["-Hello", "+Goodbye"]


def test_contains_regex_and_json_path():
    assert _ok([{"kind": "contains", "value": "ell"}], "Hello").passed
    assert not _ok([{"kind": "contains", "value": "xyz"}], "Hello").passed
    assert _ok([{"kind": "regex", "value": r"^H\w+o$"}], "Hello").passed
    assert not _ok([{"kind": "regex", "value": r"^\d+$"}], "Hello").passed
    doc = {"user": {"tags": ["a", "b"], "odd key": 1}}
    assert _ok([{"kind": "json_path", "path": "$.user.tags[1]", "value": "b"}], doc).passed
    assert _ok([{"kind": "json_path", "path": "$['user'][\"odd key\"]", "value": 1}], doc).passed
    missing = _ok([{"kind": "json_path", "path": "$.user.tags[5]", "value": "b"}], doc)
    assert not missing.passed and "nothing at $.user.tags[5]" in missing.message.english()


def test_fails_with_expects_a_failure_with_that_text():
    assert _ok([{"kind": "fails_with", "value": "bad input"}], None, succeeded=False, error="ValueError: bad input").passed
    assert not _ok([{"kind": "fails_with", "value": "bad input"}], "fine").passed
    assert not _ok([{"kind": "fails_with", "value": "bad input"}], None, succeeded=False, error="other").passed
    # Without fails_with, a failed call fails the test, whatever else it checks.
    failed = _ok([{"kind": "contains", "value": "x"}], None, succeeded=False, error="boom")
    assert (failed.passed, failed.message.english()) == (False, "The call failed: boom")


def test_a_catastrophic_pattern_is_stopped_after_a_second():
    started = time.monotonic()
    outcome = _ok([{"kind": "regex", "value": r"^(a+)+$"}], "a" * 40 + "!")
    assert time.monotonic() - started < 5
    assert not outcome.passed and "ran longer than 1 s" in outcome.message.english()


@pytest.mark.parametrize(("checks", "says"), [
    ("equals", "must be a list"),
    ([{"kind": "nope"}], "kind must be one of"),
    ([{"kind": "regex", "value": "("}], "regular expression is invalid"),
    ([{"kind": "regex", "value": "a" * 501}], "longer than 500"),
    ([{"kind": "contains", "value": ""}], "needs a text value"),
    ([{"kind": "json_path", "path": "$..a", "value": 1}], "not of the form"),
    ([{"kind": "json_path", "path": "a.b", "value": 1}], "starts with $"),
    ([{"kind": "equals", "value": "x" * 10_001}], "longer than 10000"),
    ([{"kind": "equals", "value": 1, "extra": 2}], "only kind, value and path"),
    ([{"kind": "equals", "value": 1}] * 11, "At most 10 checks"),
    ([{"kind": "fails_with", "value": "x"}, {"kind": "equals", "value": 1}], "checks only its error"),
])
def test_hostile_checks_are_refused_with_a_clear_reason(checks, says):
    with pytest.raises(CheckInvalid, match=re.escape(says)):
        clean_checks(checks)


def test_paths_follow_only_what_is_there():
    assert parse_path("$") == []
    assert parse_path("$.a[0]['b c']") == ["a", 0, "b c"]
    assert follow({"a": [{"b c": 3}]}, ["a", 0, "b c"]) == 3
    assert follow({"a": "text"}, ["a", 0]) is not None  # the missing marker, not an IndexError
