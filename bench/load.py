"""Nothing lost under load: N invocations (default 1,000) sent at once through the HTTP API
(`"wait": false`) to one uvicorn server and one real Celery worker, then followed to their end.

    .venv/bin/python bench/load.py [--count N] [--workers C] [--warm] [--port P]

Rows: sent, accepted (202), refused (any other answer, by status), succeeded (with the right
result), failed or timed out, lost (accepted but not finished within --timeout, or finished
with a wrong result), throughput (finished per second, from the first accepted call's
creation to the last end) and the created→finished latency p50 and p95. Scratch setup as in
bench/invoke.py (a fresh data directory and database; `DATABASE_URL` for PostgreSQL, else
SQLite; `REDIS_URL` for Redis, else the filesystem broker). Needs root, bubblewrap and the
sandbox users, like the worker. The per-user fair-use caps are lifted (every call comes from one
user). PostgreSQL's `max_connections` must leave room for --clients server threads."""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import invoke as base  # noqa: E402 - bench/invoke.py: scratch setup, worker, toolkit, percentiles.
import serve  # noqa: E402 - bench/serve.py: the uvicorn server.


async def send_all(url: str, token: str, slug: str, count: int, clients: int) -> tuple[list[str], collections.Counter]:
    """Every call started at once (at most `clients` connections open): the ids accepted and
    the count of each answer's status."""
    import httpx2

    ids: list[str] = []
    statuses: collections.Counter = collections.Counter()
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120, limits=limits
    ) as http:

        async def one(i: int) -> None:
            try:
                response = await http.post(
                    f"/api/v1/toolkits/{slug}/tools/echo/invoke",
                    json={"arguments": {"text": f"call {i}"}, "wait": False},
                )
            except httpx2.HTTPError as exc:
                statuses[type(exc).__name__] += 1
                return
            statuses[response.status_code] += 1
            if response.status_code == 202:
                ids.append(response.json()["id"])

        await asyncio.gather(*(one(i) for i in range(count)))
    return ids, statuses


def follow(ids: list[str], timeout: float) -> list:
    """Wait until every accepted invocation has ended (or the time-out passes)."""
    from toolhub.runs.models import FINISHED, Invocation

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        open_ = Invocation.objects.filter(pk__in=ids).exclude(status__in=list(FINISHED)).count()
        if open_ == 0:
            break
        time.sleep(0.5)
    return list(Invocation.objects.filter(pk__in=ids).values_list("status", "arguments", "result", "created_at", "finished_at"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="invocations sent at once (default 1000)")
    parser.add_argument("--clients", type=int, default=50, help="HTTP connections open at once (default 50)")
    parser.add_argument("--workers", type=int, default=2, help="concurrency of the Celery worker (default 2)")
    parser.add_argument("--warm", action="store_true", help="warm sandboxes (TOOLHUB_SANDBOX_WARM)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the last end")
    parser.add_argument("--port", type=int, default=21392, help="port of the scratch server (default 21392)")
    args = parser.parse_args()

    # Every call comes from one bench user: lift the per-user fair-use caps (the bench measures
    # queueing, not the caps), for the server and the worker alike.
    for name in ("TOOLHUB_USER_MAX_ACTIVE", "TOOLHUB_USER_INVOCATIONS_PER_MINUTE", "TOOLHUB_USER_CALLS_PER_MINUTE",
                 "TOOLHUB_CLIENT_CALLS_PER_MINUTE"):
        os.environ.setdefault(name, str(10 * args.count + 1000))
    scratch = base.Scratch()
    worker = server = None
    keep = True
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        from toolhub.accounts.models import ApiToken
        from toolhub.runs.models import RunStatus

        call_command("migrate", verbosity=0)
        user, toolkit = base.ready_toolkit()
        broker = "redis" if settings.REDIS_URL else "filesystem"
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        print(f"toolkit ready; broker: {broker}, database: {database}", flush=True)
        worker = base.Worker(scratch, concurrency=args.workers, warm=args.warm)
        server = serve.Server(scratch, args.port)
        _token, raw = ApiToken.issue(user=user, name="bench")

        sent_at = time.monotonic()
        ids, statuses = asyncio.run(send_all(server.url, raw, toolkit.slug, args.count, args.clients))
        send_seconds = time.monotonic() - sent_at
        rows = follow(ids, args.timeout)

        finished = [r for r in rows if r[4] is not None and r[0] in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT)]
        right = [r for r in finished if r[0] == RunStatus.SUCCEEDED and r[2] == r[1]["text"]]
        wrong = [r for r in finished if r[0] == RunStatus.SUCCEEDED and r[2] != r[1]["text"]]
        other_end = [r for r in finished if r[0] != RunStatus.SUCCEEDED]
        lost = len(ids) - len(finished) + len(wrong)
        latencies = [(r[4] - r[3]).total_seconds() for r in finished]
        span = (max(r[4] for r in finished) - min(r[3] for r in finished)).total_seconds() if finished else 0.0
        refused = {k: v for k, v in statuses.items() if k != 202}

        mode = "warm" if args.warm else "cold"
        print(f"\n{args.count} invocations at once over HTTP ({args.clients} connections) to one uvicorn process,"
              f" one worker (concurrency {args.workers}, {mode} sandboxes); {broker}, {database}\n")
        print(f"| {'measure':<34} | {'value':>12} |")
        print(f"| {'-' * 34} | {'-' * 12}:|")
        table = [
            ("sent", f"{args.count}"),
            ("accepted (202)", f"{len(ids)}"),
            ("refused", ", ".join(f"{k}: {v}" for k, v in sorted(refused.items(), key=str)) or "0"),
            ("succeeded, right result", f"{len(right)}"),
            ("failed or timed out", f"{len(other_end)}"),
            ("lost (not ended, or wrong result)", f"{lost}"),
            ("sending all took (s)", f"{send_seconds:.1f}"),
            ("throughput (ended per s)", f"{len(finished) / span:.1f}" if span else "-"),
            ("created -> finished p50 (s)", f"{base._percentile(latencies, 0.5):.1f}" if latencies else "-"),
            ("created -> finished p95 (s)", f"{base._percentile(latencies, 0.95):.1f}" if latencies else "-"),
        ]
        for name, value in table:
            print(f"| {name:<34} | {value:>12} |")
        if other_end:
            errors = collections.Counter((r[0], "") for r in other_end)
            print(f"\nended otherwise: {dict(errors)}")
        keep = bool(refused or lost or other_end)
    finally:
        if server is not None:
            server.stop()
        if worker is not None:
            worker.stop()
        if keep:
            # Say why, from the server's log (kept with the worker's for a closer look).
            for line in server.log.read_text(errors="replace").splitlines() if server else []:
                if "Error" in line or "error" in line:
                    print("server:", line[:300])
        scratch.remove(keep=keep)


if __name__ == "__main__":
    main()
