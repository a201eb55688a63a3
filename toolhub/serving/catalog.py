"""The tools a caller may use, named the way a surface exposes them.

`/mcp/{slug}` and `/openapi/{slug}` use the toolkit's own tool names; `/mcp` and `/openapi`
(every toolkit at once) use `{slug}__{tool}`, shortened with a stable hash when longer than
64 characters, since hosts hand these names to OpenAI function calling."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from toolhub.toolkits.access import toolkits_usable_by
from toolhub.toolkits.models import Revision, Status, Toolkit

MAX_NAME = 64
# A page of one catalogue: more toolkits than this are not listed on one surface.
MAX_TOOLKITS = 500


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


def served_toolkit(user, slug: str) -> Toolkit | None:
    """The toolkit if the user may use it (ready or not), else None."""
    return (
        toolkits_usable_by(user).select_related("current_revision").defer(
            "current_revision__source", "current_revision__build_log", "current_revision__lock"
        ).filter(slug=slug).first()
    )


def catalog(user, slug: str | None = None) -> list[ServedTool]:
    """The ready tools `user` may use: of one toolkit by their own names, or of all of them
    by prefixed names."""
    if slug is not None:
        toolkit = served_toolkit(user, slug)
        return _tools_of(toolkit, prefixed=False) if toolkit else []
    toolkits = (
        toolkits_usable_by(user).select_related("current_revision")
        .defer("current_revision__source", "current_revision__build_log", "current_revision__lock")
        .filter(current_revision__status=Status.READY).order_by("slug")[:MAX_TOOLKITS]
    )
    return [served for toolkit in toolkits for served in _tools_of(toolkit, prefixed=True)]


def find(user, name: str, slug: str | None = None) -> ServedTool | None:
    for served in catalog(user, slug):
        if served.name == name:
            return served
    return None
