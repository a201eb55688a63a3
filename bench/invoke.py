"""What the sandbox and the queue cost for one trivial tool call, and how many calls a worker
host finishes per second.

    .venv/bin/python bench/invoke.py [--runs N] [--baseline-runs N] [--throughput N] [--keep]

Rows, each over N runs after two warm-up runs (p50 and p95, and the ratio of each p50 to the
baseline's):

- in-process call: the toolkit file imported into this process once and `Tools().echo(...)`
  called, which is what Open WebUI and RAGFlow do. The unsafe baseline.
- in-process import + call: the file executed afresh for each call (what a "cold" call costs
  without a sandbox).
- cold sandbox: `toolhub.sandbox.launcher.run_sandboxed` with the real runtime, a new bubblewrap
  sandbox per call, as the worker starts one per invocation.
- bare interpreter: `python3.11 -I -S -c pass` as a subprocess, the floor of any process start.
- fork-server floor: a warm sandbox (`toolhub.sandbox.warm`) answering a request the runtime
  refuses at once (no toolkit is loaded): a fork, the call's pipes, one line each way and the
  clean-up after the call, inside bubblewrap with pydantic imported.
- warm sandbox: the same trivial tool call on a warm sandbox (`WarmPool.run`), back to back,
  and 10 ms apart as a worker's calls are (it records each result first): a call answers at
  its result, and its clean-up is finished while the caller goes on, unless the next call
  comes at once and waits for it.
- end to end, cold and warm: `POST /api/v1/toolkits/{slug}/tools/echo/invoke` with
  `"wait": true`, through Django's test client in this process, the broker, a real Celery
  worker process (with `TOOLHUB_SANDBOX_WARM=0` and `=1`) and the sandbox; the request waits
  for the worker's Redis notice. A bare interpreter start is timed just before each warm call
  too, so the target's ratio can be taken of figures measured side by side, and each warm call
  is split at the invocation's own timestamps into where its time goes (API, queue, worker,
  answer).

Then invocations per second: N calls submitted with `"wait": false`, timed until the last one
has finished, with one worker process of concurrency 1 and of concurrency 2, cold and warm
(this includes the bench's own serial submissions through the API); the worker host alone,
warm: N invocations queued in the database, then all their tasks sent at once to a worker of
concurrency 2 of its own, whose processes have started their sandboxes for four calls first,
from the first claim to the last end; the same just after a start: N calls queued first and then a worker of concurrency
2 started, which warms its sandboxes while it takes the first calls; and the memory one idle
warm sandbox costs (PSS and RSS of bubblewrap and everything below it, and the sandbox's memory
cgroup usage).

Everything is scratch: a fresh data directory under /tmp (its environment is built from the
offline wheelhouse, `.data/wheelhouse`), a fresh SQLite database migrated here, and, without
`REDIS_URL`, the filesystem broker inside that directory. With `REDIS_URL` set the workers use
that Redis (give the bench a Redis database of its own: workers of other processes on the same
database would take its tasks). With a PostgreSQL `DATABASE_URL` a scratch database
`<name>_bench_<pid>` is created next to the named one and dropped at the end. Needs root,
bubblewrap and the `toolhub-sandbox` user, like the worker.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TOOLKIT = '''"""
title: Bench Echo
author: ToolHub bench
description: One trivial tool, to measure everything around it.
version: 1.0.0
"""


class Tools:
    def echo(self, text: str) -> str:
        """
        Return the text unchanged.
        :param text: Any text
        """
        return text
'''
ARGUMENTS = {"text": "hello"}
# How long one invocation may take before the bench calls the setup broken.
STUCK_AFTER_SECONDS = 120.0


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest rank; with fewer than 20 values p95 is simply the largest."""
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


def _measure(action: Callable[[], object], runs: int, warmup: int = 2, pause: float = 0) -> list[float]:
    for _ in range(warmup):
        action()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
        time.sleep(pause)
    return times


# Scratch setup (before Django is imported)
# ------------------------------------------------------------------------------


class Scratch:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="toolhub-bench-", dir="/tmp"))
        # bwrap runs as the sandbox user, who must traverse the data directory.
        self.dir.chmod(0o755)
        self.pg_admin_url: str | None = None
        self.pg_name: str | None = None
        database_url = os.environ.get("DATABASE_URL", "")
        try:
            if database_url.startswith(("postgres://", "postgresql://")):
                self.database_url = self._scratch_postgres(database_url)
            else:
                self.database_url = f"sqlite:///{self.dir / 'bench.sqlite3'}"
        except Exception:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        os.environ.update({
            "TOOLHUB_DATA_DIR": str(self.dir),
            "DATABASE_URL": self.database_url,
            "DJANGO_SETTINGS_MODULE": "toolhub.settings_test",
            "TOOLHUB_TESTING": "1",
            "TOOLHUB_ENV_FILE": "/nonexistent",
            "TOOLHUB_FIND_LINKS": os.environ.get("TOOLHUB_FIND_LINKS", str(REPO / ".data" / "wheelhouse")),
            "TOOLHUB_NO_INDEX": os.environ.get("TOOLHUB_NO_INDEX", "1"),
            "LOG_LEVEL": "WARNING",
        })
        # The test client in this process is the web process, so it pools its database
        # connections as toolhub/asgi.py does (the workers drop the pool: toolhub.celery).
        os.environ.setdefault("TOOLHUB_DB_POOL", "1")
        # Every call comes from the one bench user: the per-user fair-use caps are off (0), as
        # the bench measures the path, not the caps.
        for name in ("TOOLHUB_USER_MAX_ACTIVE", "TOOLHUB_USER_INVOCATIONS_PER_MINUTE"):
            os.environ.setdefault(name, "0")

    def _scratch_postgres(self, url: str) -> str:
        import psycopg

        parts = urlsplit(url)
        base = parts.path.lstrip("/") or "postgres"
        self.pg_name = f"{base}_bench_{os.getpid()}"
        # The named database need not exist: the scratch one is created from the server's
        # maintenance database, as pytest-django creates its test database.
        self.pg_admin_url = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.pg_name}"')
        return urlunsplit(parts._replace(path="/" + self.pg_name))

    def remove(self, keep: bool) -> None:
        from django.db import connections

        connections.close_all()
        for database in connections.all():
            if database.vendor == "postgresql":
                database.close_pool()
        if self.pg_name and self.pg_admin_url:
            import psycopg

            with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
        if keep:
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class Worker:
    """A real Celery worker process on the scratch database and data directory."""

    def __init__(self, scratch: Scratch, concurrency: int, *, warm: bool = False, cpus: str | None = None) -> None:
        """`cpus`: pin the worker and its pool (and sandboxes) to these cores with `taskset -c`."""
        name = uuid.uuid4().hex[:6]
        self.log = scratch.dir / f"worker-{name}.log"
        env = dict(os.environ, TOOLHUB_SANDBOX_WARM="1" if warm else "0")
        pinned = ["taskset", "-c", cpus] if cpus is not None else []
        self.process = subprocess.Popen(
            [*pinned, sys.executable, "-m", "celery", "-A", "toolhub", "worker", "-Q", "sandbox,builds,celery",
             "-c", str(concurrency), "-l", "info", "-n", f"bench-{os.getpid()}-{name}@%h",
             "--without-heartbeat", "--without-gossip", "--without-mingle"],
            cwd=REPO, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if "ready." in self.output():
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise SystemExit("the Celery worker did not start:\n" + self.output()[-3000:])

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


# The measurements
# ------------------------------------------------------------------------------


def ready_toolkit(source: str = TOOLKIT, slug: str = "bench_echo"):
    """Upload and build the toolkit in this process, the way the build worker would."""
    from django.contrib.auth import get_user_model

    from toolhub.toolkits.models import Toolkit
    from toolhub.toolkits.services import toolkit_create
    from toolhub.toolkits.tasks import build_revision, introspect_revision

    user = get_user_model().objects.create_user("bench", "bench@example.org", "bench-password", is_staff=True)
    toolkit = toolkit_create(source=source, user=user, slug=slug).toolkit
    revision = toolkit.latest_revision()
    build_revision.run(revision.pk)
    introspect_revision.run(revision.pk)
    toolkit = Toolkit.objects.select_related("current_revision").get(pk=toolkit.pk)
    if toolkit.current_revision.status != "ready":
        raise SystemExit(f"the bench toolkit did not become ready: {toolkit.current_revision.status_detail}")
    return user, toolkit


def sandbox_request(tool: str, arguments: dict, toolkit_id: str) -> dict:
    """The runtime's request for one call of the bench toolkit's tool in a sandbox."""
    from toolhub.sandbox import launcher as sandboxlib

    return {
        "op": "invoke", "source_path": sandboxlib.SANDBOX_SOURCE_PATH, "tool": tool, "arguments": arguments,
        "valves": None, "user_valves": None, "user": {"id": "1", "name": "bench", "email": "", "role": "admin"},
        "metadata": {}, "messages": [], "files": [], "model": None, "id": toolkit_id, "call_timeout": 5,
    }


def in_process(source_path: Path, runs: int) -> tuple[list[float], list[float]]:
    def load():
        spec = importlib.util.spec_from_file_location(f"bench_toolkit_{uuid.uuid4().hex}", source_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    tools = load().Tools()
    warm = _measure(lambda: tools.echo(**ARGUMENTS), runs)
    cold = _measure(lambda: load().Tools().echo(**ARGUMENTS), runs)
    return warm, cold


def cold_sandbox(toolkit, runs: int) -> list[float]:
    from django.conf import settings

    from toolhub.sandbox import launcher as sandboxlib
    from toolhub.toolkits import sandboxing as sandbox
    from toolhub.toolkits.building import revision_environment

    revision = toolkit.current_revision
    env_dir = revision_environment(revision)
    runtime_dir = sandbox.runtime_dir()
    source_path = sandbox.source_file(revision)
    request = sandbox_request("echo", ARGUMENTS, "bench_echo")

    def once() -> None:
        outcome = sandboxlib.run_sandboxed(
            interpreter_env=env_dir, runtime_dir=runtime_dir, source_path=source_path, request=request,
            limits=sandbox.limits(), on_message=lambda message: None,
            sandbox_user=settings.TOOLHUB_SANDBOX_USER, bwrap=settings.TOOLHUB_BWRAP,
        )
        if (outcome.final or {}).get("result") != ARGUMENTS["text"]:
            raise SystemExit(f"the sandboxed call failed: {outcome}")

    return _measure(once, runs)


def bare_python(runs: int) -> list[float]:
    return _measure(lambda: subprocess.run(["/usr/bin/python3.11", "-I", "-S", "-c", "pass"], check=True), runs)


def warm_echo(pool, *, env_dir: Path, runtime_dir: Path, source_path: Path, limits) -> Callable[[], None]:
    """One call of the bench toolkit's echo tool on a warm sandbox of `pool` (WarmPool.run),
    checked."""
    request = sandbox_request("echo", ARGUMENTS, "bench_echo")

    def call() -> None:
        outcome = pool.run(interpreter_env=env_dir, runtime_dir=runtime_dir, source_path=source_path,
                           request=request, limits=limits, on_message=lambda message: None)
        if (outcome.final or {}).get("result") != ARGUMENTS["text"]:
            raise SystemExit(f"the warm call failed: {outcome}")

    return call


def fork_server_floor(sandbox, source: bytes, limits) -> Callable[[], None]:
    """One call on the warm `sandbox` whose process answers at once (an unknown op), so that
    nothing of a toolkit loads: what any call costs."""

    def floor() -> None:
        outcome = sandbox.call(source=source, request={"op": "floor", "source_path": "-"}, limits=limits,
                               on_message=lambda message: None)
        if (outcome.final or {}).get("kind") != "error":
            raise SystemExit(f"the floor call failed: {outcome}")

    return floor


def warm_sandbox(toolkit, runs: int) -> tuple[list[float], list[float], list[float], dict[str, int]]:
    """The warm call (back to back, and 10 ms apart), the fork-server floor and the memory of
    one idle warm sandbox."""
    from toolhub.sandbox.warm_pool import WarmPool
    from toolhub.toolkits import sandboxing as sandbox
    from toolhub.toolkits.building import revision_environment

    revision = toolkit.current_revision
    env_dir = revision_environment(revision)
    runtime_dir = sandbox.runtime_dir()
    source_path = sandbox.source_file(revision)
    limits = sandbox.limits()
    pool = WarmPool(size=1, uid_pool=sandbox.uid_pool(), max_calls=10_000, max_age=3600)
    try:
        call = warm_echo(pool, env_dir=env_dir, runtime_dir=runtime_dir, source_path=source_path, limits=limits)
        warm = _measure(call, runs)
        # A worker records each result before its next call, while the sandbox finishes the
        # call's tail (its clean-up after the answer): the same call with 10 ms between calls.
        warm_paused = _measure(call, runs, pause=0.01)
        (only,) = pool.idle()
        floor_times = _measure(fork_server_floor(only, source_path.read_bytes(), limits), runs)
        memory = only.memory()
    finally:
        pool.close()
    return warm, warm_paused, floor_times, memory


STAGES = (
    "API request until the invocation row exists",
    "enqueue, broker, Celery, until the worker claims it",
    "worker: claim to recorded end (sandbox call included)",
    "notice, re-read, answer",
)


def end_to_end(client, headers: dict, toolkit, runs: int) -> tuple[list[float], list[float], list[list[float]]]:
    """The call's times; a bare interpreter start timed just before each call (so their ratio is
    of figures taken side by side); and each call's time split at the invocation's own
    timestamps (created, started, finished) into STAGES."""
    from toolhub.runs.models import Invocation

    url = f"/api/v1/toolkits/{toolkit.slug}/tools/echo/invoke"
    body = json.dumps({"arguments": ARGUMENTS, "wait": True})
    calls: list[float] = []
    bare: list[float] = []
    stages: list[list[float]] = []
    for run in range(runs + 2):
        started = time.perf_counter()
        subprocess.run(["/usr/bin/python3.11", "-I", "-S", "-c", "pass"], check=True)
        bare_time = time.perf_counter() - started
        sent = time.time()
        started = time.perf_counter()
        response = client.post(url, body, content_type="application/json", **headers)
        call_time = time.perf_counter() - started
        answered = time.time()
        answer = response.json()
        if response.status_code != 200 or answer.get("status") != "succeeded":
            raise SystemExit(f"the API call did not succeed: {response.status_code} {answer}")
        if run < 2:
            continue  # warm-up
        calls.append(call_time)
        bare.append(bare_time)
        row = Invocation.objects.values_list("created_at", "started_at", "finished_at").get(pk=answer["id"])
        points = [sent, *(moment.timestamp() for moment in row), answered]
        stages.append([later - earlier for earlier, later in zip(points, points[1:], strict=False)])
    return calls, bare, stages


def worker_host_rate(scratch: Scratch, user, toolkit, count: int, concurrency: int) -> float:
    """Invocations per second of one worker host alone, just after its start: `count` calls
    queued first (through the services the API uses), then a worker started, which starts its
    processes' sandboxes while it takes the first calls; from its first claim to its last
    recorded end. What the API can accept per second is the throughput rows' limit, not this."""
    from toolhub.runs.services import invocation_create

    ids = [str(invocation_create(toolkit=toolkit, tool="echo", arguments=ARGUMENTS, user=user).id) for _ in range(count)]
    worker = Worker(scratch, concurrency=concurrency, warm=True)
    try:
        _wait_for_all(ids)
    finally:
        worker.stop()
    return _drained_rate(ids)


def sent_at_once_rate(user, toolkit, count: int) -> float:
    """Invocations per second of the worker host alone, warm (the running worker's processes
    have started their sandboxes): `count` invocations queued in the database first, then all their
    tasks sent at once (each send ~1 ms of this process, while the worker already takes the
    first ones); from the first claim to the last recorded end."""
    from toolhub import broker
    from toolhub.runs.tasks import run_invocation

    ids = queued_invocations(user, toolkit, count)
    for pk in ids:
        broker.send(run_invocation.name, pk)
    _wait_for_all(ids)
    return _drained_rate(ids)


def queued_invocations(user, toolkit, count: int) -> list[str]:
    """The ids of `count` echo invocations queued in the database (no task sent)."""
    from toolhub.runs.models import Invocation

    revision = toolkit.current_revision
    return [
        str(Invocation.objects.create(toolkit=toolkit, revision=revision, tool="echo", arguments=ARGUMENTS, user=user).id)
        for _ in range(count)
    ]


def _wait_for_all(ids: list[str]) -> None:
    from toolhub.runs.models import Invocation

    deadline = time.monotonic() + STUCK_AFTER_SECONDS + len(ids)
    while Invocation.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise SystemExit("queued invocations did not finish in time")
        time.sleep(0.05)


def _drained_rate(ids: list[str]) -> float:
    """The invocations' count over the time from the first one's claim to the last one's end."""
    from toolhub.runs.models import Invocation

    count = len(ids)
    finished = Invocation.objects.filter(pk__in=ids)
    if finished.exclude(status="succeeded").exists():
        raise SystemExit("some queued invocations did not succeed")
    first = min(finished.values_list("started_at", flat=True))
    last = max(finished.values_list("finished_at", flat=True))
    return count / (last - first).total_seconds()


def throughput(client, headers: dict, toolkit, count: int) -> float:
    """Submit `count` calls at once and time them until the last has finished."""
    from toolhub.runs.models import FINISHED, Invocation

    url = f"/api/v1/toolkits/{toolkit.slug}/tools/echo/invoke"
    body = json.dumps({"arguments": ARGUMENTS, "wait": False})
    started = time.perf_counter()
    ids = []
    for _ in range(count):
        response = client.post(url, body, content_type="application/json", **headers)
        if response.status_code != 202:
            raise SystemExit(f"submitting failed: {response.status_code} {response.content[:300]!r}")
        ids.append(response.json()["id"])
    deadline = time.monotonic() + STUCK_AFTER_SECONDS + count
    while True:
        statuses = list(Invocation.objects.filter(pk__in=ids).values_list("status", flat=True))
        if all(status in FINISHED for status in statuses):
            break
        if time.monotonic() > deadline:
            raise SystemExit("invocations did not finish in time (is another worker taking this broker's tasks?)")
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    failed = Invocation.objects.filter(pk__in=ids).exclude(status="succeeded").count()
    if failed:
        raise SystemExit(f"{failed} of the {count} invocations did not succeed")
    return count / elapsed


# Main
# ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each sandboxed row (default 30)")
    parser.add_argument("--baseline-runs", type=int, default=1000, help="runs of each in-process row (default 1000)")
    parser.add_argument("--throughput", type=int, default=40, help="invocations per throughput row (default 40)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()

    scratch = Scratch()
    workers: list[Worker] = []
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.test import Client

        from toolhub.accounts.models import ApiToken
        from toolhub.toolkits import sandboxing as sandbox

        call_command("migrate", verbosity=0)
        user, toolkit = ready_toolkit()
        source_path = sandbox.source_file(toolkit.current_revision)
        broker = "redis" if settings.REDIS_URL else "filesystem"
        database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        print(f"toolkit ready; broker: {broker}, database: {database}, scratch: {scratch.dir}", flush=True)

        rows: list[tuple[str, list[float]]] = []
        warm, cold = in_process(source_path, args.baseline_runs)
        rows += [("in-process call (unsafe baseline)", warm), ("in-process import + call", cold)]
        rows.append(("bare python3.11 -I -S -c pass", bare_python(args.runs)))
        rows.append(("cold sandbox (run_sandboxed + runtime)", cold_sandbox(toolkit, args.runs)))
        warm_times, warm_paused, floor_times, memory = warm_sandbox(toolkit, args.runs)
        rows += [
            ("fork-server floor (warm, no toolkit)", floor_times),
            ("warm sandbox (WarmPool.run + runtime)", warm_times),
            ("warm sandbox, calls 10 ms apart", warm_paused),
        ]

        client = Client()
        _token, raw = ApiToken.issue(user=user, name="bench")
        headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
        rates: list[tuple[str, float]] = []
        warm_stages: list[list[float]] = []
        for warm_worker in (False, True):
            kind = "warm" if warm_worker else "cold"
            workers.append(Worker(scratch, concurrency=1, warm=warm_worker))
            calls, bare_beside, stages = end_to_end(client, headers, toolkit, args.runs)
            rows.append((f"end to end, {kind}: API, broker, worker, sandbox", calls))
            if warm_worker:
                rows.append(("bare python3.11, each just before one of those", bare_beside))
                warm_stages = stages
            rates.append((f"invocations/s, {kind}, 1 worker, concurrency 1", throughput(client, headers, toolkit, args.throughput)))
            workers.pop().stop()
            workers.append(Worker(scratch, concurrency=2, warm=warm_worker))
            throughput(client, headers, toolkit, 4)  # warm-up: both worker processes start a sandbox
            rates.append((f"invocations/s, {kind}, 1 worker, concurrency 2", throughput(client, headers, toolkit, args.throughput)))
            workers.pop().stop()
            if warm_worker:
                # A worker of its own: the one before has used half its sandboxes' calls (a
                # sandbox retires after TOOLHUB_SANDBOX_WARM_MAX_CALLS calls), and a retirement
                # and a new sandbox's start within these calls is not the warm host's rate.
                workers.append(Worker(scratch, concurrency=2, warm=True))
                throughput(client, headers, toolkit, 4)  # warm-up: both worker processes start a sandbox
                rates.append(("invocations/s, warm host, all sent at once, c. 2",
                              sent_at_once_rate(user, toolkit, args.throughput)))
                workers.pop().stop()
        rates.append(("invocations/s, queued first, then started, c. 2",
                      worker_host_rate(scratch, user, toolkit, args.throughput, concurrency=2)))

        baseline = statistics.median(warm)
        medians = {name: statistics.median(times) for name, times in rows}
        print()
        print(f"{'what':<50} {'runs':>5} {'p50 ms':>10} {'p95 ms':>10} {'p50 ÷ baseline':>15}")
        print("-" * 94)
        for name, times in rows:
            p50 = statistics.median(times)
            p95 = _percentile(times, 0.95)
            print(f"{name:<50} {len(times):>5} {p50 * 1000:>10.4g} {p95 * 1000:>10.4g} {p50 / baseline:>15,.0f}")
        print("-" * 94)
        for name, rate in rates:
            print(f"{name:<50} {args.throughput:>5} {rate:>10.2f}")
        print("-" * 94)
        floor = medians["fork-server floor (warm, no toolkit)"]
        bare = medians["bare python3.11 -I -S -c pass"]
        warm_call = medians["warm sandbox (WarmPool.run + runtime)"]
        cold_call = medians["cold sandbox (run_sandboxed + runtime)"]
        e2e_warm = medians["end to end, warm: API, broker, worker, sandbox"]
        best_rate = max(rate for _name, rate in rates)
        print(f"warm call ÷ fork-server floor: {warm_call / floor:.2f}  (target ≤ 3)")
        beside = medians["bare python3.11, each just before one of those"]
        print(f"end to end warm p50 ÷ bare python start: {e2e_warm / bare:.2f}; ÷ the starts timed beside the calls: "
              f"{e2e_warm / beside:.2f}  (target ≤ 2)")
        print(f"best invocations/s: {best_rate:.1f}  (target ≥ 100)")
        print(f"cold call ÷ warm call: {cold_call / warm_call:.1f}")
        print("one idle warm sandbox: " + ", ".join(f"{name} {value / (1 << 20):.1f} MiB" for name, value in memory.items()))
        print()
        print("where an end to end warm call's time goes (p50 of each stage; the invocation's own timestamps):")
        for index, name in enumerate(STAGES):
            stage = statistics.median(split[index] for split in warm_stages)
            print(f"  {name:<56} {stage * 1000:>8.2f} ms  {stage / e2e_warm:>4.0%}")
        print()
        print("The machine may be shared: absolute figures vary from run to run far more than the ratios, which are")
        print("all of figures from this one run.")
    finally:
        for worker in workers:
            worker.stop()
        scratch.remove(args.keep)


if __name__ == "__main__":
    main()
