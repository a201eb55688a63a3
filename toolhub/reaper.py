"""The reaper: one pass, every TOOLHUB_REAP_EVERY_SECONDS on the maintenance queue, over every
kind of work that can outlive the worker doing it — tool calls, build steps, tool test runs
and agent runs — by one rule:

- running work whose worker stopped beating (toolhub.heartbeat) for DEAD_AFTER_SECONDS ends,
  with the reason;
- queued work still waiting TOOLHUB_RESEND_AFTER_SECONDS after its last send has its task sent
  again (the broker may have lost the message; a second delivery finds the work taken and does
  nothing);
- queued work that no worker took after 1 + TOOLHUB_RESEND_MAX sends ends, saying why.

Each kind keeps its own statements beside its engine (runs.engine, toolkits.lifecycle,
runs.tool_tests, agents.upkeep); this module is the one place that runs them, each step
repeated once on a new connection when the database connection drops under it (every step is a
conditional update, safe to repeat)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from celery import shared_task

from toolhub import broker, dbretry
from toolhub.agents import upkeep as agent_runs
from toolhub.runs import engine, tool_tests
from toolhub.runs.tasks import run_invocation
from toolhub.toolkits import lifecycle

T = TypeVar("T")


def _step(fn: Callable[[], T], what: str) -> T:
    return cast(T, dbretry.write(fn, what=f"the reaper: {what}", already_done=None))


def reap() -> dict:
    """One pass; returns how many of each kind it ended and sent again."""
    return {
        "invocations": _step(engine.reap_stale_invocations, "stale invocations"),
        "builds": _step(lifecycle.reap_stale_builds, "stale builds"),
        "test_runs": _step(tool_tests.reap_test_runs, "stale test runs"),
        "agent_runs": _step(agent_runs.reap_dead, "stale agent runs")
        + _step(agent_runs.fail_unclaimed, "unclaimed agent runs"),
        "resent": {
            "invocations": _step(
                lambda: engine.resend_queued_invocations(lambda pk: broker.send(run_invocation.name, pk)),
                "queued invocations",
            ),
            "builds": _step(lifecycle.resend_queued_steps, "queued builds"),
            "agent_runs": _step(agent_runs.resend_queued, "queued agent runs"),
        },
    }


@shared_task(name="toolhub.reaper.reap_stale_work")
def reap_stale_work() -> dict:
    """The beat's task (settings.CELERY_BEAT_SCHEDULE): one pass of `reap`."""
    return reap()
