"""One agent run, in the worker: the strategy runs in its sandbox; its model and tool calls
come back over the runtime's line protocol and are answered here, within the run's limits.

- A model call goes to the run's connection with the official `openai` client. The host counts
  them: past `max_iterations` calls, the run's total time or its token budget, the call is
  refused and the run ends failed with that limit named, whatever the strategy does next.
- A tool call runs only a tool the run was given, as the run's user with their UserValves, in
  that tool's own sandbox: it is an invocation like any other, created by the same service
  (toolhub.runs.services.invocation_create: readiness, arguments, the user's fair use),
  recorded in the history, and its id is kept on the run. The host counts tool calls too:
  at most TOOLHUB_AGENT_MAX_TOOL_CALLS per run, TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER after one
  model answer (or before the first), and tools called in at most `max_iterations` rounds (a
  round: the calls after one model answer); past any of them the run ends failed with that
  limit named, as for model calls.
- The log tree is the strategy's nodes (ids prefixed `s-`) and the host's own record of each
  model and tool call (`h-`), hung under the strategy's innermost open node. Every node, its
  data and the number of nodes are bounded, and what is stored is saved as it happens, so the
  page shows the tree growing and a run that ends badly keeps the tree so far.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.utils import timezone

from toolhub import dbretry, heartbeat
from toolhub.agents.client import Client, ModelError
from toolhub.agents.models import AgentRun, AgentRunStatus
from toolhub.heartbeat import Beat
from toolhub.messages import Message, as_written
from toolhub.messages import message as text_message
from toolhub.packages import envbuild as envlib
from toolhub.runs import engine as run_engine
from toolhub.runs import services as run_services
from toolhub.runs.models import RunStatus, Surface, error_fields
from toolhub.sandbox import launcher as sandboxlib
from toolhub.toolkits import access
from toolhub.toolkits import sandboxing as sandbox
from toolhub.toolkits.building import revision_environment
from toolhub.toolkits.models import Status, Toolkit

logger = logging.getLogger(__name__)

MAX_NODES = 500
MAX_NODE_DATA = 16 * 1024
MAX_LABEL = 200
MAX_MESSAGES = 500
MAX_ANSWER = 200_000
# Stored as written: no translation of it exists.
WORKER_STOPPED = as_written("The worker running this agent run stopped before it finished.")
# Options a strategy may pass through to the chat completion.
MODEL_OPTIONS = {"temperature", "top_p", "max_tokens", "stop", "seed", "tool_choice", "response_format"}


def _bounded(data: Any) -> Any:
    text = json.dumps(data, ensure_ascii=False, default=repr)
    if len(text) <= MAX_NODE_DATA:
        return data
    return {"truncated": True, "preview": text[: MAX_NODE_DATA // 2]}


class _Limit(Exception):
    def __init__(self, limit: str, message: Message) -> None:
        super().__init__(message.english())
        self.limit = limit
        self.message = message


class Recorder:
    """Receives the strategy's messages for one run and answers its calls."""

    def __init__(self, run: AgentRun, client: Client) -> None:
        self.run = run
        self.client = client
        self.log: list[dict[str, Any]] = []
        self.index: dict[str, int] = {}
        self.dropped_nodes = 0
        self.usage = {"model_calls": 0, "tool_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.answer: list[str] = []
        self.invocations: list[str] = []
        self.limit: _Limit | None = None
        self.model_error = ""
        self.tools = {entry["name"]: entry for entry in run.tools}
        # Tool calls per round, a round being the model calls made before them (0: none yet).
        self.tool_rounds: dict[int, int] = {}
        self.started = time.monotonic()
        self.host_ids = itertools.count(1)

    # -- messages

    def __call__(self, message: dict) -> dict | None:
        kind = message.get("kind")
        reply = None
        if kind == "event":
            event = message.get("event") or {}
            data: dict = event["data"] if isinstance(event.get("data"), dict) else {}
            if event.get("type") == "log":
                self._strategy_node(data)
            elif event.get("type") == "message" and sum(map(len, self.answer)) < MAX_ANSWER:
                self.answer.append(str(data.get("content", ""))[:MAX_ANSWER])
        elif kind == "call":
            reply = self._call(message)
        self.save()
        return reply

    def _call(self, message: dict) -> dict:
        call_id = message.get("call_id")
        event = message.get("event") or {}
        data: dict = event["data"] if isinstance(event.get("data"), dict) else {}
        parent = self._known(f"s-{data['parent_id']}" if data.get("parent_id") else None)
        try:
            if event.get("type") == "model.invoke":
                return {"kind": "call_result", "call_id": call_id, "value": self._model(data, parent)}
            if event.get("type") == "tool.invoke":
                return {"kind": "call_result", "call_id": call_id, "value": self._tool(data, parent)}
            return {"kind": "call_result", "call_id": call_id, "error": f"unknown call {event.get('type')!r}"}
        except _Limit as exc:
            if self.limit is None:
                self.limit = exc
                self._host_node("Limit reached", {"limit": exc.limit, "reason": exc.message.english()}, parent, "error")
            return {"kind": "call_result", "call_id": call_id, "error": exc.message.english()}
        except _CallFailed as exc:
            return {"kind": "call_result", "call_id": call_id, "error": str(exc)}

    def _check_time_or_raise(self) -> None:
        raise _Limit("time", text_message("agent.out_of_time", seconds=float(settings.TOOLHUB_AGENT_MAX_SECONDS)))

    def _check_time(self) -> float:
        left = settings.TOOLHUB_AGENT_MAX_SECONDS - (time.monotonic() - self.started)
        if left <= 0:
            self._check_time_or_raise()
        return left

    def _model(self, data: dict, parent: str | None) -> dict:
        if self.limit is not None:
            raise self.limit
        if self.usage["model_calls"] >= self.run.max_iterations:
            raise _Limit("max_iterations", text_message("agent.max_iterations", count=self.run.max_iterations))
        if self.usage["total_tokens"] >= settings.TOOLHUB_AGENT_MAX_TOKENS:
            raise _Limit("tokens", text_message("agent.out_of_tokens", count=settings.TOOLHUB_AGENT_MAX_TOKENS))
        left = self._check_time()
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages or len(messages) > MAX_MESSAGES:
            raise _CallFailed(f"messages must be a list of 1 to {MAX_MESSAGES} chat messages")
        tools = data.get("tools") if isinstance(data.get("tools"), list) else []
        options = {k: v for k, v in (data.get("options") or {}).items() if k in MODEL_OPTIONS}
        self.usage["model_calls"] += 1
        number = self.usage["model_calls"]
        node = self._host_node(
            f"Model call {number}", {"model": self.run.model, "messages": len(messages), "request": messages[-1]}, parent
        )
        kwargs: dict[str, Any] = {"model": self.run.model, "messages": messages, **options}
        if tools:
            kwargs["tools"] = tools
        try:
            completion = self.client.chat(timeout=min(self.client.timeout, left), **kwargs)
        except ModelError as exc:
            self._update(node, "error", {"error": str(exc)})
            # A call cut short by the run's own deadline ends the run on its time limit.
            if settings.TOOLHUB_AGENT_MAX_SECONDS - (time.monotonic() - self.started) <= 0.05:
                self._check_time_or_raise()
            self.model_error = str(exc)
            raise _CallFailed(self.model_error) from None
        usage = completion.get("usage") or {}
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and value >= 0:
                self.usage[key] += value
        choice = (completion.get("choices") or [{}])[0] or {}
        answer = choice.get("message") or {}
        self._update(node, "success", {
            "answer": answer.get("content"),
            "tool_calls": [
                {"name": (c.get("function") or {}).get("name"), "arguments": (c.get("function") or {}).get("arguments")}
                for c in answer.get("tool_calls") or []
            ],
            "usage": usage, "finish_reason": choice.get("finish_reason"),
        })
        return completion

    def _count_tool_call(self) -> None:
        """Count one tool call against the run's limits, or raise the limit it passes. Refused
        calls count too, so a strategy that loops on errors still stops."""
        if self.limit is not None:
            raise self.limit
        most = settings.TOOLHUB_AGENT_MAX_TOOL_CALLS
        if self.usage["tool_calls"] >= most:
            raise _Limit("tool_calls", as_written(f"The run made {most} tool calls (TOOLHUB_AGENT_MAX_TOOL_CALLS); it stops here."))
        round_ = self.usage["model_calls"]
        in_round = self.tool_rounds.get(round_, 0)
        if in_round == 0 and len(self.tool_rounds) >= self.run.max_iterations:
            raise _Limit("max_iterations", as_written(
                f"Tools were called in max_iterations ({self.run.max_iterations}) rounds; the run stops here."
            ))
        per_answer = settings.TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER
        if in_round >= per_answer:
            raise _Limit(
                "tools_per_answer",
                as_written(
                    f"{per_answer} tools were called after one model answer (TOOLHUB_AGENT_MAX_TOOLS_PER_ANSWER);"
                    " the run stops here."
                ),
            )
        self.tool_rounds[round_] = in_round + 1
        self.usage["tool_calls"] += 1

    def _tool(self, data: dict, parent: str | None) -> Any:
        self._check_time()
        self._count_tool_call()
        name = str(data.get("name", ""))[:200]
        arguments = data.get("arguments")
        node = self._host_node(f"Tool {name}", {"arguments": arguments}, parent)
        entry = self.tools.get(name)
        if entry is None:
            return self._tool_failed(node, f"no tool named {name!r} was given to this run")
        # Checked again on every call: the user may have lost the toolkit since the run began.
        toolkit = access.toolkit_usable_by(self.run.user, entry["toolkit"])
        revision = toolkit.current_revision if toolkit else None
        if toolkit is None or revision is None or revision.status != Status.READY or entry["tool"] not in (revision.tool_names or []):
            return self._tool_failed(node, f"the tool {name!r} is not available now")
        try:
            # The same door as every other call: readiness, the arguments against the schema,
            # and the user's fair use (active invocations, invocations per minute).
            invocation = run_services.invocation_create(
                toolkit=toolkit, tool=entry["tool"], arguments=arguments, user=self.run.user, surface=Surface.AGENT,
                enqueue=False,
            )
        except run_services.InvocationRejected as exc:
            detail = "; ".join(f"{field}: {message}" if field else message for message, field in exc.errors)
            prefix = "invalid arguments" if exc.status == 400 else "refused"
            return self._tool_failed(node, f"{prefix}: {detail}")
        self.invocations.append(str(invocation.id))
        self.save()
        # In this worker, now: the tool runs in its own sandbox, as the run's user, with their
        # UserValves, exactly as an invocation from the page would.
        run_engine.run(str(invocation.id))
        invocation.refresh_from_db()
        if invocation.status != RunStatus.SUCCEEDED:
            return self._tool_failed(node, f"the tool failed: {invocation.error}", invocation=str(invocation.id))
        result = invocation.result
        self._update(node, "success", {"result": result, "invocation": str(invocation.id)})
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    def _tool_failed(self, node: str | None, message: str, invocation: str | None = None) -> Any:
        self._update(node, "error", {"error": message, **({"invocation": invocation} if invocation else {})})
        raise _CallFailed(message)

    # -- the tree

    def _known(self, node_id: str | None) -> str | None:
        return node_id if node_id in self.index else None

    def _strategy_node(self, data: dict) -> None:
        node_id = f"s-{str(data.get('id', ''))[:100]}"
        status = data.get("status") if data.get("status") in ("start", "success", "error") else "start"
        label = str(data.get("label", ""))[:MAX_LABEL]
        payload = _bounded(data.get("data") if isinstance(data.get("data"), dict) else {})
        if node_id in self.index:
            node = self.log[self.index[node_id]]
            node.update(status=status, label=label, data=payload)
            return
        parent = self._known(f"s-{data['parent_id']}" if data.get("parent_id") else None)
        self._add({"id": node_id, "parent_id": parent, "label": label, "status": status, "data": payload})

    def _host_node(self, label: str, data: dict, parent: str | None, status: str = "start") -> str | None:
        node_id = f"h-{next(self.host_ids)}"
        added = self._add({"id": node_id, "parent_id": parent, "label": label, "status": status, "data": _bounded(data)})
        self.save()
        return node_id if added else None

    def _update(self, node_id: str | None, status: str, data: dict) -> None:
        if node_id is None or node_id not in self.index:
            return
        node = self.log[self.index[node_id]]
        node["status"] = status
        node["data"] = _bounded({**node["data"], **data})

    def _add(self, node: dict) -> bool:
        if len(self.log) >= MAX_NODES:
            self.dropped_nodes += 1
            return False
        self.index[node["id"]] = len(self.log)
        self.log.append(node)
        return True

    @dbretry.retried("saving an agent run's log")
    def save(self, **fields: Any) -> None:
        usage = {**self.usage, **({"dropped_nodes": self.dropped_nodes} if self.dropped_nodes else {})}
        AgentRun.objects.filter(pk=self.run.pk).update(
            log=self.log, usage=usage, invocations=self.invocations, answer="".join(self.answer) or None,
            heartbeat_at=timezone.now(), **fields,
        )


class _CallFailed(Exception):
    """A call the strategy made failed; the message goes back to it."""


def _heartbeat(run_id: Any) -> Beat:
    """Beats for the run from a thread while the worker works on it, also while a model or a
    tool takes its time, so the reaper does not take silence for a dead worker. The same beat
    and the same timings as a tool call's (toolhub.runs.engine)."""

    def tick() -> None:
        AgentRun.objects.filter(pk=run_id, status=AgentRunStatus.RUNNING).update(heartbeat_at=timezone.now())

    return Beat(tick, every=heartbeat.EVERY_SECONDS)


def take(run_id: str) -> None:
    """The worker's part: claim the queued run and execute it. A run already running when its
    message comes again was redelivered after a worker died mid-run: its tools may have had
    effects already, so it is failed rather than run twice."""
    now = timezone.now()
    claimed = AgentRun.objects.filter(pk=run_id, status=AgentRunStatus.QUEUED).update(
        status=AgentRunStatus.RUNNING, started_at=now, heartbeat_at=now
    )
    run = AgentRun.objects.select_related("connection", "strategy_revision", "user").filter(pk=run_id).first()
    if run is None or run.is_finished:
        return
    if not claimed:
        finish(run, AgentRunStatus.FAILED, error=WORKER_STOPPED)
        return
    execute(run)


@dbretry.retried("ending an agent run")
def finish(run: AgentRun, status: str, *, error: Message | None = None, **fields: Any) -> None:
    """Record how the run ended (once); `error`: why it failed."""
    if error is not None:
        fields |= error_fields(error)
    AgentRun.objects.filter(pk=run.pk).exclude(status__in=[AgentRunStatus.SUCCEEDED, AgentRunStatus.FAILED]).update(
        status=status, finished_at=timezone.now(), **fields
    )


def _request(run: AgentRun) -> dict[str, Any]:
    specs = {}
    for kit in Toolkit.objects.select_related("current_revision").filter(slug__in={t["toolkit"] for t in run.tools}):
        for spec in (kit.current_revision.tools if kit.current_revision else []) or []:
            specs[(kit.slug, spec.get("function", {}).get("name"))] = spec.get("function", {})
    tools = []
    for entry in run.tools:
        spec = specs.get((entry["toolkit"], entry["tool"]), {})
        tools.append({
            "name": entry["name"], "toolkit": entry["toolkit"], "tool": entry["tool"],
            "description": spec.get("description", ""),
            "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
        })
    return {
        "op": "agent",
        "source_path": "/opt/toolkit/toolkit.py",
        "parameters": {"model": {"connection": run.connection_name, "model": run.model}, "tools": tools,
                       "query": run.query, "max_iterations": run.max_iterations},
        "call_timeout": settings.TOOLHUB_AGENT_MAX_SECONDS,
    }


def execute(run: AgentRun) -> None:
    """Run a claimed (running) agent run to its end; it always ends succeeded or failed."""
    if run.connection is None:
        finish(run, AgentRunStatus.FAILED, error=text_message("agent.connection_deleted"))
        return
    recorder = Recorder(run, Client(run.connection))
    revision = run.strategy_revision
    try:
        with _heartbeat(run.pk):
            env_dir = revision_environment(revision)
            # The strategy's own time is the sandbox's usual wall limit; the time the host
            # spends on its calls is the run's budget, checked on every call.
            limits = replace(sandbox.limits(), host_wait_seconds=settings.TOOLHUB_AGENT_MAX_SECONDS)
            outcome = sandbox.run(revision=revision, env_dir=env_dir, request=_request(run), on_message=recorder,
                                  limits_=limits)
    except envlib.BuildFailed as exc:
        finish(run, AgentRunStatus.FAILED, error=text_message("agent.environment_failed", reason=exc.message))
        return
    except sandboxlib.SandboxUnavailable as exc:
        finish(run, AgentRunStatus.FAILED, error=as_written(str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - an accepted run must always end
        logger.exception("agent run %s crashed in the worker", run.pk)
        recorder.save()
        finish(run, AgentRunStatus.FAILED, error=text_message("run.internal_error", error=type(exc).__name__))
        return
    final = outcome.final or {}
    recorder.save()
    if recorder.limit is not None:
        finish(run, AgentRunStatus.FAILED, error=recorder.limit.message, limit=recorder.limit.limit,
                traceback=final.get("traceback", ""))
    elif final.get("kind") == "result":
        finish(run, AgentRunStatus.SUCCEEDED, answer=str(final.get("result") or "")[:MAX_ANSWER])
    elif final.get("kind") == "error" and recorder.model_error and "ModelInvokeError" in str(final.get("error")):
        finish(run, AgentRunStatus.FAILED, error=text_message("agent.model_failed", error=str(recorder.model_error)),
                traceback=final.get("traceback", ""))
    elif final.get("kind") == "error":
        finish(run, AgentRunStatus.FAILED, error=text_message("agent.strategy_failed", error=str(final.get("error"))),
                traceback=final.get("traceback", ""))
    elif outcome.status == "timed_out":
        finish(run, AgentRunStatus.FAILED, limit="time",
                error=text_message("agent.strategy_timed_out", seconds=float(settings.TOOLHUB_SANDBOX_WALL_SECONDS)))
    else:
        reason = f"a sandbox limit was hit ({outcome.limit})" if outcome.limit else f"exit code {outcome.exit_code}"
        finish(run, AgentRunStatus.FAILED, error=as_written(f"The strategy ended without an answer ({reason})."),
                traceback=outcome.stderr_tail)
