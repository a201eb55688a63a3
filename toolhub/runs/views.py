from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub.accounts.roles import can_manage_toolkit, is_admin
from toolhub.lib import schema_forms
from toolhub.runs import services
from toolhub.runs.models import Invocation, RunStatus
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views import _detail_context

HISTORY_PAGE = 25


def get_invocation_for_user(*, user, invocation_id) -> Invocation:
    """The one way pages fetch an invocation: its invoker and admins see it, nobody else
    learns it exists."""
    qs = Invocation.objects.select_related("toolkit", "revision", "user")
    invocation = qs.filter(pk=invocation_id).first()
    if invocation is None or not (is_admin(user) or invocation.user_id == user.pk):
        raise Http404
    return invocation


def _tool_forms(revision, *, data=None, errors_for=None, values_for=None) -> list[dict]:
    tools = []
    for spec in (revision.tools if revision else []) or []:
        function = spec.get("function", {})
        name = function.get("name", "")
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        values = (values_for or {}).get(name)
        errors = (errors_for or {}).get(name, {})
        prefix = f"{name}__"
        tools.append({
            "name": name,
            "description": function.get("description", ""),
            "schema": schema,
            "required": set(schema.get("required", [])),
            "prefix": prefix,
            "fields": schema_forms.build_fields(
                schema, values, errors=errors, data=data if errors else None, prefix=prefix
            ),
            "errors": errors,
            "form_errors": errors.get("__all__", []),
            "messages_errors": errors.get("__messages__", []),
            "files_errors": errors.get("__files__", []),
        })
    return tools


@login_required
@require_GET
def toolkit_tools(request: HttpRequest, slug: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    ctx = _detail_context(request, toolkit, "tools")
    again = request.GET.get("again")
    values_for = {}
    if again:
        previous = Invocation.objects.filter(pk=_uuid(again), toolkit=toolkit).first()
        if previous is not None and (is_admin(request.user) or previous.user_id == request.user.pk):
            values_for[previous.tool] = previous.arguments
    ctx["tools"] = _tool_forms(ctx["revision"], values_for=values_for)
    ctx["recent"] = _recent(request, toolkit)
    if ctx["revision"] and ctx["revision"].status != "ready":
        ctx["not_ready"] = services.not_ready_reason(toolkit)
    return render(request, "runs/tools.html", ctx)


def _uuid(value: str):
    import uuid

    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _recent(request, toolkit):
    qs = Invocation.objects.filter(toolkit=toolkit).select_related("user").defer("result", "traceback")
    if not is_admin(request.user):
        qs = qs.filter(user=request.user)
    return qs[:10]


@login_required
@require_POST
def tool_run(request: HttpRequest, slug: str, tool: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    revision = toolkit.current_revision
    spec = services.tool_spec(revision, tool) if revision else None
    if spec is None:
        raise Http404
    schema = spec.get("parameters") or {"type": "object", "properties": {}}
    arguments, errors = schema_forms.parse_submission(schema, request.POST, prefix=f"{tool}__")
    advanced: dict = {}
    for key in ("messages", "files"):
        raw = request.POST.get(f"{tool}____{key}__", "").strip()
        if raw:
            try:
                advanced[key] = json.loads(raw)
                if not isinstance(advanced[key], list):
                    raise ValueError
            except ValueError:
                errors[f"__{key}__"] = [_("Enter a JSON list.")]
    if not errors:
        try:
            invocation = services.invocation_create(
                toolkit=toolkit, tool=tool, arguments=arguments, user=request.user, **advanced
            )
        except services.InvocationRejected as exc:
            if exc.status == 400:
                for message, field in exc.errors:
                    errors.setdefault(field or "__all__", []).append(message)
            else:
                messages.error(request, exc.errors[0][0])
                return redirect("toolkit_tools", slug=toolkit.slug)
        else:
            return redirect(invocation)
    ctx = _detail_context(request, toolkit, "tools")
    ctx["tools"] = _tool_forms(revision, data=request.POST, errors_for={tool: errors}, values_for={tool: arguments})
    ctx["recent"] = _recent(request, toolkit)
    return render(request, "runs/tools.html", ctx, status=400)


def _invocation_context(request: HttpRequest, invocation: Invocation) -> dict:
    events = list(invocation.events.all())
    statuses, message_text, citations, notifications, logs, others = [], "", [], [], {}, []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "status":
            if not data.get("hidden"):
                statuses.append(data)
        elif event.type == "message":
            message_text += str(data.get("content", ""))
        elif event.type == "replace":
            message_text = str(data.get("content", ""))
        elif event.type in ("citation", "source"):
            citations.append(_citation(data))
        elif event.type == "notification":
            notifications.append({"seq": event.seq, **data})
        elif event.type == "log":
            node_id = str(data.get("id", event.seq))
            node = logs.setdefault(node_id, {"id": node_id, "children": []})
            node.update({k: v for k, v in data.items() if k != "children"})
        else:
            others.append(event)
    tree = [n for n in logs.values() if not n.get("parent_id") or str(n["parent_id"]) not in logs]
    for node in logs.values():
        parent = node.get("parent_id")
        if parent and str(parent) in logs:
            logs[str(parent)]["children"].append(node)
    result_text = None
    if invocation.result is not None:
        result_text = invocation.result if invocation.result_type == "text" and isinstance(invocation.result, str) else json.dumps(invocation.result, indent=2, ensure_ascii=False)
    return {
        "invocation": invocation,
        "toolkit": invocation.toolkit,
        "statuses": statuses,
        "message_text": message_text,
        "citations": citations,
        "notifications": notifications,
        "log_tree": tree,
        "other_events": others,
        "result_text": result_text,
        "show_traceback": can_manage_toolkit(request.user, invocation.toolkit),
        "live": not invocation.is_finished,
    }


def _citation(data: dict) -> dict:
    source = data.get("source") if isinstance(data.get("source"), dict) else {}
    documents = data.get("document") if isinstance(data.get("document"), list) else []
    metadata = data.get("metadata") if isinstance(data.get("metadata"), list) else []
    url = str(source.get("url", ""))
    return {
        "name": str(source.get("name", "")) or url,
        "url": url if url.startswith(("http://", "https://")) else "",
        "documents": [str(d) for d in documents],
        "metadata": metadata,
    }


@login_required
@require_GET
def invocation_detail(request: HttpRequest, invocation_id) -> HttpResponse:
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    return render(request, "runs/invocation.html", _invocation_context(request, invocation))


@login_required
@require_GET
def invocation_live(request: HttpRequest, invocation_id) -> HttpResponse:
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    return render(request, "runs/_live.html", _invocation_context(request, invocation))


@login_required
@require_POST
def invocation_respond(request: HttpRequest, invocation_id) -> HttpResponse:
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    if invocation.user_id != request.user.pk:
        raise Http404
    answer = request.POST.get("answer")
    call = invocation.pending_call or {}
    value: object
    if call.get("type") == "confirmation":
        value = answer == "confirm"
    else:
        value = request.POST.get("value", "") if answer != "cancel" else None
    try:
        services.invocation_respond(invocation=invocation, value=value)
    except services.InvocationRejected as exc:
        messages.error(request, exc.errors[0][0])
    if request.headers.get("HX-Request"):
        invocation.refresh_from_db()
        return render(request, "runs/_live.html", _invocation_context(request, invocation))
    return redirect(invocation)


@login_required
@require_http_methods(["GET"])
def invocation_history(request: HttpRequest) -> HttpResponse:
    if not is_admin(request.user):
        raise Http404
    qs = Invocation.objects.select_related("toolkit", "user", "revision").defer("result", "traceback", "revision__source", "revision__build_log", "revision__lock")
    filters = {
        "toolkit": request.GET.get("toolkit", "").strip(),
        "user": request.GET.get("user", "").strip(),
        "status": request.GET.get("status", "").strip(),
        "tool": request.GET.get("tool", "").strip(),
    }
    if filters["toolkit"]:
        qs = qs.filter(toolkit__slug=filters["toolkit"])
    if filters["user"]:
        qs = qs.filter(user__username=filters["user"])
    if filters["status"] in RunStatus.values:
        qs = qs.filter(status=filters["status"])
    if filters["tool"]:
        qs = qs.filter(tool=filters["tool"])
    page = Paginator(qs, HISTORY_PAGE).get_page(request.GET.get("page"))
    return render(request, "runs/history.html", {"page": page, "filters": filters, "statuses": RunStatus.choices})
