"""`__event_emitter__` and `__event_call__`, the two ways a tool talks to the page."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any

from pydantic_core import to_json

from .channel import _LONE_SURROGATE, Channel

# The host owns the timeout of an event call and answers with an error when it fires.
# The runtime waits this much longer only as a safety net, so that it never hangs.
CALL_TIMEOUT_GRACE = 2.0


def jsonable(value: Any) -> Any:
    """A JSON-compatible copy of `value`: models, dates and sets as pydantic dumps them,
    NaN and infinities as strings, anything else as its repr."""
    try:
        return json.loads(to_json(value, fallback=repr, inf_nan_mode="strings"))
    except ValueError:  # A reference cycle, or text with a lone surrogate.
        pass
    try:
        return json.loads(to_json(_without_surrogates(value), fallback=repr, inf_nan_mode="strings"))
    except (ValueError, RecursionError):
        return repr(value)


def _without_surrogates(value: Any, depth: int = 0) -> Any:
    """Plain containers and strings with lone surrogates replaced by U+FFFD (UTF-8 cannot
    encode them)."""
    if depth > 100:
        raise ValueError("nested too deep")
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_surrogates(k, depth + 1): _without_surrogates(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_surrogates(item, depth + 1) for item in value]
    return value


def checked_event(event: Any) -> dict[str, Any]:
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise TypeError(f"an event must be a dict with a str 'type', got {event!r:.200}")
    return {"type": event["type"], "data": jsonable(event.get("data", {}))}


class EventEmitter:
    """Sends an event at once, when called.

    In Open WebUI the emitter is a coroutine function, so a sync tool cannot use it.
    Here the event is sent when the emitter is called, and the call returns something to
    await when there is an event loop in this thread (a coroutine, so that
    `asyncio.create_task(emitter(...))` works too) and nothing otherwise.
    """

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def __call__(self, event: dict[str, Any]) -> Awaitable[None] | None:
        self._channel.send({"kind": "event", "event": checked_event(event)})
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return _sent()


async def _sent() -> None:
    return None


class EventCaller:
    """Asks the host a question and waits for the answer.

    On an error answer (a timeout, the host gone) the tool gets an error value rather
    than an exception or a hang: False for a confirmation, {"error": "..."} otherwise.
    """

    def __init__(self, channel: Channel, timeout: float) -> None:
        self._channel = channel
        self._timeout = timeout

    async def __call__(self, event: dict[str, Any]) -> Any:
        event = checked_event(event)
        call_id, future = self._channel.start_call(event)
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(future), self._timeout + CALL_TIMEOUT_GRACE)
        except TimeoutError:
            reply = {"error": "timed out"}
        finally:
            self._channel.forget_call(call_id)
        if "error" in reply:
            return False if event["type"] == "confirmation" else {"error": str(reply["error"])}
        return reply.get("value")
