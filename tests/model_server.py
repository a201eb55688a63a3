"""A real OpenAI-compatible HTTP server for the tests: it answers `/v1/models` and
`/v1/chat/completions` from a script and records every request it gets.

It listens on 127.0.0.1 on the first free port of this engineer's range (ToolHub's tests may
run next to other people's), in a thread of the test process, so a worker process the test
starts reaches it like any endpoint."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

PORTS = range(21700, 21800)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def completion(content: str | None = None, *, tool_calls: list[dict] | None = None, usage: dict | None = None,
               model: str = "scripted-1") -> dict:
    """A chat completion body as OpenAI's API sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": call.get("id", f"call_{i}"), "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}}
            for i, call in enumerate(tool_calls, 1)
        ]
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@dataclass
class ModelServer:
    models: list[str] = field(default_factory=lambda: ["scripted-1", "scripted-2"])
    # Chat answers in order; a callable makes each answer from the request (a model that never stops).
    replies: list[dict | Callable[[Any], dict]] = field(default_factory=list)
    # (status, body) to answer every request with instead, e.g. (401, {...}).
    failure: tuple[int, dict] | None = None
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def answer(self, method: str, path: str, body: Any) -> tuple[int, dict]:
        if self.failure is not None:
            return self.failure
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]}
        if method == "POST" and path == "/v1/chat/completions":
            if not self.replies:
                return 500, {"error": {"message": "the test's script has no more answers", "type": "server_error"}}
            reply = self.replies[0] if callable(self.replies[0]) else self.replies.pop(0)
            return 200, reply(body) if callable(reply) else reply
        return 404, {"error": {"message": f"no {method} {path}", "type": "not_found"}}


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            server.requests.append(Recorded(method, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, answer = server.answer(method, self.path.split("?")[0], body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


@pytest.fixture
def model_server():
    state = ModelServer()
    httpd = None
    for port in PORTS:
        try:
            httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(state))
            break
        except OSError:
            continue
    assert httpd is not None, "no free port in 21700-21799"
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
