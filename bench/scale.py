"""The lists at scale: *My runs* and the history pages, `GET /api/v1/toolkits`,
`GET /api/v1/invocations` (first pages and pages deep in the list), the toolkit list page and
`/metrics`, on a database with 1,000 toolkits and 100,000 invocations next to a small one
(10 toolkits, 200 invocations), through a real web server: uvicorn serving `toolhub.asgi`, as
`make run` and bench/serve.py do.

    DATABASE_URL=postgres://... .venv/bin/python bench/scale.py [--toolkits N] [--invocations N]
        [--runs N] [--port P] [--keep]

Each database is scratch (`<name>_scale_<size>_<pid>`, created next to the one DATABASE_URL
names and dropped at the end), migrated and seeded with bulk inserts in a process of its own
(`bench/scale.py seed`; 100,000 invocations take a few seconds), then ANALYZEd as autovacuum
would soon do. 90 % of the invocations are one person's (`bench-user`, whose *My runs* is the
page of the issue: 204 ms on 100,000 before keyset paging), the rest another's; they are spread
over 30 days, over every toolkit, four surfaces and three outcomes. Rows: p50 and p95 of N
requests after two warm-up requests (the two databases' servers asked in turn, so the shared
machine's load weighs on both alike), and the large database's p50 over the small one's. A
deep page is the one reached by following `next_cursor` (or the page's Next link) 40 times.
`REDIS_URL` is passed on (`/metrics` reads the queues' lengths); no worker is needed."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from html import unescape
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SOURCE = '''"""
title: Bench Toolkit
author: ToolHub bench
version: 1.0.0
"""


class Tools:
    def echo(self, text: str) -> str:
        """Return the text."""
        return text
'''
TOOL = {"type": "function", "function": {"name": "echo", "description": "Return the text.",
                                         "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}}
SMALL = (10, 200)
DEEP_PAGES = 40
BATCH = 5000


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


# Seeding (in a process of its own, on one scratch database)
# ------------------------------------------------------------------------------


def seed(toolkit_count: int, invocation_count: int) -> dict:
    import hashlib
    from datetime import timedelta

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from toolhub.accounts.models import ApiToken
    from toolhub.runs.models import Invocation, RunStatus, Surface
    from toolhub.toolkits.models import Revision, Status, Toolkit

    call_command("migrate", verbosity=0)
    users = get_user_model()
    admin = users.objects.create_user("bench-admin", is_staff=True)
    person = users.objects.create_user("bench-user")
    other = users.objects.create_user("bench-other")
    toolkits = Toolkit.objects.bulk_create(
        Toolkit(slug=f"kit_{i:05d}", owner=admin, title=f"Toolkit {i:05d}", author="bench") for i in range(toolkit_count)
    )
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()
    revisions = Revision.objects.bulk_create(
        Revision(toolkit=kit, number=1, source=SOURCE, sha256=digest, version="1.0.0", title=kit.title,
                 tool_names=["echo"], tools=[TOOL], uploaded_by=admin, status=Status.READY)
        for kit in toolkits
    )
    for kit, revision in zip(toolkits, revisions, strict=True):
        kit.current_revision = revision
    Toolkit.objects.bulk_update(toolkits, ["current_revision"], batch_size=BATCH)

    now = timezone.now()
    span = timedelta(days=30).total_seconds()
    surfaces = [Surface.API, Surface.MCP, Surface.OPENAPI, Surface.PAGE]
    outcomes = [RunStatus.SUCCEEDED] * 8 + [RunStatus.FAILED, RunStatus.TIMED_OUT]
    for start in range(0, invocation_count, BATCH):
        rows = []
        for i in range(start, min(start + BATCH, invocation_count)):
            created = now - timedelta(seconds=span * (invocation_count - i) / invocation_count)
            kit, revision = toolkits[i % len(toolkits)], revisions[i % len(revisions)]
            status = outcomes[i % len(outcomes)]
            rows.append(Invocation(
                toolkit=kit, revision=revision, tool="echo", arguments={"text": f"call {i}"},
                user=other if i % 10 == 9 else person, surface=surfaces[i % len(surfaces)], status=status,
                result=f"call {i}" if status == RunStatus.SUCCEEDED else None,
                error="" if status == RunStatus.SUCCEEDED else "It failed.", created_at=created, sent_at=created,
                started_at=created + timedelta(milliseconds=20),
                finished_at=created + timedelta(milliseconds=40 + i % 200),
            ))
        Invocation.objects.bulk_create(rows)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    def session(user) -> str:
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        assert store.session_key is not None
        return store.session_key

    return {
        "user_token": ApiToken.issue(user=person, name="bench")[1], "admin_token": ApiToken.issue(user=admin, name="bench")[1],
        "user_session": session(person), "admin_session": session(admin), "slug": toolkits[len(toolkits) // 2].slug,
    }


# The bench
# ------------------------------------------------------------------------------


class Scratch:
    """A scratch database and data directory, seeded, served by uvicorn."""

    def __init__(self, name: str, toolkits: int, invocations: int, port: int) -> None:
        import psycopg

        url = os.environ.get("DATABASE_URL", "")
        if not url.startswith(("postgres://", "postgresql://")):
            raise SystemExit("bench/scale.py needs DATABASE_URL=postgres://... (a scratch database is made next to it)")
        parts = urlsplit(url)
        self.pg_name = f"{parts.path.lstrip('/') or 'postgres'}_scale_{name}_{os.getpid()}"
        self.pg_admin_url = urlunsplit(parts._replace(path="/postgres"))
        with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.pg_name}"')
        self.dir = Path(tempfile.mkdtemp(prefix=f"toolhub-scale-{name}-", dir="/tmp"))
        self.dir.chmod(0o755)
        self.env = dict(
            os.environ, DATABASE_URL=urlunsplit(parts._replace(path="/" + self.pg_name)), TOOLHUB_DATA_DIR=str(self.dir),
            DJANGO_SETTINGS_MODULE="toolhub.settings_test", TOOLHUB_ENV_FILE="/nonexistent", LOG_LEVEL="WARNING",
        )
        self.server: subprocess.Popen | None = None
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, __file__, "seed", "--toolkits", str(toolkits), "--invocations", str(invocations)],
            cwd=REPO, env=self.env, capture_output=True, text=True,
        )
        if done.returncode != 0:
            self.remove(keep=False)
            raise SystemExit(f"seeding failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        self.seeded_in = time.monotonic() - started
        self.credentials = json.loads(done.stdout.strip().splitlines()[-1])
        self.url = f"http://127.0.0.1:{port}"
        self.log = self.dir / "server.log"
        self.server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "toolhub.asgi:application", "--host", "127.0.0.1", "--port", str(port),
             "--lifespan", "on", "--no-access-log", "--log-level", "warning"],
            cwd=REPO, env=self.env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )
        import httpx2

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx2.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            if self.server.poll() is not None:
                break
            time.sleep(0.2)
        self.remove(keep=True)
        raise SystemExit("the server did not start:\n" + self.log.read_text(errors="replace")[-3000:])

    def remove(self, keep: bool) -> None:
        import psycopg

        if self.server is not None and self.server.poll() is None:
            os.killpg(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(10)
        if keep:
            print(f"kept {self.dir} and the database {self.pg_name}")
            return
        with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.pg_name}" WITH (FORCE)')
        shutil.rmtree(self.dir, ignore_errors=True)


def _clients(scratch: Scratch):
    import httpx2

    c = scratch.credentials
    return {
        "user page": httpx2.Client(base_url=scratch.url, cookies={"sessionid": c["user_session"]}, timeout=60),
        "admin page": httpx2.Client(base_url=scratch.url, cookies={"sessionid": c["admin_session"]}, timeout=60),
        "user api": httpx2.Client(base_url=scratch.url, headers={"Authorization": f"Bearer {c['user_token']}"}, timeout=60),
        "admin api": httpx2.Client(base_url=scratch.url, headers={"Authorization": f"Bearer {c['admin_token']}"}, timeout=60),
        "anyone": httpx2.Client(base_url=scratch.url, timeout=60),
    }


def _deep_api(client, path: str) -> str:
    """The path of the page DEEP_PAGES pages after `path` (or of the last one there is)."""
    sep = "&" if "?" in path else "?"
    url = path
    for _ in range(DEEP_PAGES):
        cursor = client.get(url).json()["next_cursor"]
        if cursor is None:
            break
        url = f"{path}{sep}cursor={cursor}"
    return url


def _deep_page(client, path: str) -> str:
    url = path
    for _ in range(DEEP_PAGES):
        found = re.search(r'href="(\?[^"]*cursor=[^"]+)" rel="next"', client.get(url).text)
        if found is None:
            break
        url = path.split("?")[0] + unescape(found.group(1))
    return url


def targets(scratch: Scratch) -> list[tuple[str, object, str]]:
    clients = _clients(scratch)
    slug = scratch.credentials["slug"]
    return [
        ("My runs, first page", clients["user page"], "/history/"),
        ("My runs, 40 pages deep", clients["user page"], _deep_page(clients["user page"], "/history/")),
        ("History (admin), first page", clients["admin page"], "/history/"),
        ("History (admin), by toolkit", clients["admin page"], f"/history/?toolkit={slug}"),
        ("Toolkit list page", clients["user page"], "/toolkits/"),
        ("GET /api/v1/toolkits", clients["user api"], "/api/v1/toolkits"),
        ("GET /api/v1/toolkits, 40 pages deep", clients["user api"], _deep_api(clients["user api"], "/api/v1/toolkits?limit=20")),
        ("GET /api/v1/invocations", clients["user api"], "/api/v1/invocations"),
        ("GET /api/v1/invocations, 40 pages deep", clients["user api"], _deep_api(clients["user api"], "/api/v1/invocations")),
        ("GET /api/v1/invocations (admin)", clients["admin api"], "/api/v1/invocations"),
        ("GET /api/v1/invocations?status=failed", clients["user api"], "/api/v1/invocations?status=failed"),
        ("GET /api/v1/invocations?toolkit=", clients["admin api"], f"/api/v1/invocations?toolkit={slug}"),
        ("GET /metrics", clients["anyone"], "/metrics"),
    ]


def measure(scratches: dict[str, Scratch], runs: int) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Each target on every database in turn, request by request, so that the shared machine's
    changing load weighs on all columns alike."""
    lists = {name: targets(scratch) for name, scratch in scratches.items()}
    results: dict[str, dict[str, tuple[float, float, int]]] = {name: {} for name in scratches}
    for index, (label, _, _) in enumerate(next(iter(lists.values()))):
        times: dict[str, list[float]] = {name: [] for name in scratches}
        sizes: dict[str, int] = {}
        for round_ in range(runs + 2):
            for name in scratches:
                _, client, path = lists[name][index]
                started = time.perf_counter()
                response = client.get(path)
                elapsed = time.perf_counter() - started
                if response.status_code != 200:
                    raise SystemExit(f"{label}: {path} answered {response.status_code}: {response.text[:300]}")
                if round_ >= 2:
                    times[name].append(elapsed)
                sizes[name] = len(response.content)
        for name in scratches:
            results[name][label] = (_percentile(times[name], 0.5) * 1000, _percentile(times[name], 0.95) * 1000, sizes[name])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    seeding = sub.add_parser("seed")
    for p in (parser, seeding):
        p.add_argument("--toolkits", type=int, default=1000)
        p.add_argument("--invocations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--port", type=int, default=18710)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if args.command == "seed":
        print(json.dumps(seed(args.toolkits, args.invocations)))
        return

    sizes = {"small": SMALL, "large": (args.toolkits, args.invocations)}
    scratches: dict[str, Scratch] = {}
    try:
        for offset, (name, (toolkits, invocations)) in enumerate(sizes.items()):
            scratches[name] = Scratch(name, toolkits, invocations, args.port + offset)
            print(f"{name}: {toolkits:,} toolkits, {invocations:,} invocations, seeded in {scratches[name].seeded_in:.1f} s",
                  flush=True)
        rows = measure(scratches, args.runs)
    finally:
        for scratch in scratches.values():
            scratch.remove(args.keep)

    small, large = sizes["small"], sizes["large"]
    print(f"\nuvicorn serving toolhub.asgi, {args.runs} requests each; p50 / p95 in ms")
    header = (f"{'':40} {f'{small[0]:,} kits, {small[1]:,} runs':>24} {f'{large[0]:,} kits, {large[1]:,} runs':>26}"
              f" {'p50 ratio':>10} {'bytes (large)':>14}")
    print(header)
    print("-" * len(header))
    for label, (s50, s95, _) in rows["small"].items():
        l50, l95, size = rows["large"][label]
        print(f"{label:40} {s50:>11.1f} / {s95:>8.1f} {l50:>13.1f} / {l95:>8.1f} {l50 / s50:>9.2f}x {size:>14,}")


if __name__ == "__main__":
    main()
