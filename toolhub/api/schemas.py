"""The API's request bodies and responses. Each response read from a model is defined here only,
by a ReadFrom schema: an endpoint returns the object and django-ninja builds the answer from
it; code that needs the answer as a dict asks the schema for one, as in
`InvocationOut.from_orm(invocation).model_dump()`."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from toolhub.accounts.clients import CLIENT_SCOPE, MAX_RATE
from toolhub.accounts.models import ClientCredential
from toolhub.agents import services as agents
from toolhub.agents.models import AgentRun, ModelConnection
from toolhub.api.read_from import ReadFrom
from toolhub.packages.index_client import IndexInfo
from toolhub.packages.models import Package, PackageRequest
from toolhub.runs.models import Event, Invocation
from toolhub.runs.selectors import events_after
from toolhub.toolkits import bulk, tool_tests
from toolhub.toolkits.access import access_out
from toolhub.toolkits.display import display_texts
from toolhub.toolkits.models import Revision, Toolkit
from toolhub.toolkits.notices import revision_warnings

# What the API accepts, stated in the OpenAPI document too (lengths are those of the columns).
SLUG_PATTERN = r"^[a-z0-9_]{1,64}$"
RevisionStatus = Literal["uploaded", "awaiting_approval", "building", "ready", "failed", "rejected", "awaiting_review"]
PackageStatus = Literal["pending", "approved", "rejected"]
RunStatus = Literal["queued", "running", "awaiting_input", "succeeded", "failed", "timed_out"]
MAX_REASON_CHARS = 2000
MAX_CONSTRAINT_CHARS = 200
MAX_MESSAGES = 1000
MAX_FILES = 100
# Who may use a toolkit or a model connection (their `Use` choices).
UseChoice = Literal["everyone", "groups", "admins"]
# Some text besides white space (a JSON Schema pattern matches anywhere in the string).
NOT_BLANK = r"\S"


class StrictBody(Schema):
    """A request body: a JSON object with only the documented keys, each of its documented
    type (strict: no 0 for false, no "5" for 5)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


class ErrorItem(Schema):
    message: str
    field: str | None = None
    line: int | None = None


class ErrorOut(Schema):
    errors: list[ErrorItem]


class ToolkitIn(StrictBody):
    source: str = Field(min_length=1)
    slug: str | None = Field(default=None, pattern=SLUG_PATTERN, max_length=64)


class SourceIn(StrictBody):
    source: str = Field(min_length=1)


class RollbackIn(StrictBody):
    revision: int = Field(ge=1, le=2**31 - 1)


# Read from a Revision that ToolkitOut.resolve_revisions gave its `gate_tests`.
class RevisionOut(ReadFrom):
    revision: int
    sha256: str
    version: str
    created_at: str
    uploaded_by: str
    status: RevisionStatus
    # The admin who approved or rejected it in review (`awaiting_review`), if any.
    reviewed_by: str | None = None
    # Its tool tests before it could become current: {"status": "none|running|passed|failed|overridden", "run": id}.
    tests: dict | None = None

    @staticmethod
    def resolve_revision(revision: Revision) -> int:
        return revision.number

    @staticmethod
    def resolve_created_at(revision: Revision) -> str:
        return revision.created_at.isoformat()

    @staticmethod
    def resolve_uploaded_by(revision: Revision) -> str:
        return revision.uploaded_by.username

    @staticmethod
    def resolve_reviewed_by(revision: Revision) -> str | None:
        return revision.reviewed_by.username if revision.reviewed_by else None

    @staticmethod
    def resolve_tests(revision: Revision) -> dict:
        return revision.gate_tests  # type: ignore[attr-defined]


# Read from a Toolkit (and its current revision).
class ToolkitSummary(ReadFrom):
    slug: str
    title: str
    version: str
    revision: int | None
    status: RevisionStatus
    tool_names: list[str]

    @staticmethod
    def resolve_version(toolkit: Toolkit) -> str:
        revision = toolkit.current_revision
        return revision.version if revision else ""

    @staticmethod
    def resolve_revision(toolkit: Toolkit) -> int | None:
        revision = toolkit.current_revision
        return revision.number if revision else None

    @staticmethod
    def resolve_tool_names(toolkit: Toolkit) -> list[str]:
        revision = toolkit.current_revision
        return revision.tool_names if revision else []


class AccessOut(Schema):
    use: UseChoice
    groups: list[str]
    users: list[str]


class AccessIn(StrictBody):
    use: UseChoice
    groups: list[str] = Field(default_factory=list, max_length=200)
    users: list[str] = Field(default_factory=list, max_length=200)

    @field_validator("groups", "users")
    @classmethod
    def _only_for_groups(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Names sent with `everyone` or `admins` would be stored and silently do nothing: a
        # caller who meant "admins and carol" must hear that this is not what it set.
        use = info.data.get("use")
        if value and use is not None and use != "groups":
            raise ValueError(f"{info.field_name} apply only with use: groups; send none with use: {use}.")
        return value


def _ready(toolkit: Toolkit) -> Revision | None:
    """The current revision when it is ready: only then are its tools and valves shown."""
    revision = toolkit.current_revision
    return revision if revision is not None and revision.status == "ready" else None


# Read from a Toolkit, in full: `display` is resolved for the `language` of the validation's
# context (`ToolkitOut.from_orm(toolkit, context={"language": "pl"})`), else English.
class ToolkitOut(ToolkitSummary):
    description: str
    author: str
    status_detail: str | None
    manifest: dict[str, str]
    requirements: list[str]
    tools: list[dict[str, Any]]
    valves_schema: dict[str, Any] | None
    user_valves_schema: dict[str, Any] | None
    revisions: list[RevisionOut]
    display: dict[str, Any]
    egress: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] = []
    access: AccessOut

    @staticmethod
    def resolve_description(toolkit: Toolkit) -> str:
        revision = toolkit.current_revision
        return revision.description if revision else ""

    @staticmethod
    def resolve_author(toolkit: Toolkit) -> str:
        revision = toolkit.current_revision
        return revision.manifest.get("author", "") if revision else ""

    @staticmethod
    def resolve_status_detail(toolkit: Toolkit) -> str | None:
        revision = toolkit.current_revision
        return (revision.status_detail or None) if revision else None

    @staticmethod
    def resolve_manifest(toolkit: Toolkit) -> dict[str, str]:
        revision = toolkit.current_revision
        return revision.manifest if revision else {}

    @staticmethod
    def resolve_requirements(toolkit: Toolkit) -> list[str]:
        revision = toolkit.current_revision
        return revision.requirement_texts if revision else []

    @staticmethod
    def resolve_tools(toolkit: Toolkit) -> list[dict[str, Any]]:
        revision = _ready(toolkit)
        return revision.tools if revision else []

    @staticmethod
    def resolve_valves_schema(toolkit: Toolkit) -> dict[str, Any] | None:
        revision = _ready(toolkit)
        return revision.valves_schema if revision else None

    @staticmethod
    def resolve_user_valves_schema(toolkit: Toolkit) -> dict[str, Any] | None:
        revision = _ready(toolkit)
        return revision.user_valves_schema if revision else None

    @staticmethod
    def resolve_revisions(toolkit: Toolkit) -> list[Revision]:
        revisions = list(toolkit.revisions.select_related("uploaded_by", "reviewed_by").only(
            "number", "sha256", "version", "created_at", "uploaded_by__username", "status", "reviewed_by__username"
        ).order_by("number"))
        # Each revision's tool tests before it could become current (docs/tool-tests.md), in one
        # query for all of them; RevisionOut reads them from the revision.
        tests = tool_tests.revision_tests([r.pk for r in revisions])
        for revision in revisions:
            revision.gate_tests = tests[revision.pk]  # type: ignore[attr-defined]
        return revisions

    @staticmethod
    def resolve_display(toolkit: Toolkit, context: dict[str, Any]) -> dict[str, Any]:
        return display_texts(toolkit=toolkit, revision=toolkit.current_revision, language=context.get("language", "en"))

    @staticmethod
    def resolve_egress(toolkit: Toolkit) -> dict[str, Any] | None:
        return {"granted": toolkit.egress_granted, "hosts": toolkit.egress_hosts} if toolkit.egress_granted else None

    @staticmethod
    def resolve_warnings(toolkit: Toolkit) -> list[dict[str, Any]]:
        return revision_warnings(toolkit.current_revision)

    @staticmethod
    def resolve_access(toolkit: Toolkit) -> dict[str, Any]:
        return access_out(toolkit)


class ToolkitList(Schema):
    items: list[ToolkitSummary]


class ValvesIn(StrictBody):
    values: dict[str, Any]
    # The revision the values were meant for (the toolkit's `revision` as read): when given
    # and no longer current, nothing is saved (409).
    revision: int | None = Field(default=None, ge=1, le=2**31 - 1)


class ValvesOut(Schema):
    values: dict[str, Any]
    secrets: dict[str, bool]


# Read from a PackageRequest: the revision that asks for the package.
class PackageRequestOut(ReadFrom):
    toolkit: str
    revision: int
    specifier: str

    @staticmethod
    def resolve_toolkit(request: PackageRequest) -> str:
        return request.revision.toolkit.slug

    @staticmethod
    def resolve_revision(request: PackageRequest) -> int:
        return request.revision.number


# What a stored index lookup (Package.index_info, IndexInfo.as_dict()) reads as where it lacks
# a key.
_INDEX_DEFAULTS = {f.name: f.default for f in dataclasses.fields(IndexInfo) if f.default is not dataclasses.MISSING}


class PackageIndexOut(Schema):
    """What the package index said about the name (the approval queue's information)."""

    state: Literal["unchecked", "checking", "found", "missing", "error"]
    checked_at: datetime | None
    # The index that answered (never with credentials).
    index: str
    version: str
    # ISO 8601 upload time of the latest release (PEP 700), "" when the index names none.
    released: str
    summary: str
    license: str
    # A wheel of the latest release installs on the target Python; null without any file.
    wheel: bool | None
    # Requirements the latest release declares for the target Python; null without metadata.
    dependencies: int | None
    requires: list[str]
    # timeout, unreachable, status, not_json, too_large or unreadable when state is error.
    error: str


# Read from a Package annotated with `requested_count` and the first of its requests in
# `shown_requests` (toolhub.packages.selectors.packages_with_requests).
class PackageOut(ReadFrom):
    name: str
    status: PackageStatus
    constraint: str
    source_build: bool
    index: PackageIndexOut
    requested_by: list[PackageRequestOut]
    # How many revisions ask for it; `requested_by` lists the first of them only.
    requested_count: int
    reviewed_by: str | None
    reason: str

    @staticmethod
    def resolve_index(package: Package) -> dict[str, Any]:
        # The stored lookup, read by PackageIndexOut; a key it lacks reads as IndexInfo's default.
        stored = package.index_info if isinstance(package.index_info, dict) else {}
        return {**_INDEX_DEFAULTS, **stored, "state": package.index_state, "checked_at": package.index_checked_at}

    @staticmethod
    def resolve_requested_by(package: Package) -> list[PackageRequest]:
        return package.shown_requests  # type: ignore[attr-defined]

    @staticmethod
    def resolve_reviewed_by(package: Package) -> str | None:
        return package.reviewed_by.username if package.reviewed_by else None


class PackageList(Schema):
    items: list[PackageOut]
    count: int
    next_offset: int | None


class ApproveIn(StrictBody):
    constraint: str | None = Field(default=None, max_length=MAX_CONSTRAINT_CHARS)
    # Needed to approve a name the package index does not know (a typo, or squatted).
    approve_unknown: bool = False
    # Let the package be built from its source distribution: its build code runs on the build
    # host, inside the build sandbox.
    source_build: bool = False


class RejectIn(StrictBody):
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS)


# Read from a revision awaiting review (toolhub.toolkits.selectors.revisions_awaiting_review).
class ReviewOut(ReadFrom):
    toolkit: str
    revision: int
    version: str
    sha256: str
    uploaded_by: str
    created_at: str
    # Since when it waits, and what it would receive (the toolkit's status detail).
    waiting_since: str
    status_detail: str
    # The toolkit's current revision, which keeps serving until this one is approved.
    current_revision: int | None

    @staticmethod
    def resolve_toolkit(revision: Revision) -> str:
        return revision.toolkit.slug

    @staticmethod
    def resolve_revision(revision: Revision) -> int:
        return revision.number

    @staticmethod
    def resolve_uploaded_by(revision: Revision) -> str:
        return revision.uploaded_by.username

    @staticmethod
    def resolve_created_at(revision: Revision) -> str | None:
        return _iso(revision.created_at)

    @staticmethod
    def resolve_waiting_since(revision: Revision) -> str | None:
        return _iso(revision.status_changed_at)

    @staticmethod
    def resolve_current_revision(revision: Revision) -> int | None:
        current = revision.toolkit.current_revision
        return current.number if current else None


class ReviewList(Schema):
    items: list[ReviewOut]
    count: int
    next_offset: int | None


class ReviewApproveIn(StrictBody):
    # Needed when its tool tests failed (docs/tool-tests.md): recorded with the approval.
    reason: str = Field("", max_length=MAX_REASON_CHARS)


class ReviewRejectIn(StrictBody):
    # The toolkit's author reads it on the Overview.
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS, pattern=NOT_BLANK)


class InvokeIn(StrictBody):
    arguments: dict[str, Any] = Field(default_factory=dict)
    wait: bool = True
    messages: list[Any] | None = Field(default=None, max_length=MAX_MESSAGES)
    files: list[Any] | None = Field(default=None, max_length=MAX_FILES)


class RespondIn(StrictBody):
    value: Any = None


# Read from an Event.
class EventOut(ReadFrom):
    seq: int
    type: str
    data: Any


class EventPage(Schema):
    items: list[EventOut]
    # The `after` of the next page; null on the last one.
    next_after: int | None


def _events_page(invocation: Invocation, context: dict[str, Any]) -> tuple[list[Event], int | None]:
    """The invocation's first page of events and the cursor of the rest, for `events` and
    `events_next_after`: one query answers both, kept in the answer's context for the second.
    An invocation read with `has_events` (runs.services.wait_for reads it with the row) that
    has none is answered without a query for them."""
    key = f"events {invocation.pk}"
    if key not in context:
        context[key] = events_after(invocation) if getattr(invocation, "has_events", True) else ([], None)
    return context[key]


class ReadsInvocation(ReadFrom):
    """The fields every shape of an invocation shares, read the same way (InvocationOut, and the
    list's lists.InvocationSummary)."""

    @staticmethod
    def resolve_id(invocation: Invocation) -> str:
        return str(invocation.id)

    @staticmethod
    def resolve_toolkit(invocation: Invocation) -> str:
        return invocation.toolkit.slug

    @staticmethod
    def resolve_revision(invocation: Invocation) -> int:
        return invocation.revision.number

    @staticmethod
    def resolve_error(invocation: Invocation) -> str | None:
        return invocation.error or None

    @staticmethod
    def resolve_created_at(invocation: Invocation) -> str:
        return invocation.created_at.isoformat()

    @staticmethod
    def resolve_started_at(invocation: Invocation) -> str | None:
        return _iso(invocation.started_at)

    @staticmethod
    def resolve_finished_at(invocation: Invocation) -> str | None:
        return _iso(invocation.finished_at)

    @staticmethod
    def resolve_limit(invocation: Invocation) -> str | None:
        return invocation.limit or None

    @staticmethod
    def resolve_client(invocation: Invocation) -> str | None:
        return invocation.client.name if invocation.client is not None else None


# Read from an Invocation: with (at most) its first EVENTS_PAGE_MAX events; `events_next_after`
# is the cursor of the rest (GET /invocations/{id}/events?after=), null when they are all here.
class InvocationOut(ReadsInvocation):
    id: str
    toolkit: str
    revision: int
    tool: str
    arguments: dict[str, Any]
    status: RunStatus
    result: Any = None
    error: str | None
    events: list[EventOut]
    # Set when the run has more events than `events` holds: GET .../events?after= this.
    events_next_after: int | None = None
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    limit: str | None = None
    pending_call: dict[str, Any] | None = None
    egress: dict[str, Any] | None = None
    client: str | None = None
    surface: str = "api"

    @staticmethod
    def resolve_events(invocation: Invocation, context: dict[str, Any]) -> list[Event]:
        return _events_page(invocation, context)[0]

    @staticmethod
    def resolve_events_next_after(invocation: Invocation, context: dict[str, Any]) -> int | None:
        return _events_page(invocation, context)[1]


class QueuedOut(Schema):
    id: str
    status: RunStatus


class ModelConnectionIn(StrictBody):
    name: str = Field(min_length=1, max_length=agents.MAX_NAME, pattern=NOT_BLANK)
    base_url: str = Field(min_length=1, max_length=agents.MAX_URL, pattern=NOT_BLANK)
    api_key: str = Field(default="", max_length=agents.MAX_KEY)
    models: list[Annotated[str, Field(max_length=agents.MAX_MODEL_NAME)]] = Field(default_factory=list, max_length=agents.MAX_MODELS)
    headers: dict[str, Annotated[str, Field(max_length=agents.MAX_HEADER_VALUE)]] = Field(
        default_factory=dict, max_length=agents.MAX_HEADERS
    )
    timeout_seconds: float = Field(default=60.0, ge=agents.MIN_TIMEOUT, le=agents.MAX_TIMEOUT)
    use: UseChoice = "everyone"
    groups: list[str] = Field(default_factory=list, max_length=100)


# Read from a ModelConnection; the key and the headers' values are never part of it.
class ModelConnectionOut(ReadFrom):
    id: int
    name: str
    base_url: str
    models: list[str]
    header_names: list[str]
    timeout_seconds: float
    use: UseChoice
    groups: list[str]
    api_key_set: bool
    created_at: str

    @staticmethod
    def resolve_id(connection: ModelConnection) -> int:
        return connection.pk

    @staticmethod
    def resolve_models(connection: ModelConnection) -> list[str]:
        return list(connection.offered_models)

    @staticmethod
    def resolve_header_names(connection: ModelConnection) -> list[str]:
        return list(connection.header_names)

    @staticmethod
    def resolve_groups(connection: ModelConnection) -> list[str]:
        return sorted(g.name for g in connection.groups.all())

    @staticmethod
    def resolve_created_at(connection: ModelConnection) -> str | None:
        return _iso(connection.created_at)


class ModelConnectionList(Schema):
    items: list[ModelConnectionOut]


class ModelListOut(Schema):
    models: list[str]


class ClientIn(StrictBody):
    name: str = Field(min_length=1, max_length=100, pattern=NOT_BLANK)
    acts_for_users: bool = False
    user_header: str = Field(default="X-OpenWebUI-User-Email", max_length=100)
    create_users: bool = False
    # Only with acts_for_users; even then the credential only calls tools.
    may_act_for_admins: bool = False
    # Empty: the settings' default; 0 switches the limit off.
    calls_per_minute: int | None = Field(default=None, ge=0, le=MAX_RATE)
    user_calls_per_minute: int | None = Field(default=None, ge=0, le=MAX_RATE)


class ClientOut(ReadFrom):
    id: int
    name: str
    acts_for_users: bool
    user_header: str
    create_users: bool
    may_act_for_admins: bool
    # What the credential can reach: the serving surfaces only.
    scope: list[str]
    calls_per_minute: int | None
    user_calls_per_minute: int | None
    created_at: str
    last_used_at: str | None

    @staticmethod
    def resolve_scope(client: ClientCredential) -> list[str]:
        return list(CLIENT_SCOPE)

    @staticmethod
    def resolve_created_at(client: ClientCredential) -> str:
        return client.created_at.isoformat()

    @staticmethod
    def resolve_last_used_at(client: ClientCredential) -> str | None:
        return _iso(client.last_used_at)


class ClientCreatedOut(ClientOut):
    token: str


class ClientList(Schema):
    items: list[ClientOut]


class AgentToolIn(StrictBody):
    toolkit: str = Field(max_length=64)
    tool: str = Field(max_length=200)


class AgentRunIn(StrictBody):
    connection: str = Field(max_length=200)
    model: str = Field(max_length=200)
    strategy: str = Field(default="function_calling", max_length=64)
    tools: list[AgentToolIn] = Field(default_factory=list, max_length=100)
    query: str = Field(min_length=1, max_length=agents.MAX_QUERY, pattern=NOT_BLANK)
    max_iterations: int = Field(default=5, ge=1, le=agents.MAX_ITERATIONS)


class AgentLogNode(Schema):
    id: str
    parent_id: str | None
    label: str
    status: str
    data: dict[str, Any]


# Read from an AgentRun.
class AgentRunOut(ReadFrom):
    id: str
    status: str
    connection: str
    model: str
    strategy: str
    tools: list[dict[str, str]]
    query: str
    max_iterations: int
    answer: str | None
    error: str | None
    limit: str | None
    log: list[AgentLogNode]
    invocations: list[str]
    usage: dict[str, Any]
    created_at: str
    started_at: str | None
    finished_at: str | None

    @staticmethod
    def resolve_id(run: AgentRun) -> str:
        return str(run.id)

    @staticmethod
    def resolve_connection(run: AgentRun) -> str:
        return run.connection_name

    @staticmethod
    def resolve_strategy(run: AgentRun) -> str:
        return run.strategy.slug

    @staticmethod
    def resolve_tools(run: AgentRun) -> list[dict[str, str]]:
        return [{"toolkit": t["toolkit"], "tool": t["tool"], "name": t["name"]} for t in run.tools]

    @staticmethod
    def resolve_answer(run: AgentRun) -> str | None:
        return run.answer if run.status == "succeeded" else None

    @staticmethod
    def resolve_error(run: AgentRun) -> str | None:
        return run.error or None

    @staticmethod
    def resolve_limit(run: AgentRun) -> str | None:
        return run.limit or None

    @staticmethod
    def resolve_created_at(run: AgentRun) -> str | None:
        return _iso(run.created_at)

    @staticmethod
    def resolve_started_at(run: AgentRun) -> str | None:
        return _iso(run.started_at)

    @staticmethod
    def resolve_finished_at(run: AgentRun) -> str | None:
        return _iso(run.finished_at)


class ExportEntry(Schema):
    """One tool of an Open WebUI export; its other keys are ignored."""

    id: str = Field(min_length=1)
    content: str = Field(min_length=1)
    name: str | None = None


# The body of POST /imports/openwebui, read by toolhub.toolkits.bulk.parse_export.
EXPORT_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"oneOf": [
        {"type": "array", "items": ExportEntry.model_json_schema(), "minItems": 1, "maxItems": bulk.MAX_EXPORT_ENTRIES},
        ExportEntry.model_json_schema(),
    ]}}},
}


class ImportEntryOut(Schema):
    name: str
    outcome: Literal["loaded", "unchanged", "refused", "not_imported"]
    slug: str | None
    revision: int | None
    tools: int
    error: str | None
    line: int | None
    # A new revision of a toolkit someone else owns: its owner, and whether it waits for an
    # admin's review before it serves (imported code is reviewed like an author's upload).
    owner: str | None = None
    waits_for_review: bool = False
    review: str | None = None


class ImportOut(Schema):
    imported: bool
    entries: list[ImportEntryOut]


class ImportRefusedOut(ErrorOut):
    """Refused whole (`errors` only), or entry by entry (with `entries`, nothing imported)."""

    imported: bool = False
    entries: list[ImportEntryOut] = []


def _iso_text(value: object) -> object:
    # pydantic also takes a number of seconds since 1970 for a datetime (`until=0.5`); the
    # contract is ISO 8601 only.
    if not isinstance(value, str) or not re.match(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("must be an ISO 8601 date and time, for example 2026-01-31T00:00:00Z")
    return value


IsoDateTime = Annotated[datetime, BeforeValidator(_iso_text)]
