"""Writes of model connections. Every input is checked and bounded here, so the pages and the
API refuse the same things with the same messages."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from django.contrib.auth.models import Group, User
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from kombu.exceptions import OperationalError

from toolhub import broker
from toolhub.agents.client import Client, ModelError
from toolhub.agents.models import AgentRun, AgentRunStatus, ModelConnection, Use
from toolhub.messages import as_written
from toolhub.runs.models import error_fields
from toolhub.vault.secret_fields import MASK

# The Celery task that runs an agent run (toolhub.agents.tasks.run_agent).
RUN_TASK = "toolhub.agents.tasks.run_agent"

MAX_NAME = 100
MAX_URL = 500
MAX_KEY = 4096
MAX_MODELS = 100
MAX_MODEL_NAME = 200
MAX_HEADERS = 20
MAX_HEADER_VALUE = 2000
MIN_TIMEOUT, MAX_TIMEOUT = 1.0, 600.0
# RFC 9110 token characters.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
# Headers the client sets itself: overriding them would break the request or the key.
_RESERVED_HEADERS = {"authorization", "content-type", "content-length", "host", "transfer-encoding", "connection"}


class ConnectionInvalid(Exception):
    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(message for _field, message in errors))


@dataclass
class ConnectionInput:
    name: str
    base_url: str
    models: list[str]
    timeout_seconds: float = 60.0
    use: str = Use.EVERYONE
    groups: list[str] | None = None
    # None keeps the stored key; "" removes it.
    api_key: str | None = None
    # A value of "********" keeps that header's stored value; None keeps every header.
    headers: Mapping[str, str] | None = None


def _check_url(url: str, errors: list[tuple[str, str]]) -> str:
    url = url.strip()
    if not url or len(url) > MAX_URL:
        errors.append(("base_url", _("Give the endpoint's base URL (at most %(max)d characters).") % {"max": MAX_URL}))
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        errors.append(("base_url", _("The base URL must start with http:// or https:// and name a host.")))
    elif parts.username or parts.password:
        errors.append(("base_url", _("Put the API key in its own field, not in the URL.")))
    elif parts.query or parts.fragment:
        errors.append(("base_url", _("The base URL takes no query string or fragment.")))
    # The client appends /chat/completions and /models itself.
    return url.rstrip("/")


def _check_models(models: Iterable[str], errors: list[tuple[str, str]]) -> list[str]:
    names = list(dict.fromkeys(m.strip() for m in models if m and m.strip()))
    if len(names) > MAX_MODELS:
        errors.append(("models", _("Offer at most %(max)d models.") % {"max": MAX_MODELS}))
    if any(len(n) > MAX_MODEL_NAME or any(c.isspace() for c in n) for n in names):
        errors.append(("models", _("A model name has no spaces and at most %(max)d characters.") % {"max": MAX_MODEL_NAME}))
    return names


def _check_headers(
    headers: Mapping[str, str] | None, stored: dict[str, str], errors: list[tuple[str, str]]
) -> dict[str, str]:
    if headers is None:
        return stored
    if len(headers) > MAX_HEADERS:
        errors.append(("headers", _("At most %(max)d extra headers.") % {"max": MAX_HEADERS}))
        return stored
    out: dict[str, str] = {}
    for name, value in headers.items():
        name = str(name).strip()
        value = str(value).strip()
        if not _HEADER_NAME.fullmatch(name):
            errors.append(("headers", _("Not a header name: %(name)s.") % {"name": repr(name[:100])}))
        elif name.lower() in _RESERVED_HEADERS:
            errors.append(("headers", _("The %(name)s header is set by ToolHub itself.") % {"name": name}))
        elif value == MASK:
            if name not in stored:
                errors.append(("headers", _("The header %(name)s has no stored value to keep.") % {"name": name}))
            else:
                out[name] = stored[name]
        elif len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\0"):
            errors.append(("headers", _("The value of %(name)s is too long or spans lines.") % {"name": name}))
        else:
            out[name] = value
    return out


def _clean(data: ConnectionInput, connection: ModelConnection | None) -> tuple[dict, str, dict[str, str], list[Group]]:
    errors: list[tuple[str, str]] = []
    name = " ".join(data.name.split())
    if not name or len(name) > MAX_NAME:
        errors.append(("name", _("Give the connection a name of at most %(max)d characters.") % {"max": MAX_NAME}))
    base_url = _check_url(data.base_url, errors)
    models = _check_models(data.models, errors)
    try:
        timeout = float(data.timeout_seconds)
    except (TypeError, ValueError):
        timeout = 0.0
    if not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        errors.append(("timeout_seconds", _("The time-out is between %(min)s and %(max)s seconds.") % {"min": f"{MIN_TIMEOUT:g}", "max": f"{MAX_TIMEOUT:g}"}))
    if data.use not in Use.values:
        errors.append(("use", _("Who may use it: everyone, groups or admins.")))
    groups: list[Group] = []
    if data.use == Use.GROUPS:
        wanted = list(dict.fromkeys(g.strip() for g in (data.groups or []) if g.strip()))[:100]
        groups = list(Group.objects.filter(name__in=wanted))
        missing = sorted(set(wanted) - {g.name for g in groups})
        if missing:
            errors.append(("groups", _("No such group: %(names)s.") % {"names": ', '.join(missing)[:200]}))
        elif not groups:
            errors.append(("groups", _("Choose at least one group.")))
    if data.api_key is None:
        api_key = connection.api_key() if connection else ""
    else:
        api_key = data.api_key.strip()
        if len(api_key) > MAX_KEY or any(c.isspace() for c in api_key):
            errors.append(("api_key", _("An API key has no spaces and at most %(max)d characters.") % {"max": MAX_KEY}))
    headers = _check_headers(data.headers, connection.extra_headers() if connection else {}, errors)
    if errors:
        raise ConnectionInvalid(errors)
    fields = {"name": name, "base_url": base_url, "offered_models": models, "timeout_seconds": timeout, "use": data.use}
    return fields, api_key, headers, groups


def _save(connection: ModelConnection, data: ConnectionInput) -> ModelConnection:
    fields, api_key, headers, groups = _clean(data, connection if connection.pk else None)
    for key, value in fields.items():
        setattr(connection, key, value)
    connection.set_secrets(api_key=api_key, headers=headers)
    connection.updated_at = timezone.now()
    try:
        with transaction.atomic():
            connection.save()
            connection.groups.set(groups)
    except IntegrityError:
        raise ConnectionInvalid([("name", _("A connection with this name exists already."))]) from None
    return connection


def connection_create(*, data: ConnectionInput, by: User) -> ModelConnection:
    return _save(ModelConnection(created_by=by), data)


def connection_update(*, connection: ModelConnection, data: ConnectionInput) -> ModelConnection:
    return _save(connection, data)


def connection_delete(*, connection: ModelConnection) -> None:
    connection.delete()


def connection_list_models(*, connection: ModelConnection) -> list[str]:
    """The endpoint's `/models`, for the "Test connection" button. Bounded by the connection's
    time-out (at most 15 s here, since a person waits for it). Raises `ModelError`."""
    return Client(connection, timeout=min(connection.timeout_seconds, 15.0)).list_models()


__all__ = [
    "ConnectionInput", "ConnectionInvalid", "ModelError", "connection_create", "connection_delete",
    "connection_list_models", "connection_update",
]


# AGENT RUNS
# ------------------------------------------------------------------------------

MAX_QUERY = 20_000
MAX_ITERATIONS = 50
_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")


class AgentRunRejected(Exception):
    """Carries the HTTP status the API answers with and a list of (message, field)."""

    def __init__(self, status: int, errors: list[tuple[str, str | None]]) -> None:
        super().__init__(errors[0][0] if errors else "")
        self.status = status
        self.errors = errors


def model_tool_name(slug: str, tool: str) -> str:
    """What the model calls a ToolHub tool: `{slug}__{tool}`, kept to the 64 characters OpenAI
    allows (longer names end in a stable hash)."""
    name = _TOOL_NAME.sub("_", f"{slug}__{tool}")
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:55]}_{digest}"


def usable_connections(*, user: User) -> list[ModelConnection]:
    connections = ModelConnection.objects.prefetch_related("groups").order_by("name")
    group_ids = set(user.groups.values_list("pk", flat=True)) if user.is_authenticated else set()
    return [c for c in connections if c.usable_by(user, group_ids)]


def agent_run_create(
    *, user: User, connection: str, model: str, strategy: str, tools: list[dict], query: str, max_iterations: int = 5
) -> AgentRun:
    """Check a run's request and queue it. Raises `AgentRunRejected` (nothing is stored)."""
    from django.conf import settings

    from toolhub.toolkits import access
    from toolhub.toolkits.models import Status

    found = ModelConnection.objects.prefetch_related("groups").filter(name=connection).first()
    if found is None or not found.usable_by(user):
        raise AgentRunRejected(404, [(_("No such model connection."), "connection")])
    errors: list[tuple[str, str | None]] = []
    model = (model or "").strip()
    if not model or (found.offered_models and model not in found.offered_models):
        errors.append((_("Choose one of the connection's models."), "model"))
    query = (query or "").strip()
    if not query or len(query) > MAX_QUERY:
        errors.append((_("Type a query of at most %(max)d characters.") % {"max": MAX_QUERY}, "query"))
    if not isinstance(max_iterations, int) or not 1 <= max_iterations <= MAX_ITERATIONS:
        errors.append((_("max_iterations is between 1 and %(max)d.") % {"max": MAX_ITERATIONS}, "max_iterations"))
    strategy_kit = access.toolkit_usable_by(user, strategy)
    revision = strategy_kit.current_revision if strategy_kit else None
    if revision is None or revision.kind != "agent_strategy":
        errors.append((_("No such agent strategy."), "strategy"))
    elif revision.status != Status.READY:
        errors.append((_("The strategy is not ready yet."), "strategy"))
    if len(tools) > settings.TOOLHUB_AGENT_MAX_TOOLS:
        errors.append((_("Give at most %(max)d tools.") % {"max": settings.TOOLHUB_AGENT_MAX_TOOLS}, "tools"))
        tools = []
    wanted = list(dict.fromkeys((str(t.get("toolkit", "")), str(t.get("tool", ""))) for t in tools))
    kits = {
        kit.slug: kit
        for kit in access.toolkits_usable_by(user).select_related("current_revision").filter(
            slug__in={slug for slug, _t in wanted}
        )
    }
    chosen = []
    for slug, tool in wanted:
        kit = kits.get(slug)
        current = kit.current_revision if kit else None
        if current is None or current.kind == "agent_strategy" or tool not in (current.tool_names or []):
            errors.append((_("No tool %(tool)s in toolkit %(toolkit)s.") % {"tool": tool[:100], "toolkit": slug[:64]}, "tools"))
        elif current.status != Status.READY:
            errors.append((_("The toolkit %(toolkit)s is not ready.") % {"toolkit": slug}, "tools"))
        else:
            chosen.append({"toolkit": slug, "tool": tool, "name": model_tool_name(slug, tool)})
    if errors or strategy_kit is None or revision is None:
        raise AgentRunRejected(400, errors)
    hour_ago = timezone.now() - timedelta(hours=1)
    if AgentRun.objects.filter(user=user, created_at__gte=hour_ago).count() >= settings.TOOLHUB_AGENT_RUNS_PER_HOUR:
        message = _("You started %(n)d agent runs in the last hour, the limit; try again later.")
        raise AgentRunRejected(429, [(message % {"n": settings.TOOLHUB_AGENT_RUNS_PER_HOUR}, None)])
    run = AgentRun.objects.create(
        user=user, connection=found, connection_name=found.name, model=model, strategy=strategy_kit,
        strategy_revision=revision, tools=chosen, query=query, max_iterations=max_iterations,
    )
    try:
        send_run(str(run.id))
    except (OperationalError, OSError) as exc:
        AgentRun.objects.filter(pk=run.pk).update(
            status=AgentRunStatus.FAILED, finished_at=timezone.now(),
            **error_fields(as_written("No worker could take the run (the broker is unavailable)."))
        )
        raise AgentRunRejected(503, [(_("No worker is available right now; try again later."), None)]) from exc
    return run


def send_run(run_id: str) -> None:
    """Publish the run's task, failing fast when the broker cannot be reached (as invocations
    do); the reaper's re-sends go through here too."""
    broker.send(RUN_TASK, run_id)
