"""What the live server is still doing when a browser test ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class InFlight:
    """The live server's application, counting the requests it is still answering.

    Closing a test's browser context does not stop a request the server is in the middle of
    (an htmx poll that had just arrived), and the database is flushed right after the test: a
    flush beside a request that holds row locks can deadlock in PostgreSQL, fail the teardown,
    and leave the next test the rows it did not flush. So a test's end waits for the count to
    reach zero (``wait_idle``)."""

    def __init__(self, application) -> None:
        self.application = application
        self._count = 0
        self._changed = threading.Condition()

    def __call__(self, environ, start_response):
        with self._changed:
            self._count += 1
        try:
            body = self.application(environ, start_response)
        except BaseException:
            self._done()
            raise
        return _Answer(body, self._done)

    def _done(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Whether no request was being answered within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._count > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True


class _Answer:
    """A WSGI response body that reports its end (the server closes it once it was sent, or
    when sending failed)."""

    def __init__(self, body, done: Callable[[], None]) -> None:
        self._body = body
        self._done: Callable[[], None] | None = done

    def __iter__(self):
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


def in_flight(live_server) -> InFlight:
    """The live server's InFlight counter (installed on first use; the server lives for the
    whole session)."""
    server = live_server.thread.httpd
    application = server.get_app()
    if not isinstance(application, InFlight):
        application = InFlight(application)
        server.set_app(application)
    return application
