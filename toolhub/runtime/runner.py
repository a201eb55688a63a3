"""Answer the one request the host sends.

Protocol: line-delimited JSON, UTF-8, one object per line.

The host writes one request line on stdin:
    {"op": "introspect", "source_path": "/opt/toolkit/toolkit.py"}
    {"op": "invoke", "source_path": ..., "tool": "name", "arguments": {...},
     "valves": {...} | null, "user_valves": {...} | null,
     "user": {"id", "name", "email", "role"}, "metadata": {...}, "messages": [...],
     "files": [...], "model": ... | null, "id": "...", "call_timeout": 60,
     "egress": {"socket_path": "/run/egress.sock"} | null}

    {"op": "agent", ...}: an agent strategy's run (the protocol is in agent.py)

A warm sandbox's call (toolhub/runtime/forkserver.py) adds "source_bytes": N to its request,
and the toolkit's N bytes of source follow the line; the process writes them to source_path
before anything else.

The runtime writes, on its original stdout:
    {"kind": "event", "event": {"type": T, "data": D}}     for each __event_emitter__ call
    {"kind": "call", "call_id": n, "event": {"type": T, "data": D}}  for __event_call__;
        the host answers on stdin with {"kind": "call_result", "call_id": n, "value": ...}
        or {"kind": "call_result", "call_id": n, "error": "timed out"}
and exactly one final line, after which the process exits:
    {"kind": "result", "result": ..., "result_type": "text" | "json"}
    {"kind": "introspection", "kind_of_toolkit": "openwebui" | "ragflow" | "agent_strategy", "tools": [...],
     "valves_schema": {...} | null, "user_valves_schema": {...} | null,
     "ragflow": {...} | null}
    {"kind": "error", "error": "ExcType: one-line message", "traceback": "..."}
"""

from __future__ import annotations

import os
from typing import Any

from .channel import Channel, ProtocolError, error_message


def main() -> None:
    channel = Channel.from_stdio()
    try:
        message = _answer(channel.read_request(), channel)
    except BaseException as exc:  # noqa: BLE001 - toolkit code may raise even SystemExit.
        message = error_message(exc)
    channel.finish(message)


def _answer(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    # Imported here, not at the top, so that a broken environment (no pydantic, say)
    # still ends in an error line rather than a silent crash.
    from . import invoke, loader

    op = request.get("op")
    source_path = request.get("source_path")
    if not isinstance(source_path, str):
        raise ProtocolError("the request has no source_path")
    if op not in ("introspect", "invoke", "agent"):
        raise ProtocolError(f"unknown op {op!r}")
    source_bytes = request.pop("source_bytes", None)
    if source_bytes is not None:
        _write_source(source_path, source_bytes, channel)
    if op == "introspect":
        return loader.introspect(source_path)
    if op == "invoke":
        _network(request.get("egress"))
        return invoke.invoke(request, channel)
    # "agent": a strategy never has the network; it reaches the model and tools through the host.
    _network(None)
    from . import agent

    toolkit = loader.load(source_path)
    if toolkit.kind != "agent_strategy":
        raise ProtocolError("the file is not an agent strategy")
    return agent.run(toolkit.cls, request, channel)


# The largest source a request may announce (an upload is at most 512 KiB: source_checks).
MAX_SOURCE_BYTES = 8 << 20


def _write_source(path: str, size: Any, channel: Channel) -> None:
    """A warm sandbox's call: its toolkit's source follows the request line (`size` bytes), and
    the call's own process writes it where the request says, once (the file must not exist:
    the fork server empties /opt/toolkit after every call)."""
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_SOURCE_BYTES:
        raise ProtocolError("the request's source_bytes is not a size")
    data = channel.read_exactly(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _network(egress: Any) -> None:
    """Before the toolkit loads: route HTTP clients through the host's egress proxy when an
    admin granted it, and in every case turn "network unreachable" into an error that
    says why."""
    from . import egress_forwarder

    if isinstance(egress, dict) and isinstance(egress.get("socket_path"), str):
        egress_forwarder.enable_egress(socket_path=egress["socket_path"])
    else:
        egress_forwarder.install_clear_network_errors(granted=False)
