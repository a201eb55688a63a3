"""toolhub.heartbeat.Beat: ticks while its block runs, none once the block has ended, and the
block's end waits for a tick in progress but not for the thread (which ends by itself)."""

from __future__ import annotations

import threading
import time

import pytest

from toolhub.heartbeat import Beat

pytestmark = pytest.mark.django_db


def test_it_ticks_while_the_block_runs_and_never_after():
    ticks: list[float] = []
    with Beat(lambda: ticks.append(time.monotonic()), every=0.02):
        time.sleep(0.3)
    ended = time.monotonic()
    seen = len(ticks)
    assert seen >= 3
    time.sleep(0.1)
    assert len(ticks) == seen
    assert all(tick < ended for tick in ticks)


def test_the_end_of_the_block_waits_for_a_tick_in_progress():
    started, release = threading.Event(), threading.Event()
    finished: list[float] = []

    def slow_tick() -> None:
        started.set()
        release.wait(5)
        finished.append(time.monotonic())

    beat = Beat(slow_tick, every=0.01)
    with beat:
        assert started.wait(5)
        threading.Timer(0.2, release.set).start()
    ended = time.monotonic()
    # The block ended only once the tick had finished, and no second tick began.
    assert len(finished) == 1 and finished[0] <= ended
    time.sleep(0.1)
    assert len(finished) == 1
