"""The Tests tab of a toolkit (docs/tool-tests.md): its saved tests, a form to add one, "Run
tests", and the runs with each case's outcome. Its owner and admins only: anyone else who may
see the toolkit gets 403, and those who may not see it 404."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.toolkits import selectors, tool_checks, tool_tests
from toolhub.toolkits.models import Toolkit, ToolTest, ToolTestRun
from toolhub.toolkits.views.toolkit import detail_context

RUNS_SHOWN = 20
CHECK_ROWS = 3


def _managed(request: AuthenticatedHttpRequest, slug: str) -> Toolkit:
    toolkit = selectors.get_toolkit_to_manage(
        user=request.user, slug=slug, refusal=_("Only the toolkit's owner and admins may see and change its tests.")
    )
    return toolkit


_INVALID = object()


def _json(text: str | None) -> object:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return _INVALID


def _checks_from_form(post) -> list[dict]:
    """The check rows of the form: a value is JSON when it reads as JSON other than text (for
    `equals` and `json_path`), else the text as typed."""
    checks = []
    for n in range(CHECK_ROWS):
        kind = post.get(f"check-{n}-kind", "")
        if not kind:
            continue
        value: object = post.get(f"check-{n}-value", "")
        if kind in ("equals", "json_path"):
            try:
                parsed = json.loads(str(value))
            except ValueError:
                parsed = value
            value = parsed
        check = {"kind": kind, "value": value}
        if kind == "json_path":
            check["path"] = post.get(f"check-{n}-path", "")
        checks.append(check)
    return checks


@login_required
@require_http_methods(["GET", "POST"])
def toolkit_tests(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = _managed(request, slug)
    form: dict = {}
    error: tuple[str, str | None] | None = None
    if request.method == "POST":
        # Shown again after an error, except the UserValves: they may hold secrets.
        form = {k: v for k, v in request.POST.dict().items() if k != "user_valves"}
        arguments, user_valves = _json(request.POST.get("arguments")), _json(request.POST.get("user_valves"))
        if arguments is _INVALID:
            error = (_("The arguments are not valid JSON."), "arguments")
        elif user_valves is _INVALID:
            error = (_("The UserValves are not valid JSON."), "user_valves")
        else:
            try:
                test = tool_tests.tool_test_create(
                    toolkit=toolkit, name=request.POST.get("name", ""), tool=request.POST.get("tool", ""),
                    arguments=arguments, checks=_checks_from_form(request.POST), by=request.user,
                    user_valves=user_valves or None,
                )
            except tool_tests.ToolTestRefused as exc:
                error = (exc.message, exc.field)
            else:
                messages.success(request, _("Test %(name)s saved.") % {"name": test.name})
                return redirect("toolkit_tests", slug=toolkit.slug)
    ctx = detail_context(request, toolkit, "tests")
    revision = toolkit.current_revision
    ctx |= {
        "tests": [_shown(test) for test in tool_tests.tests_of(toolkit)],
        "runs": tool_tests.runs_of(toolkit)[:RUNS_SHOWN],
        "tool_names": revision.tool_names if revision else [],
        "has_user_valves": bool(revision and revision.user_valves_schema),
        "kinds": tool_checks.KINDS,
        "check_rows": range(CHECK_ROWS),
        "form": form,
        "error": error,
        "max_tests": tool_tests.MAX_TESTS,
    }
    return render(request, "toolkits/tests.html", ctx, status=400 if error else 200)


@login_required
@require_POST
def toolkit_test_delete(request: AuthenticatedHttpRequest, slug: str, test_id: int) -> HttpResponse:
    toolkit = _managed(request, slug)
    test = get_object_or_404(ToolTest, pk=test_id, toolkit=toolkit)
    tool_tests.tool_test_delete(test=test)
    messages.success(request, _("Test %(name)s deleted.") % {"name": test.name})
    return redirect("toolkit_tests", slug=toolkit.slug)


@login_required
@require_POST
def toolkit_tests_run(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    toolkit = _managed(request, slug)
    revision = toolkit.current_revision
    try:
        if revision is None:
            raise tool_tests.ToolTestRefused(409, _("The toolkit has no revision."))
        run = tool_tests.test_run_start(toolkit=toolkit, revision=revision, by=request.user)
    except tool_tests.ToolTestRefused as exc:
        messages.error(request, exc.message)
        return redirect("toolkit_tests", slug=toolkit.slug)
    return redirect("toolkit_test_run", slug=toolkit.slug, run_id=run.pk)


@login_required
@require_GET
def toolkit_test_run(request: AuthenticatedHttpRequest, slug: str, run_id: int) -> HttpResponse:
    toolkit = _managed(request, slug)
    run = get_object_or_404(
        ToolTestRun.objects.select_related("revision", "started_by", "overridden_by"), pk=run_id, toolkit=toolkit
    )
    ctx = detail_context(request, toolkit, "tests")
    ctx |= {"run": run, "cases": case_rows(run), "run_error": run.error_shown()}
    return render(request, "toolkits/test_run.html", ctx)


def _shown(test: ToolTest) -> dict:
    """A test as the list shows it: arguments and check values as JSON, not Python."""
    return {
        "test": test,
        "arguments": json.dumps(test.arguments, ensure_ascii=False),
        "checks": [
            {**check, "value": check["value"] if isinstance(check["value"], str) else json.dumps(check["value"], ensure_ascii=False)}
            for check in test.checks
        ],
    }


def case_rows(run: ToolTestRun) -> list[dict]:
    """A run's cases with the diff of each failing one (also on the review page)."""
    return [
        {
            "result": result,
            "message": result.message_shown(),
            "diff": [] if result.passed else [(_css(line), line) for line in tool_checks.diff_lines(result.expected, result.actual)],
        }
        for result in run.results.all()
    ]


def _css(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    return {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "ctx")
