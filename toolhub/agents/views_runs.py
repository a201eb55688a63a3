"""The Agent page (start a run) and a run's page, whose log tree and answer poll a fragment
rendered on the server."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods
from markdown_it import MarkdownIt

from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.agents import selectors, services
from toolhub.agents.models import AgentRun
from toolhub.toolkits import access
from toolhub.toolkits.models import Status

# Raw HTML off and only safe link schemes: an answer is the model's text, not trusted markup.
_MARKDOWN = MarkdownIt("js-default")


def _choices(request: AuthenticatedHttpRequest) -> dict[str, Any]:
    connections = services.usable_connections(user=request.user)
    kits = (
        access.toolkits_usable_by(request.user)
        .select_related("current_revision")
        .filter(current_revision__status=Status.READY)
        .defer("current_revision__source", "current_revision__build_log", "current_revision__lock",
               "current_revision__traceback")
        .order_by("title", "slug")
    )
    strategies, toolkits = [], []
    for kit in kits:
        revision = kit.current_revision
        assert revision is not None
        if revision.kind == "agent_strategy":
            strategies.append(kit)
        elif revision.tool_names:
            toolkits.append({"slug": kit.slug, "title": kit.title, "tools": list(revision.tool_names)})
    return {"connections": connections, "strategies": strategies, "toolkits": toolkits}


@login_required
@require_http_methods(["GET", "POST"])
def agent_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    errors: list[tuple[str, str | None]] = []
    values: dict[str, Any] = {
        "model": "", "strategy": "function_calling", "max_iterations": 5, "query": "",
        "tools": [f"{request.GET.get('toolkit', '')}::{t}" for t in request.GET.getlist("tool")],
        "toolkit": request.GET.get("toolkit", ""),
    }
    if request.method == "POST":
        connection, _sep, model = request.POST.get("model", "").partition("::")
        tools = [dict(zip(("toolkit", "tool"), v.split("::", 1), strict=False)) for v in request.POST.getlist("tools")[:100]]
        try:
            iterations = int(request.POST.get("max_iterations", "5"))
        except ValueError:
            iterations = 0
        values = {"model": request.POST.get("model", ""), "strategy": request.POST.get("strategy", ""),
                  "max_iterations": request.POST.get("max_iterations", "5"), "query": request.POST.get("query", "")[:20_000],
                  "tools": request.POST.getlist("tools")[:100], "toolkit": ""}
        try:
            run = services.agent_run_create(
                user=request.user, connection=connection, model=model, strategy=values["strategy"],
                tools=tools, query=values["query"], max_iterations=iterations,
            )
        except services.AgentRunRejected as exc:
            errors = exc.errors
        else:
            return redirect(run)
    context = {**_choices(request), "values": values, "errors": errors}
    return render(request, "agents/new.html", context, status=400 if errors else 200)


def _live_context(run: AgentRun) -> dict[str, Any]:
    return {
        "run": run,
        "tree": run.log_tree(),
        "answer_html": _MARKDOWN.render(run.answer) if run.answer else "",
    }


@login_required
@require_GET
def agent_run_detail(request: AuthenticatedHttpRequest, run_id: str) -> HttpResponse:
    run = selectors.get_agent_run_for_user(user=request.user, run_id=run_id)
    return render(request, "agents/run.html", _live_context(run))


@login_required
@require_GET
def agent_run_live(request: AuthenticatedHttpRequest, run_id: str) -> HttpResponse:
    run = selectors.get_agent_run_for_user(user=request.user, run_id=run_id)
    return render(request, "agents/_run_live.html", _live_context(run))


@login_required
@require_GET
def agent_run_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    page = Paginator(selectors.agent_run_list(user=request.user), 25).get_page(request.GET.get("page"))
    return render(request, "agents/runs.html", {"page": page, "runs": page.object_list})
