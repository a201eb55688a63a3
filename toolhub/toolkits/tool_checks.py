"""The checks a saved tool test makes on what its call returned (docs/tool-tests.md): validated
when a test is saved, evaluated by the worker after the call.

    equals      the result equals the value (a JSON value; a text result that holds JSON is
                compared as that JSON when the value is not text)
    contains    the result's text contains the value
    regex       the result's text matches the regular expression (searched anywhere)
    json_path   the value at a path ($.a.b[0], $['key']) of the result (JSON, or text holding
                JSON) equals the value
    fails_with  the call fails, and its error contains the value

Without `fails_with`, a test expects the call to succeed. Everything is bounded: the sizes of
values and patterns here, and a regular expression runs in a child process that is killed
after REGEX_SECONDS (Python's `re` cannot be interrupted, and an author's pattern can
backtrack for hours on a result of a few kilobytes)."""

from __future__ import annotations

import difflib
import json
import os
import re
import select
import signal
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from toolhub.messages import Message, as_written, message

KINDS = ("equals", "contains", "regex", "json_path", "fails_with")
MAX_CHECKS = 10
MAX_VALUE_CHARS = 10_000
MAX_PATTERN_CHARS = 500
MAX_PATH_CHARS = 200
# The part of a result a check reads, and what a failing case keeps of each side for its diff.
MAX_SUBJECT_CHARS = 100_000
MAX_KEPT_CHARS = 20_000
MAX_DIFF_LINES = 200
REGEX_SECONDS = 1.0


class CheckInvalid(ValueError):
    def __init__(self, message: str, field: str = "checks"):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Outcome:
    passed: bool
    # Why it failed (None when it passed).
    message: Message | None = None
    expected: str = ""
    actual: str = ""


# ------------------------------------------------------------------------------------------
# JSON paths: `$`, then `.name`, `['name']` / `["name"]` and `[index]` steps, nothing else.

_STEP = re.compile(r"""\.([A-Za-z_][A-Za-z0-9_-]*)|\[(-?\d{1,6})\]|\['([^'\\]*)'\]|\["([^"\\]*)"\]""")


def parse_path(path: str) -> list[str | int]:
    """The steps of a path; raises CheckInvalid for anything outside the subset."""
    if not isinstance(path, str) or not path.startswith("$") or len(path) > MAX_PATH_CHARS:
        raise CheckInvalid(_("A JSON path starts with $ and has at most %(n)s characters.") % {"n": MAX_PATH_CHARS}, "path")
    steps: list[str | int] = []
    at = 1
    while at < len(path):
        match = _STEP.match(path, at)
        if match is None:
            raise CheckInvalid(_("The JSON path %(path)s is not of the form $.a.b[0] or $['a'] (at character %(at)s).") % {"path": repr(path), "at": at + 1}, "path")
        name, index, single, double = match.groups()
        steps.append(int(index) if index is not None else next(s for s in (name, single, double) if s is not None))
        at = match.end()
    return steps


_MISSING = object()


def follow(value: Any, steps: list[str | int]) -> Any:
    """The value at the path, or _MISSING."""
    for step in steps:
        if isinstance(step, int) and isinstance(value, list) and -len(value) <= step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return _MISSING
    return value


# ------------------------------------------------------------------------------------------
# Validation (when a test is saved)


def clean_checks(raw: object) -> list[dict]:
    """The checks as stored; raises CheckInvalid (naming the check) for anything else."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise CheckInvalid(_("The checks must be a list."))
    if len(raw) > MAX_CHECKS:
        raise CheckInvalid(_("At most %(n)s checks a test.") % {"n": MAX_CHECKS})
    cleaned = []
    for n, check in enumerate(raw, 1):
        if not isinstance(check, dict) or check.get("kind") not in KINDS:
            raise CheckInvalid(_("Check %(n)s: the kind must be one of %(kinds)s.") % {"n": n, "kinds": ", ".join(KINDS)})
        kind = check["kind"]
        if set(check) - {"kind", "value", "path"}:
            raise CheckInvalid(_("Check %(n)s: only kind, value and path may be given.") % {"n": n})
        value = check.get("value")
        if len(json.dumps(value, ensure_ascii=False)) > MAX_VALUE_CHARS:
            raise CheckInvalid(_("Check %(n)s: the value is longer than %(max)s characters.") % {"n": n, "max": MAX_VALUE_CHARS})
        item: dict[str, Any] = {"kind": kind, "value": value}
        if kind in ("contains", "regex", "fails_with") and (not isinstance(value, str) or not value):
            raise CheckInvalid(_("Check %(n)s: %(kind)s needs a text value.") % {"n": n, "kind": kind})
        if kind == "regex" and isinstance(value, str):
            if len(value) > MAX_PATTERN_CHARS:
                raise CheckInvalid(_("Check %(n)s: the pattern is longer than %(max)s characters.") % {"n": n, "max": MAX_PATTERN_CHARS})
            try:
                re.compile(value)
            except (re.error, RecursionError, OverflowError) as exc:
                raise CheckInvalid(_("Check %(n)s: the regular expression is invalid (%(error)s).") % {"n": n, "error": exc}) from None
        if kind == "json_path":
            try:
                parse_path(check.get("path", ""))
            except CheckInvalid as exc:
                raise CheckInvalid(_("Check %(n)s: %(error)s") % {"n": n, "error": exc}, "path") from None
            item["path"] = check["path"]
        cleaned.append(item)
    if sum(c["kind"] == "fails_with" for c in cleaned) and len(cleaned) > sum(c["kind"] == "fails_with" for c in cleaned):
        raise CheckInvalid(_("A test that expects the call to fail checks only its error (fails_with)."))
    return cleaned


# ------------------------------------------------------------------------------------------
# Evaluation (after the call)


def as_text(value: Any) -> str:
    """A result as the text checks read and diffs show: text as it is, JSON pretty-printed."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)


def _as_json(value: Any) -> Any:
    """A text result that holds JSON as that JSON (tools often return JSON as text)."""
    if isinstance(value, str) and len(value) <= MAX_SUBJECT_CHARS:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_KEPT_CHARS else text[:MAX_KEPT_CHARS] + "\n…"


def _fail(why: Message, expected: Any, actual: Any) -> Outcome:
    return Outcome(False, why, _bounded(as_text(expected)), _bounded(as_text(actual)))


def regex_search(pattern: str, text: str, *, seconds: float = REGEX_SECONDS) -> bool | None:
    """Whether the pattern matches somewhere in text; None when it ran longer than `seconds`.
    Searched in a forked child that answers through a pipe and is killed on time."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: search, answer one byte, leave without any cleanup of the parent's
        try:
            os.close(read_end)
            found = re.search(pattern, text[:MAX_SUBJECT_CHARS]) is not None
            os.write(write_end, b"1" if found else b"0")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], seconds)
        answer = os.read(read_end, 1) if ready else b""
    finally:
        os.close(read_end)
        if not answer:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
    return {b"1": True, b"0": False}.get(answer)


def evaluate(
    checks: list[dict], *, succeeded: bool, result: Any, error: str, error_message: Message | None = None
) -> Outcome:
    """Whether a call's outcome passes the checks, and for the first that fails, why, with the
    two sides compared. `error` is the call's error in English, `error_message` the message it
    was stored as (the tool's own error is text as written)."""
    expects_failure = any(c["kind"] == "fails_with" for c in checks)
    if expects_failure:
        if succeeded:
            return _fail(message("tests.expected_failure"), "(an error)", result)
        for check in checks:
            if check["value"] not in (error or ""):
                return _fail(message("tests.error_lacks", value=repr(check["value"])), check["value"], error)
        return Outcome(True)
    if not succeeded:
        return _fail(message("tests.call_failed", error=error_message or as_written(error or "")), "(a result)", error)
    text = as_text(result)[:MAX_SUBJECT_CHARS]
    for n, check in enumerate(checks, 1):
        kind, value = check["kind"], check["value"]
        if kind == "equals":
            actual = result if isinstance(value, str) else _as_json(result)
            if actual != value:
                return _fail(message("tests.equals_differs", n=n), value, actual)
        elif kind == "contains":
            if value not in text:
                return _fail(message("tests.contains_missing", n=n, value=repr(value)), value, text)
        elif kind == "regex":
            found = regex_search(value, text)
            if found is None:
                return _fail(message("tests.regex_timed_out", n=n, seconds=REGEX_SECONDS), value, text)
            if not found:
                return _fail(message("tests.regex_unmatched", n=n, value=repr(value)), value, text)
        elif kind == "json_path":
            found = follow(_as_json(result), parse_path(check["path"]))
            if found is _MISSING:
                return _fail(message("tests.path_missing", n=n, path=check["path"]), value, result)
            if found != value:
                return _fail(message("tests.path_differs", n=n, path=check["path"]), value, found)
    return Outcome(True)


def diff_lines(expected: str, actual: str) -> list[str]:
    """A unified diff of the two sides of a failed check, at most MAX_DIFF_LINES lines."""
    lines = list(difflib.unified_diff(
        expected.splitlines(), actual.splitlines(), "expected", "actual", lineterm="", n=2
    ))
    return lines[:MAX_DIFF_LINES]
