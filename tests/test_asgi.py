"""toolhub.asgi's Django handler calls the middleware and the view in one go on the request's
thread (OneThreadHandler), where Django's own crosses between the event loop and the thread
several times a request."""

from __future__ import annotations

import asyncio
import json
import threading
from unittest import mock

import pytest
from asgiref.sync import SyncToAsync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler

import toolhub.asgi
from toolhub.accounts.models import ApiToken

pytestmark = pytest.mark.django_db(transaction=True)


def _scope(path: str, method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"localhost"), *(headers or [])], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
    }


def _call(app, scope: dict, body: bytes = b"") -> tuple[dict, bytes, int, set[int]]:
    """The start message and the body of the answer to one request through `app`, the number of
    times it crossed from the event loop to a thread (asgiref's SyncToAsync), and the threads
    its sync code ran on."""
    crossings = 0
    threads: set[int] = set()
    original = SyncToAsync.thread_handler

    def counted(self, loop, *args, **kwargs):
        nonlocal crossings
        crossings += 1
        threads.add(threading.get_ident())
        return original(self, loop, *args, **kwargs)

    async def run() -> tuple[dict, bytes]:
        communicator = ApplicationCommunicator(app, scope)
        await communicator.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await communicator.receive_output(10)
        chunks = []
        while True:
            message = await communicator.receive_output(10)
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await communicator.wait(10)
        return start, b"".join(chunks)

    answer: list = []
    # A loop of its own, on a thread of its own, as a server's: an earlier test in the same
    # process may have left an event loop running on this one.
    caller = threading.Thread(target=lambda: answer.append(asyncio.run(run())))
    with mock.patch.object(SyncToAsync, "thread_handler", counted):
        caller.start()
        caller.join(30)
    assert answer, "the request got no answer"
    start, content = answer[0]
    return start, content, crossings, threads


def test_the_handler_crosses_to_the_requests_thread_fewer_times_than_djangos_own():
    scope = _scope("/api/v1/toolkits")  # anonymous: 401, after the whole chain and the view's authentication
    answer, _body, ours, _threads = _call(toolhub.asgi.django_app, scope)
    stock_answer, _stock_body, stock, _stock_threads = _call(ASGIHandler(), scope)
    assert answer["status"] == stock_answer["status"] == 401
    # The request_started signal's receivers; the chain with the view; the log line of a 4xx;
    # the response's close.
    assert ours == 4, stock
    assert stock > ours


def test_an_api_call_is_answered_through_the_handler_on_one_thread(alice):
    _token, raw = ApiToken.issue(user=alice, name="asgi")
    headers = [(b"authorization", f"Bearer {raw}".encode())]
    answer, body, _crossings, threads = _call(toolhub.asgi.django_app, _scope("/api/v1/toolkits", headers=headers))
    assert answer["status"] == 200
    assert json.loads(body)["items"] == []
    assert len(threads) == 1


def test_a_page_through_the_handler_has_every_middlewares_headers():
    answer, body, _crossings, _threads = _call(toolhub.asgi.django_app, _scope("/accounts/login/"))
    headers = {name.decode().lower(): value.decode() for name, value in answer["headers"]}
    assert answer["status"] == 200
    assert b"csrfmiddlewaretoken" in body  # the CSRF middleware's token, set through the view
    assert headers["x-frame-options"] == "DENY"  # Django's clickjacking middleware, on the way out
    assert "script-src 'self'" in headers["content-security-policy"]  # ToolHub's, the innermost
    assert "csrftoken" in headers.get("set-cookie", "")


def test_a_wrong_method_gets_its_405_through_the_handler(alice):
    _token, raw = ApiToken.issue(user=alice, name="asgi")
    headers = [(b"authorization", f"Bearer {raw}".encode())]
    answer, _body, _crossings, _threads = _call(toolhub.asgi.django_app, _scope("/api/v1/toolkits", "DELETE", headers))
    assert answer["status"] == 405
