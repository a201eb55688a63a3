"""The tools a caller may use, named the way a surface exposes them.

`/mcp/{slug}` and `/openapi/{slug}` use the toolkit's own tool names; `/mcp` and `/openapi`
(every toolkit at once) use `{slug}__{tool}`, shortened with a stable hash when longer than
64 characters, since hosts hand these names to OpenAI function calling."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing

from toolhub.accounts.clients import Caller
from toolhub.toolkits.access import toolkit_to_call, toolkits_usable_by
from toolhub.toolkits.models import Revision, Status, Toolkit, Use

MAX_NAME = 64
CURSOR_SALT = "toolhub.serving.catalog.cursor"


class TooManyToolkits(Exception):
    pass


class BadCursor(ValueError):
    pass


def prefixed_name(slug: str, tool: str) -> str:
    name = f"{slug}__{tool}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11]}_{digest}"


@dataclass(frozen=True)
class ServedTool:
    name: str
    toolkit: Toolkit
    revision: Revision
    tool: str
    description: str
    parameters: dict[str, Any]


def _tools_of(toolkit: Toolkit, *, prefixed: bool) -> list[ServedTool]:
    revision = toolkit.current_revision
    if revision is None or revision.status != Status.READY:
        return []
    out = []
    for spec in revision.tools or []:
        function = spec.get("function") or {}
        tool = function.get("name")
        if not tool:
            continue
        out.append(ServedTool(
            name=prefixed_name(toolkit.slug, tool) if prefixed else tool, toolkit=toolkit, revision=revision, tool=tool,
            description=function.get("description") or "",
            parameters=function.get("parameters") or {"type": "object", "properties": {}},
        ))
    return out


def shared_only(caller: Caller) -> bool:
    """Whether the caller is an app that may act for people but named none. Open WebUI fetches
    an OpenAPI tool server's document once, with the key alone, and offers that list to every
    one of its users: so such a caller sees (and calls) only the toolkits everyone may use; a
    person's own toolkits are listed when the app names the person (MCP lists per person, and
    each toolkit has its own URL)."""
    client = caller.client
    return bool(client is not None and client.acts_for_users and caller.user.pk == client.service_user_id)


def _usable(user, shared: bool):
    return Toolkit.objects.filter(use=Use.EVERYONE) if shared else toolkits_usable_by(user)


def served_toolkit(user, slug: str, *, shared: bool = False) -> Toolkit | None:
    """The toolkit if the user may use it (ready or not), else None. `shared`: only a toolkit
    everyone may use (see shared_only)."""
    return (
        _usable(user, shared).select_related("current_revision").defer(
            "current_revision__source", "current_revision__build_log", "current_revision__lock"
        ).filter(slug=slug).first()
    )


def catalog(user, slug: str | None = None, *, shared: bool = False) -> list[ServedTool]:
    """The ready tools `user` may use: of one toolkit by their own names, or of all of them
    by prefixed names. `shared`: only those of toolkits everyone may use (see shared_only)."""
    if slug is not None:
        toolkit = served_toolkit(user, slug, shared=shared)
        return _tools_of(toolkit, prefixed=False) if toolkit else []
    most = settings.TOOLHUB_OPENAPI_MAX_TOOLKITS
    toolkits = list(_ready_toolkits(user, shared)[: most + 1])
    if len(toolkits) > most:
        raise TooManyToolkits(
            f"More than {most} toolkits are ready for this caller: too many for one document. Use each toolkit's "
            "own tool server (/openapi/{slug}/openapi.json), or MCP at /mcp, which lists every toolkit page by page."
        )
    return [served for toolkit in toolkits for served in _tools_of(toolkit, prefixed=True)]


def _ready_toolkits(user, shared: bool):
    return (
        _usable(user, shared).select_related("current_revision")
        .defer("current_revision__source", "current_revision__build_log", "current_revision__lock")
        .filter(current_revision__status=Status.READY).order_by("slug")
    )


def catalog_page(user, cursor: str | None = None, *, shared: bool = False) -> tuple[list[ServedTool], str | None]:
    """One page of every ready tool `user` may use (prefixed names), TOOLHUB_MCP_PAGE_TOOLKITS
    toolkits at a time in slug order, and the cursor of the next page (None after the last). Cursors are
    signed, so a client can hand back only what it was given; BadCursor otherwise."""
    toolkits = _ready_toolkits(user, shared)
    if cursor:
        try:
            after = signing.loads(cursor, salt=CURSOR_SALT)
        except signing.BadSignature:
            raise BadCursor("The cursor is not one this server gave out.") from None
        toolkits = toolkits.filter(slug__gt=str(after))
    size = settings.TOOLHUB_MCP_PAGE_TOOLKITS
    page = list(toolkits[: size + 1])
    following = signing.dumps(page[size - 1].slug, salt=CURSOR_SALT) if len(page) > size else None
    return [served for toolkit in page[:size] for served in _tools_of(toolkit, prefixed=True)], following


def toolkit_to_serve(user, slug: str, *, shared: bool = False) -> Toolkit | None:
    """served_toolkit for calling one of its tools: the toolkit with only what a call reads of
    it and its current revision, in one plain query for the common cases
    (toolhub.toolkits.access.toolkit_to_call, what the API's invoke uses)."""
    return toolkit_to_call(user, slug, everyone_only=shared)


def find(user, name: str, slug: str | None = None, *, shared: bool = False, toolkit: Toolkit | None = None) -> ServedTool | None:
    """The tool called `name` on the surface of `slug` (or of every toolkit), if the user may
    use it. A prefixed name is looked up by its toolkit, so every toolkit can be called however
    many there are; a name shortened with a hash is matched among the toolkits its start names.
    `toolkit`: `slug`'s toolkit as this request already found it (toolkit_to_serve), so it is
    not read again."""
    if slug is not None:
        if toolkit is None:
            toolkit = toolkit_to_serve(user, slug, shared=shared)
        return next((s for s in _tools_of(toolkit, prefixed=False) if s.name == name), None) if toolkit else None
    # A slug never holds `__` (toolkits.source_checks.slugify), so the first one ends it.
    head = name.split("__", 1)[0]
    named = toolkit_to_serve(user, head, shared=shared) if "__" in name else None
    match = next((s for s in _tools_of(named, prefixed=True) if s.name == name), None) if named else None
    if match is None and len(name) == MAX_NAME:
        # Shortened: `{slug}__{tool}` cut to 53 characters, then `_` and a hash; the start of
        # the slug is what is left of it.
        for candidate in _ready_toolkits(user, shared).filter(slug__startswith=head[: MAX_NAME - 11]).iterator():
            match = next((s for s in _tools_of(candidate, prefixed=True) if s.name == name), None)
            if match is not None:
                break
    return match
