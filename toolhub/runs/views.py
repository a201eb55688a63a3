from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from toolhub import keyset
from toolhub.accounts.http import AuthenticatedHttpRequest
from toolhub.accounts.roles import can_manage_toolkit, is_admin
from toolhub.runs import injected, rendering, selectors, services
from toolhub.runs.models import Invocation, RunStatus, Surface
from toolhub.runs.selectors import get_invocation_for_user, parse_invocation_id
from toolhub.toolkits import schema_forms, tool_tests
from toolhub.toolkits.display import safe_link, tool_display
from toolhub.toolkits.models import Status
from toolhub.toolkits.selectors import get_toolkit_for_user
from toolhub.toolkits.views.toolkit import detail_context
from toolhub.vault.secret_fields import follow_local_ref

HISTORY_PAGE = 25
# A run's page shows at most this many of its events, the last ones, and links to earlier ones.
RUN_PAGE_EVENTS = 500
# Log nodes nest at most this deep on the page; deeper ones are shown at this depth. The tree
# comes from the tool, and each level is a recursive template include.
MAX_LOG_DEPTH = 12


def _tool_forms(revision, *, data=None, errors_for=None, values_for=None, only: str | None = None, toolkit=None) -> list[dict]:
    """The run forms of the revision's tools (of the one named `only`, when given). The
    parameter table shows each parameter's display description (a RAGFlow
    `displayDescription`, `$t:` keys resolved in the page's language) where it has one."""
    displays = tool_display(revision=revision, toolkit=toolkit or getattr(revision, "toolkit", None)) if revision else {}
    inputs = injected.chat_inputs(revision)
    tools = []
    for spec in (revision.tools if revision else []) or []:
        function = spec.get("function", {})
        name = function.get("name", "")
        if only is not None and name != only:
            continue
        schema = function.get("parameters") or {"type": "object", "properties": {}}
        values = (values_for or {}).get(name)
        errors = (errors_for or {}).get(name, {})
        prefix = f"{name}__"
        # A rejected submission is shown back as typed, the advanced JSON inputs included.
        shown = data if errors else None
        fields = schema_forms.build_fields(schema, values, errors=errors, data=shown, prefix=prefix)
        tools.append({
            "name": name,
            "description": function.get("description", ""),
            "schema": schema,
            "required": set(schema.get("required", [])),
            "prefix": prefix,
            "fields": fields,
            "params": _parameter_rows(schema, fields, displays[name].parameters if name in displays else {}),
            "errors": errors,
            "form_errors": errors.get("__all__", []),
            "messages_errors": errors.get("__messages__", []),
            "files_errors": errors.get("__files__", []),
            "messages_raw": shown.get(f"{prefix}__messages__", "") if shown is not None else "",
            "files_raw": shown.get(f"{prefix}__files__", "") if shown is not None else "",
            "takes_messages": "__messages__" in inputs.get(name, ()),
            "takes_files": "__files__" in inputs.get(name, ()),
        })
    return tools


def _parameter_rows(schema: dict, fields: list, display: dict | None = None) -> list[dict]:
    """The parameter table: the JSON type the tool declares (not the widget chosen for it),
    whether it is required, its default and its description."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    rows = []
    for field in fields:
        prop = properties.get(field.name) if isinstance(properties.get(field.name), dict) else {}
        rows.append({
            "name": field.name,
            "type": _type_label(prop, schema),
            "required": field.required,
            "has_default": "default" in prop,
            "default": json.dumps(prop.get("default"), ensure_ascii=False) if "default" in prop else "",
            "help": str(display[field.name]) if display and display.get(field.name) and str(display[field.name]) else field.help,
        })
    return rows


def _type_label(prop: dict, root: dict, depth: int = 0) -> str:
    if depth > 4 or not isinstance(prop, dict):
        return "any"
    if isinstance(prop.get("enum"), list):
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in prop["enum"][:10])
    ref = prop.get("$ref")
    if isinstance(ref, str):
        target = follow_local_ref(ref, root)
        return _type_label(dict(target), root, depth + 1) if target is not None else "object"
    for key in ("anyOf", "oneOf"):
        if isinstance(prop.get(key), list) and prop[key]:
            return " or ".join(_type_label(branch, root, depth + 1) for branch in prop[key][:5])
    kind = prop.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        items = prop.get("items")
        return f"list of {_type_label(items, root, depth + 1)}" if isinstance(items, dict) and items else "list"
    if kind == "object" or "properties" in prop:
        return str(prop.get("title") or "object") if depth else "object"
    return str(kind) if kind else "any"


@login_required
@require_GET
def toolkit_tools(request: AuthenticatedHttpRequest, slug: str) -> HttpResponse:
    """The playground: the toolkit's tools in a searchable list, one open with its form, and
    its run live beside it. `?tool=` opens a tool, `?run=` shows one of its runs (deep links);
    `?again=` fills the form from an earlier run."""
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    run = None
    if request.GET.get("run"):
        run = get_invocation_for_user(user=request.user, invocation_id=parse_invocation_id(request.GET["run"]))
        if run.toolkit_id != toolkit.pk:
            raise Http404
    values_for = {}
    open_tool = request.GET.get("tool") or None
    again = request.GET.get("again")
    if again:
        previous = Invocation.objects.filter(pk=parse_invocation_id(again), toolkit=toolkit).first()
        if previous is not None and (is_admin(request.user) or previous.user_id == request.user.pk):
            values_for[previous.tool] = previous.arguments
            open_tool = open_tool or previous.tool
    return _playground(request, toolkit, run=run, open_tool=open_tool, values_for=values_for)


def _tool_entries(revision) -> list[dict]:
    entries = []
    for spec in (revision.tools if revision else []) or []:
        function = spec.get("function", {}) if isinstance(spec, dict) else {}
        entries.append({"name": str(function.get("name", "")), "description": str(function.get("description", ""))})
    return entries


def _playground(
    request: AuthenticatedHttpRequest, toolkit, *, run: Invocation | None = None, open_tool: str | None = None,
    data=None, errors_for=None, values_for=None, status: int = 200,
) -> HttpResponse:
    ctx = detail_context(request, toolkit, "tools")
    revision = ctx["revision"]
    entries = _tool_entries(revision)
    query = request.GET.get("q", "").strip()[:100]
    if query:
        # Without JavaScript the list is filtered here; static/js/playground.js filters as one types.
        entries = [e for e in entries if query.lower() in (e["name"] + " " + e["description"]).lower()]
    names = [e["name"] for e in entries]
    values_for = dict(values_for or {})
    if run is not None:
        open_tool = run.tool
        values_for.setdefault(run.tool, run.arguments)
    if open_tool not in names:
        open_tool = names[0] if names else None
    ctx.update(
        entries=entries,
        query=query,
        open_tool=open_tool,
        tools=_tool_forms(revision, data=data, errors_for=errors_for, values_for=values_for, only=open_tool, toolkit=toolkit) if open_tool else [],
        recent=_recent(request, toolkit),
        run=run,
    )
    if run is not None:
        ctx.update(_invocation_context(request, run))
        ctx["toolkit"] = toolkit
    if revision and revision.status != "ready":
        ctx["not_ready"] = services.not_ready_reason(toolkit)
    return render(request, "runs/tools.html", ctx, status=status)


def _playground_url(toolkit, tool: str, run: Invocation | None = None) -> str:
    query = {"tool": tool, **({"run": str(run.id)} if run is not None else {})}
    return f"{reverse('toolkit_tools', args=[toolkit.slug])}?{urlencode(query)}"


def _recent(request, toolkit):
    return selectors.invocations_recent(user=request.user, toolkit=toolkit)


@login_required
@require_POST
def tool_run(request: AuthenticatedHttpRequest, slug: str, tool: str) -> HttpResponse:
    toolkit = get_toolkit_for_user(user=request.user, slug=slug)
    revision = toolkit.current_revision
    if revision is None or revision.status != Status.READY:
        # Say why rather than 404: the form may have been open while the toolkit changed.
        messages.error(request, services.not_ready_reason(toolkit))
        return redirect("toolkit_tools", slug=toolkit.slug)
    spec = services.tool_spec(revision, tool)
    if spec is None:
        raise Http404
    schema = spec.get("parameters") or {"type": "object", "properties": {}}
    arguments, errors = schema_forms.parse_submission(schema, request.POST, prefix=f"{tool}__")
    if errors:
        # Show every problem at once: the schema's verdict on the fields that could be read.
        for message, field in services.check_arguments(schema, arguments):
            if field not in errors:
                errors.setdefault(field or "__all__", []).append(message)
    advanced: dict = {}
    taken = injected.chat_inputs(revision).get(tool, frozenset())
    for key in ("messages", "files"):
        # Only what the tool takes: the form offers nothing else, and anything else sent is dropped.
        raw = request.POST.get(f"{tool}____{key}__", "").strip() if f"__{key}__" in taken else ""
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
                toolkit=toolkit, tool=tool, arguments=arguments, user=request.user, surface=Surface.PAGE, **advanced
            )
        except services.InvocationRejected as exc:
            if exc.status == 400:
                for message, field in exc.errors:
                    errors.setdefault(field or "__all__", []).append(message)
            else:
                messages.error(request, exc.errors[0][0])
                return redirect("toolkit_tools", slug=toolkit.slug)
        else:
            url = _playground_url(toolkit, tool, invocation)
            if not request.headers.get("HX-Request"):
                return redirect(url)
            # The playground swaps in its panel from this page and shows the run's address.
            response = _playground(request, toolkit, run=invocation)
            response["HX-Push-Url"] = url
            return response
    return _playground(
        request, toolkit, open_tool=tool, data=request.POST, errors_for={tool: errors}, values_for={tool: arguments}, status=400
    )


def _invocation_context(request: HttpRequest, invocation: Invocation, *, before: int | None = None) -> dict:
    """What a run's live section shows, from its last RUN_PAGE_EVENTS events (those before the
    seq `before`, when given: a look further back, which does not poll)."""
    events, earlier = selectors.events_before(invocation, before=before, limit=RUN_PAGE_EVENTS)
    statuses, message_text, citations, notifications, logs, others, calls = [], "", [], [], {}, [], []
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
            node.update({k: v for k, v in data.items() if k not in ("children", "id")})
        elif event.type in ("call_answered", "call_timeout"):
            calls.append(_call_line(event.type, data))
        else:
            others.append(event)
    tree = _log_tree(logs)
    elapsed_ms = None
    if not invocation.is_finished:
        since = invocation.started_at or invocation.created_at
        elapsed_ms = max(int((timezone.now() - since).total_seconds() * 1000), 0)
    result_text = result_tree = None
    if invocation.result is not None:
        if invocation.result_type == "text" and isinstance(invocation.result, str):
            result_text = invocation.result
        else:
            result_text = json.dumps(invocation.result, indent=2, ensure_ascii=False)
            if isinstance(invocation.result, dict | list):
                result_tree = rendering.json_tree(invocation.result)
    return {
        "invocation": invocation,
        "toolkit": invocation.toolkit,
        "statuses": statuses,
        # The latest status line is the run's state; the earlier ones are its history.
        "current_status": statuses[-1] if statuses else None,
        "message_text": message_text,
        "message_html": rendering.render_markdown(message_text) if message_text else "",
        # A question's message is Markdown too (Open WebUI renders it): sanitised like a message.
        "ask_message_html": _ask_message(invocation),
        "result_tree": result_tree,
        "citations": citations,
        "notifications": notifications,
        "log_tree": tree,
        "calls": calls,
        "other_events": others,
        "result_text": result_text,
        "show_traceback": can_manage_toolkit(request.user, invocation.toolkit),
        # Only the invoker answers; an admin looking on sees the question without the form.
        "can_respond": invocation.user_id == request.user.pk,
        "can_cancel": services.can_cancel(invocation=invocation, user=request.user),
        # "Save as test" (docs/tool-tests.md): a finished run, for the toolkit's owner and admins.
        "can_save_test": invocation.is_finished and can_manage_toolkit(request.user, invocation.toolkit),
        # The launcher reports kilobytes; filesizeformat wants bytes.
        "max_rss_bytes": invocation.max_rss_kb * 1024 if invocation.max_rss_kb else None,
        "live": not invocation.is_finished,
        "poll": not invocation.is_finished and before is None,
        # Links through a long list of events: the page never carries more than RUN_PAGE_EVENTS.
        "events_shown": (events[0].seq, events[-1].seq) if events and (earlier or before is not None) else None,
        "earlier_url": f"{invocation.get_absolute_url()}?before={events[0].seq}" if earlier and events else "",
        "latest_url": invocation.get_absolute_url() if before is not None else "",
        "elapsed_ms": elapsed_ms,
        # In the language's own decimal style ("1,5 s" in French), like every other number.
        "elapsed_seconds": number_format(elapsed_ms / 1000, 1) if elapsed_ms is not None else "",
    }


def _log_tree(nodes: dict[str, dict]) -> list[dict]:
    """Nest Dify-style log nodes under their parents and return the roots.

    Ids and parents come from the tool: a node whose parent never arrived is a root, a
    cycle of parents is cut where it closes (each node has one parent, so walking up finds
    it), and nodes deeper than MAX_LOG_DEPTH hang at that depth, because each level is a
    recursive template include and a hostile chain must not exhaust the recursion."""
    parent: dict[str, str | None] = {}
    for node_id, node in nodes.items():
        raw = node.get("parent_id")
        key = str(raw) if raw not in (None, "") else None
        parent[node_id] = key if key in nodes and key != node_id else None
    state: dict[str, int] = {}  # 1: on the walk in progress, 2: settled
    for start in nodes:
        path = []
        current: str | None = start
        while current is not None and current not in state:
            state[current] = 1
            path.append(current)
            current = parent[current]
        if current is not None and state[current] == 1:
            parent[path[-1]] = None
        for node_id in path:
            state[node_id] = 2
    depth: dict[str, int] = {}
    for start in nodes:
        chain = []
        current = start
        while current is not None and current not in depth:
            chain.append(current)
            current = parent[current]
        for node_id in reversed(chain):
            above = parent[node_id]
            if above is None:
                depth[node_id] = 0
            elif depth[above] >= MAX_LOG_DEPTH - 1:
                parent[node_id] = parent[above]
                depth[node_id] = depth[above]
            else:
                depth[node_id] = depth[above] + 1
    roots = []
    for node in nodes.values():
        node["children"] = []
    for node_id, node in nodes.items():
        above = parent[node_id]
        (nodes[above]["children"] if above is not None else roots).append(node)
    return roots


def _call_line(kind: str, data: dict) -> dict:
    call = data.get("call") if isinstance(data.get("call"), dict) else {}
    details = call.get("data") if isinstance(call.get("data"), dict) else {}
    return {
        "answered": kind == "call_answered",
        "type": str(call.get("type", "")),
        "title": str(details.get("title") or details.get("message") or ""),
        "seconds": data.get("seconds"),
    }


def _citation(data: dict) -> dict:
    source = data.get("source") if isinstance(data.get("source"), dict) else {}
    documents = data.get("document") if isinstance(data.get("document"), list) else []
    metadata = data.get("metadata") if isinstance(data.get("metadata"), list) else []
    url = str(source.get("url", ""))
    return {
        "name": str(source.get("name", "")) or url,
        "url": safe_link(url) or "",
        "documents": [str(d) for d in documents],
        "metadata": metadata,
    }


@login_required
@require_GET
def invocation_detail(request: AuthenticatedHttpRequest, invocation_id) -> HttpResponse:
    """A run; `?before=<seq>` shows the events before that one (the "Show earlier events" link)."""
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    before = request.GET.get("before", "")
    # Like a page number, anything but a plausible seq shows the latest events.
    seq = int(before) if before.isascii() and before.isdigit() and len(before) <= 10 and 0 < int(before) < 2**31 else None
    return render(request, "runs/invocation.html", _invocation_context(request, invocation, before=seq))


@login_required
@require_GET
def invocation_live(request: AuthenticatedHttpRequest, invocation_id) -> HttpResponse:
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    return render(request, "runs/_live.html", _invocation_context(request, invocation))


def _ask_message(invocation: Invocation) -> str:
    data = (invocation.pending_call or {}).get("data")
    message = data.get("message") if isinstance(data, dict) else None
    return rendering.render_markdown(message) if isinstance(message, str) and message else ""


@login_required
@require_POST
def invocation_respond(request: AuthenticatedHttpRequest, invocation_id) -> HttpResponse:
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
    problem = ""
    try:
        services.invocation_respond(invocation=invocation, value=value)
    except services.InvocationRejected as exc:
        problem = exc.errors[0][0]
    if request.headers.get("HX-Request"):
        # The fragment replaces the dialog, so the problem (say, the call timed out
        # meanwhile) is shown in it rather than on some later page.
        invocation.refresh_from_db()
    return _after_action(request, invocation, problem)


@login_required
@require_POST
def invocation_cancel(request: AuthenticatedHttpRequest, invocation_id) -> HttpResponse:
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    problem = ""
    try:
        invocation = services.invocation_cancel(invocation=invocation, by=request.user)
    except services.InvocationRejected as exc:
        if exc.status == 403:
            raise PermissionDenied(_("Only the person who started the run and admins may cancel it.")) from None
        problem = _("The run had already finished.")
    return _after_action(request, invocation, problem)


def _after_action(request: AuthenticatedHttpRequest, invocation, problem: str) -> HttpResponse:
    """The answer to an action on a run (an answer to a question, a cancel): for htmx the
    live fragment with the problem shown in it, else the run's page with it as a message."""
    if request.headers.get("HX-Request"):
        ctx = _invocation_context(request, invocation)
        ctx["respond_error"] = problem
        return render(request, "runs/_live.html", ctx)
    if problem:
        messages.error(request, problem)
    return redirect(invocation)


@login_required
@require_http_methods(["GET"])
def invocation_history(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every run for admins; for everyone else their own ("My runs")."""
    mine = not is_admin(request.user)
    filters = {
        "toolkit": request.GET.get("toolkit", "").strip()[:200],
        "user": "" if mine else request.GET.get("user", "").strip()[:150],
        "status": request.GET.get("status", "").strip()[:20],
        "tool": request.GET.get("tool", "").strip()[:200],
    }
    qs = selectors.invocations_history(**filters)
    if mine:
        qs = qs.filter(user=request.user)
    # Keyset pages (selectors.invocations_page): bounded time at any depth, where a page number
    # made PostgreSQL count every matching run and skip all those before the page. A cursor
    # that is not ours shows the newest runs, as a bad page number did.
    try:
        after, backward = selectors.parse_invocation_cursor(request.GET.get("cursor", "")[: keyset.MAX_CURSOR_CHARS + 1])
    except keyset.BadCursor:
        after, backward = None, False
    rows, more = selectors.invocations_page(qs, after=after, backward=backward, limit=HISTORY_PAGE)
    kept = {name: value for name, value in filters.items() if value}
    older = newer = None
    if rows and (more or backward):
        older = "?" + urlencode({**kept, "cursor": selectors.invocation_cursor(rows[-1])})
    if rows and after is not None and (more or not backward):
        newer = "?" + urlencode({**kept, "cursor": selectors.invocation_cursor(rows[0], backward=True)})
    return render(request, "runs/history.html", {
        "invocations": rows, "older": older, "newer": newer, "filters": filters, "statuses": RunStatus.choices,
        "mine": mine,
    })


@login_required
@require_POST
def invocation_save_as_test(request: AuthenticatedHttpRequest, invocation_id) -> HttpResponse:
    """A finished run becomes a saved test of its toolkit: its tool and arguments, and a check
    that it returns the same again (toolhub.toolkits.tool_tests.tool_test_from_invocation)."""
    invocation = get_invocation_for_user(user=request.user, invocation_id=invocation_id)
    if not can_manage_toolkit(request.user, invocation.toolkit):
        raise PermissionDenied(_("Only the toolkit's owner and admins may see and change its tests."))
    try:
        test = tool_tests.tool_test_from_invocation(invocation=invocation, by=request.user)
    except tool_tests.ToolTestRefused as exc:
        messages.error(request, exc.message)
        return redirect(invocation)
    messages.success(request, _("Test %(name)s saved.") % {"name": test.name})
    return redirect("toolkit_tests", slug=invocation.toolkit.slug)
