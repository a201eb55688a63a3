"""Why an egress allowlist entry is refused, stored in English by the Django-free egress rules,
shown in the reader's language. (A revision's status detail, why a run failed and a tool
test's messages are stored as messages, toolhub.messages, and are not parsed: these refusals
are still to be made so.)

Every form a refusal takes is listed here with its placeholders, and a text of one of these
forms is shown as its translation, with the pattern as written. A text of no known form is
shown as it is.
"""

from __future__ import annotations

import re
from functools import cache

from django.utils.translation import gettext, gettext_noop

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
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


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

