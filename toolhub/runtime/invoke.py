"""Call one tool: valves, injected arguments, argument validation, the return value."""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from . import argcheck, loader, specs
from .channel import Channel
from .events import EventCaller, EventEmitter, jsonable

DEFAULT_CALL_TIMEOUT = 60.0


# The class names appear in error lines ("InvalidArguments: count: ..."), so they are
# chosen to read well there.
class ToolNotFound(LookupError):
    """The request names no public method of the toolkit (or not the plugin's tool)."""


class InvalidArguments(ValueError):
    """The caller's arguments do not fit the tool's signature."""


class InvalidValves(ValueError):
    """The stored valves or user valves do not fit the toolkit's models."""


def invoke(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    toolkit = loader.load(request["source_path"])
    tool = request.get("tool")
    arguments = request.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise InvalidArguments("arguments must be a JSON object")
    if toolkit.kind == "ragflow":
        return result_message(_call_plugin(toolkit, tool, arguments))
    if toolkit.kind == "agent_strategy":
        raise ToolNotFound("an agent strategy has no tools; it runs as an agent run")

    instance = toolkit.cls()
    valves_model, user_valves_model = toolkit.model("Valves"), toolkit.model("UserValves")
    if valves_model:
        instance.valves = _build_valves(valves_model, request.get("valves"), "valves")
    user = dict(request.get("user") or {})
    if user_valves_model:
        user["valves"] = _build_valves(user_valves_model, request.get("user_valves"), "user valves")

    function = specs.tool_functions(instance).get(tool) if isinstance(tool, str) else None
    if function is None:
        raise ToolNotFound(f"no tool named {tool!r}")
    kwargs = validate_arguments(function, arguments)
    kwargs.update(_injected(function, request, user, channel))
    return result_message(_run(function, kwargs))


def _call_plugin(toolkit: loader.Toolkit, tool: Any, arguments: dict[str, Any]) -> Any:
    # RAGFlow passes the LLM's arguments straight to invoke(); so does the runtime, since
    # plugins type their parameters loosely ("number") and must run unchanged.
    name = toolkit.cls.get_metadata()["name"]  # type: ignore[attr-defined]
    if tool != name:
        raise ToolNotFound(f"no tool named {tool!r}; this plugin's tool is {name!r}")
    return _run(toolkit.cls().invoke, arguments)


def _build_valves(model: type[BaseModel], stored: Any, what: str) -> BaseModel:
    try:
        return model(**(stored or {}))
    except ValidationError as exc:
        # No input values and no chained pydantic error: valves hold secrets, and the
        # traceback is shown to the toolkit's owner, who may not be the valves' owner.
        raise InvalidValves(f"invalid {what}: {_describe(exc, with_input=False)}") from None


def validate_arguments(function: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Check and coerce the caller's arguments against the tool's type hints: with the
    pydantic model of its signature (specs.arguments_model), or, in a warm sandbox for a tool
    of simple parameter types, the same check without the model (argcheck)."""
    callable_ = specs.call_parameters(function)
    parameters = inspect.signature(function).parameters
    takes_kwargs = any(param.kind is param.VAR_KEYWORD for param in parameters.values())
    known = {param.name for _index, param, _hint in callable_}
    # Names with a leading underscore are injected by the runtime, never by the caller.
    unexpected = [name for name in arguments if name not in known and (name.startswith("_") or not takes_kwargs)]
    if unexpected:
        raise InvalidArguments(f"unexpected argument(s): {', '.join(map(repr, unexpected))}")
    # Tools often say `x: str = None`, and LLMs send null for "not given": use the default.
    given = {
        name: value
        for name, value in arguments.items()
        if name in known and not (value is None and parameters[name].default is None)
    }
    simple = argcheck.validator([(param, hint) for _index, param, hint in callable_])
    try:
        if simple is not None:
            validator, defaults = simple
            kwargs = {name: copy.deepcopy(value) for name, value in defaults.items()}
            kwargs.update(validator.validate_python(given))
        else:
            model, names = specs.arguments_model(function)
            validated = model.model_validate(given)
            kwargs = {name: getattr(validated, field) for field, name in names.items()}
    except ValidationError as exc:
        raise InvalidArguments(_describe(exc, with_input=True)) from exc
    kwargs.update({name: value for name, value in arguments.items() if name not in known})
    return kwargs


def _describe(exc: ValidationError, *, with_input: bool) -> str:
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        problem = f"{where}: {error['msg']}" if where else error["msg"]
        if with_input and error["type"] != "missing":
            problem += f" (got {error['input']!r:.80})"
        problems.append(problem)
    return "; ".join(problems)


def _injected(
    function: Callable[..., Any], request: dict[str, Any], user: dict[str, Any], channel: Channel
) -> dict[str, Any]:
    """The `__x__` values Open WebUI offers, for those the signature names.

    As in Open WebUI, a `**kwargs` parameter does not receive them: a tool gets only
    what it asks for by name.
    """
    metadata = request.get("metadata") or {}
    call_timeout = float(request.get("call_timeout") or DEFAULT_CALL_TIMEOUT)
    offered = {
        "__user__": user,
        "__event_emitter__": EventEmitter(channel),
        "__event_call__": EventCaller(channel, call_timeout),
        "__metadata__": metadata,
        "__messages__": request.get("messages") or [],
        "__files__": request.get("files") or [],
        "__model__": request.get("model"),
        "__id__": request.get("id"),
        "__request__": None,
        "__chat_id__": metadata.get("chat_id"),
        "__message_id__": metadata.get("message_id"),
        "__session_id__": metadata.get("session_id"),
    }
    parameters = inspect.signature(function).parameters
    return {name: value for name, value in offered.items() if name in parameters}


def _run(function: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    # A sync tool runs outside any event loop, so it may start one of its own.
    if inspect.iscoroutinefunction(function):
        return asyncio.run(function(**kwargs))
    result = function(**kwargs)
    if inspect.isawaitable(result):
        return asyncio.run(_wait(result))
    return result


async def _wait(awaitable: Any) -> Any:
    return await awaitable


def result_message(value: Any) -> dict[str, Any]:
    """str as is; dict, list and pydantic models as JSON; anything else as its repr."""
    if isinstance(value, str):
        return {"kind": "result", "result": value, "result_type": "text"}
    if isinstance(value, (dict, list, BaseModel)):
        return {"kind": "result", "result": jsonable(value), "result_type": "json"}
    return {"kind": "result", "result": repr(value), "result_type": "text"}
