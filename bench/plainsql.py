"""Each plain SQL statement of a tool call's path (toolhub.plainsql) against the ORM query it
stands for, in one process, alternating in pairs.

    DATABASE_URL=postgres://… .venv/bin/python bench/plainsql.py [--pairs N]

ToolHub reads a few rows with one hand-made statement each instead of the ORM, on the ground
that Django compiling the query costs more than PostgreSQL answering it. This checks that ground
for each of them: the toolkit a call names with its current revision (toolkits/access.py), the
credential a request carries with its user (accounts/clients.py), the wait's re-read of the
invocation (runs/services.py) and a worker's load of a claimed invocation (runs/queue.py). (The
invocation's INSERT went back to the ORM: its plain twin saved about 0.1 ms, 1.28x.) Each pair runs
the plain one and its ORM twin back to back (alternating which goes first), so a noisy machine
slows both alike; the table prints medians and p95 in microseconds and the ratio of the
medians (ORM ÷ plain). A scratch database is created and dropped, as in bench/invoke.py, with
the web process's settings (a pooled connection, server-side prepared statements).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import invoke as common  # noqa: E402 - the shared scratch set-up

SOURCE = '''"""
title: Bench Plain
version: 1.0.0
"""


class Tools:
    def echo(self, text: str) -> str:
        """Say it back."""
        return text
'''


def _pairs(plain: Callable[[], object], orm: Callable[[], object], pairs: int) -> tuple[list[float], list[float]]:
    for _ in range(20):  # warm: the statements are prepared and the ORM's caches filled
        plain()
        orm()
    plain_times: list[float] = []
    orm_times: list[float] = []
    for n in range(pairs):
        order = ((plain, plain_times), (orm, orm_times)) if n % 2 == 0 else ((orm, orm_times), (plain, plain_times))
        for action, times in order:
            began = time.perf_counter()
            action()
            times.append(time.perf_counter() - began)
    return plain_times, orm_times


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000, help="pairs of each row (default 2000)")
    args = parser.parse_args()

    scratch = common.Scratch()
    try:
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.db import connection
        from django.db.models import Exists, OuterRef

        from toolhub import plainsql
        from toolhub.accounts import clients
        from toolhub.accounts.models import ApiToken
        from toolhub.runs import queue
        from toolhub.runs.models import Event, Invocation, RunStatus
        from toolhub.runs.services import WAIT_FIELDS, _wait_read
        from toolhub.toolkits import access, services
        from toolhub.toolkits.models import Revision, Status, Toolkit

        call_command("migrate", verbosity=0)
        if connection.vendor != "postgresql":
            sys.exit("bench/plainsql.py: needs a PostgreSQL DATABASE_URL")
        user = get_user_model().objects.create_user("bench", email="bench@example.org", password="x")
        toolkit = services.toolkit_create(source=SOURCE, user=user, slug="bench_plain").toolkit
        revision = toolkit.latest_revision()
        Revision.objects.filter(pk=revision.pk).update(status=Status.READY, tools=[{"name": "echo"}])
        Toolkit.objects.filter(pk=toolkit.pk).update(current_revision=revision)
        token, _raw = ApiToken.issue(user=user, name="bench")
        digest = token.digest
        invocation = Invocation.objects.create(
            toolkit=toolkit, revision=revision, tool="echo", user=user, arguments={"text": "hi"},
            status=RunStatus.SUCCEEDED, result="hi", result_type="text",
        )
        Event.objects.create(invocation=invocation, seq=1, type="status", data={"description": "x", "done": True})
        call_fields = [f"current_revision__{name}" for name in access._CALL_FIELDS[Revision]]

        def orm_toolkit() -> object:
            return (
                Toolkit.objects.select_related("current_revision")
                .only(*access._CALL_FIELDS[Toolkit] - {"id", "current_revision_id"}, "current_revision", *call_fields)
                .get(slug="bench_plain")
            )

        def orm_token() -> object:
            return ApiToken.objects.select_related("user").get(digest=digest, revoked_at__isnull=True)

        def orm_wait() -> object:
            events = Event.objects.filter(invocation=OuterRef("pk"))
            return (
                Invocation.objects.filter(pk=invocation.pk)
                .annotate(has_events=Exists(events))
                .values_list(*WAIT_FIELDS, "has_events")
                .get()
            )

        def orm_load() -> object:
            return (
                Invocation.objects.select_related("revision", "toolkit", "user")
                .defer(*(f"revision__{name}" for name in queue.LEFT_OUT[Revision]))
                .get(pk=invocation.pk)
            )

        wait_sql, _fields = _wait_read(connection.vendor)
        wait_key = [plainsql.param(Invocation, "id", invocation.pk)]
        rows = [
            ("toolkit and current revision by slug", lambda: access._toolkit_row("bench_plain"), orm_toolkit),
            ("API token and its user by digest", lambda: clients._with_user(ApiToken, "user", digest), orm_token),
            ("the wait's re-read of an invocation", lambda: plainsql.one_row(wait_sql, wait_key), orm_wait),
            ("a claimed invocation with revision, toolkit, user", lambda: queue.load_for_run(invocation.pk), orm_load),
        ]
        results = [(name, *_pairs(plain, orm, args.pairs)) for name, plain, orm in rows]

        print()
        print(f"{'statement':<50} {'plain p50':>10} {'p95':>8} {'ORM p50':>10} {'p95':>8} {'ORM÷plain':>10}")
        print("-" * 100)
        for name, plain_times, orm_times in results:
            plain_p50, orm_p50 = statistics.median(plain_times) * 1e6, statistics.median(orm_times) * 1e6
            print(
                f"{name:<50} {plain_p50:>10.0f} {_p95(plain_times) * 1e6:>8.0f} {orm_p50:>10.0f}"
                f" {_p95(orm_times) * 1e6:>8.0f} {orm_p50 / plain_p50:>10.2f}"
            )
        print("-" * 100)
        print(f"microseconds; {args.pairs} pairs each, alternating which of the two runs first")
    finally:
        scratch.remove(False)


if __name__ == "__main__":
    main()
