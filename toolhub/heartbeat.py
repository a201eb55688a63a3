"""A worker's sign of life for long work (a tool that stays silent, an environment that
builds for minutes): a thread of its own calls `tick` every `every` seconds for as long as a
`with` block runs, whatever the work itself does. The reapers tell a live worker from a dead
one by the time of the last beat."""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable
from typing import Self

from django.db import DatabaseError, connection

from toolhub import dbretry

# Every worker beats this often while it runs something (a tool call, a build step, a tool test
# run, an agent run), and work whose worker has not beaten for DEAD_AFTER_SECONDS has lost it:
# the reaper (toolhub.reaper) ends it. One pair for every kind of work.
EVERY_SECONDS = 2.0
DEAD_AFTER_SECONDS = 20.0


class Beat:
    """No tick starts once the `with` block has ended, and the block's end waits for a tick in
    progress (at most `every` + 5 s: a tick stuck behind a database lock must not hold up the
    end of the work). It does not wait for the thread itself, which ends on its own: under load
    a join waited for the scheduler to run the thread once more, which was a sixth of a worker's
    time at a hundred short tool calls a second (py-spy)."""

    def __init__(self, tick: Callable[[], None], *, every: float) -> None:
        self._tick = tick
        self._every = every
        self._stopped = threading.Event()
        # Held while a tick runs.
        self._ticking = threading.Lock()

    def __enter__(self) -> Self:
        # A bare thread (it ends by itself, and nothing joins it): threading.Thread.start()
        # waits until the new thread has run, a scheduler round trip before every tool call
        # (0.08-0.12 ms here when the machine is quiet, more when it is not).
        _thread.start_new_thread(self._run, ())
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopped.set()
        if self._ticking.acquire(timeout=self._every + 5):
            self._ticking.release()

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self._every):
                with self._ticking:
                    if self._stopped.is_set():
                        break
                    try:
                        self._tick()
                    except DatabaseError:
                        # Logged by dbretry with the reason; the connection was dropped, so
                        # the next beat starts on a fresh one.
                        dbretry.reconnect()
        finally:
            # This thread's own connection; the work's connection is untouched.
            connection.close()
