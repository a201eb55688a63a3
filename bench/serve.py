"""A call as LLM apps make it, through the real server: the same trivial tool called over
HTTP through `POST /api/v1/.../invoke` (`"wait": true`), the OpenAPI tool server
(`POST /openapi/{slug}/{tool}`) and MCP `tools/call` (the official `mcp` client, on a
handshake-era session and on a 2026-07-28 stateless connection), against one uvicorn server
process (as `make run` starts it) and one real Celery worker of concurrency 2 with warm
sandboxes; beside them, in the same rounds, a bare `python3.11 -I -S -c pass` (the baseline).

    .venv/bin/python bench/serve.py [--runs N] [--burst N] [--connections C] [--port P] [--pinned]

The paths and the bare start are called round robin (one of each per round) so that the
shared machine's changing load weighs on every row alike. Rows: p50 and p95 over N rounds
after two warm-up rounds; each p50's ratio to the bare start and to the direct API call.
Then a burst: N calls sent at once over HTTP (API, `wait: true`) from C client connections,
timed until the last answer, with the CPU every process on the host spent on it, by role
(from /proc, as bench/drain_cpu.py reads it), the rate that CPU allows with and without the
bench's own client, and the database's committed transactions per call (PostgreSQL's
statistics). The targets of issue "Fast through the real
server" are printed beside the figures. Scratch setup as in bench/invoke.py (a fresh data
directory and database; `REDIS_URL` for Redis, else the filesystem broker). Needs root,
bubblewrap and the sandbox users, like the worker."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import drain_cpu  # noqa: E402 - bench/drain_cpu.py: CPU per process from /proc.
import invoke as base  # noqa: E402 - bench/invoke.py: scratch setup, worker, toolkit, percentiles.

BARE = "bare python3.11 -I -S -c pass"
# Issue "Fast through the real server": its targets, measured in one run.
TARGET_BARE_RATIO = 2.0
TARGET_MCP_RATIO = 1.2
TARGET_RATE = 100.0
# PostgreSQL's backends report their statistics once idle, at most once a second.
STATS_DELAY = 1.5


class Server:
    """uvicorn serving toolhub.asgi on the scratch database."""

    def __init__(self, scratch: base.Scratch, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = scratch.dir / "server.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "toolhub.asgi:application", "--host", "127.0.0.1", "--port", str(port),
             "--lifespan", "on", "--no-access-log", "--log-level", "warning"],
            cwd=REPO, env=dict(os.environ), stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        import httpx2

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx2.get(f"{self.url}/openapi/openapi.json", timeout=1)
                return
            except httpx2.HTTPError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.2)
        self.stop()
        raise SystemExit("the server did not start:\n" + self.log.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def _check(ok: bool, what: str, detail: object = "") -> None:
    if not ok:
        raise SystemExit(f"the {what} call did not succeed: {str(detail)[:500]}")


async def measure(url: str, token: str, slug: str, runs: int) -> tuple[list[tuple[str, list[float]]], list[tuple[float, dict, float]]]:
    """Round robin: each round calls every path once, so a change in the machine's load (it
    is shared) weighs on all rows alike. Each path's times, and the API calls' stamps (stages())."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    text = base.ARGUMENTS["text"]
    # (client's wall clock at sending, the answer, client's wall clock at receiving) of each API
    # call of the measured rounds.
    stamps: list[tuple[float, dict, float]] = []
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
        sessions = {}
        for mode in ("legacy", "2026-07-28"):
            mcp_http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
            sessions[mode] = await stack.enter_async_context(
                Client(streamable_http_client(f"{url}/mcp/{slug}", http_client=mcp_http), mode=mode))

        async def api() -> None:
            sent = time.time()
            response = await http.post(f"{url}/api/v1/toolkits/{slug}/tools/echo/invoke", json={"arguments": base.ARGUMENTS, "wait": True})
            received = time.time()
            answer = response.json() if response.status_code == 200 else {}
            _check(answer.get("status") == "succeeded", "API", response.text)
            stamps.append((sent, answer, received))

        async def openapi() -> None:
            response = await http.post(f"{url}/openapi/{slug}/echo", json=base.ARGUMENTS)
            _check(response.status_code == 200 and response.json() == text, "OpenAPI", response.text)

        def mcp_call(mode: str):
            async def call() -> None:
                result = await sessions[mode].call_tool("echo", base.ARGUMENTS)
                _check(not result.is_error and result.content[0].text == text, "MCP", result)
            return call

        async def bare() -> None:
            process = await asyncio.create_subprocess_exec("/usr/bin/python3.11", "-I", "-S", "-c", "pass")
            _check(await process.wait() == 0, "bare interpreter")

        paths = [("API: POST .../invoke, wait", api), ("OpenAPI: POST /openapi/{slug}/echo", openapi),
                 ("MCP tools/call (2025 session)", mcp_call("legacy")), ("MCP tools/call (2026-07-28)", mcp_call("2026-07-28")),
                 (BARE, bare)]
        times: dict[str, list[float]] = {name: [] for name, _call in paths}
        for round_ in range(runs + 2):
            if round_ == 2:
                stamps.clear()
            for name, call in paths:
                started = time.perf_counter()
                await call()
                if round_ >= 2:
                    times[name].append(time.perf_counter() - started)
        return [(name, times[name]) for name, _call in paths], stamps


STAGES = (
    ("HTTP, ASGI, middleware, the view up to the new row", "sent", "created_at"),
    ("insert, commit, enqueue, broker, the worker's claim", "created_at", "started_at"),
    ("in the worker: the warm sandbox's call, the result stored", "started_at", "finished_at"),
    ("notice, the wait's wake-up, the answer over HTTP", "finished_at", "received"),
)


def stages(stamps: list[tuple[float, dict, float]]) -> list[tuple[str, list[float]]]:
    """Where an API call's time goes, from its own timestamps (the row's `created_at`, the
    worker's claim `started_at`, `finished_at`) and the client's clock on the same host."""
    from datetime import datetime

    rows: dict[str, list[float]] = {name: [] for name, _start, _end in STAGES}
    for sent, answer, received in stamps:
        moments = {"sent": sent, "received": received}
        for field in ("created_at", "started_at", "finished_at"):
            moments[field] = datetime.fromisoformat(answer[field]).timestamp()
        for name, start, end in STAGES:
            rows[name].append(moments[end] - moments[start])
    return list(rows.items())


async def burst(url: str, token: str, slug: str, calls: int, connections: int) -> float:
    """`calls` API calls (`wait: true`) sent at once over `connections` keep-alive connections;
    seconds until the last answer."""
    import httpx2

    clients = [httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120,
                                  limits=httpx2.Limits(max_connections=1)) for _ in range(connections)]

    async def one(number: int) -> None:
        response = await clients[number % connections].post(
            f"{url}/api/v1/toolkits/{slug}/tools/echo/invoke", json={"arguments": base.ARGUMENTS, "wait": True})
        _check(response.status_code == 200 and response.json()["status"] == "succeeded", "burst", response.text)

    try:
        started = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(calls)))
        return time.perf_counter() - started
    finally:
        for client in clients:
            await client.aclose()


def _roles(server_pid: int, worker_pid: int, before, after) -> dict[str, float]:
    """CPU seconds by role between two drain_cpu._processes() snapshots: the web server (uvicorn
    and its threads) first, then drain_cpu's roles of the worker and the rest of the host."""
    spent = drain_cpu._cpu_by_role(before, after, worker_pid)
    tick = os.sysconf("SC_CLK_TCK")
    web = 0.0
    for pid, (_command, _parent, start, ticks) in after.items():
        if pid == server_pid:
            earlier = before.get(pid)
            web = (ticks - (earlier[3] if earlier is not None and earlier[2] == start else 0)) / tick
    other = drain_cpu.ROLES[6]
    spent[other] = max(0.0, spent[other] - web)
    return {"web server (uvicorn)": web, **spent}


def _transactions() -> int | None:
    """The scratch database's committed transactions so far (PostgreSQL's statistics, which a
    backend reports once it is idle, at most once a second: read after STATS_DELAY), or None
    on SQLite."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    time.sleep(STATS_DELAY)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="calls per row (default 30)")
    parser.add_argument("--burst", type=int, default=200, help="calls sent at once in the burst (default 200; 0: none)")
    parser.add_argument("--connections", type=int, default=8, help="client connections of the burst (default 8)")
    parser.add_argument("--port", type=int, default=21390, help="port of the scratch server (default 21390)")
    parser.add_argument("--pinned", action="store_true",
                        help="then the burst again with 2 worker processes of concurrency 1, each pinned to a core of its own with taskset")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (the server's and worker's logs)")
    args = parser.parse_args()

    scratch = base.Scratch()
    # The bench makes more calls a minute than the default per-user limit allows.
    os.environ.update(TOOLHUB_USER_CALLS_PER_MINUTE="0", TOOLHUB_CLIENT_CALLS_PER_MINUTE="0",
                      TOOLHUB_USER_MAX_ACTIVE="0", TOOLHUB_USER_INVOCATIONS_PER_MINUTE="0")
    worker = server = None
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        from toolhub.accounts.models import ApiToken

        call_command("migrate", verbosity=0)
        user, toolkit = base.ready_toolkit()
        broker = "redis" if settings.REDIS_URL else "filesystem"
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        print(f"toolkit ready; broker: {broker}, database: {database}", flush=True)
        worker = base.Worker(scratch, concurrency=2, warm=True)
        server = Server(scratch, args.port)
        _token, raw = ApiToken.issue(user=user, name="bench")

        rows, stamps = asyncio.run(measure(server.url, raw, toolkit.slug, args.runs))

        p50s = {name: base._percentile(times, 0.5) for name, times in rows}
        api, bare = p50s[rows[0][0]], p50s[BARE]
        print(f"\n{args.runs} rounds, over HTTP to one uvicorn process, one worker (concurrency 2, warm sandboxes);"
              f" the bare start timed in the same rounds\n")
        print(f"| {'path':<36} | {'p50 ms':>8} | {'p95 ms':>8} | {'p50 / bare':>10} | {'p50 / API':>9} |")
        print(f"| {'-' * 36} | {'-' * 8}:| {'-' * 8}:| {'-' * 10}:| {'-' * 9}:|")
        for name, times in rows:
            p50, p95 = p50s[name], base._percentile(times, 0.95)
            print(f"| {name:<36} | {p50 * 1000:8.1f} | {p95 * 1000:8.1f} | {p50 / bare:10.2f} | {p50 / api:9.2f} |")
        print(f"\nWhere an API call's time goes ({len(stamps)} calls; from the answer's timestamps and the"
              f" client's clock; the stages' p50s need not add up to the call's)\n")
        print(f"| {'stage':<58} | {'p50 ms':>8} | {'p95 ms':>8} |")
        print(f"| {'-' * 58} | {'-' * 8}:| {'-' * 8}:|")
        for name, spans in stages(stamps):
            print(f"| {name:<58} | {base._percentile(spans, 0.5) * 1000:8.2f} | {base._percentile(spans, 0.95) * 1000:8.2f} |")
        mcp = p50s["MCP tools/call (2025 session)"]
        print(f"\nTargets: API p50 / bare {api / bare:.2f} (<= {TARGET_BARE_RATIO}: "
              f"{'met' if api / bare <= TARGET_BARE_RATIO else 'missed'}); MCP (session) p50 / API {mcp / api:.2f} "
              f"(<= {TARGET_MCP_RATIO}: {'met' if mcp / api <= TARGET_MCP_RATIO else 'missed'})")

        if args.burst:
            committed = _transactions()
            before = drain_cpu._processes()
            seconds = asyncio.run(burst(server.url, raw, toolkit.slug, args.burst, args.connections))
            after = drain_cpu._processes()
            committed_after = _transactions()
            rate = args.burst / seconds
            print(f"\nBurst: {args.burst} calls sent at once over {args.connections} connections: {seconds:.2f} s, "
                  f"{rate:.1f} calls/s (target >= {TARGET_RATE:.0f}: {'met' if rate >= TARGET_RATE else 'missed'})\n")
            print(f"| {'process':<42} | {'CPU ms per call':>15} |")
            print(f"| {'-' * 42} | {'-' * 15}:|")
            spent = _roles(server.process.pid, worker.process.pid, before, after)
            for role, cpu in spent.items():
                print(f"| {role:<42} | {cpu * 1000 / args.burst:15.2f} |")
            # The rest of the host (other work on a shared machine) is shown, not counted.
            total = sum(cpu for role, cpu in spent.items() if role != drain_cpu.ROLES[6]) * 1000 / args.burst
            print(f"| {'ToolHub, PostgreSQL, Redis and the bench':<42} | {total:15.2f} |")
            print(f"\nOn {os.cpu_count()} cores that CPU allows {os.cpu_count() * 1000 / total:.1f} calls/s.")
            # The bench's own client shares the cores here; an LLM app's would be elsewhere.
            served = total - spent[drain_cpu.ROLES[5]] * 1000 / args.burst
            print(f"Without the bench's own process: {served:.2f} ms per call, which would allow "
                  f"{os.cpu_count() * 1000 / served:.1f} calls/s.")
            if committed is not None and committed_after is not None:
                # Each of the bench's own two reads commits one more.
                print(f"Database transactions committed per call in the burst: {(committed_after - committed - 2) / args.burst:.2f}")
        if args.burst and args.pinned:
            # The shape of a second worker host: two worker processes, each on a core of its own
            # (the web server, PostgreSQL and Redis still share both).
            worker.stop()
            worker = None
            pinned = [base.Worker(scratch, 1, warm=True, cpus=str(core % os.cpu_count())) for core in range(2)]
            try:
                asyncio.run(burst(server.url, raw, toolkit.slug, 20, args.connections))  # each worker warms up
                seconds = asyncio.run(burst(server.url, raw, toolkit.slug, args.burst, args.connections))
            finally:
                for each in pinned:
                    each.stop()
            print(f"\nBurst with 2 pinned worker processes (taskset -c 0 and -c 1, concurrency 1 each): "
                  f"{seconds:.2f} s, {args.burst / seconds:.1f} calls/s")
    finally:
        if server is not None:
            server.stop()
        if worker is not None:
            worker.stop()
        scratch.remove(keep=args.keep)


if __name__ == "__main__":
    main()
