"""Texts stored in English shown in the reader's language: a saved tool test's messages and why
an egress host is refused. (A revision's status detail and why a run failed are stored as
messages, toolhub.messages, and are not parsed: these texts are still to be stored so.)

The worker stores these texts in English. Pages show them translated: every form they take is
listed here with its placeholders, and a text of one of these forms is shown as its
translation, with what fills the placeholders (a tool's own error) as written, unless that is
of a known form itself (a run's error inside "The call failed: …", which has a form of
toolhub.messages). A text of no known form is shown as stored.
"""

from __future__ import annotations

import re
from functools import cache

from django.utils.translation import gettext, gettext_noop

from toolhub import messages

# Why an egress allowlist entry is refused (toolhub/sandbox/egress/rules.py, which has no
# Django), shown on the toolkit's egress form.
HOST_FORMS = [
    gettext_noop(
        "%(pattern)s is not a host name or a wildcard like '*.example.org' (a '*' may only stand as the whole first"
        " label)"
    ),
    gettext_noop("%(pattern)s is not a valid host name"),
    gettext_noop("%(pattern)s would allow a whole top-level domain"),
]
# How a saved tool test's case failed and why a test run ended, as the worker stores them
# (toolkits/tool_checks.py `evaluate`, runs/tool_tests.py, toolkits/tool_tests.py).
TEST_MESSAGES = [
    gettext_noop("The call succeeded; it was expected to fail."),
    gettext_noop("The error does not contain %(value)s."),
    gettext_noop("The call failed: %(error)s"),
    gettext_noop("Check %(n)s (equals): the result differs."),
    gettext_noop("Check %(n)s (contains): the result does not contain %(value)s."),
    gettext_noop("Check %(n)s (regex): the regular expression ran longer than %(seconds)s s."),
    gettext_noop("Check %(n)s (regex): the result does not match %(value)s."),
    gettext_noop("Check %(n)s (json_path): the result has nothing at %(path)s."),
    gettext_noop("Check %(n)s (json_path): the value at %(path)s differs."),
    gettext_noop("This revision has no tool named %(tool)s."),
    gettext_noop("The call did not finish."),
    gettext_noop("The worker running these tests stopped before they finished."),
    gettext_noop("No worker took these tests (is a worker serving the sandbox queue?)."),
    gettext_noop("Internal error while running the tests (%(error)s); see the worker log."),
    gettext_noop("Replaced by a new run of the revision's tests."),
    gettext_noop("No worker could take the tests (the broker is unavailable)."),
]
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# A run's error inside "The call failed: …" has one of the forms of toolhub.messages.
_RUN_ERROR_FORMS = tuple(form for code, form in messages.FORMS.items() if code.startswith(("run.", "agent.")))


@cache
def _patterns(forms: tuple[str, ...]) -> list[tuple[str, re.Pattern[str]]]:
    patterns = []
    for form in forms:
        pieces = _PLACEHOLDER.split(form)
        # split() alternates literal text and placeholder names.
        regex = "".join(re.escape(piece) if i % 2 == 0 else f"(?P<{piece}>.+?)" for i, piece in enumerate(pieces))
        patterns.append((form, re.compile(regex, re.DOTALL)))
    return patterns


def _one(text: str, forms: tuple[str, ...], inner: tuple[str, ...] | None = None) -> str | None:
    """`text` translated if it has one of `forms`; what fills a placeholder is translated too
    when it has one of `inner` (by default the same forms), such as the sandbox's reason."""
    for form, pattern in _patterns(forms):
        match = pattern.fullmatch(text)
        if match:
            parts = {name: _one(value, inner or forms) or value for name, value in match.groupdict().items()}
            return gettext(form) % parts
    return None


def translate_host_refusal(text: str) -> str:
    """Why an egress allowlist entry is refused, in the active language when the form is known."""
    return _one(text, tuple(HOST_FORMS)) or text


def translate_test_message(text: str) -> str:
    """A tool test's case message or run error in the active language when the worker wrote
    it; a run's error inside "The call failed: …" is translated too, a tool's own is not."""
    return (_one(text, tuple(TEST_MESSAGES), _RUN_ERROR_FORMS) or text) if text else text

