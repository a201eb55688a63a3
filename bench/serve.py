"""What the tool-server layers cost on top of an invocation: the same trivial tool called
over real HTTP through `POST /api/v1/.../invoke` (`"wait": true`), the OpenAPI tool server
(`POST /openapi/{slug}/{tool}`) and MCP `tools/call` (the official `mcp` client, on a
handshake-era session and on a 2026-07-28 stateless connection), against one uvicorn server
process and one real Celery worker.

    .venv/bin/python bench/serve.py [--runs N] [--port P]

The paths are called round robin (one call of each per round) so that the shared machine's
changing load weighs on every row alike. Rows: p50 and p95 over N rounds after two warm-up
rounds, and each p50's ratio to (and
difference from) the direct API call's. Scratch setup as in bench/invoke.py (a fresh data
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

import invoke as base  # noqa: E402 - bench/invoke.py: scratch setup, worker, toolkit, percentiles.


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


async def measure(url: str, token: str, slug: str, runs: int) -> list[tuple[str, list[float]]]:
    """Round robin: each round calls every path once, so a change in the machine's load (it
    is shared) weighs on all rows alike."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    text = base.ARGUMENTS["text"]
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
        sessions = {}
        for mode in ("legacy", "2026-07-28"):
            mcp_http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
            sessions[mode] = await stack.enter_async_context(
                Client(streamable_http_client(f"{url}/mcp/{slug}", http_client=mcp_http), mode=mode))

        async def api() -> None:
            response = await http.post(f"{url}/api/v1/toolkits/{slug}/tools/echo/invoke", json={"arguments": base.ARGUMENTS, "wait": True})
            _check(response.status_code == 200 and response.json()["status"] == "succeeded", "API", response.text)

        async def openapi() -> None:
            response = await http.post(f"{url}/openapi/{slug}/echo", json=base.ARGUMENTS)
            _check(response.status_code == 200 and response.json() == text, "OpenAPI", response.text)

        def mcp_call(mode: str):
            async def call() -> None:
                result = await sessions[mode].call_tool("echo", base.ARGUMENTS)
                _check(not result.is_error and result.content[0].text == text, "MCP", result)
            return call

        paths = [("API: POST .../invoke, wait", api), ("OpenAPI: POST /openapi/{slug}/echo", openapi),
                 ("MCP tools/call (2025 session)", mcp_call("legacy")), ("MCP tools/call (2026-07-28)", mcp_call("2026-07-28"))]
        times: dict[str, list[float]] = {name: [] for name, _call in paths}
        for round_ in range(runs + 2):
            for name, call in paths:
                started = time.perf_counter()
                await call()
                if round_ >= 2:
                    times[name].append(time.perf_counter() - started)
        return [(name, times[name]) for name, _call in paths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="calls per row (default 30)")
    parser.add_argument("--port", type=int, default=21390, help="port of the scratch server (default 21390)")
    args = parser.parse_args()

    scratch = base.Scratch()
    # The bench makes more calls a minute than the default per-user limit allows.
    os.environ.update(TOOLHUB_USER_CALLS_PER_MINUTE="0", TOOLHUB_CLIENT_CALLS_PER_MINUTE="0")
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
        worker = base.Worker(scratch, concurrency=1)
        server = Server(scratch, args.port)
        _token, raw = ApiToken.issue(user=user, name="bench")

        rows = asyncio.run(measure(server.url, raw, toolkit.slug, args.runs))

        baseline = base._percentile(rows[0][1], 0.5)
        print(f"\n{args.runs} calls per row, over HTTP to one uvicorn process, one worker (concurrency 1)\n")
        print(f"| {'path':<36} | {'p50 ms':>8} | {'p95 ms':>8} | {'p50 / API':>9} | {'p50 - API ms':>12} |")
        print(f"| {'-' * 36} | {'-' * 8}:| {'-' * 8}:| {'-' * 9}:| {'-' * 12}:|")
        for name, times in rows:
            p50, p95 = base._percentile(times, 0.5), base._percentile(times, 0.95)
            print(f"| {name:<36} | {p50 * 1000:8.1f} | {p95 * 1000:8.1f} | {p50 / baseline:9.2f} | {(p50 - baseline) * 1000:12.1f} |")
    finally:
        if server is not None:
            server.stop()
        if worker is not None:
            worker.stop()
        scratch.remove(keep=False)


if __name__ == "__main__":
    main()
