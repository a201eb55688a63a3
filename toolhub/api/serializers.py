"""Model → API dictionaries, kept apart from the endpoints so pages and tests can reuse them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from toolhub.agents.models import AgentRun, ModelConnection
from toolhub.packages.models import Package
from toolhub.runs.models import Event, Invocation
from toolhub.runs.selectors import events_after
from toolhub.toolkits import tool_tests
from toolhub.toolkits.access import access_out
from toolhub.toolkits.display import resolve, tool_display
from toolhub.toolkits.models import Revision, Toolkit
from toolhub.toolkits.notices import revision_warnings


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def toolkit_summary(toolkit: Toolkit) -> dict[str, Any]:
    revision = toolkit.current_revision
    return {
        "slug": toolkit.slug,
        "title": toolkit.title,
        "version": revision.version if revision else "",
        "revision": revision.number if revision else None,
        "status": toolkit.status,
        "tool_names": revision.tool_names if revision else [],
    }


def display_for(toolkit: Toolkit, revision: Revision | None, language: str) -> dict[str, Any]:
    """Display strings resolved for a language: the title, the frontmatter description, and
    each tool's display name and descriptions. LLM-facing strings are never resolved: where a
    tool has no display string, its LLM-facing text is shown as written."""
    manifest = revision.manifest if revision else {}
    title = revision.title if revision else toolkit.title
    shown_tools = tool_display(revision=revision, toolkit=toolkit, language=language)
    plugin = (revision.plugin_metadata or {}).get("name") if revision else None
    if manifest.get("description"):
        description = resolve(manifest["description"], toolkit=toolkit, language=language).text
    elif plugin in shown_tools:
        # A RAGFlow plugin without frontmatter: people see its displayDescription, as in RAGFlow.
        description = shown_tools[plugin].description.text
    else:
        description = revision.description if revision else ""
    tools = {
        name: {
            "name": shown.name.text,
            "description": shown.description.text,
            "parameters": {pname: text.text for pname, text in shown.parameters.items()},
        }
        for name, shown in shown_tools.items()
    }
    return {
        "title": resolve(title, toolkit=toolkit, language=language).text,
        "description": description,
        "tools": tools,
    }


def toolkit_out(toolkit: Toolkit, *, language: str = "en") -> dict[str, Any]:
    revision = toolkit.current_revision
    revisions = list(toolkit.revisions.select_related("uploaded_by", "reviewed_by").only(
        "number", "sha256", "version", "created_at", "uploaded_by__username", "status", "reviewed_by__username"
    ).order_by("number"))
    # Each revision's tool tests before it could become current (docs/tool-tests.md).
    tests = tool_tests.revision_tests([r.pk for r in revisions])
    ready = revision is not None and revision.status == "ready"
    data = toolkit_summary(toolkit)
    data.update(
        description=revision.description if revision else "",
        author=revision.manifest.get("author", "") if revision else "",
        status_detail=(revision.status_detail or None) if revision else None,
        manifest=revision.manifest if revision else {},
        requirements=revision.requirement_texts if revision else [],
        tools=revision.tools if ready and revision else [],
        valves_schema=revision.valves_schema if ready and revision else None,
        user_valves_schema=revision.user_valves_schema if ready and revision else None,
        revisions=[
            {"revision": r.number, "sha256": r.sha256, "version": r.version, "created_at": r.created_at.isoformat(),
             "uploaded_by": r.uploaded_by.username, "status": r.status,
             "reviewed_by": r.reviewed_by.username if r.reviewed_by else None, "tests": tests[r.pk]}
            for r in revisions
        ],
        display=display_for(toolkit, revision, language),
        egress={"granted": toolkit.egress_granted, "hosts": toolkit.egress_hosts} if toolkit.egress_granted else None,
        warnings=revision_warnings(revision),
        access=access_out(toolkit),
    )
    return data


def review_out(revision: Revision) -> dict[str, Any]:
    """A revision awaiting review (toolhub.toolkits.selectors.revisions_awaiting_review)."""
    current = revision.toolkit.current_revision
    return {
        "toolkit": revision.toolkit.slug,
        "revision": revision.number,
        "version": revision.version,
        "sha256": revision.sha256,
        "uploaded_by": revision.uploaded_by.username,
        "created_at": _iso(revision.created_at),
        "waiting_since": _iso(revision.status_changed_at),
        "status_detail": revision.status_detail,
        "current_revision": current.number if current else None,
    }


def package_out(package: Package) -> dict[str, Any]:
    """A package annotated with `requested_count`, the first of its requests in `shown_requests`."""
    return {
        "name": package.name,
        "status": package.status,
        "constraint": package.constraint,
        "source_build": package.source_build,
        "requested_by": [
            {"toolkit": r.revision.toolkit.slug, "revision": r.revision.number, "specifier": r.specifier}
            for r in package.shown_requests  # type: ignore[attr-defined]
        ],
        "requested_count": package.requested_count,  # type: ignore[attr-defined]
        "reviewed_by": package.reviewed_by.username if package.reviewed_by else None,
        "reason": package.reason,
        "index": package_index_out(package),
    }


# What an index lookup stores (toolhub.packages.index_client.IndexInfo), with its defaults.
_INDEX_FIELDS: dict[str, object] = {"index": "", "version": "", "released": "", "summary": "", "license": "", "wheel": None,
                 "dependencies": None, "requires": [], "error": ""}


def package_index_out(package: Package) -> dict[str, Any]:
    info = package.index_info if isinstance(package.index_info, dict) else {}
    return {"state": package.index_state, "checked_at": package.index_checked_at,
            **{key: info.get(key, default) for key, default in _INDEX_FIELDS.items()}}


def event_out(event: Event) -> dict[str, Any]:
    return {"seq": event.seq, "type": event.type, "data": event.data}


def invocation_out(invocation: Invocation, *, with_events: bool = True) -> dict[str, Any]:
    """An invocation with (at most) its first EVENTS_PAGE_MAX events; `events_next_after` is
    the cursor of the rest (GET /invocations/{id}/events?after=), null when they are all here.
    An invocation read with `has_events` (runs.services.wait_for reads it with the row) that
    has none is answered without a query for them."""
    wanted = with_events and getattr(invocation, "has_events", True)
    events, events_next_after = events_after(invocation) if wanted else ([], None)
    return {
        "id": str(invocation.id),
        "toolkit": invocation.toolkit.slug,
        "revision": invocation.revision.number,
        "tool": invocation.tool,
        "arguments": invocation.arguments,
        "status": invocation.status,
        "result": invocation.result,
        "error": invocation.error or None,
        "events": [event_out(e) for e in events],
        "events_next_after": events_next_after,
        "created_at": invocation.created_at.isoformat(),
        "started_at": _iso(invocation.started_at),
        "finished_at": _iso(invocation.finished_at),
        "duration_ms": invocation.duration_ms,
        "limit": invocation.limit or None,
        "pending_call": invocation.pending_call,
        "egress": invocation.egress,
        "client": invocation.client.name if invocation.client is not None else None,
        "surface": invocation.surface,
    }


def model_connection_out(connection: ModelConnection) -> dict[str, Any]:
    """A model connection; the key and the headers' values are never part of it."""
    return {
        "id": connection.pk,
        "name": connection.name,
        "base_url": connection.base_url,
        "models": list(connection.offered_models),
        "header_names": list(connection.header_names),
        "timeout_seconds": connection.timeout_seconds,
        "use": connection.use,
        "groups": sorted(g.name for g in connection.groups.all()),
        "api_key_set": connection.api_key_set,
        "created_at": _iso(connection.created_at),
    }


def agent_run_out(run: AgentRun) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "status": run.status,
        "connection": run.connection_name,
        "model": run.model,
        "strategy": run.strategy.slug,
        "tools": [{"toolkit": t["toolkit"], "tool": t["tool"], "name": t["name"]} for t in run.tools],
        "query": run.query,
        "max_iterations": run.max_iterations,
        "answer": run.answer if run.status == "succeeded" else None,
        "error": run.error or None,
        "limit": run.limit or None,
        "log": run.log,
        "invocations": run.invocations,
        "usage": run.usage,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }
