"""The browser tests' count of the live server's requests in flight (tests/browser/live.py):
a test's end waits for it to reach zero before the database is flushed."""

from __future__ import annotations

import threading

from tests.browser.live import InFlight


def _slow_application(release: threading.Event, started: threading.Event):
    def application(environ, start_response):
        started.set()
        release.wait(5)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"done"]

    return application


def _serve(application, sent: list) -> None:
    """What a WSGI server does with one request: call, send the body, close it."""
    body = application({}, lambda status, headers: None)
    try:
        sent.extend(body)
    finally:
        body.close()


def test_a_request_being_answered_holds_the_wait_until_its_body_is_closed() -> None:
    release, started = threading.Event(), threading.Event()
    counted = InFlight(_slow_application(release, started))
    assert counted.wait_idle(timeout=0)
    sent: list = []
    server = threading.Thread(target=_serve, args=(counted, sent))
    server.start()
    assert started.wait(5)
    assert not counted.wait_idle(timeout=0.2)
    release.set()
    assert counted.wait_idle(timeout=5)
    server.join(5)
    assert sent == [b"done"]


def test_an_application_that_raises_is_not_counted_as_still_answering() -> None:
    def broken(environ, start_response):
        raise RuntimeError("broken view")

    counted = InFlight(broken)
    try:
        counted({}, lambda status, headers: None)
    except RuntimeError:
        pass
    assert counted.wait_idle(timeout=0)


def test_a_body_closed_twice_counts_once() -> None:
    counted = InFlight(lambda environ, start_response: [b"x"])
    first = counted({}, lambda status, headers: None)
    second = counted({}, lambda status, headers: None)
    first.close()
    first.close()
    assert not counted.wait_idle(timeout=0)
    second.close()
    assert counted.wait_idle(timeout=0)
