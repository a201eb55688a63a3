"""The one check at the edge that every request passes before a view sees it.

PostgreSQL cannot store a NUL character, nor text that is not valid Unicode (a lone surrogate,
which JSON can spell as `"\\ud800"`); JSON's `NaN`, `Infinity` and numbers too large for a
float (`1e400`) are not JSON at all once echoed back. Rather than each view, form and schema
guarding against them, `BoundedInputMiddleware` refuses such a request with `400`, naming
where the bad text was and never echoing it: the path, the query string, the cookies, form
fields and JSON bodies (keys and values, at any depth). The API gets its error shape
(`{"errors": [{"message", "field", "line"}]}`), pages a short plain-text answer.

It also answers a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` with a readable `413`: the body is
read and thrown away first (up to `MAX_DRAIN_BYTES`), because a server that closes the socket
with unread data in it makes the kernel reset the connection, and the client then sees a
dropped connection instead of the answer.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.translation import gettext as _

# Beyond this, a body over the limit is not read to its end: the connection is closed.
MAX_DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_CHUNK = 64 * 1024
# NUL, and the surrogate code points, which no valid UTF-8 text contains.
_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
logger = logging.getLogger(__name__)

_API_PREFIX = "/api/"
# Where callers are programs: refusals are JSON there.
_MACHINE_PREFIXES = (_API_PREFIX, "/openapi/")
# The checked JSON document of a request, for the API's parser (so the body is parsed once).
PARSED_JSON = "toolhub_parsed_json"
MISSING = object()


class BadInput(ValueError):
    """Where (a description such as `query parameter "q"`) the request carried text or a
    number ToolHub refuses, and what was wrong with it."""

    def __init__(self, where: str, problem: str, field: str | None = None, line: int | None = None) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
        self.field = field
        self.line = line


def bad_text(value: str) -> str | None:
    """Why a string cannot be stored, or None."""
    match = _BAD_TEXT.search(value)
    if match is None:
        return None
    if match.group() == "\x00":
        return _("contains a NUL character, which cannot be stored")
    return _("contains text that cannot be stored (a lone UTF-16 surrogate)")


def _reject_constant(name: str) -> float:
    raise BadInput(_("the JSON body"), _("%(name)s is not a JSON number") % {"name": name})


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadInput(_("the JSON body"), _("the number %(text).40s is too large") % {"text": text})
    return value


def loads_strict(body: bytes | str) -> Any:
    """json.loads without NaN, Infinity or numbers that overflow a float."""
    return json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)


def _walk(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """(path, string, is_key) for every key and string value in a parsed JSON document."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            yield (path or _("(top level)")), str(key), True
            yield from _walk(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]" if path else f"[{index}]")


def check_json(document: Any) -> None:
    for path, text, is_key in _walk(document, ""):
        problem = bad_text(text)
        if problem:
            # The path can contain the bad key itself; strip what cannot be shown.
            shown = _BAD_TEXT.sub("?", path)
            line = None
            if not is_key:
                # Multi-line values (a toolkit's source) get the place, as an editor counts it.
                index = _BAD_TEXT.search(text).start()  # type: ignore[union-attr]
                before = text[:index].replace("\r\n", "\n").replace("\r", "\n")
                line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
                problem += " " + _("at line %(line)s, column %(column)s") % {"line": line, "column": column}
            where = _('field "%(field)s" of the JSON body') % {"field": shown}
            raise BadInput(where, problem, shown, line)


def _check_pairs(kind: str, pairs: Iterator[tuple[str, str]]) -> None:
    for key, value in pairs:
        shown = _BAD_TEXT.sub("?", key)
        problem = bad_text(key) or bad_text(value)
        if problem:
            raise BadInput(_('%(kind)s "%(name)s"') % {"kind": kind, "name": shown}, problem, shown)


def _multi(data) -> Iterator[tuple[str, str]]:
    for key, values in data.lists():
        for value in values:
            yield key, value


def check_request(request: HttpRequest) -> None:
    """Raise BadInput for the first refused text or number in the request."""
    problem = bad_text(request.path)
    if problem:
        raise BadInput(_("the address"), problem)
    _check_pairs(_("query parameter"), _multi(request.GET))
    _check_pairs(_("cookie"), iter(request.COOKIES.items()))
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    content_type = request.content_type or ""
    if content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        # Uploaded files are checked by what reads them (a toolkit's source by its checks).
        _check_pairs(_("form field"), _multi(request.POST))
    else:
        # Any other body may be JSON: django-ninja parses every body as JSON, whatever its
        # content type says.
        body = request.body
        if not body.strip():
            return
        try:
            document = loads_strict(body)
        except BadInput:
            raise
        except (ValueError, RecursionError):
            # Not JSON: for the view to describe; only the refusals here.
            return
        check_json(document)
        setattr(request, PARSED_JSON, document)


def refusal(exc: BadInput) -> str:
    return _("Refused: %(where)s %(problem)s.") % {"where": exc.where, "problem": exc.problem}


def _drain(request: HttpRequest) -> bool:
    """Read a refused body to its end so the answer reaches the client; False when it is
    too large to be worth reading (the connection is then closed with it unread)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    if length > MAX_DRAIN_BYTES:
        return False
    stream = request.META.get("wsgi.input")
    if stream is None:
        return True
    left = length
    while left > 0:
        chunk = stream.read(min(_DRAIN_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
    return True


def _answer(
    request: HttpRequest, status: int, message: str, field: str | None = None, line: int | None = None
) -> HttpResponse:
    if request.path.startswith(_MACHINE_PREFIXES):
        body = {"errors": [{"message": message, "field": field, "line": line}]}
        return JsonResponse(body, status=status)
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


def too_big_message() -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _(
        "The request body is larger than %(limit)s bytes; a toolkit's source may be at most 512 KiB."
    ) % {"limit": f"{limit:,}"}


class BoundedInputMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            response = _answer(request, 413, too_big_message())
            if not _drain(request):
                response["Connection"] = "close"
            return response
        try:
            check_request(request)
        except BadInput as exc:
            return _answer(request, 400, refusal(exc), exc.field, exc.line)
        except RequestDataTooBig:
            return _answer(request, 413, too_big_message())
        except TooManyFieldsSent:
            return _answer(request, 400, _("The request has too many form fields."))
        except MultiPartParserError:
            return _answer(request, 400, _("The form body cannot be read (a malformed multipart body)."))
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        from toolhub.toolkits.lifecycle import QueueUnavailable

        if isinstance(exception, QueueUnavailable):
            # Committed, but not queued: the revision is failed, so Retry works at once.
            message = _("Saved, but no worker can take it right now; press Retry on the Environment tab later.")
            return _answer(request, 503, message)
        if isinstance(exception, (OperationalError, InterfaceError)):
            # The database refused or lost the connection (a restart, a failover, no free slot):
            # the server's condition, not the caller's, so a tool server's client gets a JSON 503
            # it may retry, not the HTML 500 page, and the connection is made anew.
            from toolhub import dbretry

            logger.warning("database unavailable on %s %s: %s", request.method, request.path, str(exception).strip())
            dbretry.reconnect()
            response = _answer(request, 503, _(dbretry.UNAVAILABLE))
            response["Retry-After"] = "1"
            return response
        return None
