from __future__ import annotations

from typing import Any

from ninja import Schema
from pydantic import Field


class ErrorItem(Schema):
    message: str
    field: str | None = None
    line: int | None = None


class ErrorOut(Schema):
    errors: list[ErrorItem]


class ToolkitIn(Schema):
    source: str
    slug: str | None = None


class SourceIn(Schema):
    source: str


class RollbackIn(Schema):
    revision: int


class RevisionOut(Schema):
    revision: int
    sha256: str
    version: str
    created_at: str
    uploaded_by: str
    status: str


class ToolkitSummary(Schema):
    slug: str
    title: str
    version: str
    revision: int | None
    status: str
    tool_names: list[str]


class AccessOut(Schema):
    use: str
    groups: list[str]
    users: list[str]


class AccessIn(Schema):
    use: str
    groups: list[str] = Field(default_factory=list, max_length=200)
    users: list[str] = Field(default_factory=list, max_length=200)


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


class ToolkitList(Schema):
    items: list[ToolkitSummary]


class ValvesIn(Schema):
    values: dict[str, Any]


class ValvesOut(Schema):
    values: dict[str, Any]
    secrets: dict[str, bool]


class PackageRequestOut(Schema):
    toolkit: str
    revision: int
    specifier: str


class PackageOut(Schema):
    name: str
    status: str
    constraint: str
    requested_by: list[PackageRequestOut]
    reviewed_by: str | None
    reason: str


class PackageList(Schema):
    items: list[PackageOut]


class ApproveIn(Schema):
    constraint: str | None = None


class RejectIn(Schema):
    reason: str = Field(min_length=1)


class InvokeIn(Schema):
    arguments: dict[str, Any] = Field(default_factory=dict)
    wait: bool = True
    messages: list[Any] | None = None
    files: list[Any] | None = None


class RespondIn(Schema):
    value: Any = None


class EventOut(Schema):
    seq: int
    type: str
    data: Any


class InvocationOut(Schema):
    id: str
    toolkit: str
    revision: int
    tool: str
    arguments: dict[str, Any]
    status: str
    result: Any = None
    error: str | None
    events: list[EventOut]
    created_at: str
    started_at: str | None
    finished_at: str | None
    duration_ms: int | None
    limit: str | None = None
    pending_call: dict[str, Any] | None = None
    egress: dict[str, Any] | None = None
    client: str | None = None
    surface: str = "api"


class QueuedOut(Schema):
    id: str
    status: str


class ModelConnectionIn(Schema):
    name: str = Field(max_length=200)
    base_url: str = Field(max_length=1000)
    api_key: str = Field(default="", max_length=4096)
    models: list[str] = Field(default_factory=list, max_length=100)
    headers: dict[str, str] = Field(default_factory=dict, max_length=20)
    timeout_seconds: float = 60.0
    use: str = "everyone"
    groups: list[str] = Field(default_factory=list, max_length=100)


class ModelConnectionOut(Schema):
    id: int
    name: str
    base_url: str
    models: list[str]
    header_names: list[str]
    timeout_seconds: float
    use: str
    groups: list[str]
    api_key_set: bool
    created_at: str


class ModelConnectionList(Schema):
    items: list[ModelConnectionOut]


class ModelListOut(Schema):
    models: list[str]


class ClientIn(Schema):
    name: str = Field(min_length=1, max_length=100)
    acts_for_users: bool = False
    user_header: str = Field(default="X-OpenWebUI-User-Email", max_length=100)
    create_users: bool = False


class ClientOut(Schema):
    id: int
    name: str
    acts_for_users: bool
    user_header: str
    create_users: bool
    created_at: str
    last_used_at: str | None


class ClientCreatedOut(ClientOut):
    token: str


class ClientList(Schema):
    items: list[ClientOut]
