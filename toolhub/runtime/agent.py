"""Agent strategies (after Dify's): the runtime side.

A strategy file defines one class deriving from `AgentStrategy` (imported as
`from toolhub_agent import AgentStrategy`; the loader provides that module). Its `_invoke`
method receives the run's parameters and yields log nodes and text:

    class FunctionCalling(AgentStrategy):
        def _invoke(self, parameters):
            log = self.create_log_message("Round 1", {})
            yield log
            answer = self.session.model.invoke(messages=[...], tools=[t.spec for t in parameters.tools])
            ...
            yield self.finish_log_message(log)
            yield self.create_text_message(answer.content)

There is no network in the sandbox. `session.model.invoke` and `session.tool.invoke` are
`call` lines to the host, which calls the model connection and runs the tool in that tool's
own sandbox, and answers with a `call_result`. The host enforces the run's limits
(iterations, time, tokens) and refuses tools the run was not given; the strategy sees a
refusal as an exception (model) or an error text (tool) and cannot get around it.

Protocol additions (see runner.py):
    request  {"op": "agent", "source_path", "parameters": {"model": {"connection", "model"},
              "tools": [{"name", "description", "parameters", "toolkit", "tool"}], "query",
              "max_iterations"}, "call_timeout": seconds}
    events   {"type": "log", "data": {"id", "parent_id", "label", "status", "data"}}
             {"type": "message", "data": {"content": "..."}}
    calls    {"type": "model.invoke", "data": {"messages", "tools", "options", "parent_id"}}
             {"type": "tool.invoke", "data": {"name", "arguments", "parent_id"}}
    final    {"kind": "result", "result": "<the text messages joined>", "result_type": "text"}
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .channel import Channel
from .events import checked_event, jsonable

LOG_STATUSES = ("start", "success", "error")
# The host answers within its own limits; this only keeps a lost answer from hanging the run.
CALL_GRACE = 5.0


class ModelInvokeError(RuntimeError):
    """The host could not get an answer from the model (the connection failed, or a limit of
    the run was reached: iterations, time or tokens)."""


class InvalidStrategy(TypeError):
    """The strategy yielded something that is neither a log node nor a text message."""


@dataclass
class LogMessage:
    id: str
    label: str
    data: dict[str, Any]
    status: str = "start"
    parent_id: str | None = None
    error: str | None = None

    def as_event(self) -> dict[str, Any]:
        data = dict(self.data)
        if self.error:
            data["error"] = self.error
        return {"type": "log", "data": {"id": self.id, "parent_id": self.parent_id, "label": self.label,
                                         "status": self.status, "data": data}}


@dataclass
class TextMessage:
    text: str


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # The arguments as the model wrote them, to send back in the conversation unchanged.
    raw_arguments: str = ""


@dataclass
class ModelResult:
    """One answer of the model. `message` is the assistant message as the endpoint sent it,
    ready to append to the conversation."""

    content: str
    tool_calls: list[ToolCall]
    usage: dict[str, Any]
    message: dict[str, Any]
    finish_reason: str | None = None


@dataclass
class ModelSelector:
    connection: str
    model: str


@dataclass
class ToolEntity:
    """A tool given to the run. `name` is what the model calls it by; `spec` is its OpenAI
    function-calling definition."""

    name: str
    description: str
    parameters: dict[str, Any]
    toolkit: str = ""
    tool: str = ""

    @property
    def spec(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass
class AgentParameters:
    model: ModelSelector
    tools: list[ToolEntity]
    query: str
    max_iterations: int = 5
    extra: dict[str, Any] = field(default_factory=dict)


class _Calls:
    def __init__(self, channel: Channel, timeout: float, tracker: _OpenLogs) -> None:
        self._channel = channel
        self._timeout = timeout
        self._tracker = tracker

    def ask(self, type_: str, data: dict[str, Any]) -> dict[str, Any]:
        data = {**data, "parent_id": self._tracker.innermost()}
        call_id, future = self._channel.start_call(checked_event({"type": type_, "data": data}))
        try:
            return future.result(timeout=self._timeout + CALL_GRACE)
        except TimeoutError:
            return {"error": "the host did not answer in time"}
        finally:
            self._channel.forget_call(call_id)


class ModelSession:
    def __init__(self, calls: _Calls) -> None:
        self._calls = calls
        # Dify's strategies write `session.model.llm.invoke(...)`.
        self.llm = self

    def invoke(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               **options: Any) -> ModelResult:
        """One chat completion. Raises `ModelInvokeError` when the host refuses or fails."""
        reply = self._calls.ask("model.invoke", {"messages": jsonable(messages), "tools": jsonable(tools or []),
                                                 "options": jsonable(options)})
        if "error" in reply:
            raise ModelInvokeError(str(reply["error"]))
        return _model_result(reply.get("value") or {})


class ToolSession:
    def __init__(self, calls: _Calls) -> None:
        self._calls = calls

    def invoke(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Run a tool given to the run; its result as text. Errors come back as text too
        (LibreChat's rule: the model reads them and may try again)."""
        reply = self._calls.ask("tool.invoke", {"name": str(name), "arguments": jsonable(arguments or {})})
        if "error" in reply:
            return f"Error: {reply['error']}"
        value = reply.get("value")
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class Session:
    def __init__(self, channel: Channel, timeout: float, tracker: _OpenLogs) -> None:
        calls = _Calls(channel, timeout, tracker)
        self.model = ModelSession(calls)
        self.tool = ToolSession(calls)


class _OpenLogs:
    """Which log nodes are open (yielded with status start and not finished), so the host can
    hang its model and tool calls under the innermost one."""

    def __init__(self) -> None:
        self._open: list[str] = []

    def seen(self, log: LogMessage) -> None:
        if log.id in self._open:
            self._open.remove(log.id)
        if log.status == "start":
            self._open.append(log.id)

    def innermost(self) -> str | None:
        return self._open[-1] if self._open else None


class AgentStrategy:
    """Base class of agent strategies. Subclasses implement `_invoke(parameters)`."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._log_ids = itertools.count(1)

    def _invoke(self, parameters: AgentParameters) -> Iterable[LogMessage | TextMessage]:
        raise NotImplementedError("an agent strategy implements _invoke(parameters)")

    def create_log_message(self, label: str, data: dict[str, Any] | None = None, status: str = "start",
                           parent: LogMessage | None = None) -> LogMessage:
        if status not in LOG_STATUSES:
            raise ValueError(f"a log node's status is start, success or error, not {status!r}")
        return LogMessage(id=f"s{next(self._log_ids)}", label=str(label), data=dict(data or {}), status=status,
                          parent_id=parent.id if parent else None)

    def finish_log_message(self, log: LogMessage, status: str = "success", error: str | None = None,
                           data: dict[str, Any] | None = None) -> LogMessage:
        if status not in ("success", "error"):
            raise ValueError(f"a log node finishes with success or error, not {status!r}")
        return LogMessage(id=log.id, label=log.label, data={**log.data, **(data or {})}, status=status,
                          parent_id=log.parent_id, error=error)

    def create_text_message(self, text: str) -> TextMessage:
        return TextMessage(text=str(text))


def _model_result(completion: dict[str, Any]) -> ModelResult:
    choices = completion.get("choices") or [{}]
    choice = choices[0] or {}
    message = choice.get("message") or {}
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        raw = function.get("arguments") or ""
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
        except ValueError:
            arguments = {"__unparsed__": raw}
        if not isinstance(arguments, dict):
            arguments = {"__unparsed__": raw}
        calls.append(ToolCall(id=str(call.get("id") or f"call_{i}"), name=str(function.get("name") or ""),
                              arguments=arguments, raw_arguments=raw if isinstance(raw, str) else json.dumps(raw)))
    return ModelResult(content=message.get("content") or "", tool_calls=calls, usage=completion.get("usage") or {},
                       message={k: v for k, v in message.items() if v is not None}, finish_reason=choice.get("finish_reason"))


def _parameters(raw: dict[str, Any]) -> AgentParameters:
    model = raw.get("model") or {}
    tools = [
        ToolEntity(name=str(t.get("name", "")), description=str(t.get("description", "")),
                   parameters=t.get("parameters") or {"type": "object", "properties": {}},
                   toolkit=str(t.get("toolkit", "")), tool=str(t.get("tool", "")))
        for t in raw.get("tools") or []
    ]
    known = {"model", "tools", "query", "max_iterations"}
    return AgentParameters(
        model=ModelSelector(connection=str(model.get("connection", "")), model=str(model.get("model", ""))),
        tools=tools, query=str(raw.get("query", "")), max_iterations=int(raw.get("max_iterations") or 5),
        extra={k: v for k, v in raw.items() if k not in known},
    )


def find_strategy(module: Any) -> type[AgentStrategy] | None:
    found = [
        value for value in module.__dict__.values()
        if isinstance(value, type) and issubclass(value, AgentStrategy) and value is not AgentStrategy
        and value.__module__ == module.__name__
    ]
    if len(found) > 1:
        raise InvalidStrategy(f"a strategy file defines one AgentStrategy, not {', '.join(c.__name__ for c in found)}")
    return found[0] if found else None


def run(cls: type[AgentStrategy], request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    tracker = _OpenLogs()
    timeout = float(request.get("call_timeout") or 300)
    strategy = cls(Session(channel, timeout, tracker))
    texts: list[str] = []
    for item in strategy._invoke(_parameters(request.get("parameters") or {})):
        if isinstance(item, LogMessage):
            tracker.seen(item)
            channel.send({"kind": "event", "event": checked_event(item.as_event())})
        elif isinstance(item, TextMessage):
            texts.append(item.text)
            channel.send({"kind": "event", "event": {"type": "message", "data": {"content": item.text}}})
        else:
            raise InvalidStrategy(f"a strategy yields log and text messages, not {type(item).__name__}")
    return {"kind": "result", "result": "".join(texts), "result_type": "text"}
