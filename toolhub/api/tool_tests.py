"""The API of saved tool tests and their runs (docs/tool-tests.md): a django-ninja Router that
toolhub.api.api adds to the API. A toolkit's owner and admins only: anyone else who may see the
toolkit gets 403, and those who may not see it 404. Errors keep the API's shape
{"errors": [{"message", "field", "line"}]}."""

from __future__ import annotations

from typing import Any, Literal

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from ninja import Field, Path, Router, Schema, Status

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import can_manage_toolkit
from toolhub.api import schemas as s
from toolhub.toolkits import selectors, tool_tests
from toolhub.toolkits.models import Toolkit, ToolTest, ToolTestRun

router = Router(tags=["tool tests"])
ERRORS: dict[int, Any] = {code: s.ErrorOut for code in (400, 401, 403, 404, 409, 503)}
REVISION_NUMBER = Path(..., ge=1, le=2**31 - 1)
ID = Path(..., ge=1, le=2**31 - 1)
RUNS_LISTED = 50


class CheckIn(s.StrictBody):
    kind: Literal["equals", "contains", "regex", "json_path", "fails_with"]
    value: Any = None
    path: str | None = None


class ToolTestIn(s.StrictBody):
    name: str = Field(min_length=1, max_length=tool_tests.MAX_NAME_CHARS, pattern=s.NOT_BLANK)
    tool: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    checks: list[CheckIn] = Field(default_factory=list, max_length=20)
    # UserValves to run with; stored encrypted and never returned (only their names are).
    user_valves: dict[str, Any] | None = None


class ToolTestOut(Schema):
    id: int
    name: str
    tool: str
    arguments: dict[str, Any]
    checks: list[dict[str, Any]]
    user_valves: list[str]
    created_at: str


class ToolTestList(Schema):
    items: list[ToolTestOut]


class RunStarted(Schema):
    id: int
    status: str


class CaseOut(Schema):
    test: str
    tool: str
    passed: bool
    # What the call returned (null when it failed or none was made).
    result: Any = None
    message: str
    expected: str
    actual: str
    # The call's invocation (GET /api/v1/invocations/{id} for its invoker and admins), if one ran.
    invocation: str | None


class OverrideOut(Schema):
    by: str | None
    at: str | None
    reason: str


class RunOut(Schema):
    id: int
    revision: int
    gate: bool
    status: str
    total: int
    failed: int
    error: str
    created_at: str
    finished_at: str | None
    override: OverrideOut | None = None
    cases: list[CaseOut] | None = None


class RunList(Schema):
    items: list[RunOut]


def _refused(exc: tool_tests.ToolTestRefused) -> Status[dict[str, Any]]:
    return Status(exc.status, {"errors": [{"message": exc.message, "field": exc.field, "line": None}]})


def _forbidden() -> Status[dict[str, Any]]:
    return Status(403, {"errors": [{"message": _("Only the toolkit's owner and admins may see and change its tests."), "field": None, "line": None}]})


def _managed(request: AuthenticatedHttpRequest, slug: str) -> Toolkit | None:
    """The toolkit if the caller manages it; None if they only may see it (Http404 if not)."""
    toolkit = selectors.get_toolkit_for_user(user=request.user, slug=slug)
    return toolkit if can_manage_toolkit(request.user, toolkit) else None


def _test_out(test: ToolTest) -> dict[str, Any]:
    return {"id": test.pk, "name": test.name, "tool": test.tool, "arguments": test.arguments, "checks": test.checks,
            "user_valves": test.user_valve_names, "created_at": test.created_at.isoformat()}


def _run_out(run: ToolTestRun, *, cases: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": run.pk, "revision": run.revision.number, "gate": run.gate, "status": run.status, "total": run.total,
        "failed": run.failed, "error": run.error, "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }
    if run.overridden_at is not None:
        out["override"] = {"by": run.overridden_by.username if run.overridden_by else None,
                           "at": run.overridden_at.isoformat(), "reason": run.override_reason}
    if cases:
        out["cases"] = [
            {"test": r.name, "tool": r.tool, "passed": r.passed,
             "result": r.invocation.result if r.invocation is not None else None, "message": r.message, "expected": r.expected,
             "actual": r.actual, "invocation": str(r.invocation_id) if r.invocation_id else None}
            for r in run.results.all()
        ]
    return out


@router.get("/toolkits/{slug}/tests", response={200: ToolTestList, **ERRORS})
def list_tests(request: AuthenticatedHttpRequest, slug: str) -> dict[str, Any] | Status[dict[str, Any]]:
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    return {"items": [_test_out(t) for t in tool_tests.tests_of(toolkit)]}


@router.post("/toolkits/{slug}/tests", response={201: ToolTestOut, **ERRORS})
def create_test(request: AuthenticatedHttpRequest, slug: str, payload: ToolTestIn) -> Status[dict[str, Any]]:
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    checks = [c.model_dump(exclude_none=True) | {"value": c.value} for c in payload.checks]
    try:
        test = tool_tests.tool_test_create(
            toolkit=toolkit, name=payload.name, tool=payload.tool, arguments=payload.arguments, checks=checks, by=request.user,
            user_valves=payload.user_valves or None,
        )
    except tool_tests.ToolTestRefused as exc:
        return _refused(exc)
    return Status(201, _test_out(test))


@router.delete("/toolkits/{slug}/tests/{test_id}", response={204: None, **ERRORS})
def delete_test(
    request: AuthenticatedHttpRequest, slug: str, test_id: int = ID
) -> Status[dict[str, Any]] | Status[None]:
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    tool_tests.tool_test_delete(test=get_object_or_404(ToolTest, pk=test_id, toolkit=toolkit))
    return Status(204, None)


@router.get("/toolkits/{slug}/test-runs", response={200: RunList, **ERRORS})
def list_runs(request: AuthenticatedHttpRequest, slug: str) -> dict[str, Any] | Status[dict[str, Any]]:
    """The toolkit's last runs, newest first (without their cases)."""
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    return {"items": [_run_out(run) for run in tool_tests.runs_of(toolkit)[:RUNS_LISTED]]}


@router.post("/toolkits/{slug}/revisions/{revision}/test-runs", response={202: RunStarted, **ERRORS})
def start_run(request: AuthenticatedHttpRequest, slug: str, revision: int = REVISION_NUMBER) -> Status[dict[str, Any]]:
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    found = get_object_or_404(toolkit.revisions, number=revision)
    try:
        run = tool_tests.test_run_start(toolkit=toolkit, revision=found, by=request.user)
    except tool_tests.ToolTestRefused as exc:
        return _refused(exc)
    return Status(202, {"id": run.pk, "status": run.status})


@router.get("/toolkits/{slug}/revisions/{revision}/test-runs/{run_id}", response={200: RunOut, **ERRORS})
def get_run(
    request: AuthenticatedHttpRequest, slug: str, revision: int = REVISION_NUMBER, run_id: int = ID
) -> dict[str, Any] | Status[dict[str, Any]]:
    toolkit = _managed(request, slug)
    if toolkit is None:
        return _forbidden()
    run = get_object_or_404(
        tool_tests.runs_of(toolkit).prefetch_related("results__invocation"), pk=run_id, revision__number=revision
    )
    return _run_out(run, cases=True)
